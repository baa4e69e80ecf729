"""Every piece belongs to exactly one word and decoding the pieces gives the sentence back: checked on every line
of Multi30k train, English and German (words from spaCy's rule-based tokenizer, as the parsers see them)."""
import gzip

import pytest
import spacy

from fairseq_syntax.parsers.base import ParsedSentence, spaces_from_offsets
from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder, train_sentencepiece
from fairseq_syntax.parsers.base import realign
from fairseq_syntax.data.text_normalization import normalize_line, parser_view

from .helpers import marked_slow


def words_of(tokenizer, text):
    """Words as the preprocessor gets them: tokenised on the parser's view, then located in the sentence."""
    view = parser_view(text)
    doc = tokenizer(view)
    words = [t.text for t in doc]
    tree = ParsedSentence(words, spaces_from_offsets(view, words, [t.idx for t in doc]), [0] * len(words),
                          ["x"] * len(words))
    return realign(tree, text)


@pytest.fixture(scope="module")
def multi30k_train(data_root):
    lines = {}
    for lang in ("en", "de"):
        with gzip.open(data_root / "multi30k" / "task1_raw" / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines[lang] = [line.rstrip("\n") for line in f]
    return lines


@pytest.fixture(scope="module")
def encoder(multi30k_train, tmp_path_factory):
    # trained on a sample so unseen characters and words are exercised too (byte fallback)
    sample = multi30k_train["en"][:3000] + multi30k_train["de"][:3000]
    model = train_sentencepiece(sample, 2000, str(tmp_path_factory.mktemp("spm") / "spm"))
    return WordAlignedEncoder(model)


@pytest.mark.parametrize("lang", marked_slow(["en", "de"], {"de"}))
def test_every_train_line_round_trips(multi30k_train, encoder, lang):
    tokenizer = spacy.blank(lang).tokenizer
    assert len(multi30k_train[lang]) == 29000
    failures = []
    for number, line in enumerate(multi30k_train[lang], start=1):
        text, problem = normalize_line(line)
        assert problem is None, (number, problem)
        sentence = words_of(tokenizer, text)
        pieces, word_ids = encoder.encode_words(sentence)
        if encoder.decode(pieces) != text:
            failures.append((number, text, pieces))
            continue
        # each word's own pieces decode to exactly that word (with its leading whitespace)
        assert word_ids == sorted(word_ids) and set(word_ids) == set(range(len(sentence.words)))
        for index, word in enumerate(sentence.words):
            own = [p for p, w in zip(pieces, word_ids) if w == index]
            assert encoder.processor.decode(own).strip() == word
        # a side without a parser is encoded whole: must round-trip too
        assert encoder.decode(encoder.encode_text(text)) == text
    assert not failures, failures[:3]
    # the sentence is the line itself (double spaces, tabs and no-break spaces included), less only leading and
    # trailing whitespace, which some German lines have
    assert all(normalize_line(line)[0] == line.strip() for line in multi30k_train[lang])
