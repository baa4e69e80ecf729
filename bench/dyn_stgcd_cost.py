"""Dyn-STGCD against vanilla fairseq `transformer` in one run: train target words/s, generate sentences/s, peak
memory and parameters (issue "Target-side syntax, part 3": generation >= 0.7x and training >= 0.5x vanilla's),
each against vanilla at the comparison's size and against `vanilla_matched`, vanilla of a parameter count near
Dyn-STGCD's (MATCHED below).

  python bench/dyn_stgcd_cost.py --workdir work/decoder-cost [--batches 8] [--repeats 3] [--arch-size multi30k]
      [--systems vanilla,dyn_stgcd,dyn_stgcd@64] [--generate-pieces 25] [--no-matched-baseline] [--rounds 1]
      [--device cuda] [--out FILE]

Data: bench/decoder_cost.py's plain data-bin (the first 2,000 sentences of UD English-EWT train, both sides the
gold CoNLL-U parse, no transitions), made there if missing. Every system is examples/multi30k/systems.py's at the
chosen size, 1 torch thread, and its training and its generation each run in a fresh process of their own, as
fairseq-train and fairseq-generate do (so each peak resident memory is its own, and generation does not inherit
the allocator state of training: Dyn-STGCD's beam search ran at 12.6 sentences/s after training in the same
process, 17.6 in a process of its own). Training: forward + backward of the syntax criterion (Dyn-STGCD's graph
loss included) on the same batches, after one warm-up, median over --repeats of the seconds per batch, as target
words (pieces + EOS) per second. Generation: beam 5 over the valid split, every hypothesis forced to
--generate-pieces tokens (randomly initialised models: the same steps for each), timed on the second pass.
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from decoder_cost import BASELINE, MULTI30K_SYSTEMS, build, generation_speed, make_data_bins, time_step  # noqa: E402

TARGETS = {"train_words_per_second": 0.5, "generate_sentences_per_second": 0.7}  # x vanilla's
# the "vanilla of comparable parameter count": transformer_multi30k's encoder and shared embeddings (which
# Dyn-STGCD has too) with the smallest decoder of its width, 1 layer with a 256-wide FFN (Dyn-STGCD's decoder has
# ~0.2M parameters, no 256-wide transformer layer has fewer than ~0.66M): 4.0M parameters against Dyn-STGCD's 3.6M
MATCHED = "vanilla_matched"
MULTI30K_SYSTEMS[MATCHED] = [*MULTI30K_SYSTEMS[BASELINE], "--decoder-layers", "1", "--decoder-ffn-embed-dim", "256"]


def measure(system: str, plain: Path, args, part: str) -> dict:
    """One system's figures for `part` ("train" or "generate"), run in a process of its own. SYSTEM@G: the system
    with nodes G wide."""
    torch.set_num_threads(1)
    if "@" in system:
        base, width = system.split("@")
        MULTI30K_SYSTEMS[system] = [*MULTI30K_SYSTEMS[base], "--dyn-stgcd-graph-dim", width]
    task, model, criterion = build(plain, system, args.arch_size, args.device)
    figures = {"parameters": sum(p.numel() for p in model.parameters())}
    if part == "train":
        task.load_dataset("train")
        dataset = task.dataset("train")
        iterator = task.get_batch_iterator(dataset, max_tokens=args.max_tokens, seed=1).next_epoch_itr(shuffle=True)
        samples = [next(iterator) for _ in range(args.batches)]
        pad = task.target_dictionary.pad()
        words = sum(int(s["target"].ne(pad).sum()) for s in samples)
        seconds = sum(time_step(model, criterion, sample, args.repeats) for sample in samples)
        figures.update(train_words_per_second=words / seconds, train_seconds=seconds, target_words=words)
    else:
        lengths = (args.generate_pieces, args.generate_pieces)
        generation_speed(task, model, lengths)  # the warm-up pass
        figures["generate_sentences_per_second"] = generation_speed(task, model, lengths)
    figures[f"{part}_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.device == "cuda":
        figures[f"{part}_peak_cuda_mb"] = torch.cuda.max_memory_allocated() / 2 ** 20
    return figures


def device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="work/decoder-cost")
    parser.add_argument("--sentences", type=int, default=2000, help="the EWT train sentences of the data-bin")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arch-size", default="multi30k", choices=("tiny", "multi30k"))
    parser.add_argument("--systems", default=f"{BASELINE},dyn_stgcd",
                        help="comma list of examples/multi30k/systems.py's systems; SYSTEM@G: nodes G wide "
                             "(--dyn-stgcd-graph-dim G), e.g. dyn_stgcd@64")
    parser.add_argument("--generate-pieces", type=int, default=25)
    parser.add_argument("--no-matched-baseline", dest="matched_baseline", action="store_false",
                        help=f"leave out {MATCHED} (vanilla's encoder with a 1-layer decoder: a parameter count "
                             "near Dyn-STGCD's)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every system this many times in turn; ratios are the median over rounds")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this system, print its JSON
    parser.add_argument("--part", default="train", help=argparse.SUPPRESS)  # internal: train or generate
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                        help="cuda: the models, batches and beam search on the GPU (the paper's Table 5 timed "
                             "GPUs), each timing after torch.cuda.synchronize; peak CUDA memory reported beside RSS")
    parser.add_argument("--out", help="the report (default: WORKDIR/dyn_stgcd_cost.json)")
    args = parser.parse_args(argv)
    from fairseq_syntax.paths import data_root

    workdir = Path(args.workdir)
    _, plain = make_data_bins(workdir, data_root(), args.sentences)
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, plain, args, args.part)), flush=True)
        return
    baselines = [BASELINE] + ([MATCHED] if args.matched_baseline else [])
    systems = list(dict.fromkeys([*baselines, *args.systems.split(",")]))
    parts = ["train", "generate"] if args.generate_pieces else ["train"]
    rounds = []  # every system in turn, --rounds times: a drift of the machine's speed reaches every system
    for round_index in range(args.rounds):
        results = {}
        for system in systems:
            results[system] = {}
            for part in parts:
                command = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--one", system,
                           "--part", part]
                output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
                results[system].update(json.loads(next(line[7:] for line in output.splitlines()
                                                        if line.startswith("RESULT "))))
            print(f"round {round_index + 1}", system, json.dumps(results[system]), flush=True)
        rounds.append(results)
    report = {"arch_size": args.arch_size, "batches": args.batches, "max_tokens": args.max_tokens,
              "generate_pieces": args.generate_pieces, "threads": 1, "device": device_name(args.device),
              "rounds": rounds}
    memory_keys = [f"{part}_peak_{kind}_mb" for part in parts
                   for kind in (("rss", "cuda") if args.device == "cuda" else ("rss",))]
    keys = ["train_words_per_second", "parameters", *memory_keys]
    keys += ["generate_sentences_per_second"] if "generate" in parts else []
    for baseline in baselines:
        report[f"ratio_to_{baseline}"] = {}
        for system in systems:
            if system in baselines:
                continue
            # each round's ratio (the systems of a round ran minutes apart), the median over rounds
            per_round = [{key: measured[system][key] / measured[baseline][key] for key in keys}
                         for measured in rounds]
            ratios = {key: statistics.median(r[key] for r in per_round) for key in keys}
            report[f"ratio_to_{baseline}"][system] = dict(ratios, per_round=per_round)
            verdicts = ", ".join(f"{key} {ratios[key]:.3f}x (target >= {target}: "
                                 f"{'PASS' if ratios[key] >= target else 'FAIL'})"
                                 for key, target in TARGETS.items() if key in ratios)
            memory = ", ".join(f"{key} {ratios[key]:.2f}x" for key in memory_keys)
            print(f"{system} against {baseline}: {verdicts}; {memory}; parameters "
                  f"{rounds[0][system]['parameters']:,} vs {rounds[0][baseline]['parameters']:,}", flush=True)
    out = Path(args.out) if args.out else workdir / "dyn_stgcd_cost.json"
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
