"""The P-step random walk kernel between a graph and trainable "hidden graphs" (Nikolentzos & Vazirgiannis, 2020),
as Dyn-STGCD uses it in its last decoder layer (Li et al., "Neural Machine Translation with Dynamic Graph
Convolutional Decoder", §2 eq. 3, §3.3 and appendix A.2), on the target graph built so far and on the source graph:

    kappa^(p)(G, G^h) = s^T (A x A^h)^p s,    s = vec(K^h Y^T),    0 <= p <= P

G: the input graph (adjacency A, N x N, possibly weighted: Dyn-STGCD's adjacency is a sigmoid output; node vectors
Y, N x d); G^h: a hidden graph with n nodes, trainable adjacency A^h and node embeddings K^h (n x d); x: the
Kronecker product (the adjacency of the direct product graph, Nn x Nn). The representation of G is the K x (P + 1)
matrix R[k, p] = kappa^(p)(G, G^h_k) over K hidden graphs (Dyn-STGCD: one group of 6 graphs of 6 nodes, one of 6
graphs of 4 nodes, P = {0, 1}; one module per group here, their outputs concatenated by the caller).

No Kronecker product is materialised: with S = K^h Y^T (n x N), (A x A^h) vec(S) = vec(A^h S A^T), so
kappa^(p) = <S, M_p> with M_0 = S and M_p = A^h M_{p-1} A^T: O(P n N (n + N)) per graph instead of O((nN)^2) memory.
tests/test_random_walk_kernel.py checks it against the explicit formula.

Hidden graphs as RWNN defines them: undirected, no self loops, non-negative weights (a ReLU over one trainable
weight per node pair of the upper triangle, mirrored). Padded nodes of the input (node_mask False) have no edges
and no vector, so they add nothing to any walk. Computed in float32 (walk counts grow with P and N), so fp16/bf16
training keeps the kernel exact.
"""
from typing import Optional

import torch
import torch.nn as nn
from torch import Tensor


class RandomWalkKernel(nn.Module):
    """`num_graphs` hidden graphs of `graph_size` nodes over `embed_dim`-dimensional node vectors, walks of 0 to
    `max_step` steps; forward gives (B, num_graphs, max_step + 1)."""

    def __init__(self, embed_dim: int, num_graphs: int, graph_size: int, max_step: int):
        super().__init__()
        if graph_size < 1 or num_graphs < 1 or max_step < 0:
            raise ValueError(f"random walk kernel: {num_graphs} hidden graphs of {graph_size} nodes, steps 0 to "
                             f"{max_step}: need at least one graph of one node and max_step >= 0")
        self.num_graphs, self.graph_size, self.max_step = num_graphs, graph_size, max_step
        self.pair_weights = nn.Parameter(torch.empty(num_graphs, graph_size * (graph_size - 1) // 2))
        self.node_embeddings = nn.Parameter(torch.empty(num_graphs, graph_size, embed_dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.uniform_(self.pair_weights, -1.0, 1.0)  # about half the pairs start as edges after the ReLU
        nn.init.uniform_(self.node_embeddings, -1.0, 1.0)

    def hidden_adjacency(self) -> Tensor:
        """(K, n, n) float32: symmetric, zero diagonal, non-negative."""
        n = self.graph_size
        rows, columns = torch.triu_indices(n, n, offset=1, device=self.pair_weights.device)
        upper = self.pair_weights.new_zeros(self.num_graphs, n, n, dtype=torch.float32)
        upper[:, rows, columns] = torch.relu(self.pair_weights.float())
        return upper + upper.transpose(1, 2)

    def forward(self, nodes: Tensor, adjacency: Tensor, node_mask: Optional[Tensor] = None) -> Tensor:
        """nodes (B, N, d), adjacency (B, N, N) (a weighted one too), node_mask (B, N) bool, True on real nodes
        (None: all real): (B, K, P + 1) float32, [b, k, p] = kappa^(p)(graph b, hidden graph k)."""
        nodes, adjacency = nodes.float(), adjacency.float()
        if node_mask is not None:
            real = node_mask.float()
            nodes = nodes * real.unsqueeze(-1)
            adjacency = adjacency * real.unsqueeze(1) * real.unsqueeze(2)
        hidden = self.hidden_adjacency()
        s = torch.einsum("kad,bnd->bkan", self.node_embeddings.float(), nodes)  # (B, K, n, N)
        walks, kernels = s, [s.pow(2).sum(dim=(2, 3))]
        for _ in range(self.max_step):
            walks = torch.einsum("kac,bkcn->bkan", hidden, walks)  # A^h M
            walks = torch.einsum("bkan,bmn->bkam", walks, adjacency)  # (A^h M) A^T
            kernels.append((s * walks).sum(dim=(2, 3)))
        return torch.stack(kernels, dim=-1)
