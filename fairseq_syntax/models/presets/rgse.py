"""Architecture presets of RGSE (Ding & Tao): the Recurrent Graph Syntax Encoder upon a BiGRU replaces the
self-attention of the lower encoder layers; bi-total RGSE, gated (edge-wise) integration, gated residual (the paper's
best, §4.2). Variants, integrations and residuals are `--rgse-variant`, `--rgse-integration`, `--rgse-residual`."""
from .sizes import MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer

(transformer_rgse, transformer_rgse_paper_params, transformer_rgse_multi30k,
 transformer_rgse_tiny) = register_family("syntax_transformer", "transformer_rgse", {
    "": Preset("The paper's Transformer setting: Transformer base (6+6 layers, 512, FFN 2048, 8 heads, dropout 0.1) "
               "with RGSE instead of self-attention in encoder layers 0-2 (paper Table 1: layers [1-3] of 6 best)."),
    "_paper_params": Preset(
        "transformer_rgse at the paper's parameter count (Table 3: 91.76M against Transformer base's 90.2M, +1.56M): "
        "RGSE at half the model's width (--rgse-dim 256: a BiGRU of 128 per direction, GRUs of 256, 2 x 256 -> 512), "
        "+1.49M here. At the model's width (GRUs of 512 and a 1024 -> 512 projection) its three layers add 11.4M.",
        defaults=dict(rgse_dim=256)),
    "_multi30k": Preset(
        "Sized for ~30k sentence pairs like every *_multi30k preset (3+3 layers, 256, FFN 1024, 4 heads, dropout "
        "0.3); RGSE in encoder layers 0 and 1, the lower layers with the top one left to self-attention, as the "
        "paper's [1-3] of 6 does (this project's choice: the paper has no 3-layer encoder).",
        MULTI30K, dict(encoder_syntax_layers="0,1")),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, 4 heads; RGSE in encoder layer 0.", TINY,
                    dict(encoder_syntax_layers="0")),
}, base=base_syntax_transformer, defaults=dict(encoder_syntax="rgse", encoder_syntax_layers="0,1,2",
                                               rgse_variant="bi-total", rgse_integration="gated",
                                               rgse_residual="gated")).values()
