"""PASCAL: parent-scaled self-attention (Bugliarello & Okazaki, 2020, section 2.1).

Scores of the PASCAL heads are multiplied by D^p before the softmax (eq. 2), where row t of D^p is the normal
density centred on the middle position p_t of token t's parent, evaluated at every key position j (eq. 3).
Parent ignoring replaces a row of D^p by ones with probability q during training.

Two variants the paper reports and this module runs as options:
  --pascal-combination add   appendix B, "Multiplication vs. addition": the scores plus D^p instead of times D^p
                             (the paper: "replacing multiplication by addition"; -0.2 BLEU on NC11)
  --pascal-parent-only       Table 3b's "parent-only": all weight on the parent's middle token, the limit of a
                             vanishing variance, as a hard mask: a PASCAL head attends only to the token(s) at the
                             parent's middle position (|j - p_t| <= 1/2: one token, or both middle pieces of an
                             evenly split parent). A row whose parent is not among the unpadded keys is left unmasked
                             (it would otherwise be all -inf).
Parent ignoring leaves a row unchanged in every variant (ones to multiply by, zeros to add).

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

from ..syntax_mechanism import ScoreModification, SyntaxMechanism, register_encoder_mechanism


def parent_gaussian_weights(parent_middle_halves: Tensor, num_keys: int, variance: float) -> Tensor:
    """D^p in float32: (B, T) parent middle positions times two (integers) -> (B, T, num_keys) with entry
    f_N(j | p_t, variance)."""
    parent_positions = parent_middle_halves.to(torch.float32) / 2.0
    keys = torch.arange(num_keys, device=parent_positions.device, dtype=torch.float32)
    distances = keys[None, None, :] - parent_positions[:, :, None]
    return torch.exp(distances.pow(2) / (-2.0 * variance)) / math.sqrt(2.0 * math.pi * variance)


def parent_only_mask(parent_middle_halves: Tensor, num_keys: int, key_padding_mask: Optional[Tensor]) -> Tensor:
    """(B, T, num_keys) float32 to add to the scores: 0 on the key(s) at the parent's middle position (|2j - 2p_t|
    <= 1), -inf elsewhere; 0 everywhere in a row whose parent is not among the unpadded keys."""
    keys = torch.arange(num_keys, device=parent_middle_halves.device)
    at_parent = (2 * keys[None, None, :] - parent_middle_halves[:, :, None]).abs() <= 1
    if key_padding_mask is not None:
        at_parent = at_parent & ~key_padding_mask[:, None, :]
    at_parent = at_parent | ~at_parent.any(dim=-1, keepdim=True)
    return torch.zeros(at_parent.shape, dtype=torch.float32, device=at_parent.device).masked_fill_(~at_parent,
                                                                                                  -math.inf)


def ignore_parents(weights: Tensor, probability: float, neutral: float = 1.0) -> Tensor:
    """Parent ignoring: each row of D^p becomes `neutral` (1 to multiply by, 0 to add) with the given
    probability."""
    if probability <= 0.0:
        return weights
    ignored = torch.rand(weights.shape[:2], device=weights.device) < probability
    return weights.masked_fill(ignored[:, :, None], neutral)


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
    pascal_combination: str = field(
        default="multiply", metadata={"help": "how D^p changes the scores: multiply (eq. 2) or add (the paper's "
                                              "appendix B variant)"})
    pascal_parent_only: bool = field(
        default=False, metadata={"help": "Table 3b's parent-only row: PASCAL heads attend only to the parent's "
                                         "middle token(s) (a hard mask; --pascal-variance is not used)"})


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
        combination = cls.option(args, "pascal_combination")
        if combination not in ("multiply", "add"):
            raise ValueError(f"--pascal-combination must be multiply or add, got {combination!r}")
        if cls.option(args, "pascal_parent_only") and combination != "multiply":
            raise ValueError("--pascal-parent-only is a hard mask on the scores: it does not combine with "
                             "--pascal-combination add")

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.check_args(args, num_heads)
        heads = self.option(args, "pascal_heads")
        self.num_syntax_heads = num_heads if heads is None else heads
        self.variance = float(self.option(args, "pascal_variance"))
        self.parent_ignoring = float(self.option(args, "parent_ignoring"))
        self.combination = self.option(args, "pascal_combination")
        self.parent_only = bool(self.option(args, "pascal_parent_only"))

    @property
    def num_pascal_heads(self) -> int:
        return self.num_syntax_heads

    def forward(self, x: Tensor, syntax, key_padding_mask, incremental_state=None) -> ScoreModification:
        halves = syntax["src_parent_middle_halves"]
        if self.parent_only:
            weights, mode = parent_only_mask(halves, x.size(0), key_padding_mask), "add"
        else:
            weights, mode = parent_gaussian_weights(halves, x.size(0), self.variance), self.combination
        if self.training:
            weights = ignore_parents(weights, self.parent_ignoring, 1.0 if mode == "multiply" else 0.0)
        return ScoreModification(weights.unsqueeze(1), self.num_syntax_heads, mode=mode)
