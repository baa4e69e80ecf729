"""The target graph of Dyn-STGCD (Li et al., §3.5 eq. 9, appendix A.4 and B.1): the gold graph of the decoder's
columns from the data-bin's target parse, the smooth-L1 graph loss at one step, and a generated hypothesis's graph
read back as a tree over its words. Pure tensor functions; tests/test_dynamic_gcn.py checks them by hand."""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.transition_tokens import WORD_MARK
from .dependency_graph import piece_arcs, subword_label


def piece_graph(parent_first: Tensor, word_ids: Tensor, root_column: Optional[int] = None) -> Tensor:
    """(B, T, T) float32 head graph of pieces, one head per piece (appendix B.1: "all subunits from one word are
    linked to the first unit"): [b, dependent, head] = 1 where a word's first piece has the first piece of its head
    word as head, and a later piece its own word's first piece (the arcs of modules/dependency_graph.piece_arcs,
    whose dependency arcs reach every piece of a word, keeping those into first pieces); with `root_column`, the
    root word's first piece has that column as head."""
    batch, width = word_ids.shape
    arcs = piece_arcs(parent_first, torch.zeros_like(word_ids), word_ids, num_labels=1)
    later = torch.zeros(batch, width, dtype=torch.bool, device=word_ids.device)
    inside = arcs.label == subword_label(1)
    later[arcs.batch[inside], arcs.dependent[inside]] = True
    keep = inside | ~later[arcs.batch, arcs.dependent]
    graph = torch.zeros(batch, width, width, device=word_ids.device)
    graph[arcs.batch[keep], arcs.dependent[keep], arcs.head[keep]] = 1.0
    if root_column is not None:
        columns = torch.arange(width, device=word_ids.device).expand(batch, width)
        # the root's pieces point at its first piece (its self-parent): that first piece is the one at itself
        root_first = (word_ids >= 0) & (parent_first == columns)
        rows, dependents = root_first.nonzero(as_tuple=True)
        graph[rows, dependents, root_column] = 1.0
    return graph


def gold_target_graph(prev_parent_first: Tensor, prev_word_ids: Tensor, node_mask: Tensor) -> Tensor:
    """A* of eq. 9 over the decoder columns: the piece graph with the root under BOS (column 0), and 1 on the
    diagonal of every real node (A_{-1} = I: a node's self-connection is part of the graph)."""
    graph = piece_graph(prev_parent_first, prev_word_ids, root_column=0)
    return torch.maximum(graph, torch.diag_embed(node_mask.float()))


def graph_loss(predicted: Tensor, gold: Tensor, node_mask: Tensor) -> Tensor:
    """Eq. 9 at one step: smooth-L1 (A.4) between predicted and gold adjacency (B, n, n), averaged over the real
    entries of each sentence: (B,)."""
    real = node_mask.float()
    entries = real.unsqueeze(2) * real.unsqueeze(1)
    distance = F.smooth_l1_loss(predicted.float(), gold.float(), reduction="none", beta=1.0) * entries
    return distance.sum(dim=(1, 2)) / entries.sum(dim=(1, 2)).clamp(min=1.0)


def predicted_tree(adjacency: Tensor, pieces: Sequence[str]) -> Tuple[List[List[str]], List[int]]:
    """A hypothesis's predicted graph as a tree over its words: `adjacency` (n + 1, n + 1) over BOS and its n
    pieces, words = the pieces from one that begins with U+2581 to the next (the output's whitespace tokens); a
    word's head is the word holding the argmax of its first piece's row over the columns outside the word (BOS:
    the root, 0). Gives (the pieces of each word, 1-based heads): the caller spells the words with its
    segmenter; unlabeled, and not checked to be a tree (the scorer scores any heads)."""
    starts = [c for c, piece in enumerate(pieces) if c == 0 or piece.startswith(WORD_MARK)]
    ends = starts[1:] + [len(pieces)]
    word_of = torch.zeros(len(pieces) + 1, dtype=torch.long)  # column -> 1-based word, 0 for BOS
    for w, (start, end) in enumerate(zip(starts, ends)):
        word_of[1 + start:1 + end] = w + 1
    row_scores = adjacency.float().cpu()
    heads = []
    for w, start in enumerate(starts):
        scores = row_scores[1 + start].masked_fill(word_of == w + 1, float("-inf"))
        heads.append(int(word_of[int(scores.argmax())]))
    return [list(pieces[start:end]) for start, end in zip(starts, ends)], heads
