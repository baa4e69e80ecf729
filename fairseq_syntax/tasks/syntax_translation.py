"""The `syntax_translation` task: fairseq's translation task on a syntax data-bin (see fairseq_syntax/data/)."""
import hashlib
import json
import logging
import os
from dataclasses import dataclass

from fairseq import utils
from fairseq.data import data_utils, indexed_dataset
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..data.channels import LabelDictionary, SyntaxManifest, label_dict_path
from ..data.features import FEATURES
from ..data.syntax_channels import SyntaxChannels
from ..data.syntax_pair_dataset import SyntaxLanguagePairDataset

logger = logging.getLogger(__name__)


@dataclass
class SyntaxTranslationConfig(TranslationConfig):
    pass


@register_task("syntax_translation", dataclass=SyntaxTranslationConfig)
class SyntaxTranslationTask(TranslationTask):
    """Loads the side channels of both sides next to the tokens, checks they agree, and lets the model built by
    this task ask for the batch features it consumes (models without syntax, e.g. stock `transformer`, get plain
    batches). A model whose mechanisms have auxiliary losses must be trained with the syntax criterion."""

    cfg: SyntaxTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        # filled in build_model and shared with every dataset this task loads
        self.net_input_features = set()
        data_dir = utils.split_paths(cfg.data)[0]
        self.manifest = SyntaxManifest.load(data_dir)
        self.label_dicts = {}
        if self.manifest is not None:
            for lang, side in self.manifest.sides.items():
                if side.channels:
                    self.label_dicts[lang] = LabelDictionary.load(label_dict_path(data_dir, lang))

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
        # features the model can do without (a LISA model translates unparsed text): asked for where the data has them
        for name in getattr(model, "optional_syntax_features", ()):
            side_manifest = self.manifest.sides.get(langs[FEATURES[name].side]) if self.manifest is not None else None
            if side_manifest is not None and set(FEATURES[name].channels) <= set(side_manifest.channels):
                self.net_input_features.add(name)
        self.auxiliary_losses = tuple(getattr(model, "auxiliary_loss_weights", {}))
        return model

    def build_criterion(self, cfg):
        criterion = super().build_criterion(cfg)
        if getattr(self, "auxiliary_losses", ()) and not getattr(criterion, "adds_auxiliary_losses", False):
            raise ValueError(f"the model's syntax mechanisms have auxiliary losses {list(self.auxiliary_losses)}: "
                             f"train with --criterion syntax_label_smoothed_cross_entropy, which adds them")
        return criterion
