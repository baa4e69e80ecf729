"""One CoNLL-U convention: preprocessing and the tree scorer of fairseq-syntax-evaluate read trees over surface
words through the same reader (fairseq_syntax.parsers.conllu_reader), a multiword token being one word."""
import gzip
from pathlib import Path

import pytest

from fairseq_syntax.evaluation.cli import main
from fairseq_syntax.evaluation.metrics import EvaluationError
from fairseq_syntax.evaluation.trees import read_trees
from fairseq_syntax.parsers.conllu_reader import read_conllu

# "zum" = "zu dem" (3-4) and "im" = "in dem" (8-9); the ranges' words hang from different places, so the choice of
# the representative (the word closest to the root, the first on a tie) shows in heads and labels
MULTIWORD = """# sent_id = zum
# text = Er geht zum Haus.
1\tEr\ter\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tgeht\tgehen\tVERB\t_\t_\t0\troot\t_\t_
3-4\tzum\t_\t_\t_\t_\t_\t_\t_\t_
3\tzu\tzu\tADP\t_\t_\t5\tcase\t_\t_
4\tdem\tder\tDET\t_\t_\t5\tdet\t_\t_
5\tHaus\tHaus\tNOUN\t_\t_\t2\tobl\t_\tSpaceAfter=No
5.1\tgeht\tgehen\tVERB\t_\t_\t_\t_\t0:root\t_
6\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

# sent_id = im
# text = Das Kind spielt im Garten.
1\tDas\tder\tDET\t_\t_\t2\tdet\t_\t_
2\tKind\tKind\tNOUN\t_\t_\t3\tnsubj\t_\t_
3\tspielt\tspielen\tVERB\t_\t_\t0\troot\t_\t_
4-5\tim\t_\t_\t_\t_\t_\t_\t_\t_
4\tin\tin\tADP\t_\t_\t6\tcase\t_\t_
5\tdem\tder\tDET\t_\t_\t6\tdet\t_\t_
6\tGarten\tGarten\tNOUN\t_\t_\t3\tobl\t_\tSpaceAfter=No
7\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

# sent_id = representative-is-not-the-first
# text = Er sagte es dem Mann.
1\tEr\ter\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tsagte\tsagen\tVERB\t_\t_\t0\troot\t_\t_
3-4\tes\t_\t_\t_\t_\t_\t_\t_\t_
3\tes_a\tes\tPRON\t_\t_\t4\tdep\t_\t_
4\tes_b\tes\tPRON\t_\t_\t2\tobj\t_\t_
5\tdem\tder\tDET\t_\t_\t6\tdet\t_\t_
6\tMann\tMann\tNOUN\t_\t_\t3\tiobj\t_\tSpaceAfter=No
7\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

"""
# the surface-word trees: "zum"/"im" one word with the head and label of "zu"/"in" (tie, first word); in the
# third sentence "es_b" (one arc from the root) represents the range and "Mann", a dependent of "es_a", attaches
# to the multiword token
EXPECTED = [
    (["Er", "geht", "zum", "Haus", "."], [2, 0, 4, 2, 2], ["nsubj", "root", "case", "obl", "punct"]),
    (["Das", "Kind", "spielt", "im", "Garten", "."], [2, 3, 0, 5, 3, 3],
     ["det", "nsubj", "root", "case", "obl", "punct"]),
    (["Er", "sagte", "es", "dem", "Mann", "."], [2, 0, 2, 5, 3, 2], ["nsubj", "root", "obj", "det", "iobj", "punct"]),
]


def surface_conllu(trees) -> str:
    """The same sentences as a model generates them: one line per surface word, no multiword ranges."""
    blocks = []
    for words, heads, labels in trees:
        lines = [f"{i}\t{w}\t_\t_\t_\t_\t{h}\t{label}\t_\t_"
                 for i, (w, h, label) in enumerate(zip(words, heads, labels), start=1)]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


@pytest.fixture
def multiword_file(tmp_path) -> Path:
    path = tmp_path / "parsed.conllu"
    path.write_text(MULTIWORD, encoding="utf-8")
    return path


def test_tree_scorer_reads_what_preprocessing_reads(multiword_file, tmp_path):
    preprocessing = [tree for _, tree in read_conllu(str(multiword_file))]
    scorer = read_trees(multiword_file, "parsed trees")
    assert [(t.words, t.heads, t.labels) for t in preprocessing] == EXPECTED
    assert [(t.multiword_tokens, t.merged_words) for t in preprocessing] == [(1, 2), (1, 2), (1, 2)]  # preprocess.json
    assert [(t.words, t.heads, t.labels) for t in scorer] == EXPECTED
    # gzipped as well
    gz = tmp_path / "parsed.conllu.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write(MULTIWORD)
    assert [(t.words, t.heads, t.labels) for t in read_trees(gz, "parsed trees")] == EXPECTED


def test_scoring_trees_with_multiword_tokens(multiword_file, tmp_path):
    hypotheses = tmp_path / "hyp.txt"
    hypotheses.write_text("Er geht zum Haus.\nDas Kind spielt im Garten.\nEr sagte es dem Mann.\n", encoding="utf-8")

    def score(generated: Path, parsed: Path):
        results = main(["--system", f"s={hypotheses}", "--references", str(hypotheses), "--bootstrap-samples", "0",
                        "--generated-trees", f"s={generated}", "--parsed-trees", f"s={parsed}", "--quiet"])
        return results["systems"]["s"]["trees"]

    # a tree file with multiword tokens against itself: every surface word right
    itself = score(multiword_file, multiword_file)
    assert (itself["uas"], itself["las"], itself["words"], itself["sentences"]) == (100.0, 100.0, 17, 3)
    # a generated tree over surface words ("zum" one word) against a parse that splits "zum" into "zu dem"
    generated = tmp_path / "generated.conllu"
    generated.write_text(surface_conllu(EXPECTED), encoding="utf-8")
    against_parse = score(generated, multiword_file)
    assert (against_parse["uas"], against_parse["las"], against_parse["words"]) == (100.0, 100.0, 17)
    # one wrong head, one wrong label on the multiword tokens' words
    wrong = [(w, list(h), list(lab)) for w, h, lab in EXPECTED]
    wrong[0][1][2] = 2  # "zum" -> "geht"
    wrong[1][2][3] = "det"  # "im" labelled det
    generated.write_text(surface_conllu(wrong), encoding="utf-8")
    scores = score(generated, multiword_file)
    assert scores["uas"] == pytest.approx(100 * 16 / 17) and scores["las"] == pytest.approx(100 * 15 / 17)


def test_tree_scorer_keeps_scoring_ill_formed_trees_but_not_unreadable_ones(tmp_path):
    # the scorer reads a generated tree as it is (two roots; a cycle through a multiword token) ...
    broken = tmp_path / "broken.conllu"
    broken.write_text(MULTIWORD.replace("2\tKind\tKind\tNOUN\t_\t_\t3", "2\tKind\tKind\tNOUN\t_\t_\t0")
                      .replace("5\tHaus\tHaus\tNOUN\t_\t_\t2", "5\tHaus\tHaus\tNOUN\t_\t_\t3"), encoding="utf-8")
    trees = read_trees(broken, "generated trees")
    assert trees[1].heads == [2, 0, 0, 5, 3, 3]
    assert trees[0].words == ["Er", "geht", "zum", "Haus", "."]
    # ... which preprocessing drops
    assert [type(item).__name__ for _, item in read_conllu(str(broken))] == ["ParseError", "ParseError",
                                                                             "ParsedSentence"]
    # a word without a head is an error naming the file, the line and the sentence
    no_head = tmp_path / "no_head.conllu"
    no_head.write_text(MULTIWORD.replace("1\tDas\tder\tDET\t_\t_\t2", "1\tDas\tder\tDET\t_\t_\t_"), encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"sentence 2: .*no_head.conllu:12: word 1 \('Das'\) has no head"):
        read_trees(no_head, "generated trees")
