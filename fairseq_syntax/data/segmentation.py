"""The segmenter of a data-bin: its sentencepiece model or its word-level codec, as its syntax.json says. Both
have the same interface (encode_many_words, encode_texts, encode_text, decode); everything that encodes raw text
for a data-bin or decodes its output (translation of raw text, fairseq-generate's D lines, the evaluator) opens
it here."""
import os
from typing import Optional, Union

from .channels import SyntaxManifest
from .sentencepiece_codec import WordAlignedEncoder
from .word_codec import Tokenizer, WordCodec

Segmenter = Union[WordAlignedEncoder, WordCodec]


def open_segmenter(data_dir: str, manifest: SyntaxManifest, tokenizer: Optional[Tokenizer] = None) -> Segmenter:
    """`tokenizer` (word-level data-bins only, e.g. fairseq_syntax.parsers.tokenizer.side_tokenizer): splits raw
    text into words for encode_texts/encode_text; decoding and encoding parsed words need none."""
    if manifest.word_level:
        return WordCodec(tokenizer)
    if not manifest.spm_model:
        raise ValueError(f"{os.path.join(data_dir, 'syntax.json')} names no sentencepiece model")
    return WordAlignedEncoder(os.path.join(data_dir, manifest.spm_model))
