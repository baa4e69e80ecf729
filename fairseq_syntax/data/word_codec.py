"""Word-level segmentation (`fairseq-syntax-preprocess --word-vocabulary`): every word is one token, no subwords.

The words are a parser's words (parsed sides) or a rule-based tokenizer's (unparsed sides, raw text; the
tokenizer lives in fairseq_syntax/parsers/tokenizer.py and is handed in, since the data contract imports no
parser). A token is written so that output decodes back to text as sentencepiece output does: a word preceded by
whitespace (and a sentence's first word) is "\u2581" + word, a word attached to the previous one ("," or "n't") is the
bare word. Decoding joins the tokens, turns "\u2581" into " " and drops the leading space; any run of whitespace
between two words comes back as one space. The vocabulary therefore tells "\u2581," from "," (a small difference
from a plain word vocabulary). A word that contains whitespace or "\u2581", or is one of fairseq's special symbols,
cannot be a token: `word_problem` says why, and preprocessing drops its sentence with that reason.

The codec has the interface of sentencepiece_codec.WordAlignedEncoder (encode_many_words, encode_texts,
encode_text, decode); its subword -> word map is the identity, so syntax channels stay one entry per token.
"""
from collections import Counter
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from .channels import WORDS
from .sentencepiece_codec import WordsWithSpaces

WORD_MARK = "\u2581"
DEFAULT_MIN_COUNT = 2
UNK = "<unk>"
# fairseq's Dictionary specials: a token spelled like one would take its id
SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", UNK)


class WordTokenError(ValueError):
    """A sentence with a word that cannot be a word-level token (the message says which and why)."""


def word_problem(word: str) -> Optional[str]:
    """Why `word` cannot be a word-level token, or None."""
    if not word:
        return "an empty word cannot be a word-level token"
    if any(char.isspace() for char in word):
        return f"word {word!r} contains whitespace, which a word-level token cannot hold"
    if WORD_MARK in word:
        return f"word {word!r} contains U+2581, the word-initial mark of word-level tokens"
    if word in SPECIAL_SYMBOLS:
        return f"word {word!r} is one of fairseq's special symbols"
    return None


def sentence_problem(sentence: WordsWithSpaces) -> Optional[str]:
    """Why the sentence cannot be written as word-level tokens (its first bad word), or None."""
    if not sentence.words:
        return "no words"
    for word in sentence.words:
        problem = word_problem(word)
        if problem is not None:
            return problem
    return None


def count_tokens(sentences: Iterable[Sequence[str]]) -> Counter:
    return Counter(token for tokens in sentences for token in tokens)


def vocabulary(counts: Counter, min_count: int = DEFAULT_MIN_COUNT) -> List[Tuple[str, int]]:
    """(token, count) of every token seen at least `min_count` times, by count (descending), then the token: the
    order does not depend on the order of the lines, so runs agree."""
    return sorted(((token, n) for token, n in counts.items() if n >= min_count), key=lambda item: (-item[1], item[0]))


Tokenizer = Callable[[Sequence[str]], List[object]]  # texts -> per text: words with spaces, or an exception


class WordCodec:
    """Word-level tokens of parsed sentences (encode_many_words) and of raw text (encode_texts, with the
    `tokenizer` given: a callable from texts to items with `words` and `spaces_before`, or an Exception per text
    that cannot be tokenized)."""

    kind = WORDS

    def __init__(self, tokenizer: Optional[Tokenizer] = None):
        self.tokenizer = tokenizer

    @staticmethod
    def tokens(sentence: WordsWithSpaces) -> List[str]:
        """The token of every word (see the module docstring). Raises WordTokenError for a bad word."""
        problem = sentence_problem(sentence)
        if problem is not None:
            raise WordTokenError(problem)
        return [WORD_MARK + word if i == 0 or space else word
                for i, (space, word) in enumerate(zip(sentence.spaces_before, sentence.words))]

    def encode_words(self, sentence: WordsWithSpaces) -> Tuple[List[str], List[int]]:
        tokens = self.tokens(sentence)
        return tokens, list(range(len(tokens)))

    def encode_many_words(self, sentences: Sequence[WordsWithSpaces], num_threads: int = 1):
        """(tokens, word of each token) per sentence: the word map is the identity."""
        return [self.encode_words(sentence) for sentence in sentences]

    def tokenize(self, texts: Sequence[str]) -> List[object]:
        if self.tokenizer is None:
            raise ValueError("this word-level codec has no tokenizer: raw text cannot be split into words")
        return list(self.tokenizer(list(texts)))

    def encode_texts(self, texts: Sequence[str], num_threads: int = 1) -> List[List[str]]:
        results = []
        for text, sentence in zip(texts, self.tokenize(texts)):
            if isinstance(sentence, Exception):
                raise WordTokenError(f"cannot tokenize {text[:100]!r}: {sentence}")
            results.append(self.tokens(sentence))
        return results

    def encode_text(self, text: str) -> List[str]:
        return self.encode_texts([text])[0]

    def decode(self, tokens: Sequence[str]) -> str:
        """Join, "\u2581" -> " ", drop the leading space. An <unk> (a word out of the vocabulary) stands on its own."""
        text = "".join(" " + token if token == UNK else token.replace(WORD_MARK, " ") for token in tokens if token)
        return text[1:] if text.startswith(" ") else text

