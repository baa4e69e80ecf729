"""Batch features: what a model can ask the dataset to put into `net_input`, one registry entry each.

An entry declares which token tensor it is aligned with (and so which side's channels it reads), a function giving
one value per word, and its kind, which decides how the values reach the pieces (rule "copy to every piece") and
what the other columns hold:
  position  an integer column of the aligned tensor, times `scale` (PASCAL's middle positions are halves: scale
            2); the padding offset and the alignment's shift are part of the value; non-piece columns (EOS, BOS,
            padding) point at themselves
  label     a label id of the side's label dictionary, 0 (padding) in non-piece columns
  word_index  the 0-based word of each piece, -1 in non-piece columns
  word_value  one row per word, (B, max words[, width]), not aligned with tokens (device-side expansion reads
            it together with a word_index feature)
  edge_value  one row per stored edge, (B, max edges[, width]), padded with zeros (LDD's arcs)
Everything a feature carries is an integer tensor: fairseq's trainer casts float32 batch tensors to fp16/bf16,
which would round positions beyond 256 (bf16) or 2048 (fp16). Real-valued features travel as integers with a
scale and are turned into float32 where they are used.

Alignments (B = batch, T = width of the aligned tensor):
  source       src_tokens: pieces then EOS, left- or right-padded
  target       target: pieces then EOS
  prev_output  prev_output_tokens: BOS (= EOS) then pieces, i.e. the target shifted right by one
"""
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from .channels import CHANNELS
from .dependency_distributions import LABEL_GROUP_CHANNEL, LDD_CHANNELS
from .transitions import channels as _transition_channels  # noqa: F401  (registers the target transition channels)
from .subword import NO_WORD, copy_to_pieces, first_piece, middle_piece_halves, parent_words, word_spans

FEATURE_KINDS = ("position", "label", "word_index", "word_value", "edge_value")  # (channels have kinds of their own)
ALIGNMENTS = {"source": "source", "target": "target", "prev_output": "target"}  # alignment -> side it reads


class SideBatch:
    """One side's channels for a batch: the pieces' word ids in the columns of one alignment (B, T), each word's
    first and last column, and any channel padded to (B, max rows, width) on demand (rows by the channel's unit:
    words or edges)."""

    def __init__(self, syntaxes: Sequence, start_columns: np.ndarray, padded_length: int):
        self.syntaxes = syntaxes
        batch = len(syntaxes)
        piece_counts = np.array([len(s.word_ids) for s in syntaxes], dtype=np.int64)
        word_ids = np.full((batch, padded_length), NO_WORD, dtype=np.int64)
        rows = np.repeat(np.arange(batch), piece_counts)
        within = np.arange(piece_counts.sum()) - np.repeat(np.cumsum(piece_counts) - piece_counts, piece_counts)
        if batch:
            word_ids[rows, np.repeat(start_columns, piece_counts) + within] = np.concatenate(
                [np.asarray(s.word_ids, dtype=np.int64) for s in syntaxes])
        self.word_ids = torch.from_numpy(word_ids)
        self.num_words = max((s.num_words for s in syntaxes), default=0)
        self.first, self.last = word_spans(self.word_ids, self.num_words)
        self._rows: Dict[str, Tensor] = {}

    @property
    def columns(self) -> Tensor:
        return torch.arange(self.word_ids.size(1)).expand_as(self.word_ids)

    def rows(self, name: str, fill: int = 0) -> Tensor:
        """Channel `name` as (B, rows, width) int64, padded with `fill` (word channels: rows = max words)."""
        key = f"{name}:{fill}"
        if key not in self._rows:
            spec = CHANNELS[name]
            values = [np.asarray(getattr(s, name), dtype=np.int64).reshape(-1, spec.width) for s in self.syntaxes]
            count = self.num_words if spec.unit == "word" else max((len(v) for v in values), default=0)
            out = np.full((len(values), count, spec.width), fill, dtype=np.int64)
            for b, v in enumerate(values):
                out[b, :len(v)] = v
            self._rows[key] = torch.from_numpy(out)
        return self._rows[key]

    @property
    def heads(self) -> Tensor:
        return self.rows("heads")[..., 0]

    @property
    def labels(self) -> Tensor:
        return self.rows("labels")[..., 0]


@dataclass(frozen=True)
class BatchFeature:
    name: str
    alignment: str  # "source" | "target" | "prev_output"
    kind: str
    compute: Callable[[SideBatch], Tensor]  # -> one value per word, (B, W); `expand` puts them on the pieces
    scale: int = 1
    channels: Sequence[str] = ("word_ids", "heads", "labels")  # channels of its side it reads
    help: str = ""

    @property
    def side(self) -> str:
        return ALIGNMENTS[self.alignment]


FEATURES: Dict[str, BatchFeature] = {}


def register_feature(feature: BatchFeature) -> BatchFeature:
    if feature.kind not in FEATURE_KINDS:
        raise ValueError(f"feature {feature.name}: kind {feature.kind!r} is not one of {FEATURE_KINDS}")
    if feature.alignment not in ALIGNMENTS:
        raise ValueError(f"feature {feature.name}: alignment {feature.alignment!r} is not one of {list(ALIGNMENTS)}")
    existing = FEATURES.get(feature.name)
    if existing is not None and existing != feature:
        raise ValueError(f"batch feature {feature.name!r} registered twice")
    FEATURES[feature.name] = feature
    return feature


# The tree-derived features exist for every alignment, named by its prefix.
PREFIXES = {"source": "src", "target": "tgt", "prev_output": "prev"}


# Word-level values of the tree features, (B, W); the collater expands them to pieces by kind (see `expand`).
def _parent_middle_halves(side: SideBatch) -> Tensor:
    return middle_piece_halves(parent_words(side.heads), side.first, side.last)


def _parent_first(side: SideBatch) -> Tensor:
    return first_piece(parent_words(side.heads), side.first)


def _labels(side: SideBatch) -> Tensor:
    return side.labels


def _word_numbers(side: SideBatch) -> Tensor:
    return torch.arange(side.num_words).expand(side.word_ids.size(0), side.num_words)


def _heads(side: SideBatch) -> Tensor:
    return side.heads


for _alignment, _prefix in PREFIXES.items():
    register_feature(BatchFeature(f"{_prefix}_parent_middle_halves", _alignment, "position", _parent_middle_halves,
                                  scale=2, help="twice the middle column of the piece's parent word (PASCAL)"))
    register_feature(BatchFeature(f"{_prefix}_parent_first", _alignment, "position", _parent_first,
                                  help="column of the first piece of the piece's parent word (LISA)"))
    register_feature(BatchFeature(f"{_prefix}_labels", _alignment, "label", _labels,
                                  help="dependency label id of the piece's word"))
    register_feature(BatchFeature(f"{_prefix}_word_ids", _alignment, "word_index", _word_numbers,
                                  help="0-based word of the piece, -1 elsewhere (for device-side expansion)"))
    if _alignment != "prev_output":
        register_feature(BatchFeature(f"{_prefix}_heads", _alignment, "word_value", _heads, channels=("heads",),
                                      help="1-based head of every word, 0 for the root and padding, (B, W)"))


# LDD (Liu & Sima'an): the stored arcs and the 1-best labels' groups, expanded to pieces on the device
def _edge_rows(name: str):
    def compute(side: SideBatch) -> Tensor:
        return side.rows(name)[..., 0]

    return compute


for _name in LDD_CHANNELS:
    register_feature(BatchFeature(f"src_{_name}", "source", "edge_value", _edge_rows(_name), channels=LDD_CHANNELS,
                                  help=CHANNELS[_name].help + ", (B, max edges)"))
register_feature(BatchFeature("src_label_groups", "source", "word_value",
                              lambda side: side.rows(LABEL_GROUP_CHANNEL)[..., 0], channels=(LABEL_GROUP_CHANNEL,),
                              help="LDD label group of every word's 1-best label (16 = none), (B, W)"))


def expand(feature: BatchFeature, side: SideBatch) -> Tensor:
    """The feature's word values on its alignment's columns; what non-piece columns get is decided by its kind."""
    values = feature.compute(side)
    if feature.kind in ("word_value", "edge_value"):
        return values
    fill = {"position": feature.scale * side.columns, "label": 0, "word_index": NO_WORD}[feature.kind]
    return copy_to_pieces(values, side.word_ids, fill)


def piece_columns(alignment: str, token_lengths: np.ndarray, padded_length: int, left_pad: bool) -> np.ndarray:
    """Column of piece 0 of every sentence in the tensor of this alignment (pieces = tokens - 1)."""
    token_lengths = np.asarray(token_lengths, dtype=np.int64)
    offset = padded_length - token_lengths if left_pad else np.zeros_like(token_lengths)
    return offset + (1 if alignment == "prev_output" else 0)


def collate_features(names: Iterable[str], syntaxes_by_side: Dict[str, Sequence], token_lengths_by_side,
                     padded_length_by_alignment: Dict[str, int],
                     left_pad_by_side: Dict[str, bool]) -> Dict[str, Tensor]:
    """The requested features of a batch, each computed once per alignment from the padded side channels."""
    out = {}
    cache = {}
    for name in sorted(names):
        feature = FEATURES[name]
        side = feature.side
        if feature.alignment not in cache:
            width = padded_length_by_alignment[feature.alignment]
            starts = piece_columns(feature.alignment, token_lengths_by_side[side], width, left_pad_by_side[side])
            cache[feature.alignment] = SideBatch(syntaxes_by_side[side], starts, width)
        out[name] = expand(feature, cache[feature.alignment]).to(torch.long)
    return out
