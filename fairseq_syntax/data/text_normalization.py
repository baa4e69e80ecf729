"""The one sentence normalisation of the project: what preprocessing keeps of a line, what translation of raw text
reads, and what parsers see."""
import unicodedata
from typing import Optional, Tuple


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


def is_visible(char: str) -> bool:
    """Whether a character shows something of its own: not a control or format character, not whitespace, not
    unassigned or private (str.isprintable), and not a combining mark, which shows only on the character before it
    (a word of combining marks alone has nothing to combine with)."""
    return char.isprintable() and not char.isspace() and unicodedata.category(char) not in ("Mn", "Me")


def has_visible_text(text: str) -> bool:
    """Whether `text` has a character one can see (is_visible): what a word needs to be one."""
    return any(is_visible(char) for char in text)
