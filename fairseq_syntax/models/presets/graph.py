"""Architecture presets of the syntactic GCN baselines in the Transformer (Bastings et al., 2017, as the RGSE paper,
Ding & Tao 2019, reimplemented them for its Table 3): `transformer_gcn` adds a gated, labeled GCN after
self-attention in encoder layers 0-2, `transformer_birnn_gcn` replaces self-attention there by a bidirectional GRU
followed by the GCN, `transformer_birnn` (the paper's "BiRNN Transformer") by the bidirectional GRU alone, no
syntax. Edge dropout 0.2, labels and gates on; `--no-encoder-gcn-labels` / `--no-encoder-gcn-gates` are
the ablations of Choshen & Abend's Table 2 (fairseq_syntax/modules/mechanisms/graph_convolution.py)."""
from functools import partial

from ...modules.mechanisms.graph_convolution import upgrade_option_names
from .sizes import MULTI30K, TINY, Preset, register_family, set_default
from ..syntax_transformer import base_syntax_transformer


def _graph(mechanism, args):
    upgrade_option_names(args)  # a checkpoint of the old option names: its values, not these defaults
    set_default(args, "encoder_syntax", mechanism)
    set_default(args, "encoder_gcn_edge_dropout", 0.2)
    base_syntax_transformer(args)


(transformer_gcn, transformer_gcn_paper_params, transformer_gcn_multi30k,
 transformer_gcn_tiny) = register_family("syntax_transformer", "transformer_gcn", {
    "": Preset("The paper's sizes: Transformer base (6+6 layers, 512, FFN 2048, 8 heads, dropout 0.1) with the "
               "GCN after self-attention in encoder layers 0, 1, 2 (\"in lower layers ([1-3])\")."),
    "_paper_params": Preset(
        "transformer_gcn at the RGSE paper's parameter count (Table 3: +0.2M over Transformer base): the GCN is "
        "32 wide (--encoder-gcn-dim 32, projected back to 512), +0.21M here. The paper gives the count, not the "
        "width; at the model's width the three GCN layers add 2.5M (3 x 512 x 512 per layer for W_self, W_down, "
        "W_up).", defaults=dict(encoder_gcn_dim=32)),
    "_multi30k": Preset(
        "Sized for ~30k sentence pairs like every *_multi30k preset (3+3 layers, 256, FFN 1024, 4 heads, dropout "
        "0.3): the GCN in encoder layers 0 and 1, the lower layers, as transformer_rgse_multi30k (so the graph "
        "encoders are compared at the same depth).", MULTI30K, dict(encoder_syntax_layers="0,1")),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads, the GCN in both encoder layers.", TINY,
                    dict(encoder_syntax_layers="0,1")),
}, base=partial(_graph, "gcn")).values()

(transformer_birnn_gcn, transformer_birnn_gcn_paper_params, transformer_birnn_gcn_multi30k,
 transformer_birnn_gcn_tiny) = register_family("syntax_transformer", "transformer_birnn_gcn", {
    "": Preset("Transformer base whose encoder layers 0, 1, 2 have a bidirectional GRU and the GCN instead of "
               "self-attention."),
    "_paper_params": Preset(
        "transformer_birnn_gcn at the RGSE paper's parameter count (Table 3: +1.0M over Transformer base): the BiGRU "
        "keeps 256 units per direction (+0.13M per layer over the self-attention it replaces) and the GCN is 96 wide, "
        "+1.02M in all here (2.9M at the model's width).", defaults=dict(encoder_gcn_dim=96)),
    "_multi30k": Preset("3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3: BiGRU + GCN in encoder layers 0 and 1 (as "
                        "transformer_rgse_multi30k).", MULTI30K, dict(encoder_syntax_layers="0,1")),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads, BiGRU + GCN in both encoder layers.", TINY,
                    dict(encoder_syntax_layers="0,1")),
}, base=partial(_graph, "birnn_gcn")).values()


def _birnn(args):
    set_default(args, "encoder_syntax", "birnn")
    base_syntax_transformer(args)


(transformer_birnn, transformer_birnn_multi30k, transformer_birnn_tiny) = register_family(
    "syntax_transformer", "transformer_birnn", {
        "": Preset("Transformer base whose encoder layers 0, 1, 2 have a bidirectional GRU instead of self-attention "
                   "and no syntax: the RGSE paper's \"BiRNN Transformer\" (section 4.1), transformer_birnn_gcn "
                   "without the GCN."),
        "_multi30k": Preset("3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3: the BiGRU in encoder layers 0 and 1 (as "
                            "transformer_birnn_gcn_multi30k).", MULTI30K, dict(encoder_syntax_layers="0,1")),
        "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads, the BiGRU in both encoder layers.", TINY,
                        dict(encoder_syntax_layers="0,1")),
    }, base=_birnn).values()
