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
                    or, for the decoder as a whole (built once, in the decoder):
                      "input"             (x (T, B, C), syntax, mask, incremental_state=None,
                                          newest_only=False) -> x: the decoder's input vectors (scaled
                                          embeddings plus positions) before its first layer (Choshen & Abend's
                                          decoder GCN, "stacked immediately above the embedding layer"); in
                                          decoding, x is the whole prefix and newest_only asks for its newest
                                          column, (1, B, C), which may be computed from what the mechanism kept
  needs_target_transitions
                    a decoder mechanism that reads the generated target graph: it finds the decoder context
                    (modules/decoder_context.py: prefix tokens, prefix graph, which edges each column may use) in
                    its syntax argument under DECODER_CONTEXT, and the model needs a --target-transitions data-bin;
                    its constructor also gets `target_transitions` (TargetTransitions: the target dictionary's
                    token classes and arc labels, e.g. the number of labels), a keyword only such mechanisms take
  needs_source_labels
                    an encoder mechanism sized by the source label dictionary (label embeddings, the GCN's label
                    rows): its constructor (and its over_states module's) also gets `source_label_count`, the
                    number of label ids of the source side (0: the data-bin's source side was not parsed), which
                    the model reads from the task's source dictionary (data/vocabulary.py), a keyword only such
                    mechanisms take
  features          the batch features it consumes (names in fairseq_syntax.data.features.FEATURES); a mechanism
                    whose options change what it reads lists them all and says which in `features_for(args)`
  training_features features it uses when the data has them (for a training loss, e.g. LISA's parent loss) and
                    does without otherwise: such a model translates text that was never parsed
  auxiliary_losses  {loss name: option holding its weight}; the mechanism returns the losses (sums over the
                    tokens, like fairseq's loss) and the syntax criterion adds them, weighted, and logs each
  options           a FairseqDataclass of its options, declared once: they become command-line options of the
                    model (`--pascal-heads`) and keys of `model:` in a fairseq-hydra-train config (`pascal_heads`)
  attention_heads   the number of self-attention heads of its layers (default: the model's)
  over_states       an encoder mechanism's form over a recurrent encoder's output states, if it has one: an
                    nn.Module class built with (args, embed_dim), (states (T, B, C), syntax, mask) -> (T, B, C);
                    the mechanisms with one are the choices of the syntax_lstm model's --lstm-syntax
Syntax reaches a mechanism only through its forward arguments; no module keeps anything of a batch.

A decoder mechanism may also build one token constraint for the whole decoder (`build_token_constraint`): a
module that, from the target prefix, forbids tokens at the next step of generation ((B, T, V) bool, or None); the
task's generator applies it where it applies the transition masks (tasks/constrained_generation.py), the one
path by which generation restricts the next token.
Per-hypothesis state (a stack, the last token) lives in fairseq's incremental state and is reordered in the
module's `reorder_incremental_state`; store copies, never views of `prev_output_tokens`, whose buffer beam search
rewrites in place between steps.
"""
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Optional, Tuple, Type, Union

import torch.nn as nn
from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from torch import Tensor

if TYPE_CHECKING:
    from .decoder_context import DecoderContext

LAYER_SHAPES = ("score_modifier", "added_module", "self_attention")
SHAPES = LAYER_SHAPES + ("embedding",)
DECODER_SHAPES = LAYER_SHAPES + ("input",)
WHOLE_SIDE_SHAPES = ("embedding", "input")  # built once for the side, not in layers


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


DECODER_CONTEXT = "decoder_context"  # the syntax entry of the decoder context (modules/decoder_context.py)
# what a layer and its mechanism get as `syntax`: the batch's features by name (data/features.py FEATURES, each a
# tensor with one row per sentence) and, in a decoder whose mechanisms read the prefix graph, the DecoderContext
# under DECODER_CONTEXT (the one entry that is not a feature)
SyntaxInputs = Dict[str, Union[Tensor, "DecoderContext"]]


class SyntaxMechanism(nn.Module):
    name = "base"
    side = "encoder"
    shape = "score_modifier"
    needs_target_transitions = False
    needs_source_labels = False
    features: Tuple[str, ...] = ()
    training_features: Tuple[str, ...] = ()
    auxiliary_losses: Dict[str, str] = {}
    default_layers = "0"
    options: Optional[Type[FairseqDataclass]] = None
    over_states: Optional[Type[nn.Module]] = None

    @classmethod
    def add_args(cls, parser):
        add_declared_options(parser, cls.options)

    @classmethod
    def vocabulary_arguments(cls, source_label_count: int = 0, target_transitions=None) -> dict:
        """The constructor keywords it declares it needs (needs_source_labels, needs_target_transitions), for it and
        its over_states module alike."""
        given = {}
        if cls.needs_source_labels:
            given["source_label_count"] = source_label_count
        if cls.needs_target_transitions:
            given["target_transitions"] = target_transitions
        return given

    @classmethod
    def option(cls, args, name: str):
        """The option's value in the model args, else its declared default."""
        return declared_option(cls.options, args, name)

    @classmethod
    def loss_weights(cls, args) -> Dict[str, float]:
        """{auxiliary loss: its weight under these options}: the declaration the criterion reads."""
        return {loss: float(cls.option(args, option)) for loss, option in cls.auxiliary_losses.items()}

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
        shapes = SHAPES if side == "encoder" else DECODER_SHAPES
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


def add_declared_options(parser, options: Optional[Type[FairseqDataclass]]) -> None:
    """The options of a dataclass (a mechanism's, a decoder's) on the model's parser, with no argparse defaults:
    architecture presets fill what the command line leaves unset, and `declared_option` the rest."""
    if options is not None:
        gen_parser_from_dataclass(parser, options(), delete_default=True)


def declared_option(options: Type[FairseqDataclass], args, name: str):
    """An option's value in the model args, else the default its dataclass declares (the one place it is)."""
    value = getattr(args, name, None)
    return value if value is not None else getattr(options(), name)


@dataclass
class MechanismChoice:
    """One mechanism the model args choose for a side (None: no mechanism) and its layers (none for a mechanism
    of the side as a whole)."""

    mechanism: Optional[Type[SyntaxMechanism]]
    layers: Tuple[int, ...] = ()

    def at(self, layer_index: int) -> Optional[Type[SyntaxMechanism]]:
        return self.mechanism if layer_index in self.layers else None

    @property
    def mechanisms(self) -> Tuple[Type[SyntaxMechanism], ...]:
        return (self.mechanism,) if self.mechanism is not None else ()

    @classmethod
    def from_args(cls, args, side: str, num_layers: int) -> "MechanismChoice":
        choices = MechanismChoices.from_args(args, side, num_layers)
        if len(choices.choices) > 1:
            raise ValueError(f"--{side}-syntax: the {side} takes one mechanism, got "
                             f"{', '.join(c.mechanism.name for c in choices.choices)}")
        return choices.choices[0] if choices.choices else cls(None)

    @classmethod
    def of(cls, mechanism: Type[SyntaxMechanism], args, side: str, num_layers: int) -> "MechanismChoice":
        mechanism.check_args(args)
        if mechanism.shape in WHOLE_SIDE_SHAPES:
            return cls(mechanism)
        spec = getattr(args, f"{side}_syntax_layers", None) or mechanism.default_layers
        return cls(mechanism, tuple(parse_layers(spec, num_layers, f"--{side}-syntax-layers")))


@dataclass
class MechanismChoices:
    """The mechanisms a side's option lists (`--decoder-syntax parent,gcn`), each with its layers. A layer holds at
    most one layer-level mechanism; a side has at most one mechanism of each whole-side shape."""

    choices: Tuple[MechanismChoice, ...] = ()

    @classmethod
    def from_args(cls, args, side: str, num_layers: int) -> "MechanismChoices":
        registry = ENCODER_MECHANISMS if side == "encoder" else DECODER_MECHANISMS
        spec = getattr(args, f"{side}_syntax", None) or "none"
        names = [name.strip() for name in str(spec).split(",") if name.strip() and name.strip() != "none"]
        unknown = [name for name in names if name not in registry]
        if unknown:
            raise ValueError(f"--{side}-syntax {spec!r}: {unknown} not among {['none'] + sorted(registry)}")
        if len(set(names)) != len(names):
            raise ValueError(f"--{side}-syntax {spec!r}: a mechanism is named twice")
        choices = tuple(MechanismChoice.of(registry[name], args, side, num_layers) for name in names)
        for shape in WHOLE_SIDE_SHAPES:
            whole = [c.mechanism.name for c in choices if c.mechanism.shape == shape]
            if len(whole) > 1:
                raise ValueError(f"--{side}-syntax {spec!r}: {whole} both act on the {side}'s {shape}")
        for layer in range(num_layers):
            here = [c.mechanism.name for c in choices if layer in c.layers]
            if len(here) > 1:
                raise ValueError(f"--{side}-syntax {spec!r}: {here} would share {side} layer {layer}; give them "
                                 f"different layers (--{side}-syntax-layers applies to each)")
        return cls(choices)

    def at(self, layer_index: int) -> Optional[Type[SyntaxMechanism]]:
        for choice in self.choices:
            if layer_index in choice.layers:
                return choice.mechanism
        return None

    def whole(self, shape: str) -> Optional[Type[SyntaxMechanism]]:
        """The mechanism of the side as a whole with this shape ("embedding", "input"), if any."""
        return next((c.mechanism for c in self.choices if c.mechanism.shape == shape), None)

    @property
    def mechanisms(self) -> Tuple[Type[SyntaxMechanism], ...]:
        return tuple(c.mechanism for c in self.choices)
