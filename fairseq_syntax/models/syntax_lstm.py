"""Recurrent NMT with a syntax layer over the bidirectional encoder: the "Bi-RNN (2 layers encoder)", "Bi-RNN + GCN"
(Bastings et al., 2017) and "Bi-RNN + RGSE" rows of Ding & Tao's Table 2 (RGSE paper §3.1, §4.1).

The model `syntax_lstm` comes in two forms, chosen by --rnn-cell (the presets, fairseq_syntax/models/presets/lstm.py,
default to gru):
  gru    the paper's: Bahdanau et al.'s RNNsearch, as Ding & Tao follow it. A bidirectional GRU encoder
         (--encoder-layers, --encoder-hidden-size per direction) and the GRU decoder with additive attention and a
         maxout deep output of fairseq_syntax/models/gru_decoder.py (one layer; its initial state tanh(W_s h<-_1)
         over the encoder's backward state at the first source token).
  lstm   fairseq's `lstm` model: a (bi)LSTM encoder and fairseq's LSTMDecoder (stacked LSTMs, --decoder-layers =
         --encoder-layers, Luong-style input feeding, dot-product attention over a projection of the hidden state,
         its initial states the encoder's final states, projected when 2 x encoder hidden != decoder hidden). With
         --lstm-syntax none the model is fairseq's `lstm`, parameter for parameter.
In both, the encoder runs its RNN and then, over the RNN's outputs, the syntax layer chosen by --lstm-syntax (the
option keeps its name in the GRU form): none, or an encoder mechanism of the registry (modules/syntax_mechanism.py) that
declares a form over a recurrent encoder's states (`over_states`), with that mechanism's options and features:
  none   nothing
  gcn    h~ + gcn(h~): the gated, labeled, directed GCN of modules/mechanisms/graph_convolution.py (edge dropout,
         --no-encoder-gcn-labels, --no-encoder-gcn-gates, --encoder-gcn-edge-dropout) with a residual connection, as
         the project's `birnn_gcn` mechanism (the RGSE paper's Transformer reimplementation of "BiRNN+GCN") puts it
         over its BiGRU (`ResidualGraphConvolution`)
  rgse   the RGSE of modules/mechanisms/rgse.py over h~ (--rgse-variant, --rgse-integration, --rgse-residual):
         its edge integration phi, its forward (and backward) GRUs s of C units, its residual tau with h~ and its
         projection back to C, i.e. `RecurrentGraphSyntaxEncoder.graph_states` and `.combine` on the given h~. The
         `rgse` Transformer mechanism computes its own h~ with a BiGRU; here h~ is the encoder RNN's output, so that
         BiGRU is not built (`RGSEOverStates`).

What is what:
  h~       the paper's "previous encoder" states, h~_t = [h->_t; h<-_t]: the top layer of the bidirectional RNN,
           (T, B, C) with C = 2 x --encoder-hidden-size, before any dropout (the syntax layer reads them clean)
  output   the syntax layer's output, then the encoder's output dropout (--encoder-dropout-out; fairseq applies it
           to the BiLSTM's outputs), padding columns 0: the annotations the decoder's attention reads. The decoder
           sees the syntax only through attention (and, in the LSTM form, the attention output it feeds back).
  final    final_hiddens (and final_cells, LSTM; None for the GRU) are the RNN's own final states (forward and
           backward concatenated per layer, as fairseq's LSTMEncoder returns them), NOT passed through the syntax
           layer: the decoder's initial state comes from them (GRU: the top layer's backward half, h<-_1). A
           per-token graph layer has no sentence state to offer, and neither paper says the decoder's initial state
           sees the syntax.
The encoder returns fairseq's tuple (x, final_hiddens, final_cells, encoder_padding_mask), x (T, B, C) and the mask
(T, B), so fairseq's decoder, beam search (reorder_encoder_out) and criteria work unchanged. Unlike fairseq's
LSTMEncoder, which turns fairseq's left-padded source into right padding for packing and returns its outputs in that
layout, this encoder returns them in the columns of `src_tokens` (left, right or no padding alike), the columns the
syntax features index (modules/recurrent.py, `padded_rnn`). The decoder does not care about the layout (it attends
under the returned mask); attention weights then line up with the source tokens.

Syntax reaches the encoder as forward arguments: fairseq calls `encoder(**net_input)` minus prev_output_tokens, so
the mechanism's features (its `features_for(args)`: src_parent_first, src_labels and src_word_ids for gcn and rgse;
the model's `syntax_features`, delivered by the syntax_translation task in training, fairseq-generate and
fairseq-interactive alike) arrive as keyword arguments. The number of source labels (the GCN's bias rows) is read
from the task's source dictionary (data/vocabulary.py), as the syntax transformer reads it; nothing is written into
the args.

Differences from the paper (Ding & Tao follow Bahdanau et al.'s recurrent NMT, with GRUs, in Bastings et al.'s
setting for NC-v11):
  - the GRU form: the choices gru_decoder.py lists where the papers are silent (torch's GRU puts the reset gate after
    the recurrent product, in the encoder as in the decoder); the encoder's weights are initialised as fairseq's
    LSTM's, uniform(-0.1, 0.1).
  - the LSTM form: LSTM cells and fairseq's decoder (above) instead of GRUs and Bahdanau's decoder.
  - sizes: see fairseq_syntax/models/presets/lstm.py (base: embeddings 256, 512 units per encoder direction so
    h~ has 1024, decoder 512, Bastings et al.'s recurrent sizes).
"""
import argparse
from typing import Optional, Tuple, Type

import torch.nn as nn
from fairseq import utils
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model
from fairseq.models.lstm import (
    DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS, Embedding, LSTMEncoder, LSTMModel, base_architecture,
)
from omegaconf import OmegaConf
from torch import Tensor

from ..data.vocabulary import label_count
from ..modules.mechanisms.graph_convolution import ResidualGraphConvolution, upgrade_option_names  # noqa: F401 (re-exported)
from ..modules.syntax_mechanism import ENCODER_MECHANISMS, SyntaxMechanism
from ..modules.recurrent import padded_rnn
from ..modules.mechanisms.rgse import RGSEOverStates  # noqa: F401 (re-exported)
from .gru_decoder import BahdanauGRUDecoder

RNN_CELLS = ("gru", "lstm")


def syntax_layers() -> Tuple[str, ...]:
    """--lstm-syntax's choices: none and the registered encoder mechanisms with a form over states."""
    return ("none", *sorted(name for name, mechanism in ENCODER_MECHANISMS.items()
                            if mechanism.over_states is not None))


def syntax_mechanism(args) -> Optional[Type[SyntaxMechanism]]:
    """The encoder mechanism --lstm-syntax names (None for none), its options checked."""
    name = str(getattr(args, "lstm_syntax", None) or "none")
    if name == "none":
        return None
    mechanism = ENCODER_MECHANISMS.get(name)
    if mechanism is None:
        raise ValueError(f"--lstm-syntax {name!r}: not one of {', '.join(syntax_layers())}")
    if mechanism.over_states is None:
        raise ValueError(f"--lstm-syntax {name!r}: the encoder mechanism {name} has no form over a recurrent "
                         f"encoder's states (over_states); one of {', '.join(syntax_layers())}")
    mechanism.check_args(args)
    return mechanism


class SyntaxLSTMEncoder(LSTMEncoder):
    """fairseq's LSTM encoder, or the same with a GRU (rnn_cell="gru"), then the syntax layer over its outputs (module
    docstring). The syntax layer is built here, in the constructor, so that whatever wraps the encoder sees its
    parameters. The RNN is `self.lstm` or `self.gru` (the checkpoint's names), `self.rnn` either."""

    def __init__(self, args, dictionary, rnn_cell: str = "lstm", **kwargs):
        super().__init__(dictionary, **kwargs)
        if rnn_cell not in RNN_CELLS:
            raise ValueError(f"--rnn-cell {rnn_cell!r}: not one of {', '.join(RNN_CELLS)}")
        self.rnn_cell = rnn_cell
        if rnn_cell == "gru":  # the same RNN as fairseq's LSTM (sizes, dropout between layers, init), with GRU cells
            lstm = self.lstm
            del self.lstm
            self.gru = nn.GRU(lstm.input_size, lstm.hidden_size, num_layers=lstm.num_layers, dropout=lstm.dropout,
                              bidirectional=lstm.bidirectional)
            for parameter in self.gru.parameters():
                nn.init.uniform_(parameter, -0.1, 0.1)
        mechanism = syntax_mechanism(args)
        self.syntax_layer = (mechanism.over_states(args, self.output_units,
                                                   **mechanism.vocabulary_arguments(label_count(dictionary)))
                             if mechanism is not None else None)
        self.syntax_features: Tuple[str, ...] = tuple(mechanism.features_for(args)) if mechanism is not None else ()

    @property
    def rnn(self) -> nn.RNNBase:
        return self.gru if self.rnn_cell == "gru" else self.lstm

    def recurrent_states(self, src_tokens: Tensor, padding_mask: Tensor,
                         enforce_sorted: bool) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """fairseq's LSTMEncoder.forward up to its output dropout, in the columns of src_tokens: h~ (T, B, C), 0 at
        padding, and the final hidden and cell states (layers, B, directions x hidden); no cell states (None) for
        the GRU."""
        x = self.dropout_in_module(self.embed_tokens(src_tokens)).transpose(0, 1)  # T x B x C
        x, state = padded_rnn(self.rnn, x, padding_mask, enforce_sorted=enforce_sorted)
        final_hiddens, final_cells = state if isinstance(state, tuple) else (state, None)
        if self.bidirectional:
            final_hiddens = self.combine_bidir(final_hiddens, src_tokens.size(0))
            if final_cells is not None:
                final_cells = self.combine_bidir(final_cells, src_tokens.size(0))
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

    def reorder_encoder_out(self, encoder_out, new_order):
        return tuple(None if value is None else value.index_select(1, new_order) for value in encoder_out)


def build_embeddings(args, task) -> Tuple[nn.Embedding, Optional[nn.Embedding]]:
    """The GRU form's source and target embeddings with fairseq's lstm model's rules (init, sharing, freezing the
    source's); None for the target: the decoder makes its own. Pre-trained embedding files are the LSTM form's only."""
    if args.encoder_embed_path or args.decoder_embed_path:
        raise ValueError("--encoder-embed-path / --decoder-embed-path: only with --rnn-cell lstm")
    source = Embedding(len(task.source_dictionary), args.encoder_embed_dim, task.source_dictionary.pad())
    target = None
    if args.share_all_embeddings:
        if task.source_dictionary != task.target_dictionary:
            raise ValueError("--share-all-embeddings requires a joint dictionary")
        if args.encoder_embed_dim != args.decoder_embed_dim:
            raise ValueError("--share-all-embeddings requires --encoder-embed-dim to match --decoder-embed-dim")
        target = source
        args.share_decoder_input_output_embed = True
    if args.share_decoder_input_output_embed and args.decoder_embed_dim != args.decoder_out_embed_dim:
        raise ValueError("--share-decoder-input-output-embed requires --decoder-embed-dim to match "
                         "--decoder-out-embed-dim")
    if args.encoder_freeze_embed:
        source.weight.requires_grad = False
    return source, target


@register_model("syntax_lstm")
class SyntaxLSTMModel(LSTMModel):
    """fairseq's LSTM model (--rnn-cell lstm) or Bahdanau et al.'s GRU encoder-decoder (--rnn-cell gru), with a
    syntax layer over the encoder (module docstring); --rnn-cell lstm --lstm-syntax none is the stock model."""

    @staticmethod
    def add_args(parser):
        LSTMModel.add_args(parser)
        parser.add_argument("--rnn-cell", choices=RNN_CELLS,
                            help="gru: Bahdanau et al.'s encoder-decoder (BiGRU encoder, GRU decoder with additive "
                                 "attention; the RGSE paper's); lstm: fairseq's lstm model. Presets: gru")
        choices = syntax_layers()
        parser.add_argument("--lstm-syntax", choices=choices,
                            help="syntax layer over the recurrent encoder's outputs: an encoder mechanism's form over "
                                 "its states, e.g. gcn (h~ + GCN(h~), Bastings et al.) or rgse (Ding & Tao's RGSE "
                                 "over h~)")
        # those mechanisms' options, each dataclass once, without argparse defaults (presets fill what is unset)
        for options in dict.fromkeys(ENCODER_MECHANISMS[name].options for name in choices[1:]):
            if options is not None:
                gen_parser_from_dataclass(parser, options(), delete_default=True)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
            # fairseq-hydra-train's model config has no `criterion` (it is the criterion group's), which fairseq's
            # LSTMModel.build_model reads to build an adaptive softmax: none, as for any criterion but adaptive_loss
            args.criterion = getattr(args, "criterion", None)
        args.lstm_syntax = getattr(args, "lstm_syntax", None) or "none"
        args.rnn_cell = getattr(args, "rnn_cell", None) or "lstm"  # the presets say gru; a bare model is fairseq's
        upgrade_option_names(args)
        if args.rnn_cell == "gru":
            return cls.build_gru_model(args, task)
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

    @classmethod
    def build_gru_model(cls, args, task):
        base_architecture(args)  # fairseq's defaults for whatever is unset, as LSTMModel.build_model does
        if args.decoder_layers != 1:
            raise ValueError(f"--rnn-cell gru has one decoder layer (Bahdanau et al.'s), got --decoder-layers "
                             f"{args.decoder_layers}")
        if not utils.eval_bool(args.decoder_attention):
            raise ValueError("--rnn-cell gru: the decoder always attends (--decoder-attention 0 is the LSTM form's)")
        if getattr(args, "criterion", None) == "adaptive_loss":
            raise ValueError("--rnn-cell gru has no adaptive softmax (--criterion adaptive_loss)")
        source_embed, target_embed = build_embeddings(args, task)
        encoder = SyntaxLSTMEncoder(
            args, task.source_dictionary, rnn_cell="gru", embed_dim=args.encoder_embed_dim,
            hidden_size=args.encoder_hidden_size, num_layers=args.encoder_layers, dropout_in=args.encoder_dropout_in,
            dropout_out=args.encoder_dropout_out, bidirectional=args.encoder_bidirectional,
            pretrained_embed=source_embed,
            max_source_positions=getattr(args, "max_source_positions", DEFAULT_MAX_SOURCE_POSITIONS))
        decoder = BahdanauGRUDecoder(
            task.target_dictionary, embed_dim=args.decoder_embed_dim, hidden_size=args.decoder_hidden_size,
            out_embed_dim=args.decoder_out_embed_dim, encoder_output_units=encoder.output_units,
            encoder_hidden_size=args.encoder_hidden_size, encoder_bidirectional=args.encoder_bidirectional,
            dropout_in=args.decoder_dropout_in, dropout_out=args.decoder_dropout_out, pretrained_embed=target_embed,
            share_input_output_embed=args.share_decoder_input_output_embed,
            max_target_positions=getattr(args, "max_target_positions", DEFAULT_MAX_TARGET_POSITIONS))
        if args.decoder_freeze_embed:
            decoder.embed_tokens.weight.requires_grad = False
        return cls(encoder, decoder)

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
