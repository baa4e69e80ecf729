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
from . import challenge_sets, metrics  # noqa: F401
from .metrics import EvaluationError  # noqa: F401
