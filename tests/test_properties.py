"""Property tests (hypothesis) on the CoNLL-U reader and the subword alignment."""
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairseq_syntax.parsers.base import ParsedSentence
from fairseq_syntax.parsers.conllu_reader import read_conllu
from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder, train_sentencepiece

ALPHABET = string.ascii_letters + string.digits + ".,;:!?'\"()-äöüßéñ漢字€"
WORD = st.text(alphabet=ALPHABET, min_size=1, max_size=12)
SPACE = st.sampled_from([" ", "  ", "\t", "\u00a0", " \u00a0 "])


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    sentences = ["A man is riding a bike down the street.", "Zwei Hunde spielen im Schnee.",
                 "Children (three of them) are swimming!", "Ein Mann fährt Fahrrad; er lächelt."] * 50
    return WordAlignedEncoder(train_sentencepiece(sentences, 330, str(tmp_path_factory.mktemp("spm") / "m")))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(WORD, min_size=1, max_size=15), data=st.data())
def test_pieces_belong_to_one_word_and_decode_to_the_sentence(encoder, words, data):
    spaces = [""] + [data.draw(st.one_of(st.just(""), SPACE)) for _ in words[1:]]
    sentence = ParsedSentence(words, spaces, [0] * len(words), ["x"] * len(words))
    pieces, word_ids = encoder.encode_words(sentence)
    assert encoder.decode(pieces) == sentence.text
    assert word_ids == sorted(word_ids) and set(word_ids) == set(range(len(words)))
    for index, word in enumerate(words):
        own = [p for p, w in zip(pieces, word_ids) if w == index]
        assert encoder.processor.decode(own) == (" " if index == 0 else spaces[index]) + word


@st.composite
def trees(draw):
    """A random tree over n words (each word attaches to one placed before it in a random order), random
    SpaceAfter, optional multiword tokens over adjacent words and empty nodes."""
    n = draw(st.integers(1, 12))
    order = draw(st.permutations(range(1, n + 1)))
    heads = {order[0]: 0}
    for k, node in enumerate(order[1:], start=1):
        heads[node] = order[draw(st.integers(0, k - 1))]
    forms = [draw(st.text(alphabet=string.ascii_letters + "äöü", min_size=1, max_size=6)) for _ in range(n)]
    space_after = [draw(st.booleans()) for _ in range(n)]
    multiword = draw(st.one_of(st.none(), st.integers(1, n - 1))) if n > 1 else None
    empty_after = draw(st.one_of(st.none(), st.integers(1, n)))
    return n, [heads[i] for i in range(1, n + 1)], forms, space_after, multiword, empty_after


def to_conllu(n, heads, forms, space_after, multiword, empty_after):
    lines = ["# sent_id = s1"]
    for i in range(1, n + 1):
        if multiword == i:
            misc = "_" if space_after[i] else "SpaceAfter=No"
            lines.append(f"{i}-{i + 1}\t{forms[i - 1]}{forms[i]}\t_\t_\t_\t_\t_\t_\t_\t{misc}")
        misc = "_" if space_after[i - 1] or multiword == i else "SpaceAfter=No"
        if multiword is not None and i in (multiword, multiword + 1):
            misc = "_"
        label = "root" if heads[i - 1] == 0 else "dep"
        lines.append(f"{i}\t{forms[i - 1]}\t_\tX\t_\t_\t{heads[i - 1]}\t{label}\t_\t{misc}")
        if empty_after == i:
            lines.append(f"{i}.1\tgap\t_\tX\t_\t_\t_\t_\t{i}:dep\t_")
    return "\n".join(lines) + "\n\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=trees())
def test_conllu_reader_keeps_trees(tmp_path, tree):
    n, heads, forms, space_after, multiword, empty_after = tree
    path = tmp_path / "t.conllu"
    path.write_text(to_conllu(*tree), encoding="utf-8")
    [(start, parsed)] = list(read_conllu(str(path)))
    assert start == 1 and isinstance(parsed, ParsedSentence), parsed
    parsed.validate()  # always a single-rooted tree
    if multiword is None:
        assert parsed.words == forms and parsed.heads == heads
        expected_text = "".join(form + (" " if space and i < n - 1 else "")
                                for i, (form, space) in enumerate(zip(forms, space_after)))
        assert parsed.text == expected_text
    else:
        assert len(parsed.words) == n - 1
        assert parsed.words[multiword - 1] == forms[multiword - 1] + forms[multiword]
        # words outside the multiword token keep their head word (renumbered around the merged pair)
        unit = lambda w: w if w <= multiword else w - 1  # noqa: E731
        for word in range(1, n + 1):
            if word in (multiword, multiword + 1) or heads[word - 1] == 0:
                continue
            if heads[word - 1] in (multiword, multiword + 1):
                assert parsed.heads[unit(word) - 1] == multiword
            else:
                assert parsed.heads[unit(word) - 1] == unit(heads[word - 1])
