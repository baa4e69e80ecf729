"""Architecture presets of LISA (Strubell et al., 2018) as the PASCAL paper's baseline (Bugliarello & Okazaki,
2020, appendix A.2): one supervised biaffine head in the first encoder layer."""
from .sizes import MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer

(transformer_lisa, transformer_lisa_multi30k,
 transformer_lisa_tiny) = register_family("syntax_transformer", "transformer_lisa", {
    "": Preset("Transformer base (6+6 layers, 512, 8 heads) with LISA in head 0 of encoder layer 0, parent loss "
               "weight 1."),
    "_multi30k": Preset("Sized for ~30k sentence pairs: 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3.",
                        MULTI30K),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads.", TINY),
}, base=base_syntax_transformer, defaults=dict(encoder_syntax="lisa")).values()
