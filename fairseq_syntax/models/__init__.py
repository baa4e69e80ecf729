from . import sizes, syntax_transformer, pascal_presets, lisa_presets, label_embedding_presets  # noqa: F401
from . import ldd_presets, multitask_presets, graph_presets, rgse_presets, linearized_presets  # noqa: F401
from . import transition_decoder_presets, syntax_lstm, lstm_presets, dyn_stgcd, dyn_stgcd_presets  # noqa: F401
