"""One mechanism for syntax in self-attention: per-head T x T changes to the attention scores before the softmax.

PASCAL (scores x Gaussian of the parent position), LISA (a head's scores replaced by a biaffine parent scorer),
the LDD family (label-distribution terms) and the PARENT decoder head all differ only in how they build that
T x T matrix and how they combine it with the scores. They plug in as small score-modifier mechanisms (see
mechanisms.py) that the layer calls with the batch's syntax; the resulting ScoreModification is an argument of the
attention's forward, and the attention arithmetic, masking, head bookkeeping and incremental decoding live once,
in this file.
"""
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .syntax_mechanism import ScoreModification


def _softmax(scores: Tensor) -> Tensor:
    # in at least float32, as fairseq does for half precision
    dtype = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
    return F.softmax(scores, dim=-1, dtype=dtype)


class SyntaxBiasedSelfAttention(MultiheadAttention):
    """fairseq's MultiheadAttention whose forward also takes a `score_modification`. Without one it is exactly
    fairseq's attention (fast path included). `score_modifier` is the layer's score-modifying mechanism, kept here
    so that its parameters sit beside the projections it modifies (`self_attn.score_modifier.*`)."""

    def __init__(self, *args, score_modifier: Optional[torch.nn.Module] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.score_modifier = score_modifier

    def forward(self, query, key, value, key_padding_mask=None, incremental_state=None, need_weights=True,
                static_kv=False, attn_mask=None, before_softmax=False, need_head_weights=False,
                score_modification: Optional[ScoreModification] = None):
        fewer_queries = query.size(0) != key.size(0)
        if score_modification is None and not fewer_queries:
            return super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                   incremental_state=incremental_state, need_weights=need_weights,
                                   static_kv=static_kv, attn_mask=attn_mask, before_softmax=before_softmax,
                                   need_head_weights=need_head_weights)
        if before_softmax or static_kv or self.bias_k is not None or self.add_zero_attn:
            raise NotImplementedError("syntax-biased attention supports plain self-attention only")
        need_weights = need_weights or need_head_weights
        if incremental_state is not None and not fewer_queries:
            return self.incremental_modified_attention(query, key_padding_mask, incremental_state, attn_mask,
                                                       score_modification, need_weights, need_head_weights)
        return self.modified_attention(query, key, key_padding_mask, attn_mask, score_modification, need_weights,
                                       need_head_weights, incremental_state)

    def modified_attention(self, query: Tensor, x: Tensor, key_padding_mask: Optional[Tensor],
                           attn_mask: Optional[Tensor], modification: Optional[ScoreModification], need_weights: bool,
                           need_head_weights: bool, incremental_state=None):
        """Full-sequence self-attention of x (T, B, C), or of its last columns `query` (Tq, B, C) over all of x
        (BiTran's top layer computes only the columns a view predicts); attn_mask (Tq, T) and the modification's
        matrix have Tq rows. With `incremental_state` (a prefix re-encoded in decoding, its last column the only
        query), the keys and values of every column replace the cache, as fairseq's attention keeps them, for
        the steps that follow. Returns (output (Tq, B, C), weights or None)."""
        length, batch_size, embed_dim = query.shape

        def split_heads(projected: Tensor) -> Tensor:  # (T, B, C) -> (B, H, T, d)
            return projected.view(projected.size(0), batch_size, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        q = split_heads(self.q_proj(query) * self.scaling)
        k = split_heads(self.k_proj(x))
        v = split_heads(self.v_proj(x))
        if incremental_state is not None:
            self._set_input_buffer(incremental_state, {"prev_key": k.contiguous(), "prev_value": v.contiguous(),
                                                       "prev_key_padding_mask": key_padding_mask})
        scores = torch.matmul(q, k.transpose(-1, -2))
        if modification is not None:
            scores = modification.apply(scores)
        if attn_mask is not None:
            scores = scores + attn_mask.to(scores.dtype)
        if key_padding_mask is not None:
            scores.masked_fill_(key_padding_mask[:, None, None, :].to(torch.bool), float("-inf"))
        return self._attend(scores, v, length, batch_size, need_weights, need_head_weights)

    def incremental_modified_attention(self, x: Tensor, key_padding_mask, incremental_state, attn_mask,
                                       modification: ScoreModification, need_weights: bool, need_head_weights: bool):
        """One decoding step (or a chunk of them): fairseq's own attention keeps and reorders the cached keys and
        values and returns the masked scores (before_softmax); the modification applies to those, masks stay."""
        length, batch_size, _ = x.shape
        scores, v = super().forward(x, x, x, key_padding_mask=key_padding_mask, incremental_state=incremental_state,
                                    need_weights=False, attn_mask=attn_mask, before_softmax=True)
        scores = scores.view(batch_size, self.num_heads, length, -1)
        blocked = torch.isneginf(scores)
        scores = modification.apply(scores).masked_fill(blocked, float("-inf"))
        v = v.view(batch_size, self.num_heads, -1, self.head_dim)
        return self._attend(scores, v, length, batch_size, need_weights, need_head_weights)

    def _attend(self, scores: Tensor, v: Tensor, length: int, batch_size: int, need_weights: bool,
                need_head_weights: bool):
        weights_float = _softmax(scores)
        weights = weights_float.type_as(scores)
        context = torch.matmul(self.dropout_module(weights), v)  # (B, H, T, d)
        output = self.out_proj(context.permute(2, 0, 1, 3).reshape(length, batch_size, self.embed_dim))
        if not need_weights:
            return output, None
        head_weights = weights_float.transpose(0, 1)  # (H, B, T, S) as fairseq returns with need_head_weights
        return output, (head_weights if need_head_weights else head_weights.mean(dim=0))
