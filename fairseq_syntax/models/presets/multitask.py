"""Architectures for the multi-task baseline of Currey & Heafield (2019): a stock fairseq `transformer` trained on
a multi-task data-bin (`fairseq-syntax-preprocess --multitask-parse`, docs/methods.md, "The multi-task baseline"),
where it learns to translate (`<translate>` source `<translate>`) and to parse the source into its linearized
dependency tree (`<parse>` source `<parse>`). The method is all in the data, so these are the vanilla sizes under
the method's name: the model gets plain batches (`--task syntax_translation`, no syntax features)."""
from fairseq.models.transformer.transformer_legacy import transformer_wmt_en_de

from .sizes import MULTI30K, TINY, Preset, register_family

(transformer_multitask, transformer_multitask_multi30k,
 transformer_multitask_tiny) = register_family("transformer", "transformer_multitask", {
    "": Preset("Transformer base (6+6 layers, 512, FFN 2048, 8 heads: fairseq's transformer_wmt_en_de), the "
               "paper's size."),
    "_multi30k": Preset("At the size of the *_multi30k presets: 3+3 layers, 256, FFN 1024, 4 heads, dropout 0.3.",
                        MULTI30K),
    "_tiny": Preset("For tests: 2+2 layers, 64, FFN 128, 4 heads.", TINY),
}, base=transformer_wmt_en_de).values()
