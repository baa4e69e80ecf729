from pathlib import Path

import pytest

from fairseq_syntax.paths import data_root as resolve_data_root

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
