"""Word -> piece expansion rules and batch features against hand-worked examples (PASCAL section 2: middle
positions; LISA: first subword; labels on every piece; word x word matrices; source, target and prev_output
alignments under left and right padding)."""
import numpy as np
import pytest
import torch

from fairseq_syntax.data import FEATURES, SentenceSyntax, collate_features
from fairseq_syntax.data.subword import (
    copy_to_pieces, expand_word_matrix, first_piece, middle_piece_halves, parent_first_positions,
    parent_middle_positions, parent_words, piece_labels, word_spans,
)

# "The monkey eats a banana": The | mon key | eats | a | ba na na
MONKEY = SentenceSyntax(
    word_ids=np.array([0, 1, 1, 2, 3, 4, 4, 4]),
    heads=np.array([2, 3, 0, 5, 3]),  # The->monkey, monkey->eats, eats=root, a->banana, banana->eats
    labels=np.array([1, 2, 3, 1, 4]),
)
# "Hi there": there -> Hi (root)
HI = SentenceSyntax(word_ids=np.array([0, 1]), heads=np.array([0, 1]), labels=np.array([3, 5]))

ALL_TREE_FEATURES = ["parent_middle_halves", "parent_first", "labels", "word_ids"]


def test_middle_positions_by_hand():
    # word middles: The 0, monkey 1.5, eats 3, a 4, banana 6 (pieces 5,6,7 -> 6; the paper's 6,7,8 -> 7)
    assert parent_middle_positions(MONKEY).tolist() == [1.5, 3, 3, 3, 6, 3, 3, 3]
    assert parent_middle_positions(HI).tolist() == [0, 0]


def test_first_subword_parents_by_hand():
    assert parent_first_positions(MONKEY).tolist() == [1, 3, 3, 3, 5, 3, 3, 3]


def test_labels_repeat_on_every_piece():
    assert piece_labels(MONKEY).tolist() == [1, 2, 2, 3, 1, 4, 4, 4]


def test_expansion_rules_by_hand():
    # MONKEY's pieces in columns 1-8 (column 0: padding, 9: EOS)
    word_ids = torch.tensor([[-1, 0, 1, 1, 2, 3, 4, 4, 4, -1]])
    first, last = word_spans(word_ids, 6)  # one word more than the sentence has
    assert first.tolist() == [[1, 2, 4, 5, 6, -1]] and last.tolist() == [[1, 3, 4, 5, 8, -1]]
    labels = torch.tensor([[1, 2, 3, 1, 4, 0]])
    assert copy_to_pieces(labels, word_ids, 0).tolist() == [[0, 1, 2, 2, 3, 1, 4, 4, 4, 0]]
    parents = parent_words(torch.tensor([[2, 3, 0, 5, 3, 0]]))
    assert parents.tolist() == [[1, 2, 2, 4, 2, 5]]
    assert first_piece(parents, first).tolist() == [[2, 4, 4, 6, 4, -1]]
    # twice the middle: monkey (2+3), eats (4+4), banana (6+8)
    assert middle_piece_halves(parents, first, last).tolist() == [[5, 8, 8, 14, 8, -2]]
    # per-word vectors are copied whole (e.g. a label distribution)
    vectors = torch.arange(12.0).view(1, 6, 2)
    assert copy_to_pieces(vectors, word_ids, -1.0)[0, :4].tolist() == [[-1, -1], [0, 1], [2, 3], [2, 3]]


def test_word_matrix_expansion_by_hand():
    # two words, the second split in two pieces; columns 0-2 pieces, 3 EOS
    word_ids = torch.tensor([[0, 1, 1, -1]])
    matrix = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    assert expand_word_matrix(matrix, word_ids, "copy").tolist() == [[
        [1, 2, 2, 0], [3, 4, 4, 0], [3, 4, 4, 0], [0, 0, 0, 0]]]
    assert expand_word_matrix(matrix, word_ids, "first").tolist() == [[
        [1, 2, 0, 0], [3, 4, 0, 0], [3, 4, 0, 0], [0, 0, 0, 0]]]
    with_channels = torch.stack([matrix, 10 * matrix], dim=-1)  # (B, W, W, 2), e.g. label groups
    expanded = expand_word_matrix(with_channels, word_ids, "copy")
    assert expanded.shape == (1, 4, 4, 2) and expanded[0, 2, 1].tolist() == [4, 40]


def source_features(syntaxes, token_lengths, width, left_pad):
    names = [f"src_{name}" for name in ALL_TREE_FEATURES]
    out = collate_features(names, {"source": syntaxes}, {"source": token_lengths}, {"source": width},
                           {"source": left_pad})
    return {name[len("src_"):]: value.tolist() for name, value in out.items()}


def test_source_features_left_padding():
    out = source_features([MONKEY, HI], [9, 3], 9, left_pad=True)
    # HI occupies columns 6, 7 (pieces) and 8 (EOS); padding 0-5 and EOS point at themselves
    assert out["parent_middle_halves"] == [[3, 6, 6, 6, 12, 6, 6, 6, 16], [0, 2, 4, 6, 8, 10, 12, 12, 16]]
    assert out["parent_first"] == [[1, 3, 3, 3, 5, 3, 3, 3, 8], [0, 1, 2, 3, 4, 5, 6, 6, 8]]
    assert out["labels"] == [[1, 2, 2, 3, 1, 4, 4, 4, 0], [0, 0, 0, 0, 0, 0, 3, 5, 0]]
    assert out["word_ids"] == [[0, 1, 1, 2, 3, 4, 4, 4, -1], [-1, -1, -1, -1, -1, -1, 0, 1, -1]]


def test_source_features_right_padding():
    out = source_features([HI, MONKEY], [3, 9], 10, left_pad=False)
    assert out["parent_middle_halves"] == [[0, 0, 4, 6, 8, 10, 12, 14, 16, 18],
                                           [3, 6, 6, 6, 12, 6, 6, 6, 16, 18]]
    assert out["labels"] == [[3, 5, 0, 0, 0, 0, 0, 0, 0, 0], [1, 2, 2, 3, 1, 4, 4, 4, 0, 0]]


@pytest.mark.parametrize("left_pad", [False, True])
def test_target_and_prev_output_alignment(left_pad):
    """target = pieces + EOS; prev_output_tokens = EOS + pieces: the same word, one column later."""
    names = [f"{prefix}_{name}" for prefix in ("tgt", "prev") for name in ("parent_first", "labels",
                                                                          "parent_middle_halves")]
    out = collate_features(names, {"target": [HI]}, {"target": [3]}, {"target": 5, "prev_output": 5},
                           {"target": left_pad})
    out = {name: value[0].tolist() for name, value in out.items()}
    if not left_pad:  # target: Hi there </s> <pad> <pad>; prev: </s> Hi there <pad> <pad>
        assert out["tgt_labels"] == [3, 5, 0, 0, 0] and out["prev_labels"] == [0, 3, 5, 0, 0]
        assert out["tgt_parent_first"] == [0, 0, 2, 3, 4] and out["prev_parent_first"] == [0, 1, 1, 3, 4]
        assert out["tgt_parent_middle_halves"] == [0, 0, 4, 6, 8]
        assert out["prev_parent_middle_halves"] == [0, 2, 2, 6, 8]
    else:  # target: <pad> <pad> Hi there </s>; prev: <pad> <pad> </s> Hi there
        assert out["tgt_labels"] == [0, 0, 3, 5, 0] and out["prev_labels"] == [0, 0, 0, 3, 5]
        assert out["tgt_parent_first"] == [0, 1, 2, 2, 4] and out["prev_parent_first"] == [0, 1, 2, 3, 3]


def test_every_feature_declares_its_kind_and_side():
    for name, feature in FEATURES.items():
        assert feature.kind in ("position", "label", "word_index", "word_value", "edge_value"), name
        assert feature.alignment in ("source", "target", "prev_output"), name
    assert FEATURES["src_parent_middle_halves"].scale == 2
    assert FEATURES["prev_labels"].side == "target"
    assert FEATURES["src_ldd_probs"].kind == "edge_value" and FEATURES["src_label_groups"].kind == "word_value"
