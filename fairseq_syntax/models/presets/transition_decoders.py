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
from .sizes import MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer

MEDIUM = dict(layers=4, embed_dim=256, ffn_embed_dim=1024, heads=8, dropout=0.1)
LARGE = dict(layers=6, embed_dim=512, ffn_embed_dim=2048, heads=8, dropout=0.1)
FAMILIES = {  # preset family -> (its decoder type, its decoder mechanisms)
    "bitran": ("bitran", "none"),
    "parent": ("bitran", "parent"),
    "gcn_decoder": ("bitran", "gcn"),
}
SIZES = {"tiny": TINY, "multi30k": MULTI30K, "medium": MEDIUM, "large": LARGE}

for _family, (_decoder_type, _mechanisms) in FAMILIES.items():
    register_family("syntax_transformer", f"transformer_{_family}", {
        f"_{size}": Preset(f"{_family} decoder ({_decoder_type}, decoder syntax {_mechanisms}) at the {size} size",
                           sizes)
        for size, sizes in SIZES.items()
    }, base=base_syntax_transformer, defaults=dict(decoder_type=_decoder_type, decoder_syntax=_mechanisms))
