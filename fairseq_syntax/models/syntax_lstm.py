"""Recurrent NMT with a syntax layer over the bidirectional encoder: the "Bi-RNN + GCN" (Bastings et al., 2017) and
"Bi-RNN + RGSE" rows of Ding & Tao's Table 2 (RGSE paper §3.1, §4.1), on fairseq's `lstm` model.

The model `syntax_lstm` is fairseq's LSTMModel whose encoder runs fairseq's (bi)LSTM and then, over its outputs,
the syntax layer chosen by --lstm-syntax:
  none   nothing: the encoder computes what fairseq's LSTMEncoder computes
  gcn    h~ + gcn(h~): the gated, labeled, directed GCN of fairseq_syntax/modules/graph_convolution.py (edge dropout,
         --no-encoder-gcn-labels, --no-encoder-gcn-gates, --encoder-gcn-edge-dropout) with a residual connection, as the
         project's
         `birnn_gcn` mechanism (the RGSE paper's Transformer reimplementation of "BiRNN+GCN") puts it over its BiGRU
  rgse   the RGSE of fairseq_syntax/modules/rgse.py over h~ (--rgse-variant, --rgse-integration, --rgse-residual):
         its edge integration phi, its forward (and backward) GRUs s of C units, its residual tau with h~ and its
         projection back to C, i.e. `RecurrentGraphSyntaxEncoder.graph_states` and `.combine` on the given h~. The
         `rgse` Transformer mechanism computes its own h~ with a BiGRU; here h~ is the BiLSTM's output, so that
         BiGRU is not built (`RGSEOverStates`).

What is what:
  h~       the paper's "previous encoder" states, h~_t = [h->_t; h<-_t]: the top layer of fairseq's bidirectional
           LSTM, (T, B, C) with C = 2 x --encoder-hidden-size, before any dropout (the syntax layer reads them clean)
  output   the syntax layer's output, then the encoder's output dropout (--encoder-dropout-out; fairseq applies it
           to the BiLSTM's outputs), padding columns 0: what the decoder's attention reads. The decoder is
           fairseq's LSTMDecoder, unchanged: it sees the syntax only through attention (and the attention context it
           feeds back as input, Luong's input feeding).
  final    final_hiddens / final_cells are the BiLSTM's own final states (forward and backward concatenated per
           layer, as fairseq's LSTMEncoder returns them), NOT passed through the syntax layer: the decoder
           initialises its hidden and cell states from them (projected when 2 x encoder hidden != decoder hidden)
           exactly as in the stock model. A per-token graph layer has no sentence state to offer, and neither paper
           says the decoder's initial state sees the syntax.
The encoder returns fairseq's tuple (x, final_hiddens, final_cells, encoder_padding_mask), x (T, B, C) and the mask
(T, B), so fairseq's decoder, beam search (reorder_encoder_out) and criteria work unchanged. Unlike fairseq's
LSTMEncoder, which turns fairseq's left-padded source into right padding for packing and returns its outputs in that
layout, this encoder returns them in the columns of `src_tokens` (left, right or no padding alike), the columns the
syntax features index: the packing is done on a per-row permutation of the columns (real columns first, as fairseq's
padding conversion does for a left-padded row) and undone afterwards. The decoder does not care about the layout
(it attends under the returned mask); attention weights then line up with the source tokens.

Syntax reaches the encoder as forward arguments: fairseq calls `encoder(**net_input)` minus prev_output_tokens, so
src_parent_first, src_labels and src_word_ids (declared in `syntax_features`, delivered by the syntax_translation
task in training, fairseq-generate and fairseq-interactive alike) arrive as keyword arguments. The number of source
labels (the GCN's bias rows) is the task's source label dictionary, recorded in the args as `source_label_count`
by `build_model`, as the syntax transformer does.

Differences from the paper (Ding & Tao follow Bahdanau et al.'s recurrent NMT, with GRUs, in Bastings et al.'s
setting for NC-v11):
  - LSTM cells (fairseq's `lstm`) instead of GRUs in the BiRNN encoder and the decoder; the RGSE layer itself keeps
    the paper's GRUs (rgse.py).
  - fairseq's decoder: an LSTM (--decoder-layers, stacked) with Luong-style input feeding and dot-product attention
    over a projection of the hidden state (fairseq's AttentionLayer), the output projected to the vocabulary,
    instead of Bahdanau's additive attention and a GRU decoder with a deep output; its initial state is the
    (projected) final BiLSTM state rather than a learned tanh layer (Bahdanau et al.: over the backward RNN's first
    state).
  - sizes: see fairseq_syntax/models/lstm_presets.py (base: embeddings 256, 512 units per encoder direction so
    h~ has 1024, decoder 512, Bastings et al.'s recurrent sizes).
"""
import argparse
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model
from fairseq.models.lstm import LSTMEncoder, LSTMModel
from omegaconf import OmegaConf
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..modules.dependency_graph import piece_arcs
from ..modules.graph_convolution import (
    FEATURES, GraphConvolution, GraphConvolutionOptions, GraphConvolutionSublayer, upgrade_option_names,
)
from ..modules.rgse import RecurrentGraphSyntaxEncoder, RGSEOptions

SYNTAX_LAYERS = ("none", "gcn", "rgse")


class ResidualGraphConvolution(nn.Module):
    """h~ + gcn(h~) over the states of the recurrent encoder, (T, B, C) -> (T, B, C)."""

    def __init__(self, args, embed_dim: int):
        super().__init__()
        GraphConvolutionSublayer.check_args(args)  # the GCN's options are those of the `gcn` mechanism

        def option(name):
            return GraphConvolutionSublayer.option(args, name)

        num_labels = getattr(args, "source_label_count", None)
        if not num_labels:
            raise ValueError("--lstm-syntax gcn needs the source label dictionary: train with --task "
                             "syntax_translation on a data-bin whose source side was parsed")
        self.gcn = GraphConvolution(embed_dim, num_labels, labels=not option("no_encoder_gcn_labels"),
                                    gates=not option("no_encoder_gcn_gates"),
                                    edge_dropout=float(option("encoder_gcn_edge_dropout")))

    def forward(self, states: Tensor, syntax: Dict[str, Tensor], padding_mask: Optional[Tensor]) -> Tensor:
        arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"],
                          self.gcn.num_labels)
        return states + self.gcn(states, arcs)


class RGSEOverStates(RecurrentGraphSyntaxEncoder):
    """RGSE (rgse.py) over given states h~ (T, B, C): the mechanism's phi, s and tau, without the BiGRU that the
    Transformer mechanism runs to make h~ (its two GRUs are not kept: no parameters of them)."""

    def __init__(self, args, embed_dim: int):
        super().__init__(args, embed_dim, num_heads=1, layer_index=0)
        del self.context_forward, self.context_backward  # h~ is the recurrent encoder's output

    def forward(self, states: Tensor, syntax: Dict[str, Tensor], padding_mask: Optional[Tensor]) -> Tensor:
        context = states.transpose(0, 1)  # (B, T, C)
        out = self.combine(self.graph_states(context, syntax, padding_mask), context)
        return out.transpose(0, 1)


def build_syntax_layer(args, embed_dim: int) -> Optional[nn.Module]:
    name = str(getattr(args, "lstm_syntax", None) or "none")
    if name == "gcn":
        return ResidualGraphConvolution(args, embed_dim)
    if name == "rgse":
        return RGSEOverStates(args, embed_dim)
    if name != "none":
        raise ValueError(f"--lstm-syntax {name!r}: not one of {', '.join(SYNTAX_LAYERS)}")
    return None


class SyntaxLSTMEncoder(LSTMEncoder):
    """fairseq's LSTM encoder, then the syntax layer over its outputs (module docstring). The syntax layer is built
    here, in the constructor, so that whatever wraps the encoder sees its parameters."""

    def __init__(self, args, dictionary, **kwargs):
        super().__init__(dictionary, **kwargs)
        self.syntax_layer = build_syntax_layer(args, self.output_units)
        self.syntax_features: Tuple[str, ...] = FEATURES if self.syntax_layer is not None else ()

    def recurrent_states(self, src_tokens: Tensor, padding_mask: Tensor,
                         enforce_sorted: bool) -> Tuple[Tensor, Tensor, Tensor]:
        """fairseq's LSTMEncoder.forward up to its output dropout, in the columns of src_tokens: h~ (T, B, C), 0 at
        padding, and the final hidden and cell states (layers, B, directions x hidden)."""
        bsz, seqlen = src_tokens.size()
        x = self.dropout_in_module(self.embed_tokens(src_tokens)).transpose(0, 1)  # T x B x C
        # packing needs the lengths on the CPU: the one device sync of the encoder, which also tells the padding
        lengths = (~padding_mask).sum(dim=1).cpu()
        order = None
        if bool((lengths < seqlen).any()):
            # each row's real columns first, in order (fairseq converts left padding to right padding to pack)
            order = torch.argsort(padding_mask.to(torch.uint8), dim=1, stable=True).t().unsqueeze(-1)  # T x B x 1
            x = x.gather(0, order.expand_as(x))
        packed = pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
        directions = 2 if self.bidirectional else 1
        h0 = x.new_zeros(directions * self.num_layers, bsz, self.hidden_size)
        c0 = x.new_zeros(directions * self.num_layers, bsz, self.hidden_size)
        packed_outs, (final_hiddens, final_cells) = self.lstm(packed, (h0, c0))
        x, _ = pad_packed_sequence(packed_outs, total_length=seqlen)  # zeros past each length
        if order is not None:
            x = x.new_zeros(x.shape).scatter(0, order.expand_as(x), x)
        if self.bidirectional:
            final_hiddens = self.combine_bidir(final_hiddens, bsz)
            final_cells = self.combine_bidir(final_cells, bsz)
        return x, final_hiddens, final_cells

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, enforce_sorted: bool = True, **features):
        """src_tokens (B, T), padded on either side; src_lengths (B) (the packing uses each row's own count of
        non-padding tokens, which is what fairseq passes); `features`: the batch's syntax features (net_input)."""
        missing = [name for name in self.syntax_features if name not in features]
        if missing:
            raise ValueError(f"the encoder's syntax layer needs {missing} in net_input: train with --task "
                             f"syntax_translation on a data-bin whose source side was parsed")
        padding_mask = src_tokens.eq(self.padding_idx)  # B x T
        x, final_hiddens, final_cells = self.recurrent_states(src_tokens, padding_mask, enforce_sorted)
        if self.syntax_layer is not None:
            syntax = {name: features[name] for name in self.syntax_features}
            x = self.syntax_layer(x, syntax, padding_mask)
        x = self.dropout_out_module(x)
        x = x.masked_fill(padding_mask.t().unsqueeze(-1), 0.0)
        return x, final_hiddens, final_cells, padding_mask.t()


@register_model("syntax_lstm")
class SyntaxLSTMModel(LSTMModel):
    """fairseq's LSTM model with a syntax layer over its encoder (module docstring); --lstm-syntax none is the
    stock model."""

    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        parser.add_argument("--lstm-syntax", choices=SYNTAX_LAYERS,
                            help="syntax layer over the recurrent encoder's outputs: gcn (h~ + GCN(h~), Bastings et "
                                 "al.) or rgse (Ding & Tao's RGSE over h~)")
        # the options of the gcn and rgse mechanisms, without argparse defaults (presets fill what is unset)
        gen_parser_from_dataclass(parser, GraphConvolutionOptions(), delete_default=True)
        gen_parser_from_dataclass(parser, RGSEOptions(), delete_default=True)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
        args.lstm_syntax = getattr(args, "lstm_syntax", None) or "none"
        upgrade_option_names(args)
        # the source label dictionary's size (the GCN's bias rows), recorded in the checkpoint's args
        lang = getattr(task.cfg, "source_lang", None)
        label_dicts = getattr(task, "label_dicts", {})
        if lang in label_dicts and getattr(args, "source_label_count", None) is None:
            args.source_label_count = len(label_dicts[lang])
        model = super().build_model(args, task)  # fairseq's embeddings, encoder and decoder
        stock = model.encoder
        encoder = SyntaxLSTMEncoder(
            args, task.source_dictionary, embed_dim=args.encoder_embed_dim, hidden_size=args.encoder_hidden_size,
            num_layers=args.encoder_layers, dropout_in=args.encoder_dropout_in, dropout_out=args.encoder_dropout_out,
            bidirectional=args.encoder_bidirectional, pretrained_embed=stock.embed_tokens,
            max_source_positions=stock.max_source_positions)
        # fairseq's own LSTM as it was initialised: with the same seed, everything but the syntax layer starts as
        # in the stock model
        encoder.lstm = stock.lstm
        model.encoder = encoder
        return model

    @property
    def syntax_features(self):
        """Batch features the model needs (the task asks the data-bin for them)."""
        return set(self.encoder.syntax_features)

    @property
    def optional_syntax_features(self):
        return set()

    def forward(self, src_tokens, src_lengths, prev_output_tokens, incremental_state=None, **features):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, **features)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state)
