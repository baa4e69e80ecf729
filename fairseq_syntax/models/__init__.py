from . import syntax_transformer, syntax_lstm, dyn_stgcd  # noqa: F401  (the model families and their decoders)
from . import presets  # noqa: F401  (registers every architecture preset)
