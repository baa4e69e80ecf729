"""Checkpoints load with torch's weights-only unpickler (torch >= 2.6 default for torch.load).

fairseq checkpoints hold an argparse.Namespace of the training args besides tensors and plain containers: that is
the only global added to torch's allowlist, at plugin import. Weights-only loading is never turned off. A
checkpoint that needs anything else is refused with a message naming the file and the offending global, instead
of torch's advice to pass weights_only=False.
"""
import argparse
import functools
import pickle
import re

import torch

CHECKPOINT_SAFE_GLOBALS = [argparse.Namespace]


class UnsafeCheckpointError(RuntimeError):
    pass


def allow_fairseq_checkpoint_globals():
    torch.serialization.add_safe_globals(CHECKPOINT_SAFE_GLOBALS)


def refuse_unsafe_checkpoints(checkpoint_utils_module):
    """Wrap fairseq's load_checkpoint_to_cpu so an unpickling refusal says clearly what was refused."""
    original = checkpoint_utils_module.load_checkpoint_to_cpu
    if getattr(original, "_fairseq_syntax_wrapped", False):
        return

    @functools.wraps(original)
    def load_checkpoint_to_cpu(path, *args, **kwargs):
        try:
            return original(path, *args, **kwargs)
        except pickle.UnpicklingError as error:
            found = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
            what = found.group(1) if found else str(error).splitlines()[-1].strip()
            raise UnsafeCheckpointError(
                f"refusing to load checkpoint {path}: it contains {what}, which is not on the allowlist of "
                f"torch's weights-only loader (tensors, plain containers, "
                f"{', '.join(g.__module__ + '.' + g.__name__ for g in CHECKPOINT_SAFE_GLOBALS)}). Only "
                f"checkpoints written by fairseq training load here."
            ) from None

    load_checkpoint_to_cpu._fairseq_syntax_wrapped = True
    checkpoint_utils_module.load_checkpoint_to_cpu = load_checkpoint_to_cpu
