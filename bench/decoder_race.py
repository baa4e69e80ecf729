"""A learning race of Choshen & Abend's decoders against Linearized: valid NLL per target position at equal updates,
and seconds per update, every system trained on the same batches in one run (issue "Target-side decoders that
learn": the sampled prefixes starved the decoders; exact re-encoding learns as fast per update as Linearized, and
re-encoding every B steps should too, at a fraction of exact's cost).

  python bench/decoder_race.py --workdir work/decoder-race [--sentences 3000] [--updates 600] [--validate-every 200]
      [--size tiny] [--systems linearized,bitran,bitran_b4,parent,parent_b4,gcn_decoder,gcn_decoder_b4]
      [--reencode-every 4] [--corpus ewt|multi30k] [--data-bin DIR] [--out FILE]

Data: bench/decoder_cost.py's (the first N sentences of UD English-EWT train as a --target-transitions data-bin from
the gold trees, 100 held-out sentences as valid, made once in WORKDIR, no parser needed; or, --corpus multi30k, the
first N pairs of Multi30k de->en with spaCy's parse of the English target, the comparison's target lengths).
--data-bin: an existing data-bin instead (e.g. the comparison's `work/campaign-cpu/data/en-de.spacy.target-parse`,
whose source and target parses Dyn-STGCD reads), its languages from its syntax.json.
Systems: those of examples/multi30k/systems.py at the chosen size, `_bB` ones with --reencode-every B
(--reencode-every changes B); SYSTEM@G, a Dyn-STGCD system with G-wide nodes (--dyn-stgcd-graph-dim G).
Training: Adam (0.9, 0.98), inverse-sqrt learning rate from 1e-3 after 100 warm-up updates, label smoothing 0.1
(the syntax criterion), dropout 0.1, batches of --max-tokens target+source tokens drawn once (seed 1) and shared by
every system, 1 torch thread. Valid NLL: the mean over the valid split's target tokens of -log p(token) in eval
mode, each position scored by the model's own forward (BiTran's views; PARENT and GCN reading the graph their view
knows). `_k4` systems are scored on every position too (eval) but trained on 4 sampled prefixes per sentence.
On transition targets it is also reported per position class under B = --reencode-every (`valid_nll_by_position`;
the same positions for every system): the block starts, the later positions of a block with no arc token since
its start, and those after an arc taken since its start, whose edges the block's earlier columns have not seen.
Targets (issue 77): a block system's valid NLL at equal updates no worse than its exact sibling's by more than
0.02; its time per update is timed here at the race's size, and against Linearized at the _multi30k size by
bench/decoder_cost.py (target: at most 3x).
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "examples" / "multi30k"))
from decoder_cost import CORPORA, build, make_data_bins  # noqa: E402  (bench/decoder_cost.py)
from systems import MULTI30K_SYSTEMS  # noqa: E402

from fairseq_syntax.data.features import FEATURES  # noqa: E402
from fairseq_syntax.modules.decoder_context import TargetTransitions  # noqa: E402

SYSTEMS = ("linearized", "bitran", "bitran_b4", "parent", "parent_b4", "gcn_decoder", "gcn_decoder_b4")
WARMUP = 100


def system_options(system: str, every: int) -> list:
    """The system's options, B replaced by --reencode-every's; SYSTEM@G: with G-wide Dyn-STGCD nodes."""
    base, _, width = system.partition("@")
    args = list(MULTI30K_SYSTEMS[base])
    if "--reencode-every" in args:
        args[args.index("--reencode-every") + 1] = str(every)
    if width:
        args += ["--dyn-stgcd-graph-dim", width]
    return args


def known_system(system: str) -> bool:
    base, at, width = system.partition("@")
    return base in MULTI30K_SYSTEMS and (not at or (base.startswith("dyn_stgcd") and width.isdigit()))


def learning_rate(update: int, peak: float) -> float:
    """Linear warm-up to `peak` over WARMUP updates, then peak x sqrt(WARMUP / update) (fairseq's inverse_sqrt)."""
    return peak * update / WARMUP if update <= WARMUP else peak * math.sqrt(WARMUP / update)


# where a position stands under re-encoding every B columns (position_classes)
POSITION_CLASSES = ("block_start", "causal_same_graph", "causal_after_new_arc")


def position_classes(prev_output_tokens: Tensor, is_arc: Tensor, every: int) -> Tensor:
    """(B, T) long, the POSITION_CLASSES index of each predicted position under re-encoding every `every` columns
    (decoder column c predicts target token c; m = c - c % every is its block start): 0 at c = m, where a block
    form's prediction is exact BiTran's; 1 after it when none of the input columns m+1..c is an arc token (the
    columns <= m were re-encoded with the graph of the whole prefix); 2 when one is (an arc taken after m, whose
    edges the columns <= m have not seen). `is_arc` (V,) bool over the target dictionary. The classes depend on
    the tokens only, so every system of a race is scored on the same positions of each class."""
    columns = torch.arange(prev_output_tokens.size(1), device=prev_output_tokens.device)
    starts = columns - columns % every
    arcs_so_far = is_arc[prev_output_tokens].long().cumsum(dim=1)  # arc tokens among the input columns 0..c
    new_arc = arcs_so_far > arcs_so_far.index_select(1, starts)
    return torch.where(columns == starts, 0, torch.where(new_arc, 2, 1)).expand_as(prev_output_tokens)


def valid_nll(model, samples, pad: int, class_of=None):
    """Mean -log p of the valid targets' tokens (EOS included), each position scored by the model's forward, and
    with `class_of` (a sample -> its positions' POSITION_CLASSES indices, (B, T)) the mean within each class
    (None without; a class with no position is left out)."""
    model.eval()
    total, count = 0.0, 0
    class_totals = torch.zeros(len(POSITION_CLASSES), dtype=torch.float64)
    class_counts = torch.zeros(len(POSITION_CLASSES), dtype=torch.float64)
    with torch.no_grad():
        for sample in samples:
            logits, extra = model(**sample["net_input"])
            lprobs = model.get_normalized_probs((logits, extra), log_probs=True)
            target = sample["target"]
            real = target.ne(pad)
            nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[real].double()
            total += float(nll.sum())
            count += int(real.sum())
            if class_of is not None:
                classes = class_of(sample)[real]
                class_totals.index_add_(0, classes, nll)
                class_counts.index_add_(0, classes, torch.ones_like(nll))
    model.train()
    by_class = None
    if class_of is not None:
        by_class = {name: float(class_totals[index] / class_counts[index])
                    for index, name in enumerate(POSITION_CLASSES) if class_counts[index] > 0}
    return total / count, by_class


def own_features(sample: dict, unread: set) -> dict:
    return dict(sample, net_input={key: value for key, value in sample["net_input"].items() if key not in unread})


def race(built: tuple, options: list, train_samples, valid_samples, validate_every: int, peak: float,
         class_of=None) -> dict:
    """Train `built` = (system, task, model, criterion, the features its model reads, the RNG state right after the
    model was built) on the shared batches, validating every `validate_every` updates (per position class too,
    with `class_of`: valid_nll)."""
    system, task, model, criterion, features_read, rng_state = built
    torch.set_rng_state(rng_state)  # dropout draws as if the model had just been built
    # the shared batches carry every system's features: each model gets those it reads
    unread = set(FEATURES) - features_read
    train_samples, valid_samples = ([own_features(sample, unread) for sample in samples]
                                    for samples in (train_samples, valid_samples))
    pad = task.target_dictionary.pad()
    optimizer = torch.optim.Adam(model.parameters(), lr=peak, betas=(0.9, 0.98), eps=1e-8)
    curve, by_class, seconds = {}, {}, 0.0
    for update, sample in enumerate(train_samples, start=1):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(update, peak)
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss, sample_size, _ = criterion(model, sample)
        (loss / sample_size).backward()
        optimizer.step()
        seconds += time.perf_counter() - started
        if update % validate_every == 0 or update == len(train_samples):
            curve[update], by_class[update] = valid_nll(model, valid_samples, pad, class_of)
            print(f"{system}: update {update}, valid NLL {curve[update]:.3f}, {seconds / update:.3f} s/update",
                  flush=True)
    row = {"options": options, "parameters": sum(p.numel() for p in model.parameters()), "valid_nll": curve,
           "seconds_per_update": seconds / len(train_samples)}
    if class_of is not None:
        row["valid_nll_by_position"] = by_class
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="work/decoder-race")
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--updates", type=int, default=600)
    parser.add_argument("--validate-every", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--size", default="tiny", choices=("tiny", "multi30k"))
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--reencode-every", type=int, default=4, help="B of the _b4 systems")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--corpus", choices=CORPORA, default="ewt",
                        help="ewt: UD English-EWT as a copy task with its gold trees; multi30k: Multi30k de->en, "
                             "spaCy's parse of the English target (the comparison's target lengths)")
    parser.add_argument("--data-bin", help="race on this existing data-bin (its languages from its syntax.json) "
                                           "instead of the one made in WORKDIR from --corpus")
    parser.add_argument("--out", help="the report (default: WORKDIR/decoder_race.json)")
    args = parser.parse_args(argv)
    systems = args.systems.split(",")
    unknown = [s for s in systems if not known_system(s)]
    if unknown:
        parser.error(f"--systems: unknown {unknown}")
    torch.set_num_threads(1)
    from fairseq_syntax.paths import data_root

    workdir = Path(args.workdir)
    if args.data_bin:
        destdir = Path(args.data_bin)
        meta = json.loads((destdir / "syntax.json").read_text())
        languages = (meta["source_lang"], meta["target_lang"])
    else:
        destdir, _ = make_data_bins(workdir, data_root(), args.sentences, corpus=args.corpus)
        languages = ("de", "en")
    built = []  # each system built once; its task's feature set is known only after its model is built
    for system in systems:
        task, model, criterion = build(destdir, system, args.size, languages=languages,
                                       system_options=system_options(system, args.reencode_every))
        built.append((system, task, model, criterion, frozenset(task.net_input_features), torch.get_rng_state()))
    # the batches are drawn once, by the first system's task, and carry what every system reads (the task's
    # datasets hold its set itself: widened in place)
    task = built[0][1]
    task.net_input_features.update(*(features for *_, features, _ in built))
    for split in ("train", "valid"):
        task.load_dataset(split)
    # one draw of batches, shared by every system: epochs in turn, shuffled with seed 1 + epoch
    train_samples, epoch = [], 1
    while len(train_samples) < args.updates:
        iterator = task.get_batch_iterator(task.dataset("train"), max_tokens=args.max_tokens, seed=1,
                                           epoch=epoch).next_epoch_itr(shuffle=True)
        train_samples.extend(iterator)
        epoch += 1
    train_samples = train_samples[:args.updates]
    valid_samples = list(task.get_batch_iterator(task.dataset("valid"), max_tokens=args.max_tokens,
                                                 seed=1).next_epoch_itr(shuffle=False))
    report = {"corpus": args.corpus, "data_bin": str(destdir), "languages": list(languages), "size": args.size,
              "sentences": args.sentences, "updates": args.updates, "max_tokens": args.max_tokens,
              "reencode_every": args.reencode_every, "systems": {}}
    # on transition targets, valid NLL also per position class under B = --reencode-every (position_classes)
    is_arc = TargetTransitions(task.target_dictionary.symbols).label_of >= 0
    class_of = None
    if bool(is_arc.any()):
        def class_of(sample):
            return position_classes(sample["net_input"]["prev_output_tokens"], is_arc, args.reencode_every)

        counts = torch.zeros(len(POSITION_CLASSES), dtype=torch.long)
        for sample in valid_samples:
            real = sample["target"].ne(task.target_dictionary.pad())
            counts += torch.bincount(class_of(sample)[real], minlength=len(POSITION_CLASSES))
        report["valid_positions_by_class"] = dict(zip(POSITION_CLASSES, counts.tolist()))
    for entry in built:
        system = entry[0]
        report["systems"][system] = race(entry, system_options(system, args.reencode_every), train_samples,
                                         valid_samples, args.validate_every, args.lr, class_of)
    last = args.updates
    for system, row in report["systems"].items():
        for baseline in ("linearized", "vanilla"):
            if baseline in report["systems"]:
                baseline_seconds = report["systems"][baseline]["seconds_per_update"]
                row[f"time_vs_{baseline}"] = row["seconds_per_update"] / baseline_seconds
        exact = system.rsplit("_b", 1)[0] if "_b" in system else None
        if exact in report["systems"]:
            gap = row["valid_nll"][last] - report["systems"][exact]["valid_nll"][last]
            row["nll_over_exact"] = gap
            row["target_nll_within_0.02_of_exact"] = gap <= 0.02
    out = Path(args.out) if args.out else workdir / "decoder_race.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    baseline = next((b for b in ("linearized", "vanilla") if b in report["systems"]), None)
    print(f"{'system':<26} {'valid NLL @' + str(last):>16} {'s/update':>9} {'x ' + str(baseline):>13}")
    for system, row in report["systems"].items():
        print(f"{system:<26} {row['valid_nll'][last]:>16.3f} {row['seconds_per_update']:>9.3f} "
              f"{row.get(f'time_vs_{baseline}', float('nan')):>13.2f}")
    if class_of is not None:
        print(f"valid NLL @{last} by position class under B = {args.reencode_every} (valid positions: "
              f"{', '.join(f'{name} {n}' for name, n in report['valid_positions_by_class'].items())})")
        for system, row in report["systems"].items():
            print(f"{system:<26} " + "  ".join(f"{name} {value:.3f}" for name, value
                                               in row["valid_nll_by_position"][last].items()))


if __name__ == "__main__":
    main()
