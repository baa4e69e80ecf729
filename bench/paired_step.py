"""One system's training step (or beam search: --part generate) under two versions of the code, or two systems'
under this code, timed at the same time, one per core, then with the cores swapped: for differences of a few
percent on a machine whose own speed moves by more than that between minutes (the 2-core machine of
docs/results.md moved by up to 15%: runs one after another cannot tell 5% apart).

  python bench/paired_step.py --before REV [--after REV] [--system dyn_stgcd] [--batches 8] [--repeats 2]
      [--rounds 2] [--seconds S] [--workdir work/decoder-cost] [--arch-size multi30k] [--max-tokens 2048]
      [--part generate [--generate-pieces 25]]
  python bench/paired_step.py --before REV --before-system NAME_THERE --system NAME_HERE ...
  python bench/paired_step.py --baseline vanilla [--system dyn_stgcd] --seconds 120 ...

--baseline SYSTEM: "before" is that system and "after" --system, both this working tree's code, on the same
batches (so the ratio of their step times is the inverse of their ratio of train words/s, bench/dyn_stgcd_cost.py's
figure). --seconds S: each child, after its warm-up pass, times passes over the batches until S seconds have gone
(at least --repeats passes), so that two children of unequal speed load the machine alike for the whole round (the
faster one would otherwise finish first and leave the slower one the machine to itself).
Each version is a git worktree of its revision (--after: none = this working tree); each child process imports
fairseq_syntax and bench/decoder_cost.py from its own tree, builds the system as bench/dyn_stgcd_cost.py does (the
comparison's size, randomly initialised, 1 torch thread, seed 1), and times forward + backward of the syntax
criterion on the same first --batches batches of bench/decoder_cost.py's plain data-bin: process CPU time, each
batch's minimum over the passes after a warm-up pass, summed over the batches (and beside it each batch's median:
the ratio of the medians is printed too). The two children of a round start together, so
both meet the same machine. Stop other work on the machine first (both cores are used).

--part generate: the same pairing for beam search instead of the training step: each child times passes of
bench/decoder_cost.py's generation (beam 5 over the valid split, every hypothesis forced to --generate-pieces
tokens, the model in eval mode, randomly initialised) after a warm-up pass, process CPU time per pass; "seconds" is
the fastest pass and "median_seconds" the median one. Beam search's rate moved by 20% between runs of
bench/dyn_stgcd_cost.py's one-process-at-a-time protocol on one machine (docs/results.md, 2026-12-07).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(args) -> None:
    """Time the step with the code of args.tree (imported from there, not from this file's tree)."""
    tree = Path(args.tree)
    sys.path[:0] = [str(tree / "bench"), str(tree)]
    os.sched_setaffinity(0, {args.core})
    import torch

    torch.set_num_threads(1)
    import fairseq_syntax
    from decoder_cost import build

    if Path(fairseq_syntax.__file__).resolve().parent != (tree / "fairseq_syntax").resolve():
        raise SystemExit(f"imported {fairseq_syntax.__file__}, not the tree {tree}'s")
    task, model, criterion = build(Path(args.data_bin), args.system, args.arch_size)
    task.load_dataset("train")
    iterator = task.get_batch_iterator(task.dataset("train"), max_tokens=args.max_tokens,
                                       seed=1).next_epoch_itr(shuffle=True)
    samples = [next(iterator) for _ in range(args.batches)]

    def step(sample) -> float:
        model.zero_grad(set_to_none=True)
        started = time.process_time()
        loss, _, _ = criterion(model, sample)
        loss.backward()
        return time.process_time() - started

    if args.part == "generate":
        from decoder_cost import generation_speed

        lengths = (args.generate_pieces, args.generate_pieces)

        def search() -> float:
            started = time.process_time()
            generation_speed(task, model, lengths)
            return time.process_time() - started

        def one_pass() -> list:  # one beam search over the valid split
            return [search()]
    else:
        def one_pass() -> list:  # each batch's step
            return [step(sample) for sample in samples]

    one_pass()  # warm-up
    passes, started = [], time.monotonic()
    while len(passes) < args.repeats or time.monotonic() - started < args.seconds:
        passes.append(one_pass())
    timed = time.monotonic() - started
    seconds = sum(min(times) for times in zip(*passes))  # each batch's (or the search's) fastest pass
    # and each batch's median pass (bench/dyn_stgcd_cost.py's estimator): a system whose passes vary more gains
    # more from the minimum
    median_seconds = sum(statistics.median(times) for times in zip(*passes))
    print("RESULT " + json.dumps({"seconds": seconds, "median_seconds": median_seconds, "passes": len(passes),
                                  "timed_seconds": timed,
                                  "system": args.system, "part": args.part,
                                  "module": fairseq_syntax.__file__}), flush=True)


def worktree(revision: str, parent: Path) -> Path:
    path = Path(tempfile.mkdtemp(prefix="paired-", dir=parent))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f", str(path), revision], check=True,
                   capture_output=True)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="the revision to compare against (a commit, a branch, HEAD~1)")
    parser.add_argument("--baseline", help="instead of --before: the system to compare --system against, both with "
                                           "this working tree's code (e.g. vanilla)")
    parser.add_argument("--after", help="the revision measured against it (default: this working tree)")
    parser.add_argument("--system", default="dyn_stgcd", help="one of examples/multi30k/systems.py's systems")
    parser.add_argument("--before-system",
                        help="with --before: the system the before revision runs (default --system), e.g. a name "
                             "that revision gave to today's variant")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the cores swapped in each next one")
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="time passes for at least this long in each child (after its warm-up)")
    parser.add_argument("--workdir", default="work/decoder-cost")
    parser.add_argument("--sentences", type=int, default=2000, help="the EWT train sentences of the data-bin")
    parser.add_argument("--arch-size", default="multi30k", choices=("tiny", "multi30k"))
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--part", default="train", choices=("train", "generate"),
                        help="time the training step (forward + backward) or beam search (generate)")
    parser.add_argument("--generate-pieces", type=int, default=25, help="--part generate: tokens per hypothesis")
    parser.add_argument("--tree", help=argparse.SUPPRESS)  # internal: a child's code
    parser.add_argument("--core", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--data-bin", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tree:
        return child(args)
    if bool(args.before) == bool(args.baseline):
        parser.error("give one of --before REV (two versions) or --baseline SYSTEM (two systems)")
    if args.before_system and not args.before:
        parser.error("--before-system goes with --before")
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("paired timing needs 2 cores")
    sys.path.insert(0, str(REPO / "bench"))
    from decoder_cost import make_data_bins

    from fairseq_syntax.paths import data_root

    workdir = Path(args.workdir).resolve()
    _, plain = make_data_bins(workdir, data_root(), args.sentences)
    if args.baseline:
        made, trees = [], {"before": REPO, "after": REPO}
        systems = {"before": args.baseline, "after": args.system}
    else:
        made = [worktree(args.before, workdir)] + ([worktree(args.after, workdir)] if args.after else [])
        trees = {"before": made[0], "after": made[1] if args.after else REPO}
        systems = {"before": args.before_system or args.system, "after": args.system}
    rounds = []
    try:
        for round_index in range(args.rounds):
            placed = {"before": cores[round_index % 2], "after": cores[(round_index + 1) % 2]}
            running = {name: subprocess.Popen(
                [sys.executable, __file__, "--tree", str(trees[name]), "--core", str(placed[name]), "--data-bin",
                 str(plain), "--system", systems[name], "--batches", str(args.batches), "--repeats",
                 str(args.repeats), "--seconds", str(args.seconds), "--arch-size", args.arch_size, "--max-tokens",
                 str(args.max_tokens), "--part", args.part, "--generate-pieces", str(args.generate_pieces)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name in trees}
            measured = {"cores": placed}
            for name, process in running.items():
                output, _ = process.communicate()
                lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
                if process.returncode or not lines:
                    raise SystemExit(f"the {name} child failed:\n{output[-3000:]}")
                measured[name] = json.loads(lines[-1][7:])
            measured["ratio"] = measured["after"]["seconds"] / measured["before"]["seconds"]
            measured["median_ratio"] = measured["after"]["median_seconds"] / measured["before"]["median_seconds"]
            rounds.append(measured)
            print(f"round {round_index + 1} (before = {systems['before']} on core {placed['before']}, after = "
                  f"{systems['after']} on core {placed['after']}): before {measured['before']['seconds']:.3f} s "
                  f"({measured['before']['passes']} passes), after {measured['after']['seconds']:.3f} s "
                  f"({measured['after']['passes']} passes), after / before {measured['ratio']:.3f} (of the medians: "
                  f"{measured['median_ratio']:.3f})", flush=True)
    finally:
        for path in made:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], capture_output=True)
    ratio = statistics.median(r["ratio"] for r in rounds)
    median_ratio = statistics.median(r["median_ratio"] for r in rounds)
    timed, rate = ("beam search pass time", "sentences/s") if args.part == "generate" else ("step time",
                                                                                          "train words/s")
    if args.baseline:
        print(f"{args.system} / {args.baseline}: {timed} {ratio:.3f}, {rate} {1 / ratio:.3f}x; of the "
              f"median passes {median_ratio:.3f}, {1 / median_ratio:.3f}x (medians of {len(rounds)} rounds)")
    else:
        print(f"{systems['after']} / {systems['before']} at {args.before}: after / before {timed} {ratio:.3f}, of "
              f"the median passes {median_ratio:.3f} (medians of {len(rounds)} rounds)")
    return rounds


if __name__ == "__main__":
    main()
