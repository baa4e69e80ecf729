"""Labeled dependency distributions (LDD, Liu & Sima'an): the channels that store them, the compression the writer
applies to a parser's scores, and the expansion to word x word x group tensors the model applies on its device.

For a source word i, LDD[i, j, g] = P(head(i) = j) * sum_{l in g} P(l | j -> i) over head words j and the 16 label
groups g of appendix A (fairseq_syntax/data/label_groups.py); labels outside the groups carry mass that is not stored.
  * P(head(i) = j) is the per-row softmax of the biaffine arc scores (the paper's choice) with self-arcs excluded
    (a word never heads itself), or, optionally, the marginals of the tree distribution (Matrix-Tree theorem).
  * The root: P(head(i) = ROOT) is stored as an arc with head 0 and placed on the diagonal (i, i) of the word
    matrices, with its label distribution like any other arc (so mostly in the `root` group), as PASCAL makes the
    root its own parent. The diagonal is otherwise empty, since self-arcs are excluded.
  * Storage, per sentence, one row per stored labeled arc ("edge" unit): its dependent (0-based word), its head
    (1-based, 0 = root), its label group and round(LDD * 255) in uint8: 6 bytes. A dependent keeps its most probable
    heads until their mass reaches `mass` (at most `max_heads`, none below half a quantum), and of those arcs the
    groups whose quantized probability is not 0 (a label distribution is sharp: most arcs keep one or two of their
    16 groups). bench/ldd_storage.py measured the defaults (docs/methods.md, "LDD").
  * Rows and columns reach subword pieces by the rule "copy to every piece" (subword.expand_word_matrix): every piece
    of word i gets word i's row, and every piece of head j the entry of j.
"""
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np
import torch
from torch import Tensor

from .channels import ChannelSpec, register_channel
from .label_groups import NUM_GROUPS

OUTSIDE_GROUPS = NUM_GROUPS  # the label_groups channel's value for a label outside the 16 groups
PROBABILITY_SCALE = 255
DEFAULT_MASS = 0.995
DEFAULT_MAX_HEADS = 8
MARGINALS = ("softmax", "tree")

LDD_CHANNELS = ("ldd_dependents", "ldd_heads", "ldd_groups", "ldd_probs")
LABEL_GROUP_CHANNEL = "label_groups"

for _spec in (
    ChannelSpec("ldd_dependents", "edge", "word_index", np.uint16, help="dependent word of each stored labeled arc"),
    ChannelSpec("ldd_heads", "edge", "head", np.uint16, help="1-based head word of each stored labeled arc, 0 = root"),
    ChannelSpec("ldd_groups", "edge", "category", np.uint8, classes=NUM_GROUPS,
                help="label group (0..15) of each stored labeled arc"),
    ChannelSpec("ldd_probs", "edge", "probability", np.uint8, scale=PROBABILITY_SCALE,
                help="P(head) * P(label group | arc) of each stored labeled arc, quantized over 255"),
    ChannelSpec(LABEL_GROUP_CHANNEL, "word", "category", np.uint8, classes=NUM_GROUPS + 1,
                help="label group (0..15) of each word's 1-best label, 16 = outside the groups"),
):
    register_channel(_spec)


@dataclass
class SentenceDistributions:
    """One sentence's stored LDD, one entry per labeled arc: `dependents` 0-based, `heads` 1-based with 0 the root,
    `groups` 0..15 and `probs` quantized. Entries are grouped by dependent, its most probable head first, then by
    group."""

    dependents: np.ndarray
    heads: np.ndarray
    groups: np.ndarray
    probs: np.ndarray
    num_words: int  # of the sentence (a word may have no entry: all its labels outside the groups)

    def channels(self) -> dict:
        return {"ldd_dependents": self.dependents, "ldd_heads": self.heads, "ldd_groups": self.groups,
                "ldd_probs": self.probs}


@dataclass
class CompressionStats:
    """Sums over the compressed words (the bench and preprocess.json report their ratios)."""

    words: int = 0
    arcs: int = 0  # kept (dependent, head) pairs
    entries: int = 0  # stored labeled arcs (rows of the channels)
    kept_arc_mass: float = 0.0  # sum over words of the kept heads' P(head)
    kept_group_mass: float = 0.0  # of that, the part whose labels fall in the 16 groups
    stored_mass: float = 0.0  # the sum of the stored (quantized) probabilities

    def add(self, other: "CompressionStats") -> None:
        for name in ("words", "arcs", "entries", "kept_arc_mass", "kept_group_mass", "stored_mass"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def summary(self) -> dict:
        words = max(self.words, 1)
        return {"words": self.words, "arcs": self.arcs, "entries": self.entries,
                "arcs_per_word": round(self.arcs / words, 4), "entries_per_word": round(self.entries / words, 4),
                "retained_arc_mass": round(self.kept_arc_mass / words, 6),
                "outside_group_share": round(1.0 - self.kept_group_mass / max(self.kept_arc_mass, 1e-12), 6),
                "stored_over_in_group_mass": round(self.stored_mass / max(self.kept_group_mass, 1e-12), 6)}


def arc_distributions(arc_scores: Tensor, word_mask: Tensor, marginals: str = "softmax") -> Tensor:
    """Biaffine arc scores (B, L, L) over positions 0..L-1 (0 = the pseudo-root, row i = dependent i, column j =
    head j) and the words' mask (B, L, position 0 False) -> P(head(i) = j), float32, rows of words sum to 1.

    "softmax": the per-row softmax (the paper), self-arcs and padding excluded. "tree": the arc marginals of the
    distribution over single-rooted non-projective trees (SuPar's MatrixTree), which also sum to 1 per row but
    account for the other words' choices (no cycles, one root)."""
    scores = arc_scores.float()
    length = scores.size(-1)
    heads_allowed = word_mask.clone()
    heads_allowed[:, 0] = True
    eye = torch.eye(length, dtype=torch.bool, device=scores.device)
    scores = scores.masked_fill(~heads_allowed[:, None, :] | eye, float("-inf"))
    if marginals == "softmax":
        probs = scores.softmax(-1)
    elif marginals == "tree":
        from supar.structs import MatrixTree

        # MatrixTree masks padding, has one root, and self-arcs cancel in its Laplacian (marginal 0). Its marginals
        # are gradients of the log partition: autograd must be on (SuPar predicts under no_grad).
        with torch.enable_grad():
            leaf = arc_scores.detach().float().requires_grad_()
            probs = MatrixTree(leaf, word_mask.sum(1)).marginals.detach().float()
    else:
        raise ValueError(f"unknown marginals {marginals!r}: one of {MARGINALS}")
    return probs.masked_fill(~word_mask[..., None], 0.0)


def compress(arc_probs: Tensor, relation_scores: Tensor, word_mask: Tensor, group_of_relation: Tensor,
             special_relations: Tensor, mass: float = DEFAULT_MASS, max_heads: int = DEFAULT_MAX_HEADS
             ) -> Tuple[List[SentenceDistributions], CompressionStats]:
    """A parser batch -> the stored arcs of every sentence.

    arc_probs (B, L, L) from `arc_distributions`; relation_scores (B, L, L, R) the biaffine label scores;
    word_mask (B, L) with position 0 (the pseudo-root) False; group_of_relation (R, 16): row r is one-hot on
    relation r's group, zeros for a relation outside the groups (label_groups.group_matrix); special_relations
    (R,) bool: the parser's special entries (SuPar's <bos>), never a label, excluded from the label softmax."""
    batch, length, _ = arc_probs.shape
    max_heads = min(max_heads, length)
    top_probs, top_heads = arc_probs.topk(max_heads, dim=-1)  # (B, L, K), descending
    mass_before = top_probs.cumsum(-1) - top_probs
    keep = (mass_before < mass) & (top_probs >= 0.5 / PROBABILITY_SCALE) & word_mask[..., None]
    # only the kept arcs from here on, in (sentence, dependent, rank) order: (N,)
    b_index, position, rank = keep.nonzero(as_tuple=True)
    heads = top_heads[b_index, position, rank]
    head_probs = top_probs[b_index, position, rank]
    labels = relation_scores[b_index, position, heads].float().masked_fill(special_relations, float("-inf"))
    joint = head_probs[:, None] * (labels.softmax(-1) @ group_of_relation.to(labels.dtype))  # (N, 16)
    quantized = torch.round(joint * PROBABILITY_SCALE).clamp(0, PROBABILITY_SCALE).to(torch.uint8)
    arc, group = (quantized > 0).nonzero(as_tuple=True)  # stored entries, by arc then group

    stats = CompressionStats(words=int(word_mask.sum()), arcs=len(heads), entries=len(arc),
                             kept_arc_mass=float(head_probs.sum()), kept_group_mass=float(joint.sum()),
                             stored_mass=float(quantized.sum()) / PROBABILITY_SCALE)
    columns = [tensor.cpu().numpy().astype(np.int64)
               for tensor in (position[arc] - 1, heads[arc], group, quantized[arc, group])]
    counts = torch.bincount(b_index[arc], minlength=batch).tolist()
    out, start = [], 0
    for count, words in zip(counts, word_mask.sum(1).tolist()):
        out.append(SentenceDistributions(*(column[start:start + count] for column in columns), num_words=words))
        start += count
    return out, stats


# ---- device side: stored arcs -> dense word matrices ----------------------------------------------------------

def word_distributions(dependents: Tensor, heads: Tensor, groups: Tensor, probs: Tensor, num_words: int) -> Tensor:
    """Stored labeled arcs of a batch, (B, E) integers each, padded with zeros -> LDD (B, W, W, 16) float32: entry
    [b, i, j, g] for dependent i, head j and group g, the root on the diagonal. Padding entries add 0 at (0, 0, 0)."""
    batch = dependents.size(0)
    head_words = torch.where(heads > 0, heads - 1, dependents)
    out = torch.zeros(batch, num_words, num_words, NUM_GROUPS, dtype=torch.float32, device=probs.device)
    rows = torch.arange(batch, device=dependents.device)[:, None].expand_as(dependents)
    out.index_put_((rows, dependents, head_words, groups), probs.to(torch.float32) / PROBABILITY_SCALE,
                   accumulate=True)
    return out
