"""One mechanism for syntax in self-attention: per-head T x T changes to the attention scores before the softmax.

PASCAL (scores x Gaussian of the parent position), LISA (a head's scores replaced by a biaffine parent scorer),
the LDD family (label-distribution terms) and the PARENT decoder head all differ only in how they build that
T x T matrix and how they combine it with the scores. They plug in here as small `ScoreModifier`s (see
score_modifiers.py); the attention arithmetic, masking and head bookkeeping live once, in this file.
"""
import contextlib
from dataclasses import dataclass
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import Tensor


@dataclass
class ScoreModification:
    """Change the scores of heads [0, num_heads) with `matrix` of shape (B, num_heads or 1, T_query, T_key).

    mode: "multiply" (scores * matrix), "add" (scores + matrix) or "replace" (matrix are the scores)."""

    matrix: Tensor
    num_heads: int
    mode: str = "multiply"

    def apply(self, scores: Tensor) -> Tensor:
        """scores: (B, H, T_query, T_key) scaled dot products, changed in place (autograd-safe: the matmul that
        made them does not keep its output, and the product keeps only `matrix`) to avoid copies of B x H x T x T."""
        modified = scores[:, : self.num_heads]
        if self.mode == "multiply":
            modified.mul_(self.matrix)
        elif self.mode == "add":
            modified.add_(self.matrix)
        elif self.mode == "replace":
            modified.copy_(self.matrix.expand_as(modified))
        else:
            raise ValueError(f"unknown score modification mode {self.mode!r}")
        return scores


class SyntaxBiasedSelfAttention(MultiheadAttention):
    """fairseq's MultiheadAttention plus an optional `score_modifier` (an nn.Module that maps the layer input and
    the batch's syntax features to a ScoreModification). Without syntax features for the current call it is
    exactly fairseq's attention (fast path included)."""

    def __init__(self, *args, score_modifier: Optional[torch.nn.Module] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.score_modifier = score_modifier
        self._syntax_inputs: Optional[Dict[str, Tensor]] = None

    @contextlib.contextmanager
    def syntax_inputs(self, inputs: Optional[Dict[str, Tensor]]):
        """Make the batch's syntax features visible to this module for the calls inside the block."""
        self._syntax_inputs = inputs
        try:
            yield
        finally:
            self._syntax_inputs = None

    def forward(self, query, key, value, key_padding_mask=None, incremental_state=None, need_weights=True,
                static_kv=False, attn_mask=None, before_softmax=False, need_head_weights=False):
        if self.score_modifier is None or self._syntax_inputs is None:
            return super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                   incremental_state=incremental_state, need_weights=need_weights,
                                   static_kv=static_kv, attn_mask=attn_mask, before_softmax=before_softmax,
                                   need_head_weights=need_head_weights)
        if incremental_state is not None or before_softmax or self.bias_k is not None or self.add_zero_attn:
            raise NotImplementedError("syntax-biased attention supports full-sequence self-attention only")
        modification = self.score_modifier(query, self._syntax_inputs, key_padding_mask)
        return self.modified_attention(query, key_padding_mask, attn_mask, modification,
                                       need_weights or need_head_weights, need_head_weights)

    def modified_attention(self, x: Tensor, key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor],
                           modification: ScoreModification, need_weights: bool, need_head_weights: bool):
        """x: (T, B, C). Returns (output (T, B, C), attention weights or None), like MultiheadAttention."""
        length, batch_size, embed_dim = x.shape

        def split_heads(projected: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d)
            return projected.view(length, batch_size, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        q = split_heads(self.q_proj(x) * self.scaling)
        k = split_heads(self.k_proj(x))
        v = split_heads(self.v_proj(x))
        scores = modification.apply(torch.matmul(q, k.transpose(-1, -2)))
        if attn_mask is not None:
            scores = scores + attn_mask.to(scores.dtype)
        if key_padding_mask is not None:
            scores.masked_fill_(key_padding_mask[:, None, None, :].to(torch.bool), float("-inf"))
        # softmax in at least float32, as fairseq does for half precision
        softmax_dtype = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
        weights_float = F.softmax(scores, dim=-1, dtype=softmax_dtype)
        weights = weights_float.type_as(scores)
        context = torch.matmul(self.dropout_module(weights), v)  # (B, H, T, d)
        output = self.out_proj(context.permute(2, 0, 1, 3).reshape(length, batch_size, embed_dim))
        if not need_weights:
            return output, None
        head_weights = weights_float.transpose(0, 1)  # (H, B, T, T) as fairseq returns with need_head_weights
        return output, (head_weights if need_head_weights else head_weights.mean(dim=0))


class SyntaxEncoderLayer(TransformerEncoderLayerBase):
    """fairseq's encoder layer whose self-attention can take a score modifier (set by the syntax encoder)."""

    def build_self_attention(self, embed_dim, cfg):
        return SyntaxBiasedSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )
