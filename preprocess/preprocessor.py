"""The preprocessing run: Preprocessor reads and parses every split, trains or adopts the segmentation, writes the
data-bin (tokens, side channels, dictionaries, syntax.json) and returns the summary it writes to preprocess.json."""
import json
import logging
import os
import shutil
import time

from fairseq_syntax.data import multitask
from fairseq_syntax.data.channels import (
    SENTENCEPIECE, WORDS, LabelDictionary, SideManifest, SyntaxManifest, label_dict_path,
)
from fairseq_syntax.data.sentencepiece_codec import VocabularyTooSmallError, WordAlignedEncoder, train_sentencepiece
from fairseq_syntax.data.syntax_channels import SyntaxChannelWriter
from fairseq_syntax.data.transitions.channels import transition_syntaxes, word_rule
from fairseq_syntax.data.transitions.tokens import ROOT_LABEL, is_arc, transition_vocabulary
from fairseq_syntax.data.word_codec import WordCodec
from fairseq_syntax.parsers.sentence_channels import build_side_parser, tree_syntax
from .binarizing import Binarizing
from .label_dictionaries import LabelDictionaries
from .option_checks import distribution_settings, named_splits
from .reading import SplitReading
from .reports import multiword_counts, write_reports
from .segmentation import Segmentation
from .startup_clock import IMPORT_START
from .target_transitions import TargetTransitions

logger = logging.getLogger("fairseq_syntax.preprocess")


class Preprocessor(SplitReading, Segmentation, LabelDictionaries, TargetTransitions, Binarizing):
    """One run of fairseq-syntax-preprocess on checked options (cli.py, option_checks.py); its steps are methods of
    the classes it derives from, one module each."""

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
            write_reports(args.destdir, data)
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
