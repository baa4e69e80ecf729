"""The devices the module-against-reference tests run on: "cpu" always, "cuda" when torch sees a GPU (skipped
otherwise, with the reason in the report). Tests take the `device` fixture (tests/conftest.py), build the module on
the CPU as before, run a copy of it on the device (`on`) and compare after `.cpu()`; the reference loops keep
running on the CPU.

Tolerances: the comparisons keep the CPU's. On CUDA the `device` fixture switches TF32 off for matmuls and cuDNN
(`exact_float32`): with TF32 a float32 matmul keeps 10 mantissa bits, and cuDNN's RNNs use it by default. What CUDA
still changes is the order of sums: index_add_ accumulates with atomics in any order, so a result the CPU gives
bit for bit twice may differ in the last bits between two CUDA runs (`assert_same`, `changed`), and cuDNN's float32
LSTM / GRU kernels sum in other orders than the CPU's (`float32_tolerances`: 10 times the CPU's tolerances where a
float32 recurrent encoder on CUDA is compared with the CPU, or with itself on another batch). Float64 comparisons
keep their tolerances on both devices.
"""
import contextlib
import copy
import dataclasses

import pytest
import torch

CUDA_SKIP_REASON = "no CUDA device here (torch.cuda.is_available() is False): the CUDA run is skipped"
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=CUDA_SKIP_REASON)
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=requires_cuda)]


@contextlib.contextmanager
def exact_float32():
    """TF32 off for CUDA matmuls and cuDNN (convolutions, RNNs) inside the block; the flags are restored after."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def on(device, value):
    """`value` on `device`: tensors moved, modules deep-copied and moved (the CPU original stays for the reference
    loops), dicts, lists, tuples and dataclass instances (e.g. a DecoderContext) field by field; anything else as it
    is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{field.name: on(device, getattr(value, field.name))
                                             for field in dataclasses.fields(value) if field.init})
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value).to(device)
    if torch.is_tensor(value):
        return value.to(device)
    if isinstance(value, dict):
        return {key: on(device, item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on(device, item) for item in value)
    return value


def cpu(value):
    """`value` with every tensor on the CPU (for comparing with the reference)."""
    return on("cpu", value)


def assert_same(actual, expected, device, **kwargs):
    """Bit-for-bit equal on the CPU; on CUDA equal up to the order of atomic sums (assert_close's default
    tolerances for the dtype unless given)."""
    actual, expected = actual.cpu(), expected.cpu()
    if torch.device(device).type == "cpu":
        assert torch.equal(actual, expected)
    else:
        torch.testing.assert_close(actual, expected, **kwargs)


def changed(difference, device, tolerance=1e-12):
    """Where an absolute difference counts as a change: any nonzero on the CPU; above `tolerance` on CUDA, where
    index_add_ may sum the same terms in another order (float64 rounding differences are ~1e-16)."""
    return difference > (0.0 if torch.device(device).type == "cpu" else tolerance)


def float32_tolerances(device, rtol, atol):
    """assert_close tolerances for a float32 result of a recurrent encoder: as given on the CPU, 10 times looser on
    CUDA (cuDNN's kernels, with another summation order per batch size)."""
    factor = 1.0 if torch.device(device).type == "cpu" else 10.0
    return dict(rtol=rtol * factor, atol=atol * factor)
