"""Word-level syntax seen from subword pieces: the expansion rules (word -> piece), each written once on batched
torch tensors so the collater and a mechanism on the device use the same function, and per-sentence views of one
tree made with those same rules.

Coordinates: a batch row's `word_ids` (B, T) holds, in every column that carries a piece, the 0-based word of that
piece and -1 in every other column (EOS, BOS, padding). Columns already include the padding offset and the shift of
the alignment (source tokens, target, prev_output_tokens), so every position these rules return is a column of the
tensor the feature is aligned with.
"""
from typing import Tuple

import numpy as np
import torch
from torch import Tensor

NO_WORD = -1


# ---- batched expansion rules (torch; CPU in the collater or on the device) -----------------------------------

def word_spans(word_ids: Tensor, num_words: int) -> Tuple[Tensor, Tensor]:
    """(B, T) word ids per column -> first and last column of every word, (B, num_words) each; words a row does
    not have get -1."""
    batch, width = word_ids.shape
    columns = torch.arange(width, device=word_ids.device).expand(batch, width)
    slots = torch.where(word_ids >= 0, word_ids, torch.full_like(word_ids, num_words))  # non-pieces -> spare slot
    first = torch.full((batch, num_words + 1), width, dtype=torch.long, device=word_ids.device)
    last = torch.full((batch, num_words + 1), -1, dtype=torch.long, device=word_ids.device)
    first = first.scatter_reduce(1, slots, columns, reduce="amin")[:, :num_words]
    last = last.scatter_reduce(1, slots, columns, reduce="amax")[:, :num_words]
    return first.masked_fill(last < 0, -1), last


def copy_to_pieces(word_values: Tensor, word_ids: Tensor, fill) -> Tensor:
    """Rule "copy to every piece": (B, W, *F) word values -> (B, T, *F), each piece gets its word's value and
    every other column `fill` (a scalar or a (B, T, *F)-broadcastable tensor)."""
    index = word_ids.clamp(min=0)
    trailing = word_values.shape[2:]
    gathered = word_values.gather(1, index.view(*index.shape, *([1] * len(trailing))).expand(*index.shape, *trailing))
    is_piece = (word_ids >= 0).view(*word_ids.shape, *([1] * len(trailing)))
    if torch.is_tensor(fill):
        fill = fill.to(dtype=gathered.dtype, device=gathered.device)
    else:  # made on the device (torch.as_tensor of a Python number would copy it there and synchronise)
        fill = torch.full((), fill, dtype=gathered.dtype, device=gathered.device)
    return torch.where(is_piece, gathered, fill)


def first_piece(word_index: Tensor, first: Tensor) -> Tensor:
    """Rule "first piece": word indices (B, ...) -> the column of that word's first piece."""
    return first.gather(1, word_index.reshape(word_index.size(0), -1)).view_as(word_index)


def middle_piece_halves(word_index: Tensor, first: Tensor, last: Tensor) -> Tensor:
    """Rule "middle position": word indices (B, ...) -> twice the middle column of that word's pieces,
    first + last, an integer (so a middle at 4.5 travels exactly as 9 whatever the model's float dtype)."""
    flat = word_index.reshape(word_index.size(0), -1)
    return (first.gather(1, flat) + last.gather(1, flat)).view_as(word_index)


def expand_word_matrix(word_matrix: Tensor, word_ids: Tensor, columns: str = "copy",
                       first: Tensor = None) -> Tensor:
    """Word x word matrices (B, W, W, *F) -> piece x piece (B, T, T, *F): row t is the row of t's word (rule
    "copy to every piece" on rows); columns by `columns`: "copy" (every piece of the column word gets the entry)
    or "first" (only the word's first piece does, the others 0, so a distribution over words stays one over
    pieces). Entries of non-piece rows and columns are 0."""
    rows = copy_to_pieces(word_matrix, word_ids, 0)  # (B, T, W, *F)
    moved = rows.transpose(1, 2)  # (B, W, T, *F): copy along the other word axis the same way
    both = copy_to_pieces(moved, word_ids, 0).transpose(1, 2)  # (B, T, T, *F)
    if columns == "copy":
        return both
    if columns != "first":
        raise ValueError(f"unknown column rule {columns!r}")
    if first is None:
        first, _ = word_spans(word_ids, word_matrix.size(1))
    column_is_first = (word_ids >= 0) & (first_piece(word_ids.clamp(min=0), first) ==
                                         torch.arange(word_ids.size(1), device=word_ids.device))
    return both * column_is_first.view(column_is_first.size(0), 1, -1, *([1] * (both.dim() - 3))).to(both.dtype)


def parent_words(heads: Tensor) -> Tensor:
    """(B, W) 1-based heads (0 = root, and 0 for padding words) -> 0-based parent words; the root (and padding)
    is its own parent."""
    own = torch.arange(heads.size(1), device=heads.device).expand_as(heads)
    return torch.where(heads > 0, heads - 1, own)


# ---- one sentence at a time: the same rules on a batch of one (0-based positions within its pieces) -----------

def _one_sentence(syntax):
    word_ids = torch.as_tensor(np.asarray(syntax.word_ids, dtype=np.int64))[None]
    heads = torch.as_tensor(np.asarray(syntax.heads, dtype=np.int64))[None]
    first, last = word_spans(word_ids, heads.size(1))
    return word_ids, parent_words(heads), first, last


def parent_middle_positions(syntax) -> np.ndarray:
    """PASCAL: for every piece, the middle position of its word's parent: (first + last) / 2 over the parent's
    pieces, so a parent split into pieces 6, 7, 8 gives 7 and one split into 4, 5 gives 4.5."""
    word_ids, parents, first, last = _one_sentence(syntax)
    return copy_to_pieces(middle_piece_halves(parents, first, last), word_ids, 0)[0].numpy() / 2.0


def parent_first_positions(syntax) -> np.ndarray:
    """LISA: for every piece, the first piece of its word's parent (the root points at its own first piece)."""
    word_ids, parents, first, _ = _one_sentence(syntax)
    return copy_to_pieces(first_piece(parents, first), word_ids, 0)[0].numpy()


def piece_labels(syntax) -> np.ndarray:
    """Every piece carries its word's dependency label id."""
    labels = torch.as_tensor(np.asarray(syntax.labels, dtype=np.int64))[None]
    return copy_to_pieces(labels, _one_sentence(syntax)[0], 0)[0].numpy()
