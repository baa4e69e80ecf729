"""Dependency trees from CoNLL-U files, read with the `conllu` library: the one CoNLL-U reader of the project.

Preprocessing (gold or externally parsed `{pref}.{lang}.conllu`, `read_conllu`) and the tree scorer of
`fairseq-syntax-evaluate` (`--generated-trees` / `--parsed-trees`, `read_conllu(..., check_tree=False)`) read trees
through `surface_words`, so both see the same words, heads and labels.

The convention: trees are over SURFACE words (the tokens of the sentence text), not over UD's syntactic words.

- A multiword token (a range line such as `3-4 zum` over the syntactic words `3 zu` and `4 dem`) becomes ONE word
  with the range line's form ("zum"), because subword pieces of the surface token cannot be split between its
  syntactic words, and the trees a model generates are over the surface words of its output.
- Its head and label are those of its representative: the word of the range closest to the root (fewest arcs up
  to the root; on a tie, the first word of the range). Its head is then the surface word that holds the
  representative's head (0 when the representative is the root).
- Dependents of any word of the range attach to the multiword token (their head becomes its surface index).
- Empty nodes (enhanced UD, ids like `5.1`) are skipped.
- Heads are 1-based surface-word indices, 0 for the root, as in CoNLL-U.

Example: `1 Er ->2 nsubj | 2 geht root | 3-4 zum | 3 zu ->5 case | 4 dem ->5 det | 5 Haus ->2 obl` reads as the
words Er geht zum Haus with heads 2 0 4 2 and labels nsubj root case obl ("zu" and "dem" both hang from "Haus",
three arcs from the root; on that tie the first, "zu", represents "zum").

`check_tree=True` (preprocessing) also requires a label on every word and a single-rooted tree without cycles;
`check_tree=False` (scoring) reads any tree (a generated one may have two roots or a cycle), a missing label as
"_". Either way a word without a head, a head outside the sentence or word ids that are not 1..n is an error.
"""
import gzip
from typing import Iterator, List, NamedTuple, Optional, Tuple

import conllu
from conllu.exceptions import ParseException

from .base import ParsedSentence, ParseError, spaces_from_offsets, word_offsets


def open_text(path: str):
    path = str(path)
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


def read_sentences(path: str) -> Iterator[Tuple[str, conllu.TokenList]]:
    """(where = "PATH:LINE", its sentence) for every block of a CoNLL-U file, one sentence per block; ParseError
    naming the place for a malformed block or one that holds more or fewer sentences."""
    for start, block in read_blocks(path):
        where = f"{path}:{start}"
        try:
            sentences = conllu.parse(block)
        except ParseException as error:
            raise ParseError(f"{where}: malformed CoNLL-U: {error}") from None
        if len(sentences) != 1:
            raise ParseError(f"{where}: expected one sentence in the block, got {len(sentences)}")
        yield where, sentences[0]


def _depth(word: int, heads: List[int]) -> int:
    depth, seen = 0, set()
    while word != 0 and word not in seen:
        seen.add(word)
        word = heads[word - 1]
        depth += 1
    return depth


class SurfaceWords(NamedTuple):
    """One sentence over its surface words (see the module docstring): forms, 1-based heads (0 = root), labels,
    each word's MISC field (for SpaceAfter), and how many multiword tokens were collapsed and how many syntactic
    words they held."""
    forms: List[str]
    heads: List[int]
    labels: List[str]
    miscs: List[Optional[dict]]
    multiword_tokens: int = 0
    merged_words: int = 0


def surface_words(tokens, where: str, require_labels: bool = True) -> SurfaceWords:
    """The sentence of a `conllu` TokenList over its surface words: multiword tokens collapsed into one word, empty
    nodes skipped (the convention of the module docstring). ParseError for a sentence without words, word ids that
    are not 1..n, a word without a head, a head outside the sentence, a multiword token past the last word, or
    (with require_labels) a word without a label; the tree itself is not checked."""
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
        if require_labels:
            raise ParseError(f"{where}: a word has no dependency label")
        labels = [label or "_" for label in labels]
    if any(not 0 <= h <= len(words) for h in heads):
        raise ParseError(f"{where}: a head points outside the sentence")

    # units: surface words after collapsing multiword tokens
    unit_of = {}
    units = []  # (form, representative word id, misc)
    collapsed = merged = 0  # multiword tokens, and the syntactic words they held
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
            collapsed, merged = collapsed + 1, merged + len(members)
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
    return SurfaceWords([form for form, _, _ in units], unit_heads, unit_labels, [misc for _, _, misc in units],
                        multiword_tokens=collapsed, merged_words=merged)


def _spaces_from_misc(miscs: List[Optional[dict]]) -> List[str]:
    spaces = [""]
    for misc in miscs[:-1]:
        spaces.append("" if (misc or {}).get("SpaceAfter") == "No" else " ")
    return spaces


def tree_from_tokenlist(tokens, where: str, check_tree: bool = True) -> ParsedSentence:
    """A ParsedSentence over the surface words (`surface_words`), with the whitespace before each word from
    '# text' (or from SpaceAfter=No when there is no '# text'). check_tree: labels required, '# text' must hold
    the words, and the tree must be well-formed (ParsedSentence.validate); without it, a '# text' that does not
    hold the words falls back to SpaceAfter, and the tree is returned as it is."""
    surface = surface_words(tokens, where, require_labels=check_tree)
    forms = surface.forms
    text = tokens.metadata.get("text") if tokens.metadata else None
    if text is not None:
        try:
            try:
                offsets = word_offsets(text, forms)
            except ParseError as error:
                raise ParseError(f"{where}: {str(error).replace('the sentence', repr('# text'))}") from None
            spaces = spaces_from_offsets(text, forms, offsets)
        except ParseError:
            if check_tree:
                raise
            spaces = _spaces_from_misc(surface.miscs)
    else:
        spaces = _spaces_from_misc(surface.miscs)
    parsed = ParsedSentence(forms, spaces, surface.heads, surface.labels, multiword_tokens=surface.multiword_tokens,
                            merged_words=surface.merged_words)
    if check_tree:
        try:
            parsed.validate()
        except ParseError as error:
            raise ParseError(f"{where}: {error}") from None
    return parsed


def read_conllu(path: str, check_tree: bool = True) -> Iterator[Tuple[int, object]]:
    """Yield (first line number, ParsedSentence or ParseError) for every sentence of a (possibly gzipped) CoNLL-U
    file, over surface words (the module docstring). check_tree=True for preprocessing (well-formed, labeled
    trees whose words lie in '# text'); check_tree=False for scoring trees as they are (`tree_from_tokenlist`)."""
    for start, block in read_blocks(path):
        where = f"{path}:{start}"
        try:
            sentences = conllu.parse(block)
            if len(sentences) != 1:
                raise ParseError(f"{where}: expected one sentence in the block, got {len(sentences)}")
            yield start, tree_from_tokenlist(sentences[0], where, check_tree)
        except ParseException as error:
            yield start, ParseError(f"{where}: malformed CoNLL-U: {error}")
        except ParseError as error:
            yield start, error
