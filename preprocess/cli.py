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
interleaved with LEFT-ARC:l / RIGHT-ARC:l tokens, fairseq_syntax/data/transitions.py), the arc tokens are appended to
the target dictionary, and the target side carries the graph of every prefix (transition_channels.py); pairs whose
target tree is not projective are dropped (docs/methods.md, "Target-side transitions").
"""
import time

IMPORT_START = time.time()  # startup (imports, parser loading) is reported separately

import argparse  # noqa: E402
import json
import logging
import os
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from tqdm import tqdm

from fairseq.data import Dictionary, indexed_dataset
from fairseq_syntax.data.channels import (
    MANIFEST_NAME, MAX_WORDS, SENTENCEPIECE, WORDS, LabelDictionary, SideManifest, SyntaxManifest, TREE_CHANNELS,
    label_dict_path,
)
from fairseq_syntax.data.dependency_distributions import (
    DEFAULT_MASS, DEFAULT_MAX_HEADS, LABEL_GROUP_CHANNEL, LDD_CHANNELS, MARGINALS,
)
from fairseq_syntax.data.label_groups import SCHEMES, format_table
from fairseq_syntax.data.syntax_channels import SyntaxChannelWriter
from fairseq_syntax.data.transition_channels import (
    TRANSITION_CHANNELS, transition_sequence, transition_syntaxes, word_rule,
)
from fairseq_syntax.data.transitions import (
    ATTACHED_MARK, NO_WORD, ROOT_LABEL, InvalidTreeError, crossing_arcs, is_arc, projectivize, transition_vocabulary,
)

from fairseq_syntax.data import multitask
from fairseq_syntax.parsers import ParseError
from fairseq_syntax.parsers.base import realigned
from fairseq_syntax.parsers.conllu_reader import read_conllu
from fairseq_syntax.parsers.sentence_channels import build_side_parser, tree_syntax
from fairseq_syntax.data.sentencepiece_codec import VocabularyTooSmallError, WordAlignedEncoder, train_sentencepiece
from fairseq_syntax.data.text_normalization import normalize_line, parser_view
from fairseq_syntax.data.word_codec import DEFAULT_MIN_COUNT, WordCodec, count_tokens, sentence_problem, vocabulary
from .text_input import find_input, read_lines

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
                             "the trees and the words that got a new head")
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


DEFAULT_SPM_VOCAB_SIZE = 8000
SPLIT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def named_splits(args) -> List[Tuple[str, str]]:
    """(split, prefix) for --validpref/--testpref: valid, valid1, ..., test, test1, ... unless NAME=PREFIX."""
    splits = []
    for kind, prefixes in (("valid", args.validpref), ("test", args.testpref)):
        for k, item in enumerate(p for p in (prefixes or "").split(",") if p):
            name, sep, prefix = item.partition("=")
            if not (sep and SPLIT_NAME.match(name)):  # a plain prefix (which may itself contain "=")
                name, prefix = (kind if k == 0 else f"{kind}{k}"), item
            if name == "train" or name in {n for n, _ in splits}:
                raise SystemExit(f"split name {name!r} given twice or reserved (in {item!r})")
            splits.append((name, prefix))
    return splits


def check_arguments(args) -> None:
    """Required options, and with --add-to everything the data-bin fixes: languages, sentencepiece model,
    parsers and (closed) label dictionaries, so new splits use the same ids as the data the models saw."""
    if not args.add_to:
        missing = [option for option, value in (("-s", args.source_lang), ("-t", args.target_lang),
                                                ("--trainpref", args.trainpref), ("--destdir", args.destdir))
                   if not value]
        if missing:
            raise SystemExit(f"fairseq-syntax-preprocess: {', '.join(missing)} required (or --add-to DATA_BIN)")
        check_transition_arguments(args)
        check_multitask_arguments(args)
        check_ldd_arguments(args)
        check_word_arguments(args)
        return
    data_bin = args.add_to
    manifest = SyntaxManifest.load(data_bin)
    if manifest is None:
        raise SystemExit(f"--add-to {data_bin}: no {MANIFEST_NAME} there, not a fairseq-syntax data-bin")
    if args.trainpref or args.spm_only or args.num_shards > 1:
        raise SystemExit("--add-to adds --validpref/--testpref splits only (no --trainpref, --spm-only, shards)")
    if not named_splits(args):
        raise SystemExit("--add-to needs --validpref or --testpref")

    def adopt(option: str, given, existing, same=lambda a, b: a == b):
        if given is not None and not same(given, existing):
            raise SystemExit(f"--add-to {data_bin}: {option} {given} differs from the data-bin's {existing}")
        return existing

    same_path = lambda a, b: os.path.abspath(a) == os.path.abspath(b)  # noqa: E731
    args.source_lang = adopt("-s", args.source_lang, manifest.source_lang)
    args.target_lang = adopt("-t", args.target_lang, manifest.target_lang)
    args.destdir = adopt("--destdir", args.destdir, data_bin, same_path)
    if manifest.word_level:  # the data-bin's dictionaries are its vocabulary (unknown words become <unk>)
        if args.spm_model is not None or args.spm_vocab_size is not None:
            raise SystemExit(f"--add-to {data_bin}: the data-bin has a word-level vocabulary, no sentencepiece model")
        args.word_vocabulary = True
        args.word_min_count = adopt("--word-min-count", args.word_min_count, manifest.segmentation["min_count"])
        if args.joined_dictionary and not manifest.segmentation.get("joined"):
            raise SystemExit(f"--add-to {data_bin}: --joined-dictionary, but the data-bin has one dictionary per side")
    elif args.word_vocabulary or args.word_min_count is not None:
        raise SystemExit(f"--add-to {data_bin}: --word-vocabulary/--word-min-count, but the data-bin's tokens are "
                         f"{manifest.segmentation.get('kind', SENTENCEPIECE)} pieces")
    else:
        args.spm_model = adopt("--spm-model", args.spm_model, os.path.join(data_bin, manifest.spm_model), same_path)
    args.source_parser = adopt("--source-parser", args.source_parser, manifest.sides[args.source_lang].parser)
    args.target_parser = adopt("--target-parser", args.target_parser, manifest.sides[args.target_lang].parser)
    for lang, side in manifest.sides.items():
        if side.channels and list(side.channels) not in (list(TREE_CHANNELS), list(TREE_CHANNELS + LDD_WRITES),
                                                         list(TRANSITION_CHANNELS)):
            raise SystemExit(f"--add-to {data_bin}: side {lang} carries channels {', '.join(side.channels)}; "
                             f"this preprocessor writes only {', '.join(TREE_CHANNELS + LDD_WRITES)} or "
                             f"{', '.join(TRANSITION_CHANNELS)}")
    if args.target_transitions and not manifest.target_transitions:
        raise SystemExit(f"--add-to {data_bin}: --target-transitions, but the data-bin's target tokens are plain "
                         f"pieces; its models would never see transitions")
    args.target_transitions = bool(manifest.target_transitions)
    args.target_root_label = manifest.target_root_label  # new splits read their roots as the data-bin does
    source_settings = manifest.sides[args.source_lang].settings.get("ldd")
    if (args.source_ldd or ldd_options_given(args)) and source_settings is None:
        raise SystemExit(f"--add-to {data_bin}: the data-bin has no LDD channels; --source-ldd would make splits its "
                         f"models never saw")
    if source_settings is not None:  # new splits get the distributions exactly as the data-bin's
        args.source_ldd = True
        for key in LDD_SETTINGS:
            given = getattr(args, "ldd_" + key)
            given = None if given == "auto" else given
            setattr(args, "ldd_" + key, adopt(f"--ldd-{key.replace('_', '-')}", given, source_settings[key]))
    given = dict(item.split("=", 1) for item in args.label_dict)
    args.label_dict = [f"{lang}=" + adopt(f"--label-dict {lang}=", given.get(lang), label_dict_path(data_bin, lang),
                                          same_path)
                       for lang, side in manifest.sides.items() if side.channels]
    for name, _ in named_splits(args):
        existing = os.path.join(data_bin, f"{name}.{args.source_lang}-{args.target_lang}.{args.source_lang}.idx")
        if os.path.exists(existing):
            raise SystemExit(f"--add-to {data_bin}: split {name!r} exists already ({existing})")
    # a multi-task data-bin gets translation pairs with its tags; --multitask-parse needs a multi-task data-bin
    info = multitask.load_info(data_bin)
    if args.multitask_parse and info is None:
        raise SystemExit(f"--add-to {data_bin} --multitask-parse: the data-bin is not a multi-task data-bin (no "
                         f"{multitask.MULTITASK_NAME}); its splits would not match its models")
    args.multitask_parse = info is not None
    check_transition_arguments(args)
    check_multitask_arguments(args)
    check_ldd_arguments(args)
    check_word_arguments(args)


def check_transition_arguments(args) -> None:
    """--target-transitions linearizes the target tree: it needs one, and a multi-task data-bin has no place for it."""
    if not args.target_transitions:
        if getattr(args, "projectivize", False):
            raise SystemExit("--projectivize lifts target trees for --target-transitions; give that option too")
        return
    if not args.target_parser:
        raise SystemExit("--target-transitions needs --target-parser: the transitions are the target tree's")
    if args.multitask_parse:
        raise SystemExit("--target-transitions cannot be combined with --multitask-parse: the multi-task data-bin "
                         "has tagged plain targets and no target tree")


def check_word_arguments(args) -> None:
    """--word-vocabulary makes no sentencepiece model and takes no option of one; it is refused with what it does
    not support (shards, which would each count their own words; the multi-task data-bin)."""
    if not args.word_vocabulary:
        if args.word_min_count is not None:
            raise SystemExit("--word-min-count describes --word-vocabulary, which is not given")
        if args.spm_vocab_size is None:
            args.spm_vocab_size = DEFAULT_SPM_VOCAB_SIZE
        return
    conflicts = [option for option, given in (
        ("--spm-model", args.spm_model is not None), ("--spm-vocab-size", args.spm_vocab_size is not None),
        ("--spm-only", args.spm_only), ("--num-shards", args.num_shards > 1),
        ("--multitask-parse", args.multitask_parse)) if given]
    if conflicts:
        raise SystemExit(f"--word-vocabulary cannot be combined with {', '.join(conflicts)}: a word-level data-bin has "
                         f"no sentencepiece model, is made in one run (its vocabulary counts the whole training "
                         f"split) and is not a multi-task data-bin")
    if args.word_min_count is None:
        args.word_min_count = DEFAULT_MIN_COUNT
    if args.word_min_count < 1:
        raise SystemExit(f"--word-min-count must be at least 1, got {args.word_min_count}")


LDD_WRITES = LDD_CHANNELS + (LABEL_GROUP_CHANNEL,)


LDD_SETTINGS = ("mass", "max_heads", "marginals", "label_scheme")  # recorded in syntax.json


def ldd_options_given(args) -> bool:
    return any(getattr(args, "ldd_" + key) is not None for key in LDD_SETTINGS)


def check_ldd_arguments(args) -> None:
    if not args.source_ldd:
        if ldd_options_given(args):
            raise SystemExit("--ldd-* options describe --source-ldd, which is not given")
        return
    if args.multitask_parse:
        raise SystemExit("--source-ldd writes side channels; --multitask-parse writes none")
    if not (args.source_parser or "").startswith("supar:"):
        raise SystemExit(f"--source-ldd needs --source-parser supar:PATH (the distributions are a SuPar biaffine "
                         f"parser's scores), not {args.source_parser}")
    if args.ldd_mass is not None and not 0 < args.ldd_mass <= 1:
        raise SystemExit(f"--ldd-mass must be in (0, 1], got {args.ldd_mass}")
    if args.ldd_max_heads is not None and args.ldd_max_heads < 1:
        raise SystemExit(f"--ldd-max-heads must be at least 1, got {args.ldd_max_heads}")


def distribution_settings(args) -> dict:
    """The LDD settings of the options (the form syntax.json records them in)."""
    return dict(mass=DEFAULT_MASS if args.ldd_mass is None else args.ldd_mass,
                max_heads=args.ldd_max_heads or DEFAULT_MAX_HEADS, marginals=args.ldd_marginals or "softmax",
                label_scheme=args.ldd_label_scheme or "auto")


def check_multitask_arguments(args) -> None:
    """--multitask-parse needs a source tree and writes no side channels."""
    if not args.multitask_parse:
        return
    if not args.source_parser:
        raise SystemExit("--multitask-parse needs --source-parser: the parse task's targets are the source trees")
    if args.target_parser:
        raise SystemExit("--multitask-parse writes no side channels (its tags would put them out of step with the "
                         "tokens): --target-parser would be unused; leave it out")


def multiword_counts(trees) -> Dict[str, int]:
    """Of trees read from CoNLL-U: the sentences with a multiword token, the multiword tokens (each read as one
    surface word, its tree changed: conllu_reader) and the syntactic words they held."""
    return {"sentences": sum(1 for tree in trees if tree.multiword_tokens),
            "tokens": sum(tree.multiword_tokens for tree in trees),
            "syntactic_words": sum(tree.merged_words for tree in trees)}


@dataclass
class SplitData:
    name: str
    line_numbers: List[int] = field(default_factory=list)
    texts: Dict[str, List[str]] = field(default_factory=dict)
    trees: Dict[str, list] = field(default_factory=dict)
    # --word-vocabulary: the words (tokenizer output) of the sides without trees
    words: Dict[str, list] = field(default_factory=dict)
    drops: List[tuple] = field(default_factory=list)  # (line, side, reason, text)
    non_projective: int = 0  # --target-transitions: pairs dropped for a non-projective target tree
    projectivized: int = 0  # --projectivize: non-projective target trees lifted instead
    lifted_words: int = 0  # --projectivize: words that got a new head
    attached_words: int = 0  # --target-transitions: words written without a space (an <attached> mark each)
    collapsed_spaces: int = 0  # --target-transitions: extra space pieces of runs of spaces left out
    # --target-transitions: pairs dropped because decoding cannot read their words (a word with a space inside)
    unreadable_words: int = 0

    def select(self, positions: List[int]) -> None:
        """Keep only these kept-sentence positions, in step across line numbers, texts and trees."""
        self.line_numbers = [self.line_numbers[p] for p in positions]
        self.texts = {lang: [texts[p] for p in positions] for lang, texts in self.texts.items()}
        self.trees = {lang: [trees[p] for p in positions] for lang, trees in self.trees.items()}
        self.words = {lang: [words[p] for p in positions] for lang, words in self.words.items()}


class Preprocessor:
    def __init__(self, args):
        self.args = args
        self.langs = [args.source_lang, args.target_lang]
        self.parser_specs = {args.source_lang: args.source_parser, args.target_lang: args.target_parser}
        self.parsers = {}
        if not args.spm_only:
            for lang, spec in self.parser_specs.items():
                if spec and spec != "conllu":
                    ldd = distribution_settings(args) if lang == args.source_lang and args.source_ldd else None
                    self.parsers[lang] = build_side_parser(spec, lang, ldd, workers=args.workers)
        if not 0 <= args.shard_id < args.num_shards:
            raise SystemExit(f"--shard-id must be in 0..{args.num_shards - 1}")
        # --word-vocabulary: the sides without a parser are split into words by spaCy's rule-based tokenizer
        self.tokenizers = {}
        if args.word_vocabulary:
            from fairseq_syntax.parsers.tokenizer import side_tokenizer

            self.tokenizers = {lang: side_tokenizer(lang) for lang, spec in self.parser_specs.items() if not spec}
        if args.num_shards > 1 and not args.spm_model:
            raise SystemExit("sharded preprocessing needs the same --spm-model for every shard: train it first "
                             "with --spm-only")
        given = dict(item.split("=", 1) for item in args.label_dict)
        self.given_label_dicts = {lang: LabelDictionary.load(path) for lang, path in given.items()}
        # label ids must mean the same in every shard: then only known labels are accepted
        self.closed_labels = set(given) | ({self.langs[0], self.langs[1]} if args.num_shards > 1 else set())

    def shard_range(self, count: int, split: str) -> range:
        """The training lines of this shard: a contiguous chunk, so shards concatenate to the whole."""
        if split != "train" or self.args.num_shards == 1:
            return range(count)
        n, i = self.args.num_shards, self.args.shard_id
        return range(i * count // n, (i + 1) * count // n)

    def read_split(self, split: str, prefix: str) -> SplitData:
        data = SplitData(split)
        raw = {}
        paths = {}
        for lang in self.langs:
            if self.parser_specs[lang] == "conllu":
                paths[lang] = find_input(prefix, lang, ".conllu")
                raw[lang] = list(read_conllu(paths[lang]))
            else:
                paths[lang] = find_input(prefix, lang)
                raw[lang] = read_lines(paths[lang])
        counts = {lang: len(raw[lang]) for lang in self.langs}
        if len(set(counts.values())) != 1:
            unit = {lang: "sentences" if self.parser_specs[lang] == "conllu" else "lines" for lang in self.langs}
            raise SystemExit("mismatched inputs: " + ", ".join(
                f"{paths[lang]} has {counts[lang]} {unit[lang]}" for lang in self.langs))
        # 1. normalise and check every line
        keep = []
        texts = {lang: [] for lang in self.langs}
        given_trees = {lang: [] for lang in self.langs if self.parser_specs[lang] == "conllu"}
        for index in self.shard_range(counts[self.langs[0]], split):
            reason, row = None, {}
            for lang in self.langs:
                item = raw[lang][index]
                if self.parser_specs[lang] == "conllu":
                    start, tree = item
                    if isinstance(tree, ParseError):
                        reason = reason or (lang, f"unusable tree: {tree}")
                        row[lang] = ""
                        continue
                    text, problem = normalize_line(tree.text)
                    if problem is None and text != tree.text:
                        problem = "the sentence starts or ends with whitespace"
                    row[lang] = tree
                else:
                    text, problem = normalize_line(item)
                    row[lang] = text
                if problem:
                    reason = reason or (lang, problem)
            if reason:
                data.drops.append((index + 1, reason[0], reason[1], raw_text(raw, reason[0], index)))
                continue
            keep.append(index)
            for lang in self.langs:
                if lang in given_trees:
                    given_trees[lang].append(row[lang])
                    texts[lang].append(row[lang].text)
                else:
                    texts[lang].append(row[lang])
        # 2. parse the kept sentences, batched
        trees = dict(given_trees)
        for lang, parser in self.parsers.items():
            parsed = tqdm(parser.parse([parser_view(t) for t in texts[lang]], batch_size=self.args.batch_size),
                          total=len(keep), desc=f"parse {split}.{lang}", unit="sent", mininterval=5, file=sys.stderr)
            trees[lang] = [realigned(tree, text) for tree, text in zip(parsed, texts[lang])]
        failed = set()
        for lang in trees:
            for position, tree in enumerate(trees[lang]):
                if isinstance(tree, ParseError) and position not in failed:
                    failed.add(position)
                    data.drops.append((keep[position] + 1, lang, f"parse failed: {tree}", texts[lang][position]))
                elif not isinstance(tree, ParseError) and len(tree.words) > MAX_WORDS and position not in failed:
                    failed.add(position)
                    data.drops.append((keep[position] + 1, lang, f"over {MAX_WORDS} words", texts[lang][position]))
        words = {lang: tokenizer.tokenize(texts[lang]) for lang, tokenizer in self.tokenizers.items()}
        for lang in self.langs if self.args.word_vocabulary else ():  # every word must be able to be a token
            for position, sentence in enumerate(trees[lang] if lang in trees else words[lang]):
                if position in failed:
                    continue
                problem = (f"tokenization failed: {sentence}" if isinstance(sentence, ParseError)
                           else sentence_problem(sentence))
                if problem is not None:
                    failed.add(position)
                    data.drops.append((keep[position] + 1, lang, problem, texts[lang][position]))
        data.line_numbers = [index + 1 for index in keep]
        data.texts, data.trees, data.words = texts, trees, words
        data.select([p for p in range(len(keep)) if p not in failed])
        return data

    def encode_split(self, data: SplitData, encoder):
        """Pieces (and subword->word maps) of every kept pair; drops pairs over --max-pieces. `encoder`: the
        WordAlignedEncoder, or the WordCodec of --word-vocabulary."""
        threads = max(1, self.args.workers)
        encoded = {}
        for lang in self.langs:
            if lang in data.trees:
                encoded[lang] = encoder.encode_many_words(data.trees[lang], num_threads=threads)
            elif lang in data.words:
                encoded[lang] = [(tokens, None) for tokens, _ in encoder.encode_many_words(data.words[lang])]
            else:
                encoded[lang] = [(pieces, None) for pieces in encoder.encode_texts(data.texts[lang], threads)]
        keep = []
        for position in range(len(data.line_numbers)):
            too_long = [lang for lang in self.langs if len(encoded[lang][position][0]) > self.args.max_pieces]
            if too_long:
                lang = too_long[0]
                data.drops.append((data.line_numbers[position], lang,
                                   f"{len(encoded[lang][position][0])} {self.unit}, over --max-pieces "
                                   f"{self.args.max_pieces}", data.texts[lang][position]))
            else:
                keep.append(position)
        data.select(keep)
        pieces = {lang: [encoded[lang][p][0] for p in keep] for lang in self.langs}
        word_ids = {lang: [encoded[lang][p][1] for p in keep] for lang in data.trees}
        return pieces, word_ids

    @property
    def unit(self) -> str:
        return "words" if self.args.word_vocabulary else "subword pieces"

    def run(self):
        args = self.args
        os.makedirs(args.destdir, exist_ok=True)
        t0 = time.time()
        splits = [] if args.add_to else [("train", args.trainpref)]
        if args.shard_id == 0 and not args.spm_only:
            splits += named_splits(args)
        datas = [self.read_split(name, prefix) for name, prefix in splits]
        stages = {"read_and_parse": time.time() - t0}
        mark = time.time()

        spm_path = os.path.join(args.destdir, "spm.model")
        if args.word_vocabulary:
            logger.info("--word-vocabulary: words are the tokens, no sentencepiece model")
        elif args.spm_model:
            if os.path.abspath(args.spm_model) != os.path.abspath(spm_path):
                shutil.copyfile(args.spm_model, spm_path)
        else:
            train = datas[0]
            try:
                train_sentencepiece((t for lang in self.langs for t in train.texts[lang]), args.spm_vocab_size,
                                    os.path.join(args.destdir, "spm"), seed=args.seed,
                                    num_threads=max(1, args.workers))
            except VocabularyTooSmallError as error:
                raise SystemExit(f"fairseq-syntax-preprocess: {error}") from None
        stages["sentencepiece_training"] = time.time() - mark
        mark = time.time()
        if args.spm_only:
            logger.info("wrote %s", spm_path)
            return {"spm_model": spm_path}
        label_dicts = self.build_label_dicts(datas)
        encoder = WordCodec() if args.word_vocabulary else WordAlignedEncoder(spm_path)
        encoded = [self.encode_split(data, encoder) for data in datas]
        arcs, root_label = [], ROOT_LABEL
        if args.target_transitions:  # the target tokens become the transition sequences of the target trees
            root_label = self.target_root_label(datas)
            arcs = transition_vocabulary(label_dicts[self.langs[1]].labels[1:], root_label)
            encoded = [self.transition_split(data, pieces, word_ids)
                       for data, (pieces, word_ids) in zip(datas, encoded)]
        info = None
        if args.multitask_parse:
            try:
                info = (multitask.load_info(args.destdir) if args.add_to
                        else multitask.new_info(self.langs[0], self.langs[1], label_dicts[self.langs[0]].labels[1:]))
            except multitask.LinearizationError as error:
                raise SystemExit(f"--multitask-parse: {error}") from None
        if args.word_vocabulary:  # counted on the training split (datas[0]); --add-to reads the data-bin's
            dictionaries = self.build_word_dictionaries(None if args.add_to else encoded[0][0], arcs)
        else:
            dictionary = self.build_dictionary(encoder, info["dictionary_symbols"] if info else (), arcs)
            dictionaries = {lang: dictionary for lang in self.langs}
        stages["labels_and_subwords"] = time.time() - mark
        mark = time.time()
        src, tgt = self.langs
        unknown = {}  # split -> lang -> (tokens that are <unk>, tokens)
        for data, (pieces, word_ids) in zip(datas, encoded):
            if info is not None:
                self.write_multitask_split(data, pieces, word_ids, dictionary, info)
                continue
            for lang in self.langs:
                unknown.setdefault(data.name, {})[lang] = self.binarize_tokens(data.name, lang, pieces[lang],
                                                                                dictionaries[lang])
                if lang in data.trees:
                    ldd = lang == src and args.source_ldd
                    channels = self.side_channels(lang)
                    scheme = self.parsers[src].label_scheme if ldd else None
                    writer = SyntaxChannelWriter(args.destdir, data.name, src, tgt, lang, channels)
                    if lang == tgt and args.target_transitions:
                        for syntax in transition_syntaxes(pieces[lang], word_ids[lang], label_dicts[lang],
                                                          word_rule(args.word_vocabulary)):
                            writer.add(syntax)
                    else:
                        for tree, ids in zip(data.trees[lang], word_ids[lang]):
                            writer.add(tree_syntax(tree, ids, label_dicts[lang], channels, scheme))
                    writer.finalize()
                with open(os.path.join(args.destdir, f"{data.name}.{lang}.txt"), "w", encoding="utf-8") as f:
                    f.writelines(text + "\n" for text in data.texts[lang])
            self.write_reports(data)
        stages["binarize_and_write"] = time.time() - mark
        segmentation = ({"kind": WORDS, "min_count": args.word_min_count, "joined": bool(args.joined_dictionary)}
                        if args.word_vocabulary else {"kind": SENTENCEPIECE})
        manifest = SyntaxManifest(
            source_lang=src, target_lang=tgt, spm_model=None if args.word_vocabulary else "spm.model",
            segmentation=segmentation, target_transitions=arcs, target_root_label=root_label,
            sides={lang: SideManifest.for_channels(self.parser_specs[lang],
                                                   self.side_channels(lang) if lang in label_dicts and info is None
                                                   else (),
                                                   len(label_dicts[lang]) if lang in label_dicts and info is None
                                                   else 0, settings=self.side_settings(lang))
                   for lang in self.langs})
        if not args.add_to:  # an extended data-bin keeps its manifest and label dictionaries (used as given)
            manifest.save(args.destdir)
            for lang, labels in label_dicts.items():
                labels.save(label_dict_path(args.destdir, lang))
        if info is not None:  # new splits of a multi-task data-bin add their pair counts
            multitask.save_info(args.destdir, info)
        summary = {
            "seconds": round(time.time() - t0, 2), "startup_seconds": round(t0 - IMPORT_START, 2),
            "stage_seconds": {stage: round(seconds, 2) for stage, seconds in stages.items()},
            "splits": {d.name: {"kept": len(d.line_numbers), "dropped": len(d.drops)} for d in datas},
            "joined_roots": {lang: getattr(p, "joined_roots", 0) for lang, p in self.parsers.items()},
            **({"ldd": self.parsers[src].distribution_stats.summary()} if args.source_ldd else {}),
            "shard": f"{args.shard_id + 1}/{args.num_shards}",
        }
        given = [lang for lang in self.langs if self.parser_specs[lang] == "conllu"]
        if given:  # what reading trees over surface words changed (conllu_reader: multiword tokens collapsed)
            summary["multiword_tokens"] = {d.name: {lang: multiword_counts(d.trees[lang]) for lang in given}
                                           for d in datas}
            for d in datas:
                for lang in given:
                    counts = summary["multiword_tokens"][d.name][lang]
                    if counts["tokens"]:
                        logger.info("%s.%s: %d multiword tokens (%d syntactic words) read as one word each, in %d "
                                    "of %d sentences", d.name, lang, counts["tokens"], counts["syntactic_words"],
                                    counts["sentences"], len(d.trees[lang]))
        if args.target_transitions:
            summary["target_transitions"] = {
                "arc_tokens": sum(map(is_arc, arcs)), "non_projective": {d.name: d.non_projective for d in datas},
                "projectivize": bool(args.projectivize),
                "projectivized": {d.name: d.projectivized for d in datas},
                "lifted_words": {d.name: d.lifted_words for d in datas},
                "attached_words": {d.name: d.attached_words for d in datas},
                "collapsed_spaces": {d.name: d.collapsed_spaces for d in datas},
                "unreadable_words": {d.name: d.unreadable_words for d in datas}}
        if args.word_vocabulary:
            summary["vocabulary"] = {
                **segmentation, "sizes": {lang: len(dictionaries[lang]) for lang in self.langs},  # with specials
                "words": {lang: sum(1 for n in dictionaries[lang].count[dictionaries[lang].nspecial:] if n > 0)
                          for lang in self.langs},
                "unk_rate": {split: {lang: round(n / total, 6) if total else 0.0 for lang, (n, total) in sides.items()}
                             for split, sides in unknown.items()},
                "unk_tokens": {split: {lang: n for lang, (n, _) in sides.items()} for split, sides in unknown.items()}}
        report = f"preprocess.{'+'.join(d.name for d in datas)}.json" if args.add_to else "preprocess.json"
        with open(os.path.join(args.destdir, report), "w") as f:
            json.dump(summary, f, indent=2)
        logger.info("done: %s", json.dumps(summary))
        return summary

    def side_channels(self, lang: str):
        if lang == self.args.target_lang and self.args.target_transitions:
            return TRANSITION_CHANNELS
        return TREE_CHANNELS + (LDD_WRITES if lang == self.args.source_lang and self.args.source_ldd else ())

    def side_settings(self, lang: str) -> dict:
        if not (lang == self.args.source_lang and self.args.source_ldd):
            return {}
        parser = self.parsers[lang]
        options = parser.distributions
        return {"ldd": {"mass": options.mass, "max_heads": options.max_heads, "marginals": options.marginals,
                        "label_scheme": parser.label_scheme}}

    def build_dictionary(self, encoder: WordAlignedEncoder, extra_symbols=(), arc_symbols=()) -> Dictionary:
        """The fairseq dictionary is the sentencepiece vocabulary itself (in its order), for both sides: it does
        not depend on which lines a run saw, so shards and separate runs agree, and embeddings can be shared.
        A multi-task data-bin appends its tags and linearization tokens (extra_symbols, in their order), a
        --target-transitions data-bin its arc tokens (arc_symbols, in the label dictionary's order)."""
        processor = encoder.processor
        dictionary = Dictionary()
        for piece_id in range(processor.get_piece_size()):
            if not (processor.is_control(piece_id) or processor.is_unknown(piece_id)):
                dictionary.add_symbol(processor.id_to_piece(piece_id))
        if extra_symbols:
            clashes = [symbol for symbol in dictionary.symbols[dictionary.nspecial:]
                       if symbol in extra_symbols or multitask.is_structure_token(symbol)]
            if clashes:
                raise SystemExit(f"--multitask-parse: sentencepiece pieces {clashes[:5]} look like the multi-task "
                                 f"tags or linearization tokens; use another --spm-model")
            for symbol in extra_symbols:
                dictionary.add_symbol(symbol)
        self.add_arc_symbols(dictionary, arc_symbols)
        dictionary.pad_to_multiple_(8)
        for lang in self.langs:
            path = os.path.join(self.args.destdir, f"dict.{lang}.txt")
            if not self.args.add_to:
                dictionary.save(path)
            elif Dictionary.load(path).symbols != dictionary.symbols:
                raise SystemExit(f"{path} is not the vocabulary of {self.args.spm_model}: the data-bin was changed")
        return dictionary

    @staticmethod
    def add_arc_symbols(dictionary: Dictionary, arc_symbols) -> None:
        """Append the arc tokens of --target-transitions (those not counted in already, for a word vocabulary)."""
        clashes = [symbol for symbol in dictionary.symbols[dictionary.nspecial:]
                   if is_arc(symbol) and symbol not in arc_symbols]
        if arc_symbols and clashes:
            raise SystemExit(f"--target-transitions: tokens {clashes[:5]} look like arc tokens of labels outside the "
                             f"label dictionary")
        for symbol in arc_symbols:
            if symbol not in dictionary.indices:
                dictionary.add_symbol(symbol)

    def build_word_dictionaries(self, train_tokens: Optional[Dict[str, List[List[str]]]],
                                arc_symbols=()) -> Dict[str, Dictionary]:
        """--word-vocabulary: per side (or, with --joined-dictionary, one for both sides, from the counts of both) the
        training tokens seen at least --word-min-count times, by count then token (fairseq's specials first, padded
        to a multiple of 8 as fairseq does); any other token is <unk>. `train_tokens` None (--add-to): the data-bin's
        own dictionaries."""
        if train_tokens is None:
            return {lang: Dictionary.load(os.path.join(self.args.destdir, f"dict.{lang}.txt")) for lang in self.langs}
        counts = {lang: count_tokens(train_tokens[lang]) for lang in self.langs}
        groups = [self.langs] if self.args.joined_dictionary else [[lang] for lang in self.langs]
        dictionaries = {}
        for group in groups:
            dictionary = Dictionary()
            for token, count in vocabulary(sum((counts[lang] for lang in group), Counter()), self.args.word_min_count):
                dictionary.add_symbol(token, n=count)
            if self.langs[1] in group:  # every arc token, however rare: an <unk> arc would break the sequence
                self.add_arc_symbols(dictionary, arc_symbols)
            dictionary.pad_to_multiple_(8)
            for lang in group:
                dictionaries[lang] = dictionary
                dictionary.save(os.path.join(self.args.destdir, f"dict.{lang}.txt"))
        return dictionaries

    def build_label_dicts(self, datas) -> Dict[str, LabelDictionary]:
        """Given dictionaries, else the parser's label inventory plus (unless labels are closed) the labels seen.
        With closed labels, a line with an unknown label is dropped with that reason."""
        label_dicts = {}
        for lang in sorted({lang for data in datas for lang in data.trees}):
            if lang in self.given_label_dicts:
                label_dicts[lang] = self.given_label_dicts[lang]
                continue
            parser = self.parsers.get(lang)
            inventory = parser.label_inventory() if parser is not None else None
            if inventory is None and lang in self.closed_labels:
                raise SystemExit(f"{lang}: the {self.parser_specs[lang]} side has no fixed label set; sharded runs "
                                 f"need --label-dict {lang}=PATH (e.g. dict.{lang}.labels.txt of a full run)")
            label_dicts[lang] = LabelDictionary(inventory or [])
            if lang not in self.closed_labels:
                for data in datas:
                    for tree in data.trees[lang]:
                        for label in tree.labels:
                            label_dicts[lang].add(label)
        for data in datas:
            unknown = {}
            for lang, labels in label_dicts.items():
                for position, tree in enumerate(data.trees.get(lang, [])):
                    missing = [label for label in tree.labels if label not in labels.index]
                    if missing and position not in unknown:
                        unknown[position] = (lang, f"label {missing[0]!r} is not in the label dictionary")
            for position, (lang, reason) in unknown.items():
                data.drops.append((data.line_numbers[position], lang, reason, data.texts[lang][position]))
            data.select([p for p in range(len(data.line_numbers)) if p not in unknown])
        return label_dicts

    def target_root_label(self, datas) -> str:
        """The label the target parser gives the root word (UD "root", spaCy's English "ROOT"): the transitions
        delete the root edge, so decoding labels the last word left with it. The most frequent root label of the
        target trees (--add-to: the data-bin's)."""
        given = getattr(self.args, "target_root_label", None)
        if given:
            return given
        tgt = self.langs[1]
        counts = Counter(tree.labels[list(tree.heads).index(0)] for data in datas for tree in data.trees[tgt]
                         if 0 in tree.heads)
        return counts.most_common(1)[0][0] if counts else ROOT_LABEL

    def transition_split(self, data: SplitData, pieces, word_ids):
        """--target-transitions: the target's pieces become the oracle's transition sequence (and its word ids
        NO_WORD on arcs); a pair whose target tree is not projective is dropped with that reason (or its tree lifted,
        --projectivize), and one whose words decoding could not read (a word with a space inside) too."""
        tgt = self.langs[1]
        rule = word_rule(self.args.word_vocabulary)
        tokens, ids, keep = [], [], []
        for position, (tree, sentence, words) in enumerate(zip(data.trees[tgt], pieces[tgt], word_ids[tgt])):
            heads = list(tree.heads)
            crossing = crossing_arcs(heads)
            if crossing is not None and self.args.projectivize:
                heads, lifted = projectivize(heads)
                data.projectivized += 1
                data.lifted_words += lifted
            elif crossing is not None:
                (h1, d1), (h2, d2) = crossing
                data.drops.append((data.line_numbers[position], tgt, f"non-projective target tree (arc {h1}->{d1} "
                                   f"crosses arc {h2}->{d2}; see --projectivize)", data.texts[tgt][position]))
                data.non_projective += 1
                continue
            try:
                sequence, sequence_ids = transition_sequence(heads, tree.labels, sentence, words, rule)
            except InvalidTreeError as error:
                data.drops.append((data.line_numbers[position], tgt, f"target transitions: {error}",
                                   data.texts[tgt][position]))
                data.unreadable_words += 1
                continue
            keep.append(position)
            tokens.append(sequence)
            ids.append(sequence_ids)
            data.attached_words += sequence.count(ATTACHED_MARK)
            data.collapsed_spaces += len(sentence) - sum(1 for w in sequence_ids if w != NO_WORD) + \
                sequence.count(ATTACHED_MARK)
        data.select(keep)
        pieces = {lang: tokens if lang == tgt else [pieces[lang][p] for p in keep] for lang in pieces}
        word_ids = {lang: ids if lang == tgt else [word_ids[lang][p] for p in keep] for lang in word_ids}
        return pieces, word_ids

    def write_multitask_split(self, data: SplitData, pieces, word_ids, dictionary, info: dict) -> None:
        """Tagged translation pairs and, in train, the parse pairs after them (fairseq_syntax/data/multitask.py);
        the kept sentences and reports as in every data-bin; no side channels."""
        src, tgt = self.langs
        sources, targets, counts = multitask.make_pairs(data.name == "train", pieces[src], pieces[tgt],
                                                        word_ids[src], data.trees[src])
        self.binarize_tokens(data.name, src, sources, dictionary)
        self.binarize_tokens(data.name, tgt, targets, dictionary)
        for lang in self.langs:
            with open(os.path.join(self.args.destdir, f"{data.name}.{lang}.txt"), "w", encoding="utf-8") as f:
                f.writelines(text + "\n" for text in data.texts[lang])
        self.write_reports(data)
        info["pairs"][data.name] = counts

    def binarize_tokens(self, split, lang, sentences, dictionary) -> Tuple[int, int]:
        """Writes the tokens; returns (how many are <unk>, how many there are), EOS not counted."""
        src, tgt = self.langs
        prefix = os.path.join(self.args.destdir, f"{split}.{src}-{tgt}.{lang}")
        builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=len(dictionary))
        unknown = total = 0
        for pieces in tqdm(sentences, desc=f"binarize {split}.{lang}", unit="sent", mininterval=5, file=sys.stderr):
            ids = [dictionary.index(p) for p in pieces]
            unknown += ids.count(dictionary.unk())
            total += len(ids)
            builder.add_item(torch.IntTensor(ids + [dictionary.eos()]))
        builder.finalize(prefix + ".idx")
        return unknown, total

    def write_reports(self, data: SplitData):
        destdir = self.args.destdir
        with open(os.path.join(destdir, f"{data.name}.linemap"), "w") as f:
            f.writelines(f"{n}\n" for n in data.line_numbers)
        with open(os.path.join(destdir, f"{data.name}.drops.tsv"), "w", encoding="utf-8") as f:
            f.write("line\tside\treason\ttext\n")
            for line, side, reason, text in sorted(data.drops):
                f.write(f"{line}\t{side}\t{reason}\t{clean_for_report(text)}\n")
        if data.drops:
            logger.warning("%s: dropped %d of %d lines (reasons in %s.drops.tsv)", data.name, len(data.drops),
                           len(data.drops) + len(data.line_numbers), data.name)


def raw_text(raw, lang, index) -> str:
    item = raw[lang][index]
    if isinstance(item, tuple):
        return "" if isinstance(item[1], ParseError) else item[1].text
    return item


def clean_for_report(text: str) -> str:
    text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)
    return text[:300]


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
