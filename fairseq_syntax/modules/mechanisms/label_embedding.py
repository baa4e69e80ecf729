"""Sennrich & Haddow (2016) label features in the Transformer, as Bugliarello & Okazaki (2020, appendix A.2) ran
them: each source piece's dependency label (of its word) is embedded in a few dimensions (10) that replace the last
dimensions of its token embedding, so the encoder's width, and every layer after it, match vanilla's.

Scale. The label vectors take the token embedding's place before fairseq multiplies the whole input by sqrt(d), so
they are initialised as fairseq initialises its token embeddings (normal, standard deviation d^-1/2 for the model's
width d, the padding row zero): at initialisation every input dimension, token or label, has unit scale after the
multiplication. (A plain nn.Embedding, standard deviation 1, made the 10 label dimensions sqrt(d) times larger than
the token dimensions, most of the input's energy; the paper does not say how its labels were initialised.)
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from fairseq.dataclass import FairseqDataclass
from torch import Tensor

from ..syntax_mechanism import SyntaxMechanism, register_encoder_mechanism


@dataclass
class LabelEmbeddingOptions(FairseqDataclass):
    label_embed_dim: int = field(default=10, metadata={
        "help": "dimensions of the label embedding, replacing the last ones of the token embedding (paper: 10)"})


@register_encoder_mechanism("label_embedding")
class LabelEmbeddingFeatures(SyntaxMechanism):
    shape = "embedding"
    needs_source_labels = True
    features = ("src_labels",)
    options = LabelEmbeddingOptions

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int, source_label_count: int = 0):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.dim = self.option(args, "label_embed_dim")
        if not 1 <= self.dim < embed_dim:
            raise ValueError(f"--label-embed-dim must be in 1..{embed_dim - 1}, got {self.dim}")
        num_labels = source_label_count
        if not num_labels:
            raise ValueError("the label embedding needs the source label dictionary: train with --task "
                             "syntax_translation on a data-bin whose source side was parsed")
        self.embedding = nn.Embedding(num_labels, self.dim, padding_idx=0)  # 0: EOS and padding
        nn.init.normal_(self.embedding.weight, mean=0.0, std=embed_dim ** -0.5)  # as fairseq's token embeddings
        nn.init.zeros_(self.embedding.weight[0])

    def forward(self, token_embeddings: Tensor, syntax, padding_mask) -> Tensor:
        labels = self.embedding(syntax["src_labels"]).to(token_embeddings.dtype)
        return torch.cat([token_embeddings[..., : -self.dim], labels], dim=-1)
