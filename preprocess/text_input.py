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
    """The sentence of a line is the line without leading and trailing whitespace; inside it nothing changes
    (double spaces, tabs and no-break spaces are kept and come back on decoding). Returns (sentence, None) or
    (sentence, reason to drop)."""
    for char in line:
        if unicodedata.category(char) == "Cc" and not char.isspace():
            return line, f"control character U+{ord(char):04X}"
    text = line.strip()
    if not text:
        return text, "empty line" if not line else "whitespace-only line"
    if "\u2581" in text:
        return text, "contains U+2581 (sentencepiece's space symbol), which would not decode back"
    return text, None


def parser_view(sentence: str) -> str:
    """What parsers see: whitespace runs as single spaces (spaCy would make words of the others). Words are
    located back in the original sentence afterwards (parsers.base.realign)."""
    return " ".join(sentence.split())
