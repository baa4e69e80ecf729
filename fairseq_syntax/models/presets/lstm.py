"""Architecture presets of the recurrent-NMT rows of Ding & Tao's Table 2 (fairseq_syntax/models/syntax_lstm.py):
a 1-layer bidirectional encoder with the syntactic GCN (`lstm_gcn`, "Bi-RNN + GCN", Bastings et al. 2017) or RGSE
(`lstm_rgse`, "Bi-RNN + <variant> RGSE": --rgse-variant forward | bi-past | bi-future | bi-total, default bi-total
with gated integration and gated residual, the paper's best), and the paper's syntax-free baseline "Bi-RNN (2 layers
encoder)" (`lstm_birnn2`: --lstm-syntax none, 2 encoder layers). The encoder is bidirectional in every preset.

Form: every preset is the paper's GRU form (--rnn-cell gru: BiGRU encoder, Bahdanau et al.'s GRU decoder with
additive attention, one decoder layer) unless --rnn-cell lstm asks for fairseq's LSTM form (LSTM encoder, fairseq's
LSTMDecoder with as many layers as the encoder, since fairseq's lstm model refuses others: `lstm_birnn2` is then 2+2).
A checkpoint saved before --rnn-cell existed (its config has no rnn_cell) was the LSTM form and loads as one: its
`lstm_birnn2*` was fairseq's stock `lstm` model, which the LSTM form with no syntax layer is, parameter for
parameter. Resuming such a run with fairseq-train needs --rnn-cell lstm on its command line.

Names: `rnn_gcn*`, `rnn_rgse*` and `rnn_birnn2*` are the same presets under names that do not say LSTM; the
`lstm_*` names stay for the checkpoints, scripts and tests that use them.

Sizes (embeddings / hidden units per encoder direction, so h~ has twice that / decoder hidden units):
  base       256 / 512 (h~ 1024) / 512, dropout 0.2: Bastings et al.'s recurrent sizes (256-dimensional embeddings,
             512 GRU units), the setting the RGSE paper trains its recurrent models in. Dropout 0.2 is this project's
             choice (the RGSE paper gives none for its recurrent models). The GRU decoder's maxout output has the
             embedding size (l = 256).
  _multi30k  256 / 256 (h~ 512) / 512, dropout 0.3 (like the other *_multi30k presets), for ~30k sentence pairs
  _tiny      32 / 32 (h~ 64) / 64, dropout 0.1: for tests
Decoder input and output embeddings have the embedding size (so --share-all-embeddings works with a joint
dictionary). The _multi30k and _tiny presets take the GRU form too: they are the paper's rows at other sizes, and
the comparison (examples/multi30k/systems.py) and the tests should run what the paper runs.
"""
from functools import partial

from fairseq.models import register_model_architecture
from fairseq.models.lstm import base_architecture
from omegaconf import OmegaConf

from ...modules.mechanisms.graph_convolution import upgrade_option_names
from .sizes import Preset, register_family, set_default as _set_default
from ..syntax_lstm import SyntaxLSTMModel  # noqa: F401  (the model is registered before its architectures)

BASE = dict(embed_dim=256, hidden_size=512, decoder_hidden_size=512, dropout=0.2)
MULTI30K = dict(embed_dim=256, hidden_size=256, decoder_hidden_size=512, dropout=0.3)
TINY = dict(embed_dim=32, hidden_size=32, decoder_hidden_size=64, dropout=0.1)


def _saved_before_rnn_cell(args) -> bool:
    """A model config that fairseq made from a whole command line (its `_name` is set, and, a legacy model's, it
    holds every option, `criterion` among them: a checkpoint's, or the one fairseq-train builds after the presets
    ran) without an rnn_cell key at all: saved before --rnn-cell existed. Command lines always have the key (None when
    not given); a fairseq-hydra-train model config has only its own keys, no `criterion`."""
    has = (lambda name: name in args) if OmegaConf.is_config(args) else (lambda name: hasattr(args, name))
    return has("_name") and has("criterion") and not has("rnn_cell")


def set_rnn_cell(args) -> str:
    """--rnn-cell unless given: gru, but lstm for a checkpoint saved before the option (the form it was)."""
    _set_default(args, "rnn_cell", "lstm" if _saved_before_rnn_cell(args) else "gru")
    return args.rnn_cell


def set_rnn_sizes(args, embed_dim, hidden_size, decoder_hidden_size, dropout, layers=1):
    """Defaults for a bidirectional encoder of `layers` layers and its decoder (command-line values win): one
    decoder layer in the GRU form, `layers` in the LSTM form (fairseq's lstm model needs as many)."""
    cell = set_rnn_cell(args)
    _set_default(args, "encoder_embed_dim", embed_dim)
    _set_default(args, "encoder_hidden_size", hidden_size)
    _set_default(args, "encoder_layers", layers)
    _set_default(args, "encoder_bidirectional", True)
    _set_default(args, "decoder_embed_dim", embed_dim)
    _set_default(args, "decoder_hidden_size", decoder_hidden_size)
    _set_default(args, "decoder_out_embed_dim", embed_dim)
    _set_default(args, "decoder_layers", 1 if cell == "gru" else layers)
    _set_default(args, "dropout", dropout)


def _recurrent(layer, args):
    """The family's defaults (its syntax layer and that layer's), then fairseq's lstm base architecture."""
    upgrade_option_names(args)  # a checkpoint of the old option names: its values, not these defaults
    _set_default(args, "lstm_syntax", layer)
    if layer == "gcn":
        _set_default(args, "encoder_gcn_edge_dropout", 0.2)  # Bastings et al.'s edge dropout (the RGSE paper keeps it)
    elif layer == "rgse":
        _set_default(args, "rgse_variant", "bi-total")
        _set_default(args, "rgse_integration", "gated")
        _set_default(args, "rgse_residual", "gated")
    base_architecture(args)


def _register(prefix, layer, presets):
    """The family's presets (sized by set_rnn_sizes) under their `lstm_*` names and their `rnn_*` aliases."""
    registered = register_family("syntax_lstm", prefix, presets, base=partial(_recurrent, layer),
                                 size_setter=set_rnn_sizes)
    for name, function in registered.items():
        register_model_architecture("syntax_lstm", "rnn_" + name[len("lstm_"):])(function)
    return registered.values()


# ---- Bi-RNN + GCN ------------------------------------------------------------------------------------------------

lstm_gcn, lstm_gcn_multi30k, lstm_gcn_tiny = _register("lstm_gcn", "gcn", {
    "": Preset("Bi-RNN + GCN: 1-layer BiGRU (256 / 512 per direction), h~ + GCN(h~), GRU decoder of 512.", BASE),
    "_multi30k": Preset("Bi-RNN + GCN sized for ~30k sentence pairs: 256 / 256 per direction / decoder 512, dropout "
                        "0.3.", MULTI30K),
    "_tiny": Preset("For tests: 32 / 32 per direction / decoder 64.", TINY),
})


# ---- Bi-RNN + RGSE -----------------------------------------------------------------------------------------------

lstm_rgse, lstm_rgse_multi30k, lstm_rgse_tiny = _register("lstm_rgse", "rgse", {
    "": Preset("Bi-RNN + RGSE: 1-layer BiGRU (256 / 512 per direction), RGSE over h~ (1024), GRU decoder of 512; "
               "bi-total, gated integration, gated residual unless --rgse-* say otherwise.", BASE),
    "_multi30k": Preset("Bi-RNN + RGSE sized for ~30k sentence pairs: 256 / 256 per direction / decoder 512, "
                        "dropout 0.3.", MULTI30K),
    "_tiny": Preset("For tests: 32 / 32 per direction / decoder 64.", TINY),
})


# ---- the baseline: Bi-RNN (2 layers encoder), no syntax ----------------------------------------------------------

lstm_birnn2, lstm_birnn2_multi30k, lstm_birnn2_tiny = _register("lstm_birnn2", "none", {
    "": Preset("Bi-RNN (2 layers encoder): 2-layer BiGRU (256 / 512 per direction), GRU decoder of 512, no syntax "
               "layer (LSTM form: fairseq's `lstm`, 2-layer BiLSTM and a 2-layer decoder).", dict(BASE, layers=2)),
    "_multi30k": Preset("The 2-layer baseline at the _multi30k sizes.", dict(MULTI30K, layers=2)),
    "_tiny": Preset("The 2-layer baseline at the _tiny sizes (tests).", dict(TINY, layers=2)),
})


PRESETS = (lstm_gcn, lstm_gcn_multi30k, lstm_gcn_tiny, lstm_rgse, lstm_rgse_multi30k, lstm_rgse_tiny, lstm_birnn2,
           lstm_birnn2_multi30k, lstm_birnn2_tiny)
