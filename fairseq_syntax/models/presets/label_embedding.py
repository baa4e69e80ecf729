"""Architecture presets of Sennrich & Haddow's label features in the Transformer encoder (the PASCAL paper's
"+S&H" baseline, Bugliarello & Okazaki, 2020, appendix A.2): 10 of the embedding dimensions carry the label."""
from .sizes import MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer

(transformer_sh, transformer_sh_multi30k,
 transformer_sh_tiny) = register_family("syntax_transformer", "transformer_sh", {
    "": Preset("Transformer base (6+6 layers, 512, 8 heads); the last 10 dimensions of each source embedding are "
               "its dependency label's embedding."),
    "_multi30k": Preset("Sized for ~30k sentence pairs: 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3.",
                        MULTI30K),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads.", TINY),
}, base=base_syntax_transformer, defaults=dict(encoder_syntax="label_embedding")).values()
