"""Subword derivations against hand-worked examples (PASCAL section 2: middle positions; LISA: first subword)."""
import numpy as np
import torch

from fairseq_syntax.data import SentenceSyntax, collate_source_syntax
from fairseq_syntax.data.subword import parent_first_positions, parent_middle_positions, piece_labels

# "The monkey eats a banana": The | mon key | eats | a | ba na na
MONKEY = SentenceSyntax(
    word_ids=np.array([0, 1, 1, 2, 3, 4, 4, 4]),
    heads=np.array([2, 3, 0, 5, 3]),  # The->monkey, monkey->eats, eats=root, a->banana, banana->eats
    labels=np.array([1, 2, 3, 1, 4]),
)
# "Hi there": there -> Hi (root)
HI = SentenceSyntax(word_ids=np.array([0, 1]), heads=np.array([0, 1]), labels=np.array([3, 5]))


def test_middle_positions_by_hand():
    # word middles: The 0, monkey 1.5, eats 3, a 4, banana 6 (pieces 5,6,7 -> 6; the paper's 6,7,8 -> 7)
    assert parent_middle_positions(MONKEY).tolist() == [1.5, 3, 3, 3, 6, 3, 3, 3]
    assert parent_middle_positions(HI).tolist() == [0, 0]


def test_first_subword_parents_by_hand():
    assert parent_first_positions(MONKEY).tolist() == [1, 3, 3, 3, 5, 3, 3, 3]


def test_labels_repeat_on_every_piece():
    assert piece_labels(MONKEY).tolist() == [1, 2, 2, 3, 1, 4, 4, 4]


def test_collate_left_padding_offsets():
    out = collate_source_syntax([MONKEY, HI], [9, 3], padded_length=9, left_pad=True,
                                features=["src_parent_positions", "src_parent_first", "src_labels"])
    # HI occupies columns 6, 7 (pieces) and 8 (EOS); padding 0-5 and EOS point at themselves
    assert out["src_parent_positions"].tolist() == [[1.5, 3, 3, 3, 6, 3, 3, 3, 8], [0, 1, 2, 3, 4, 5, 6, 6, 8]]
    assert out["src_parent_first"].tolist() == [[1, 3, 3, 3, 5, 3, 3, 3, 8], [0, 1, 2, 3, 4, 5, 6, 6, 8]]
    assert out["src_labels"].tolist() == [[1, 2, 2, 3, 1, 4, 4, 4, 0], [0, 0, 0, 0, 0, 0, 3, 5, 0]]
    assert out["src_parent_positions"].dtype == torch.float32 and out["src_labels"].dtype == torch.long


def test_collate_right_padding_offsets():
    out = collate_source_syntax([HI, MONKEY], [3, 9], padded_length=10, left_pad=False,
                                features=["src_parent_positions", "src_labels"])
    assert out["src_parent_positions"].tolist() == [[0, 0, 2, 3, 4, 5, 6, 7, 8, 9],
                                                    [1.5, 3, 3, 3, 6, 3, 3, 3, 8, 9]]
    assert out["src_labels"].tolist() == [[3, 5, 0, 0, 0, 0, 0, 0, 0, 0], [1, 2, 2, 3, 1, 4, 4, 4, 0, 0]]
