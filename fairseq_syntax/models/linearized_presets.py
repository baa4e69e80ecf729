"""Architecture presets of the Linearized decoder, Choshen & Abend's ablation ("Enhancing the Transformer Decoder
with Transition-based Syntax", §3): a standard causal decoder trained on the target's transition sequence (pieces
interleaved with LEFT-ARC:l / RIGHT-ARC:l tokens), read from a data-bin made with `fairseq-syntax-preprocess
--target-parser SPEC --target-transitions`. The method is in the data and in decoding (the task masks invalid
transitions in beam search when the data-bin's target has transitions), so the model is the `syntax_transformer`
with no decoder mechanism, and any encoder mechanism combines with it (`--encoder-syntax pascal`, or
`transformer_pascal_linearized_*`)."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import transformer_wmt_en_de

from .pascal_presets import transformer_pascal_multi30k, transformer_pascal_tiny
from .sizes import MULTI30K, TINY, set_sizes as _set_sizes
from .syntax_transformer import syntax_defaults


@register_model_architecture("syntax_transformer", "transformer_linearized")
def transformer_linearized(args):
    """Transformer base (6+6 layers, 512, FFN 2048, 8 heads, dropout 0.1: the paper's larger model) with a plain
    causal decoder over the transition sequence."""
    syntax_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("syntax_transformer", "transformer_linearized_multi30k")
def transformer_linearized_multi30k(args):
    """Sized for ~30k sentence pairs like every *_multi30k preset: 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3."""
    _set_sizes(args, **MULTI30K)
    transformer_linearized(args)


@register_model_architecture("syntax_transformer", "transformer_linearized_tiny")
def transformer_linearized_tiny(args):
    """For tests: 2+2 layers, 64 dims, FFN 128, 4 heads."""
    _set_sizes(args, **TINY)
    transformer_linearized(args)


@register_model_architecture("syntax_transformer", "transformer_pascal_linearized_multi30k")
def transformer_pascal_linearized_multi30k(args):
    """PASCAL encoder (as transformer_pascal_multi30k) + Linearized decoder: the source parse in the encoder, the
    target's transitions in the data."""
    transformer_pascal_multi30k(args)


@register_model_architecture("syntax_transformer", "transformer_pascal_linearized_tiny")
def transformer_pascal_linearized_tiny(args):
    """For tests: transformer_pascal_tiny's encoder + Linearized decoder."""
    transformer_pascal_tiny(args)
