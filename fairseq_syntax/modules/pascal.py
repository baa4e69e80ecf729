"""PASCAL: parent-scaled self-attention (Bugliarello & Okazaki, 2020, section 2.1).

Scores of the PASCAL heads are multiplied by D^p before the softmax (eq. 2), where row t of D^p is the normal
density centred on the middle position p_t of token t's parent, evaluated at every key position j (eq. 3).
Parent ignoring replaces a row of D^p by ones with probability q during training.

Middle positions arrive as integers (twice the position, `src_parent_middle_halves`) and the density is computed in
float32 whatever the model's dtype: in bf16, 301.5 would round to 302 and change the weight of key 301 by a
factor of e.
"""
import math
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.dataclass import FairseqDataclass
from torch import Tensor

from .mechanisms import ScoreModification, SyntaxMechanism, register_encoder_mechanism


def parent_gaussian_weights(parent_middle_halves: Tensor, num_keys: int, variance: float) -> Tensor:
    """D^p in float32: (B, T) parent middle positions times two (integers) -> (B, T, num_keys) with entry
    f_N(j | p_t, variance)."""
    parent_positions = parent_middle_halves.to(torch.float32) / 2.0
    keys = torch.arange(num_keys, device=parent_positions.device, dtype=torch.float32)
    distances = keys[None, None, :] - parent_positions[:, :, None]
    return torch.exp(distances.pow(2) / (-2.0 * variance)) / math.sqrt(2.0 * math.pi * variance)


def ignore_parents(weights: Tensor, probability: float) -> Tensor:
    """Parent ignoring: each row of D^p becomes all ones with the given probability."""
    if probability <= 0.0:
        return weights
    ignored = torch.rand(weights.shape[:2], device=weights.device) < probability
    return weights.masked_fill(ignored[:, :, None], 1.0)


@dataclass
class PascalOptions(FairseqDataclass):
    pascal_heads: Optional[int] = field(
        default=None, metadata={"help": "PASCAL heads per syntax layer (the first N heads, 1 to the layer's "
                                        "attention heads); unset (None): all heads"})
    pascal_variance: float = field(
        default=1.0, metadata={"help": "variance sigma^2 > 0 of the Gaussian around the parent (paper: 1)"})
    parent_ignoring: float = field(
        default=0.0, metadata={"help": "probability q in [0, 1] of ignoring a token's parent in training "
                                       "(paper: 0-0.4)"})


@register_encoder_mechanism("pascal")
class ParentScaledModifier(SyntaxMechanism):
    shape = "score_modifier"
    features = ("src_parent_middle_halves",)
    options = PascalOptions

    @classmethod
    def check_args(cls, args, num_heads: Optional[int] = None):
        """Every value is used as given: no 0 that silently means "all heads" or "variance 1"."""
        if num_heads is None:
            num_heads = getattr(args, "encoder_attention_heads", None)
        heads = cls.option(args, "pascal_heads")
        if heads is not None and not (isinstance(heads, int) and heads >= 1 and (num_heads is None
                                                                                 or heads <= num_heads)):
            allowed = f"1 to {num_heads} ({num_heads}: all the layer's attention heads)" if num_heads else "at least 1"
            raise ValueError(f"--pascal-heads must be a number of heads from {allowed}, got {heads!r}")
        variance = cls.option(args, "pascal_variance")
        if not (isinstance(variance, (int, float)) and 0 < variance < math.inf):
            raise ValueError(f"--pascal-variance must be a positive number (the variance sigma^2 of the Gaussian "
                             f"around the parent; the paper uses 1), got {variance!r}")
        parent_ignoring = cls.option(args, "parent_ignoring")
        if not (isinstance(parent_ignoring, (int, float)) and 0 <= parent_ignoring <= 1):
            raise ValueError(f"--parent-ignoring must be a probability from 0 to 1 (0: never ignore the parent), "
                             f"got {parent_ignoring!r}")

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.check_args(args, num_heads)
        heads = self.option(args, "pascal_heads")
        self.num_syntax_heads = num_heads if heads is None else heads
        self.variance = float(self.option(args, "pascal_variance"))
        self.parent_ignoring = float(self.option(args, "parent_ignoring"))

    @property
    def num_pascal_heads(self) -> int:
        return self.num_syntax_heads

    def forward(self, x: Tensor, syntax, key_padding_mask, incremental_state=None) -> ScoreModification:
        weights = parent_gaussian_weights(syntax["src_parent_middle_halves"], x.size(0), self.variance)
        if self.training:
            weights = ignore_parents(weights, self.parent_ignoring)
        return ScoreModification(weights.unsqueeze(1), self.num_syntax_heads, mode="multiply")
