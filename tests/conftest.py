from pathlib import Path

import pytest
import torch

from fairseq_syntax.paths import data_root as resolve_data_root

from .devices import DEVICES, exact_float32

DATA_ROOT = resolve_data_root()


@pytest.fixture(scope="session")
def data_root() -> Path:
    if not DATA_ROOT.exists():
        pytest.skip(f"shared data not found at {DATA_ROOT} (set DATA_ROOT)")
    return DATA_ROOT


@pytest.fixture(scope="session")
def small_spacy_bin(data_root, tmp_path_factory) -> Path:
    """One read-only data-bin for the mechanism tests that only train and translate on it: the first 200 train and
    24 valid lines of Multi30k, English parsed by spaCy, 500 sentencepiece pieces. Tests that change a data-bin
    make their own."""
    from .helpers import preprocess_sample

    return preprocess_sample(data_root, tmp_path_factory.mktemp("small-spacy-bin"),
                             (("train", "train", 200), ("valid", "val", 24)), spm_vocab_size=500)


@pytest.fixture(autouse=True)
def own_working_directory(tmp_path_factory, monkeypatch) -> Path:
    """Every test, and every command it starts, runs in a directory of its own. fairseq-train checks its save dir
    (default ./checkpoints, also with --no-save) by writing and removing checkpoints/dummy, so two xdist workers in
    one shared directory raced: one removed the other's file and that fairseq-train died (FileNotFoundError, the
    2-process DDP test of CI run 67). Nothing a test writes by default lands in the repository either."""
    directory = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(directory)
    return directory


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """The device a module-against-reference test runs on: "cpu", and "cuda" when there is one (skipped otherwise,
    tests/devices.py). TF32 is off inside the test, so float32 on CUDA keeps the CPU's tolerances."""
    with exact_float32():
        yield torch.device(request.param)


NO_DATA = "(set DATA_ROOT)"  # every skip for lack of the shared data says this


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """A run without the shared data skips a large part of the suite: say so loudly, with the count, rather than
    let it pass as green."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if NO_DATA in str(getattr(report, "longrepr", ""))]
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} tests SKIPPED for lack of the shared data at {DATA_ROOT}: "
                                        f"set DATA_ROOT to the data folder (README, Data)", red=True, bold=True)
