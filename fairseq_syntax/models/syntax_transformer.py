"""The syntax transformer family: fairseq's transformer whose encoder and decoder syntax mechanisms are chosen
independently by name (--encoder-syntax, --decoder-syntax; see fairseq_syntax/modules/syntax_mechanism.py), and whose
decoder is chosen by name too (--decoder-type: fairseq's causal decoder or BiTran's prefix re-encoding; see
decoders.py).

Each mechanism is built inside the layers it applies to (--encoder-syntax-layers / --decoder-syntax-layers), and
the batch's syntax features reach every layer as a forward argument. With --decoder-type transformer and
--decoder-syntax none the decoder is fairseq's own, unchanged.
"""
import argparse
from dataclasses import fields
from typing import Dict, Optional

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerEncoderBase, TransformerModel, base_architecture
from omegaconf import OmegaConf
from torch import Tensor

from ..data.vocabulary import label_count
from ..modules import DECODER_MECHANISMS, ENCODER_MECHANISMS, MechanismChoice, SyntaxEncoderLayer
from ..modules.syntax_layers import build_mechanism
from ..modules.mechanisms.graph_convolution import upgrade_option_names
from .decoders import DECODERS, PACKED, PREDICTED, SYNTAX_PREFIX, contract_of, split_layer_output, wrap_layer


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
        self.source_label_count = label_count(dictionary)  # handed to the mechanisms sized by the labels
        self._layers_built = 0
        super().__init__(cfg, dictionary, embed_tokens)
        mechanism = self.syntax_choice.mechanism
        self.syntax_features = tuple(mechanism.features_for(cfg)) if mechanism else ()
        self.optional_syntax_features = tuple(mechanism.training_features) if mechanism else ()
        self.auxiliary_loss_names = tuple(mechanism.auxiliary_losses) if mechanism else ()
        self.auxiliary_loss_weights = mechanism.loss_weights(cfg) if mechanism else {}
        self.passed_on_features: tuple = ()  # set by the model: the source features its decoder reads
        self.embedding_mechanism = None
        if mechanism is not None and mechanism.shape == "embedding":
            self.embedding_mechanism = build_mechanism(mechanism, cfg, embed_tokens.embedding_dim,
                                                       cfg.encoder.attention_heads, -1,
                                                       source_label_count=self.source_label_count)

    def build_encoder_layer(self, cfg):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        return wrap_layer(SyntaxEncoderLayer(cfg, cfg, self.syntax_choice.at(index), index,
                                             source_label_count=self.source_label_count), cfg)

    def forward(self, src_tokens, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, **features):
        syntax = _select_features(self.syntax_features, features, "encoder")
        syntax.update({name: features[name] for name in self.optional_syntax_features if name in features})
        # what the decoder's mechanisms read of the source, passed on in encoder_out (beam search gives the decoder
        # no batch features)
        syntax.update(_select_features(self.passed_on_features, features, "decoder"))
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
            x = split_layer_output(output, 1, self.auxiliary_loss_names, auxiliary_losses)
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
        parser.add_argument("--decoder-syntax", type=str, metavar="M1,M2",
                            help="syntax mechanisms of the decoder, comma-separated: none, "
                                 + ", ".join(sorted(DECODER_MECHANISMS)))
        parser.add_argument("--decoder-syntax-layers", type=str, metavar="L1,L2",
                            help="0-based decoder layers that carry it, or 'all' (default: the mechanism's)")
        parser.add_argument("--decoder-type", choices=sorted(DECODERS),
                            help="transformer: fairseq's causal decoder (default); bitran: Choshen & Abend's "
                                 "bidirectional decoder, the prefix re-encoded at every step; dyn_stgcd: Li et "
                                 "al.'s dynamic spatial-temporal graph convolutional decoder")
        for mechanism in {**ENCODER_MECHANISMS, **DECODER_MECHANISMS}.values():
            mechanism.add_args(parser)
        for decoder in DECODERS.values():
            decoder.add_decoder_args(parser)

    @classmethod
    def build_model(cls, args, task):
        if OmegaConf.is_config(args):
            # fairseq-hydra-train hands architectures a DictConfig, and TransformerConfig.from_namespace keeps only
            # its own fields of one: every syntax option would be dropped and PASCAL would train as vanilla
            args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
        syntax_defaults(args)
        upgrade_option_names(args)
        check_decoder_options(args)
        # the encoder and the decoder read the data-bin's labels and word rule from the task's dictionaries
        # (data/vocabulary.py), nothing is written into args; the `source_label_count`, `target_label_count` and
        # `target_word_level` that older checkpoints recorded there are not read (the task's fingerprint check
        # already holds a checkpoint to the dictionaries and label dictionaries it was trained with)
        model = super().build_model(args, task)
        model.encoder.passed_on_features = tuple(contract_of(model.decoder).source_features)
        return model

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return SyntaxTransformerEncoder(cfg, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        decoder_type = getattr(cfg, "decoder_type", None) or "transformer"  # (checked in build_model)
        if decoder_type == "transformer" and (getattr(cfg, "decoder_syntax", None) or "none") == "none":
            return super().build_decoder(cfg, tgt_dict, embed_tokens)  # fairseq's own, unchanged
        return DECODERS[decoder_type](cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    @property
    def syntax_features(self):
        """Batch features the model needs (a data-bin without their channels is refused)."""
        return set(self.encoder.syntax_features) | set(contract_of(self.decoder).syntax_features)

    @property
    def optional_syntax_features(self):
        """Batch features the model uses when the data-bin has their channels (training losses)."""
        return set(self.encoder.optional_syntax_features) | set(contract_of(self.decoder).optional_syntax_features)

    @property
    def auxiliary_loss_weights(self) -> Dict[str, float]:
        """{auxiliary loss: its weight}: what the encoder and the decoder each declare (the criterion's weights)."""
        return {**getattr(self.encoder, "auxiliary_loss_weights", {}),
                **contract_of(self.decoder).auxiliary_loss_weights}

    def forward(self, src_tokens, src_lengths, prev_output_tokens, return_all_hiddens: bool = True,
                features_only: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, **features):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   **features)
        decoder_features = features if contract_of(self.decoder).takes_batch_features else {}
        x, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                                alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                                src_lengths=src_lengths, return_all_hiddens=return_all_hiddens, **decoder_features)
        losses = {**encoder_out.get("auxiliary_losses", {}), **extra.get("auxiliary_losses", {})}
        if losses:
            extra["auxiliary_losses"] = losses
            extra["auxiliary_loss_weights"] = self.auxiliary_loss_weights
        return x, extra

    def get_targets(self, sample, net_output):
        """The targets of the positions the decoder predicted (BiTran's sampled prefixes): packed (1, N) like its
        output where it packs them, else with padding at the others."""
        target = sample["target"]
        extra = net_output[1] if len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        predicted = extra.get(PREDICTED)
        if predicted is None:
            return target
        predicted = predicted[:, :target.size(1)]
        if extra.get(PACKED):
            return target[predicted].unsqueeze(0)
        return target.masked_fill(~predicted, self.decoder.padding_idx)


def syntax_defaults(args):
    args.encoder_syntax = getattr(args, "encoder_syntax", None) or "none"
    args.decoder_syntax = getattr(args, "decoder_syntax", None) or "none"
    args.decoder_type = getattr(args, "decoder_type", None) or "transformer"


def check_decoder_options(args):
    """The chosen decoder's options checked by it; another decoder's option set away from its default refused (it
    would be ignored: `--reencode-every 4` with the causal decoder trains the causal decoder)."""
    if args.decoder_type not in DECODERS:
        raise ValueError(f"--decoder-type {args.decoder_type!r}: not one of {sorted(DECODERS)}")
    DECODERS[args.decoder_type].check_args(args)
    for name, decoder in DECODERS.items():
        if name == args.decoder_type or decoder.options is None:
            continue
        defaults = decoder.options()
        for option in fields(defaults):
            if option.name.startswith("_"):  # FairseqDataclass's _name
                continue
            value = getattr(args, option.name, None)
            if value is not None and value != getattr(defaults, option.name):
                raise ValueError(f"--{option.name.replace('_', '-')} is an option of --decoder-type {name}, not "
                                 f"{args.decoder_type}")


@register_model_architecture("syntax_transformer", "syntax_transformer")
def base_syntax_transformer(args):
    """A syntax transformer with no syntax mechanism: base sizes; choose mechanisms by option."""
    syntax_defaults(args)
    base_architecture(args)
