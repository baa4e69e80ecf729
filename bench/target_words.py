"""Target words of a --target-transitions data-bin, for bench/bench.py's Linearized figures.

fairseq's train wps counts every target token of a batch (EOS included). On a plain data-bin those are the
sentencepiece pieces and EOS; on a transition data-bin they also hold the LEFT-ARC:l / RIGHT-ARC:l tokens and the
attached-word marks (fairseq_syntax/data/transitions/tokens.py), about as many again. So that words/s means the same for
every system, the Linearized system's are counted as vanilla's are: pieces + EOS, nothing else (`word_share`).

Generation is forced to a fixed length for every system (bench.py `generate`): 25 pieces for a plain decoder; a
transition decoder must also produce its arcs and marks, so it is given the transition tokens that 25 pieces come
with on average in the data (`forced_lengths`), minimum and maximum alike (the validity masks plan for both).
"""
from typing import Dict, Tuple

# the counting is the package's (compare.py records train words/s with it): re-exported for the benches
from fairseq_syntax.data.transitions.channels import PIECE_CLASSES, target_token_counts, word_share  # noqa: F401

WORD_COUNT_METHOD = ("target words = pieces + EOS, as fairseq's wps counts them on a plain data-bin (arc tokens "
                     "and attached-word marks left out): fairseq wps x (pieces + EOS) / all target tokens of the "
                     "training split")


def forced_lengths(counts: Dict[str, int], pieces: int) -> Tuple[int, int]:
    """(max length, min length) in tokens before EOS for a transition decoder whose plain counterpart is forced to
    exactly `pieces` tokens: the tokens that `pieces` pieces come with in the data (arcs and marks included), as
    both the maximum and the minimum (the validity masks plan for fairseq's --min-len too, so every hypothesis still
    ends as a tree of exactly that length)."""
    non_eos = counts["tokens"] - counts["eos"]
    length = max(2, int(round(pieces * non_eos / counts["pieces"])))
    return length, length
