"""Additive attention (Bahdanau et al., 2015, §3.1 and appendix A.1.2): the alignment model of the RNNsearch
decoder (models/gru_decoder.py). For the decoder state s_{t-1} and the encoder annotations h_j,

    e_tj = v^T tanh(W s_{t-1} + U h_j + b)
    a_tj = exp(e_tj) / sum_k exp(e_tk)          over the sentence's own columns k (the padding mask)
    c_t  = sum_j a_tj h_j

W (attention_dim x query_dim), U (attention_dim x key_dim), v (attention_dim). Bahdanau et al. omit biases from their
equations "to make them less cluttered"; here b is W's bias (a bias in U would do the same, one on v changes no
weight). U h_j does not depend on t: `project_keys` computes it once per sentence and the decoder keeps it (in its
incremental state while generating), so a step costs only W s_{t-1} and the tanh over the source columns.
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class AdditiveAttention(nn.Module):
    def __init__(self, query_dim: int, key_dim: int, attention_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim)  # W, b
        self.key_proj = nn.Linear(key_dim, attention_dim, bias=False)  # U
        self.score = nn.Linear(attention_dim, 1, bias=False)  # v

    def project_keys(self, keys: Tensor) -> Tensor:
        """U h_j for every column: (T, B, key_dim) -> (T, B, attention_dim)."""
        return self.key_proj(keys)

    def forward(self, query: Tensor, projected_keys: Tensor, values: Tensor,
                padding_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        """query s_{t-1} (B, query_dim); projected_keys U h (T, B, attention_dim); values h (T, B, key_dim);
        padding_mask (T, B) True at padding (None: none). Returns c_t (B, key_dim) and a_t (T, B)."""
        scores = self.score(torch.tanh(projected_keys + self.query_proj(query).unsqueeze(0))).squeeze(-1)  # (T, B)
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))  # the softmax in float32 at least
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask, float("-inf"))
        weights = F.softmax(scores, dim=0).to(values.dtype)
        return (weights.unsqueeze(-1) * values).sum(dim=0), weights
