"""Reading raw parallel text and deciding which lines can be kept (every drop has a reason)."""
import gzip
import os
import unicodedata
from typing import List, Optional, Tuple


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


def normalize_line(line: str) -> Tuple[str, Optional[str]]:
    """Whitespace runs become single spaces and the ends are trimmed (spaCy would otherwise make whitespace
    words). Returns (sentence, None) or (sentence, reason to drop)."""
    for char in line:
        if unicodedata.category(char) == "Cc" and not char.isspace():
            return line, f"control character U+{ord(char):04X}"
    text = " ".join(line.split())
    if not text:
        return text, "empty line" if not line else "whitespace-only line"
    if "\u2581" in text:
        return text, "contains U+2581 (sentencepiece's space symbol), which would not decode back"
    return text, None
