"""SuPar backend: train a tiny parser offline with fairseq-syntax-train-parser, then parse raw sentences with it."""
import gzip
import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_syntax.parsers.base import ParsedSentence, ParseError
from fairseq_syntax.paths import data_root
from fairseq_syntax_preprocess.train_parser import evaluate_parser, prepare_conllu

REPO = Path(__file__).resolve().parents[1]
DATA_ROOT = data_root()
EWT_TRAIN = DATA_ROOT / "ud" / "UD_English-EWT" / "en_ewt-ud-train.conllu.gz"

SENTENCES = [
    "The cat sat on the mat.",
    "I don't think she'll come to the meeting tomorrow.",
    "Prices rose by 3.5% in March, the agency said.",
    "Where is the nearest train station?",
    "He gave  the book to his sister and left.",
]


def _read_sentences(path: Path, start: int, count: int):
    """`count` raw CoNLL-U sentence blocks (with their trailing blank line) from a gzipped file."""
    blocks, lines, index = [], [], 0
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            lines.append(line)
            if not line.strip():
                if index >= start:
                    blocks.append("".join(lines))
                index += 1
                lines = []
                if len(blocks) == count:
                    break
    assert len(blocks) == count
    return blocks


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A `small` parser trained for 4 epochs on 300 EWT sentences (two --train files, one gzipped, the last
    one without its final blank line), selected on 100 more and tested on 50 more. About 15-30 s. One torch
    thread: with 2 threads on 2 busy cores (pytest -n 2) torch's spinning threads slow training 50-fold."""
    if not EWT_TRAIN.is_file():
        pytest.skip(f"UD English-EWT not found under {DATA_ROOT} (set DATA_ROOT)")
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _train_tiny_model(tmp_path_factory.mktemp("supar"))
    # under pytest-xdist, workers share one model: the first trains it, the others wait and reuse it
    from filelock import FileLock

    d = tmp_path_factory.getbasetemp().parent / "supar-tiny"
    d.mkdir(exist_ok=True)
    with FileLock(str(d) + ".lock"):
        if (d / "train.stdout").is_file():
            return {"model": d / "out" / "en.supar", "dir": d, "stdout": (d / "train.stdout").read_text()}
        return _train_tiny_model(d)


def _train_tiny_model(d: Path):
    blocks = _read_sentences(EWT_TRAIN, 0, 450)
    with gzip.open(d / "train-a.conllu.gz", "wt", encoding="utf-8") as f:
        f.write("".join(blocks[:150]))
    (d / "train-b.conllu").write_text("".join(blocks[150:300]).rstrip("\n") + "\n", encoding="utf-8")
    with gzip.open(d / "dev.conllu.gz", "wt", encoding="utf-8") as f:
        f.write("".join(blocks[300:400]))
    (d / "test.conllu").write_text("".join(blocks[400:450]), encoding="utf-8")
    model = d / "out" / "en.supar"
    cmd = [sys.executable, "-m", "fairseq_syntax_preprocess.train_parser",
           "--train", str(d / "train-a.conllu.gz"), "--train", str(d / "train-b.conllu"),
           "--dev", str(d / "dev.conllu.gz"), "--test", str(d / "test.conllu"),
           "--output", str(model), "--config", "small", "--epochs", "4", "--seed", "1", "--threads", "1"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (d / "train.stdout").write_text(proc.stdout)
    return {"model": model, "dir": d, "stdout": proc.stdout}


@pytest.fixture(scope="module")
def parser(tiny_model):
    from fairseq_syntax.parsers.supar_parser import SuparParser

    return SuparParser(str(tiny_model["model"]), "en")


def test_training_writes_model_and_scores(tiny_model):
    model = tiny_model["model"]
    assert model.is_file()
    scores = json.loads(Path(str(model) + ".scores.json").read_text())
    assert scores["config"] == "small" and scores["epochs"] == 4
    assert scores["train"]["sentences"] == 300  # both files, the last sentence of each included
    for split, n in (("dev", 100), ("test", 50)):
        s = scores[split]
        assert s["sentences"] == n
        assert 0.0 <= s["LAS"] <= s["UAS"] <= 100.0
        assert f"{split}: UAS {s['UAS']:.2f} LAS {s['LAS']:.2f}" in tiny_model["stdout"]
    work = Path(str(model) + ".work")
    train_text = (work / "train.conllu").read_text(encoding="utf-8")
    assert train_text.endswith("\n\n") and train_text.count("\n\n") == 300
    # multiword tokens ("don't" = do + n't) and empty nodes are dropped: only integer IDs remain
    ids = [line.split("\t")[0] for line in train_text.splitlines() if line and not line.startswith("#")]
    assert all(i.isdigit() for i in ids)


def test_an_interrupted_training_leaves_no_model_at_the_output(tmp_path, monkeypatch):
    """SuPar saves the model at every improving epoch; it reaches --output only once trained and scored, since make
    and compare.py take an existing model file for a finished one (a second campaign invocation once parsed a
    whole data-bin with the half-trained parser of the first)."""
    if not EWT_TRAIN.is_file():
        pytest.skip(f"UD English-EWT not found under {DATA_ROOT} (set DATA_ROOT)")
    from fairseq_syntax_preprocess import train_parser

    blocks = _read_sentences(EWT_TRAIN, 0, 60)
    (tmp_path / "train.conllu").write_text("".join(blocks[:40]), encoding="utf-8")
    (tmp_path / "dev.conllu").write_text("".join(blocks[40:]), encoding="utf-8")

    class Interrupted(Exception):
        pass

    def interrupted(*args, **kwargs):
        raise Interrupted

    monkeypatch.setattr(train_parser, "evaluate_parser", interrupted)  # stopped after SuPar's training
    output = tmp_path / "out" / "en.supar"
    with pytest.raises(Interrupted):
        train_parser.train([str(tmp_path / "train.conllu")], str(tmp_path / "dev.conllu"), str(output),
                           config="small", epochs=1, threads=1)
    assert not output.exists()
    assert (tmp_path / "out" / "en.supar.work" / "model.supar").is_file()  # SuPar did save one


def test_evaluate_parser_matches_reported_scores(tiny_model):
    scores = json.loads(Path(str(tiny_model["model"]) + ".scores.json").read_text())
    again = evaluate_parser(str(tiny_model["model"]), str(tiny_model["dir"] / "dev.conllu.gz"))
    assert (again["UAS"], again["LAS"]) == (scores["dev"]["UAS"], scores["dev"]["LAS"])


def test_parser_evaluation_on_gold_words_matches_supar_own_scores(tiny_model, parser):
    """fairseq_syntax_preprocess.evaluate_parser (the project's scorer, SuparParser.parse_words on the gold
    syntactic words, punctuation included) gives the figures SuPar's own metric gave after training."""
    from fairseq_syntax_preprocess.evaluate_parser import evaluate

    scores = json.loads(Path(str(tiny_model["model"]) + ".scores.json").read_text())["test"]
    ours = evaluate(tiny_model["dir"] / "test.conllu", parser=parser, words="syntactic")
    assert (ours["UAS"], ours["LAS"], ours["scored_words"]) == (scores["UAS"], scores["LAS"], scores["words"])
    assert ours["failed_sentences"] == 0 and ours["las_comparable"]


def test_parses_raw_sentences(parser):
    results = list(parser.parse(SENTENCES))
    assert len(results) == len(SENTENCES)
    for sentence, parsed in zip(SENTENCES, results):
        assert isinstance(parsed, ParsedSentence), parsed
        assert parsed.text == sentence
        parsed.validate()  # one root, no cycles, heads in 0..n
        n = len(parsed.words)
        assert len(parsed.heads) == len(parsed.labels) == n
        assert all(isinstance(label, str) and label for label in parsed.labels)
        assert len(parsed.arc_probs) == n
        for row in parsed.arc_probs:
            assert len(row) == n + 1
            assert all(p >= 0.0 for p in row)
            assert math.isclose(sum(row), 1.0, abs_tol=1e-4)
    inventory = parser.label_inventory()
    assert "nsubj" in inventory and "root" in inventory and not any(label.startswith("<") for label in inventory)
    assert all(label in inventory for r in results for label in r.labels)
    assert results[1].words[:4] == ["I", "do", "n't", "think"]  # spaCy splits like UD syntactic words
    assert results[4].spaces_before[2] == "  "  # the double space is kept


def test_failures_come_back_in_place(parser):
    sentences = ["A dog barked.", "", "   ", "The sun rose over the hills.", "\t",
                 " ".join(["word"] * (parser.max_words + 1)), "Thanks!"]
    results = list(parser.parse(iter(sentences), batch_size=2))
    assert len(results) == len(sentences)
    kinds = [type(r) for r in results]
    assert kinds == [ParsedSentence, ParseError, ParseError, ParsedSentence, ParseError, ParseError, ParsedSentence]
    for sentence, result in zip(sentences, results):
        if isinstance(result, ParsedSentence):
            assert result.text == sentence


def test_parse_words_parses_exactly_the_given_words(parser):
    """Pre-tokenised parsing (the words of generated trees): SuPar gets the words as given, no spaCy split of
    "don't" or "mat." (parse() of the same text splits them), the given whitespace is kept, failures in place."""
    words = [["I", "don't", "think", "so."], ["The", "cat", "sat", "on", "the", "mat."]]
    spaces = [["", " ", " ", " "], ["", " ", "  ", " ", " ", " "]]
    results = list(parser.parse_words(words + [[], ["a", "b c"]], spaces + [[], ["", " "]], batch_size=1))
    for given, before, parsed in zip(words, spaces, results):
        assert isinstance(parsed, ParsedSentence), parsed
        assert parsed.words == given and parsed.spaces_before == before
        parsed.validate()
        assert len(parsed.arc_probs) == len(given)
    assert isinstance(results[2], ParseError) and isinstance(results[3], ParseError)  # no words; a word with a space
    assert next(iter(parser.parse(["I don't think so."]))).words == ["I", "do", "n't", "think", "so", "."]


def test_batching_does_not_change_parses(parser):
    one_by_one = [next(iter(parser.parse([s]))) for s in SENTENCES]
    batched = list(parser.parse(SENTENCES, batch_size=256))
    assert [(r.heads, r.labels) for r in one_by_one] == [(r.heads, r.labels) for r in batched]


def test_full_unpickling_is_scoped_to_the_model_load(tiny_model, parser):
    import torch

    # the parser loaded (fixture) with weights_only=False for that file only; torch.load is back to its default
    with pytest.raises(pickle.UnpicklingError):
        torch.load(str(tiny_model["model"]))


def test_prepare_conllu_drops_multiword_tokens_and_ends_with_blank_line(tmp_path):
    src = tmp_path / "x.conllu"
    src.write_text(
        "# text = I can't.\n"
        "1\tI\tI\tPRON\t_\t_\t3\tnsubj\t_\t_\n"
        "2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "2\tca\tcan\tAUX\t_\t_\t3\taux\t_\t_\n"
        "3\tn't\tnot\tPART\t_\t_\t0\troot\t_\t_\n"
        "3.1\tgo\tgo\tVERB\t_\t_\t_\t_\t0:root\t_\n"
        "4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_\n"
        "\n\n"
        "1\tYes\tyes\tINTJ\t_\t_\t0\troot\t_\t_",  # no final newline at all
        encoding="utf-8")
    out = tmp_path / "out.conllu"
    assert prepare_conllu([str(src)], str(out)) == (2, 5)
    text = out.read_text(encoding="utf-8")
    assert "2-3\t" not in text and "3.1\t" not in text
    assert text.endswith("1\tYes\tyes\tINTJ\t_\t_\t0\troot\t_\t_\n\n")


def test_preprocess_with_supar_parser(tiny_model, tmp_path):
    """fairseq-syntax-preprocess --source-parser supar:PATH end to end; the label dictionary is the model's."""
    from fairseq_syntax_preprocess.cli import cli_main as preprocess_main
    from fairseq_syntax.parsers.supar_parser import SuparParser
    from fairseq_syntax.data.channels import LabelDictionary
    from tests.helpers import write_multi30k_sample
    from tests.test_end_to_end import load_task

    raw = write_multi30k_sample(DATA_ROOT, tmp_path / "raw", counts=(("train", "train", 40),))
    destdir = tmp_path / "bin"
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--source-parser",
                     f"supar:{tiny_model['model']}", "--spm-vocab-size", "400", "--destdir", str(destdir)])
    labels = LabelDictionary.load(str(destdir / "dict.en.labels.txt")).labels[1:]
    assert labels == SuparParser(str(tiny_model["model"]), "en").label_inventory()
    assert len((destdir / "train.linemap").read_text().split()) == 40
    task, _ = load_task(destdir)
    task.load_dataset("train")
    assert len(task.dataset("train")) == 40
