"""A side's token dictionary with the syntax vocabulary the data-bin defines beside it.

fairseq builds a model's encoder and decoder from the task's two token dictionaries only
(`TransformerModelBase.build_model` hands `build_encoder` / `build_decoder` nothing else). Mechanisms whose shapes
or reading depend on the data-bin (the label embedding's and the GCN's label rows; the target's transition system,
whose word rule depends on the segmentation) learn it from the dictionary they are built with: the task gives the
model `SyntaxDictionary`s, so nothing travels by being written into the model config. A plain fairseq `Dictionary`
(a model built by hand, fairseq's translation task) has no labels and a sentencepiece vocabulary.
"""
from typing import Optional

from fairseq.data import Dictionary

from .channels import LabelDictionary


class SyntaxDictionary(Dictionary):
    """fairseq's `Dictionary` of one side, plus `labels` (that side's dependency labels; None where the side was not
    parsed) and `word_level` (its tokens are whole words, not sentencepiece pieces)."""

    labels: Optional[LabelDictionary] = None
    word_level: bool = False

    @classmethod
    def extend(cls, dictionary: Dictionary, labels: Optional[LabelDictionary] = None,
               word_level: bool = False) -> "SyntaxDictionary":
        """The same symbols, indices and special tokens as `dictionary` (shared, not copied), with the syntax
        vocabulary added."""
        extended = cls.__new__(cls)
        extended.__dict__.update(vars(dictionary))
        extended.labels, extended.word_level = labels, bool(word_level)
        return extended


def label_count(dictionary: Dictionary) -> int:
    """The number of label ids of the dictionary's side (the padding id 0 included), 0 where it has no labels."""
    labels = dictionary.labels if isinstance(dictionary, SyntaxDictionary) else None
    return len(labels) if labels is not None else 0


def is_word_level(dictionary: Dictionary) -> bool:
    """Whether the dictionary's tokens are whole words (a word-level data-bin) rather than sentencepiece pieces."""
    return isinstance(dictionary, SyntaxDictionary) and dictionary.word_level
