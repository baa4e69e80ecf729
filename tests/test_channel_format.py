"""The side-channel format (fairseq_syntax/data/channels.py): channels of every unit written and read back, and
every inconsistency caught at load with the file and the 0-based sentence at fault, chunk boundaries included."""
import json

import numpy as np
import pytest
import torch
from fairseq.data import indexed_dataset

from fairseq_syntax.data.channels import (
    CHANNELS, TREE_CHANNELS, ChannelSpec, SentenceSyntax, SideManifest, SyntaxManifest, register_channel,
)
from fairseq_syntax.data.syntax_channels import SideChannelError, SyntaxChannels, SyntaxChannelWriter

TEST_CHANNELS = [
    ChannelSpec("test_piece_tag", "piece", "integer", np.int16, help="a signed per-piece value"),
    ChannelSpec("test_topk_labels", "word", "label", np.uint16, width=3, help="top-3 label ids of each word"),
    ChannelSpec("test_topk_probs", "word", "probability", np.uint16, width=3, scale=1000,
                help="their probabilities x 1000"),
    ChannelSpec("test_edge_heads", "edge", "head", np.uint16, help="head of each labeled edge"),
    ChannelSpec("test_edge_deps", "edge", "word_index", np.uint16, help="dependent of each labeled edge"),
    ChannelSpec("test_edge_labels", "edge", "label", np.uint8, help="label of each labeled edge"),
]
for _spec in TEST_CHANNELS:
    register_channel(_spec)
ALL = list(TREE_CHANNELS) + [spec.name for spec in TEST_CHANNELS]
NUM_LABELS = 4  # ids 1..3

# three sentences: 3 words in 4 pieces (3 edges), 1 word in 1 piece (2 edges), 2 words in 3 pieces (no edges)
GOOD = [
    dict(word_ids=[0, 1, 1, 2], heads=[2, 0, 2], labels=[1, 2, 3], test_piece_tag=[-1, 5, 7, 300],
         test_topk_labels=[1, 2, 3, 2, 1, 3, 3, 1, 2], test_topk_probs=[700, 200, 100, 1000, 0, 0, 500, 500, 0],
         test_edge_heads=[2, 0, 2], test_edge_deps=[0, 1, 2], test_edge_labels=[1, 2, 3]),
    dict(word_ids=[0], heads=[0], labels=[2], test_piece_tag=[0],
         test_topk_labels=[2, 1, 3], test_topk_probs=[1000, 0, 0],
         test_edge_heads=[0, 1], test_edge_deps=[0, 0], test_edge_labels=[2, 1]),
    dict(word_ids=[0, 0, 1], heads=[0, 1], labels=[2, 1], test_piece_tag=[1, 2, 3],
         test_topk_labels=[2, 3, 1, 1, 2, 3], test_topk_probs=[600, 300, 100, 900, 50, 50],
         test_edge_heads=[], test_edge_deps=[], test_edge_labels=[]),
]
GOOD_TOKENS = [5, 2, 4]  # pieces + EOS


def write_side(data_dir, sentences, names=ALL, num_labels=NUM_LABELS):
    data_dir.mkdir(parents=True, exist_ok=True)
    writer = SyntaxChannelWriter(str(data_dir), "train", "x", "y", "x", channels=names)
    for sentence in sentences:
        writer.add(SentenceSyntax(**{name: np.array(sentence[name], dtype=np.int64) for name in names}))
    writer.finalize()
    SyntaxManifest("x", "y", {"x": SideManifest.for_channels("test-parser", names, num_labels)}).save(str(data_dir))
    return data_dir


def load(data_dir, token_sizes=GOOD_TOKENS, **kwargs):
    return SyntaxChannels(str(data_dir), "train", "x", "y", "x", np.array(token_sizes, dtype=np.int32), NUM_LABELS,
                          **kwargs)


def changed(sentence_index, **channels):
    sentences = [dict(sentence) for sentence in GOOD]
    sentences[sentence_index].update(channels)
    return sentences


def test_every_unit_reads_back_identical(tmp_path):
    side = load(write_side(tmp_path, GOOD))
    assert len(side) == 3 and list(side.datasets) == ALL
    for index, sentence in enumerate(GOOD):
        syntax = side[index]
        assert set(syntax.channels) == set(ALL)
        for name in ALL:
            assert syntax.channels[name].tolist() == sentence[name], (index, name)
    first = side[0]
    assert first.heads.tolist() == [2, 0, 2] and first.num_words == 3
    assert first.rows("test_topk_probs").tolist() == [[700, 200, 100], [1000, 0, 0], [500, 500, 0]]
    assert first.rows("test_edge_deps").tolist() == [[0], [1], [2]]
    assert side[2].rows("test_edge_labels").shape == (0, 1)
    assert side[0].test_piece_tag.tolist() == [-1, 5, 7, 300]


def test_manifest_records_every_channel_with_its_layout(tmp_path):
    write_side(tmp_path, GOOD)
    raw = json.loads((tmp_path / "syntax.json").read_text())
    assert raw["format_version"] == 2
    side = raw["sides"]["x"]
    assert side["num_labels"] == 4 and side["parser"] == "test-parser"
    assert side["channels"]["test_topk_probs"] == {"unit": "word", "kind": "probability", "dtype": "uint16",
                                                   "width": 3, "scale": 1000}
    assert side["channels"]["word_ids"] == {"unit": "piece", "kind": "word_index", "dtype": "uint16", "width": 1,
                                            "scale": None}
    assert side["channels"]["test_edge_labels"]["dtype"] == "uint8"
    assert list(side["channels"]) == ALL


def test_only_the_channels_the_manifest_lists_are_loaded(tmp_path):
    write_side(tmp_path, GOOD, names=["word_ids", "test_piece_tag"])
    side = load(tmp_path)
    assert list(side.datasets) == ["word_ids", "test_piece_tag"]
    assert side[0].num_words == 3  # words from word_ids when there are no heads


def test_tree_channels_bytes_are_fairseqs_uint16_format(tmp_path):
    write_side(tmp_path, GOOD, names=list(TREE_CHANNELS))
    heads = (tmp_path / "train.x-y.x.heads.bin").read_bytes()
    assert heads == np.array([2, 0, 2, 0, 0, 1], dtype="<u2").tobytes()
    index = (tmp_path / "train.x-y.x.heads.idx").read_bytes()
    assert index[:9] == b"MMIDIDX\x00\x00" and index[17] == 8  # fairseq's dtype code 8: uint16
    assert np.frombuffer(index, dtype="<i4", count=3, offset=26).tolist() == [3, 1, 2]
    assert np.frombuffer(index, dtype="<i8", count=3, offset=38).tolist() == [0, 6, 8]


def test_version_1_manifest_still_loads(tmp_path):
    write_side(tmp_path, GOOD, names=list(TREE_CHANNELS))
    (tmp_path / "syntax.json").write_text(json.dumps({
        "source_lang": "x", "target_lang": "y", "spm_model": "spm.model", "format_version": 1,
        "sides": {"x": {"parser": "conllu", "channels": ["word_ids", "heads", "labels"], "num_labels": 4},
                  "y": {"parser": None, "channels": [], "num_labels": 0}}}))
    manifest = SyntaxManifest.load(str(tmp_path))
    assert list(manifest.sides["x"].channels) == ["word_ids", "heads", "labels"] and not manifest.sides["y"].channels
    side = load(tmp_path)
    assert side[1].heads.tolist() == [0] and side[2].word_ids.tolist() == [0, 0, 1]


def expect_error(tmp_path, sentences, pattern, token_sizes=GOOD_TOKENS, **kwargs):
    write_side(tmp_path, sentences)
    with pytest.raises(SideChannelError, match=pattern):
        load(tmp_path, token_sizes=token_sizes, **kwargs)


def test_wrong_sentence_count(tmp_path):
    expect_error(tmp_path, GOOD, r"train\.x-y\.x\.word_ids: 3 sentences, but .* have 4 \(sentence 3 ",
                 token_sizes=GOOD_TOKENS + [3])


def test_truncated_bin(tmp_path):
    write_side(tmp_path, GOOD)
    probs = tmp_path / "train.x-y.x.test_topk_probs.bin"
    probs.write_bytes(probs.read_bytes()[:-2])
    with pytest.raises(SideChannelError, match=r"test_topk_probs\.bin holds 17 values but its index describes 18"):
        load(tmp_path)


def test_wrong_rows_per_piece(tmp_path):
    expect_error(tmp_path, GOOD, r"x\.word_ids: sentence 1 has 1 values, expected 2 \(pieces",
                 token_sizes=[5, 3, 4])


def test_wrong_rows_per_word(tmp_path):
    expect_error(tmp_path, changed(2, test_topk_labels=[2, 3, 1]),
                 r"x\.test_topk_labels: sentence 2 has 3 values, expected 6 \(words x width 3")


def test_values_that_are_not_whole_rows(tmp_path):
    write_side(tmp_path, GOOD)
    # the writer refuses ragged rows, so the channel is written as fairseq would write any dataset
    builder = indexed_dataset.MMapIndexedDatasetBuilder(str(tmp_path / "train.x-y.x.test_topk_probs.bin"), np.uint16)
    for values in ([700, 200, 100, 1000, 0, 0, 500, 500, 0], [1000, 0], [600, 300, 100, 900, 50, 50]):
        builder.add_item(torch.tensor(values))
    builder.finalize(str(tmp_path / "train.x-y.x.test_topk_probs.idx"))
    with pytest.raises(SideChannelError, match=r"test_topk_probs: sentence 1 has 2 values, not whole rows of 3"):
        load(tmp_path)


def test_edge_channels_with_unequal_counts(tmp_path):
    expect_error(tmp_path, changed(1, test_edge_labels=[2]),
                 r"x\.test_edge_labels: sentence 1 has 1 values, expected 2 \(edges of test_edge_heads")


@pytest.mark.parametrize("channel, values, pattern", [
    ("test_edge_deps", [0, 3, 2], r"test_edge_deps: sentence 0 has a word index outside 0\.\.2: 3 at edge 1"),
    ("heads", [2, 4, 2], r"x\.heads: sentence 0 has a head outside 0\.\.3: 4 at word 1"),
    ("test_edge_heads", [2, 0, 5], r"test_edge_heads: sentence 0 has a head outside 0\.\.3: 5 at edge 2"),
    ("labels", [1, 4, 3], r"x\.labels: sentence 0 has a label id outside the label dictionary \(1\.\.3\): 4 at word 1"),
    ("test_topk_labels", [1, 2, 3, 2, 1, 0, 3, 1, 2], r"test_topk_labels: sentence 0 has a label id outside the "
                                                      r"label dictionary \(1\.\.3\): 0 at word 1"),
    ("test_topk_probs", [700, 200, 100, 1000, 0, 0, 500, 501, 0], None),  # in range: 501 <= scale
    ("test_topk_probs", [700, 200, 100, 1001, 0, 0, 500, 500, 0],
     r"test_topk_probs: sentence 0 has a probability outside 0\.\.1000: 1001 at word 1"),
])
def test_out_of_range_value_by_kind(tmp_path, channel, values, pattern):
    if pattern is None:
        load(write_side(tmp_path, changed(0, **{channel: values})))
    else:
        expect_error(tmp_path, changed(0, **{channel: values}), pattern)


def test_two_roots(tmp_path):
    expect_error(tmp_path, changed(2, heads=[0, 0]), r"x\.heads: sentence 2 has 2 roots, not a single-rooted tree")


def test_no_root(tmp_path):
    expect_error(tmp_path, changed(2, heads=[2, 1]), r"x\.heads: sentence 2 has 0 roots")


def test_cycle_beside_the_root(tmp_path):
    # word 1 -> word 2 -> word 1 (1-based), word 3 is the root: one root, heads in range, but no tree
    expect_error(tmp_path, changed(0, heads=[2, 1, 0]),
                 r"x\.heads: sentence 0 is not a tree: word 0 never reaches the root \(a cycle\)")


@pytest.mark.parametrize("word_ids", [[0, 2, 1, 2], [1, 1, 1, 2], [0, 1, 1, 1], [0, 0, 2, 2]])
def test_word_ids_not_covering_the_words_in_order(tmp_path, word_ids):
    expect_error(tmp_path, changed(0, word_ids=word_ids),
                 r"x\.word_ids: sentence 0 does not map its pieces onto words 0\.\.2 in order")


def test_unregistered_channel_in_manifest(tmp_path):
    write_side(tmp_path, GOOD)
    raw = json.loads((tmp_path / "syntax.json").read_text())
    raw["sides"]["x"]["channels"]["test_never_registered"] = {"unit": "word", "kind": "integer", "dtype": "uint16",
                                                              "width": 1, "scale": None}
    (tmp_path / "syntax.json").write_text(json.dumps(raw))
    with pytest.raises(SideChannelError, match=r"syntax\.json: channel 'test_never_registered' is not registered"):
        load(tmp_path)


def test_manifest_spec_differing_from_the_registered_one(tmp_path):
    write_side(tmp_path, GOOD)
    raw = json.loads((tmp_path / "syntax.json").read_text())
    raw["sides"]["x"]["channels"]["test_topk_probs"]["scale"] = 255
    (tmp_path / "syntax.json").write_text(json.dumps(raw))
    with pytest.raises(SideChannelError, match=r"syntax\.json: channel 'test_topk_probs' was written as .*'scale': "
                                               r"255.* but this code reads it as .*'scale': 1000"):
        load(tmp_path)


def test_stored_dtype_differing_from_the_spec(tmp_path):
    write_side(tmp_path, GOOD)
    for ext in ("bin", "idx"):  # a uint8 channel's files under a uint16 channel's name
        (tmp_path / f"train.x-y.x.test_edge_heads.{ext}").write_bytes(
            (tmp_path / f"train.x-y.x.test_edge_labels.{ext}").read_bytes())
    with pytest.raises(SideChannelError, match=r"test_edge_heads\.idx: values stored as uint8, but channel "
                                               r"test_edge_heads is uint16"):
        load(tmp_path)


def test_registry_refuses_a_second_spec_under_a_known_name():
    register_channel(ChannelSpec("test_piece_tag", "piece", "integer", np.int16, help="a signed per-piece value"))
    with pytest.raises(ValueError, match="'test_piece_tag' is registered already"):
        register_channel(ChannelSpec("test_piece_tag", "piece", "integer", np.int32))
    assert CHANNELS["test_piece_tag"].dtype == np.int16
    with pytest.raises(ValueError, match="needs an integer scale"):
        ChannelSpec("test_bad_probs", "word", "probability", np.uint8, scale=1000)
    with pytest.raises(ValueError, match="unit 'phrase' is not one of"):
        ChannelSpec("test_bad_unit", "phrase", "integer", np.uint8)


def test_writer_refuses_values_outside_the_dtype(tmp_path):
    writer = SyntaxChannelWriter(str(tmp_path), "train", "x", "y", "x", channels=["test_edge_labels"])
    with pytest.raises(ValueError, match=r"channel test_edge_labels: values 1\.\.300 do not fit its dtype uint8"):
        writer.add(SentenceSyntax(test_edge_labels=np.array([1, 300])))
    with pytest.raises(ValueError, match=r"channel test_edge_labels: values are float64, not integers"):
        writer.add(SentenceSyntax(test_edge_labels=np.array([0.5])))
    writer = SyntaxChannelWriter(str(tmp_path), "train", "x", "y", "x", channels=["test_topk_probs"])
    with pytest.raises(ValueError, match=r"channel test_topk_probs: 2 values are not whole rows of 3"):
        writer.add(SentenceSyntax(test_topk_probs=np.array([1000, 0])))


def test_sentence_syntax_check_in_memory():
    SentenceSyntax(word_ids=np.array([0, 1, 1, 2]), heads=np.array([2, 0, 2]), labels=np.array([1, 2, 3])).check("s")
    with pytest.raises(ValueError, match="s: sentence 0 is not a tree"):
        SentenceSyntax(word_ids=np.array([0, 1, 2]), heads=np.array([2, 1, 0]), labels=np.array([1, 1, 1])).check("s")
    with pytest.raises(ValueError, match=r"s: sentence 0 has 1 values, expected 2 \(words"):
        SentenceSyntax(word_ids=np.array([0, 1]), heads=np.array([0, 1]), labels=np.array([1])).check("s")


# ------------------------------------------------------------------------------------------ chunk boundaries

def many_sentences(count=60):
    """Sentences of 1..4 words, each word in 1 or 2 pieces, as chains (word w+1 heads word w, the last is the
    root), so their expected values are plain to see."""
    sentences, tokens = [], []
    for index in range(count):
        words = 1 + index % 4
        word_ids = [w for w in range(words) for _ in range(1 + (w + index) % 2)]
        heads = [w + 2 for w in range(words - 1)] + [0]
        edges = min(index % 3, words)
        sentences.append(dict(word_ids=word_ids, heads=heads, labels=[1 + w % 3 for w in range(words)],
                              test_piece_tag=[7] * len(word_ids),
                              test_topk_labels=[1, 2, 3] * words, test_topk_probs=[500, 300, 200] * words,
                              test_edge_heads=heads[:edges], test_edge_deps=list(range(edges)),
                              test_edge_labels=[1] * edges))
        tokens.append(len(word_ids) + 1)
    return sentences, tokens


@pytest.mark.parametrize("chunk_values", [1, 13, 40, 97, 1 << 20])
def test_tiny_chunks_pass_good_data_and_name_the_right_sentence(tmp_path, chunk_values):
    sentences, tokens = many_sentences()
    side = load(write_side(tmp_path / "good", sentences), token_sizes=tokens, chunk_values=chunk_values)
    assert side[59].heads.tolist() == [2, 3, 4, 0] and side[58].word_ids.tolist() == [0, 1, 1, 2]
    bad_cases = {
        "heads": (47, [0, 1, 2, 0], r"x\.heads: sentence 47 has 2 roots"),
        "labels": (53, [1, 9], r"x\.labels: sentence 53 has a label id outside the label dictionary"),
        "word_ids": (42, [0, 1, 0, 2], r"x\.word_ids: sentence 42 does not map its pieces"),
        "test_topk_probs": (58, [500, 300, 200] * 2 + [1001, 0, 0],
                            r"x\.test_topk_probs: sentence 58 has a probability"),
    }
    for channel, (index, values, pattern) in bad_cases.items():
        bad = [dict(sentence) for sentence in sentences]
        assert len(bad[index][channel]) == len(values)
        bad[index][channel] = values
        with pytest.raises(SideChannelError, match=pattern):
            load(write_side(tmp_path / channel, bad), token_sizes=tokens, chunk_values=chunk_values)
    cycle = [dict(sentence) for sentence in sentences]
    cycle[55]["heads"] = [0, 3, 4, 2]  # sentence 55: 4 words, 2 -> 3 -> 4 -> 2 beside the root 1
    with pytest.raises(SideChannelError, match=r"x\.heads: sentence 55 is not a tree: word 1 never reaches the root"):
        load(write_side(tmp_path / "cycle", cycle), token_sizes=tokens, chunk_values=chunk_values)


def test_the_loading_check_and_tree_problem_agree_on_every_small_tree():
    """channels._check_trees (all sentences at once, numpy) and data/trees.tree_problem (one sentence) give the same
    verdict on every head sequence of 1 to 4 words, in range (the loader checks the range before)."""
    import itertools

    from fairseq_syntax.data.channels import _check_trees
    from fairseq_syntax.data.trees import tree_problem

    class Refused(Exception):
        pass

    def fail(*_):
        raise Refused

    checked = 0
    for n in range(1, 5):
        for heads in itertools.product(range(n + 1), repeat=n):
            array = np.array(heads, dtype=np.int64)
            try:
                _check_trees(array, np.array([n]), np.array([n]), fail)
                accepted = True
            except Refused:
                accepted = False
            assert accepted == (tree_problem(list(heads)) is None), heads
            checked += 1
    assert checked == 2 + 9 + 64 + 625  # (n + 1)^n sequences of n words
