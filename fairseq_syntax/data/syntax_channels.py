"""Reading and writing the side channels of one split and side (format: channels.py). Every check that the channels
agree with their tokens runs once, when the data-bin loads, so a stale, truncated or mismatched file fails loudly
instead of shifting. The checks read the values chunk by chunk of consecutive sentences, so their memory stays
bounded whatever the size of the split; what grows with it are the pages of the memory-mapped indexes (12 bytes per
sentence and channel), which fairseq reads anyway."""
import contextlib
import os
import struct
from typing import Dict, Iterator, Sequence, Tuple, Union

import numpy as np
import torch
from fairseq.data import indexed_dataset

from .channels import (
    MANIFEST_NAME, TREE_CHANNELS, ChannelSpec, SentenceSyntax, SideChannelError, SideManifest, SyntaxManifest,
    channel_prefix, check_sentences, registered_channel,
)

__all__ = ["CHUNK_VALUES", "SideChannelError", "SyntaxChannels", "SyntaxChannelWriter"]

# Values (all channels together) checked at once: a few int64 arrays of this length are the checks' memory. Larger
# chunks are no faster (bench/load_channels.py, 4.5M sentences: 2^18 4.0 s, 2^20 3.8 s, 2^22 5.3 s, 2^24 8.6 s).
CHUNK_VALUES = 1 << 18


def _side_specs(data_dir: str, lang: str, channels: Union[None, Sequence[str], SideManifest]) -> Dict[str, ChannelSpec]:
    """The channels to load: those syntax.json lists for the side (the default, or its SideManifest), or these names."""
    manifest_path = os.path.join(data_dir, MANIFEST_NAME)
    if channels is None:
        manifest = SyntaxManifest.load(data_dir)
        if manifest is None or lang not in manifest.sides:
            raise SideChannelError(f"{manifest_path}: {'missing' if manifest is None else f'no side {lang}'}, "
                                   f"so there are no side channels of {lang} to load")
        channels = manifest.sides[lang]
    if isinstance(channels, SideManifest):
        return channels.channel_specs(manifest_path)
    return {name: registered_channel(name) for name in channels}


def _open_channel(prefix: str, spec: ChannelSpec, num_sentences: int, what: str):
    """The channel's dataset, after the checks that need no values: readable, dtype, sentence count, file size."""
    for ext in (".idx", ".bin"):
        if not os.path.exists(prefix + ext):
            raise SideChannelError(f"missing side-channel file {prefix + ext}")
    try:
        dataset = indexed_dataset.MMapIndexedDataset(prefix)
    except (AssertionError, KeyError, ValueError, struct.error) as error:
        raise SideChannelError(f"{prefix}: cannot open the indexed dataset ({error or type(error).__name__})") from None
    if np.dtype(dataset._index.dtype) != spec.dtype:
        raise SideChannelError(f"{prefix}.idx: values stored as {np.dtype(dataset._index.dtype).name}, but channel "
                               f"{spec.name} is {spec.dtype.name}")
    if len(dataset) != num_sentences:
        raise SideChannelError(f"{prefix}: {len(dataset)} sentences, but {what} have {num_sentences} (sentence "
                               f"{min(len(dataset), num_sentences)} is the first without a match)")
    expected_bytes = 0
    if num_sentences:
        expected_bytes = int(dataset._index._pointers[-1]) + int(dataset.sizes[-1]) * spec.dtype.itemsize
    actual_bytes = os.path.getsize(prefix + ".bin")
    if actual_bytes != expected_bytes:
        raise SideChannelError(f"{prefix}.bin holds {actual_bytes // spec.dtype.itemsize} values but its index "
                               f"describes {expected_bytes // spec.dtype.itemsize}: truncated or mismatched file")
    return dataset


def sentence_chunks(sizes: Sequence[np.ndarray], chunk_values: int) -> Iterator[Tuple[int, int]]:
    """Consecutive sentence ranges [lo, hi) with at most `chunk_values` values in all `sizes` together (at least
    one sentence each). Looks ahead over a bounded window of sentences, so this too runs in bounded memory."""
    num_sentences = len(sizes[0])
    window = max(16, chunk_values // 16)
    lo = 0
    while lo < num_sentences:
        hi = min(num_sentences, lo + window)
        cumulative = np.zeros(hi - lo, dtype=np.int64)
        for size in sizes:
            cumulative += size[lo:hi]
        np.cumsum(cumulative, out=cumulative)
        hi = lo + max(1, int(np.searchsorted(cumulative, chunk_values, side="right")))
        yield lo, hi
        lo = hi


class SyntaxChannels:
    """The channels of one (split, side), checked against the tokens when constructed.

    `token_sizes`: tokens per sentence (EOS included), e.g. the token dataset's `.sizes`. `channels`: the side's
    SideManifest, channel names, or None for the channels syntax.json in `data_dir` lists for `lang`.
    """

    def __init__(self, data_dir: str, split: str, src: str, tgt: str, lang: str, token_sizes: np.ndarray,
                 num_labels: int, channels: Union[None, Sequence[str], SideManifest] = None,
                 chunk_values: int = CHUNK_VALUES):
        self.specs = _side_specs(data_dir, lang, channels)
        if not self.specs:
            raise SideChannelError(f"{os.path.join(data_dir, MANIFEST_NAME)}: side {lang} has no channels to load")
        self.token_sizes = token_sizes
        self.num_labels = num_labels
        self.prefixes = {name: channel_prefix(data_dir, split, src, tgt, lang, name) for name in self.specs}
        # the datasets stay referenced: their .sizes are views of their memory maps
        self.datasets: Dict[str, indexed_dataset.MMapIndexedDataset] = {
            name: _open_channel(self.prefixes[name], spec, len(token_sizes), f"the {lang} tokens of {split}")
            for name, spec in self.specs.items()
        }
        self.check(chunk_values)

    def check(self, chunk_values: int = CHUNK_VALUES) -> None:
        """Every per-sentence check of channels.check_sentences, plus the index's own consistency, chunk by chunk."""
        sizes = {name: dataset.sizes for name, dataset in self.datasets.items()}
        next_value = dict.fromkeys(self.specs, 0)
        with contextlib.ExitStack() as stack:
            # Values are read, not memory-mapped: a mapping's pages would stay in RSS until unmapped (the whole
            # channel by the end), a read costs one chunk.
            files = {name: stack.enter_context(open(prefix + ".bin", "rb")) for name, prefix in self.prefixes.items()}
            for lo, hi in sentence_chunks(list(sizes.values()), chunk_values):
                chunk = {}
                for name, dataset in self.datasets.items():
                    itemsize = self.specs[name].dtype.itemsize
                    chunk_sizes = sizes[name][lo:hi].astype(np.int64)
                    starts = next_value[name] + np.cumsum(chunk_sizes) - chunk_sizes
                    wrong = dataset._index._pointers[lo:hi] != starts * itemsize
                    if wrong.any():
                        i = int(wrong.argmax())
                        raise SideChannelError(f"{self.prefixes[name]}.idx: sentence {lo + i} starts at byte "
                                               f"{dataset._index._pointers[lo + i]}, not {starts[i] * itemsize} after "
                                               f"the sentences before it: corrupt index")
                    count = int(chunk_sizes.sum())
                    chunk[name] = np.fromfile(files[name], dtype=self.specs[name].dtype, count=count)
                    if len(chunk[name]) != count:
                        raise SideChannelError(f"{self.prefixes[name]}.bin ends within sentences {lo}..{hi - 1}: "
                                               f"truncated while loading")
                    next_value[name] += count
                check_sentences(chunk, {name: size[lo:hi] for name, size in sizes.items()}, self.prefixes,
                                num_pieces=self.token_sizes[lo:hi] - 1, num_labels=self.num_labels,
                                first_sentence=lo)

    def __len__(self):
        return len(self.token_sizes)

    def __getitem__(self, index: int) -> SentenceSyntax:
        return SentenceSyntax(**{name: dataset[index].numpy() for name, dataset in self.datasets.items()})


class SyntaxChannelWriter:
    """Writes channels of one (split, side) in the format SyntaxChannels reads, each with its registered dtype."""

    def __init__(self, data_dir, split, src, tgt, lang, channels: Sequence[str] = TREE_CHANNELS):
        self.specs = {name: registered_channel(name) for name in channels}
        self.prefixes = {name: channel_prefix(data_dir, split, src, tgt, lang, name) for name in channels}
        self.builders = {
            name: indexed_dataset.MMapIndexedDatasetBuilder(prefix + ".bin", dtype=self.specs[name].dtype.type)
            for name, prefix in self.prefixes.items()
        }

    def add(self, syntax: SentenceSyntax) -> None:
        for name, builder in self.builders.items():
            builder.add_item(torch.from_numpy(self._stored_values(syntax, name)))

    def _stored_values(self, syntax: SentenceSyntax, name: str) -> np.ndarray:
        spec = self.specs[name]
        if name not in syntax.channels:
            raise ValueError(f"channel {name}: missing from the sentence (it has {', '.join(syntax.channels)})")
        values = syntax.channels[name]
        if values.size == 0:
            return np.zeros(0, dtype=np.int64)
        if not np.issubdtype(values.dtype, np.integer):
            raise ValueError(f"channel {name}: values are {values.dtype}, not integers (probabilities are stored "
                             f"quantized: round(p * scale))")
        if values.size % spec.width:
            raise ValueError(f"channel {name}: {values.size} values are not whole rows of {spec.width}")
        info = np.iinfo(spec.dtype)
        if values.min() < info.min or values.max() > info.max:
            raise ValueError(f"channel {name}: values {values.min()}..{values.max()} do not fit its dtype "
                             f"{spec.dtype.name} ({info.min}..{info.max})")
        return values.astype(np.int64, copy=False).ravel()

    def finalize(self) -> None:
        for name, builder in self.builders.items():
            builder.finalize(self.prefixes[name] + ".idx")
