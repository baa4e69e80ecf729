"""Target words of a --target-transitions data-bin, for bench/bench.py's Linearized figures.

fairseq's train wps counts every target token of a batch (EOS included). On a plain data-bin those are the
sentencepiece pieces and EOS; on a transition data-bin they also hold the LEFT-ARC:l / RIGHT-ARC:l tokens and the
attached-word marks (fairseq_syntax/data/transitions.py), about as many again. So that words/s means the same for
every system, the Linearized system's are counted as vanilla's are: pieces + EOS, nothing else (`word_share`).

Generation is forced to a fixed length for every system (bench.py `generate`): 25 pieces for a plain decoder; a
transition decoder must also produce its arcs and marks, so it is given the transition tokens that 25 pieces come
with on average in the data (`forced_lengths`), with a minimum length one shorter, so that the validity masks
never leave a hypothesis with no allowed token (see `forced_lengths`).
"""
from typing import Dict, Sequence, Tuple

import numpy as np

from fairseq_syntax.data.transitions import EOS, WORD_CONTINUE, WORD_START

PIECE_CLASSES = (WORD_START, WORD_CONTINUE)  # sentencepiece pieces (or words of a word vocabulary)
WORD_COUNT_METHOD = ("target words = pieces + EOS, as fairseq's wps counts them on a plain data-bin (arc tokens "
                     "and attached-word marks left out): fairseq wps x (pieces + EOS) / all target tokens of the "
                     "training split")


def target_token_counts(token_ids: np.ndarray, classes: Sequence[int]) -> Dict[str, int]:
    """Counts over target token ids (every sentence's, EOS included): `tokens` (all), `pieces`, `eos`, and
    `words` = pieces + EOS (what fairseq counts for a plain target). `classes`: the transition class of every
    dictionary symbol (transitions.vocabulary_classes)."""
    token_ids = np.asarray(token_ids, dtype=np.int64).ravel()
    per_token = np.asarray(classes, dtype=np.int64)[token_ids]
    pieces = int(np.isin(per_token, PIECE_CLASSES).sum())
    eos = int((per_token == EOS).sum())
    return {"tokens": int(token_ids.size), "pieces": pieces, "eos": eos, "words": pieces + eos}


def word_share(counts: Dict[str, int]) -> float:
    """Target words per target token (1.0 on a plain data-bin): fairseq's wps times this is words/s."""
    return counts["words"] / counts["tokens"]


def forced_lengths(counts: Dict[str, int], pieces: int) -> Tuple[int, int]:
    """(max length, min length) in tokens before EOS for a transition decoder whose plain counterpart is forced to
    exactly `pieces` tokens: the tokens that `pieces` pieces come with in the data (arcs and marks included), and a
    minimum one shorter. A minimum equal to the maximum would conflict with the masks: a hypothesis with one word
    on the stack and no open word one step before the maximum may only end (EOS), which fairseq's --min-len
    forbids there, so every token would be -inf; one step shorter, EOS is allowed wherever the masks require it
    (with at least 3 tokens left a new word is always allowed), and every hypothesis stays a valid tree."""
    non_eos = counts["tokens"] - counts["eos"]
    length = max(2, int(round(pieces * non_eos / counts["pieces"])))
    return length, length - 1
