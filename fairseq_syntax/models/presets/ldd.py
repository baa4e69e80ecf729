"""Architecture presets of LDD (Liu & Sima'an): labeled dependency distributions in the first encoder layer, whose
16 heads get one label group each. The ablations of the paper's Table 1 are `--ldd-variant` of the same presets."""
from .sizes import LDD_PAPER_MULTI30K, MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer

(transformer_ldd, transformer_ldd_multi30k, transformer_ldd_paper_multi30k,
 transformer_ldd_tiny) = register_family("syntax_transformer", "transformer_ldd", {
    "": Preset("The paper's sizes: Transformer base (6+6 layers, 512, FFN 2048, 8 heads, dropout 0.1) with LDD in "
               "encoder layer 0, which has 16 heads."),
    "_multi30k": Preset("Sized for ~30k sentence pairs like every *_multi30k preset (3+3 layers, 256, FFN 1024, 4 "
                        "heads, dropout 0.3); the LDD layer keeps its 16 heads (of 16 dimensions).", MULTI30K),
    "_paper_multi30k": Preset(
        "The paper's own Multi30k setting: 4+4 layers, 512, FFN 2048, 8 heads (16 in the LDD layer), dropout 0.1 "
        "(also in the LDD layer). Its training half (word vocabulary, no label smoothing, 256-sentence batches, "
        "400 warm-up steps, 50 epochs, best valid BLEU-4) is the ldd-multi30k profile of examples/multi30k/.",
        LDD_PAPER_MULTI30K),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads (16 of 4 dimensions in the LDD layer).", TINY),
}, base=base_syntax_transformer, defaults=dict(encoder_syntax="ldd", ldd_variant="ldd", ldd_layer_heads=16)).values()
