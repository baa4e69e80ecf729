"""RGSE: the Recurrent Graph Syntax Encoder (Ding & Tao), replacing the self-attention of the lower encoder layers
of the Transformer "upon a BiGRU" (paper §3.2, Fig. 4).

In a layer that carries it, the self-attention sublayer becomes (x is the layer input, after the pre-norm if any):
  1. h~ = BiGRU(x): a forward and a backward GRU of C/2 units each, concatenated per position (h~_t = [h->_t; h<-_t],
     paper §2.1.1), so h~ has the model's size C. These are "the previous encoder's states" of the paper.
  2. phi: each node (a source piece, EOS included) integrates its incoming edges, the h~ of their source nodes.
  3. s-> and s<-: GRUs of C units over phi, forward and backward (the paper's z/r/s'/s equations), so s + h~ is
     defined.
  4. tau: the residual combination of s and h~ per direction, concatenated, and a linear projection back to C: the
     sublayer output, which the layer puts through dropout, its residual and its layer norm.

Edges (paper §3.1). "For any pair of dependent words w_i |-> w_j, nodes s_j will be activated; concurrently, two
edges xi(h~_i, s->_j) and xi(h~_i, s<-_j) will be generated", and in the paper's example ("monkey |-> likes",
"eating |-> likes", "bananas |-> eating") the node of "likes" receives "monkey", "likes" itself and "eating": w_i is
the DEPENDENT and w_j its HEAD. So the incoming edges of node j are a self edge (the current word, from h~_j) and one
edge from each of its dependents i (from h~_i). Between subword pieces the arcs are those of
`dependency_graph.piece_arcs` (one rule for every graph mechanism; pieces inherit their word's arcs, as the paper
keeps a word's label on each of its BPE pieces): the first piece of a head word is the head of every piece of each
of its dependent words, and the first piece of a word is the head of each later piece of the same word. For RGSE
every arc head -> dependent of piece_arcs gives an edge from h~[dependent] into node head, the same reading for
both kinds of arcs. So the first piece of a word receives itself, the word's later pieces and every piece of its
dependent words; a later piece of a word and EOS receive only themselves (a later piece still reaches its word
through the recurrence and through its own edge into the first piece). Labels are not used (RGSE has none).

Past and future (§3.1, (i)-(iv)). An edge from i into node j is "past" for the forward direction when i < j (an
earlier column of the same sentence) and "future" when i > j; for the backward direction, which reads the sentence
from its end, the reverse. Variants (`--rgse-variant`):
  forward     a forward RGSE only, over all incoming edges
  bi-total    forward and backward, both over all incoming edges (the paper's best; the default)
  bi-past     each direction reads only its past edges and the self edge
  bi-future   each direction reads only its future edges and the self edge

Integration phi (`--rgse-integration`), over the incoming edges a direction reads, N_in(j) (self included):
  sum       sum_i h~_i
  average   1/|N_in(j)| sum_i h~_i
  gated     sum_i g_i h~_i with an edge gate g_i = sigmoid(w . h~_i + b), a scalar per edge, its parameters w (C) and
            b per direction. The paper writes "sum W_{h_xi} . h_xi" with "W a trainable gating parameter" and gives no
            more; this scalar sigmoid gate of the edge's source state is this project's reading (the paper's best
            setting).
phi depends only on h~, so it is computed for every node of the batch and both directions at once (one index_add_
over all edges; no loop over tokens or edges).

Recurrence. s-> and s<- are torch's fused GRU (nn.GRU) over phi. nn.GRU computes the candidate state as
tanh(W phi + b + r * (U s_{t-1} + b')) (cuDNN's form, reset gate after the recurrent product, with biases), while the
paper writes tanh(W_h phi + U_h (r s_{t-1})) (Cho et al.'s form, reset before the product, no biases); z, r and
s_t = z s_{t-1} + (1 - z) s'_t are the same. Each direction has its own weights (the paper's bi-RGSE models have more
parameters than forward-RGSE, Table 2). Padding: each sentence's real columns (EOS included) are moved to the front
of its row in sentence order (forward) or in reverse order (backward), a GRU runs over that (padding is read only
after the whole sentence and never reaches it), and the outputs go back to their columns. So left- and right-padded
batches give the same result, and the backward direction starts at each sentence's last real token. The BiGRU of
step 1 runs the same way. Initial states are zero.

Residual tau (`--rgse-residual`), per direction d (s_d = s-> or s<-):
  normal  s_d + h~                                         (tau_n = concat(s-> + h~, s<- + h~))
  gated   lambda_d s_d + (1 - lambda_d) h~, lambda_d = sigmoid(omega_d . s_d + psi_d . h~)   (tau_g)
omega_d and psi_d are vectors (C), so lambda_d is one scalar per position and direction: "." read as the dot
product, with no bias, as the paper writes it. The bidirectional concatenation (2C) is projected back to C by a
linear layer (like self-attention's output projection); the forward variant's tau is C already and gets a C -> C
projection all the same, so every variant hands the residual a learned projection as self-attention does. Padding
columns of the output are 0.

Layers: paper Table 1 puts RGSE in encoder layers [1-3] of 6 (0-based "0,1,2", `default_layers`); any layers by
--encoder-syntax-layers. The defaults are the paper's best: bi-total, gated integration, gated residual.

Over a recurrent encoder's states (`over_states`, the syntax_lstm model's --lstm-syntax rgse): h~ is the encoder's
output, so phi, s and tau run on it and the BiGRU of step 1 is not built (`RGSEOverStates`).
"""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from torch import Tensor

from ..dependency_graph import piece_arcs
from ..syntax_mechanism import SyntaxMechanism, register_encoder_mechanism

VARIANTS = ("forward", "bi-total", "bi-past", "bi-future")
INTEGRATIONS = ("sum", "average", "gated")
RESIDUALS = ("normal", "gated")
FEATURES = ("src_parent_first", "src_labels", "src_word_ids")


@dataclass
class RGSEOptions(FairseqDataclass):
    rgse_variant: ChoiceEnum(VARIANTS) = field(
        default="bi-total", metadata={"help": "forward (one forward RGSE, all edges), bi-total (both directions, all "
                                              "edges; the paper's best), bi-past or bi-future (each direction reads "
                                              "only its past or only its future edges, and the self edge)"})
    rgse_integration: ChoiceEnum(INTEGRATIONS) = field(
        default="gated", metadata={"help": "integration of a node's incoming edges: sum, average, or gated (a "
                                           "sigmoid gate per edge; the paper's best)"})
    rgse_residual: ChoiceEnum(RESIDUALS) = field(
        default="gated", metadata={"help": "residual of the RGSE states and the BiGRU states: normal (s + h) or "
                                           "gated (lambda s + (1 - lambda) h; the paper's best)"})
    rgse_dim: Optional[int] = field(
        default=None, metadata={"help": "RGSE width r: h~ (r / 2 per BiGRU direction), phi and s have r dims, "
                                        "the projection maps directions x r back to the model's C; default C (the "
                                        "*_paper_params presets set it to reach the paper's parameter counts)"})


def directions_of(variant: str) -> int:
    return 1 if variant == "forward" else 2


def sentence_orders(padding_mask: Optional[Tensor], batch: int, width: int, device) -> Tuple[Tensor, Tensor]:
    """(B, T) column permutations: `forward` lists each row's real columns in sentence order, then its padding;
    `backward` its real columns from the last to the first, then its padding."""
    steps = torch.arange(width, device=device).expand(batch, width)
    if padding_mask is None:
        return steps, steps.flip(1)
    padding_mask = padding_mask.bool()
    forward = (padding_mask.long() * width + steps).argsort(dim=1)  # real columns first, in order, then padding
    lengths = (~padding_mask).sum(1, keepdim=True)
    reversed_steps = torch.where(steps < lengths, lengths - 1 - steps, steps)
    return forward, forward.gather(1, reversed_steps)


def run_in_order(gru: nn.GRU, inputs: Tensor, order: Tensor) -> Tensor:
    """A batch-first GRU over each row of `inputs` (B, T, F) read in the column order `order` (B, T); its outputs
    (B, T, H) back in the columns they belong to."""
    aligned = inputs.gather(1, order.unsqueeze(-1).expand(-1, -1, inputs.size(-1)))
    outputs, _ = gru(aligned)
    inverse = order.argsort(dim=1)
    return outputs.gather(1, inverse.unsqueeze(-1).expand(-1, -1, outputs.size(-1)))


def incoming_edges(syntax, padding_mask: Optional[Tensor], width: int):
    """Every edge of the batch as (sentence, source column, node column, is_self), all (E,): one from each dependent
    into its head (piece_arcs' arcs head -> dependent, reversed) and a self edge for every column; `real` (B, T)
    says which columns are tokens (the self edges of padding columns carry weight 0)."""
    word_ids = syntax["src_word_ids"]
    arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], word_ids, 0)  # labels are not used
    batch = word_ids.size(0)
    rows = torch.arange(batch, device=word_ids.device).repeat_interleave(width)
    columns = torch.arange(width, device=word_ids.device).repeat(batch)
    sentence = torch.cat([arcs.batch, rows])
    source = torch.cat([arcs.dependent, columns])
    node = torch.cat([arcs.head, columns])
    is_self = torch.cat([torch.zeros_like(arcs.batch, dtype=torch.bool), torch.ones_like(rows, dtype=torch.bool)])
    real = (torch.ones(batch, width, dtype=torch.bool, device=word_ids.device) if padding_mask is None
            else ~padding_mask.bool())
    return sentence, source, node, is_self, real


def edge_reading(variant: str, source: Tensor, node: Tensor, is_self: Tensor) -> Tensor:
    """(E, directions) bool: which edges each direction reads. For the forward direction an edge is past when its
    source column is before the node, future when after; for the backward direction the reverse. The self edge is
    read by every direction."""
    if variant in ("forward", "bi-total"):
        return torch.ones(source.numel(), directions_of(variant), dtype=torch.bool, device=source.device)
    before, after = source < node, source > node
    forward_reads, backward_reads = (before, after) if variant == "bi-past" else (after, before)
    return torch.stack([forward_reads | is_self, backward_reads | is_self], dim=1)


@register_encoder_mechanism("rgse")
class RecurrentGraphSyntaxEncoder(SyntaxMechanism):
    shape = "self_attention"
    features = FEATURES
    default_layers = "0,1,2"
    options = RGSEOptions

    @classmethod
    def check_args(cls, args):
        for name, choices in (("rgse_variant", VARIANTS), ("rgse_integration", INTEGRATIONS),
                              ("rgse_residual", RESIDUALS)):
            value = str(cls.option(args, name))
            if value not in choices:
                raise ValueError(f"--{name.replace('_', '-')} {value!r}: not one of {', '.join(choices)}")

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.check_args(args)
        width = self.option(args, "rgse_dim") or embed_dim  # r
        if width < 2 or width % 2:
            raise ValueError(f"RGSE's BiGRU has r / 2 units per direction: its width r (--rgse-dim, default the "
                             f"model's {embed_dim}) must be even and positive, got {width}")
        self.variant = str(self.option(args, "rgse_variant"))
        self.integration = str(self.option(args, "rgse_integration"))
        self.residual = str(self.option(args, "rgse_residual"))
        self.embed_dim, self.width = embed_dim, width
        self.num_directions = directions_of(self.variant)
        # h~: the BiGRU the RGSE sits upon (r/2 per direction)
        self.context_forward = nn.GRU(embed_dim, width // 2, batch_first=True)
        self.context_backward = nn.GRU(embed_dim, width // 2, batch_first=True)
        # s-> (and s<-): the RGSE nodes, r units each
        self.graph_forward = nn.GRU(width, width, batch_first=True)
        self.graph_backward = nn.GRU(width, width, batch_first=True) if self.num_directions == 2 else None
        # gated phi: w . h~_i + b per direction
        self.edge_gate = nn.Linear(width, self.num_directions) if self.integration == "gated" else None
        if self.residual == "gated":  # gated tau: lambda_d = sigmoid(omega_d . s_d + psi_d . h~)
            bound = width ** -0.5
            self.residual_omega = nn.Parameter(torch.empty(self.num_directions, width).uniform_(-bound, bound))
            self.residual_psi = nn.Parameter(torch.empty(self.num_directions, width).uniform_(-bound, bound))
        self.out_proj = nn.Linear(self.num_directions * width, embed_dim)
        nn.init.xavier_uniform_(self.out_proj.weight)
        nn.init.zeros_(self.out_proj.bias)

    # ---- the stages, batch-first (B, T, C) ----------------------------------------------------------------------

    def context(self, x: Tensor, orders: Tuple[Tensor, Tensor]) -> Tensor:
        """h~ = [h->; h<-], (B, T, r), from the layer input (B, T, C)."""
        forward, backward = orders
        return torch.cat([run_in_order(self.context_forward, x, forward),
                          run_in_order(self.context_backward, x, backward)], dim=-1)

    def integrate(self, states: Tensor, syntax, padding_mask: Optional[Tensor]) -> Tensor:
        """phi of every node for every direction, (B, T, directions, C), from h~ (B, T, C)."""
        batch, width, dim = states.shape
        sentence, source, node, is_self, real = incoming_edges(syntax, padding_mask, width)
        reads = edge_reading(self.variant, source, node, is_self)
        # a padding column's self edge is read by nobody; arcs only join pieces
        reads = reads & real.reshape(-1)[sentence * width + source].unsqueeze(1)
        weights = reads.to(states.dtype)  # (E, D)
        counts = weights
        flat = states.reshape(batch * width, dim)
        source_rows, node_rows = sentence * width + source, sentence * width + node
        if self.edge_gate is not None:
            weights = weights * torch.sigmoid(self.edge_gate(flat))[source_rows]
        messages = flat[source_rows].unsqueeze(1) * weights.unsqueeze(-1)  # (E, D, C)
        # in the messages' dtype: under CUDA autocast the gate is float32 while h~ (a GRU output) is float16
        phi = messages.new_zeros(batch * width, self.num_directions, dim).index_add_(0, node_rows, messages)
        if self.integration == "average":
            totals = counts.new_zeros(batch * width, self.num_directions).index_add_(0, node_rows, counts)
            phi = phi / totals.clamp(min=1).unsqueeze(-1)
        return phi.view(batch, width, self.num_directions, dim)

    def recur(self, phi: Tensor, orders: Tuple[Tensor, Tensor]) -> Tensor:
        """s-> (and s<-) over phi: (B, T, directions, C)."""
        states = [run_in_order(self.graph_forward, phi[:, :, 0], orders[0])]
        if self.graph_backward is not None:
            states.append(run_in_order(self.graph_backward, phi[:, :, 1], orders[1]))
        return torch.stack(states, dim=2)

    def combine(self, graph_states: Tensor, context: Tensor) -> Tensor:
        """tau and the projection: (B, T, directions, C) and h~ (B, T, C) -> (B, T, C)."""
        context = context.unsqueeze(2)
        if self.residual == "gated":
            gate = torch.sigmoid((graph_states * self.residual_omega).sum(-1) + (context * self.residual_psi).sum(-1))
            combined = gate.unsqueeze(-1) * graph_states + (1 - gate.unsqueeze(-1)) * context
        else:
            combined = graph_states + context
        return self.out_proj(combined.flatten(2))

    def graph_states(self, context: Tensor, syntax, padding_mask: Optional[Tensor]) -> Tensor:
        """s (B, T, directions, C) from h~ (B, T, C): the RGSE proper, without the BiGRU and tau."""
        batch, width, _ = context.shape
        orders = sentence_orders(padding_mask, batch, width, context.device)
        return self.recur(self.integrate(context, syntax, padding_mask), orders)

    def forward(self, x: Tensor, syntax, key_padding_mask: Optional[Tensor], incremental_state=None) -> Tensor:
        """x: (T, B, C), time first as in fairseq -> the sublayer output (T, B, C)."""
        inputs = x.transpose(0, 1)
        batch, width, _ = inputs.shape
        orders = sentence_orders(key_padding_mask, batch, width, x.device)
        context = self.context(inputs, orders)
        graph_states = self.recur(self.integrate(context, syntax, key_padding_mask), orders)
        out = self.combine(graph_states, context)
        if key_padding_mask is not None:
            out = out.masked_fill(key_padding_mask.bool().unsqueeze(-1), 0.0)
        return out.transpose(0, 1)


class RGSEOverStates(RecurrentGraphSyntaxEncoder):
    """RGSE over given states h~ (T, B, C): the mechanism's phi, s and tau, without the BiGRU that the Transformer
    mechanism runs to make h~ (its two GRUs are not kept: no parameters of them)."""

    def __init__(self, args, embed_dim: int):
        width = getattr(args, "rgse_dim", None)
        if width is not None and width != embed_dim:  # h~ is given: its width is the encoder's
            raise ValueError(f"--rgse-dim {width}: over the recurrent encoder, RGSE has the width of its states h~ "
                             f"({embed_dim}); leave --rgse-dim out")
        super().__init__(args, embed_dim, num_heads=1, layer_index=0)
        del self.context_forward, self.context_backward  # h~ is the recurrent encoder's output

    def forward(self, states: Tensor, syntax: Dict[str, Tensor], padding_mask: Optional[Tensor]) -> Tensor:
        context = states.transpose(0, 1)  # (B, T, C)
        out = self.combine(self.graph_states(context, syntax, padding_mask), context)
        return out.transpose(0, 1)


RecurrentGraphSyntaxEncoder.over_states = RGSEOverStates
