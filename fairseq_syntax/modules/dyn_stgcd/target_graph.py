"""The target graph of Dyn-STGCD (Li et al., §3.5 eq. 9, appendix A.4 and B.1): the gold graph of the decoder's
columns from the data-bin's target parse, the graph losses at one step (the paper's smooth-L1 on A_t, and ours, a
cross-entropy of each row's gold head), and a generated hypothesis's graph read back as heads over its words: a
tree (Chu-Liu/Edmonds, SuPar's `mst`) or each row's argmax. Pure tensor functions; tests/test_dynamic_gcn.py and
tests/test_dyn_stgcd.py check them by hand."""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ...data.transitions.tokens import WORD_MARK
from ..dependency_graph import piece_arcs, subword_label


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
    """Eq. 9 at one step: smooth-L1 (A.4) between predicted and gold adjacency (B, n, n), summed over each real
    row's real entries and averaged over the real rows of each sentence: (B,). (A mean over the n^2 entries, the
    reduction before, gave each head's entry 1 / n^2 of a step's weight and sent nearly all of the gradient to
    eq. 7's two scalars.)"""
    real = node_mask.float()
    entries = real.unsqueeze(2) * real.unsqueeze(1)
    distance = F.smooth_l1_loss(predicted.float(), gold.float(), reduction="none", beta=1.0) * entries
    return distance.sum(dim=(1, 2)) / real.sum(dim=1).clamp(min=1.0)


def gold_heads(gold: Tensor) -> Tensor:
    """(B, n) long: each row's head column in the gold graph (B, n, n) (its 1 off the diagonal), -1 for rows with
    none (BOS, padding)."""
    eye = torch.eye(gold.size(-1), dtype=torch.bool, device=gold.device)
    off_diagonal = gold.float().masked_fill(eye, 0.0)
    return torch.where(off_diagonal.sum(dim=-1) > 0, off_diagonal.argmax(dim=-1), -1)


def head_loss(log_probs: Tensor, heads: Tensor) -> Tensor:
    """Our graph loss at one step: the mean over a sentence's supervised rows of -log p(gold head), log_probs
    (B, m, m) the rows' log-distributions over the step's nodes 0..m-1 (masked_log_softmax), heads (B, >= m) from
    gold_heads; a row is supervised when its head is among the step's nodes (a head that comes later is not yet
    there). (B,); 0 for a sentence without a supervised row."""
    m = log_probs.size(1)
    heads = heads[:, :m]
    supervised = (heads >= 0) & (heads < m)
    picked = log_probs.gather(2, heads.clamp(min=0, max=max(m - 1, 0)).unsqueeze(2)).squeeze(2)
    return -(picked * supervised).sum(dim=1) / supervised.sum(dim=1).clamp(min=1)


def word_scores(scores: Tensor, pieces: Sequence[str]) -> Tuple[List[List[str]], Tensor]:
    """A hypothesis's graph as scores between words: `scores` (n + 1, n + 1) over BOS and its n pieces (row =
    dependent, larger = likelier head), words = the pieces from one that begins with U+2581 to the next (the
    output's whitespace tokens). Gives (the pieces of each word, S (W + 1, W + 1) float32): S[w, v] = the largest
    entry of word w's first piece's row over the columns of word v (v = 0: BOS, the root), -inf for v = w and in
    row 0 (the root has no head)."""
    starts = [c for c, piece in enumerate(pieces) if c == 0 or piece.startswith(WORD_MARK)]
    ends = starts[1:] + [len(pieces)]
    rows = scores.float().cpu()[[0] + [1 + start for start in starts]]  # BOS's row, then each first piece's
    columns = [rows[:, :1]] + [rows[:, 1 + start:1 + end].amax(dim=1, keepdim=True)
                               for start, end in zip(starts, ends)]
    words = torch.cat(columns, dim=1)
    words.fill_diagonal_(float("-inf"))
    words[0] = float("-inf")
    return [list(pieces[start:end]) for start, end in zip(starts, ends)], words


def argmax_heads(words: Tensor) -> List[int]:
    """Each word's head as the argmax of its row of word_scores' S (1-based words, 0 = the root): not checked to
    be a tree (a cycle, two roots or none are possible)."""
    return [int(head) for head in words[1:].argmax(dim=1)]


def tree_heads(words: Tensor) -> List[int]:
    """The maximum spanning tree of word_scores' S with a single root (Chu-Liu/Edmonds, SuPar's `mst`): 1-based
    heads, 0 = the root, always a well-formed tree."""
    from supar.structs.fn import mst
    from supar.utils.common import MIN

    size = words.size(0)
    finite = torch.nan_to_num(words.double(), nan=MIN, neginf=MIN, posinf=-MIN).clamp(min=MIN)
    mask = torch.ones(1, size, dtype=torch.bool)
    mask[0, 0] = False  # the root's row is not a word
    return [int(head) for head in mst(finite.unsqueeze(0), mask)[0, 1:]]


def predicted_tree(scores: Tensor, pieces: Sequence[str], tree: bool = True) -> Tuple[List[List[str]], List[int]]:
    """A hypothesis's predicted graph as heads over its words (word_scores): the maximum spanning tree (`tree`) or
    each word's argmax (the raw reading, not checked to be a tree). Gives (the pieces of each word, 1-based heads,
    0 = the root): the caller spells the words with its segmenter; unlabeled."""
    words, matrix = word_scores(scores, pieces)
    return words, (tree_heads(matrix) if tree else argmax_heads(matrix))
