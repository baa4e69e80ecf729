"""fairseq-syntax: syntax-aware NMT as a fairseq plugin (`--user-dir` this package, or install it)."""
from .checkpoint_security import allow_fairseq_checkpoint_globals

allow_fairseq_checkpoint_globals()

from . import models, modules, tasks  # noqa: E402,F401  (registers tasks, models and architectures)
