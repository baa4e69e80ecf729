"""Checking the options of fairseq-syntax-preprocess: what is required, which combinations are refused, the defaults
that depend on other options, and, with --add-to, what the data-bin fixes (its languages, segmentation, parsers,
label dictionaries)."""
import json
import os
import re
from typing import List, Tuple

from fairseq_syntax.data import multitask
from fairseq_syntax.data.channels import MANIFEST_NAME, SENTENCEPIECE, SyntaxManifest, TREE_CHANNELS, label_dict_path
from fairseq_syntax.data.dependency_distributions import (
    DEFAULT_MASS, DEFAULT_MAX_HEADS, LABEL_GROUP_CHANNEL, LDD_CHANNELS,
)
from fairseq_syntax.data.transitions.channels import TRANSITION_CHANNELS
from fairseq_syntax.data.word_codec import DEFAULT_MIN_COUNT

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
    # non-projective target trees of new splits are lifted or dropped as the data-bin's were (its preprocess.json
    # says which): a challenge split added to a --projectivize data-bin lost most of its pairs before
    report = os.path.join(data_bin, "preprocess.json")
    made = {}
    if os.path.exists(report):
        with open(report) as f:
            made = json.load(f)
    lifted = bool(made.get("target_transitions", {}).get("projectivize", False))
    if args.projectivize and not lifted:
        raise SystemExit(f"--add-to {data_bin}: --projectivize, but the data-bin's non-projective target trees were "
                         f"dropped, not lifted")
    args.projectivize = lifted
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
