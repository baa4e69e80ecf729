"""fairseq's Transformer encoder and decoder layers with a syntax mechanism built in place.

The mechanism (if this layer has one) is built in the layer's constructor, so wrappers of the layer (activation
checkpointing, FSDP) see its parameters, and the batch's syntax is an argument of the layer's forward, so a
checkpointed layer recomputes exactly what it computed the first time. A layer whose mechanism has auxiliary
losses returns them after its usual outputs, as plain tensors in the order of `auxiliary_loss_names`, so
checkpointing keeps their graph too.
"""
from typing import Dict, Optional

import torch
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor

from .syntax_mechanism import SyntaxInputs
from .syntax_attention import SyntaxBiasedSelfAttention


def _ordered_losses(names, losses: Dict[str, Tensor]):
    missing = [name for name in names if name not in losses]
    if missing:
        raise ValueError(f"the syntax mechanism declared auxiliary losses {missing} but did not return them")
    return tuple(losses[name] for name in names)


def build_mechanism(mechanism, args, embed_dim: int, num_heads: int, layer_index: int, *,
                    source_label_count: int = 0, target_transitions=None):
    """A mechanism built for its layer (layer_index -1: the side as a whole); one sized by the source labels gets
    their number, one that reads the generated target graph the target dictionary's transition system."""
    return mechanism(args, embed_dim, num_heads, layer_index,
                     **mechanism.vocabulary_arguments(source_label_count, target_transitions))


def _unpack(output):
    """A mechanism returns its output, or (output, {auxiliary loss name: value})."""
    return output if isinstance(output, tuple) else (output, {})


class _SyntaxLayerMixin:
    def _init_syntax(self, args, mechanism, layer_index, source_label_count=0, target_transitions=None):
        # plain attributes, set before nn.Module.__init__ runs build_self_attention
        self.syntax_args, self.mechanism_class, self.layer_index = args, mechanism, layer_index
        self.source_label_count, self.target_transitions = source_label_count, target_transitions

    def _syntax_heads(self, default: int) -> int:
        return self.mechanism_class.attention_heads(self.syntax_args, default) if self.mechanism_class else default

    def _build_mechanism(self, shape: str, embed_dim: int, num_heads: int):
        if self.mechanism_class is None or self.mechanism_class.shape != shape:
            return None
        return build_mechanism(self.mechanism_class, self.syntax_args, embed_dim, num_heads, self.layer_index,
                               source_label_count=self.source_label_count,
                               target_transitions=self.target_transitions)

    def _finish_syntax_init(self, embed_dim, num_heads):
        self.syntax_module = None
        if self.mechanism_class is not None and self.mechanism_class.shape != "score_modifier":
            self.syntax_module = self._build_mechanism(self.mechanism_class.shape, embed_dim, num_heads)
        self.auxiliary_loss_names = tuple(self.mechanism_class.auxiliary_losses) if self.mechanism_class else ()

    def _self_attention_sublayer(self, x, padding_mask, attn_mask, syntax, incremental_state=None, query_start=0,
                                 **attention_kwargs):
        """The self-attention sublayer's output (before dropout and residual) and the mechanism's losses; with
        `query_start`, of the columns from it on only, attending to every column of x."""
        shape = self.mechanism_class.shape if self.mechanism_class else None
        if shape == "self_attention":
            if query_start:
                raise NotImplementedError("a self-attention mechanism computes every column (query_start 0)")
            return _unpack(self.syntax_module(x, syntax, padding_mask, incremental_state=incremental_state))
        query = x[query_start:] if query_start else x
        if query_start and attn_mask is not None:
            attn_mask = attn_mask[query_start:]
        modification = None
        if shape == "score_modifier":
            modification = self.self_attn.score_modifier(query, syntax, padding_mask,
                                                         incremental_state=incremental_state)
        x, _ = self.self_attn(query=query, key=x, value=x, key_padding_mask=padding_mask, attn_mask=attn_mask,
                              incremental_state=incremental_state, score_modification=modification, **attention_kwargs)
        return x, (modification.auxiliary_losses if modification is not None else {})

    def _feed_forward_sublayer(self, x):
        # the same in fairseq's encoder and decoder layers (without the decoder's rarely used scaling options)
        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_fn(self.fc1(x))
        x = self.activation_dropout_module(x)
        x = self.fc2(x)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x

    def _added_sublayer(self, x, padding_mask, syntax, incremental_state=None):
        if self.mechanism_class is None or self.mechanism_class.shape != "added_module":
            return x, {}
        return _unpack(self.syntax_module(x, syntax, padding_mask, incremental_state=incremental_state))


class SyntaxEncoderLayer(_SyntaxLayerMixin, TransformerEncoderLayerBase):
    """fairseq's encoder layer (post- or pre-norm) with an optional syntax mechanism of any shape."""

    def __init__(self, cfg, args=None, mechanism=None, layer_index: int = 0, source_label_count: int = 0):
        self._init_syntax(args, mechanism, layer_index, source_label_count=source_label_count)
        super().__init__(cfg, return_fc=False)
        self._finish_syntax_init(self.embed_dim, self._syntax_heads(cfg.encoder.attention_heads))

    def build_self_attention(self, embed_dim, cfg):
        if self.mechanism_class is not None and self.mechanism_class.shape == "self_attention":
            return None
        num_heads = self._syntax_heads(cfg.encoder.attention_heads)
        return SyntaxBiasedSelfAttention(
            embed_dim, num_heads, dropout=cfg.attention_dropout, self_attention=True, q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
            score_modifier=self._build_mechanism("score_modifier", embed_dim, num_heads))

    def forward(self, x, encoder_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor] = None,
                syntax: Optional[SyntaxInputs] = None):
        # fairseq's TransformerEncoderLayerBase.forward, with the mechanism's sublayers
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        syntax = syntax if syntax is not None else {}
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, losses = self._self_attention_sublayer(x, encoder_padding_mask, attn_mask, syntax, need_weights=False)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, added_losses = self._added_sublayer(x, encoder_padding_mask, syntax)
        losses = {**losses, **added_losses}

        x = self._feed_forward_sublayer(x)
        if self.auxiliary_loss_names:
            return (x, *_ordered_losses(self.auxiliary_loss_names, losses))
        return x


class SyntaxDecoderLayer(_SyntaxLayerMixin, TransformerDecoderLayerBase):
    """fairseq's decoder layer with an optional syntax mechanism of any shape; incremental decoding included (the
    mechanism gets the incremental state and keeps its own per-hypothesis state there)."""

    def __init__(self, cfg, no_encoder_attn=False, args=None, mechanism=None, layer_index: int = 0,
                 target_transitions=None):
        self._init_syntax(args, mechanism, layer_index, target_transitions=target_transitions)
        super().__init__(cfg, no_encoder_attn)
        unsupported = [name for name in ("c_attn", "attn_ln", "ffn_layernorm", "w_resid")
                       if getattr(self, name, None) is not None] + (["cross_self_attention"]
                                                                     if self.cross_self_attention else [])
        if unsupported:
            raise ValueError(f"decoder syntax mechanisms do not support fairseq's {unsupported} options")
        self._finish_syntax_init(self.embed_dim, self._syntax_heads(cfg.decoder.attention_heads))

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        if self.mechanism_class is not None and self.mechanism_class.shape == "self_attention":
            return None
        num_heads = self._syntax_heads(cfg.decoder.attention_heads)
        return SyntaxBiasedSelfAttention(
            embed_dim, num_heads, dropout=cfg.attention_dropout, add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn, self_attention=not cfg.cross_self_attention, q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size, xformers_att_config=cfg.decoder.xformers_att_config,
            score_modifier=self._build_mechanism("score_modifier", embed_dim, num_heads))

    def forward(self, x, encoder_out: Optional[Tensor] = None, encoder_padding_mask: Optional[Tensor] = None,
                incremental_state=None, self_attn_mask: Optional[Tensor] = None,
                self_attn_padding_mask: Optional[Tensor] = None, need_attn: bool = False,
                need_head_weights: bool = False, syntax: Optional[SyntaxInputs] = None, query_start: int = 0,
                encoder_attn_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None):
        # fairseq's TransformerDecoderLayerBase.forward (without its rarely used scaling options), with the
        # mechanism's sublayers. `query_start`: compute the columns from it on only (their self-attention sees
        # every column of x; BiTran's top layer); `encoder_attn_state`: an incremental state holding this layer's
        # encoder-attention keys and values already projected (BiTran's views of one sentence share them).
        if need_head_weights:
            need_attn = True
        if query_start and self.mechanism_class is not None and self.mechanism_class.shape != "score_modifier":
            raise NotImplementedError("query_start: only score-modifying mechanisms compute some columns alone")
        syntax = syntax if syntax is not None else {}
        residual = x[query_start:] if query_start else x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, losses = self._self_attention_sublayer(x, self_attn_padding_mask, self_attn_mask, syntax,
                                                  incremental_state=incremental_state, query_start=query_start,
                                                  need_weights=False)
        x = self.dropout_module(x)
        x = self.residual_connection(x, residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x, added_losses = self._added_sublayer(x, self_attn_padding_mask, syntax, incremental_state)
        losses = {**losses, **added_losses}

        attn = None
        if self.encoder_attn is not None and encoder_out is not None:
            residual = x
            if self.normalize_before:
                x = self.encoder_attn_layer_norm(x)
            x, attn = self.encoder_attn(query=x, key=encoder_out, value=encoder_out,
                                        key_padding_mask=encoder_padding_mask,
                                        incremental_state=(encoder_attn_state if encoder_attn_state is not None
                                                           else incremental_state),
                                        static_kv=True,
                                        need_weights=need_attn or (not self.training and self.need_attn),
                                        need_head_weights=need_head_weights)
            x = self.dropout_module(x)
            x = self.residual_connection(x, residual)
            if not self.normalize_before:
                x = self.encoder_attn_layer_norm(x)

        x = self._feed_forward_sublayer(x)
        return (x, attn, None, *_ordered_losses(self.auxiliary_loss_names, losses))
