"""Words of unparsed text, for word-level data-bins (fairseq_syntax/data/word_codec.py): spaCy's rule-based
tokenizer, so both sides of a data-bin are tokenized as the paper of the setting (Liu & Sima'an) did.

`SpacyTokenizer(lang)` is `spacy.blank(lang)`'s tokenizer (rules only, nothing is downloaded; the tokenizer the
SuPar parser splits words with); `SpacyTokenizer(lang, model)` is the tokenizer of an installed pipeline, whose
words are exactly the words its parser parses. Like the parsers, it sees the sentence with its whitespace runs as
single spaces (text_normalization.parser_view) and its words are then located in the original sentence, so the
whitespace before each word is the original one.
"""
import re
from typing import List, Optional, Sequence

from ..data.text_normalization import parser_view
from .base import ParsedSentence, ParseError, spaces_from_offsets, word_offsets

_WORD = re.compile(r"\S+")


class SpacyTokenizer:
    def __init__(self, lang: str, model: Optional[str] = None):
        import spacy

        self.name = f"spacy:{model}" if model else f"spacy.blank({lang})"
        try:
            nlp = spacy.load(model) if model else spacy.blank(lang)
        except (OSError, ImportError) as error:
            raise SystemExit(f"cannot load a spaCy tokenizer for {model or lang!r}: {error}") from None
        self._tokenizer = nlp.tokenizer

    def __call__(self, texts: Sequence[str]) -> List[object]:
        return self.tokenize(texts)

    def tokenize(self, texts: Sequence[str], batch_size: int = 1000) -> List[object]:
        """Per text: a ParsedSentence without heads and labels (its words and the whitespace before each), or a
        ParseError (not raised) saying why it has no words."""
        texts = list(texts)
        results = []
        for text, doc in zip(texts, self._tokenizer.pipe((parser_view(t) for t in texts), batch_size=batch_size)):
            try:
                results.append(located(text, [m.group() for token in doc for m in _WORD.finditer(token.text)]))
            except ParseError as error:
                results.append(error)
        return results


def located(text: str, words: List[str]) -> ParsedSentence:
    """The words found in order in `text`, with the whitespace before each."""
    if not words:
        raise ParseError("no words")
    return ParsedSentence(words, spaces_from_offsets(text, words, word_offsets(text, words)), heads=[], labels=[])


def side_tokenizer(lang: str, parser_spec: Optional[str] = None) -> SpacyTokenizer:
    """The tokenizer that splits raw text of a side as its preprocessing did: a spaCy pipeline's own tokenizer for
    a `spacy:MODEL` side; spaCy's blank tokenizer otherwise (what SuPar sides and unparsed sides were tokenized
    with; a `conllu` side's words came from its files, which the blank tokenizer can only approximate)."""
    kind, _, model = (parser_spec or "").partition(":")
    return SpacyTokenizer(lang, model if kind == "spacy" and model else None)
