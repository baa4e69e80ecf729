"""Evaluation of translations (`fairseq-syntax-evaluate`).

- `metrics`: sacrebleu BLEU / chrF++ / TER with signatures, RIBES (nltk), BLEU by source-length bucket, sacrebleu's
  paired bootstrap test, UAS/LAS of dependency trees.
- `challenge_sets`: reader for Choshen & Abend's (2019) long-distance-dependency challenge sets.
- `plots`: the figures (matplotlib, Agg canvas).
- `cli`: the command line (`cli_main`).
"""
from . import challenge_sets, metrics  # noqa: F401
from .metrics import EvaluationError  # noqa: F401
