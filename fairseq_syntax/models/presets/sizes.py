"""Model sizes shared by every family's presets, the helper that registers a family's presets from one table
(`register_family`), and the stock fairseq `transformer` at the shared sizes, so a syntax method and its vanilla
baseline differ only in the method (bench/ and examples/ compare them)."""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional

from fairseq.models import register_model_architecture
from fairseq.models.transformer import (
    DEFAULT_MAX_SOURCE_POSITIONS, DEFAULT_MAX_TARGET_POSITIONS, DEFAULT_MIN_PARAMS_TO_WRAP,
)
from fairseq.models.transformer.transformer_legacy import base_architecture
from omegaconf import OmegaConf

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


@dataclass(frozen=True)
class Preset:
    """One row of a family's table: what the preset is (its docstring), the sizes it sets (the size setter's
    arguments, such as MULTI30K; None keeps the base architecture's, Transformer base for the syntax transformer) and
    the defaults of its own (PASCAL's heads at one size, a paper's corpus setting)."""
    doc: str
    sizes: Optional[Mapping[str, Any]] = None
    defaults: Mapping[str, Any] = field(default_factory=dict)


def register_family(model: str, prefix: str, presets: Mapping[str, Preset], base: Callable,
                    defaults: Optional[Mapping[str, Any]] = None,
                    size_setter: Callable = set_sizes) -> Dict[str, Callable]:
    """Register the architecture `<prefix><suffix>` of `model` for each `suffix: Preset` of `presets` ("" names the
    family's own preset, "_multi30k", "_tiny", ... its sizes). Each sets defaults, of which the first set wins (and
    a command-line value wins over all): the preset's own defaults, then its sizes (`size_setter(args, **sizes)`),
    then the family's `defaults`; then it calls `base` (the model's base architecture, or a function that sets what
    needs code, such as renaming a checkpoint's old options first, and calls it). Returns {name: architecture
    function}, in the table's order."""
    registered = {}
    for suffix, preset in presets.items():
        name = prefix + suffix
        registered[name] = register_model_architecture(model, name)(
            _architecture(name, preset, base, defaults or {}, size_setter, legacy_defaults=model == "transformer"))
    return registered


def _architecture(name, preset: Preset, base, family_defaults, size_setter, legacy_defaults: bool = False):
    def architecture(args):
        if legacy_defaults and OmegaConf.is_config(args):
            # fairseq-hydra-train: fairseq's legacy TransformerModel.build_model sets these three when unset, after
            # the architecture has run, when the config no longer takes new keys; set them here, to its values
            set_default(args, "max_source_positions", DEFAULT_MAX_SOURCE_POSITIONS)
            set_default(args, "max_target_positions", DEFAULT_MAX_TARGET_POSITIONS)
            set_default(args, "min_params_to_wrap", DEFAULT_MIN_PARAMS_TO_WRAP)
        for option, value in preset.defaults.items():
            set_default(args, option, value)
        if preset.sizes is not None:
            size_setter(args, **preset.sizes)
        for option, value in family_defaults.items():
            set_default(args, option, value)
        base(args)

    architecture.__name__ = architecture.__qualname__ = name
    architecture.__doc__ = preset.doc
    return architecture


transformer_multi30k, transformer_tiny_vanilla = register_family("transformer", "transformer", {
    "_multi30k": Preset("Vanilla fairseq transformer at the size of the *_multi30k syntax presets.", MULTI30K),
    "_tiny_vanilla": Preset("Vanilla fairseq transformer at the size of the *_tiny syntax presets (tests).", TINY),
}, base=base_architecture).values()
