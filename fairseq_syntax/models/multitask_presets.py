"""Architectures for the multi-task baseline of Currey & Heafield (2019): a stock fairseq `transformer` trained on
a multi-task data-bin (`fairseq-syntax-preprocess --multitask-parse`, docs/methods.md, "The multi-task baseline"),
where it learns to translate (`<translate>` source `<translate>`) and to parse the source into its linearized
dependency tree (`<parse>` source `<parse>`). The method is all in the data, so these are the vanilla sizes under
the method's name: the model gets plain batches (`--task syntax_translation`, no syntax features)."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import base_architecture, transformer_wmt_en_de

from .sizes import MULTI30K, TINY, set_sizes


@register_model_architecture("transformer", "transformer_multitask")
def transformer_multitask(args):
    """Transformer base (6+6 layers, 512, FFN 2048, 8 heads: fairseq's transformer_wmt_en_de), the paper's size."""
    transformer_wmt_en_de(args)


@register_model_architecture("transformer", "transformer_multitask_multi30k")
def transformer_multitask_multi30k(args):
    """At the size of the *_multi30k presets: 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3."""
    set_sizes(args, **MULTI30K)
    base_architecture(args)


@register_model_architecture("transformer", "transformer_multitask_tiny")
def transformer_multitask_tiny(args):
    """For tests: 2+2 layers, 64, FFN 128, 4 heads."""
    set_sizes(args, **TINY)
    base_architecture(args)
