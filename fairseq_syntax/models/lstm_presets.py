"""Architecture presets of the recurrent-NMT rows of Ding & Tao's Table 2 (fairseq_syntax/models/syntax_lstm.py):
a 1-layer bidirectional LSTM encoder with the syntactic GCN (`lstm_gcn`, "Bi-RNN + GCN", Bastings et al. 2017) or
RGSE (`lstm_rgse`, "Bi-RNN + <variant> RGSE": --rgse-variant forward | bi-past | bi-future | bi-total, default
bi-total with gated integration and gated residual, the paper's best), and the paper's syntax-free baseline "Bi-RNN
(2 layers encoder)" as fairseq's stock `lstm` (`lstm_birnn2`). The encoder is bidirectional in every preset.

Sizes (embeddings / hidden units per encoder direction, so h~ has twice that / decoder hidden units):
  base       256 / 512 (h~ 1024) / 512, dropout 0.2. The RGSE paper trains its recurrent models in Bastings et al.'s
             setting, whose recurrent sizes are 256-dimensional embeddings and 512 GRU units; here they are LSTM
             units, 512 in each encoder direction and in the decoder. Dropout 0.2 is this project's choice (the RGSE
             paper gives none for its recurrent models).
  _multi30k  256 / 256 (h~ 512) / 512, dropout 0.3 (like the other *_multi30k presets), for ~30k sentence pairs
  _tiny      32 / 32 (h~ 64) / 64, dropout 0.1: for tests
Decoder input and output embeddings have the embedding size (so --share-all-embeddings works with a joint
dictionary); 1 decoder layer, fairseq's dot-product attention with input feeding.

`lstm_birnn2`: fairseq's `lstm` refuses --encoder-layers != --decoder-layers, so the stock baseline has a 2-layer
decoder as well as its 2-layer encoder (the paper's baseline differs from its RGSE models in the encoder only, as
far as it says). Its sizes are those of the syntax presets otherwise.
"""
from fairseq.models import register_model_architecture
from fairseq.models.lstm import base_architecture

from ..modules.graph_convolution import upgrade_option_names
from .sizes import set_default as _set_default
from .syntax_lstm import SyntaxLSTMModel  # noqa: F401  (the model is registered before its architectures)

BASE = dict(embed_dim=256, hidden_size=512, decoder_hidden_size=512, dropout=0.2)
MULTI30K = dict(embed_dim=256, hidden_size=256, decoder_hidden_size=512, dropout=0.3)
TINY = dict(embed_dim=32, hidden_size=32, decoder_hidden_size=64, dropout=0.1)


def set_lstm_sizes(args, embed_dim, hidden_size, decoder_hidden_size, dropout, layers=1):
    """Defaults for a bidirectional LSTM encoder and its decoder (command-line values win)."""
    _set_default(args, "encoder_embed_dim", embed_dim)
    _set_default(args, "encoder_hidden_size", hidden_size)
    _set_default(args, "encoder_layers", layers)
    _set_default(args, "encoder_bidirectional", True)
    _set_default(args, "decoder_embed_dim", embed_dim)
    _set_default(args, "decoder_hidden_size", decoder_hidden_size)
    _set_default(args, "decoder_out_embed_dim", embed_dim)
    _set_default(args, "decoder_layers", layers)
    _set_default(args, "dropout", dropout)


def _syntax(args, layer, sizes):
    upgrade_option_names(args)  # a checkpoint of the old option names: its values, not these defaults
    _set_default(args, "lstm_syntax", layer)
    if layer == "gcn":
        _set_default(args, "encoder_gcn_edge_dropout", 0.2)  # Bastings et al.'s edge dropout (the RGSE paper keeps it)
    else:
        _set_default(args, "rgse_variant", "bi-total")
        _set_default(args, "rgse_integration", "gated")
        _set_default(args, "rgse_residual", "gated")
    set_lstm_sizes(args, **sizes)
    base_architecture(args)


# ---- Bi-RNN + GCN ------------------------------------------------------------------------------------------------

@register_model_architecture("syntax_lstm", "lstm_gcn")
def lstm_gcn(args):
    """Bi-RNN + GCN: 1-layer BiLSTM (256 / 512 per direction), h~ + GCN(h~), 1-layer decoder of 512."""
    _syntax(args, "gcn", BASE)


@register_model_architecture("syntax_lstm", "lstm_gcn_multi30k")
def lstm_gcn_multi30k(args):
    """Bi-RNN + GCN sized for ~30k sentence pairs: 256 / 256 per direction / decoder 512, dropout 0.3."""
    _syntax(args, "gcn", MULTI30K)


@register_model_architecture("syntax_lstm", "lstm_gcn_tiny")
def lstm_gcn_tiny(args):
    """For tests: 32 / 32 per direction / decoder 64."""
    _syntax(args, "gcn", TINY)


# ---- Bi-RNN + RGSE -----------------------------------------------------------------------------------------------

@register_model_architecture("syntax_lstm", "lstm_rgse")
def lstm_rgse(args):
    """Bi-RNN + RGSE: 1-layer BiLSTM (256 / 512 per direction), RGSE over h~ (1024), 1-layer decoder of 512;
    bi-total, gated integration, gated residual unless --rgse-* say otherwise."""
    _syntax(args, "rgse", BASE)


@register_model_architecture("syntax_lstm", "lstm_rgse_multi30k")
def lstm_rgse_multi30k(args):
    """Bi-RNN + RGSE sized for ~30k sentence pairs: 256 / 256 per direction / decoder 512, dropout 0.3."""
    _syntax(args, "rgse", MULTI30K)


@register_model_architecture("syntax_lstm", "lstm_rgse_tiny")
def lstm_rgse_tiny(args):
    """For tests: 32 / 32 per direction / decoder 64."""
    _syntax(args, "rgse", TINY)


# ---- the baseline: Bi-RNN (2 layers encoder), stock fairseq ------------------------------------------------------

@register_model_architecture("lstm", "lstm_birnn2")
def lstm_birnn2(args):
    """fairseq's `lstm`: 2-layer BiLSTM encoder (256 / 512 per direction), 2-layer decoder of 512 (fairseq's LSTM
    model needs as many decoder layers as encoder layers); no syntax."""
    set_lstm_sizes(args, **BASE, layers=2)
    base_architecture(args)


@register_model_architecture("lstm", "lstm_birnn2_multi30k")
def lstm_birnn2_multi30k(args):
    """The 2-layer baseline at the _multi30k sizes."""
    set_lstm_sizes(args, **MULTI30K, layers=2)
    base_architecture(args)


@register_model_architecture("lstm", "lstm_birnn2_tiny")
def lstm_birnn2_tiny(args):
    """The 2-layer baseline at the _tiny sizes (tests)."""
    set_lstm_sizes(args, **TINY, layers=2)
    base_architecture(args)
