"""One block of the Dyn-STGCD decoder (Li et al., §3.3-3.4): the spatial layer (the dynamic GCN, then eq. 8's MLP,
with the random-walk features of the target and source graphs in the last block), attention to the encoder output,
and the temporal layer; and the parts only it uses (models/dyn_stgcd.py runs the blocks step by step)."""
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .dynamic_gcn import DynamicGCN, DynamicGCNState
from .random_walk_kernel import RandomWalkKernel
from .temporal_convolution import TemporalConvolution

ABLATIONS = ("no_spatial", "no_temporal", "static_weight", "static_adjacency")  # the paper's Figure 5 rows
# the context entry holding the first block's own-step graph attention scores of the whole sequence (B, T, T), when
# the caller has scored it once (Block.sequence_edge_scores): its edge inputs, the token embeddings, are the same
# at every step, so step t's scores are the first t + 1 rows and columns (a step would score them again: ~T^3 / 3
# node pairs per sentence instead of T^2, and in training the largest tensor of the step, (B, n, n, d'))
FIRST_EDGE_SCORES = "first_edge_scores"


class MLP(nn.Sequential):
    def __init__(self, in_dim: int, dim: int, dropout: float):
        super().__init__(nn.Linear(in_dim, dim), nn.ReLU(), nn.Dropout(dropout), nn.Linear(dim, dim))


class WalkFeatures(nn.Module):
    """R of a graph: the kernels of every hidden-graph group, concatenated and LayerNorm-ed, (B, sum K (P + 1))."""

    def __init__(self, embed_dim: int, groups: Sequence[Tuple[int, int]], max_step: int):
        super().__init__()
        self.kernels = nn.ModuleList(RandomWalkKernel(embed_dim, count, nodes, max_step) for count, nodes in groups)
        self.dim = sum(count for count, _ in groups) * (max_step + 1)
        self.norm = nn.LayerNorm(self.dim)

    def forward(self, nodes: Tensor, adjacency: Tensor, node_mask: Optional[Tensor]) -> Tensor:
        walks = torch.cat([kernel(nodes, adjacency, node_mask).flatten(1) for kernel in self.kernels], dim=1)
        # in float32 like the kernel (walk counts grow with P and N), whatever the model's dtype
        normed = F.layer_norm(walks, (self.dim,), self.norm.weight.float(), self.norm.bias.float(), self.norm.eps)
        return normed.to(nodes.dtype)


class SourceAttention(nn.Module):
    """Multi-head attention of the nodes (B, n, G) to the encoder output, whose keys and values are projected once
    per sentence (`project`, in the source context) rather than at every step of every block."""

    def __init__(self, dim: int, encoder_dim: int, heads: int, dropout: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"Dyn-STGCD: the node width {dim} is not a multiple of --decoder-attention-heads {heads}")
        self.heads, self.dropout = heads, dropout
        self.query, self.out = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.key, self.value = nn.Linear(encoder_dim, dim), nn.Linear(encoder_dim, dim)

    def split(self, x: Tensor) -> Tensor:  # (B, L, G) -> (B, heads, L, G / heads)
        return x.view(x.size(0), x.size(1), self.heads, -1).transpose(1, 2)

    def project(self, encoder: Tensor) -> Tuple[Tensor, Tensor]:
        """encoder (S, B, C) -> keys, values (B, heads, S, G / heads)."""
        source = encoder.transpose(0, 1)
        return self.split(self.key(source)), self.split(self.value(source))

    def forward(self, nodes: Tensor, keys: Tensor, values: Tensor, padding: Optional[Tensor]) -> Tensor:
        allowed = None if padding is None else ~padding.view(padding.size(0), 1, 1, -1)
        out = F.scaled_dot_product_attention(self.split(self.query(nodes)), keys, values, attn_mask=allowed,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(nodes.shape))


class Block(nn.Module):
    """One spatial-then-temporal block (position `index` of `count`); `ablations`: the paper's Figure 5 rows
    ("no_spatial": eq. 8's MLP on the block's input, no graph convolution, the identity as adjacency;
    "no_temporal"; "static_weight"; "static_adjacency"); `graph_attention`: the scores of eq. 7's Ã
    (GraphAttentionCoefficients); `new_node_edges`: when Ã is computed (DynamicGCN); `residual`: eq. 8 as a
    residual update, Y^l = X^l + MLP(...), X^l the block's input Y^{l-1} and, in the first block, the token
    embeddings (the paper's Y^0 = 0 has no node identity to keep). Without it (the paper's eq. 8) every block
    after the first replaces the nodes by an MLP of their graph convolution, and over a dense graph every node
    gets the same vector (mean cosine ~0.99 between node vectors at initialisation): from the third block on, the
    graph attention then reads nodes without identity and the graph learns its heads far slower, if at all
    (docs/methods.md)."""

    def __init__(self, index: int, count: int, dim: int, encoder_dim: int, heads: int, kernel_size: int,
                 dropout: float, attention_dropout: float, encoder_attention: bool, walk_dims: int,
                 target_walks: Optional[WalkFeatures], ablations: Sequence[str], graph_attention: str,
                 new_node_edges: str, residual: bool, graph_dim: Optional[int] = None):
        super().__init__()
        self.index, self.first, self.last = index, index == 0, index == count - 1
        self.dim = dim
        self.residual = residual
        self.spatial = "no_spatial" not in ablations
        # graph_dim: the width of the graph convolution and its evolving weights, the nodes' `dim` (the paper)
        # unless they are wider (--dyn-stgcd-node-dim; DynamicGCN projects its inputs down)
        graph_dim = graph_dim or dim
        # no_spatial: no graph convolution built (its parameters would get no gradient)
        self.gcn = (DynamicGCN(graph_dim, dynamic_weight="static_weight" not in ablations,
                               dynamic_adjacency="static_adjacency" not in ablations,
                               attention_scores=graph_attention, takes_inputs=not self.first,
                               new_node_edges=new_node_edges, node_dim=dim)
                    if self.spatial else None)
        convolved_dim = graph_dim if self.spatial else dim
        in_dim = convolved_dim + (dim if self.first else 0) + (walk_dims if self.last else 0)
        self.mlp = MLP(in_dim, dim, dropout)
        self.target_walks = target_walks
        self.encoder_attention = None
        if encoder_attention:
            self.encoder_attention = SourceAttention(dim, encoder_dim, heads, attention_dropout)
            self.attention_norm = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.temporal = (TemporalConvolution(dim, kernel_size, dilation=2 ** index, dropout=dropout)
                         if "no_temporal" not in ablations else None)

    def forward(self, inputs: Optional[Tensor], node_mask: Optional[Tensor], state: DynamicGCNState,
                context: Dict[str, Tensor], gold_previous: Optional[Tensor]):
        """One step over the nodes 0..t; inputs (B, n, g), None in the first block (Y^0 = 0: the graph
        convolution skips what zeros would add); node_mask (B, n) True on real nodes, None when all are (no
        masking). Gives (Y^l_t (B, n, g), A_t, the new state, the raw scores of Ã (DynamicGCN.step) or None)."""
        block_input = inputs if inputs is not None else context["embeddings"]  # X^l: Y^{l-1}, or the tokens
        scores = None
        if self.spatial:
            edge_scores = context.get(FIRST_EDGE_SCORES) if self.first else None
            if edge_scores is not None:
                n = block_input.size(1)
                edge_scores = edge_scores[:, :n, :n]
            convolved, adjacency, weight, scores = self.gcn.step(inputs, node_mask, state, context["sog"],
                                                                 gold_previous, edge_inputs=block_input,
                                                                 edge_scores=edge_scores)
        else:
            embeddings = context["embeddings"]
            batch, n = embeddings.shape[:2]
            convolved = inputs if inputs is not None else embeddings.new_zeros(batch, n, self.dim)
            weight = state.weight
            adjacency = (torch.eye(n, device=embeddings.device).expand(batch, n, n) if node_mask is None
                         else torch.diag_embed(node_mask.float()))
        parts = [convolved]
        if self.first:
            parts.append(context["embeddings"])
        if self.last:
            n = convolved.size(1)
            walks = [context["source_walks"]] if "source_walks" in context else []
            if self.target_walks is not None:
                walks.append(self.target_walks(convolved, adjacency, node_mask))
            parts.extend(w.unsqueeze(1).expand(-1, n, -1) for w in walks)
        y = self.mlp(torch.cat(parts, dim=-1))
        if self.residual:
            y = block_input + y
        if self.encoder_attention is not None:
            keys, values = context["source_keys"][self.index], context["source_values"][self.index]
            attended = self.encoder_attention(self.attention_norm(y), keys, values,
                                              context.get("encoder_padding_mask"))
            y = y + self.dropout(attended)
        if self.temporal is not None:
            y = self.temporal(y, node_mask, adjacency)
        if self.gcn is None:  # no graph: nothing to carry to the next step
            return y, adjacency, state, scores
        return y, adjacency, self.gcn.next_state(state, adjacency, weight, y), scores

    def sequence_edge_scores(self, embeddings: Tensor, previous: Optional[Tensor] = None) -> Optional[Tensor]:
        """The first block's own-step graph attention raw scores over every column (B, T, T), for FIRST_EDGE_SCORES;
        None where the block computes none of its own from the embeddings (a later block, no graph, a static
        adjacency, edges of the next step). previous: those of embeddings[:, :T - 1], kept by beam search, so that
        only the newest column's pairs are scored."""
        if not (self.first and self.gcn is not None and self.gcn.dynamic_adjacency and self.gcn.own_step):
            return None
        if previous is not None:
            return self.gcn.attention.extended_raw_scores(previous, embeddings)
        return self.gcn.attention.raw_scores(embeddings)

    def initial_state(self, probe: Tensor) -> DynamicGCNState:
        """The state before step 0 (probe: (B, 0, g)); without a spatial layer an empty one, kept as it is at every
        step (its weight shared by every row, stride 0)."""
        if self.gcn is not None:
            return self.gcn.initial_state(probe)
        batch = probe.size(0)
        return DynamicGCNState(probe.new_zeros(1, 0, 0).expand(batch, -1, -1),
                               probe.new_zeros(batch, 0, 0, dtype=torch.float32), probe.new_zeros(batch, 0, self.dim),
                               probe.new_zeros(batch, 2, dtype=torch.float32))
