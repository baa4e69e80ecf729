"""Segmentation: the tokens of every kept pair (sentencepiece pieces, or words with --word-vocabulary) with their
subword->word maps, and the fairseq dictionaries of those tokens."""
import os
from collections import Counter
from typing import Dict, List, Optional

from fairseq.data import Dictionary
from fairseq_syntax.data import multitask
from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder
from fairseq_syntax.data.transitions.tokens import is_arc
from fairseq_syntax.data.word_codec import count_tokens, vocabulary
from .reading import SplitData


class Segmentation:
    """Preprocessor's segmentation (preprocessor.py); uses its args and langs."""

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
