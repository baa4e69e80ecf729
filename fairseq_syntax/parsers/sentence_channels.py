"""A parsed sentence and the word of each of its subword pieces -> the side channels of that sentence, and the
parser of a data-bin side. Preprocessing (fairseq-syntax-preprocess) and translation of raw text
(fairseq_syntax/tasks/raw_text.py) both use these, so a sentence parsed at inference gets exactly the values a
data-bin would hold for it."""
from typing import Optional, Sequence

import numpy as np

from ..data.channels import LabelDictionary, SentenceSyntax
from ..data.dependency_distributions import LABEL_GROUP_CHANNEL, LDD_CHANNELS, OUTSIDE_GROUPS
from ..data.label_groups import group_of
from . import build_parser
from .base import ParsedSentence, Parser


def build_side_parser(spec: str, lang: str, ldd_settings: Optional[dict] = None, workers: int = 1) -> Parser:
    """The parser of `spec`; with `ldd_settings` (a side's settings["ldd"] in syntax.json, or the preprocessing
    options) it also computes the labeled dependency distributions, made as those settings say."""
    distributions = None
    if ldd_settings is not None:
        from .supar_parser import DistributionOptions

        distributions = DistributionOptions(**ldd_settings)
    return build_parser(spec, lang, workers=workers, distributions=distributions)


def tree_syntax(tree: ParsedSentence, word_ids: Sequence[int], label_dict: LabelDictionary,
                channels: Sequence[str], label_scheme: Optional[str] = None) -> SentenceSyntax:
    """The channels `channels` of one parsed sentence (the tree channels, and the LDD ones when asked: the tree
    then carries its distributions, and `label_scheme` maps its 1-best labels to the 16 groups). Every label must
    be in `label_dict` (LabelDictionary.encode raises otherwise)."""
    values = dict(word_ids=np.asarray(word_ids), heads=np.asarray(tree.heads),
                  labels=np.asarray([label_dict.encode(label) for label in tree.labels]))
    if any(name in LDD_CHANNELS for name in channels):
        values.update(tree.distributions.channels())
    if LABEL_GROUP_CHANNEL in channels:
        values[LABEL_GROUP_CHANNEL] = np.asarray([label_group(label, label_scheme) for label in tree.labels])
    return SentenceSyntax(**{name: values[name] for name in channels})


def label_group(label: str, label_scheme: str) -> int:
    group = group_of(label, label_scheme)
    return OUTSIDE_GROUPS if group is None else group
