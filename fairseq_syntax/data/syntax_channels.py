"""Reading the side channels of one split and side, with every check that they agree with their tokens done once,
vectorised, when the data-bin loads (so a stale, truncated or mismatched file fails loudly instead of shifting)."""
import os
from typing import Dict, Sequence

import numpy as np
import torch
from fairseq.data import indexed_dataset

from .channels import CHANNELS, TREE_CHANNELS, SentenceSyntax, channel_prefix


class SideChannelError(ValueError):
    pass


def _load_channel(prefix: str):
    for ext in (".idx", ".bin"):
        if not os.path.exists(prefix + ext):
            raise SideChannelError(f"missing side-channel file {prefix + ext}")
    dataset = indexed_dataset.MMapIndexedDataset(prefix)
    flat = np.memmap(prefix + ".bin", dtype=dataset._index.dtype, mode="r")
    expected = int(dataset.sizes.sum())
    if flat.size != expected:
        raise SideChannelError(
            f"{prefix}.bin holds {flat.size} values but its index describes {expected}: truncated or mismatched file"
        )
    return dataset, flat


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


class SyntaxChannels:
    """Channels of one (split, side). `token_sizes` are the token counts per sentence (EOS included)."""

    def __init__(self, data_dir, split, src, tgt, lang, token_sizes: np.ndarray, num_labels: int,
                 channels: Sequence[str] = TREE_CHANNELS):
        self.datasets: Dict[str, object] = {}
        flats = {}
        prefixes = {}
        for name in channels:
            prefixes[name] = channel_prefix(data_dir, split, src, tgt, lang, name)
            self.datasets[name], flats[name] = _load_channel(prefixes[name])
        self.prefixes = prefixes
        token_sizes = np.asarray(token_sizes, dtype=np.int64)
        num_sentences = len(token_sizes)
        for name, dataset in self.datasets.items():
            if len(dataset) != num_sentences:
                raise SideChannelError(
                    f"{prefixes[name]}: {len(dataset)} sentences, but the {lang} tokens of {split} have {num_sentences}"
                )
        word_counts = self.datasets["heads"].sizes.astype(np.int64)
        for name, dataset in self.datasets.items():
            spec = CHANNELS[name]
            expected = (token_sizes - 1) if spec.unit == "piece" else word_counts
            bad = dataset.sizes.astype(np.int64) != expected * spec.width
            if bad.any():
                i = _first_bad(bad)
                raise SideChannelError(
                    f"{prefixes[name]}: sentence {i} has {dataset.sizes[i]} values, expected {expected[i] * spec.width} "
                    f"({spec.unit}s x {spec.width}); the channel is out of step with the tokens"
                )
        self._check_trees(flats, word_counts, num_labels)

    def _check_trees(self, flats, word_counts, num_labels):
        if len(word_counts) == 0:
            return
        if (word_counts == 0).any():
            raise SideChannelError(f"{self.prefixes['heads']}: sentence {_first_bad(word_counts == 0)} has no words")
        piece_counts = self.datasets["word_ids"].sizes.astype(np.int64)
        word_ids = np.asarray(flats["word_ids"], dtype=np.int64)
        piece_starts = np.concatenate([[0], np.cumsum(piece_counts)[:-1]])
        bad = (word_ids[piece_starts] != 0) | (word_ids[piece_starts + piece_counts - 1] != word_counts - 1)
        steps = np.diff(word_ids)
        # a step inside a sentence must be 0 or 1; steps across sentence boundaries are ignored
        inside = np.ones(len(steps), dtype=bool)
        inside[piece_starts[1:] - 1] = False
        bad_steps = inside & ((steps < 0) | (steps > 1))
        if bad_steps.any():
            bad[np.searchsorted(piece_starts, _first_bad(bad_steps), side="right") - 1] = True
        if bad.any():
            raise SideChannelError(
                f"{self.prefixes['word_ids']}: sentence {_first_bad(bad)} does not map its pieces onto "
                f"words 0..{word_counts[_first_bad(bad)] - 1} in order"
            )
        heads = np.asarray(flats["heads"], dtype=np.int64)
        sentence_of_word = np.repeat(np.arange(len(word_counts)), word_counts)
        word_starts = np.concatenate([[0], np.cumsum(word_counts)[:-1]])
        roots = np.add.reduceat((heads == 0).astype(np.int64), word_starts)
        bad = roots != 1
        out_of_range = heads > word_counts[sentence_of_word]
        if out_of_range.any():
            bad[sentence_of_word[_first_bad(out_of_range)]] = True
        if bad.any():
            raise SideChannelError(f"{self.prefixes['heads']}: sentence {_first_bad(bad)} is not a single-rooted tree")
        labels = np.asarray(flats["labels"], dtype=np.int64)
        bad_label = (labels < 1) | (labels >= num_labels)
        if bad_label.any():
            raise SideChannelError(
                f"{self.prefixes['labels']}: sentence {sentence_of_word[_first_bad(bad_label)]} has a label id "
                f"outside the label dictionary (1..{num_labels - 1})"
            )

    def __len__(self):
        return len(self.datasets["heads"])

    def __getitem__(self, index: int) -> SentenceSyntax:
        return SentenceSyntax(
            word_ids=self.datasets["word_ids"][index].numpy(),
            heads=self.datasets["heads"][index].numpy(),
            labels=self.datasets["labels"][index].numpy(),
        )


class SyntaxChannelWriter:
    """Writes the channels of one (split, side) in the format SyntaxChannels reads."""

    def __init__(self, data_dir, split, src, tgt, lang, channels: Sequence[str] = TREE_CHANNELS):
        self.prefixes = {name: channel_prefix(data_dir, split, src, tgt, lang, name) for name in channels}
        self.builders = {
            name: indexed_dataset.MMapIndexedDatasetBuilder(prefix + ".bin", dtype=CHANNELS[name].dtype)
            for name, prefix in self.prefixes.items()
        }

    def add(self, syntax: SentenceSyntax) -> None:
        for name, builder in self.builders.items():
            values = np.asarray(getattr(syntax, name), dtype=np.int64)
            if values.size and (values.min() < 0 or values.max() > np.iinfo(CHANNELS[name].dtype).max):
                raise ValueError(f"{name} value out of range for {np.dtype(CHANNELS[name].dtype).name}")
            builder.add_item(torch.from_numpy(values))

    def finalize(self) -> None:
        for name, builder in self.builders.items():
            builder.finalize(self.prefixes[name] + ".idx")
