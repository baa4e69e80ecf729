"""The syntactic GCN of Bastings et al. (2017) in the Transformer encoder, as the RGSE paper (Ding & Tao, 2019,
section 4.1) reimplemented it for its Transformer baselines, with the equations of Choshen & Abend (section 4, "GCN
Encoder"): a labeled, directed, gated graph convolution over the source dependency tree

    gcn(h, v) = ReLU( sum_{u in N(v)} g_{u,v} (W_dir(u,v) h_u + b_lab(u,v)) )
    g_{u,v}   = sigmoid( h_u . w^_dir(u,v) + b^_lab(u,v) )                         (a scalar gate per edge)

Edges (fairseq_syntax/modules/dependency_graph.py: `piece_arcs`, the arcs between subword pieces, the pieces of a
word joined through its first piece by the label SUBWORD) in three directions, each with its own W and w^:
  self  v -> v            every column (EOS and padding too: their only edge, so their output is ReLU(self term))
  down  head -> dependent  the arc as the parse gives it
  up    dependent -> head  the same arc reversed
Biases: lab(u,v) includes the direction, as in Marcheggiani & Titov (2017) and Bastings et al. (2017), whose label
set holds each label twice (`nsubj` down, `nsubj'` up) and a label of its own for the self loop: a d-vector b and
a scalar b^ for "self", and for each (direction, label) of the L data-bin labels + SUBWORD, 2 (L + 1) + 1 rows.
(Choshen & Abend write lab(u,v) alone; without the direction in it, the bias of an arc could not tell a head from
a dependent, which only W and w^ would then do.)

Switches (the ablations of Choshen & Abend's Table 2, independent of each other):
  labels off ("-Labels")  lab(u,v) = dir(u,v): one bias b_dir and one b^_dir per direction, whatever the label
                          (the unlabeled GCN: only the labels go, the per-direction affine maps stay)
  gates off  ("-Gates")   g_{u,v} = 1
Edge dropout (Bastings et al.; RGSE: 0.2): in training each directed edge (down and up of an arc separately) is
dropped with probability p and the kept ones are scaled by 1 / (1 - p), as Marcheggiani & Titov's implementation
does; self loops are never dropped.

Implementation: edge lists, batched over the whole batch with no loop over tokens or edges. One matmul gives
W_self h, W_down h, W_up h of every node, one (in float32 at least, with autocast off for it) the gate logits; each
directed edge gathers its source's row, adds its bias, is weighted by its gate, and `index_add_` sums it into its
target. The dense form (padded B x T x T adjacency per direction, then bmm) computes the same:
tests/test_graph_convolution.py keeps it as the reference and times both (`python -m tests.test_graph_convolution`).
On CPU, 1 thread, B=64, C=256, forward + backward: about equal at T=30 (35.2 against 36.0 ms, both mostly the
shared W h projection), the edge lists ahead at T=50 (58.9 against 63.5 ms); their cost grows with the arcs, the
dense form's with T^2.

Mechanisms (the two Transformer baselines of RGSE's Table 3, "in lower layers ([1-3])", so default layers 0,1,2;
Choshen & Abend stack 2 GCN layers, `--encoder-syntax-layers 0,1`):
  gcn        ("added_module") after self-attention, before the FFN: LayerNorm(x + dropout(gcn(x))) (post-norm), or
             x + dropout(gcn(LayerNorm(x))) with --encoder-normalize-before, with its own layer norm
  birnn_gcn  ("self_attention") self-attention replaced by a bidirectional GRU (C/2 per direction) followed by the
             GCN with a residual connection: y = BiGRU(x), sublayer output y + gcn(y) (the layer then applies its
             dropout, residual and layer norm as it would to self-attention's output)
  birnn      ("self_attention") the same BiGRU without the GCN, sublayer output BiGRU(x): the "BiRNN Transformer"
             the RGSE paper reproduces beside BiRNN+GCN (section 4.1), and reads no syntax; the control that says
             what of birnn_gcn's difference from vanilla is the recurrence and what the graph
Over a recurrent encoder's states h~ (`over_states`, the syntax_lstm model's --lstm-syntax gcn), gcn is
h~ + gcn(h~) with gcn's options (`ResidualGraphConvolution`): birnn_gcn's y + gcn(y), the encoder's BiRNN making y.
"""
import contextlib
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.modules import LayerNorm
from fairseq.modules.fairseq_dropout import FairseqDropout
from torch import Tensor

from ..dependency_graph import PieceArcs, piece_arcs
from ..syntax_mechanism import SyntaxMechanism, register_encoder_mechanism
from ..recurrent import padded_rnn

SELF, DOWN, UP = 0, 1, 2
DIRECTIONS = 3
FEATURES = ("src_parent_first", "src_labels", "src_word_ids")


@dataclass
class GraphConvolutionOptions(FairseqDataclass):
    encoder_gcn_edge_dropout: float = field(default=0.2, metadata={
        "help": "GCN: probability of dropping each directed edge in training (self loops are kept; RGSE: 0.2)"})
    no_encoder_gcn_labels: bool = field(default=False, metadata={
        "help": "GCN without labels (-Labels): one bias per edge direction instead of per (direction, label)"})
    no_encoder_gcn_gates: bool = field(default=False, metadata={
        "help": "GCN without edge gates (-Gates): every gate is 1"})
    encoder_gcn_dim: Optional[int] = field(default=None, metadata={
        "help": "GCN width k: W_dir map the model's C dims to k, the layer's output is projected back to C (no "
                "bias); default C, no projection (the *_paper_params presets set it to reach the RGSE paper's "
                "parameter counts)"})


# the encoder GCN's options before the decoder got a GCN of its own (--decoder-gcn-*): read from old checkpoints
RENAMED_OPTIONS = {"gcn_edge_dropout": "encoder_gcn_edge_dropout", "no_gcn_labels": "no_encoder_gcn_labels",
                   "no_gcn_gates": "no_encoder_gcn_gates"}


def upgrade_option_names(args) -> None:
    """Model args saved under the old option names (RENAMED_OPTIONS) get the new ones; the old are dropped."""
    for old, new in RENAMED_OPTIONS.items():
        if hasattr(args, old):
            value = getattr(args, old)
            if getattr(args, new, None) is None:
                setattr(args, new, value)
            delattr(args, old)


def autocast_off(device: torch.device):
    """A region where torch.autocast does not lower the precision of matmuls on `device` (a no-op context for
    devices autocast does not know, such as "meta")."""
    available = getattr(torch.amp, "is_autocast_available", None)  # torch >= 2.4
    if available(device.type) if available is not None else device.type in ("cpu", "cuda"):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


# ---- message passing over edge lists ----------------------------------------------------------------------------

@dataclass
class DirectedEdges:
    """E directed edges between the flat nodes of a time-first (T, B) layout, node = column * B + sentence:
    source, target, direction (DOWN or UP) and label id of each, all (E,) int64. No self loops."""

    source: Tensor
    target: Tensor
    direction: Tensor
    label: Tensor


def node_index(batch: Tensor, column: Tensor, batch_size: int) -> Tensor:
    """The flat node of (sentence, column) in a time-first (T, B, ...) tensor viewed as (T * B, ...)."""
    return column * batch_size + batch


def directed_edges(arcs: PieceArcs, batch_size: int) -> DirectedEdges:
    """Every arc of `piece_arcs` twice: head -> dependent (DOWN) and dependent -> head (UP)."""
    heads = node_index(arcs.batch, arcs.head, batch_size)
    dependents = node_index(arcs.batch, arcs.dependent, batch_size)
    direction = torch.cat([torch.full_like(heads, DOWN), torch.full_like(heads, UP)])
    return DirectedEdges(source=torch.cat([heads, dependents]), target=torch.cat([dependents, heads]),
                         direction=direction, label=torch.cat([arcs.label, arcs.label]))


def gather_incoming(values: Tensor, source: Tensor, target: Tensor, num_nodes: int,
                    weights: Optional[Tensor] = None) -> Tensor:
    """out[v] = sum over the edges e with target[e] = v of weights[e] * values[source[e]] (weights: 1 if None).
    values (N_src, *F); source, target, weights (E,); out (num_nodes, *F) in values' dtype. Batched: one gather and
    one index_add_."""
    messages = values.index_select(0, source)
    if weights is not None:
        messages = messages * weights.to(messages.dtype).view(-1, *([1] * (messages.dim() - 1)))
    out = values.new_zeros((num_nodes, *values.shape[1:]))
    return out.index_add_(0, target, messages)


class GraphConvolution(nn.Module):
    """One labeled, directed, gated graph convolution layer (module docstring): (T, B, C) -> (T, B, C)."""

    def __init__(self, embed_dim: int, num_labels: int, labels: bool = True, gates: bool = True,
                 edge_dropout: float = 0.0, hidden_dim: Optional[int] = None):
        super().__init__()
        if not 0.0 <= edge_dropout < 1.0:
            raise ValueError(f"the GCN's edge dropout must be in [0, 1), got {edge_dropout}")
        if hidden_dim is not None and hidden_dim < 1:
            raise ValueError(f"the GCN's width must be a positive number of dimensions, got {hidden_dim}")
        self.embed_dim, self.num_labels = embed_dim, num_labels
        # the convolution's width k (W_dir: C -> k; biases in k) and, when k != C, the projection k -> C after the ReLU
        self.hidden_dim = hidden_dim or embed_dim
        self.labels, self.gates, self.edge_dropout = labels, gates, edge_dropout
        # rows of the bias tables: 0 self; labeled: 1 + l down, 1 + (L + 1) + l up (l in 0..L, L = SUBWORD);
        # unlabeled: 1 down, 2 up
        self.num_bias_rows = 1 + 2 * (num_labels + 1) if labels else DIRECTIONS
        self.weight = nn.Linear(embed_dim, DIRECTIONS * self.hidden_dim, bias=False)  # [W_self; W_down; W_up]
        self.bias = nn.Parameter(torch.zeros(self.num_bias_rows, self.hidden_dim))
        self.out_proj = (nn.Linear(self.hidden_dim, embed_dim, bias=False) if self.hidden_dim != embed_dim
                         else None)
        if gates:
            self.gate_weight = nn.Parameter(torch.empty(DIRECTIONS, embed_dim))  # w^_self, w^_down, w^_up
            self.gate_bias = nn.Parameter(torch.zeros(self.num_bias_rows))
        else:
            self.register_parameter("gate_weight", None)
            self.register_parameter("gate_bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        for block in self.weight.weight.data.split(self.hidden_dim):  # W_self, W_down, W_up: each k x C
            nn.init.xavier_uniform_(block)
        if self.out_proj is not None:
            nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.bias)
        if self.gates:
            nn.init.normal_(self.gate_weight, std=self.embed_dim ** -0.5)
            nn.init.zeros_(self.gate_bias)

    def bias_rows(self, edges: DirectedEdges) -> Tensor:
        """Each edge's row of the bias tables."""
        if not self.labels:
            return edges.direction
        return 1 + (edges.direction - DOWN) * (self.num_labels + 1) + edges.label

    @staticmethod
    def gate_dtype(x: Tensor) -> torch.dtype:
        """Gates are computed in float32 at least (float64 stays float64)."""
        return torch.promote_types(x.dtype, torch.float32)

    def gate_logits(self, x: Tensor) -> Tensor:
        """h . w^_dir for every node and direction, (N, 3), in gate_dtype. Autocast is off for this product: under
        torch.autocast the matmul would run (and return) in float16 / bfloat16 whatever its inputs' dtype."""
        dtype = self.gate_dtype(x)
        with autocast_off(x.device):
            return x.reshape(-1, self.embed_dim).to(dtype) @ self.gate_weight.to(dtype).t()

    def edge_weights(self, edges: DirectedEdges, rows: Tensor, gate_logits: Optional[Tensor],
                     num_edges: int, device, dtype: torch.dtype) -> Optional[Tensor]:
        """Gate (in gate_dtype) times edge-dropout scale of every directed edge; None when both are 1."""
        weights = None
        if self.gates:
            logits = gate_logits.view(-1).index_select(0, edges.source * DIRECTIONS + edges.direction)
            weights = torch.sigmoid(logits + self.gate_bias.to(logits.dtype).index_select(0, rows))
        if self.training and self.edge_dropout > 0:
            kept = torch.rand(num_edges, device=device) >= self.edge_dropout
            keep = kept.to(weights.dtype if weights is not None else dtype) / (1 - self.edge_dropout)
            weights = keep if weights is None else weights * keep
        return weights

    def forward(self, x: Tensor, arcs: PieceArcs) -> Tensor:
        return self.forward_edges(x, directed_edges(arcs, x.size(1)))

    def forward_edges(self, x: Tensor, edges: DirectedEdges, newest: int = 0) -> Tensor:
        """The layer over explicit directed edges (no self loops: every node has its own) between the flat nodes
        of x (T, B, C), node = column * B + sentence. `newest` k > 0: the output of the last k columns only
        (k, B, C), from the edges they receive, the other columns read only as their senders (a cached decoding
        step: the earlier columns' outputs are kept)."""
        width, batch, _ = x.shape
        flat = x.reshape(width * batch, x.size(-1))
        if not newest:
            out = self.convolve(flat, flat, edges).view(width, batch, self.hidden_dim)
        else:
            first = (width - newest) * batch  # the newest columns' nodes are the last ones of the flat layout
            received = edges.target >= first
            senders, local = torch.unique(edges.source[received], return_inverse=True)
            edges = DirectedEdges(source=local, target=edges.target[received] - first,
                                  direction=edges.direction[received], label=edges.label[received])
            out = self.convolve(flat.index_select(0, senders), flat[first:], edges).view(newest, batch,
                                                                                          self.hidden_dim)
        return out if self.out_proj is None else self.out_proj(out)

    def convolve(self, senders: Tensor, receivers: Tensor, edges: DirectedEdges) -> Tensor:
        """(N_receivers, k): the convolution at the receiver nodes (N_r, C) of the messages their edges bring from
        the sender nodes (N_s, C) (edges.source indexes senders, edges.target receivers; the same tensor when
        every node is computed)."""
        dim = self.hidden_dim
        transformed = self.weight(senders).view(-1, dim)  # row n * 3 + d: W_d h_n
        logits = self.gate_logits(senders) if self.gates else None
        every_node = senders is receivers
        own_transformed = transformed if every_node else self.weight(receivers).view(-1, dim)
        own_logits = logits if every_node or not self.gates else self.gate_logits(receivers)
        rows = self.bias_rows(edges)
        weights = self.edge_weights(edges, rows, logits, edges.source.numel(), senders.device,
                                    self.gate_dtype(senders))
        # edges: gather W_dir h_u, add b_lab, weight by the gate, sum into the target
        messages = transformed.index_select(0, edges.source * DIRECTIONS + edges.direction)
        messages = messages + self.bias.to(senders.dtype).index_select(0, rows)
        if weights is not None:
            messages = messages * weights.to(senders.dtype).unsqueeze(-1)
        # self loops: every node, never dropped
        own = own_transformed.view(-1, DIRECTIONS, dim)[:, SELF] + self.bias[SELF].to(receivers.dtype)
        if self.gates:
            own_gate = torch.sigmoid(own_logits[:, SELF] + self.gate_bias[SELF].to(own_logits.dtype))
            own = own * own_gate.to(receivers.dtype).unsqueeze(-1)
        return F.relu(own.index_add(0, edges.target, messages))


# ---- the bidirectional GRU over padded batches ------------------------------------------------------------------

class BidirectionalGRU(nn.Module):
    """A one-layer bidirectional GRU whose output has the input's width (C / 2 per direction)."""

    def __init__(self, embed_dim: int):
        super().__init__()
        if embed_dim % 2:
            raise ValueError(f"the bidirectional GRU gives each direction half the width: {embed_dim} is odd")
        self.rnn = nn.GRU(embed_dim, embed_dim // 2, bidirectional=True)

    def forward(self, x: Tensor, padding_mask: Optional[Tensor]) -> Tensor:
        return padded_rnn(self.rnn, x, padding_mask)[0]  # each sentence's own columns, padding 0


# ---- the mechanisms ---------------------------------------------------------------------------------------------

def build_graph_convolution(mechanism, args, embed_dim: int, num_labels: int,
                            chosen_by: str = "--encoder-syntax") -> GraphConvolution:
    labels = not mechanism.option(args, "no_encoder_gcn_labels")
    if not num_labels:
        raise ValueError(f"{chosen_by} {mechanism.name} needs the source label dictionary: train with --task "
                         f"syntax_translation on a data-bin whose source side was parsed")
    return GraphConvolution(embed_dim, num_labels, labels=labels,
                            gates=not mechanism.option(args, "no_encoder_gcn_gates"),
                            edge_dropout=float(mechanism.option(args, "encoder_gcn_edge_dropout")),
                            hidden_dim=mechanism.option(args, "encoder_gcn_dim"))


class _GraphMechanism(SyntaxMechanism):
    needs_source_labels = True  # the GCN's label rows
    features = FEATURES
    options = GraphConvolutionOptions
    default_layers = "0,1,2"

    @classmethod
    def check_args(cls, args):
        rate = float(cls.option(args, "encoder_gcn_edge_dropout"))
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"--encoder-gcn-edge-dropout must be in [0, 1), got {rate}")

    def arcs(self, syntax) -> PieceArcs:
        return piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"],
                          self.gcn.num_labels)


class ResidualGraphConvolution(nn.Module):
    """gcn over a recurrent encoder's states: h~ + gcn(h~), (T, B, C) -> (T, B, C), with gcn's options."""

    def __init__(self, args, embed_dim: int, source_label_count: int = 0):
        super().__init__()
        self.gcn = build_graph_convolution(GraphConvolutionSublayer, args, embed_dim, source_label_count,
                                           chosen_by="--lstm-syntax")

    def forward(self, states: Tensor, syntax, padding_mask: Optional[Tensor]) -> Tensor:
        arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"],
                          self.gcn.num_labels)
        return states + self.gcn(states, arcs)


@register_encoder_mechanism("gcn")
class GraphConvolutionSublayer(_GraphMechanism):
    """The GCN as a sublayer after self-attention: LayerNorm(x + dropout(gcn(x))), or pre-norm."""

    shape = "added_module"
    over_states = ResidualGraphConvolution

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int, source_label_count: int = 0):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.gcn = build_graph_convolution(self, args, embed_dim, source_label_count)
        self.dropout_module = FairseqDropout(float(getattr(args, "dropout", 0.0) or 0.0),
                                             module_name=self.__class__.__name__)
        self.layer_norm = LayerNorm(embed_dim)
        self.normalize_before = bool(getattr(args, "encoder_normalize_before", False))

    def forward(self, x: Tensor, syntax, padding_mask, incremental_state=None) -> Tensor:
        residual = x
        if self.normalize_before:
            x = self.layer_norm(x)
        x = residual + self.dropout_module(self.gcn(x, self.arcs(syntax)))
        if not self.normalize_before:
            x = self.layer_norm(x)
        return x


@register_encoder_mechanism("birnn_gcn")
class BiGRUGraphConvolution(_GraphMechanism):
    """Self-attention replaced by a bidirectional GRU, then the GCN with a residual connection: y + gcn(y)."""

    shape = "self_attention"

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int, source_label_count: int = 0):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.rnn = BidirectionalGRU(embed_dim)
        self.gcn = build_graph_convolution(self, args, embed_dim, source_label_count)

    def forward(self, x: Tensor, syntax, padding_mask, incremental_state=None) -> Tensor:
        states = self.rnn(x, padding_mask)
        return states + self.gcn(states, self.arcs(syntax))


@register_encoder_mechanism("birnn")
class BiGRUSublayer(SyntaxMechanism):
    """Self-attention replaced by a bidirectional GRU and nothing else (birnn_gcn without its graph): no syntax read,
    so the model translates unparsed text."""

    shape = "self_attention"
    default_layers = "0,1,2"

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.rnn = BidirectionalGRU(embed_dim)

    def forward(self, x: Tensor, syntax, padding_mask, incremental_state=None) -> Tensor:
        return self.rnn(x, padding_mask)
