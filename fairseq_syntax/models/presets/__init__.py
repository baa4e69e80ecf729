"""Architecture presets, one file per model family, each with `_tiny` (tests), `_multi30k` (the comparison) and the
paper's sizes (sizes.py: the shared sizes and the registration of a family)."""
from . import pascal, lisa, label_embedding, ldd, multitask, graph, rgse, linearized  # noqa: F401
from . import transition_decoders, lstm, dyn_stgcd  # noqa: F401
