"""Architecture presets of the Dyn-STGCD decoder (Li et al., §4 "Implementation Details"; models/dyn_stgcd.py):

  dyn_stgcd            the paper's base: Transformer encoder of 6 layers, 4 heads, 512 wide, FFN 2048; a decoder of
                       4 spatial-temporal blocks, nodes 512 wide; walks P = {0, 1} against 6 hidden graphs of 6
                       nodes and 6 of 4 (dropout 0.1, which the paper does not give)
  dyn_stgcd_multi30k   the comparison's encoder size (3 layers, 256, 4 heads), 4 blocks with 32-wide nodes: the
                       evolving weights cost 6 G^3 per sentence, step and block, and every step re-encodes every
                       node: on 1 CPU thread (bench/dyn_stgcd_cost.py) it trains at 0.43x vanilla's words/s at
                       G = 32, 0.22x at 48, 0.17x at 64 (docs/results.md)
  dyn_stgcd_tiny       tests: 2 encoder layers of 64, 2 blocks of 16-wide nodes, one group of 2 hidden graphs of 3
                       nodes
Any encoder mechanism combines with it (`--encoder-syntax pascal`).
"""
from .sizes import MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer

PAPER_BASE = dict(layers=6, embed_dim=512, ffn_embed_dim=2048, heads=4, dropout=0.1)
SIZES = {  # size -> (encoder and embedding sizes, decoder blocks, graph width, hidden graphs)
    "": (PAPER_BASE, 4, 512, "6x6,6x4"),
    "_multi30k": (MULTI30K, 4, 32, "6x6,6x4"),
    "_tiny": (TINY, 2, 16, "2x3"),
}


def _preset(sizes, blocks: int, graph_dim: int, hidden_graphs: str) -> Preset:
    """The decoder's blocks are the preset's own defaults, so they win over the layers of `sizes`."""
    return Preset(f"Dyn-STGCD decoder, {blocks} blocks of {graph_dim}-wide nodes, encoder {sizes}", sizes,
                  dict(decoder_layers=blocks, dyn_stgcd_graph_dim=graph_dim, dyn_stgcd_hidden_graphs=hidden_graphs))


# (the decoder's options take their defaults from models/dyn_stgcd.py's DynStgcdOptions, whatever the architecture)
register_family("syntax_transformer", "dyn_stgcd", {suffix: _preset(*row) for suffix, row in SIZES.items()},
                base=base_syntax_transformer, defaults=dict(decoder_type="dyn_stgcd"))
