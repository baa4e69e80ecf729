"""Checkpoints load with torch's weights-only unpickler (torch >= 2.6 default for torch.load).

fairseq checkpoints hold an argparse.Namespace of the training args besides tensors and plain containers, and
numpy arrays of numbers in their metrics state: those are the only globals added to torch's allowlist, at plugin
import. Weights-only loading is never turned off. A
checkpoint that needs anything else is refused with a message naming the file and the offending global (whatever
wording torch used for it: describe_refusal), instead of torch's advice to pass weights_only=False.
"""
import argparse
import functools
import pickle
import re

import numpy
import torch

# fairseq checkpoints keep the state of the logged metrics; with --eval-bleu its BLEU meters hold numpy integer
# arrays (n-gram counts), pickled through numpy's array reconstruction. Only arrays of plain numbers are allowed:
# an object array would need the object dtype (not listed), and its items would meet the same allowlist anyway.
NUMERIC_ARRAY_GLOBALS = [numpy.core.multiarray._reconstruct, numpy.ndarray, numpy.dtype,
                         *(getattr(numpy.dtypes, name) for name in ("Int64DType", "Int32DType", "Float64DType",
                                                                   "Float32DType", "BoolDType"))]
CHECKPOINT_SAFE_GLOBALS = [argparse.Namespace, *NUMERIC_ARRAY_GLOBALS]
ALLOWED_TEXT = "tensors, plain containers, argparse.Namespace and numpy arrays of numbers (fairseq's metric meters)"


class UnsafeCheckpointError(RuntimeError):
    pass


def allow_fairseq_checkpoint_globals():
    torch.serialization.add_safe_globals(CHECKPOINT_SAFE_GLOBALS)


def _readable(text: str) -> str:
    """A Python repr torch put in its message, as a dotted name where it has one: <class 'a.B'> -> a.B,
    <built-in function system> -> system, <function f at 0x...> -> f, <module 'posix' (built-in)> -> posix."""
    found = re.fullmatch(r"<(?:class|module) '([^']+)'.*>|<(?:built-in )?(?:function|method) (\S+?)"
                         r"(?: at 0x[0-9a-f]+)?>|<bound method (\S+) of .*>", text.strip())
    return next((group for group in found.groups() if group), text) if found else text.strip()


def _called(found) -> str:
    function, owner = _readable(found.group(1)), found.group(2)
    if owner:
        function = f"{_readable(owner)}.{function.rsplit('.', 1)[-1]}"
    return f"a call of {function}, which is not on the allowlist"


def _must_import(found) -> str:
    modules = " and ".join(module for module in found.group(1, 2) if module)
    return f"{found.group(3)}, which torch loads only once {modules} is imported"


# How torch's weights-only unpickler (torch/_weights_only_unpickler.py, torch 2.0-2.13) names what it refused:
# (pattern over its message, the description of the match); the first match wins.
_CLASS = r"<class '([^']+)'>"
REFUSALS = [
    # a global that is not allowlisted (torch >= 2.4; "Unsupported class x.y" before)
    (re.compile(r"Unsupported global: GLOBAL (\S+) was not an allowed global"),
     lambda found: f"the global {found.group(1)}, which is not on the allowlist"),
    (re.compile(r"Unsupported class (\S+)"),
     lambda found: f"the global {found.group(1)}, which is not on the allowlist"),
    # a global of a module torch blocks outright (os/posix/nt, subprocess, sys, ...)
    (re.compile(r"Trying to load unsupported GLOBAL (\S+) whose module (\S+) is blocked"),
     lambda found: f"the global {found.group(1)} (module {found.group(2)}, which torch blocks outright)"),
    # a call (REDUCE) of a function that is not allowlisted
    (re.compile(r"Trying to call reduce for unrecognized function (.+?)(?: which belongs to (.+?))?\s*$", re.M),
     _called),
    # an object (NEWOBJ, BUILD) or container (APPEND(S), SETITEM(S)) of a class that is not allowed there
    (re.compile(r"Can only create new object for .*? but got " + _CLASS),
     lambda found: f"an object of class {found.group(1)}, which is not on the allowlist"),
    (re.compile(r"Can only build .*? but got " + _CLASS),
     lambda found: f"an object of class {found.group(1)}, which is not on the allowlist"),
    (re.compile(r"Can only (?:append to|extend) lists, but got " + _CLASS),
     lambda found: f"list items added to an object of class {found.group(1)}"),
    (re.compile(r"Can only (\S+) for dict, .*? but got " + _CLASS),
     lambda found: f"dict items ({found.group(1)}) set on an object of class {found.group(2)}"),
    (re.compile(r"Only persistent_load of storage is allowed, but got (.+?)\s*$", re.M),
     lambda found: f"a persistent object of {_readable(found.group(1))} (only tensor storages are allowed)"),
    # tensors of torch modules that must be imported first (nested jagged tensors, DTensors)
    (re.compile(r"``(\S+?)``(?: and ``(\S+?)``)? must be imported to load (.+?)\s*$", re.M), _must_import),
]


def _torch_cause(message: str) -> str:
    """torch's message without its advice to turn weights-only loading off and its documentation link."""
    message = re.sub(r"\x1b\[[0-9;]*m", "", message)
    message = message.split("WeightsUnpickler error:", 1)[-1]
    unsafe = getattr(torch.serialization, "UNSAFE_MESSAGE", None)
    if unsafe:
        message = message.replace(unsafe, " ")
    message = message.replace("Weights only load failed.", " ")
    message = re.sub(r"Check the documentation of torch\.load.*", " ", message, flags=re.S)
    return " ".join(message.split())


def describe_refusal(message: str) -> str:
    """What a checkpoint holds that torch's weights-only loader refused, from torch's error message."""
    for pattern, describe in REFUSALS:
        found = pattern.search(message)
        if found:
            return describe(found)
    cause = _torch_cause(message)
    return (f"something torch's weights-only loader refuses ({cause})" if cause else
            "something torch's weights-only loader refuses")


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
            raise UnsafeCheckpointError(
                f"refusing to load checkpoint {path}: it contains {describe_refusal(str(error))}. torch's "
                f"weights-only loader allows {ALLOWED_TEXT}; only checkpoints written by fairseq training load "
                f"here."
            ) from None

    load_checkpoint_to_cpu._fairseq_syntax_wrapped = True
    checkpoint_utils_module.load_checkpoint_to_cpu = load_checkpoint_to_cpu
