"""Architecture presets of LISA (Strubell et al., 2018) as the PASCAL paper's baseline (Bugliarello & Okazaki,
2020, appendix A.2): one supervised biaffine head in the first encoder layer."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import transformer_wmt_en_de

from .sizes import MULTI30K, TINY, set_default as _set_default, set_sizes as _set_sizes
from .syntax_transformer import syntax_defaults


@register_model_architecture("syntax_transformer", "transformer_lisa")
def transformer_lisa(args):
    """Transformer base (6+6 layers, 512, 8 heads) with LISA in head 0 of encoder layer 0, parent loss weight 1."""
    _set_default(args, "encoder_syntax", "lisa")
    syntax_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("syntax_transformer", "transformer_lisa_multi30k")
def transformer_lisa_multi30k(args):
    """Sized for ~30k sentence pairs: 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3."""
    _set_sizes(args, **MULTI30K)
    transformer_lisa(args)


@register_model_architecture("syntax_transformer", "transformer_lisa_tiny")
def transformer_lisa_tiny(args):
    """For tests: 2+2 layers, 64 dims, 4 heads."""
    _set_sizes(args, **TINY)
    transformer_lisa(args)
