"""Architecture presets of Sennrich & Haddow's label features in the Transformer encoder (the PASCAL paper's
"+S&H" baseline, Bugliarello & Okazaki, 2020, appendix A.2): 10 of the embedding dimensions carry the label."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import transformer_wmt_en_de

from .sizes import MULTI30K, TINY, set_default as _set_default, set_sizes as _set_sizes
from .syntax_transformer import syntax_defaults


@register_model_architecture("syntax_transformer", "transformer_sh")
def transformer_sh(args):
    """Transformer base (6+6 layers, 512, 8 heads); the last 10 dimensions of each source embedding are its
    dependency label's embedding."""
    _set_default(args, "encoder_syntax", "label_embedding")
    syntax_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("syntax_transformer", "transformer_sh_multi30k")
def transformer_sh_multi30k(args):
    """Sized for ~30k sentence pairs: 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3."""
    _set_sizes(args, **MULTI30K)
    transformer_sh(args)


@register_model_architecture("syntax_transformer", "transformer_sh_tiny")
def transformer_sh_tiny(args):
    """For tests: 2+2 layers, 64 dims, 4 heads."""
    _set_sizes(args, **TINY)
    transformer_sh(args)
