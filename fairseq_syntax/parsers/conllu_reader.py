"""Gold (or externally parsed) trees from CoNLL-U files, read with the `conllu` library.

Multiword tokens (e.g. German "zum" = "zu dem") become one word, because subword pieces of the surface token
cannot be split between its syntactic words: the word of the range closest to the root represents it (its head
and label), and dependents of the other words of the range attach to it. Empty nodes (enhanced UD) are skipped.
"""
import gzip
from typing import Iterator, List, Tuple

import conllu
from conllu.exceptions import ParseException

from .base import ParsedSentence, ParseError, spaces_from_offsets


def open_text(path: str):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def read_blocks(path: str) -> Iterator[Tuple[int, str]]:
    """Yield (first line number, text) for every sentence block of a CoNLL-U file."""
    block: List[str] = []
    start = 0
    with open_text(path) as f:
        for number, line in enumerate(f, start=1):
            if line.strip() == "":
                if block:
                    yield start, "".join(block)
                block = []
                continue
            if not block:
                start = number
            block.append(line if line.endswith("\n") else line + "\n")
    if block:
        yield start, "".join(block)


def _depth(word: int, heads: List[int]) -> int:
    depth, seen = 0, set()
    while word != 0 and word not in seen:
        seen.add(word)
        word = heads[word - 1]
        depth += 1
    return depth


def tree_from_tokenlist(tokens, where: str) -> ParsedSentence:
    words = [t for t in tokens if isinstance(t["id"], int)]
    ranges = {t["id"][0]: t for t in tokens if isinstance(t["id"], tuple) and t["id"][1] == "-"}
    if not words:
        raise ParseError(f"{where}: sentence has no words")
    if [t["id"] for t in words] != list(range(1, len(words) + 1)):
        raise ParseError(f"{where}: word ids are not 1..{len(words)} in order")
    heads = []
    for t in words:
        if not isinstance(t["head"], int):
            raise ParseError(f"{where}: word {t['id']} ({t['form']!r}) has no head")
        heads.append(t["head"])
    labels = [t["deprel"] for t in words]
    if any(label in (None, "_", "") for label in labels):
        raise ParseError(f"{where}: a word has no dependency label")
    if any(not 0 <= h <= len(words) for h in heads):
        raise ParseError(f"{where}: a head points outside the sentence")

    # units: surface words after collapsing multiword tokens
    unit_of = {}
    units = []  # (form, representative word id, misc)
    word_id = 1
    while word_id <= len(words):
        if word_id in ranges:
            first, _, last = ranges[word_id]["id"]
            if last > len(words):
                raise ParseError(f"{where}: multiword token {first}-{last} goes past the last word")
            members = range(first, last + 1)
            representative = min(members, key=lambda w: (_depth(w, heads), w))
            for w in members:
                unit_of[w] = len(units)
            units.append((ranges[word_id]["form"], representative, ranges[word_id]["misc"]))
            word_id = last + 1
        else:
            unit_of[word_id] = len(units)
            units.append((words[word_id - 1]["form"], word_id, words[word_id - 1]["misc"]))
            word_id += 1
    unit_heads, unit_labels = [], []
    for form, representative, _ in units:
        head = heads[representative - 1]
        unit_heads.append(0 if head == 0 else unit_of[head] + 1)
        unit_labels.append(labels[representative - 1])

    forms = [form for form, _, _ in units]
    text = tokens.metadata.get("text") if tokens.metadata else None
    if text is not None:
        offsets, position = [], 0
        for form in forms:
            found = text.find(form, position)
            if found < 0:
                raise ParseError(f"{where}: word {form!r} not found in '# text'")
            offsets.append(found)
            position = found + len(form)
        spaces = spaces_from_offsets(text, forms, offsets)
    else:
        spaces = [""]
        for _, _, misc in units[:-1]:
            spaces.append("" if (misc or {}).get("SpaceAfter") == "No" else " ")
    parsed = ParsedSentence(forms, spaces, unit_heads, unit_labels)
    try:
        parsed.validate()
    except ParseError as error:
        raise ParseError(f"{where}: {error}") from None
    return parsed


def read_conllu(path: str) -> Iterator[Tuple[int, object]]:
    """Yield (first line number, ParsedSentence or ParseError) for every sentence of a CoNLL-U file."""
    for start, block in read_blocks(path):
        where = f"{path}:{start}"
        try:
            sentences = conllu.parse(block)
            if len(sentences) != 1:
                raise ParseError(f"{where}: expected one sentence in the block, got {len(sentences)}")
            yield start, tree_from_tokenlist(sentences[0], where)
        except ParseException as error:
            yield start, ParseError(f"{where}: malformed CoNLL-U: {error}")
        except ParseError as error:
            yield start, error
