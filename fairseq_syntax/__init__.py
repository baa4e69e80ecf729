"""fairseq-syntax: syntax-aware NMT as a fairseq plugin (`--user-dir` this package, or install it)."""
from fairseq import checkpoint_utils as _checkpoint_utils

from .checkpoint_security import allow_fairseq_checkpoint_globals, refuse_unsafe_checkpoints

allow_fairseq_checkpoint_globals()
refuse_unsafe_checkpoints(_checkpoint_utils)

from . import criterions, models, modules, tasks  # noqa: E402,F401  (registers tasks, models, criteria)
