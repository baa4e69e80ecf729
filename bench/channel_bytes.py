"""Bytes per token of side channels on disk: the channels a data-bin has (measured from its files) and, for the
channel shapes later methods add, the same arithmetic on that data-bin's own counts of pieces, words and edges.

    python bench/channel_bytes.py DATA_BIN [--split train]

A channel costs, per sentence, rows x width x dtype bytes in its .bin plus fairseq's mmap index entry (a 4-byte
size and an 8-byte pointer, and 8 bytes of document index); "per token" divides by the side's source tokens
(pieces + EOS), the unit fairseq batches by.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fairseq.data import indexed_dataset  # noqa: E402

from fairseq_syntax.data.channels import CHANNELS, SyntaxManifest, channel_prefix  # noqa: E402

INDEX_BYTES_PER_SENTENCE = 4 + 8 + 8

# Shapes the next methods need (unit, width, dtype, what for): the cost comes from this data-bin's counts.
PROJECTED = [
    ("piece", 1, "uint16", "a per-piece integer (e.g. a transition id, a word id)"),
    ("word", 1, "uint16", "a per-word integer (a head, a label)"),
    ("word", 4, "uint16", "top-4 heads of every word (LDD's head candidates)"),
    ("word", 4, "uint8", "their probabilities, quantized to 1/255"),
    ("word", 16, "uint8", "a 16-group label distribution per word, quantized to 1/255"),
    ("word", 64, "uint8", "top-4 heads x 16 label groups, quantized to 1/255"),
    ("edge", 1, "uint16", "one endpoint or label per edge (an edge list is 3 such channels)"),
]


def measured_bytes_per_token(data_bin, split: str, lang: str) -> dict:
    """On-disk bytes (.bin + .idx) of a side's tokens and of each of its channels, per token of the side."""
    manifest = SyntaxManifest.load(str(data_bin))
    prefix = os.path.join(str(data_bin), f"{split}.{manifest.source_lang}-{manifest.target_lang}.{lang}")
    tokens = indexed_dataset.MMapIndexedDataset(prefix)  # kept alive: .sizes is a view of its mmap
    token_count = int(tokens.sizes.sum())
    return {name: sum(os.path.getsize(path + ext) for ext in (".bin", ".idx")) / token_count
            for name, path in [("tokens", prefix)] + [(channel, f"{prefix}.{channel}")
                                                      for channel in manifest.sides[lang].channels]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--split", default="train")
    args = parser.parse_args(argv)
    manifest = SyntaxManifest.load(args.data_bin)
    if manifest is None:
        raise SystemExit(f"{args.data_bin}: not a syntax data-bin (no syntax.json)")
    src, tgt = manifest.source_lang, manifest.target_lang
    for lang, side in manifest.sides.items():
        if not side.channels:
            continue
        tokens = indexed_dataset.MMapIndexedDataset(os.path.join(args.data_bin, f"{args.split}.{src}-{tgt}.{lang}"))
        sentences, token_count = len(tokens), int(tokens.sizes.sum())
        heads = indexed_dataset.MMapIndexedDataset(channel_prefix(args.data_bin, args.split, src, tgt, lang, "heads"))
        words = int(heads.sizes.sum())
        edges = words - sentences  # a tree has one edge per word but the root
        print(f"{args.split}.{lang}: {sentences} sentences, {token_count} tokens ({token_count / sentences:.1f} per "
              f"sentence), {words} words ({words / token_count:.3f} per token)")
        print(f"{'channel':<14} {'unit':<6} {'width':>5} {'dtype':<7} {'bytes/token':>11}  measured from the files")
        measured = measured_bytes_per_token(args.data_bin, args.split, lang)
        print(f"{'(tokens)':<14} {'piece':<6} {1:>5} {np.dtype(tokens._index.dtype).name:<7} "
              f"{measured['tokens']:>11.2f}")
        for name in side.channels:
            spec = CHANNELS[name]
            print(f"{name:<14} {spec.unit:<6} {spec.width:>5} {spec.dtype.name:<7} {measured[name]:>11.2f}")
        print(f"{'shape':<21} {'dtype':<7} {'bytes/token':>11}  computed from this split's counts")
        rows = {"piece": token_count - sentences, "word": words, "edge": edges}
        for unit, width, dtype, what in PROJECTED:
            size = rows[unit] * width * np.dtype(dtype).itemsize + sentences * INDEX_BYTES_PER_SENTENCE
            print(f"{unit + ' x ' + str(width):<21} {dtype:<7} {size / token_count:>11.2f}  {what}")


if __name__ == "__main__":
    main()
