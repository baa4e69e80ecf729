"""The `syntax_translation` task: fairseq's translation task on a syntax data-bin (see fairseq_syntax/data/).
fairseq's task is one class whose hooks (datasets, model, generator, inference) stay together here; raw-text input
(raw_text.py), the constrained generator (constrained_generation.py) and the trees of hypotheses (trees_out.py:
--trees-out, the hub's trees) are modules of their own."""
import hashlib
import json
import logging
import os
import sys
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch

from fairseq import utils
from fairseq.data import data_utils, indexed_dataset
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data.channels import LabelDictionary, SentenceSyntax, SyntaxManifest, label_dict_path
from ..data.features import FEATURES, collate_features
from ..data.segmentation import open_segmenter
from ..data.sentencepiece_codec import WordAlignedEncoder
from ..data.syntax_channels import SyntaxChannels
from ..data.syntax_pair_dataset import SyntaxLanguagePairDataset
from ..data.transitions.tokens import is_transition_token
from ..data.vocabulary import SyntaxDictionary
from ..models.decoders import contract_of
from ..modules.decoder_context import TargetTransitions
from .constrained_generation import ConstrainedSequenceGenerator
from .raw_text import EncodedSource, InferenceDataset, RawTextEncoder
from .trees_out import GeneratedTrees

logger = logging.getLogger(__name__)


@dataclass
class SyntaxTranslationConfig(TranslationConfig):
    source_parser: Optional[str] = field(
        default=None, metadata={"help": "translating raw text (fairseq-interactive, the hub interface): parse the "
                                        "source with this instead of the parser syntax.json records: spacy:MODEL, "
                                        "supar:PATH, or conllu:FILE (the k-th sentence of FILE is the parse of the "
                                        "k-th input line)"})
    trees_out: Optional[str] = field(
        default=None, metadata={"help": "a data-bin whose target has transitions (--target-transitions), or a "
                                        "decoder that generates its graph (dyn_stgcd: heads = argmax of each first "
                                        "piece's adjacency row, label dep): write the tree of every generated "
                                        "hypothesis (the --nbest best of each sentence) to this file as CoNLL-U, "
                                        "ordered by sentence id (# sent_id = the id of the H- lines of "
                                        "fairseq-generate or fairseq-interactive)"})


@register_task("syntax_translation", dataclass=SyntaxTranslationConfig)
class SyntaxTranslationTask(TranslationTask):
    """Loads the side channels of both sides next to the tokens, checks they agree, and lets the model built by
    this task ask for the batch features it consumes (models without syntax, e.g. stock `transformer`, get plain
    batches). A model whose mechanisms have auxiliary losses must be trained with the syntax criterion."""

    cfg: SyntaxTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        # filled in build_model and shared, by reference, with every dataset this task loads: fairseq-train loads the
        # valid split before it builds the model, so a dataset cannot be given the final set when it is made
        self.net_input_features = set()
        # the features a model cannot do without (optional ones, e.g. LISA's parents, are not parsed for at inference)
        self.required_features = set()
        self._raw_text_encoder = None
        # fairseq-interactive hands the task the lines (get_interactive_tokens_and_lengths), then only their tokens
        # (build_dataset_for_inference): the parses of the lines in between are kept here, keyed by their tokens
        self._inference_syntax: Dict[Tuple[int, ...], SentenceSyntax] = {}
        self._unusable_inputs: List[int] = []
        self._input_lines_read = 0
        self._buffer_first_line = 0
        data_dir = utils.split_paths(cfg.data)[0]
        self.manifest = SyntaxManifest.load(data_dir)
        self.label_dicts = {}
        if self.manifest is not None:
            for lang, side in self.manifest.sides.items():
                if side.channels:
                    self.label_dicts[lang] = LabelDictionary.load(label_dict_path(data_dir, lang))
        # the dictionaries the model is built from carry each side's labels and word rule (data/vocabulary.py)
        word_level = self.manifest is not None and self.manifest.word_level
        self.src_dict = SyntaxDictionary.extend(src_dict, self.label_dicts.get(cfg.source_lang), word_level)
        self.tgt_dict = tgt_dict = SyntaxDictionary.extend(tgt_dict, self.label_dicts.get(cfg.target_lang),
                                                           word_level)
        # --target-transitions data-bin: the transition system over the target dictionary, for the validity masks
        # of generation (transition_classes: the class of every target symbol)
        self.target_transitions: Optional[TargetTransitions] = None
        self.transition_classes = None
        if (self.manifest is not None and self.manifest.target_transitions and
                cfg.target_lang == self.manifest.target_lang):
            self.target_transitions = TargetTransitions(tgt_dict.symbols, self.manifest.word_level)
            self.transition_classes = self.target_transitions.token_class
        # the trees of hypotheses (--trees-out, the hub's): without target transitions, only a decoder that
        # generates its own graph has trees to write (checked with the models, in build_generator)
        self.generated_trees = GeneratedTrees(cfg.trees_out, cfg.data, self.manifest, tgt_dict,
                                              self.transition_classes)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        prefix = None
        for a, b in ((src, tgt), (tgt, src)):
            candidate = os.path.join(data_path, f"{split}.{a}-{b}.")
            if indexed_dataset.dataset_exists(candidate + src, impl=self.cfg.dataset_impl):
                prefix, pair = candidate, (a, b)
                break
        if prefix is None:
            raise FileNotFoundError(f"Dataset not found: {split} ({data_path})")
        src_tokens = data_utils.load_indexed_dataset(prefix + src, self.src_dict, self.cfg.dataset_impl)
        tgt_tokens = data_utils.load_indexed_dataset(prefix + tgt, self.tgt_dict, self.cfg.dataset_impl)
        if tgt_tokens is not None and len(tgt_tokens) != len(src_tokens):
            raise ValueError(f"{prefix}{src}/{tgt}: {len(src_tokens)} source but {len(tgt_tokens)} target sentences")

        syntax = {}
        manifest = SyntaxManifest.load(data_path)
        for side, lang in (("source", src), ("target", tgt)):
            if manifest is None or lang not in manifest.sides or not manifest.sides[lang].channels:
                continue
            if side == "source" and self.cfg.truncate_source:
                raise ValueError("--truncate-source would cut tokens away from their syntax channels")
            tokens = src_tokens if side == "source" else tgt_tokens
            if tokens is None:
                continue
            syntax[side] = SyntaxChannels(data_path, split, pair[0], pair[1], lang, tokens.sizes,
                                          num_labels=len(self.label_dicts[lang]), channels=manifest.sides[lang])
        logger.info(f"{data_path} {split} {src}-{tgt} {len(src_tokens)} examples" + "".join(
            f", {side} syntax {','.join(channels.datasets)}" for side, channels in syntax.items()))
        self.datasets[split] = SyntaxLanguagePairDataset(
            src_tokens, src_tokens.sizes, self.src_dict,
            tgt_tokens, tgt_tokens.sizes if tgt_tokens is not None else None, self.tgt_dict,
            left_pad_source=self.cfg.left_pad_source,
            left_pad_target=self.cfg.left_pad_target,
            num_buckets=self.cfg.num_batch_buckets,
            shuffle=(split != "test"),
            pad_to_multiple=self.cfg.required_seq_len_multiple,
            src_syntax=syntax.get("source"),
            tgt_syntax=syntax.get("target"),
            net_input_features=self.net_input_features,
        )

    def data_fingerprint(self) -> dict:
        """sha256 of the dictionaries (tokens and labels) the model's embeddings and outputs are indexed by."""
        data_dir = utils.split_paths(self.cfg.data)[0]
        names = {f"dict.{self.cfg.source_lang}.txt", f"dict.{self.cfg.target_lang}.txt"}
        names |= {os.path.basename(label_dict_path(data_dir, lang)) for lang in self.label_dicts}
        fingerprint = {}
        for name in sorted(names):
            with open(os.path.join(data_dir, name), "rb") as f:
                fingerprint[name] = hashlib.sha256(f.read()).hexdigest()[:16]
        return fingerprint

    def check_data_fingerprint(self, cfg):
        """A checkpoint remembers the dictionaries it was trained with; using it with others would silently mix up
        token or label ids (same sizes) or fail deep inside fairseq (other sizes)."""
        current = self.data_fingerprint()
        saved = getattr(cfg, "syntax_data_fingerprint", None)
        if saved:
            saved = json.loads(saved) if isinstance(saved, str) else dict(saved)
            # what this data-bin has must match; label dictionaries it lacks are fine (a LISA model translates
            # unparsed text), and a model that needs labels is refused for the missing channels anyway
            differing = sorted(name for name in current if name in saved and saved[name] != current[name])
            if differing:
                raise ValueError(f"the checkpoint was trained with other dictionaries than {self.cfg.data}: "
                                 f"{', '.join(differing)} differ (use the data-bin it was trained on)")
        else:
            try:
                cfg.syntax_data_fingerprint = json.dumps(current, sort_keys=True)
            except Exception:  # a structured config that takes no new keys: nothing to record
                pass

    def build_model(self, cfg, from_checkpoint=False):
        self.check_data_fingerprint(cfg)
        model = super().build_model(cfg, from_checkpoint)
        wanted = set(getattr(model, "syntax_features", ()))
        langs = {"source": self.cfg.source_lang, "target": self.cfg.target_lang}
        for side in sorted({FEATURES[name].side for name in wanted}):
            lang = langs[side]
            needed = sorted(name for name in wanted if FEATURES[name].side == side)
            side_manifest = self.manifest.sides.get(lang) if self.manifest is not None else None
            if side_manifest is None or not side_manifest.channels:
                why = ("no syntax.json: not a syntax data-bin" if self.manifest is None
                       else f"its {lang} side was not parsed")
                raise ValueError(f"this model needs {side} syntax ({needed}) but {self.cfg.data} has none ({why}); "
                                 f"run fairseq-syntax-preprocess with --{side}-parser")
            missing = sorted({channel for name in needed for channel in FEATURES[name].channels}
                             - set(side_manifest.channels))
            if missing:
                raise ValueError(f"this model needs the {lang} channels {missing} (for {needed}), which "
                                 f"{self.cfg.data} does not have")
        self.net_input_features.update(wanted)
        self.required_features.update(wanted)
        # features the model can do without (a LISA model translates unparsed text): asked for where the data has them
        for name in getattr(model, "optional_syntax_features", ()):
            side_manifest = self.manifest.sides.get(langs[FEATURES[name].side]) if self.manifest is not None else None
            if side_manifest is not None and set(FEATURES[name].channels) <= set(side_manifest.channels):
                self.net_input_features.add(name)
        self.auxiliary_losses = tuple(getattr(model, "auxiliary_loss_weights", {}))
        # a decoder that predicts only some target positions per update (BiTran's sampled prefixes)
        self.partial_targets = contract_of(getattr(model, "decoder", None)).predicts_some_positions
        if self.cfg.eval_bleu and self.cfg.eval_bleu_detok == "space" and self.cfg.eval_bleu_remove_bpe is None:
            # --eval-bleu scores decoded text, as fairseq-generate's D- lines and the evaluator do (fairseq's own
            # --eval-bleu-remove-bpe sentencepiece would leave byte pieces and tags undecoded)
            self.tokenizer = self.build_bpe(Namespace(bpe=None))
        return model

    def build_criterion(self, cfg):
        criterion = super().build_criterion(cfg)
        if getattr(self, "partial_targets", False) and not getattr(criterion, "adds_auxiliary_losses", False):
            raise ValueError("--bitran-prefixes K predicts K positions per sentence: train with --criterion "
                             "syntax_label_smoothed_cross_entropy, which normalises the loss by the positions "
                             "predicted")
        if getattr(self, "auxiliary_losses", ()) and not getattr(criterion, "adds_auxiliary_losses", False):
            raise ValueError(f"the model's syntax mechanisms have auxiliary losses {list(self.auxiliary_losses)}: "
                             f"train with --criterion syntax_label_smoothed_cross_entropy, which adds them")
        return criterion

    # ---- translating raw text: fairseq-interactive and the hub interface (fairseq_syntax/hub.py) ----------------

    @property
    def source_inference_features(self):
        return {name for name in self.required_features if FEATURES[name].side == "source"}

    def raw_text_encoder(self) -> RawTextEncoder:
        """Built on first use, after the model: only a model that reads source syntax loads a parser."""
        if self._raw_text_encoder is None:
            data_dir = utils.split_paths(self.cfg.data)[0]
            self._raw_text_encoder = RawTextEncoder(
                data_dir, self.manifest, self.src_dict, self.label_dicts.get(self.cfg.source_lang),
                parse=bool(self.source_inference_features), parser_spec=self.cfg.source_parser)
        return self._raw_text_encoder

    def encode_raw(self, lines: List[str]) -> List[EncodedSource]:
        """Normalise, parse (when the model needs it) and segment raw sentences, batched. Their channels are kept
        for the datasets and batches made from their tokens next (build_dataset_for_inference, inference_step)."""
        encoded = self.raw_text_encoder().encode(lines)
        self._inference_syntax = {tuple(e.tokens.tolist()): e.syntax for e in encoded
                                  if e.syntax is not None}
        return encoded

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq-interactive: a line that cannot be translated prints its error (with its line number) to stderr
        and is left out; the others go on."""
        encoded = self.encode_raw(lines)
        self._unusable_inputs = []
        for i, item in enumerate(encoded):
            if item.error is not None:
                print(f"error: input line {self._input_lines_read + i + 1}: {item.error}: {item.text[:200]!r}",
                      file=sys.stderr, flush=True)
                self._unusable_inputs.append(i)
                item.tokens = torch.LongTensor([self.src_dict.eos()])
        self._buffer_first_line = self._input_lines_read
        self._input_lines_read += len(lines)
        self.generated_trees.log_interactive_batches()
        return [item.tokens for item in encoded], [item.tokens.numel() for item in encoded]

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        """Sentences of raw text as a dataset whose batches carry the source features the model needs."""
        features = self.source_inference_features
        syntax = None
        if features:
            syntax = [self._syntax_of(tokens) for tokens in src_tokens]
        unusable, self._unusable_inputs = self._unusable_inputs, []  # left out of every batch
        return InferenceDataset(
            src_tokens, src_lengths, self.source_dictionary, tgt_dict=self.target_dictionary,
            constraints=constraints, left_pad_source=self.cfg.left_pad_source,
            left_pad_target=self.cfg.left_pad_target, src_syntax=syntax, net_input_features=set(features),
            unusable=unusable, batch_log=self.generated_trees.interactive_batches,
            first_line=self._buffer_first_line)

    def _syntax_of(self, tokens: torch.Tensor) -> Optional[SentenceSyntax]:
        syntax = self._inference_syntax.get(tuple(tokens.tolist()))
        if syntax is None and not (tokens.numel() == 1 and tokens[0] == self.src_dict.eos()):
            raise ValueError("the model needs the source parse of every sentence it translates: encode raw "
                             "sentences with task.encode_raw (fairseq-interactive and fairseq_syntax.hub do)")
        return syntax

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        # fairseq-interactive passes on src_tokens and src_lengths only: the features come back from the parses
        missing = self.source_inference_features - set(sample["net_input"])
        if missing:
            sample["net_input"].update(self._source_features(sample["net_input"]["src_tokens"], missing))
        hypos = super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                       constraints=constraints)
        if self.cfg.trees_out:
            self.generated_trees.add(models, sample, hypos)
        return hypos

    # ---- target-side transitions (--target-transitions data-bins) ------------------------------------------------

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None,
                        prefix_allowed_tokens_fn=None):
        """Generation restricts the next token by one path (constrained_generation.py): on a data-bin whose target
        has transitions, beam search (and sampling) gives invalid transitions no probability at every step; a model
        whose decoder mechanism builds a token constraint has it applied there too."""
        self.generated_trees.prepare(models, args)
        constrained_models = [m for m in models
                              if contract_of(getattr(m, "decoder", None)).token_constraint is not None]
        if (self.transition_classes is None and not constrained_models) or getattr(args, "score_reference", False):
            return super().build_generator(models, args, seq_gen_cls=seq_gen_cls,
                                           extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                           prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)
        what = ("a data-bin with target transitions" if self.transition_classes is not None
                else "a model whose decoder constrains the next token")
        if getattr(args, "constraints", None):
            raise ValueError(f"--constraints: fairseq's lexically constrained search forces tokens that the masks of "
                             f"{what} may forbid at that step; it is not supported there")
        if seq_gen_cls is not None or getattr(args, "print_alignment", False):
            raise ValueError(f"{what} is decoded by the constrained generator; --print-alignment (or another "
                             f"generator class) is not supported with it")
        kwargs = dict(extra_gen_cls_kwargs or {}, transitions=self.target_transitions)
        return super().build_generator(models, args, seq_gen_cls=ConstrainedSequenceGenerator,
                                       extra_gen_cls_kwargs=kwargs, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn)

    def hypothesis_conllu(self, token_ids: torch.Tensor, sent_id: Optional[str] = None) -> str:
        """The CoNLL-U of a generated transition sequence; raises ValueError on a data-bin without target
        transitions, transitions.TransitionError on an incomplete tree."""
        return self.generated_trees.conllu(token_ids, sent_id)

    def hypothesis_tree(self, token_ids: torch.Tensor, sent_id: Optional[str] = None):
        """(transitions.Tree: words, 1-based heads, labels; its CoNLL-U) of a generated transition sequence (the
        hub's trees=True); errors as hypothesis_conllu."""
        return self.generated_trees.tree(token_ids, sent_id)

    def _source_features(self, src_tokens: torch.Tensor, names) -> Dict[str, torch.Tensor]:
        rows = [row[row.ne(self.src_dict.pad())].cpu() for row in src_tokens]
        syntaxes = [self._syntax_of(row) for row in rows]
        features = collate_features(names, {"source": syntaxes}, {"source": [len(row) for row in rows]},
                                    {"source": src_tokens.size(1)}, {"source": self.cfg.left_pad_source})
        return {name: value.to(src_tokens.device) for name, value in features.items()}

    def build_bpe(self, args):
        """Without --bpe, output is decoded with the data-bin's segmenter, its sentencepiece model or its word-level
        codec (D- lines of fairseq-generate and fairseq-interactive are then text)."""
        if getattr(args, "bpe", None) is None and self.manifest is not None:
            return SentencePieceText(open_segmenter(utils.split_paths(self.cfg.data)[0], self.manifest),
                                     strip_transitions=bool(self.manifest.target_transitions))
        return super().build_bpe(args)


class SentencePieceText:
    """fairseq's bpe interface over the data-bin's segmenter (data/segmentation.py). With sentencepiece, tokens that
    are not pieces of it (the multi-task tags) are kept as they are; a word-level codec decodes every token. With
    `strip_transitions` (a --target-transitions data-bin), transition tokens (arcs, attached-word marks) are left
    out: the text is the pieces'."""

    def __init__(self, encoder: WordAlignedEncoder, strip_transitions: bool = False):
        self.encoder = encoder
        self.strip_transitions = strip_transitions
        processor = getattr(encoder, "processor", None)
        self.pieces = None if processor is None else {
            processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))}

    def encode(self, text: str) -> str:
        return " ".join(self.encoder.encode_text(text))

    def decode(self, text: str) -> str:
        tokens = text.split(" ")
        if self.strip_transitions:
            tokens = [token for token in tokens if not is_transition_token(token)]
        if self.pieces is None:
            return self.encoder.decode(tokens)
        out, run = [], []
        for token in tokens:
            if token in self.pieces:
                run.append(token)
                continue
            if run:
                out.append(self.encoder.decode(run))
                run = []
            if token:
                out.append(token)
        if run:
            out.append(self.encoder.decode(run))
        return " ".join(out)
