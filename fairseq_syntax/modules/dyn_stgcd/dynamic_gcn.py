"""The dynamic GCN of Dyn-STGCD's spatial convolution layer (Li et al., "Neural Machine Translation with Dynamic
Graph Convolutional Decoder", §3.3 eq. 5-7 and appendix A.1): a graph convolution over the target graph built so
far whose weight matrix evolves with a GRU over time steps and whose adjacency is refined at every step from
graph-attention coefficients between the observed nodes.

At step t the graph has the nodes 0..t (decoder columns: 0 = BOS, c = the token at column c) and the <sog> node
(the mean-pooled encoder output, linked to every node and kept constant). One step of one layer l:

  Ã_{t-1}  = GAT coefficients of the layer's outputs Y^l_{t-1} of step t-1 between the nodes observed at t-1:
             ã_ij = softmax_j LeakyReLU(psi^T [W y_i || W y_j]) over the observed j (time-causal: node t is not
             observed yet, so its row and column are 0). That is eq. 7 as printed (new_node_edges "next_step");
             the default of the decoder, "own_step", is the paper's inference section: Ã_t over the nodes 0..t
             from the layer's inputs of step t, so the node that joins at step t has edges at step t. The scores
             are the paper's GAT or, options, GATv2's or a biaffine's (GraphAttentionCoefficients)
  A_t      = Sigmoid(alpha (A_{t-1} + Ã_{t-1}) + beta)                                             (eq. 7)
             A_{-1} = I ("initialised diagonal for a maximum number of candidate nodes"): the entries of a node
             that joins at step t have gone through t updates with nothing added, so they come in at g^t(0) (g^t(1)
             on the diagonal), g(x) = Sigmoid(alpha x + beta); teacher-forced (--dyn-stgcd-teacher-forced-adjacency,
             the paper's "substitute A*_{t-1} for A_{t-1}"): A_{t-1} is the gold graph of the nodes 0..t-1
  W_t      = GRU(Y^{l-1}_t, W_{t-1}) column by column (A.1): Z = s(P_Z X + Q_Z W + B_Z), R = s(P_R X + Q_R W + B_R),
             W~ = tanh(P_W X + Q_W (R . W) + B_W), W_t = (1 - Z) . W_{t-1} + Z . W~, with X the g x g summary of the
             node vectors Y^{l-1}_t; W_{-1} a trainable g x g matrix
  Y^l_t    = ReLU(D^-1/2 Â D^-1/2 [Y^{l-1}_t; sog] W_t),  Â = A_t + I plus an edge of weight 1 from <sog> to every
             node, D the row degrees (<sog>'s: its n links plus itself)                                 (eq. 2, 5)

Readings of what the paper leaves open, each a choice here: "Linear" in eq. 7 is one weight and one bias per layer
applied to every entry (a Linear over a row would tie the model to a maximum length), initialised at 8 and -4
(REFINE_INIT) so that A_{-1} = I is nearly a fixed point; the adjacency is directed,
row i = node i's neighbours (the GAT coefficients are normalised per row, and heads are read as the argmax of a
row); the summary X (the paper cites the top-k pooling of Cangea et al., which cannot give g columns from fewer
than g nodes) is attention pooling: column c of X is the mean of the node vectors weighted by softmax over the
nodes of y . q_c, a learned query per column, so any number of nodes gives g columns.

The adjacency and its update are computed in float32 (a sigmoid recurrence and row-normalised coefficients).
tests/test_dynamic_gcn.py checks each equation against per-node, per-column loops.
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


def masked_softmax(scores: Tensor, allowed: Optional[Tensor], dim: int) -> Tensor:
    """Softmax over `dim` among the allowed entries (None: all); 0 where none is allowed (float32)."""
    if allowed is None:
        return torch.softmax(scores.float(), dim=dim)
    scores = scores.float().masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    return torch.nan_to_num(weights, nan=0.0) * allowed


GRAPH_ATTENTION_SCORES = ("gat", "gatv2", "biaffine")
# the (b, n, m, d') pre-activations of PairwiseScores are made a few sentences at a time, about this many values each
PAIRWISE_CHUNK_VALUES = 1 << 20


def pairwise_sums(rows: Tensor, columns: Tensor) -> Tensor:
    """(b, n, m, d') [.., i, j, :] = rows[.., i, :] + columns[.., j, :]: the rows copied out and the columns added in
    place, the values of a broadcast sum (whose CPU kernel over a d'-wide inner dimension took ~4x as long in a
    microbenchmark of one (55, 36, 36, 32) sum)."""
    return rows.unsqueeze(2).expand(-1, -1, columns.size(1), -1).contiguous().add_(columns.unsqueeze(1))


class PairwiseScores(torch.autograd.Function):
    """GATv2's raw scores s[b, i, j] = a . LeakyReLU(r[b, i] + c[b, j]) from rows r (B, n, d'), columns c (B, m, d')
    and a (d'), without keeping the (B, n, m, d') pre-activations for the backward pass: both passes build them a
    few sentences at a time (PAIRWISE_CHUNK_VALUES), the backward pass again. Autograd's path kept two such tensors
    per step and block until the backward pass: Dyn-STGCD's peak training memory in bench/dyn_stgcd_cost.py was
    4.7x vanilla's with it, 2.4x with this (its speed the same within the bench's spread). Not twice
    differentiable."""

    @staticmethod
    def forward(ctx, rows: Tensor, columns: Tensor, weight: Tensor, negative_slope: float) -> Tensor:
        ctx.save_for_backward(rows, columns, weight)
        ctx.negative_slope = negative_slope
        scores = rows.new_empty(rows.size(0), rows.size(1), columns.size(1))
        for chunk in PairwiseScores.chunks(rows, columns):
            hidden = pairwise_sums(rows[chunk], columns[chunk])
            scores[chunk] = F.leaky_relu_(hidden, negative_slope) @ weight
        return scores

    @staticmethod
    def chunks(rows: Tensor, columns: Tensor):
        size = max(1, PAIRWISE_CHUNK_VALUES // max(1, rows.size(1) * columns.size(1) * rows.size(2)))
        return [slice(start, start + size) for start in range(0, rows.size(0), size)]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        rows, columns, weight = ctx.saved_tensors
        grad_rows, grad_columns = torch.empty_like(rows), torch.empty_like(columns)
        grad_weight = torch.zeros_like(weight)
        for chunk in PairwiseScores.chunks(rows, columns):
            activated = F.leaky_relu_(pairwise_sums(rows[chunk], columns[chunk]), ctx.negative_slope)
            scores_grad = grad[chunk].contiguous()
            # d s / d a = LeakyReLU(r_i + c_j), summed over the (b, i, j) with their gradients
            grad_weight += activated.view(-1, activated.size(-1)).t() @ scores_grad.view(-1)
            # d s / d (r_i + c_j) = a . LeakyReLU'(...): the outer product g a (one GEMM), then the derivative
            # (the activation's sign is the pre-activation's: the slope is positive)
            hidden_grad = (scores_grad.view(-1, 1) @ weight.view(1, -1)).view_as(activated)
            hidden_grad = torch.ops.aten.leaky_relu_backward(hidden_grad, activated, ctx.negative_slope, True)
            grad_rows[chunk] = hidden_grad.sum(dim=2)
            grad_columns[chunk] = hidden_grad.sum(dim=1)
        return grad_rows, grad_columns, grad_weight, None


def masked_log_softmax(scores: Tensor, allowed: Optional[Tensor], dim: int) -> Tensor:
    """Log-softmax over `dim` among the allowed entries (None: all), float32; 0 at the entries not allowed. A row
    with no allowed entry gives 0 everywhere (finite, so no NaN reaches a gradient)."""
    scores = scores.float()
    if allowed is None:
        return torch.log_softmax(scores, dim=dim)
    scores = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
    return torch.log_softmax(scores, dim=dim).masked_fill(~allowed, 0.0)


class GraphAttentionCoefficients(nn.Module):
    """Ã of eq. 7: (B, n, n) float32 from node vectors (B, n, d), rows softmax-normalised over the real nodes
    (node_mask None: all nodes are real); `scores` gives the raw scores, before the softmax.

    `scores` "gat" is the paper's (Veličković et al.): LeakyReLU(psi_i . W y_i + psi_j . W y_j), increasing in the
    candidate's term whatever the row, so every row ranks the candidates alike (Brody et al. 2022's "static
    attention"; eq. 7's graph then gives every word the same head, docs/results.md). "gatv2" is Brody et al.'s
    fix, a . LeakyReLU(W_i y_i + W_j y_j): the LeakyReLU between the two projections lets each row rank the
    candidates its own way. "biaffine" is Dozat & Manning's arc scorer (SuPar's): d_i = LeakyReLU(D y_i),
    h_j = LeakyReLU(H y_j) (slope 0.1), score d_i^T U h_j + u . h_j, per-row rankings from two matrix products
    (no (n, n, d') tensor, unlike gatv2). gatv2 and biaffine are not in the paper: options beside it
    (--dyn-stgcd-graph-attention)."""

    def __init__(self, embed_dim: int, attention_dim: int, negative_slope: float = 0.2, scores: str = "gat"):
        super().__init__()
        if scores not in GRAPH_ATTENTION_SCORES:
            raise ValueError(f"graph attention scores {scores!r}: not among {list(GRAPH_ATTENTION_SCORES)}")
        self.scores = scores
        self.negative_slope = negative_slope
        if scores == "gat":
            self.project = nn.Linear(embed_dim, attention_dim, bias=False)  # W
            self.psi = nn.Parameter(torch.empty(2, attention_dim))  # psi = [psi_i; psi_j]
            nn.init.xavier_uniform_(self.psi)
        elif scores == "gatv2":
            # W [y_i || y_j] = W_i y_i + W_j y_j, the two halves as one Linear of 2 x attention_dim outputs
            self.project = nn.Linear(embed_dim, 2 * attention_dim, bias=False)
            self.score = nn.Linear(attention_dim, 1, bias=False)  # a
        else:
            self.negative_slope = 0.1  # (Dozat & Manning's MLPs)
            self.project = nn.Linear(embed_dim, 2 * attention_dim)  # D and H, side by side
            self.bilinear = nn.Parameter(torch.empty(attention_dim, attention_dim))  # U
            self.head_bias = nn.Parameter(torch.zeros(attention_dim))  # u
            nn.init.xavier_uniform_(self.bilinear)

    def raw_scores(self, nodes: Tensor) -> Tensor:
        """(B, n, n) float32: [b, i, j] the score of node j as node i's neighbour (before any mask)."""
        projected = self.project(nodes).float()
        if self.scores == "gat":
            scores = ((projected @ self.psi[0].float()).unsqueeze(2)       # psi_i . W y_i
                      + (projected @ self.psi[1].float()).unsqueeze(1))    # psi_j . W y_j
            return F.leaky_relu(scores, self.negative_slope)
        if self.scores == "gatv2":
            rows, columns = projected.chunk(2, dim=-1)  # W_i y_i, W_j y_j
            return PairwiseScores.apply(rows, columns, self.score.weight.float().view(-1), self.negative_slope)
        dependents, heads = F.leaky_relu(projected, self.negative_slope).chunk(2, dim=-1)
        return ((dependents @ self.bilinear.float()) @ heads.transpose(1, 2)
                + (heads @ self.head_bias.float()).unsqueeze(1))

    def extended_raw_scores(self, previous: Tensor, nodes: Tensor) -> Tensor:
        """raw_scores(nodes) (B, n, n) given previous = raw_scores(nodes[:, :n - 1]): a pair's score reads its two
        nodes only, so gatv2 scores just the newest node's row and column (beam search's first block, whose nodes,
        the token embeddings, stay the same from step to step); gat and biaffine, two matrix products, score all."""
        if self.scores != "gatv2" or previous.size(1) == 0:
            return self.raw_scores(nodes)
        rows, columns = self.project(nodes).float().chunk(2, dim=-1)
        weight = self.score.weight.float().view(-1)
        new_row = PairwiseScores.apply(rows[:, -1:], columns, weight, self.negative_slope)  # (B, 1, n)
        new_column = PairwiseScores.apply(rows[:, :-1], columns[:, -1:], weight, self.negative_slope)  # (B, n - 1, 1)
        return torch.cat([torch.cat([previous, new_column], dim=2), new_row], dim=1)

    def forward(self, nodes: Tensor, node_mask: Optional[Tensor]) -> Tensor:
        return self.coefficients(self.raw_scores(nodes), node_mask)

    @staticmethod
    def coefficients(scores: Tensor, node_mask: Optional[Tensor]) -> Tensor:
        """The raw scores softmax-normalised per row over the real nodes (0 in padded rows and columns)."""
        allowed = None if node_mask is None else node_mask.unsqueeze(2) & node_mask.unsqueeze(1)
        return masked_softmax(scores, allowed, dim=2)


class EvolvingWeight(nn.Module):
    """W_t = GRU(Y_t, W_{t-1}) of A.1 on g x g matrices, each column a GRU state, after attention pooling of the
    node vectors into g columns."""

    def __init__(self, dim: int, evolving: bool = True, takes_inputs: bool = True):
        super().__init__()
        self.dim = dim
        self.initial = nn.Parameter(torch.empty(dim, dim))  # W_{-1}
        nn.init.xavier_uniform_(self.initial)
        self.takes_inputs = takes_inputs and evolving
        if not evolving:
            # the static-weight ablation: W_{-1} at every step, and no GRU parameters that would get no gradient
            # (counted as the model's, and an error under DDP without find_unused_parameters)
            return
        if takes_inputs:  # (the first block's inputs are Y^0 = 0: its P x terms are 0, nothing to learn)
            self.queries = nn.Parameter(torch.empty(dim, dim))  # q_c: column c of the summary
            self.input_weights = nn.Parameter(torch.empty(3, dim, dim))  # P_Z, P_R, P_W
            nn.init.xavier_uniform_(self.queries)
            for matrix in self.input_weights:
                nn.init.xavier_uniform_(matrix)
        self.state_weights = nn.Parameter(torch.empty(3, dim, dim))  # Q_Z, Q_R, Q_W
        self.biases = nn.Parameter(torch.zeros(3, dim, dim))  # B_Z, B_R, B_W
        for matrix in self.state_weights:
            nn.init.xavier_uniform_(matrix)

    def initial_state(self, batch: int) -> Tensor:
        return self.initial.unsqueeze(0).expand(batch, -1, -1)

    def summarize(self, nodes: Tensor, node_mask: Optional[Tensor]) -> Tensor:
        """(B, n, g) -> the g x g summary X with its columns as rows, (B, columns, g): row c = x_c^T =
        sum_i softmax_i(y_i . q_c) y_i over the real nodes (node_mask None: all)."""
        allowed = None if node_mask is None else node_mask.unsqueeze(-1)
        weights = masked_softmax(nodes @ self.queries, allowed, dim=1).to(nodes)  # (B, n, g)
        return weights.transpose(1, 2) @ nodes

    def forward(self, nodes: Optional[Tensor], node_mask: Optional[Tensor], previous: Tensor) -> Tensor:
        """W_t from the node vectors (B, n, g) and W_{t-1}; nodes None: they are all 0 (the first layer's input
        Y^0), so are the summary and its terms P x, which are not computed."""
        # column c of every matrix is one GRU step: rows x_c^T and h_c^T of all columns and sentences go through
        # one GEMM per weight stack ((B x g) x g times g x 3g), not one small product per sentence. W is kept with
        # its columns as rows in memory (what this returns is a transposed view of that; DynamicGCNState's
        # index_select keeps the layout), so no step copies it into place.
        if nodes is not None and not self.takes_inputs:
            raise ValueError("this evolving weight was built without input weights (a first block's, Y^0 = 0)")
        dim = self.dim
        batch = previous.size(0)
        if nodes is None and previous.stride(0) == 0:
            # every row holds the very same W_{t-1} (W_{-1} evolved without inputs, the first layer's): so does
            # W_t, computed once and shared (a quarter of the GRU's work in 4 blocks, forward and backward)
            previous = previous[:1]
        state = previous.transpose(1, 2)  # h_c = column c of W_{t-1}
        bias = self.biases.transpose(1, 2)  # B_Z, B_R, B_W by column
        # Z and R in one sigmoid; chunks, not slices: the backward of a slice fills a zero tensor of the whole
        # GEMM output per gate
        gates_zr = state @ self.state_weights[:2].reshape(2 * dim, dim).t() + torch.cat([bias[0], bias[1]], dim=-1)
        if nodes is not None:
            inputs = self.summarize(nodes, node_mask)  # (B, columns, g): x_c
            projected = inputs @ self.input_weights.reshape(3 * dim, dim).t()  # P_Z x, P_R x, P_W x side by side
            input_zr, input_w = projected.split([2 * dim, dim], dim=-1)
            gates_zr = gates_zr + input_zr
        update, reset = torch.sigmoid(gates_zr).chunk(2, dim=-1)
        reset_state = (reset * state) @ self.state_weights[2].t() + bias[2]
        candidate = torch.tanh(reset_state if nodes is None else input_w + reset_state)
        weight = torch.lerp(state, candidate, update).transpose(1, 2)  # (1 - Z) . W_{t-1} + Z . W~
        return weight.expand(batch, -1, -1) if weight.size(0) != batch else weight


def propagation_scales(adjacency: Tensor, node_mask: Optional[Tensor], sog: bool = False):
    """D^-1/2 of eq. 2 (B, n) float32, 0 on padded nodes, and, with `sog`, <sog>'s own D^-1/2 (B, 1) or a float:
    Â = adjacency + I over the real nodes, plus <sog>'s edge of weight 1 to every real node (node_mask None: every
    node is real). Also gives the adjacency restricted to the real nodes (float32)."""
    adjacency = adjacency.float()
    if node_mask is None:
        # the degree of Â: the row's adjacency, its self loop, <sog>'s edge (>= 1, no clamp needed)
        inverse_root = (adjacency.sum(dim=2) + (2.0 if sog else 1.0)).rsqrt()
        return adjacency, inverse_root, ((adjacency.size(-1) + 1) ** -0.5 if sog else None)
    real = node_mask.to(torch.float32)
    adjacency = adjacency * real.unsqueeze(1) * real.unsqueeze(2)
    degree = adjacency.sum(dim=2) + real * (2.0 if sog else 1.0)
    inverse_root = degree.clamp(min=1e-12).rsqrt() * real
    # <sog>'s degree: its links to the n real nodes, and itself
    return adjacency, inverse_root, ((real.sum(dim=1, keepdim=True) + 1).rsqrt() if sog else None)


def normalized_propagation(adjacency: Tensor, node_mask: Optional[Tensor], nodes: Tensor,
                           sog: Optional[Tensor] = None) -> Tensor:
    """D^-1/2 Â D^-1/2 [nodes; sog] for the rows of the real nodes (eq. 2): Â = adjacency + I over the real nodes,
    plus, with `sog` (B, d), an edge of weight 1 from <sog> to every real node. (B, n, d), 0 on padded nodes.
    node_mask None: every node is real (the decoder's steps, where no masking is needed)."""
    adjacency, inverse_root, sog_scale = propagation_scales(adjacency, node_mask, sog is not None)
    scale = inverse_root.unsqueeze(-1).to(nodes)
    # row i: r_i (sum_j a_ij r_j x_j + r_i x_i), Â's identity without an n x n identity matrix
    scaled = scale * nodes
    out = scale * (adjacency.to(nodes) @ scaled + scaled)
    if sog is not None:
        out = out + (inverse_root * sog_scale).unsqueeze(-1).to(nodes) * sog.unsqueeze(1)
    return out


@dataclass
class DynamicGCNState:
    """What one layer keeps from step t-1 (per row of the batch): its evolving weight W_{t-1} (B, g, g), the
    adjacency A_{t-1} over the nodes 0..t-1 (B, t, t, float32), its outputs Y^l_{t-1} (B, t, the nodes' width), and
    the value a new node's entries come in at (B, 2: off the diagonal, on it)."""
    weight: Tensor
    adjacency: Tensor
    outputs: Tensor
    fresh: Tensor

    def index_select(self, rows: Tensor) -> "DynamicGCNState":
        # W lies with its columns as rows in memory (EvolvingWeight): selected in that layout, it stays there; one
        # W shared by every row (stride 0, the first layer's) stays shared
        if self.weight.stride(0) == 0:
            weight = self.weight[:1].expand(rows.numel(), -1, -1)
        else:
            weight = self.weight.transpose(1, 2).index_select(0, rows).transpose(1, 2)
        return DynamicGCNState(weight, *(value.index_select(0, rows) for value in
                                         (self.adjacency, self.outputs, self.fresh)))


NEW_NODE_EDGES = ("own_step", "next_step")
# eq. 7's Linear at its start: A_t = Sigmoid(8 (A_{t-1} + Ã) - 4) keeps A_{-1} = I near the identity (entries
# without attention settle at ~0.02 off the diagonal, ~0.98 on it) and lifts an entry whose coefficient is ~1 to
# ~0.98 in one step; at weight 1 and bias 0 every entry of I's complement became 0.5-0.8 after one step
REFINE_INIT = (8.0, -4.0)


class DynamicGCN(nn.Module):
    """One spatial layer's dynamic GCN, one step at a time: `step` takes the layer's inputs Y^{l-1}_t for the nodes
    0..t and its state of step t-1, and gives the convolved nodes and A_t (the caller applies eq. 8's MLP and hands
    the layer's outputs back through `next_state`).

    `new_node_edges`: when Ã is computed. "next_step" is eq. 7 as printed, Ã_{t-1} from the layer's outputs of step
    t-1 over the nodes 0..t-1, so the node that joins at step t has no edge of its own until step t + 1 (its row and
    column of A_t are content-free: the last word's row is a constant at the last step). "own_step" is the paper's
    inference section ("we assign a new empty node at the beginning of each step, then calculate the edge
    information with previously generated nodes"): Ã_t over the nodes 0..t from what step t knows, the layer's
    inputs of step t (`edge_inputs`: Y^{l-1}_t, the first block's token embeddings), every row and column included.
    The module's defaults are the paper's equations (gat, next_step); the decoder's are in models/dyn_stgcd.py."""

    def __init__(self, dim: int, attention_dim: Optional[int] = None, dynamic_weight: bool = True,
                 dynamic_adjacency: bool = True, attention_scores: str = "gat", takes_inputs: bool = True,
                 new_node_edges: str = "next_step", node_dim: Optional[int] = None):
        super().__init__()
        if new_node_edges not in NEW_NODE_EDGES:
            raise ValueError(f"new node edges {new_node_edges!r}: not among {list(NEW_NODE_EDGES)}")
        self.dim = dim
        # node_dim: the width of the nodes the layer reads (inputs, edge inputs, outputs), `dim` (the paper's one
        # width) unless the decoder's nodes are wider than its graph (--dyn-stgcd-node-dim): then the graph
        # attention reads them whole and the convolution a projection of the inputs to `dim`
        self.node_dim = node_dim or dim
        self.to_graph = (nn.Linear(self.node_dim, dim, bias=False) if self.node_dim != dim and takes_inputs
                         else None)
        self.own_step = new_node_edges == "own_step"
        # the paper's Figure 5 ablations: W_t = W_{-1} at every step (no GRU); A_t without Ã (no refinement from
        # the nodes, so every adjacency entry follows the same content-free recurrence)
        self.dynamic_weight, self.dynamic_adjacency = dynamic_weight, dynamic_adjacency
        # (what an ablation does not use is not built: its parameters would get no gradient)
        self.attention = (GraphAttentionCoefficients(self.node_dim, attention_dim or dim, scores=attention_scores)
                          if dynamic_adjacency else None)
        self.weight = EvolvingWeight(dim, evolving=dynamic_weight, takes_inputs=takes_inputs)
        self.refine = nn.Linear(1, 1)  # eq. 7's Linear, one weight and bias for every entry
        nn.init.constant_(self.refine.weight, REFINE_INIT[0])
        nn.init.constant_(self.refine.bias, REFINE_INIT[1])

    def refined(self, values: Tensor) -> Tensor:
        return torch.sigmoid(values * self.refine.weight.float().view(()) + self.refine.bias.float().view(()))

    def initial_state(self, nodes: Tensor) -> DynamicGCNState:
        batch = nodes.size(0)
        fresh = torch.tensor([0.0, 1.0], device=nodes.device).expand(batch, 2)  # A_{-1} = I
        return DynamicGCNState(self.weight.initial_state(batch), nodes.new_zeros(batch, 0, 0, dtype=torch.float32),
                               nodes.new_zeros(batch, 0, self.node_dim), fresh)

    def step(self, inputs: Optional[Tensor], node_mask: Optional[Tensor], state: DynamicGCNState,
             sog: Optional[Tensor] = None, gold_previous: Optional[Tensor] = None,
             edge_inputs: Optional[Tensor] = None, edge_scores: Optional[Tensor] = None):
        """inputs (B, n, node_dim) = Y^{l-1}_t of the nodes 0..t (n = t + 1), None when they are all 0 (the first
        layer's Y^0: only <sog> then reaches the nodes, and nothing of the inputs is computed); node_mask (B, n) True on
        real nodes (None: all real, the case of every decoder step: no mask is applied);
        gold_previous (B, t, t): the gold graph of the nodes 0..t-1 (teacher-forced adjacency); edge_inputs
        (B, n, g): what "own_step" computes Ã_t from (ignored by "next_step"); edge_scores (B, n, n): "own_step"'s
        raw scores of those edge_inputs when the caller has them already (raw_scores scores each pair of nodes on
        its own, so the scores of inputs that do not change between steps are those of the first n nodes of one
        scoring of the whole sequence: the first block's, the token embeddings). Gives (convolved nodes (B, n, g),
        A_t (B, n, n) float32, W_t, the raw scores of Ã (B, m, m) float32: m = n with "own_step", t with
        "next_step" (Ã_{t-1}); None where no Ã was computed: static adjacency, or step 0 of "next_step")."""
        batch, n = state.outputs.size(0), state.outputs.size(1) + 1
        device = state.outputs.device
        scores = None
        if self.dynamic_adjacency and self.own_step:
            if edge_scores is not None:
                scores = edge_scores
            elif edge_inputs is None:
                raise ValueError("own-step edges: the step needs the nodes' edge_inputs")
            else:
                scores = self.attention.raw_scores(edge_inputs)
            coefficients = self.attention.coefficients(scores, node_mask)
        elif self.dynamic_adjacency and n > 1:
            scores = self.attention.raw_scores(state.outputs)
            coefficients = self.attention.coefficients(scores, None if node_mask is None else node_mask[:, :n - 1])
        else:
            coefficients = None
        if gold_previous is not None:
            previous = gold_previous.float()
            fresh = torch.tensor([0.0, 1.0], device=device).expand(batch, 2)
        else:
            previous, fresh = state.adjacency, state.fresh
        grown = torch.empty(batch, n, n, device=device, dtype=torch.float32)
        grown[:, :, -1] = fresh[:, :1]
        grown[:, -1, :] = fresh[:, :1]
        grown[:, -1, -1] = fresh[:, 1]
        if coefficients is None:
            grown[:, :n - 1, :n - 1] = previous
        elif self.own_step:
            grown[:, :n - 1, :n - 1] = previous
            grown = grown + coefficients
        else:
            grown[:, :n - 1, :n - 1] = previous + coefficients
        adjacency = self.refined(grown)
        if node_mask is not None:
            real = node_mask.to(torch.float32)
            adjacency = adjacency * real.unsqueeze(1) * real.unsqueeze(2)
        if inputs is not None and self.to_graph is not None:
            inputs = self.to_graph(inputs)
        weight = self.weight(inputs, node_mask, state.weight) if self.dynamic_weight else state.weight
        if inputs is not None:
            convolved = torch.relu(normalized_propagation(adjacency, node_mask, inputs, sog) @ weight)
        elif sog is None:
            convolved = state.outputs.new_zeros(batch, n, self.dim)
        else:
            # ReLU(D^-1/2 Â D^-1/2 [0; sog] W): node i gets r_i r_sog sog W, and ReLU(c v) = c ReLU(v) for c >= 0
            _, inverse_root, sog_scale = propagation_scales(adjacency, node_mask, sog=True)
            scale = (inverse_root * sog_scale).unsqueeze(-1).to(sog)
            convolved = scale * torch.relu(sog.unsqueeze(1) @ weight)
        return convolved, adjacency, weight, scores

    def next_state(self, state: DynamicGCNState, adjacency: Tensor, weight: Tensor, outputs: Tensor):
        # the fresh entries go through the update too, with nothing added (A_{-1} = I for every future node)
        return DynamicGCNState(weight, adjacency, outputs, self.refined(state.fresh))
