"""Binarizing: the token datasets of a data-bin ({split}.{src}-{tgt}.{lang}.bin/.idx), the side channels each side
carries, and the splits of a multi-task data-bin."""
import os
import sys
from typing import Tuple

import torch
from tqdm import tqdm

from fairseq.data import indexed_dataset
from fairseq_syntax.data import multitask
from fairseq_syntax.data.channels import TREE_CHANNELS
from fairseq_syntax.data.transitions.channels import TRANSITION_CHANNELS
from .option_checks import LDD_WRITES
from .reading import SplitData
from .reports import write_reports


class Binarizing:
    """Preprocessor's binarizing (preprocessor.py); uses its args, langs and parsers."""

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
        write_reports(self.args.destdir, data)
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
