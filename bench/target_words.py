"""Target words of a --target-transitions data-bin, for bench/bench.py's Linearized figures.

fairseq's train wps counts every target token of a batch (EOS included). On a plain data-bin those are the
sentencepiece pieces and EOS; on a transition data-bin they also hold the LEFT-ARC:l / RIGHT-ARC:l tokens and the
attached-word marks (fairseq_syntax/data/transition_tokens.py), about as many again. So that words/s means the same for
every system, the Linearized system's are counted as vanilla's are: pieces + EOS, nothing else (`word_share`).

Generation is forced to a fixed length for every system (bench.py `generate`): 25 pieces for a plain decoder; a
transition decoder must also produce its arcs and marks, so it is given the transition tokens that 25 pieces come
with on average in the data (`forced_lengths`), minimum and maximum alike (the validity masks plan for both).
"""
from typing import Dict, Sequence, Tuple

import numpy as np

from fairseq_syntax.data.transition_tokens import ATTACHED_MARK, EOS, WORD_CONTINUE, WORD_MARK_ONLY, WORD_START

# sentencepiece pieces (or words of a word vocabulary); WORD_MARK_ONLY holds a lone "\u2581" piece, a piece of the
# plain target too, and the attached-word mark, which is not (target_token_counts tells them apart by symbol)
PIECE_CLASSES = (WORD_START, WORD_CONTINUE, WORD_MARK_ONLY)
WORD_COUNT_METHOD = ("target words = pieces + EOS, as fairseq's wps counts them on a plain data-bin (arc tokens "
                     "and attached-word marks left out): fairseq wps x (pieces + EOS) / all target tokens of the "
                     "training split")


def target_token_counts(token_ids: np.ndarray, classes: Sequence[int], symbols: Sequence[str]) -> Dict[str, int]:
    """Counts over target token ids (every sentence's, EOS included): `tokens` (all), `pieces`, `eos`, and
    `words` = pieces + EOS (what fairseq counts for a plain target). `classes`: the transition class of every
    dictionary symbol (transition_tokens.vocabulary_classes); `symbols`: the dictionary's symbols."""
    token_ids = np.asarray(token_ids, dtype=np.int64).ravel()
    is_piece = np.isin(np.asarray(classes, dtype=np.int64), PIECE_CLASSES)
    is_piece &= np.array([symbol != ATTACHED_MARK for symbol in symbols[:len(is_piece)]], dtype=bool)
    per_token = np.asarray(classes, dtype=np.int64)[token_ids]
    pieces = int(is_piece[token_ids].sum())
    eos = int((per_token == EOS).sum())
    return {"tokens": int(token_ids.size), "pieces": pieces, "eos": eos, "words": pieces + eos}


def word_share(counts: Dict[str, int]) -> float:
    """Target words per target token (1.0 on a plain data-bin): fairseq's wps times this is words/s."""
    return counts["words"] / counts["tokens"]


def forced_lengths(counts: Dict[str, int], pieces: int) -> Tuple[int, int]:
    """(max length, min length) in tokens before EOS for a transition decoder whose plain counterpart is forced to
    exactly `pieces` tokens: the tokens that `pieces` pieces come with in the data (arcs and marks included), as
    both the maximum and the minimum (the validity masks plan for fairseq's --min-len too, so every hypothesis still
    ends as a tree of exactly that length)."""
    non_eos = counts["tokens"] - counts["eos"]
    length = max(2, int(round(pieces * non_eos / counts["pieces"])))
    return length, length
