"""Dyn-STGCD's temporal convolution layer (Li et al., §3.4 and appendix A.3, after the TCN of Bai et al., 2018):
over the target nodes in their order, a 1-D convolution of width 1 (the "fully convolution unit"), the dilated
causal convolution (causal_convolution.py), then the basic GCN of eq. 2 over the step's adjacency, so a node's
vector holds its own history and its neighbours'. Wrapped as TCN's residual block (ours: the paper gives no
normalisation; without one the 4 blocks of 2 graph convolutions each did not train stably):

    out = LayerNorm(x + Dropout(ReLU(D^-1/2 (A_t + I) D^-1/2 DilatedCausal(Conv1(x)) W)))
"""

from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor

from .causal_convolution import DilatedCausalConvolution
from .dynamic_gcn import normalized_propagation


class TemporalConvolution(nn.Module):
    def __init__(self, dim: int, kernel_size: int, dilation: int, dropout: float = 0.0):
        super().__init__()
        self.pointwise = nn.Linear(dim, dim)  # the 1-D convolution of width 1
        self.causal = DilatedCausalConvolution(dim, dim, kernel_size, dilation)
        self.graph = nn.Linear(dim, dim)  # W of the basic GCN
        self.dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(dim)

    def forward(self, nodes: Tensor, node_mask: Optional[Tensor], adjacency: Tensor) -> Tensor:
        """nodes (B, n, g) in node order, node_mask (B, n) (None: no padding), adjacency (B, n, n): (B, n, g);
        node i reads nodes i, i - d, ..., i - (h - 1) d and its neighbours in `adjacency`, nothing after the step's
        last node."""
        padding = None if node_mask is None else ~node_mask
        history = self.causal(self.pointwise(nodes), padding if padding is not None and bool(padding.any()) else None)
        convolved = torch.relu(self.graph(normalized_propagation(adjacency, node_mask, history)))
        return self.layer_norm(nodes + self.dropout(convolved))
