"""fairseq-generate with the transition validity masks timed, or left out (bench/bench.py's mask cost).

  python bench/timed_generate.py --masks timed  FAIRSEQ-GENERATE-ARGS   the masked generator of a transition
      data-bin as fairseq-generate builds it, with the time spent in the masked forward_decoder beyond the plain
      EnsembleModel.forward_decoder it wraps (computing the mask from the prefixes and applying it) summed and
      printed at the end as `MASK_SECONDS s CALLS n`
  python bench/timed_generate.py --masks off    FAIRSEQ-GENERATE-ARGS   the same generator with the plain
      forward_decoder (no mask): same model, checkpoint, batches and forced lengths, for an A/B comparison

fairseq-generate's own "Translated ... in Xs" is the time of its inference steps, the denominator of the cost.
"""
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

    from fairseq_syntax.tasks.constrained_generation import TransitionMaskedEnsemble

    plain, masked = EnsembleModel.forward_decoder, TransitionMaskedEnsemble.forward_decoder
    totals = {"masked": 0.0, "plain": 0.0, "calls": 0}

    def sync(tokens):
        if tokens.is_cuda:
            torch.cuda.synchronize(tokens.device)

    def timed_plain(self, tokens, *args, **kwargs):
        if not isinstance(self, TransitionMaskedEnsemble):
            return plain(self, tokens, *args, **kwargs)
        sync(tokens)
        start = time.perf_counter()
        out = plain(self, tokens, *args, **kwargs)
        sync(tokens)
        totals["plain"] += time.perf_counter() - start
        return out

    def timed_masked(self, tokens, *args, **kwargs):
        sync(tokens)
        start = time.perf_counter()
        out = masked(self, tokens, *args, **kwargs)
        sync(tokens)
        totals["masked"] += time.perf_counter() - start
        totals["calls"] += 1
        return out

    if mode == "timed":
        EnsembleModel.forward_decoder = timed_plain  # what super().forward_decoder of the masked one calls
        TransitionMaskedEnsemble.forward_decoder = timed_masked
    else:
        TransitionMaskedEnsemble.forward_decoder = plain
    try:
        cli_main()
    finally:
        if mode == "timed":
            print(f"MASK_SECONDS {totals['masked'] - totals['plain']:.6f} CALLS {totals['calls']}", file=sys.stderr,
                  flush=True)


if __name__ == "__main__":
    main()
