"""LDD storage and preprocessing cost, measured on raw sentences with a SuPar parser (docs/methods.md, "LDD").

    python bench/ldd_storage.py --parser parsers/en_ewt.supar --spm-model DATA_BIN/spm.model \
        --input ../shared/data/multi30k/task1_raw/train.en.gz [--sentences 29000] [--repeats 2]

1. Time: SuPar 1-best parsing alone (predict without probabilities) against parsing with the distributions
   (fairseq-syntax-preprocess --source-ldd's parser), alternating, `--repeats` times each, one torch thread.
2. Storage: for a grid of (mass, max heads), from the untruncated head distributions of the same forward passes:
   arcs and stored entries per word, retained arc mass, bytes per subword piece of the stored channels (an entry,
   one labeled arc with a nonzero quantized probability, costs 2 + 2 + 1 + 1 bytes: dependent, head, group,
   probability; a word 1 byte of label group; fairseq's index 20 bytes per sentence and channel, 5 channels),
   against dense word x word x 16 float32 (64 x words bytes per word).
3. The share of the kept arc mass whose labels fall outside the 16 groups.
4. With --target-input: the whole `fairseq-syntax-preprocess --source-ldd` of the same lines (wall time, and its
   own stage times from preprocess.json), against the 1-best parsing time of step 1.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fairseq_syntax.data.dependency_distributions import (  # noqa: E402
    DEFAULT_MASS, DEFAULT_MAX_HEADS, PROBABILITY_SCALE, arc_distributions,
)
from fairseq_syntax.parsers.supar_parser import DistributionOptions, SuparParser  # noqa: E402
from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder  # noqa: E402

ENTRY_BYTES = 2 + 2 + 1 + 1
WORD_BYTES = 1
INDEX_BYTES = 20  # per sentence and channel (5 channels)
GRID_MASS = (0.95, 0.98, 0.99, 0.995, 0.999)
GRID_HEADS = (1, 2, 3, 4, 6, 8)


def read_sentences(path, count):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line, _ in zip(f, range(count))]
    return [line for line in lines if line]


def timed_parse(parser, sentences, batch_size):
    start = time.perf_counter()
    results = list(parser.parse(sentences, batch_size=batch_size))
    return time.perf_counter() - start, results


def time_preprocess(args, sentences, one_best_seconds):
    """The whole preprocessing of the same lines with distributions (one thread, the data-bin's spm model)."""
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    targets = read_sentences(args.target_input, args.sentences)
    (work / f"train.{args.lang}").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    (work / "train.tgt").write_text("\n".join(targets[:len(sentences)]) + "\n", encoding="utf-8")
    destdir = work / "data-bin"
    if destdir.exists():
        import shutil
        shutil.rmtree(destdir)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "fairseq-syntax-preprocess"), "-s", args.lang, "-t", "tgt",
                    "--trainpref", str(work / "train"), "--source-parser", f"supar:{args.parser}", "--source-ldd",
                    "--spm-model", args.spm_model, "--destdir", str(destdir)], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    report = json.loads((destdir / "preprocess.json").read_text())
    return {"wall_seconds": round(wall, 2), "startup_seconds": report["startup_seconds"],
            "stage_seconds": report["stage_seconds"], "one_best_parse_seconds": round(one_best_seconds, 2),
            "wall_over_one_best_parse": round(wall / one_best_seconds, 3),
            "parse_stage_over_one_best_parse": round(report["stage_seconds"]["read_and_parse"] / one_best_seconds, 3)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parser", required=True)
    ap.add_argument("--spm-model", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--lang", default="en")
    ap.add_argument("--sentences", type=int, default=29000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--output", help="write the results as JSON here")
    ap.add_argument("--target-input", help="the target side of the same lines: also time the whole preprocessing")
    ap.add_argument("--workdir", default="work/bench/ldd_storage")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sentences = read_sentences(args.input, args.sentences)

    one_best = SuparParser(args.parser, args.lang, arc_probs=False)
    with_ldd = SuparParser(args.parser, args.lang, distributions=DistributionOptions(), arc_probs=False)
    times = {"one_best": [], "distributions": []}
    for _ in range(args.repeats):
        for name, parser in (("one_best", one_best), ("distributions", with_ldd)):
            seconds, results = timed_parse(parser, sentences, args.batch_size)
            times[name].append(seconds)
    ratio = float(np.median(times["distributions"]) / np.median(times["one_best"]))

    # untruncated head distributions of the same sentences, sorted per word, and the number of nonzero quantized
    # groups of each of the best heads, for the grid
    sorted_rows, group_counts = [], []
    pad = one_best._parser.args.pad_index
    group_matrix, special = with_ldd._group_of_relation, with_ldd._special_relations

    def capture(module, inputs, outputs):
        mask = inputs[0].ne(pad)
        mask = mask if mask.dim() < 3 else mask.any(-1)
        mask[:, 0] = False
        probs = arc_distributions(outputs[0], mask)
        top, heads = probs.topk(min(max(GRID_HEADS), probs.size(-1)), dim=-1)
        relations = outputs[1].float().gather(2, heads[..., None].expand(*heads.shape, outputs[1].size(-1)))
        labels = relations.masked_fill(special, float("-inf")).softmax(-1) @ group_matrix
        nonzero = (torch.round(top[..., None] * labels * PROBABILITY_SCALE) > 0).sum(-1)
        sorted_rows.append(top[mask])
        group_counts.append(nonzero[mask])

    handle = one_best._parser.model.register_forward_hook(capture)
    try:
        _, parsed = timed_parse(one_best, sentences, args.batch_size)
    finally:
        handle.remove()
    width = max(GRID_HEADS)
    rows = torch.cat([torch.nn.functional.pad(r, (0, width - r.size(1))) for r in sorted_rows])  # (words, 8)
    counts = torch.cat([torch.nn.functional.pad(c, (0, width - c.size(1))) for c in group_counts])
    words = rows.size(0)
    trees = [t for t in parsed if not isinstance(t, Exception)]
    encoder = WordAlignedEncoder(args.spm_model)
    pieces = sum(len(p) for p, _ in encoder.encode_many_words(trees))
    index_bytes = INDEX_BYTES * 5 * len(trees)
    before = rows.cumsum(-1) - rows
    grid = []
    for mass in GRID_MASS:
        for heads in GRID_HEADS:
            kept = (before[:, :heads] < mass) & (rows[:, :heads] >= 0.5 / PROBABILITY_SCALE)
            arcs = int(kept.sum())
            entries = int((counts[:, :heads] * kept).sum())
            grid.append({"mass": mass, "max_heads": heads, "arcs_per_word": round(arcs / words, 4),
                         "entries_per_word": round(entries / words, 4),
                         "retained_arc_mass": round(float((rows[:, :heads] * kept).sum()) / words, 5),
                         "bytes_per_piece": round((entries * ENTRY_BYTES + words * WORD_BYTES + index_bytes)
                                                  / pieces, 2)})
    words_per_sentence = words / max(len(trees), 1)
    ldd_summary = with_ldd.distribution_stats.summary()
    result = {
        "sentences": len(sentences), "parsed": len(trees), "words": words, "pieces": pieces,
        "seconds_one_best": [round(t, 2) for t in times["one_best"]],
        "seconds_distributions": [round(t, 2) for t in times["distributions"]],
        "time_ratio": round(ratio, 3),
        "defaults": {"mass": DEFAULT_MASS, "max_heads": DEFAULT_MAX_HEADS, **ldd_summary,
                     "bytes_per_piece": round((ldd_summary["entries"] / args.repeats * ENTRY_BYTES
                                               + words * WORD_BYTES + index_bytes) / pieces, 2)},
        "dense_float32_bytes_per_piece": round(64 * words_per_sentence * words / pieces, 1),
        "label_scheme": with_ldd.label_scheme,
        "grid": grid,
    }
    if args.target_input:
        result["preprocess"] = time_preprocess(args, sentences, min(times["one_best"]))
    print(f"{len(trees)} sentences, {words} words, {pieces} pieces ({pieces / words:.3f} per word)")
    print(f"parse seconds: 1-best {times['one_best']}, with distributions {times['distributions']}; "
          f"ratio of medians {ratio:.3f}")
    print(f"defaults (mass {DEFAULT_MASS}, max heads {DEFAULT_MAX_HEADS}): {result['defaults']}")
    print(f"dense float32 word x word x 16: {result['dense_float32_bytes_per_piece']} bytes per piece")
    print("| mass | max heads | arcs/word | entries/word | retained arc mass | bytes/piece |")
    print("|---|---|---|---|---|---|")
    for row in grid:
        print(f"| {row['mass']} | {row['max_heads']} | {row['arcs_per_word']} | {row['entries_per_word']} | "
              f"{row['retained_arc_mass']:.4f} | {row['bytes_per_piece']} |")
    if "preprocess" in result:
        print(f"fairseq-syntax-preprocess --source-ldd: {result['preprocess']}")
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
