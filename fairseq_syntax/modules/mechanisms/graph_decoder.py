"""Choshen & Abend's GCN decoder (§4 "GCN Encoder", on the target side): graph convolution layers "stacked
immediately above the embedding layer" of the decoder, over the graph generated so far, 2 layers with residual
connections (§5), x <- x + gcn(x) each.

The layer is the encoder side's (graph_convolution.GraphConvolution: labeled, directed, gated; the paper's
equations for gcn, f and g), not a second implementation. Its edges come from the decoder context's prefix graph
(decoder_context.py; the §3 edges: head -> dependent pieces, arc -> dependent pieces, head -> arc), each in the
paper's three types (§4, after Kipf & Welling): self, "Right from the parents" (DOWN: parent -> child) and "Left to
the parent tokens" (UP: child -> parent), labeled with the arc's label. A message may only reach a column that can
use its edge (DecoderContext.visible: the whole prefix graph in BiTran's re-encoded views; in fairseq's causal
decoder the edges the receiving column's own step knew, so training and cached beam search compute the same).

Switches (Table 2's ablations): --no-decoder-gcn-labels (-Labels: one bias per direction), --no-decoder-gcn-gates
(-Gates: every gate 1); --decoder-gcn-layers (2), --decoder-gcn-edge-dropout (0; Bastings et al.'s edge dropout,
which the paper does not mention for the decoder). Options are the decoder's own, so an encoder GCN
(--gcn-*) and a decoder GCN in one model keep their own settings.
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from fairseq.dataclass import FairseqDataclass
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor

from ..decoder_context import DecoderContext
from .graph_convolution import DOWN, UP, DirectedEdges, GraphConvolution, node_index
from ..syntax_mechanism import DECODER_CONTEXT, SyntaxMechanism, register_decoder_mechanism


@dataclass
class DecoderGraphConvolutionOptions(FairseqDataclass):
    decoder_gcn_layers: int = field(default=2, metadata={"help": "GCN decoder: graph convolution layers above the "
                                                                 "decoder embeddings (the paper: 2)"})
    decoder_gcn_edge_dropout: float = field(default=0.0, metadata={
        "help": "GCN decoder: probability of dropping each directed edge in training (self loops are kept)"})
    no_decoder_gcn_labels: bool = field(default=False, metadata={
        "help": "GCN decoder without labels (-Labels): one bias per edge direction"})
    no_decoder_gcn_gates: bool = field(default=False, metadata={
        "help": "GCN decoder without edge gates (-Gates): every gate is 1"})


def prefix_graph_edges(context: DecoderContext, batch_size: int) -> DirectedEdges:
    """Every usable edge of the context's graph as the GCN's directed edges between time-first flat nodes: each
    edge source -> target DOWN (received by the target), and reversed, UP (received by the source)."""
    down = context.visible(receiver="target").nonzero(as_tuple=True)  # (b, target, source)
    up = context.visible(receiver="source").nonzero(as_tuple=True)
    b_down, t_down, s_down = down
    b_up, t_up, s_up = up
    source = torch.cat([node_index(b_down, s_down, batch_size), node_index(b_up, t_up, batch_size)])
    target = torch.cat([node_index(b_down, t_down, batch_size), node_index(b_up, s_up, batch_size)])
    direction = torch.cat([torch.full_like(b_down, DOWN), torch.full_like(b_up, UP)])
    label = torch.cat([context.edge_labels[down], context.edge_labels[up]])
    return DirectedEdges(source=source, target=target, direction=direction, label=label)


@register_decoder_mechanism("gcn")
@with_incremental_state
class DecoderGraphConvolution(SyntaxMechanism):
    shape = "input"
    needs_target_transitions = True
    options = DecoderGraphConvolutionOptions

    @classmethod
    def check_args(cls, args):
        rate = float(cls.option(args, "decoder_gcn_edge_dropout"))
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"--decoder-gcn-edge-dropout must be in [0, 1), got {rate}")
        if int(cls.option(args, "decoder_gcn_layers")) < 1:
            raise ValueError(f"--decoder-gcn-layers must be >= 1, got {cls.option(args, 'decoder_gcn_layers')}")

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int, target_transitions=None):
        super().__init__(args, embed_dim, num_heads, layer_index)
        num_labels = target_transitions.num_labels if target_transitions is not None else 0
        if not num_labels:
            raise ValueError("--decoder-syntax gcn needs the target's arc labels (a --target-transitions data-bin)")
        self.layers = nn.ModuleList(
            GraphConvolution(embed_dim, num_labels, labels=not self.option(args, "no_decoder_gcn_labels"),
                             gates=not self.option(args, "no_decoder_gcn_gates"),
                             edge_dropout=float(self.option(args, "decoder_gcn_edge_dropout")))
            for _ in range(int(self.option(args, "decoder_gcn_layers"))))

    def forward(self, x: Tensor, syntax, padding_mask, incremental_state=None, newest_only: bool = False) -> Tensor:
        """x (T, B, C): the prefix's input vectors -> the GCN's output of every column, or with `newest_only` (a
        cached decoding step) of the newest column only, (1, B, C). A column's output depends only on the edges it
        may use (DecoderContext.visible), which do not change until the prefix is re-encoded, so each layer's
        input of the earlier columns is kept in `incremental_state` (when given) and only the newest column's
        edges are convolved; without kept inputs that fit the prefix every column is computed (and kept)."""
        edges = prefix_graph_edges(syntax[DECODER_CONTEXT], x.size(1))
        kept = self.get_incremental_state(incremental_state, "layer_inputs") if incremental_state is not None else None
        if newest_only and kept is not None and kept["0"].shape[:2] == (x.size(0) - 1, x.size(1)):
            layer_inputs, newest = [torch.cat([kept["0"], x[-1:]])], x[-1:]
            for index, gcn in enumerate(self.layers):
                if index:  # the earlier columns' inputs of this layer are the outputs kept from their steps
                    layer_inputs.append(torch.cat([kept[str(index)], newest]))
                newest = newest + gcn.forward_edges(layer_inputs[-1], edges, newest=1)
        else:
            layer_inputs = []
            for gcn in self.layers:
                layer_inputs.append(x)
                x = x + gcn.forward_edges(x, edges)
            newest = x[-1:] if newest_only else x
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "layer_inputs",
                                       {str(index): inputs for index, inputs in enumerate(layer_inputs)})
        return newest

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        kept = self.get_incremental_state(incremental_state, "layer_inputs")
        if kept is not None:
            self.set_incremental_state(incremental_state, "layer_inputs",
                                       {index: inputs.index_select(1, new_order) for index, inputs in kept.items()})

    def replace_incremental_rows(self, incremental_state, rows: Tensor, rows_state) -> None:
        """The inputs kept for the rows `rows` replaced by those kept in `rows_state`, an incremental state of those
        rows alone over as many columns (BiTran's --reencode-at-arcs re-encodes some rows of a decoding step)."""
        kept = self.get_incremental_state(incremental_state, "layer_inputs")
        replacement = self.get_incremental_state(rows_state, "layer_inputs")
        self.set_incremental_state(incremental_state, "layer_inputs", {
            index: inputs.index_copy(1, rows, replacement[index].to(inputs)) for index, inputs in kept.items()})
