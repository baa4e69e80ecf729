"""A LanguagePairDataset that carries each side's syntax channels beside its tokens and adds the batch features
the model asked for (fairseq_syntax/data/features.py) to `net_input`."""
from typing import Optional, Set

import numpy as np
from fairseq.data import LanguagePairDataset

from .features import FEATURES, collate_features
from .syntax_channels import SyntaxChannels

SYNTAX_KEYS = {"source": "source_syntax", "target": "target_syntax"}


class SyntaxLanguagePairDataset(LanguagePairDataset):
    """`net_input_features` is the set of batch features (keys of features.FEATURES) the model consumes. It is
    shared with the task and filled in when the model is built, so a stock `transformer` trained on a syntax
    data-bin sees exactly the batches it would see on a plain one."""

    def __init__(self, *args, src_syntax: Optional[SyntaxChannels] = None,
                 tgt_syntax: Optional[SyntaxChannels] = None, net_input_features: Set[str] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.syntax = {"source": src_syntax, "target": tgt_syntax}
        self.net_input_features = net_input_features if net_input_features is not None else set()
        if src_syntax is not None and (self.remove_eos_from_source or self.append_bos):
            raise ValueError("syntax channels assume source = pieces + EOS; --remove-eos-from-source and "
                             "--append-bos are not supported with them")
        if tgt_syntax is not None and (self.append_eos_to_target or self.append_bos):
            raise ValueError("syntax channels assume target = pieces + EOS; appending EOS or BOS is not supported")

    @property
    def src_syntax(self):
        return self.syntax["source"]

    def _sides_needed(self):
        return {FEATURES[name].side for name in self.net_input_features}

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        batches = super().batch_by_size(indices, max_tokens, max_sentences, required_batch_size_multiple)
        # fairseq-fixed 0.12.3.1's compiled batcher drops the final partial batch when
        # required_batch_size_multiple > 1 (50 sentences, batch 64, multiple 8 -> one batch of 48): in
        # fairseq-generate that silently loses test sentences. Batch whatever was left out.
        covered = sum(len(batch) for batch in batches)
        if covered < len(indices):
            seen = np.concatenate(batches) if batches else np.zeros(0, dtype=np.int64)
            missing = np.asarray(indices)[~np.isin(indices, seen)]
            batches = list(batches) + list(super().batch_by_size(missing, max_tokens, max_sentences, 1))
        return batches

    def __getitem__(self, index):
        item = super().__getitem__(index)
        for side in self._sides_needed():
            if self.syntax[side] is not None:
                item[SYNTAX_KEYS[side]] = self.syntax[side][index]
        return item

    def collater(self, samples, pad_to_length=None):
        batch = super().collater(samples, pad_to_length=pad_to_length)
        features = self.net_input_features
        if not features or len(samples) == 0 or "net_input" not in batch:
            return batch
        by_id = {sample["id"]: sample for sample in samples}
        ordered = [by_id[int(i)] for i in batch["id"]]  # collate sorted the batch by source length
        syntaxes, lengths = {}, {}
        for side in self._sides_needed():
            if side == "target" and batch.get("target") is None:
                continue  # generation without references: target-side features are for training only
            key, tokens = SYNTAX_KEYS[side], ("source" if side == "source" else "target")
            if self.syntax[side] is None:
                wanted = sorted(name for name in features if FEATURES[name].side == side)
                raise ValueError(f"the model needs {wanted} but this data-bin has no {side} syntax channels")
            for sample in ordered:
                if len(sample[tokens]) != len(sample[key].word_ids) + 1:
                    raise ValueError(f"sentence {sample['id']}: {len(sample[tokens])} {side} tokens but "
                                     f"{len(sample[key].word_ids)} pieces in the subword map")
            syntaxes[side] = [sample[key] for sample in ordered]
            lengths[side] = [len(sample[tokens]) for sample in ordered]
        widths = {"source": batch["net_input"]["src_tokens"].size(1)}
        if batch.get("target") is not None:
            widths["target"] = widths["prev_output"] = batch["target"].size(1)
        batch["net_input"].update(collate_features(
            [name for name in features if FEATURES[name].side in syntaxes], syntaxes, lengths, widths,
            {"source": self.left_pad_source, "target": self.left_pad_target}))
        return batch
