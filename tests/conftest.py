from pathlib import Path

import pytest

from fairseq_syntax.paths import data_root as resolve_data_root

DATA_ROOT = resolve_data_root()


@pytest.fixture(scope="session")
def data_root() -> Path:
    if not DATA_ROOT.exists():
        pytest.skip(f"shared data not found at {DATA_ROOT} (set DATA_ROOT)")
    return DATA_ROOT
