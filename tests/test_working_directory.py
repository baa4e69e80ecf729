"""Tests run in a directory of their own (tests/conftest.py's own_working_directory): fairseq-train's check of its
default save dir, ./checkpoints, writes and removes checkpoints/dummy, and with two xdist workers in one shared
directory one worker's fairseq-train removed the other's file and died (CI run 67)."""
from pathlib import Path

from .helpers import REPO, USER_DIR, run_cli


def test_each_test_has_its_own_working_directory_outside_the_repository(tmp_path_factory):
    cwd = Path.cwd().resolve()
    assert cwd != REPO and REPO not in cwd.parents
    assert cwd.is_relative_to(tmp_path_factory.getbasetemp().resolve())
    assert list(cwd.iterdir()) == []


def test_fairseq_train_with_the_default_save_dir_writes_in_the_test_directory(small_spacy_bin):
    """No --save-dir: fairseq's ./checkpoints is made where the test runs, not in the shared repository."""
    run_cli("fairseq-train", small_spacy_bin, "--user-dir", USER_DIR, "--task", "syntax_translation", "--arch",
            "transformer_tiny", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "400", "--max-update", "1",
            "--no-save", "--cpu", "--num-workers", "0", "--no-progress-bar")
    assert (Path.cwd() / "checkpoints").is_dir()
