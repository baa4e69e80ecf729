"""sentencepiece trained and applied so that every piece belongs to exactly one parser word and decoding the
pieces gives the sentence back exactly.

The model keeps text as is (identity normalisation, no whitespace clean-up, byte fallback for unseen
characters). Whitespace other than " " (tab, no-break space, ...) is kept out of the vocabulary, so it is always
encoded as byte pieces (<0x09>, <0xC2><0xA0>): fairseq dictionaries and generate output are whitespace-separated,
and a piece containing a tab or a no-break space would be split apart there. Every sentence is encoded as
" " + sentence, so its first word gets the word-initial "▁" like the others; each word is encoded with the
whitespace that precedes it, so pieces never straddle two words.
"""
import os
import random
import re
import tempfile
from typing import Iterable, List, Protocol, Sequence, Tuple

import sentencepiece as spm



class WordsWithSpaces(Protocol):
    """A parsed sentence as the codec needs it (fairseq_syntax.parsers.base.ParsedSentence is one)."""
    words: List[str]
    spaces_before: List[str]

SPM_OPTIONS = dict(
    model_type="unigram",
    normalization_rule_name="identity",
    add_dummy_prefix=False,
    remove_extra_whitespaces=False,
    byte_fallback=True,
    character_coverage=1.0,
    split_digits=False,
    minloglevel=2,
)
SPM_MAX_TRAINING_SENTENCES = 2_000_000
OTHER_WHITESPACE = re.compile(r"[^\S ]")
# sentencepiece's check (trainer_interface.cc) that the vocabulary holds every character of the text plus the meta
# pieces (<unk>, <s>, </s> and the 256 byte pieces): "... Vocabulary size is smaller than required_chars. 300 vs 346"
TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


class VocabularyTooSmallError(ValueError):
    """The requested sentencepiece vocabulary cannot hold the characters of the training text."""

    def __init__(self, vocab_size: int, required: int):
        self.vocab_size, self.required = vocab_size, required
        super().__init__(
            f"sentencepiece vocabulary size {vocab_size} is too small for this training text: it must be at least "
            f"{required} (every distinct character of the text, the 256 byte-fallback pieces and <unk>, <s>, </s> "
            f"each need a piece). Raise --spm-vocab-size to {required} or more")


def train_sentencepiece(sentences: Iterable[str], vocab_size: int, model_prefix: str, seed: int = 1,
                        num_threads: int = 2) -> str:
    """Train on the given sentences (a random sample of at most SPM_MAX_TRAINING_SENTENCES); returns .model path."""
    sentences = list(sentences)
    if len(sentences) > SPM_MAX_TRAINING_SENTENCES:
        sentences = random.Random(seed).sample(sentences, SPM_MAX_TRAINING_SENTENCES)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        for sentence in sentences:
            f.write(" " + OTHER_WHITESPACE.sub(" ", sentence) + "\n")
        corpus = f.name
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=model_prefix, vocab_size=vocab_size,
                                       num_threads=num_threads, hard_vocab_limit=False,
                                       **SPM_OPTIONS)
    except RuntimeError as error:
        too_small = TOO_SMALL.search(str(error))
        if too_small is None:
            raise
        raise VocabularyTooSmallError(vocab_size, int(too_small.group(2))) from None
    finally:
        os.unlink(corpus)
    return model_prefix + ".model"


class WordAlignedEncoder:
    def __init__(self, model_path: str):
        self.model_path = model_path
        self.processor = spm.SentencePieceProcessor(model_file=model_path)

    @staticmethod
    def segments(sentence: WordsWithSpaces) -> List[str]:
        """Each word with the whitespace before it (the first word gets the sentence's leading " ")."""
        return [" " + sentence.words[0]] + [s + w for s, w in zip(sentence.spaces_before[1:], sentence.words[1:])]

    def encode_words(self, sentence: WordsWithSpaces) -> Tuple[List[str], List[int]]:
        """Pieces of the sentence and, for each piece, the 0-based index of the word it belongs to."""
        return self.encode_many_words([sentence])[0]

    def encode_many_words(self, sentences: Sequence[WordsWithSpaces], num_threads: int = 2):
        """encode_words for many sentences in one call into sentencepiece (its threads, no per-word Python call)."""
        flat, bounds = [], [0]
        for sentence in sentences:
            flat.extend(self.segments(sentence))
            bounds.append(len(flat))
        encoded = self.processor.encode(flat, out_type=str, num_threads=num_threads)
        results = []
        for start, end in zip(bounds[:-1], bounds[1:]):
            pieces, word_ids = [], []
            for word_index, word_pieces in enumerate(encoded[start:end]):
                pieces.extend(word_pieces)
                word_ids.extend([word_index] * len(word_pieces))
            results.append((pieces, word_ids))
        return results

    def encode_text(self, text: str) -> List[str]:
        return self.processor.encode(" " + text, out_type=str)

    def encode_texts(self, texts: Sequence[str], num_threads: int = 2) -> List[List[str]]:
        return self.processor.encode([" " + text for text in texts], out_type=str, num_threads=num_threads)

    def decode(self, pieces: Sequence[str]) -> str:
        text = self.processor.decode(list(pieces))
        return text[1:] if text.startswith(" ") else text
