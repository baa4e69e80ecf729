import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(os.environ.get("DATA_ROOT", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_root() -> Path:
    if not DATA_ROOT.exists():
        pytest.skip(f"shared data not found at {DATA_ROOT} (set DATA_ROOT)")
    return DATA_ROOT
