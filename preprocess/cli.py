"""fairseq-syntax-preprocess: raw parallel text -> parses -> sentencepiece (or words) -> a syntax data-bin.

Writes, into --destdir: the fairseq data-bin (dict.{lang}.txt, {split}.{src}-{tgt}.{lang}.bin/.idx), the side
channels of every parsed side (see fairseq_syntax/data/channels.py), dict.{lang}.labels.txt, syntax.json, the
sentencepiece model, and per split: {split}.{lang}.txt (the kept sentences, for scoring), {split}.linemap (the
original 1-based line number of every kept pair) and {split}.drops.tsv (every dropped line with its reason).

With --add-to DATA_BIN, only the --validpref/--testpref splits are made, into that existing data-bin, with its
sentencepiece model, label dictionaries and parsers (from its syntax.json), so models trained on it can translate
them (e.g. challenge sets: --testpref challenge=export/challenge, then fairseq-generate --gen-subset challenge).

With --word-vocabulary, every word is one token instead (the parser's words; spaCy's rule-based tokenizer on
unparsed sides) and each side's dictionary holds the training words seen at least --word-min-count times, the
others being <unk> (fairseq_syntax/data/word_codec.py; docs/preprocessing.md, "Word-level vocabulary").

With --multitask-parse, the data-bin is the multi-task baseline of Currey & Heafield (2019): tagged translation
pairs plus, in train, a parse pair (source -> linearized source tree) of every line; no side channels
(fairseq_syntax/data/multitask.py; docs/methods.md, "The multi-task baseline").

With --target-transitions, the target tokens are the transition sequence of the --target-parser tree (pieces
interleaved with LEFT-ARC:l / RIGHT-ARC:l tokens, fairseq_syntax/data/transition_*.py), the arc tokens are appended to
the target dictionary, and the target side carries the graph of every prefix (data/transitions/channels.py); pairs whose
target tree is not projective are dropped (docs/methods.md, "Target-side transitions").
"""
from . import startup_clock  # noqa: F401  (first: starts the clock of startup before the imports below)

import argparse
import logging
import sys

from fairseq_syntax.data.dependency_distributions import DEFAULT_MASS, DEFAULT_MAX_HEADS, MARGINALS
from fairseq_syntax.data.label_groups import SCHEMES, format_table
from fairseq_syntax.data.word_codec import DEFAULT_MIN_COUNT
from .option_checks import DEFAULT_SPM_VOCAB_SIZE, check_arguments
from .preprocessor import Preprocessor

logger = logging.getLogger("fairseq_syntax.preprocess")


def get_parser():
    parser = argparse.ArgumentParser(prog="fairseq-syntax-preprocess", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-s", "--source-lang", help="required unless --add-to")
    parser.add_argument("-t", "--target-lang", help="required unless --add-to")
    parser.add_argument("--trainpref", help="training prefix: reads {trainpref}.{lang}[.gz] (required unless --add-to)")
    parser.add_argument("--validpref", help="comma-separated validation prefixes (valid, valid1, ...); NAME=PREFIX "
                                            "names the split")
    parser.add_argument("--testpref", help="comma-separated test prefixes (test, test1, ...); NAME=PREFIX names the "
                                           "split (e.g. challenge=export/challenge)")
    parser.add_argument("--add-to", metavar="DATA_BIN",
                        help="add the --validpref/--testpref splits to this existing data-bin, with its sentencepiece "
                             "model, label dictionaries and parsers; nothing else in it is rewritten")
    parser.add_argument("--source-parser", help="spacy:MODEL | supar:PATH | conllu (reads {pref}.{lang}.conllu)")
    parser.add_argument("--target-parser", help="as --source-parser, for the target side")
    parser.add_argument("--multitask-parse", action="store_true",
                        help="write the multi-task data-bin of Currey & Heafield (2019): train = every pair as "
                             "<translate> src <translate> -> tgt plus <parse> src <parse> -> the linearized "
                             "--source-parser tree; other splits translation pairs only; no side channels (see "
                             "docs/methods.md). With --add-to, taken from the data-bin")
    parser.add_argument("--target-transitions", action="store_true",
                        help="the target tokens are the transition sequence of the --target-parser tree (pieces "
                             "interleaved with LEFT-ARC:l / RIGHT-ARC:l, and <attached> before a word written "
                             "without a space; these tokens are added to the target dictionary) plus the graph of "
                             "every prefix as side channels, for the Linearized decoder; non-projective target "
                             "trees drop their pair (see --projectivize). With --add-to, taken from the data-bin")
    parser.add_argument("--projectivize", action="store_true",
                        help="with --target-transitions: lift the arcs of non-projective target trees (Nivre & "
                             "Nilsson's Lift, labels kept) instead of dropping their pairs; preprocess.json counts "
                             "the trees and the words that got a new head. With --add-to, taken from the data-bin")
    ldd = parser.add_argument_group("labeled dependency distributions (LDD, Liu & Sima'an; needs a SuPar source "
                                    "parser)")
    ldd.add_argument("--source-ldd", action="store_true",
                     help="also store the source side's labeled dependency distributions over 16 label groups (the "
                          "ldd_* channels) and each word's 1-best label group (label_groups)")
    ldd.add_argument("--ldd-mass", type=float, default=None,
                     help=f"keep each word's most probable heads until their mass reaches this (default "
                          f"{DEFAULT_MASS})")
    ldd.add_argument("--ldd-max-heads", type=int, default=None,
                     help=f"... but at most this many heads per word (default {DEFAULT_MAX_HEADS})")
    ldd.add_argument("--ldd-marginals", choices=MARGINALS, default=None,
                     help="head distributions: per-row softmax of the arc scores (the paper; default) or the "
                          "marginals of the distribution over trees (Matrix-Tree theorem)")
    ldd.add_argument("--ldd-label-scheme", choices=("auto",) + SCHEMES, default=None,
                     help="label set of the parser, for the 16 groups (default: guessed from its labels)")
    ldd.add_argument("--print-label-groups", action="store_true",
                     help="print the label groups of Stanford, UD and ClearNLP labels and exit")
    parser.add_argument("--spm-vocab-size", type=int, default=None,
                        help=f"sentencepiece vocabulary (includes 256 byte-fallback pieces, so at least ~300; default "
                             f"{DEFAULT_SPM_VOCAB_SIZE})")
    parser.add_argument("--spm-model", help="reuse this sentencepiece model instead of training one")
    parser.add_argument("--joined-dictionary", action="store_true",
                        help="sentencepiece: accepted for fairseq-preprocess compatibility (the model is joint and "
                             "both dictionaries are its vocabulary, so they are always the same); "
                             "--word-vocabulary: one dictionary of both sides' words (for --share-all-embeddings) "
                             "instead of one per side")
    words = parser.add_argument_group("word-level vocabulary, no sentencepiece (the setting of Liu & Sima'an's LDD "
                                      "experiments)")
    words.add_argument("--word-vocabulary", action="store_true",
                       help="every word is one token: the parser's words on parsed sides, spaCy's rule-based "
                            "tokenizer (spacy.blank(LANG)) on the others; a word after whitespace is written "
                            "\u2581WORD, an attached one WORD, so output decodes to text like sentencepiece output")
    words.add_argument("--word-min-count", type=int, default=None,
                       help=f"words seen fewer times than this in the training split are not in the dictionary "
                            f"(they become <unk>; default {DEFAULT_MIN_COUNT})")
    parser.add_argument("--spm-only", action="store_true",
                        help="only train the sentencepiece model on the training split (first step of sharding)")
    parser.add_argument("--label-dict", action="append", default=[], metavar="LANG=PATH",
                        help="use this label dictionary for a side (e.g. from another data-bin); labels outside "
                             "it drop the line")
    parser.add_argument("--num-shards", type=int, default=1,
                        help="split the training lines into this many contiguous shards ...")
    parser.add_argument("--shard-id", type=int, default=0,
                        help="... and process this one (0-based); valid/test are written by shard 0 only. Every "
                             "shard needs the same --spm-model; fairseq-train reads shard0:shard1:...")
    parser.add_argument("--max-pieces", type=int, default=250,
                        help="drop pairs where a side has more subword pieces (words, with --word-vocabulary) than "
                             "this")
    parser.add_argument("--destdir", help="required unless --add-to")
    parser.add_argument("--workers", type=int, default=1, help="parser processes (spaCy n_process)")
    parser.add_argument("--batch-size", type=int, default=256, help="sentences per parser batch")
    parser.add_argument("--seed", type=int, default=1)
    return parser


def cli_main(argv=None) -> None:
    run(argv)


def run(argv=None) -> dict:
    """Preprocess as the command line says; returns the summary also written to preprocess.json."""
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO,
                        stream=sys.stderr)
    args = get_parser().parse_args(argv)
    if args.print_label_groups:
        print(format_table())
        return {}
    check_arguments(args)
    if args.source_parser is None and args.target_parser is None:
        logger.warning("no --source-parser or --target-parser: the data-bin will carry tokens only")
    return Preprocessor(args).run()


if __name__ == "__main__":
    cli_main()
