"""Architecture presets of Choshen & Abend's structure-aware decoders ("Enhancing the Transformer Decoder with
Transition-based Syntax", §2-§4, Table 2), on a data-bin whose target side is a transition sequence
(`fairseq-syntax-preprocess --target-parser SPEC --target-transitions`):

  transformer_bitran_*        BiTran: the prefix re-encoded with bidirectional attention (--decoder-type bitran)
  transformer_parent_*        BiTran + PARENT: one head of every decoder layer attends to each token's parents
  transformer_gcn_decoder_*   BiTran + the GCN decoder: 2 gated, labeled graph convolutions above the embeddings
                              (-Labels: --no-decoder-gcn-labels, -Gates: add --no-decoder-gcn-gates)

Sizes: `_tiny` (tests), `_multi30k` (the comparison's size), `_medium` and `_large` (the paper's: embeddings 256 /
512, 4 / 6 encoder and decoder blocks, 8 heads, App. B; FFN 4x the width and dropout 0.1, which the paper does not
give: Nematus' transformer defaults). The encoder is fairseq's (the paper's) unless an encoder mechanism is chosen
(`--encoder-syntax pascal`, ...): every decoder combines with every encoder mechanism.
"""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import base_architecture

from .sizes import MULTI30K, TINY, set_default, set_sizes
from .syntax_transformer import syntax_defaults

MEDIUM = dict(layers=4, embed_dim=256, ffn_embed_dim=1024, heads=8, dropout=0.1)
LARGE = dict(layers=6, embed_dim=512, ffn_embed_dim=2048, heads=8, dropout=0.1)
DECODERS = {  # family -> (decoder type, decoder mechanisms)
    "bitran": ("bitran", "none"),
    "parent": ("bitran", "parent"),
    "gcn_decoder": ("bitran", "gcn"),
}
SIZES = {"tiny": TINY, "multi30k": MULTI30K, "medium": MEDIUM, "large": LARGE}


def _register(family: str, size: str):
    decoder_type, mechanisms = DECODERS[family]

    def architecture(args):
        set_sizes(args, **SIZES[size])
        set_default(args, "decoder_type", decoder_type)
        set_default(args, "decoder_syntax", mechanisms)
        syntax_defaults(args)
        base_architecture(args)

    architecture.__doc__ = f"{family} decoder ({decoder_type}, decoder syntax {mechanisms}) at the {size} size"
    register_model_architecture("syntax_transformer", f"transformer_{family}_{size}")(architecture)


for _family in DECODERS:
    for _size in SIZES:
        _register(_family, _size)
