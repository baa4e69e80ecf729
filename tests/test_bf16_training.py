"""bfloat16 training through `fairseq-syntax-train` (fairseq-train takes --bf16 for TPU training and asks torch_xla for
a device). On CPU here; the same entry point runs on CUDA (compare.py --device cuda --bf16)."""
import re

import numpy as np
import pytest
import torch

from .helpers import USER_DIR, marked_slow, run_cli


def train_args(data_bin, arch, save_dir):
    return [data_bin, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t", "de", "--arch", arch,
            "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500",
            "--max-update", "3", "--criterion", "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--save-dir", save_dir, "--cpu", "--no-progress-bar", "--log-interval", "1", "--num-workers", "0",
            "--bf16"]


@pytest.mark.parametrize("arch", marked_slow(["transformer_pascal_tiny", "transformer_gcn_tiny",
                                              "transformer_rgse_tiny"], {"transformer_rgse_tiny"}))
def test_bf16_training_runs_with_syntax_mechanisms(small_spacy_bin, tmp_path, arch):
    result = run_cli("fairseq-syntax-train", *train_args(small_spacy_bin, arch, tmp_path / "ckpt"))
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([0-9.]+)", result.stdout + result.stderr)]
    assert len(losses) == 3 and all(np.isfinite(losses))
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt")
    assert state["cfg"]["common"]["bf16"] and not state["cfg"]["common"]["tpu"]
    # fairseq's bf16 path: the model in bfloat16, fp32 master weights in FP16Optimizer, no loss scaler (fp16 has one;
    # fairseq saves the weights as float32 whatever the training dtype)
    assert state["optimizer_history"][-1]["optimizer_name"] == "FP16Optimizer"
    assert "loss_scale" not in state["last_optimizer_state"]


def test_plain_fairseq_train_takes_bf16_for_tpu(small_spacy_bin, tmp_path):
    """Why the entry point exists: fairseq-train --bf16 on a machine without torch_xla fails."""
    result = run_cli("fairseq-train", *train_args(small_spacy_bin, "transformer_pascal_tiny", tmp_path / "ckpt"),
                     check=False)
    assert result.returncode != 0 and "xla_device" in result.stdout + result.stderr
