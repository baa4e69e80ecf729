"""A checkpoint torch's weights-only loader refuses is refused with a message naming what it holds, whatever words
torch used: the messages below are torch's own (torch/_weights_only_unpickler.py and, around them, torch.load's
_get_wo_message in torch/serialization.py, torch 2.13), besides two real refusals end to end."""
import os
import pickle

import pytest
import torch

import fairseq_syntax  # noqa: F401  (wraps fairseq's load_checkpoint_to_cpu)
from fairseq import checkpoint_utils
from fairseq_syntax.checkpoint_security import UnsafeCheckpointError, describe_refusal

UNSAFE = ("In PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` from `False` "
          "to `True`. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but it can "
          "result in arbitrary code execution. Do it only if you got the file from a trusted source.")
DOCS = ("\n\nCheck the documentation of torch.load to learn more about types accepted by default with weights_only "
        "https://pytorch.org/docs/stable/generated/torch.load.html.")


def blocked_or_other(message):
    """torch.load's wrapping of a message that is not about a non-allowlisted global."""
    return f"Weights only load failed. {UNSAFE}\n\n\n{message}{DOCS}"


def file_an_issue(message):
    return (f"Weights only load failed. {UNSAFE}\nPlease file an issue with the following so that we can make "
            f"`weights_only=True` compatible with your use case: WeightsUnpickler error: \n\n{message}{DOCS}")


def unsupported_global(full_path):
    return ("Weights only load failed. This file can still be loaded, to do so you have two options, \033[1mdo those "
            f"steps only if you trust the source of the checkpoint\033[0m. \n\t(1) {UNSAFE}\n\t(2) Alternatively, to "
            "load with `weights_only=True` please check the recommended steps in the following error message.\n\t"
            f"WeightsUnpickler error: Unsupported global: GLOBAL {full_path} was not an allowed global by default. "
            f"Please use `torch.serialization.add_safe_globals([{full_path}])` or the "
            f"`torch.serialization.safe_globals([{full_path}])` context manager to allowlist this global if you "
            f"trust this class/function.{DOCS}")


TORCH_MESSAGES = [
    # (torch's message, what the refusal must name)
    (unsupported_global("tests.test_checkpoint_security.Foreign"), "the global tests.test_checkpoint_security.Foreign"),
    (blocked_or_other("Trying to load unsupported GLOBAL posix.system whose module posix is blocked."),
     "the global posix.system (module posix"),
    (blocked_or_other("Trying to load unsupported GLOBAL subprocess.Popen whose module subprocess is blocked."),
     "the global subprocess.Popen"),
    (file_an_issue("Trying to call reduce for unrecognized function <built-in function system> which belongs to "
                   "<module 'posix' (built-in)>"), "a call of posix.system"),
    (file_an_issue("Trying to call reduce for unrecognized function <function evil at 0x7f3a2c1d0e50>"),
     "a call of evil"),
    (file_an_issue("Can only create new object for nn.Parameter or classes allowlisted via `add_safe_globals` but "
                   "got <class 'collections.OrderedDict'>"), "an object of class collections.OrderedDict"),
    (file_an_issue("Can only build Tensor, Parameter, OrderedDict or types allowlisted via `add_safe_globals`, but "
                   "got <class 'mypackage.Payload'>"), "an object of class mypackage.Payload"),
    (file_an_issue("Can only append to lists, but got <class 'mypackage.Payload'>"),
     "list items added to an object of class mypackage.Payload"),
    (file_an_issue("Can only extend lists, but got <class 'dict'>"), "list items added to an object of class dict"),
    (file_an_issue("Can only SETITEMS for dict, collections.OrderedDict, collections.Counter, but got "
                   "<class 'list'>"), "dict items (SETITEMS) set on an object of class list"),
    (file_an_issue("Only persistent_load of storage is allowed, but got <class 'str'>"),
     "a persistent object of str"),
    (f"Weights only load failed. ``torch.nested`` and ``torch._dynamo`` must be imported to load nested jagged "
     f"tensors (NJTs)\n {UNSAFE}\n", "nested jagged tensors (NJTs), which torch loads only once torch.nested and "
                                     "torch._dynamo is imported"),
    (f"Weights only load failed. ``torch.distributed.tensor`` must be imported to load DTensors\n {UNSAFE}\n",
     "DTensors, which torch loads only once torch.distributed.tensor is imported"),
    # torch < 2.4
    ("Weights only load failed. Re-running `torch.load` with `weights_only` set to `False` will likely succeed, but "
     "it can result in arbitrary code execution.Do it only if you get the file from a trusted source. WeightsUnpickler "
     "error: Unsupported class mypackage.Payload", "the global mypackage.Payload"),
]


@pytest.mark.parametrize("message,named", TORCH_MESSAGES, ids=[named for _, named in TORCH_MESSAGES])
def test_every_wording_of_torch_names_the_refused_object(message, named):
    description = describe_refusal(message)
    assert named in description
    assert "Check the documentation" not in description and "weights_only" not in description


@pytest.mark.parametrize("message,cause", [
    (file_an_issue("String is too long"), "String is too long"),
    (blocked_or_other("unsupported persistent id encountered"), "unsupported persistent id encountered"),
], ids=["too-long", "persistent-id"])
def test_unknown_wording_falls_back_to_torchs_cause_without_its_advice(message, cause):
    description = describe_refusal(message)
    assert description == f"something torch's weights-only loader refuses ({cause})"
    assert describe_refusal("") == "something torch's weights-only loader refuses"


class Foreign:
    pass


class SystemCall:
    """Unpickling this runs os.system(command): what a malicious checkpoint carries."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_checkpoint_calling_os_system_is_refused_naming_it(tmp_path):
    path, marker = tmp_path / "evil.pt", tmp_path / "pwned"
    torch.save({"model": {}, "args": None, "payload": SystemCall(f"touch {marker}")}, path)
    with pytest.raises(UnsafeCheckpointError) as error:
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    message = str(error.value)
    assert f"refusing to load checkpoint {path}" in message
    assert f"{os.system.__module__}.system" in message  # posix.system (nt.system on Windows)
    assert "Check the documentation" not in message
    assert not marker.exists()


def test_checkpoint_with_foreign_class_is_refused_naming_it(tmp_path):
    path = tmp_path / "foreign.pt"
    torch.save({"model": {}, "args": None, "payload": Foreign()}, path)
    with pytest.raises(UnsafeCheckpointError, match=r"foreign\.pt: it contains the global "
                                                    r"tests\.test_checkpoint_security\.Foreign, which is not on"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    with pytest.raises(pickle.UnpicklingError):  # nothing was switched off globally
        torch.load(path)


def test_metric_meters_with_numpy_counts_load(tmp_path):
    """fairseq keeps its metrics in the checkpoint; with --eval-bleu the BLEU meters hold numpy integer arrays. Such a
    checkpoint (written by every `--eval-bleu --best-checkpoint-metric bleu` run) once was refused."""
    import numpy as np

    path = tmp_path / "bleu_meters.pt"
    counts = np.array([24, 21, 18, 15])
    torch.save({"model": {}, "args": None, "extra_state": {"metrics": {"valid": [("_bleu_counts", "AverageMeter", 0,
                                                                                  {"val": counts, "sum": counts * 2})]},
                                                           "best": 12.5}}, path)
    state = torch.load(path)  # weights-only (torch's default), with the plugin's allowlist
    meter = state["extra_state"]["metrics"]["valid"][0][3]
    assert meter["sum"].tolist() == [48, 42, 36, 30] and meter["val"].dtype == np.int64


def test_object_arrays_stay_refused(tmp_path):
    import numpy as np

    path, marker = tmp_path / "object_array.pt", tmp_path / "pwned"
    payload = np.empty(1, dtype=object)
    payload[0] = SystemCall(f"touch {marker}")
    torch.save({"model": {}, "args": None, "payload": payload}, path)
    with pytest.raises(UnsafeCheckpointError, match="object_array.pt: it contains"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()
