"""Where the shared data lives, resolved in one place: $DATA_ROOT, else `../shared/data` beside the repository
(tests, examples, the benchmark and the challenge-set tools all ask here)."""
import os
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def data_root() -> Path:
    return Path(os.environ.get("DATA_ROOT") or REPOSITORY.parent / "shared" / "data")
