"""Architecture presets of the Linearized decoder, Choshen & Abend's ablation ("Enhancing the Transformer Decoder
with Transition-based Syntax", §3): a standard causal decoder trained on the target's transition sequence (pieces
interleaved with LEFT-ARC:l / RIGHT-ARC:l tokens), read from a data-bin made with `fairseq-syntax-preprocess
--target-parser SPEC --target-transitions`. The method is in the data and in decoding (the task masks invalid
transitions in beam search when the data-bin's target has transitions), so the model is the `syntax_transformer`
with no decoder mechanism, and any encoder mechanism combines with it (`--encoder-syntax pascal`, or
`transformer_pascal_linearized_*`)."""
from fairseq.models import register_model_architecture

from .pascal import transformer_pascal_multi30k, transformer_pascal_tiny
from .sizes import MULTI30K, TINY, Preset, register_family
from ..syntax_transformer import base_syntax_transformer

(transformer_linearized, transformer_linearized_multi30k,
 transformer_linearized_tiny) = register_family("syntax_transformer", "transformer_linearized", {
    "": Preset("Transformer base (6+6 layers, 512, FFN 2048, 8 heads, dropout 0.1: the paper's larger model) with a "
               "plain causal decoder over the transition sequence."),
    "_multi30k": Preset("Sized for ~30k sentence pairs like every *_multi30k preset: 3+3 layers, 256, FFN 1024, 4 "
                        "heads, dropout 0.3.", MULTI30K),
    "_tiny": Preset("For tests: 2+2 layers, 64 dims, FFN 128, 4 heads.", TINY),
}, base=base_syntax_transformer).values()


@register_model_architecture("syntax_transformer", "transformer_pascal_linearized_multi30k")
def transformer_pascal_linearized_multi30k(args):
    """PASCAL encoder (as transformer_pascal_multi30k) + Linearized decoder: the source parse in the encoder, the
    target's transitions in the data."""
    transformer_pascal_multi30k(args)


@register_model_architecture("syntax_transformer", "transformer_pascal_linearized_tiny")
def transformer_pascal_linearized_tiny(args):
    """For tests: transformer_pascal_tiny's encoder + Linearized decoder."""
    transformer_pascal_tiny(args)
