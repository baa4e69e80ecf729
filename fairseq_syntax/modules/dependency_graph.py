"""Word-level dependency arcs as edges between subword pieces, decided once for every graph mechanism (the
syntactic GCN, RGSE, and the transition decoder's GCN). Pure tensor functions, batched, no loop over tokens.

The rule (a word split into pieces must keep its arc, and its pieces must reach each other):
- every piece of a dependent word d gets an arc from the FIRST piece of d's head word, labeled with d's label
  (RGSE's paper keeps a word's label on each of its BPE pieces);
- the first piece of every word gets an arc to each later piece of the same word, labeled `SUBWORD` (the id
  `num_labels`, one past the data-bin's labels), so the pieces of a word are one hop apart through their first;
- the root word has no head arc (PASCAL's self-parent of the root is not an edge here), and columns that are not
  pieces (EOS, BOS, padding on either side) have no edges.
Each arc is returned once, head -> dependent; a module that also passes messages dependent -> head (the GCN's
"up" direction) uses the same arcs reversed, and adds self loops itself.

Inputs are the batch features every tree data-bin has: `parent_first` (B, T), the column of the first piece of
each piece's head word (a piece of the root, and every non-piece column, holds its own column); `labels` (B, T),
the label id of each piece's word; `word_ids` (B, T), the word of each piece, -1 elsewhere.
"""
from dataclasses import dataclass

import torch
from torch import Tensor

from ..data.subword import first_piece, word_spans


@dataclass
class PieceArcs:
    """E arcs of a batch: sentence, head column, dependent column and label of each, all (E,) int64."""

    batch: Tensor
    head: Tensor
    dependent: Tensor
    label: Tensor

    def __len__(self):
        return self.batch.numel()


def subword_label(num_labels: int) -> int:
    """The label of the arcs between the pieces of one word."""
    return num_labels


def piece_arcs(parent_first: Tensor, labels: Tensor, word_ids: Tensor, num_labels: int) -> PieceArcs:
    batch, width = word_ids.shape
    columns = torch.arange(width, device=word_ids.device).expand(batch, width)
    is_piece = word_ids >= 0
    first, _ = word_spans(word_ids, width)  # a sentence has at most `width` words (no device sync for the count)
    own_first = torch.where(is_piece, first_piece(word_ids.clamp(min=0), first), columns)
    # dependency arcs: every piece whose head word is another word (the root's pieces point into the root itself,
    # its self-parent, which is no arc)
    has_head = is_piece & (word_ids.gather(1, parent_first) != word_ids)
    # arcs inside a word: its first piece -> each later piece
    inside = is_piece & (own_first != columns)
    # both kinds with one nonzero (E is data-dependent: one device sync per call, not two); nonzero's row-major
    # order lists every dependency arc, then every arc inside a word, each kind by (sentence, column)
    kinds, rows, dependents = torch.stack([has_head, inside]).nonzero(as_tuple=True)
    is_dependency = kinds == 0
    heads = torch.where(is_dependency, parent_first[rows, dependents], own_first[rows, dependents])
    arc_labels = torch.where(is_dependency, labels[rows, dependents], subword_label(num_labels))
    return PieceArcs(batch=rows, head=heads, dependent=dependents, label=arc_labels)
