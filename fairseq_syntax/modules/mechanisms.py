"""Registries of encoder and decoder syntax mechanisms, chosen by name (--encoder-syntax, --decoder-syntax).

A mechanism is an nn.Module built inside the layer it belongs to (so activation checkpointing and FSDP wrap its
parameters with the layer) for each layer in --encoder-syntax-layers / --decoder-syntax-layers. Its class
declares, once:
  shape             where it acts in the layer:
                      "score_modifier"    a per-head T x T change of the self-attention scores (a ScoreModification);
                      "added_module"      a sublayer after self-attention, (x, syntax, mask) -> new x;
                      "self_attention"    replaces self-attention: (x, syntax, mask) -> the sublayer output, which
                                          the layer puts through dropout, the residual and its layer norm;
                    or, for the encoder as a whole (built once, in the encoder; no layers):
                      "embedding"         (token embeddings (B, T, C), syntax, mask) -> token embeddings, before
                                          scaling and positions (Sennrich & Haddow's label features)
  features          the batch features it consumes (names in fairseq_syntax.data.features.FEATURES); a mechanism
                    whose options change what it reads lists them all and says which in `features_for(args)`
  training_features features it uses when the data has them (for a training loss, e.g. LISA's parent loss) and
                    does without otherwise: such a model translates text that was never parsed
  auxiliary_losses  {loss name: option holding its weight}; the mechanism returns the losses (sums over the
                    tokens, like fairseq's loss) and the syntax criterion adds them, weighted, and logs each
  options           a FairseqDataclass of its options, declared once: they become command-line options of the
                    model (`--pascal-heads`) and keys of `model:` in a fairseq-hydra-train config (`pascal_heads`)
  attention_heads   the number of self-attention heads of its layers (default: the model's)
Syntax reaches a mechanism only through its forward arguments; no module keeps anything of a batch.

A decoder mechanism may also build one token constraint for the whole decoder (`build_token_constraint`): a
module that, from the target prefix, forbids tokens at the next step (SyntaxTransformerDecoder applies it).
Per-hypothesis state (a stack, the last token) lives in fairseq's incremental state and is reordered in the
module's `reorder_incremental_state`; store copies, never views of `prev_output_tokens`, whose buffer beam search
rewrites in place between steps.
"""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple, Type

import torch.nn as nn
from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from torch import Tensor

LAYER_SHAPES = ("score_modifier", "added_module", "self_attention")
SHAPES = LAYER_SHAPES + ("embedding",)


@dataclass
class ScoreModification:
    """Change the scores of heads [first_head, first_head + num_heads) with `matrix` of shape
    (B, num_heads or 1, T_query, T_key).

    mode: "multiply" (scores * matrix), "add" (scores + matrix) or "replace" (matrix are the scores).
    `auxiliary_losses` are the mechanism's losses for this call (e.g. LISA's parent loss)."""

    matrix: Tensor
    num_heads: int
    mode: str = "multiply"
    auxiliary_losses: Dict[str, Tensor] = field(default_factory=dict)
    first_head: int = 0

    def apply(self, scores: Tensor) -> Tensor:
        """scores: (B, H, T_query, T_key) scaled dot products, changed in place (autograd-safe: the matmul that
        made them does not keep its output, and the product keeps only `matrix`) to avoid copies of B x H x T x T."""
        modified = scores[:, self.first_head: self.first_head + self.num_heads]
        if self.mode == "multiply":
            modified.mul_(self.matrix)
        elif self.mode == "add":
            modified.add_(self.matrix)
        elif self.mode == "replace":
            modified.copy_(self.matrix.expand_as(modified))
        else:
            raise ValueError(f"unknown score modification mode {self.mode!r}")
        return scores


class SyntaxMechanism(nn.Module):
    name = "base"
    side = "encoder"
    shape = "score_modifier"
    features: Tuple[str, ...] = ()
    training_features: Tuple[str, ...] = ()
    auxiliary_losses: Dict[str, str] = {}
    default_layers = "0"
    options: Optional[Type[FairseqDataclass]] = None

    @classmethod
    def add_args(cls, parser):
        if cls.options is not None:
            # no argparse defaults: architecture presets fill what the command line leaves unset
            gen_parser_from_dataclass(parser, cls.options(), delete_default=True)

    @classmethod
    def option(cls, args, name: str):
        """The option's value in the model args, else its declared default."""
        value = getattr(args, name, None)
        return value if value is not None else getattr(cls.options(), name)

    @classmethod
    def features_for(cls, args) -> Tuple[str, ...]:
        """The features a model with these options consumes (a subset of `features`)."""
        return cls.features

    @classmethod
    def check_args(cls, args):
        """Raise ValueError for option values the mechanism cannot use (called before any layer is built)."""

    @classmethod
    def attention_heads(cls, args, default: int) -> int:
        return default

    @classmethod
    def build_token_constraint(cls, args, dictionary) -> Optional[nn.Module]:
        return None

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int):
        super().__init__()
        self.layer_index = layer_index


# Kept for score-modifying mechanisms: the base class they subclass.
ScoreModifier = SyntaxMechanism

ENCODER_MECHANISMS: Dict[str, Type[SyntaxMechanism]] = {}
DECODER_MECHANISMS: Dict[str, Type[SyntaxMechanism]] = {}


def _register(registry: Dict[str, Type[SyntaxMechanism]], side: str, name: str):
    def register(cls):
        if name in registry or name == "none":
            raise ValueError(f"{side} syntax mechanism {name!r} registered twice (or reserved)")
        shapes = SHAPES if side == "encoder" else LAYER_SHAPES
        if cls.shape not in shapes:
            raise ValueError(f"{side} syntax mechanism {name!r}: shape {cls.shape!r} is not one of {shapes}")
        from ..data.features import FEATURES  # the data contract: every declared feature must exist

        unknown = [feature for feature in cls.features + cls.training_features if feature not in FEATURES]
        if unknown:
            raise ValueError(f"{side} syntax mechanism {name!r} consumes unregistered batch features {unknown}")
        cls.name, cls.side = name, side
        registry[name] = cls
        return cls

    return register


def register_encoder_mechanism(name: str):
    return _register(ENCODER_MECHANISMS, "encoder", name)


def register_decoder_mechanism(name: str):
    return _register(DECODER_MECHANISMS, "decoder", name)


def parse_layers(spec: str, num_layers: int, option: str):
    """"0,2" -> [0, 2]; "all" -> every layer."""
    if str(spec).strip() == "all":
        return list(range(num_layers))
    try:
        layers = sorted({int(part) for part in str(spec).split(",") if part.strip() != ""})
    except ValueError:
        raise ValueError(f"{option} takes comma-separated layer indices or 'all', got {spec!r}") from None
    if not layers or layers[0] < 0 or layers[-1] >= num_layers:
        raise ValueError(f"{option}={spec!r}: layers must be in 0..{num_layers - 1}")
    return layers


@dataclass
class MechanismChoice:
    """What the model args choose for one side: the mechanism class (None: no mechanism) and its layers."""

    mechanism: Optional[Type[SyntaxMechanism]]
    layers: Tuple[int, ...] = ()

    def at(self, layer_index: int) -> Optional[Type[SyntaxMechanism]]:
        return self.mechanism if layer_index in self.layers else None

    @classmethod
    def from_args(cls, args, side: str, num_layers: int) -> "MechanismChoice":
        registry = ENCODER_MECHANISMS if side == "encoder" else DECODER_MECHANISMS
        name = getattr(args, f"{side}_syntax", None) or "none"
        if name == "none":
            return cls(None)
        if name not in registry:
            raise ValueError(f"--{side}-syntax {name!r}: not one of {['none'] + sorted(registry)}")
        mechanism = registry[name]
        mechanism.check_args(args)
        if mechanism.shape == "embedding":
            return cls(mechanism)
        spec = getattr(args, f"{side}_syntax_layers", None) or mechanism.default_layers
        return cls(mechanism, tuple(parse_layers(spec, num_layers, f"--{side}-syntax-layers")))
