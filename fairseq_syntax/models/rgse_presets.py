"""Architecture presets of RGSE (Ding & Tao): the Recurrent Graph Syntax Encoder upon a BiGRU replaces the
self-attention of the lower encoder layers; bi-total RGSE, gated (edge-wise) integration, gated residual (the paper's
best, §4.2). Variants, integrations and residuals are `--rgse-variant`, `--rgse-integration`, `--rgse-residual`."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import transformer_wmt_en_de

from .sizes import MULTI30K, TINY, set_default as _set_default, set_sizes as _set_sizes
from .syntax_transformer import syntax_defaults


@register_model_architecture("syntax_transformer", "transformer_rgse")
def transformer_rgse(args):
    """The paper's Transformer setting: Transformer base (6+6 layers, 512, FFN 2048, 8 heads, dropout 0.1) with
    RGSE instead of self-attention in encoder layers 0-2 (paper Table 1: layers [1-3] of 6 best)."""
    _set_default(args, "encoder_syntax", "rgse")
    _set_default(args, "encoder_syntax_layers", "0,1,2")
    _set_default(args, "rgse_variant", "bi-total")
    _set_default(args, "rgse_integration", "gated")
    _set_default(args, "rgse_residual", "gated")
    syntax_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("syntax_transformer", "transformer_rgse_paper_params")
def transformer_rgse_paper_params(args):
    """transformer_rgse at the paper's parameter count (Table 3: 91.76M against Transformer base's 90.2M, +1.56M):
    RGSE at half the model's width (--rgse-dim 256: a BiGRU of 128 per direction, GRUs of 256, 2 x 256 -> 512), +1.49M
    here. At the model's width (GRUs of 512 and a 1024 -> 512 projection) its three layers add 11.4M."""
    _set_default(args, "rgse_dim", 256)
    transformer_rgse(args)


@register_model_architecture("syntax_transformer", "transformer_rgse_multi30k")
def transformer_rgse_multi30k(args):
    """Sized for ~30k sentence pairs like every *_multi30k preset (3+3 layers, 256, FFN 1024, 4 heads, dropout
    0.3); RGSE in encoder layers 0 and 1, the lower layers with the top one left to self-attention, as the paper's
    [1-3] of 6 does (this project's choice: the paper has no 3-layer encoder)."""
    _set_sizes(args, **MULTI30K)
    _set_default(args, "encoder_syntax_layers", "0,1")
    transformer_rgse(args)


@register_model_architecture("syntax_transformer", "transformer_rgse_tiny")
def transformer_rgse_tiny(args):
    """For tests: 2+2 layers, 64 dims, 4 heads; RGSE in encoder layer 0."""
    _set_sizes(args, **TINY)
    _set_default(args, "encoder_syntax_layers", "0")
    transformer_rgse(args)
