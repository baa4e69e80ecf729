"""Model sizes shared by every family's presets, and the stock fairseq `transformer` at the same sizes, so a
syntax method and its vanilla baseline differ only in the method (bench/ and examples/ compare them)."""
from fairseq.models import register_model_architecture
from fairseq.models.transformer.transformer_legacy import base_architecture

MULTI30K = dict(layers=3, embed_dim=256, ffn_embed_dim=1024, heads=4, dropout=0.3)
TINY = dict(layers=2, embed_dim=64, ffn_embed_dim=128, heads=4, dropout=0.1)
# Liu & Sima'an's own Multi30k setting (LDD paper, "Hyperparameters"): 4+4 layers, 512, FFN 2048, 8 heads, dropout
# 0.1; the ldd-multi30k comparison profile trains every system at these sizes
LDD_PAPER_MULTI30K = dict(layers=4, embed_dim=512, ffn_embed_dim=2048, heads=8, dropout=0.1)


def set_default(args, name, value):
    if getattr(args, name, None) is None:
        setattr(args, name, value)


def set_sizes(args, layers, embed_dim, ffn_embed_dim, heads, dropout):
    """Default sizes for both encoder and decoder (command-line values win)."""
    for side in ("encoder", "decoder"):
        set_default(args, f"{side}_layers", layers)
        set_default(args, f"{side}_embed_dim", embed_dim)
        set_default(args, f"{side}_ffn_embed_dim", ffn_embed_dim)
        set_default(args, f"{side}_attention_heads", heads)
    set_default(args, "dropout", dropout)


@register_model_architecture("transformer", "transformer_multi30k")
def transformer_multi30k(args):
    """Vanilla fairseq transformer at the size of the *_multi30k syntax presets."""
    set_sizes(args, **MULTI30K)
    base_architecture(args)


@register_model_architecture("transformer", "transformer_tiny_vanilla")
def transformer_tiny_vanilla(args):
    """Vanilla fairseq transformer at the size of the *_tiny syntax presets (tests)."""
    set_sizes(args, **TINY)
    base_architecture(args)
