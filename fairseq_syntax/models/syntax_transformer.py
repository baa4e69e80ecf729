"""The syntax transformer family: fairseq's transformer whose encoder and decoder syntax mechanisms are chosen
independently by name (--encoder-syntax, --decoder-syntax; see fairseq_syntax/modules/mechanisms.py).

Each mechanism is built inside the layers it applies to (--encoder-syntax-layers / --decoder-syntax-layers), and
the batch's syntax features reach every layer as a forward argument. With --decoder-syntax none the decoder is
fairseq's own, unchanged.
"""
import argparse
from typing import Dict, List, Optional

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase, TransformerModel
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from omegaconf import OmegaConf
from torch import Tensor

from ..modules import DECODER_MECHANISMS, ENCODER_MECHANISMS, MechanismChoice, SyntaxDecoderLayer, SyntaxEncoderLayer

SYNTAX_PREFIX = "syntax_"  # encoder_out keys carrying source features on to decoder mechanisms


def _wrap_layer(layer, cfg):
    # as fairseq's build_encoder_layer / build_decoder_layer do
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0)


def _split_layer_output(output, num_usual: int, loss_names, totals: Dict[str, Tensor]):
    """A syntax layer returns its usual outputs followed by its auxiliary losses: add those to `totals`."""
    if not isinstance(output, tuple):
        return output
    for name, value in zip(loss_names, output[num_usual:]):
        totals[name] = totals[name] + value if name in totals else value
    return output[0] if num_usual == 1 else output[:num_usual]


def _select_features(wanted, given: Dict[str, Tensor], where: str) -> Dict[str, Tensor]:
    missing = [name for name in wanted if name not in given]
    if missing:
        raise ValueError(f"the {where} needs {missing} in net_input: train with --task syntax_translation on a "
                         f"data-bin whose side was parsed (fairseq-syntax-preprocess --source-parser/--target-parser)")
    return {name: given[name] for name in wanted}


class SyntaxTransformerEncoder(TransformerEncoderBase):
    """Transformer encoder whose chosen layers carry the encoder syntax mechanism."""

    def __init__(self, cfg, dictionary, embed_tokens):
        # plain attributes, read while the base constructor builds the layers
        self.syntax_choice = MechanismChoice.from_args(cfg, "encoder", cfg.encoder.layers)
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens)
        mechanism = self.syntax_choice.mechanism
        self.syntax_features = tuple(mechanism.features_for(cfg)) if mechanism else ()
        self.optional_syntax_features = tuple(mechanism.training_features) if mechanism else ()
        self.auxiliary_loss_names = tuple(mechanism.auxiliary_losses) if mechanism else ()
        self.embedding_mechanism = None
        if mechanism is not None and mechanism.shape == "embedding":
            self.embedding_mechanism = mechanism(cfg, embed_tokens.embedding_dim, cfg.encoder.attention_heads, -1)

    def build_encoder_layer(self, cfg):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        return _wrap_layer(SyntaxEncoderLayer(cfg, cfg, self.syntax_choice.at(index), index), cfg)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, **features):
        syntax = _select_features(self.syntax_features, features, "encoder")
        syntax.update({name: features[name] for name in self.optional_syntax_features if name in features})
        # fairseq's TransformerEncoderBase.forward_scriptable, with syntax passed to every layer
        encoder_padding_mask = src_tokens.eq(self.padding_idx)
        # read back once (fairseq's encoder keeps a tensor and reads it again before every layer: a sync each)
        has_pads = bool(encoder_padding_mask.any())
        auxiliary_losses: Dict[str, Tensor] = {}
        if self.embedding_mechanism is not None:
            if token_embeddings is None:
                token_embeddings = self.embed_tokens(src_tokens)
            output = self.embedding_mechanism(token_embeddings, syntax, encoder_padding_mask)
            token_embeddings, losses = output if isinstance(output, tuple) else (output, {})
            auxiliary_losses.update(losses)
        x, encoder_embedding = self.forward_embedding(src_tokens, token_embeddings)
        if has_pads:
            x = x * (1 - encoder_padding_mask.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        encoder_states = [x] if return_all_hiddens else []
        for layer in self.layers:
            output = layer(x, encoder_padding_mask=encoder_padding_mask if has_pads else None, syntax=syntax)
            x = _split_layer_output(output, 1, self.auxiliary_loss_names, auxiliary_losses)
            if return_all_hiddens:
                encoder_states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        src_lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        encoder_out = {
            "encoder_out": [x], "encoder_padding_mask": [encoder_padding_mask],
            "encoder_embedding": [encoder_embedding], "encoder_states": encoder_states, "fc_results": [],
            "src_tokens": [], "src_lengths": [src_lengths],
        }
        # carried so that decoder-side mechanisms can use them; beam search reorders them with the rest
        for name, value in syntax.items():
            encoder_out[SYNTAX_PREFIX + name] = [value]
        if auxiliary_losses:
            encoder_out["auxiliary_losses"] = auxiliary_losses
        return encoder_out

    def reorder_encoder_out(self, encoder_out, new_order):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key, values in encoder_out.items():
            if key.startswith(SYNTAX_PREFIX):
                reordered[key] = [value.index_select(0, new_order) for value in values]
        return reordered


class SyntaxTransformerDecoder(TransformerDecoderBase):
    """Transformer decoder whose chosen layers carry the decoder syntax mechanism, plus the mechanism's token
    constraint (if any): a mask of tokens forbidden at each position, returned as extra["forbidden_tokens"] and
    applied by the model's get_normalized_probs, in training and in beam search alike."""

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.syntax_choice = MechanismChoice.from_args(cfg, "decoder", cfg.decoder.layers)
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        mechanism = self.syntax_choice.mechanism
        self.syntax_features = tuple(mechanism.features_for(cfg))
        self.optional_syntax_features = tuple(mechanism.training_features)
        self.auxiliary_loss_names = tuple(mechanism.auxiliary_losses)
        self.token_constraint = mechanism.build_token_constraint(cfg, dictionary)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        return _wrap_layer(SyntaxDecoderLayer(cfg, no_encoder_attn, cfg, self.syntax_choice.at(index), index), cfg)

    def forward(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state=None, features_only: bool = False, full_context_alignment: bool = False,
                alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None, src_lengths=None,
                return_all_hiddens: bool = False, **features):
        # In training the target-side features come from the batch; in beam search there are none, and a mechanism
        # derives what it needs from the prefix (its state kept in the incremental state).
        syntax = {name: features[name] for name in self.syntax_features + self.optional_syntax_features
                  if name in features}
        if encoder_out is not None:
            syntax.update({key[len(SYNTAX_PREFIX):]: value[0] for key, value in encoder_out.items()
                           if key.startswith(SYNTAX_PREFIX)})
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                                         alignment_layer, alignment_heads, syntax=syntax)
        if self.token_constraint is not None:
            forbidden = self.token_constraint(prev_output_tokens, incremental_state=incremental_state)
            if forbidden is not None:
                extra["forbidden_tokens"] = forbidden
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None, syntax: Optional[Dict[str, Tensor]] = None):
        # fairseq's TransformerDecoderBase.extract_features_scriptable, with syntax passed to every layer
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        enc = encoder_out["encoder_out"][0] if encoder_out is not None and encoder_out["encoder_out"] else None
        padding_mask = (encoder_out["encoder_padding_mask"][0]
                        if encoder_out is not None and encoder_out["encoder_padding_mask"] else None)
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        prev_output_tokens = prev_output_tokens.contiguous()
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x += positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # B x T x C -> T x B x C
        self_attn_padding_mask = None
        if prev_output_tokens.eq(self.padding_idx).any():
            self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)

        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        auxiliary_losses: Dict[str, Tensor] = {}
        for idx, layer in enumerate(self.layers):
            self_attn_mask = (self.buffered_future_mask(x)
                              if incremental_state is None and not full_context_alignment else None)
            output = layer(x, enc, padding_mask, incremental_state, self_attn_mask=self_attn_mask,
                           self_attn_padding_mask=self_attn_padding_mask, need_attn=idx == alignment_layer,
                           need_head_weights=idx == alignment_layer, syntax=syntax)
            x, layer_attn, _ = _split_layer_output(output, 3, self.auxiliary_loss_names, auxiliary_losses)
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)
        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)  # T x B x C -> B x T x C
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        extra = {"attn": [attn], "inner_states": inner_states}
        if auxiliary_losses:
            extra["auxiliary_losses"] = auxiliary_losses
        return x, extra


@register_model("syntax_transformer")
class SyntaxTransformerModel(TransformerModel):
    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        parser.add_argument("--encoder-syntax", choices=["none"] + sorted(ENCODER_MECHANISMS),
                            help="syntax mechanism of the encoder")
        parser.add_argument("--encoder-syntax-layers", type=str, metavar="L1,L2",
                            help="0-based encoder layers that carry it, or 'all' (default: the mechanism's, "
                                 "usually 0, the first, as in PASCAL)")
        parser.add_argument("--decoder-syntax", choices=["none"] + sorted(DECODER_MECHANISMS),
                            help="syntax mechanism of the decoder")
        parser.add_argument("--decoder-syntax-layers", type=str, metavar="L1,L2",
                            help="0-based decoder layers that carry it, or 'all' (default: the mechanism's)")
        for mechanism in {**ENCODER_MECHANISMS, **DECODER_MECHANISMS}.values():
            mechanism.add_args(parser)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            # fairseq-hydra-train hands architectures a DictConfig, and TransformerConfig.from_namespace keeps only
            # its own fields of one: every syntax option would be dropped and PASCAL would train as vanilla
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
        syntax_defaults(args)
        # label dictionary sizes, for mechanisms that embed labels (recorded in the checkpoint's args)
        label_dicts = getattr(task, "label_dicts", {})
        for side in ("source", "target"):
            lang = getattr(task.cfg, f"{side}_lang", None)
            if lang in label_dicts and getattr(args, f"{side}_label_count", None) is None:
                setattr(args, f"{side}_label_count", len(label_dicts[lang]))
        return super().build_model(args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return SyntaxTransformerEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        if (getattr(cfg, "decoder_syntax", None) or "none") == "none":
            return super().build_decoder(cfg, tgt_dict, embed_tokens)
        return SyntaxTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    @property
    def syntax_features(self):
        """Batch features the model needs (a data-bin without their channels is refused)."""
        return set(self.encoder.syntax_features) | set(getattr(self.decoder, "syntax_features", ()))

    @property
    def optional_syntax_features(self):
        """Batch features the model uses when the data-bin has their channels (training losses)."""
        return set(self.encoder.optional_syntax_features) | set(getattr(self.decoder, "optional_syntax_features", ()))

    @property
    def auxiliary_loss_weights(self) -> Dict[str, float]:
        """{auxiliary loss: its weight}, from the options the chosen mechanisms name for them."""
        weights = {}
        for part in (self.encoder, self.decoder):
            choice = getattr(part, "syntax_choice", None)
            if choice is not None and choice.mechanism is not None:
                for loss, option in choice.mechanism.auxiliary_losses.items():
                    weights[loss] = float(choice.mechanism.option(part.cfg, option))
        return weights

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, **features):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   **features)
        decoder_features = features if isinstance(self.decoder, SyntaxTransformerDecoder) else {}
        x, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                                alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                                src_lengths=src_lengths, return_all_hiddens=return_all_hiddens, **decoder_features)
        losses = {**encoder_out.get("auxiliary_losses", {}), **extra.get("auxiliary_losses", {})}
        if losses:
            extra["auxiliary_losses"] = losses
            extra["auxiliary_loss_weights"] = self.auxiliary_loss_weights
        return x, extra

    def get_normalized_probs(self, net_output, log_probs: bool, sample=None):
        """A decoder mechanism's forbidden tokens get probability 0: one masked_fill over the whole beam."""
        extra = net_output[1] if len(net_output) > 1 else None
        forbidden = extra.get("forbidden_tokens") if isinstance(extra, dict) else None
        if forbidden is not None:
            logits = net_output[0]
            net_output = (logits.masked_fill(forbidden[:, -logits.size(1):], float("-inf")), *net_output[1:])
        return super().get_normalized_probs(net_output, log_probs, sample)


def syntax_defaults(args):
    args.encoder_syntax = getattr(args, "encoder_syntax", None) or "none"
    args.decoder_syntax = getattr(args, "decoder_syntax", None) or "none"
