"""Raw sentences -> the source tokens (and, for a model that reads source syntax, the side channels) a data-bin
would hold for them: the same normalisation, parser, label dictionary, segmenter (sentencepiece model, or words
split as preprocessing split them) and multi-task tag as
fairseq-syntax-preprocess used (all read from the data-bin's syntax.json). Used by `fairseq-interactive` and the
hub interface through the task (syntax_translation.py), so any model that needs the source parse translates raw
text without new code."""
import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch
from fairseq.data import Dictionary

from ..data import multitask
from ..data.channels import MAX_WORDS, LabelDictionary, SentenceSyntax, SyntaxManifest
from ..data.segmentation import open_segmenter
from ..data.word_codec import sentence_problem
from ..data.syntax_pair_dataset import SyntaxLanguagePairDataset
from ..data.text_normalization import normalize_line, parser_view
from ..parsers.base import ParseError, realigned

logger = logging.getLogger(__name__)

CONLLU_PREFIX = "conllu:"


@dataclass
class EncodedSource:
    """One input sentence: its token ids (pieces + EOS, with the multi-task tags where the data-bin has them) and
    its source channels (None when the model reads no source syntax), or the reason it cannot be translated."""
    text: str
    tokens: Optional[torch.Tensor] = None
    syntax: Optional[SentenceSyntax] = None
    error: Optional[str] = None


class RawTextEncoder:
    """`parse`: whether the model reads source syntax (a parser is loaded only then). `parser_spec` overrides the
    parser syntax.json records: spacy:MODEL, supar:PATH, or conllu:FILE (the k-th sentence of FILE is the parse of
    the k-th input sentence, whose text must be the sentence's)."""

    def __init__(self, data_dir: str, manifest: SyntaxManifest, source_dict: Dictionary,
                 label_dict: Optional[LabelDictionary], parse: bool, parser_spec: Optional[str] = None,
                 workers: int = 1):
        if manifest is None:
            raise ValueError(f"{data_dir} has no syntax.json: translating raw text needs the sentencepiece model and "
                             f"parser of a fairseq-syntax data-bin")
        self.source_dict = source_dict
        self.label_dict = label_dict
        info = multitask.load_info(data_dir)
        self.tags = [multitask.TRANSLATE_TAG] * (info is not None)
        side = manifest.sides.get(manifest.source_lang)
        self.word_level = manifest.word_level
        # a word-level data-bin without the parse: the words of the tokenizer its source side was split with
        self.tokenizer = None
        if self.word_level and not parse:
            from ..parsers.tokenizer import side_tokenizer

            self.tokenizer = side_tokenizer(manifest.source_lang, side.parser if side is not None else None)
        self.encoder = open_segmenter(data_dir, manifest, self.tokenizer)
        self.channels = tuple(side.channels) if side is not None else ()
        self.parser = self.conllu = None
        self.label_scheme = None
        self.parse = parse
        if not parse:
            return
        spec = parser_spec or (side.parser if side is not None else None)
        if not spec or spec == "conllu":
            raise ValueError(f"the model reads source syntax, and {data_dir} was made from {spec or 'no'} parses: "
                             f"name a parser with --source-parser (spacy:MODEL, supar:PATH or conllu:FILE)")
        if spec.startswith(CONLLU_PREFIX):
            from ..parsers.conllu_reader import read_conllu

            self.conllu_path = spec[len(CONLLU_PREFIX):]
            if not os.path.isfile(self.conllu_path):
                raise ValueError(f"--source-parser {spec}: no such file")
            self.conllu: Iterator = read_conllu(self.conllu_path)
            if any(name.startswith("ldd_") for name in self.channels):
                raise ValueError("this data-bin's source side carries parser distributions (LDD), which a CoNLL-U "
                                 "file has not: use its SuPar parser")
            return
        from ..parsers.sentence_channels import build_side_parser

        ldd = side.settings.get("ldd")
        self.parser = build_side_parser(spec, manifest.source_lang, ldd, workers=workers)
        self.label_scheme = getattr(self.parser, "label_scheme", None)

    def encode(self, lines: Sequence[str]) -> List[EncodedSource]:
        results = []
        for line in lines:
            text, problem = normalize_line(line)
            results.append(EncodedSource(text, error=problem))
        trees: Dict[int, object] = {}
        if self.parse:
            trees = self._parse([r for r in results])
        usable = [i for i, r in enumerate(results) if r.error is None]
        words = trees if self.parse else None
        if self.tokenizer is not None:
            words = {}
            for i, sentence in zip(usable, self.tokenizer.tokenize([results[i].text for i in usable])):
                if isinstance(sentence, ParseError):
                    results[i].error = f"tokenization failed: {sentence}"
                else:
                    words[i] = sentence
        if self.word_level:  # a word that cannot be a token leaves its sentence out, with the reason
            for i in list(words):
                problem = sentence_problem(words[i])
                if problem is not None:
                    results[i].error = problem
                    del words[i]
            usable = [i for i in usable if results[i].error is None]
        if words is not None:
            encoded = self.encoder.encode_many_words([words[i] for i in usable])
        else:
            encoded = [(pieces, None) for pieces in self.encoder.encode_texts([results[i].text for i in usable])]
        for i, (pieces, word_ids) in zip(usable, encoded):
            symbols = self.tags + pieces + self.tags
            ids = [self.source_dict.index(symbol) for symbol in symbols] + [self.source_dict.eos()]
            results[i].tokens = torch.LongTensor(ids)
            if self.parse:
                from ..parsers.sentence_channels import tree_syntax

                results[i].syntax = tree_syntax(trees[i], word_ids, self.label_dict, self.channels, self.label_scheme)
        return results

    def _parse(self, results: List[EncodedSource]) -> Dict[int, object]:
        """Trees of the sentences without an error (an error is set on those that cannot be parsed)."""
        trees = {}
        if self.conllu is not None:  # one CoNLL-U sentence per input sentence, whatever its own state
            for i, result in enumerate(results):
                start, tree = next(self.conllu, (None, ParseError(f"{self.conllu_path} has no more sentences")))
                if result.error is not None:
                    continue
                where = f"{self.conllu_path}:{start}: " if start is not None else ""
                if isinstance(tree, ParseError):
                    result.error = f"{where}{tree}" if not str(tree).startswith(self.conllu_path) else str(tree)
                elif tree.text != result.text:
                    result.error = f"{where}the CoNLL-U sentence is {tree.text!r}, not the input line"
                else:
                    trees[i] = tree
        else:
            wanted = [i for i, r in enumerate(results) if r.error is None]
            parsed = self.parser.parse([parser_view(results[i].text) for i in wanted], batch_size=max(1, len(wanted)))
            for i, parsed_item in zip(wanted, parsed):
                tree = realigned(parsed_item, results[i].text)
                if isinstance(tree, ParseError):
                    results[i].error = f"parse failed: {tree}"
                else:
                    trees[i] = tree
        for i, tree in list(trees.items()):
            unknown = [label for label in tree.labels if label not in self.label_dict.index]
            if len(tree.words) > MAX_WORDS:
                results[i].error = f"over {MAX_WORDS} words"
            elif unknown:
                results[i].error = (f"label {unknown[0]!r} is not in the data-bin's label dictionary (the model never "
                                    f"saw it)")
            if results[i].error is not None:
                del trees[i]
        return trees


class InferenceDataset(SyntaxLanguagePairDataset):
    """Sentences of raw text; those that could not be encoded are left out of every batch (their ids stay, so
    fairseq-interactive's output stays in input order). With `batch_log`, every batch made appends (the input line
    numbers of its rows, counted from 0 over the whole input: `first_line` + the sentence's index here, its source
    tokens): fairseq-interactive hands the task only the tokens of a batch, and the trees it writes need the ids."""

    def __init__(self, *args, unusable: Sequence[int] = (), batch_log: Optional[deque] = None,
                 first_line: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.unusable = np.asarray(sorted(unusable), dtype=np.int64)
        self.batch_log = batch_log
        self.first_line = first_line

    def collater(self, samples, pad_to_length=None):
        batch = super().collater(samples, pad_to_length=pad_to_length)
        if self.batch_log is not None and "id" in batch:
            self.batch_log.append(([self.first_line + int(i) for i in batch["id"]],
                                   batch["net_input"]["src_tokens"].clone()))
        return batch

    def ordered_indices(self):
        indices = super().ordered_indices()
        return indices[~np.isin(indices, self.unusable)] if len(self.unusable) else indices
