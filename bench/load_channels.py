"""Load-time cost of the side-channel checks (fairseq_syntax/data/syntax_channels.py) on a synthetic data-bin side.

Builds a side of N sentences (default 450,000, ~26 pieces and ~20 words each: 10% of WMT16 En-De's 4.5M sentences
and ~120M pieces) with the tree channels: random valid trees, half of their edges chained so trees are deep and
the acyclicity check needs its passes. The files are written in fairseq's MMapIndexedDataset format by a
vectorised writer, checked byte for byte against fairseq's own builder on the first sentences.

Then, each in a fresh process, with the files in the page cache (as right after preprocessing):
  load   wall time and peak RSS of constructing SyntaxChannels with every check: ru_maxrss minus the RSS before
         loading, with the high-water mark reset then (Linux), so the imports' peak doesn't count; it includes the
         pages of the memory-mapped indexes the checks read (12 bytes per sentence and channel)
  heap   peak of heap allocations (tracemalloc sees numpy's), for the construction and for the checks alone:
         what must stay bounded whatever the size of the split
and prints the figures with a linear extrapolation to 4.5M sentences.

usage: python bench/load_channels.py [--sentences 450000[,45000...]] [--workdir work/load_channels]
                                     [--chunk-values N] [--seed 1]
"""
import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
WMT16_SENTENCES = 4_500_000
NUM_LABELS = 40
PREFIX = "train.en-de.en"


# ----------------------------------------------------------------------------------------------- building

def synthetic_side(num_sentences: int, seed: int):
    """Token sizes and tree channels (flat values, values per sentence) of random valid sentences."""
    rng = np.random.default_rng(seed)
    words = rng.integers(5, 36, num_sentences)  # mean 20
    word_starts = np.cumsum(words) - words
    num_words = int(words.sum())
    sentence_of_word = np.repeat(np.arange(num_sentences), words)
    rank = np.arange(num_words) - word_starts[sentence_of_word]  # 0-based word position in its sentence
    pieces_of_word = 1 + (rng.random(num_words) < 0.3)  # mean 1.3 pieces per word: ~26 per sentence
    word_ids = np.repeat(rank, pieces_of_word)
    pieces = np.bincount(sentence_of_word, weights=pieces_of_word, minlength=num_sentences).astype(np.int64)
    # A random tree: visit the words in a random order; each word after the first hangs off one visited before it,
    # the previous one half of the time (deep chains), else any.
    order = np.argsort(sentence_of_word + rng.random(num_words), kind="stable")  # word at each rank, per sentence
    earlier = np.where(rng.random(num_words) < 0.5, rank - 1, np.floor(rng.random(num_words) * rank).astype(np.int64))
    parent = order[word_starts[sentence_of_word] + np.maximum(earlier, 0)]
    heads = np.empty(num_words, dtype=np.int64)
    heads[order] = np.where(rank == 0, 0, parent - word_starts[sentence_of_word] + 1)
    labels = rng.integers(1, NUM_LABELS, num_words)
    return pieces + 1, {"word_ids": (word_ids, pieces), "heads": (heads, words), "labels": (labels, words)}


def write_indexed(prefix: str, values: np.ndarray, sizes: np.ndarray, dtype) -> None:
    """fairseq's MMapIndexedDataset files (as MMapIndexedDatasetBuilder writes them), without a per-item loop."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset, _dtype_header_code

    dtype = np.dtype(dtype)
    values.astype(dtype).tofile(prefix + ".bin")
    pointers = (np.cumsum(sizes) - sizes) * dtype.itemsize
    with open(prefix + ".idx", "wb") as f:
        f.write(MMapIndexedDataset.Index._HDR_MAGIC + struct.pack("<Q", 1))
        f.write(struct.pack("<B", _dtype_header_code(dtype.type)) + struct.pack("<Q", len(sizes)))
        f.write(np.asarray(sizes, dtype=np.int32).tobytes() + np.asarray(pointers, dtype=np.int64).tobytes())


def check_writer_against_fairseq(workdir: Path) -> None:
    import torch
    from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

    _, channels = synthetic_side(50, seed=0)
    values, sizes = channels["word_ids"]
    write_indexed(str(workdir / "ours"), values, sizes, np.uint16)
    builder = MMapIndexedDatasetBuilder(str(workdir / "fairseq.bin"), dtype=np.uint16)
    for sentence in np.split(values, np.cumsum(sizes)[:-1]):
        builder.add_item(torch.from_numpy(sentence))
    builder.finalize(str(workdir / "fairseq.idx"))
    for ext in (".bin", ".idx"):
        if (workdir / f"ours{ext}").read_bytes() != (workdir / f"fairseq{ext}").read_bytes():
            sys.exit(f"the vectorised writer's {ext} differs from fairseq's MMapIndexedDatasetBuilder")
        (workdir / f"ours{ext}").unlink()
        (workdir / f"fairseq{ext}").unlink()


def build(data_dir: Path, num_sentences: int, seed: int) -> dict:
    from fairseq_syntax.data.channels import CHANNELS, TREE_CHANNELS, SideManifest, SyntaxManifest

    data_dir.mkdir(parents=True, exist_ok=True)
    check_writer_against_fairseq(data_dir)
    if (data_dir / "syntax.json").exists():
        return {}
    start = time.perf_counter()
    token_sizes, channels = synthetic_side(num_sentences, seed)
    rng = np.random.default_rng(seed + 1)
    write_indexed(str(data_dir / PREFIX), rng.integers(4, 8000, int(token_sizes.sum())), token_sizes, np.uint16)
    for name, (values, sizes) in channels.items():
        write_indexed(str(data_dir / f"{PREFIX}.{name}"), values, sizes, CHANNELS[name].dtype)
    SyntaxManifest("en", "de", {"en": SideManifest.for_channels("synthetic", TREE_CHANNELS, NUM_LABELS),
                                "de": SideManifest.for_channels(None, (), 0)}).save(str(data_dir))
    return {"build_seconds": time.perf_counter() - start}


# ----------------------------------------------------------------------------------------------- measuring

def memory_status() -> dict:
    """RssAnon (heap), RssFile (mapped files), VmRSS and VmHWM (its high-water mark) now, in bytes."""
    with open("/proc/self/status") as f:
        return {key: int(value.split()[0]) * 1024 for key, value in (line.split(":", 1) for line in f)
                if key in ("RssAnon", "RssFile", "VmRSS", "VmHWM")}


def reset_peak_rss() -> bool:
    """Reset the high-water mark (Linux >= 4.0) that VmHWM and ru_maxrss report, so the imports' peak doesn't count.
    ru_maxrss also keeps the RSS the parent had when it forked this process: the parent stays small for that."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(data_dir: str, mode: str, chunk_values: Optional[int]) -> dict:
    import tracemalloc

    from fairseq.data import indexed_dataset
    from fairseq_syntax.data.syntax_channels import CHUNK_VALUES, SyntaxChannels

    chunk_values = chunk_values or CHUNK_VALUES
    tokens = indexed_dataset.MMapIndexedDataset(os.path.join(data_dir, PREFIX))  # as the task has it already
    load = lambda: SyntaxChannels(data_dir, "train", "en", "de", "en", tokens.sizes, NUM_LABELS,  # noqa: E731
                                  chunk_values=chunk_values)
    if mode == "heap":
        tracemalloc.start()
        channels = load()
        construction_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        channels.check(chunk_values)
        return {"heap_peak_construction_mb": construction_peak / 2**20,
                "heap_peak_checks_mb": tracemalloc.get_traced_memory()[1] / 2**20}
    before = memory_status()
    peak_was_reset = reset_peak_rss()
    start = time.perf_counter()
    channels = load()
    seconds = time.perf_counter() - start
    ru_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    after = memory_status()
    return {"sentences": len(channels), "chunk_values": chunk_values, "seconds": seconds,
            "peak_rss_mb": (ru_maxrss - before["VmRSS"]) / 2**20,
            "peak_rss_is": "ru_maxrss minus the RSS before loading" + (", high-water mark reset then"
                                                                        if peak_was_reset else ""),
            "peak_vmhwm_mb": (after["VmHWM"] - before["VmRSS"]) / 2**20 if peak_was_reset else None,
            "rss_before_mb": before["VmRSS"] / 2**20,
            "rss_anon_growth_mb": (after["RssAnon"] - before["RssAnon"]) / 2**20,
            "rss_file_growth_mb": (after["RssFile"] - before["RssFile"]) / 2**20}


def child(*args) -> dict:
    """Run this script's --child mode in a fresh process; its last output line is JSON."""
    result = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1"))
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, args))} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", default="450000", help="comma-separated sizes to measure")
    parser.add_argument("--workdir", default=str(REPO / "work" / "load_channels"))
    parser.add_argument("--chunk-values", type=int, help="default: syntax_channels.CHUNK_VALUES")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", choices=("build", "load", "heap"), help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "build":
        print(json.dumps(build(Path(args.data_dir), int(args.sentences), args.seed)))
        return
    if args.child:
        print(json.dumps(measure(args.data_dir, args.child, args.chunk_values)))
        return
    # this process imports neither torch nor numpy's heavy users: a child's ru_maxrss includes its parent's RSS
    workdir = Path(args.workdir)
    results = []
    for num_sentences in (int(n) for n in args.sentences.split(",")):
        data_dir = workdir / f"side-{num_sentences}-seed{args.seed}"
        chunk = ["--chunk-values", args.chunk_values] if args.chunk_values else []
        result = {"sentences": num_sentences,
                  **child("--child", "build", "--data-dir", data_dir, "--sentences", num_sentences,
                          "--seed", args.seed),
                  **child("--child", "load", "--data-dir", data_dir, *chunk),
                  **child("--child", "heap", "--data-dir", data_dir, *chunk)}
        channel_files = [p for p in data_dir.glob(f"{PREFIX}.*.*") if p.suffix in (".bin", ".idx")]
        result["channel_files_mb"] = sum(p.stat().st_size for p in channel_files) / 2**20
        result["channel_indexes_mb"] = sum(p.stat().st_size for p in channel_files if p.suffix == ".idx") / 2**20
        scale = WMT16_SENTENCES / num_sentences
        result["extrapolated_to_4.5M"] = {key: result[key] * scale
                                          for key in ("seconds", "peak_rss_mb", "channel_indexes_mb")}
        results.append(result)
        extrapolated = result["extrapolated_to_4.5M"]
        vmhwm = f", VmHWM +{result['peak_vmhwm_mb']:.0f} MB" if result["peak_vmhwm_mb"] is not None else ""
        print(f"{num_sentences:,} sentences: channel files {result['channel_files_mb']:.0f} MB (indexes "
              f"{result['channel_indexes_mb']:.0f} MB), checked in chunks of {result['chunk_values']:,} values\n"
              f"  load {result['seconds']:.2f} s; peak RSS +{result['peak_rss_mb']:.0f} MB ({result['peak_rss_is']}"
              f"{vmhwm}); kept after loading: heap +{result['rss_anon_growth_mb']:.0f} MB, mapped files "
              f"+{result['rss_file_growth_mb']:.0f} MB\n"
              f"  heap peak (tracemalloc): construction {result['heap_peak_construction_mb']:.0f} MB (fairseq's "
              f"MMapIndexedDataset warm-up reads each file through a 100 MB buffer), checks alone "
              f"{result['heap_peak_checks_mb']:.1f} MB\n"
              f"  linear extrapolation to {WMT16_SENTENCES:,} sentences (x{scale:g}): {extrapolated['seconds']:.1f} s, "
              f"peak RSS +{extrapolated['peak_rss_mb']:.0f} MB (mapped channel indexes "
              f"{extrapolated['channel_indexes_mb']:.0f} MB; the checks' heap depends on the chunk, not the split)")
    (workdir / "load_channels.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {workdir / 'load_channels.json'}")


if __name__ == "__main__":
    main()
