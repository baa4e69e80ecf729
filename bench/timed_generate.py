"""fairseq-generate with the transition validity masks timed, or left out (bench/bench.py's mask cost).

  python bench/timed_generate.py --masks timed  FAIRSEQ-GENERATE-ARGS   the masked generator of a transition
      data-bin as fairseq-generate builds it, with the time spent in the masked forward_decoder beyond the plain
      EnsembleModel.forward_decoder it wraps (computing the mask from the prefixes and applying it) summed
  python bench/timed_generate.py --masks off    FAIRSEQ-GENERATE-ARGS   the same generator with the plain
      forward_decoder (no mask): same model, checkpoint, batches and forced lengths, for an A/B comparison

Both print at the end, for the A/B's decomposition: `MASK_SECONDS s CALLS n DECODER_SECONDS d ROWS r
MINOR_FAULTS f`: seconds in the masks (0 without), decoder steps, seconds in the plain forward_decoder (the
model's step and its log-softmax), hypotheses summed over the steps, and the process's minor page faults.
fairseq-generate's own "Translated ... in Xs" is the time of its inference steps, the denominator of the cost.
"""
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main():
    if len(sys.argv) < 3 or sys.argv[1] != "--masks" or sys.argv[2] not in ("timed", "off"):
        sys.exit(__doc__)
    mode = sys.argv[2]
    del sys.argv[1:3]
    import torch
    from fairseq.sequence_generator import EnsembleModel
    from fairseq_cli.generate import cli_main

    from fairseq_syntax.tasks.constrained_generation import ConstrainedEnsemble

    plain, masked = EnsembleModel.forward_decoder, ConstrainedEnsemble.forward_decoder
    totals = {"masked": 0.0, "plain": 0.0, "calls": 0, "rows": 0}

    def sync(tokens):
        if tokens.is_cuda:
            torch.cuda.synchronize(tokens.device)

    def timed_plain(self, tokens, *args, **kwargs):
        if not isinstance(self, ConstrainedEnsemble):
            return plain(self, tokens, *args, **kwargs)
        sync(tokens)
        start = time.perf_counter()
        out = plain(self, tokens, *args, **kwargs)
        sync(tokens)
        totals["plain"] += time.perf_counter() - start
        totals["rows"] += tokens.size(0)
        if mode == "off":
            totals["calls"] += 1
        return out

    def timed_masked(self, tokens, *args, **kwargs):
        sync(tokens)
        start = time.perf_counter()
        out = masked(self, tokens, *args, **kwargs)  # its super().forward_decoder is timed_plain
        sync(tokens)
        totals["masked"] += time.perf_counter() - start
        totals["calls"] += 1
        return out

    EnsembleModel.forward_decoder = timed_plain
    ConstrainedEnsemble.forward_decoder = timed_masked if mode == "timed" else timed_plain
    try:
        cli_main()
    finally:
        mask_seconds = totals["masked"] - totals["plain"] if mode == "timed" else 0.0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        print(f"MASK_SECONDS {mask_seconds:.6f} CALLS {totals['calls']} DECODER_SECONDS {totals['plain']:.6f} "
              f"ROWS {totals['rows']} MINOR_FAULTS {faults}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
