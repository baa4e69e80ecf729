"""Reading raw parallel text (the normalisation of a line: fairseq_syntax/data/text_normalization.py)."""
import gzip
import os
from typing import List


def find_input(prefix: str, lang: str, suffix: str = "") -> str:
    base = f"{prefix}.{lang}{suffix}"
    for candidate in (base, base + ".gz"):
        if os.path.exists(candidate):
            return candidate
    raise SystemExit(f"input file not found: {base} (or {base}.gz)")


def read_lines(path: str) -> List[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        lines = [line[:-1] if line.endswith("\n") else line for line in f]
    return lines
