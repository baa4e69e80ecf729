"""The validity masks' share of generation time at several beam sizes (issue "Valid trees under every generation
option": under 10% at beam 5 and beam 12), on data that needs no parser to be trained:

  python bench/mask_share.py --workdir work/decoder-cost [--updates 60] [--beams 5,12] [--pieces 25] [--out FILE]

Data: bench/decoder_cost.py's data-bin (the first 2,000 UD English-EWT train sentences with their gold trees as
the --target-transitions target, 100 held out as valid), made once in WORKDIR. Model: Linearized at the
comparison's size (`transformer_linearized_multi30k`), trained --updates updates with the comparison's flags
(bench.py's train_command) into WORKDIR/mask-share. Generation: fairseq-generate over the valid split through
bench/timed_generate.py (seconds inside the masked forward_decoder beyond the plain one), every hypothesis forced
to the transition tokens that --pieces pieces come with in the data (min = max: target_words.forced_lengths),
1 thread. Reported per beam: the share (mask seconds / generation seconds), the hypotheses scored -inf (none
expected) and sentences/s; the target is bench.py's MASK_COST_TARGET.
"""
import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from bench import MASK_COST_TARGET, generate, run, train_command  # noqa: E402  (bench/bench.py)
from decoder_cost import make_data_bins  # noqa: E402  (bench/decoder_cost.py)
from systems import MULTI30K_SYSTEMS  # noqa: E402  (examples/multi30k/systems.py, on bench.py's path)
from target_words import forced_lengths, target_token_counts  # noqa: E402  (bench/target_words.py)

DIRECTION = ("de", "en")  # decoder_cost's data-bins: the EWT text as "de", its gold trees as the "en" target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="work/decoder-cost")
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--beams", default="5,12")
    parser.add_argument("--pieces", type=int, default=25, help="the pieces every hypothesis is forced to")
    parser.add_argument("--out", help="the report (default: WORKDIR/mask_share.json)")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    workdir = Path(args.workdir)
    data_root = Path(os.environ.get("DATA_ROOT", REPO.parent / "shared" / "data"))
    data_bin, _ = make_data_bins(workdir, data_root, 2000)
    save_dir = workdir / "mask-share"
    checkpoint = save_dir / "checkpoint_last.pt"
    if not checkpoint.exists():
        run(train_command(data_bin, MULTI30K_SYSTEMS["linearized"], save_dir, args.updates, DIRECTION))
    import numpy as np
    from fairseq.data import Dictionary, data_utils

    from fairseq_syntax.data.transitions.channels import target_token_classes

    target = DIRECTION[1]
    dictionary = Dictionary.load(str(data_bin / f"dict.{target}.txt"))
    train = data_utils.load_indexed_dataset(str(data_bin / f"train.{DIRECTION[0]}-{target}.{target}"), dictionary)
    counts = target_token_counts(np.concatenate([train[i].numpy() for i in range(len(train))]),
                                 target_token_classes(dictionary.symbols, False).numpy(), dictionary.symbols)
    lengths = forced_lengths(counts, args.pieces)
    report = {"data_bin": str(data_bin), "checkpoint": str(checkpoint), "updates": args.updates,
              "forced_length": lengths[0], "target": MASK_COST_TARGET, "beams": {}}
    for beam in [int(b) for b in args.beams.split(",")]:
        speed, peak, details = generate(data_bin, checkpoint, lengths, masks="timed", beam=beam, subset="valid",
                                        direction=DIRECTION)
        share = details["mask_seconds"] / details["generate_seconds"]
        report["beams"][beam] = {"share": share, "pass": share <= MASK_COST_TARGET, "sentences_per_second": speed,
                                 "peak_mb": peak, **details}
        print(f"beam {beam}: masks {details['mask_seconds']:.2f} s of {details['generate_seconds']:.2f} s "
              f"({share:.1%}; target <= {MASK_COST_TARGET:.0%}), {speed:.2f} sentences/s, "
              f"{details['inf_hypotheses']} hypotheses -inf", flush=True)
    out = Path(args.out or workdir / "mask_share.json")
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"report: {out}")


if __name__ == "__main__":
    main()
