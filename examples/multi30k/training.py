"""The fairseq-train flags that the demo (demo.sh), the comparison (compare.py) and the benchmark (bench/bench.py)
share: the training recipe (optimiser, learning-rate schedule, loss, batch size, seed) and how they all run (CPU,
no per-epoch checkpoints, plain log lines, no loader workers). Each adds its own stopping rule, save dir and log
interval; a tool that needs another value of one of these says so where it builds its command.

  python examples/multi30k/training.py     prints them shell-quoted (demo.sh: eval "FLAGS=($(...))")
"""
import shlex

TRAIN_FLAGS = [
    "--share-all-embeddings",
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "400",
    "--criterion", "syntax_label_smoothed_cross_entropy",  # plus the methods' auxiliary losses, if any
    "--label-smoothing", "0.1", "--max-tokens", "4096", "--seed", "1",
    "--cpu", "--no-epoch-checkpoints", "--log-format", "simple", "--num-workers", "0",
]


if __name__ == "__main__":
    print(shlex.join(TRAIN_FLAGS))
