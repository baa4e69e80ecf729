"""PASCAL: parent-scaled self-attention (Bugliarello & Okazaki, 2020, section 2.1).

Scores of the PASCAL heads are multiplied by D^p before the softmax (eq. 2), where row t of D^p is the normal
density centred on the middle position p_t of token t's parent, evaluated at every key position j (eq. 3).
Parent ignoring replaces a row of D^p by ones with probability q during training.
"""
import math

import torch
from torch import Tensor

from .score_modifiers import ScoreModifier, register_score_modifier
from .syntax_attention import ScoreModification


def parent_gaussian_weights(parent_positions: Tensor, num_keys: int, variance: float) -> Tensor:
    """D^p: (B, T) parent middle positions -> (B, T, num_keys) with entry f_N(j | p_t, variance)."""
    keys = torch.arange(num_keys, device=parent_positions.device, dtype=parent_positions.dtype)
    distances = keys[None, None, :] - parent_positions[:, :, None]
    return torch.exp(distances.pow(2) / (-2.0 * variance)) / math.sqrt(2.0 * math.pi * variance)


def ignore_parents(weights: Tensor, probability: float) -> Tensor:
    """Parent ignoring: each row of D^p becomes all ones with the given probability."""
    if probability <= 0.0:
        return weights
    ignored = torch.rand(weights.shape[:2], device=weights.device) < probability
    return weights.masked_fill(ignored[:, :, None], 1.0)


@register_score_modifier("pascal")
class ParentScaledModifier(ScoreModifier):
    features = ("src_parent_positions",)

    @staticmethod
    def add_args(parser):
        parser.add_argument("--pascal-heads", type=int, metavar="N",
                            help="PASCAL heads per syntax layer (the first N heads); default all heads")
        parser.add_argument("--pascal-variance", type=float, metavar="S2",
                            help="variance sigma^2 of the Gaussian around the parent (paper: 1)")
        parser.add_argument("--parent-ignoring", type=float, metavar="Q",
                            help="probability q of ignoring a token's parent in training (paper: 0-0.4)")

    def __init__(self, args, num_heads: int, embed_dim: int):
        super().__init__(args, num_heads, embed_dim)
        self.num_pascal_heads = getattr(args, "pascal_heads", None) or num_heads
        if not 1 <= self.num_pascal_heads <= num_heads:
            raise ValueError(f"--pascal-heads must be in 1..{num_heads}, got {self.num_pascal_heads}")
        self.variance = getattr(args, "pascal_variance", None) or 1.0
        if self.variance <= 0:
            raise ValueError("--pascal-variance must be positive")
        self.parent_ignoring = getattr(args, "parent_ignoring", None) or 0.0

    def forward(self, x: Tensor, syntax_inputs, key_padding_mask) -> ScoreModification:
        parent_positions = syntax_inputs["src_parent_positions"].to(x.dtype)
        weights = parent_gaussian_weights(parent_positions, x.size(0), self.variance)
        if self.training:
            weights = ignore_parents(weights, self.parent_ignoring)
        return ScoreModification(weights.unsqueeze(1), self.num_pascal_heads, mode="multiply")
