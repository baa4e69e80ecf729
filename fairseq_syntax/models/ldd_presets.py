"""Architecture presets of LDD (Liu & Sima'an): labeled dependency distributions in the first encoder layer, whose
16 heads get one label group each. The ablations of the paper's Table 1 are `--ldd-variant` of the same presets."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import transformer_wmt_en_de

from .sizes import LDD_PAPER_MULTI30K, MULTI30K, TINY, set_default as _set_default, set_sizes as _set_sizes
from .syntax_transformer import syntax_defaults


@register_model_architecture("syntax_transformer", "transformer_ldd")
def transformer_ldd(args):
    """The paper's sizes: Transformer base (6+6 layers, 512, FFN 2048, 8 heads, dropout 0.1) with LDD in encoder
    layer 0, which has 16 heads."""
    _set_default(args, "encoder_syntax", "ldd")
    _set_default(args, "ldd_variant", "ldd")
    _set_default(args, "ldd_layer_heads", 16)
    syntax_defaults(args)
    transformer_wmt_en_de(args)


@register_model_architecture("syntax_transformer", "transformer_ldd_multi30k")
def transformer_ldd_multi30k(args):
    """Sized for ~30k sentence pairs like every *_multi30k preset (3+3 layers, 256, FFN 1024, 4 heads, dropout
    0.3); the LDD layer keeps its 16 heads (of 16 dimensions)."""
    _set_sizes(args, **MULTI30K)
    transformer_ldd(args)


@register_model_architecture("syntax_transformer", "transformer_ldd_paper_multi30k")
def transformer_ldd_paper_multi30k(args):
    """The paper's own Multi30k setting: 4+4 layers, 512, FFN 2048, 8 heads (16 in the LDD layer), dropout 0.1 (also
    in the LDD layer). Its training half (word vocabulary, no label smoothing, 256-sentence batches, 400 warm-up
    steps, 50 epochs, best valid BLEU-4) is the ldd-multi30k profile of examples/multi30k/."""
    _set_sizes(args, **LDD_PAPER_MULTI30K)
    transformer_ldd(args)


@register_model_architecture("syntax_transformer", "transformer_ldd_tiny")
def transformer_ldd_tiny(args):
    """For tests: 2+2 layers, 64 dims, 4 heads (16 of 4 dimensions in the LDD layer)."""
    _set_sizes(args, **TINY)
    transformer_ldd(args)
