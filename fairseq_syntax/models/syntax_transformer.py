"""The syntax transformer family: fairseq's transformer whose encoder (and, in later issues, decoder) syntax
mechanisms are chosen independently by name.

--encoder-syntax picks a score modifier from fairseq_syntax.modules.SCORE_MODIFIERS (PASCAL: "pascal") for the
self-attention of the layers in --encoder-syntax-layers. --decoder-syntax is the decoder's choice ("none" until
the syntax decoders land); any encoder mechanism combines with any decoder mechanism.
"""
import contextlib
from typing import Optional

from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import TransformerConfig, TransformerEncoderBase, TransformerModel
from fairseq.modules.checkpoint_activations import checkpoint_wrapper

from ..modules import SCORE_MODIFIERS, SyntaxEncoderLayer

DECODER_SYNTAX = ("none",)


def parse_layers(spec: str, num_layers: int, option: str):
    try:
        layers = sorted({int(part) for part in str(spec).split(",") if part.strip() != ""})
    except ValueError:
        raise ValueError(f"{option} takes comma-separated layer indices, got {spec!r}") from None
    if not layers or layers[0] < 0 or layers[-1] >= num_layers:
        raise ValueError(f"{option}={spec!r}: layers must be in 0..{num_layers - 1}")
    return layers


class SyntaxTransformerEncoder(TransformerEncoderBase):
    """Transformer encoder whose chosen layers' self-attention takes a score modifier."""

    def __init__(self, cfg, dictionary, embed_tokens):
        super().__init__(cfg, dictionary, embed_tokens)
        self.syntax_layers = []
        self.syntax_features = ()

    def build_encoder_layer(self, cfg):
        layer = SyntaxEncoderLayer(cfg, return_fc=self.return_fc)
        if cfg.checkpoint_activations:
            layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
        return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0)

    def attach_syntax(self, args):
        name = getattr(args, "encoder_syntax", "none") or "none"
        if name == "none":
            return
        modifier_cls = SCORE_MODIFIERS[name]
        self.syntax_layers = parse_layers(getattr(args, "encoder_syntax_layers", "0"), len(self.layers),
                                          "--encoder-syntax-layers")
        for index in self.syntax_layers:
            attention = self.layers[index].self_attn
            attention.score_modifier = modifier_cls(args, attention.num_heads, attention.embed_dim)
        self.syntax_features = tuple(modifier_cls.features)

    def forward(self, src_tokens, src_lengths=None, return_all_hiddens: bool = False, token_embeddings=None,
                **syntax_inputs):
        missing = [name for name in self.syntax_features if name not in syntax_inputs]
        if missing:
            raise ValueError(f"the encoder needs {missing} in net_input: train with --task syntax_translation on a "
                             f"data-bin whose source side was parsed (fairseq-syntax-preprocess --source-parser)")
        needed = {name: syntax_inputs[name] for name in self.syntax_features}
        with contextlib.ExitStack() as stack:
            for index in self.syntax_layers:
                stack.enter_context(self.layers[index].self_attn.syntax_inputs(needed))
            encoder_out = super().forward(src_tokens, src_lengths, return_all_hiddens, token_embeddings)
        # carried so that decoder-side mechanisms can use them; beam search reorders them with the rest
        for name, value in needed.items():
            encoder_out["syntax_" + name] = [value]
        return encoder_out

    def reorder_encoder_out(self, encoder_out, new_order):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key, values in encoder_out.items():
            if key.startswith("syntax_"):
                reordered[key] = [value.index_select(0, new_order) for value in values]
        return reordered


@register_model("syntax_transformer")
class SyntaxTransformerModel(TransformerModel):
    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--encoder-syntax", choices=["none"] + sorted(SCORE_MODIFIERS),
                            help="syntax mechanism in encoder self-attention")
        parser.add_argument("--encoder-syntax-layers", type=str, metavar="L1,L2",
                            help="0-based encoder layers that use it (default: 0, the first, as in PASCAL)")
        parser.add_argument("--decoder-syntax", choices=list(DECODER_SYNTAX),
                            help="syntax mechanism in the decoder")
        for modifier in SCORE_MODIFIERS.values():
            modifier.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        syntax_defaults(args)
        model = super().build_model(args, task)
        model.encoder.attach_syntax(args)
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return SyntaxTransformerEncoder(TransformerConfig.from_namespace(args), src_dict, embed_tokens)

    @property
    def syntax_features(self):
        return set(self.encoder.syntax_features)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, **syntax_inputs):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   **syntax_inputs)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)


def syntax_defaults(args):
    args.encoder_syntax = getattr(args, "encoder_syntax", None) or "none"
    args.encoder_syntax_layers = getattr(args, "encoder_syntax_layers", None) or "0"
    args.decoder_syntax = getattr(args, "decoder_syntax", None) or "none"
