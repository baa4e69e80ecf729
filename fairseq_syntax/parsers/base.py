"""What every parser backend returns: one dependency tree per sentence over its words.

A `ParsedSentence` keeps enough to rebuild the sentence exactly (each word with the whitespace before it), so
subword pieces can be assigned to exactly one word and decoding the pieces gives the sentence back.
"""
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Optional, Sequence

from ..data.trees import tree_problem


class ParseError(ValueError):
    """A sentence the parser could not give a well-formed tree for (the line is dropped with this reason)."""


@dataclass
class ParsedSentence:
    words: List[str]
    # whitespace that precedes each word in the original sentence ("" for the first word and for attached words)
    spaces_before: List[str]
    # 1-based head word index per word, 0 for the root (CoNLL-U convention)
    heads: List[int]
    labels: List[str]
    # optional per-word arc distributions: row i is a distribution over heads 0..n (n x (n+1)), from SuPar
    arc_probs: Optional[list] = field(default=None, repr=False)
    # optional compressed labeled dependency distributions (LDD), from SuPar with --source-ldd
    distributions: Optional[object] = field(default=None, repr=False)
    # read from CoNLL-U: multiword tokens collapsed into one surface word, and the syntactic words they held
    # (conllu_reader.surface_words); counted in preprocess.json, not part of the tree
    multiword_tokens: int = field(default=0, repr=False, compare=False)
    merged_words: int = field(default=0, repr=False, compare=False)

    @property
    def text(self) -> str:
        return "".join(s + w for s, w in zip(self.spaces_before, self.words))

    def validate(self) -> None:
        """Raise ParseError unless this is a single-rooted tree over its words."""
        n = len(self.words)
        if n == 0:
            raise ParseError("no words")
        if not (len(self.spaces_before) == len(self.heads) == len(self.labels) == n):
            raise ParseError("words, spaces, heads and labels differ in length")
        if any(w == "" or any(c.isspace() for c in w) for w in self.words):
            raise ParseError("a word is empty or contains whitespace")
        problem = tree_problem(self.heads)
        if problem is not None:
            raise ParseError(problem)


class Parser:
    """A dependency parser backend. `parse` yields one item per input sentence, in order: a ParsedSentence, or a
    ParseError instance (not raised) for a sentence that could not be parsed, so the caller can drop and report it."""

    name = "parser"

    def label_inventory(self) -> Optional[List[str]]:
        """Every label this parser can output, when it has a fixed set (None otherwise)."""
        return None

    def parse(self, sentences: Sequence[str], batch_size: int = 256) -> Iterator[object]:
        raise NotImplementedError

    def parse_words(self, word_lists: Sequence[Sequence[str]],
                    spaces_before: Optional[Sequence[Sequence[str]]] = None,
                    batch_size: int = 256) -> Iterator[object]:
        """Like `parse`, for sentences already split into words: each result's words are exactly the given ones
        (nothing is re-tokenised), with `spaces_before` (per sentence, the whitespace before each word; default ""
        for the first word and " " for the others) as the whitespace between them."""
        raise NotImplementedError(f"{self.name} cannot parse pre-tokenised words")


def given_spaces(words: Sequence[str], spaces: Optional[Sequence[str]]) -> List[str]:
    """The whitespace before each of `words`: `spaces` as given, or "" then " " between words."""
    if spaces is None:
        return ["" if i == 0 else " " for i in range(len(words))]
    if len(spaces) != len(words):
        raise ValueError(f"{len(words)} words but {len(spaces)} spaces")
    return list(spaces)


def word_offsets(text: str, words: Iterable[str]) -> List[int]:
    """Where each word starts in `text`, found in order (each after the previous one's end)."""
    offsets, position = [], 0
    for word in words:
        found = text.find(word, position)
        if found < 0:
            raise ParseError(f"word {word!r} not found in the sentence")
        offsets.append(found)
        position = found + len(word)
    return offsets


def spaces_from_offsets(text: str, words: Iterable[str], starts: Iterable[int]) -> List[str]:
    """Whitespace before each word given each word's character offset in `text`; checks words really lie there."""
    spaces, end = [], 0
    for word, start in zip(words, starts):
        if text[start:start + len(word)] != word or text[end:start].strip():
            raise ParseError(f"word {word!r} does not match the sentence at offset {start}")
        spaces.append(text[end:start])
        end = start + len(word)
    if text[end:].strip():
        raise ParseError("words do not cover the sentence")
    return spaces


def realign(sentence: ParsedSentence, text: str) -> ParsedSentence:
    """The same tree with its words located in `text` (which differs from what the parser saw only in its
    whitespace), so the whitespace before each word is the original one."""
    offsets, position = [], 0
    for word in sentence.words:
        found = text.find(word, position)
        if found < 0:
            raise ParseError(f"word {word!r} not found in the sentence")
        offsets.append(found)
        position = found + len(word)
    return ParsedSentence(sentence.words, spaces_from_offsets(text, sentence.words, offsets), sentence.heads,
                          sentence.labels, sentence.arc_probs, sentence.distributions)


def realigned(parsed, text: str):
    """A parser's item for `text` (a ParsedSentence or a ParseError) with its words located in `text`, or the
    ParseError saying why not (preprocessing and raw-text translation both use this)."""
    if isinstance(parsed, ParseError):
        return parsed
    try:
        return realign(parsed, text)
    except ParseError as error:
        return error
