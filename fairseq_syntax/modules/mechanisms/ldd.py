"""LDD: labeled dependency distributions in encoder self-attention (Liu & Sima'an; Pu & Sima'an, EAMT 2022), and
the ablations of its Table 1, as one score-modifying mechanism with a variant option.

In the LDD layer (16 heads), head h gets label group h's matrix LDD^h (T x T) multiplied element-wise into its scaled
scores before the softmax: N^h = softmax(Q^h K^h^T / sqrt(d) (.) LDD^h) (eqs. 3-5), then N^h V^h and the output
projection as usual (eqs. 6-7). Row p of LDD^h is the distribution of p's head over key positions q, for the
dependency labels of group h (fairseq_syntax/data/dependency_distributions.py: the root on the diagonal, word rows
and columns copied to every piece of the word).

Variants (`--ldd-variant`; "labeled" ones use heads 0-15 of the layer, one group each; "unlabeled" ones put one
matrix into every head of the layer):
  ldd        labeled distributions, multiplied into the scores (the paper's model)
  lda        labeled distributions replace the scores ("Replace S matrix directly with the labeled dependency
             distributions", Table 1): the head's weights are softmax(LDD^h), not learned from Q and K
  ldp        the 1-best labeled parse: 1 at (dependent, head) in its label group's head, 0 elsewhere
  udp        the 1-best unlabeled parse: 1 at (dependent, head), the same matrix in every head
  uldd       uniform labeled: every word pair of the sentence gets 1 / (words x 16) in each of the 16 heads
  uudd       uniform unlabeled ("UDD" in Table 3, "UUDD" in Tables 5-6): 1 / words in every head
  unlabeled  the label-summed distribution, sum_g LDD^g, in every head: what the paper's footnote 1 calls the
             "unlabeled dependency distribution" (the same footnote also calls it the 1-best unlabeled parse; the
             1-best is `udp`, this is the distribution)
1-best parses are the parser's decoded tree (the heads and label_groups channels); distributions are its scores.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from torch import Tensor

from ...data.dependency_distributions import NUM_GROUPS, OUTSIDE_GROUPS, word_distributions
from ...data.subword import expand_word_matrix, parent_words
from ..syntax_mechanism import ScoreModification, SyntaxMechanism, register_encoder_mechanism

VARIANTS = ("ldd", "lda", "ldp", "udp", "uldd", "uudd", "udd", "unlabeled")
LABELED = ("ldd", "lda", "ldp", "uldd")
DISTRIBUTION_FEATURES = ("src_ldd_dependents", "src_ldd_heads", "src_ldd_groups", "src_ldd_probs", "src_word_ids")
VARIANT_FEATURES = {
    "ldd": DISTRIBUTION_FEATURES, "lda": DISTRIBUTION_FEATURES, "unlabeled": DISTRIBUTION_FEATURES,
    "ldp": ("src_heads", "src_label_groups", "src_word_ids"),
    "udp": ("src_heads", "src_word_ids"),
    "uldd": ("src_word_ids",), "uudd": ("src_word_ids",), "udd": ("src_word_ids",),
}


@dataclass
class LddOptions(FairseqDataclass):
    ldd_variant: ChoiceEnum(VARIANTS) = field(
        default="ldd", metadata={"help": "ldd (the paper's model) or an ablation of its Table 1: lda, ldp, udp, "
                                         "uldd, uudd (= udd), unlabeled (label-summed distribution)"})
    ldd_layer_heads: Optional[int] = field(
        default=None, metadata={"help": "attention heads of the LDD layers (paper: 16, one per label group); "
                                        "labeled variants need at least 16"})


def one_best_word_matrix(heads: Tensor, label_groups: Optional[Tensor], num_words: int) -> Tensor:
    """The 1-best tree as (B, W, W, groups) float32: 1 at (dependent, head) (the root on its own diagonal) in its
    label group's slice (labeled, label_groups given) or in the only slice (unlabeled)."""
    batch = heads.size(0)
    dependents = torch.arange(heads.size(1), device=heads.device).expand_as(heads)
    rows = torch.arange(batch, device=heads.device)[:, None].expand_as(heads)
    labeled = label_groups is not None
    out = torch.zeros(batch, num_words, num_words, NUM_GROUPS + 1 if labeled else 1, dtype=torch.float32,
                      device=heads.device)
    groups = label_groups if labeled else torch.zeros_like(heads)
    # the value as a device tensor: `out[...] = 1.0` copies a host scalar to the GPU on every call, which waits
    # for the queue (tests/test_devices.py's CUDA sync check, on an H200, 2026-11-26)
    out.index_put_((rows, dependents, parent_words(heads), groups), out.new_ones(()))
    return out[..., :NUM_GROUPS] if labeled else out  # the slice past the groups held labels outside them


def uniform_word_matrix(word_ids: Tensor, groups: int, num_words: int) -> Tensor:
    """Every word pair of a sentence gets 1 / (words x groups): (B, W, W, groups) float32, W = num_words (at least
    the batch's most words; the entries of words a sentence does not have are never read)."""
    words = word_ids.max(dim=1).values + 1  # (B,); word ids are -1 outside pieces
    value = 1.0 / (words.to(torch.float32) * groups)
    return value[:, None, None, None].expand(-1, num_words, num_words, groups)


@register_encoder_mechanism("ldd")
class LabeledDependencyDistributions(SyntaxMechanism):
    shape = "score_modifier"
    features = tuple(dict.fromkeys(name for names in VARIANT_FEATURES.values() for name in names))
    options = LddOptions

    @classmethod
    def variant(cls, args) -> str:
        variant = str(cls.option(args, "ldd_variant"))
        return "uudd" if variant == "udd" else variant

    @classmethod
    def features_for(cls, args):
        return VARIANT_FEATURES[cls.variant(args)]

    @classmethod
    def attention_heads(cls, args, default: int) -> int:
        return cls.option(args, "ldd_layer_heads") or NUM_GROUPS

    @classmethod
    def check_args(cls, args):
        variant = str(cls.option(args, "ldd_variant"))
        if variant not in VARIANTS:
            raise ValueError(f"--ldd-variant {variant!r}: not one of {', '.join(VARIANTS)}")
        heads = cls.attention_heads(args, NUM_GROUPS)
        if cls.variant(args) in LABELED and heads < NUM_GROUPS:
            raise ValueError(f"--ldd-variant {variant} gives each of the {NUM_GROUPS} label groups its own head: "
                             f"--ldd-layer-heads must be at least {NUM_GROUPS}, got {heads}")
        if heads < 1:
            raise ValueError(f"--ldd-layer-heads must be positive, got {heads}")

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.check_args(args)
        self.ldd_variant = self.variant(args)
        self.num_heads = num_heads

    def word_matrix(self, syntax) -> Tensor:
        """(B, W, W, groups): the variant's word x word matrices (groups = 16 labeled, 1 unlabeled). W is the width
        T of the batch, a bound on its number of words known without reading the word ids back from the device (a
        sync per call); words past a sentence's own keep zeros that the expansion to pieces never reads."""
        word_ids = syntax["src_word_ids"]
        num_words = word_ids.size(1)
        variant = self.ldd_variant
        if variant in ("ldd", "lda", "unlabeled"):
            matrix = word_distributions(syntax["src_ldd_dependents"], syntax["src_ldd_heads"],
                                        syntax["src_ldd_groups"], syntax["src_ldd_probs"], num_words)
            return matrix.sum(-1, keepdim=True) if variant == "unlabeled" else matrix
        if variant == "ldp":
            groups = syntax["src_label_groups"][:, :num_words]
            return one_best_word_matrix(syntax["src_heads"][:, :num_words], groups.clamp(max=OUTSIDE_GROUPS),
                                        num_words)
        if variant == "udp":
            return one_best_word_matrix(syntax["src_heads"][:, :num_words], None, num_words)
        return uniform_word_matrix(word_ids, NUM_GROUPS if variant == "uldd" else 1, num_words)

    def forward(self, x: Tensor, syntax, key_padding_mask, incremental_state=None) -> ScoreModification:
        word_ids = syntax["src_word_ids"]
        pieces = expand_word_matrix(self.word_matrix(syntax), word_ids, "copy")  # (B, T, T, groups)
        matrix = pieces.permute(0, 3, 1, 2)  # (B, groups, T, T), float32 whatever the model's dtype
        heads = NUM_GROUPS if matrix.size(1) == NUM_GROUPS else self.num_heads
        return ScoreModification(matrix, heads, mode="replace" if self.ldd_variant == "lda" else "multiply")
