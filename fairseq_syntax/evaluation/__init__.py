"""Evaluation of translations (`fairseq-syntax-evaluate`).

- `metrics`: sacrebleu BLEU / chrF++ / TER with signatures, RIBES (nltk), BLEU by source-length bucket, sacrebleu's
  paired bootstrap test, UAS/LAS of dependency trees.
- `challenge_sets`: reader for Choshen & Abend's (2019) long-distance-dependency challenge sets.
- `plots`: the figures (matplotlib, Agg canvas).
- one module per tool of the command line, each with its parser builder and run function: `scoring` (systems
  against references, the default command), `trees` (UAS/LAS of generated trees, options of the scoring command;
  CoNLL-U read by fairseq_syntax.parsers.conllu_reader, over surface words), `attention` (`attention`: an encoder
  head's attention), `challenge` (`challenge list|export|score`).
- `system_outputs`: reading system files (fairseq-generate output or plain text), references, linemaps, data-bins.
- `reporting`: metric names, number formatting and the lazily imported plots shared by the reports.
- `cli`: the command line front (`cli_main`): subcommand dispatch and logging.
"""
import logging

# fairseq's import (fairseq/models/wav2vec/wav2vec2_classification.py) calls logging.basicConfig(level=DEBUG), after
# which every figure drawn here logs ~100 lines of matplotlib's font matching
logging.getLogger("matplotlib").setLevel(logging.WARNING)

from . import challenge_sets, metrics  # noqa: E402,F401
from .metrics import EvaluationError  # noqa: E402,F401
