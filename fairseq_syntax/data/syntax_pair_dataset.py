"""A LanguagePairDataset that carries the source tree beside the tokens and adds subword features to batches."""
from typing import Optional, Set

import numpy as np
from fairseq.data import LanguagePairDataset

from .subword import collate_source_syntax
from .syntax_channels import SyntaxChannels


class SyntaxLanguagePairDataset(LanguagePairDataset):
    """`net_input_features` is the set of subword features (keys of subword.SOURCE_FEATURES) the model consumes.
    It is shared with the task and filled in when the model is built, so a stock `transformer` trained on a syntax
    data-bin sees exactly the batches it would see on a plain one."""

    def __init__(self, *args, src_syntax: Optional[SyntaxChannels] = None, net_input_features: Set[str] = None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.src_syntax = src_syntax
        self.net_input_features = net_input_features if net_input_features is not None else set()
        if src_syntax is not None and (self.remove_eos_from_source or self.append_bos):
            raise ValueError("syntax channels assume source = pieces + EOS; --remove-eos-from-source and "
                             "--append-bos are not supported with them")

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
        if self.src_syntax is not None and self.net_input_features:
            item["source_syntax"] = self.src_syntax[index]
        return item

    def collater(self, samples, pad_to_length=None):
        batch = super().collater(samples, pad_to_length=pad_to_length)
        features = self.net_input_features
        if not features or len(samples) == 0 or "net_input" not in batch:
            return batch
        if self.src_syntax is None:
            raise ValueError(f"the model needs {sorted(features)} but this data-bin has no source syntax channels")
        by_id = {sample["id"]: sample for sample in samples}
        ordered = [by_id[int(i)] for i in batch["id"]]  # collate sorted the batch by source length
        for sample in ordered:
            if len(sample["source"]) != len(sample["source_syntax"].word_ids) + 1:
                raise ValueError(f"sentence {sample['id']}: {len(sample['source'])} source tokens but "
                                 f"{len(sample['source_syntax'].word_ids)} pieces in the subword map")
        src_tokens = batch["net_input"]["src_tokens"]
        batch["net_input"].update(collate_source_syntax(
            [sample["source_syntax"] for sample in ordered],
            [len(sample["source"]) for sample in ordered],
            padded_length=src_tokens.size(1),
            left_pad=self.left_pad_source,
            features=sorted(features),
        ))
        return batch
