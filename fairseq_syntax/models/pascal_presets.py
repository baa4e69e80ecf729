"""Architecture presets of the PASCAL family (Bugliarello & Okazaki, 2020)."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import base_architecture, transformer_wmt_en_de

from .syntax_transformer import syntax_defaults


from .sizes import MULTI30K, TINY, set_default as _set_default, set_sizes as _set_sizes


@register_model_architecture("syntax_transformer", "syntax_transformer")
def syntax_transformer(args):
    """A syntax transformer with no syntax mechanism: base sizes; choose mechanisms by option."""
    syntax_defaults(args)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "transformer_pascal")
def transformer_pascal(args):
    """Transformer base (6+6 layers, 512, 8 heads) with PASCAL in the first encoder layer, all heads, sigma^2=1."""
    _set_default(args, "encoder_syntax", "pascal")
    _set_default(args, "pascal_variance", 1.0)
    _set_default(args, "parent_ignoring", 0.0)
    syntax_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("syntax_transformer", "transformer_pascal_multi30k")
def transformer_pascal_multi30k(args):
    """Sized for ~30k sentence pairs (Multi30k): 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3; PASCAL on 2 of
    the 4 heads of encoder layer 0, sigma^2 = 1, parent ignoring q = 0.3.

    This project's own setting, not the paper's. Bugliarello & Okazaki's small-data models (NC11, Table 7) are base
    transformers (6+6 layers, 512, 8 heads, dropout 0.3) with 2 of 8 heads PASCAL and q = 0.4 for En-De (8 of 8
    and q = 0 for De-En). Here the model is smaller, half of the layer's heads are PASCAL (the paper's En-De: a
    quarter) and q is 0.3 (the paper's En-De: 0.4); --pascal-heads and --parent-ignoring override both."""
    _set_sizes(args, **MULTI30K)
    _set_default(args, "pascal_heads", 2)
    _set_default(args, "parent_ignoring", 0.3)
    transformer_pascal(args)


@register_model_architecture("syntax_transformer", "transformer_pascal_tiny")
def transformer_pascal_tiny(args):
    """For tests: 2+2 layers, 64 dims, 4 heads of which 2 are PASCAL."""
    _set_sizes(args, **TINY)
    _set_default(args, "pascal_heads", 2)
    transformer_pascal(args)
