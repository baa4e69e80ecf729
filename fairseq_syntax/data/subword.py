"""Subword-level views of word-level trees: pure functions of one sentence's channels, plus batching into padded
tensors with the right offsets for left or right padding.

Positions are 0-based within the sentence's pieces until `collate_source_syntax` adds the padding offset.
"""
from typing import Dict, Iterable, Sequence

import numpy as np
import torch

from .channels import SentenceSyntax


def word_spans(word_ids: np.ndarray, num_words: int):
    """First and last piece index of every word (word_ids is non-decreasing and covers 0..num_words-1)."""
    ids = np.asarray(word_ids, dtype=np.int64)
    first = np.searchsorted(ids, np.arange(num_words), side="left")
    last = np.searchsorted(ids, np.arange(num_words), side="right") - 1
    return first, last


def parent_words(heads: np.ndarray) -> np.ndarray:
    """0-based parent word of every word; the root is its own parent (PASCAL, section 2)."""
    heads = np.asarray(heads, dtype=np.int64)
    return np.where(heads == 0, np.arange(len(heads)), heads - 1)


def parent_middle_positions(syntax: SentenceSyntax) -> np.ndarray:
    """PASCAL: for every piece, the middle position of its word's parent: (first + last) / 2 over the parent's
    pieces, so a parent split into pieces 6, 7, 8 gives 7 and one split into 4, 5 gives 4.5."""
    first, last = word_spans(syntax.word_ids, len(syntax.heads))
    middle = (first + last) / 2.0
    return middle[parent_words(syntax.heads)][np.asarray(syntax.word_ids, dtype=np.int64)]


def parent_first_positions(syntax: SentenceSyntax) -> np.ndarray:
    """LISA: for every piece, the first piece of its word's parent (the root points at its own first piece)."""
    first, _ = word_spans(syntax.word_ids, len(syntax.heads))
    return first[parent_words(syntax.heads)][np.asarray(syntax.word_ids, dtype=np.int64)]


def piece_labels(syntax: SentenceSyntax) -> np.ndarray:
    """Every piece carries its word's dependency label id."""
    return np.asarray(syntax.labels, dtype=np.int64)[np.asarray(syntax.word_ids, dtype=np.int64)]


# Subword features a model can ask the dataset for, by net_input key.
SOURCE_FEATURES = {
    "src_parent_positions": (parent_middle_positions, torch.float32),
    "src_parent_first": (parent_first_positions, torch.long),
    "src_labels": (piece_labels, torch.long),
}


def collate_source_syntax(
    syntaxes: Sequence[SentenceSyntax],
    token_lengths: Sequence[int],
    padded_length: int,
    left_pad: bool,
    features: Iterable[str],
) -> Dict[str, torch.Tensor]:
    """Pad the requested subword features of a batch to `padded_length` columns.

    Sentence b has token_lengths[b] tokens: its pieces followed by EOS. Under left padding they occupy the last
    token_lengths[b] columns, so every position is shifted by padded_length - token_lengths[b]. Position-valued
    features at EOS and padding point at the column itself; label features there are 0 (padding)."""
    batch_size = len(syntaxes)
    out = {}
    columns = np.arange(padded_length)
    for name in features:
        fn, dtype = SOURCE_FEATURES[name]
        is_position = name != "src_labels"
        values = np.tile(columns, (batch_size, 1)).astype(np.float64) if is_position else np.zeros((batch_size, padded_length))
        for b, (syntax, length) in enumerate(zip(syntaxes, token_lengths)):
            offset = padded_length - length if left_pad else 0
            row = fn(syntax)
            values[b, offset:offset + len(row)] = row + offset if is_position else row
        out[name] = torch.from_numpy(values).to(dtype)
    return out
