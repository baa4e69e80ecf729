"""Toy syntax mechanisms, one of each shape, and a toy decoder of its own (toy_decoder.py), registered the way a
method's module registers itself. Tests load this directory with `--user-dir tests/toy_plugin` (it imports
fairseq_syntax first), so the registries, the layer wiring, the criterion and the generator hook are exercised
through the real fairseq commands before the real methods exist. The toys are deliberately simple; what they
compute is checked by the tests, not learned."""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from fairseq.incremental_decoding_utils import with_incremental_state
from fairseq.models import register_model_architecture

import fairseq_syntax  # noqa: F401  (the plugin itself: task, model family, criterion)
from fairseq_syntax.models.presets.sizes import TINY, set_default, set_sizes
from fairseq_syntax.models.syntax_transformer import syntax_defaults
from fairseq_syntax.modules import (
    ScoreModification, SyntaxMechanism, register_decoder_mechanism, register_encoder_mechanism,
)
from fairseq.models.transformer.transformer_legacy import base_architecture

from . import toy_decoder  # noqa: F401  (registers --decoder-type toy_graph_gru)


@register_encoder_mechanism("toy_parent_bias")
class ToyParentBias(SyntaxMechanism):
    """Score modifier: adds a learned scalar to the score of each query's parent (first piece), in 2 heads of a
    layer with twice the model's heads."""

    shape = "score_modifier"
    features = ("src_parent_first",)

    @classmethod
    def attention_heads(cls, args, default):
        return 2 * default  # its layers have twice the model's heads (as LDD's layer has 16 of 8)

    def __init__(self, args, embed_dim, num_heads, layer_index):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.bias = nn.Parameter(torch.tensor(1.5))

    def forward(self, x, syntax, key_padding_mask, incremental_state=None):
        parents = syntax["src_parent_first"]  # (B, T) columns
        matrix = F.one_hot(parents, x.size(0)).to(x.dtype) * self.bias
        return ScoreModification(matrix.unsqueeze(1), num_heads=2, mode="add")


@register_encoder_mechanism("toy_label_embedding")
class ToyLabelEmbedding(SyntaxMechanism):
    """Added module: adds an embedding of each piece's dependency label after self-attention; its auxiliary loss
    is the summed squared norm of what it added."""

    shape = "added_module"
    features = ("src_labels",)
    auxiliary_losses = {"toy_label_norm": "toy_label_loss_weight"}
    options = dataclass(type("ToyLabelOptions", (FairseqDataclass,), {
        "__annotations__": {"toy_label_loss_weight": float}, "toy_label_loss_weight": 1.0}))

    def __init__(self, args, embed_dim, num_heads, layer_index):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.embedding = nn.Embedding(64, embed_dim, padding_idx=0)

    def forward(self, x, syntax, padding_mask, incremental_state=None):
        added = self.embedding(syntax["src_labels"]).transpose(0, 1)  # (T, B, C)
        return x + added, {"toy_label_norm": added.float().pow(2).sum()}


@register_encoder_mechanism("toy_parent_mixing")
class ToyParentMixing(SyntaxMechanism):
    """Replaces self-attention: each piece's sublayer output is a projection of its parent's state."""

    shape = "self_attention"
    features = ("src_parent_first",)

    def __init__(self, args, embed_dim, num_heads, layer_index):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.projection = nn.Linear(embed_dim, embed_dim)

    def forward(self, x, syntax, padding_mask, incremental_state=None):
        parents = syntax["src_parent_first"].t()  # (T, B)
        gathered = x.gather(0, parents.unsqueeze(-1).expand_as(x))
        return self.projection(gathered)


@with_incremental_state
class NoRecentRepeat(nn.Module):
    """Token constraint: in beam search, a hypothesis may not repeat either of its last two tokens. The token
    before the last one is kept in the incremental state (so beam search must reorder it correctly); the last
    one is read from the prefix."""

    def forward(self, prev_output_tokens, incremental_state=None):
        if incremental_state is None:
            return None  # gold targets may repeat tokens: training is unconstrained
        last = prev_output_tokens[:, -1].clone()  # beam search rewrites its token buffer in place: no views
        state = self.get_incremental_state(incremental_state, "before_last")
        vocabulary = self.vocabulary_size
        forbidden = F.one_hot(last, vocabulary).bool()
        if state is not None:
            forbidden |= F.one_hot(state["token"], vocabulary).bool()
        self.set_incremental_state(incremental_state, "before_last", {"token": last})
        return forbidden.unsqueeze(1)  # (B, 1, V)

    def reorder_incremental_state(self, incremental_state, new_order):
        state = self.get_incremental_state(incremental_state, "before_last")
        if state is not None:
            self.set_incremental_state(incremental_state, "before_last",
                                       {"token": state["token"].index_select(0, new_order)})


@register_decoder_mechanism("toy_label_tagger")
class ToyLabelTagger(SyntaxMechanism):
    """Decoder added module + token constraint: after self-attention, a linear tagger predicts the dependency label
    of the target piece each position emits (tgt_labels, target side, training only); its cross-entropy is an
    auxiliary loss. Adds nothing to the states, so it only shapes training through the loss."""

    shape = "added_module"
    features = ("tgt_labels",)
    auxiliary_losses = {"toy_tagger": "toy_tagger_loss_weight"}
    options = dataclass(type("ToyTaggerOptions", (FairseqDataclass,), {
        "__annotations__": {"toy_tagger_loss_weight": float}, "toy_tagger_loss_weight": 1.0}))

    @classmethod
    def build_token_constraint(cls, args, dictionary):
        constraint = NoRecentRepeat()
        constraint.vocabulary_size = len(dictionary)
        return constraint

    def __init__(self, args, embed_dim, num_heads, layer_index):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.tagger = nn.Linear(embed_dim, 64)

    def forward(self, x, syntax, padding_mask, incremental_state=None):
        labels = syntax.get("tgt_labels")
        if labels is None:  # beam search: no target parse
            return x, {"toy_tagger": x.new_zeros(())}
        logits = self.tagger(x).transpose(0, 1).float()  # (B, T, 64)
        loss = F.cross_entropy(logits.reshape(-1, 64), labels.reshape(-1), ignore_index=0, reduction="sum")
        return x, {"toy_tagger": loss}


@register_decoder_mechanism("toy_recency")
class ToyRecency(SyntaxMechanism):
    """Decoder score modifier: subtracts a learned multiple of the distance to each key in every head (needs no
    syntax input, so it works the same in training and in incremental decoding)."""

    shape = "score_modifier"
    default_layers = "all"

    def __init__(self, args, embed_dim, num_heads, layer_index):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.num_heads = num_heads
        self.slope = nn.Parameter(torch.tensor(0.3))

    def forward(self, x, syntax, key_padding_mask, incremental_state=None):
        steps = x.size(0)
        done = 0
        if incremental_state is not None:
            state = self.get_incremental_state(incremental_state, "steps")
            done = int(state["count"]) if state is not None else 0
            self.set_incremental_state(incremental_state, "steps", {"count": torch.tensor(done + steps)})
        queries = torch.arange(done, done + steps, device=x.device, dtype=torch.float32)
        keys = torch.arange(done + steps, device=x.device, dtype=torch.float32)
        distance = (queries[:, None] - keys[None, :]).abs()
        return ScoreModification((-self.slope * distance)[None, None], self.num_heads, mode="add")


ToyRecency = with_incremental_state(ToyRecency)


@register_decoder_mechanism("toy_source_words")
class ToySourceWords(SyntaxMechanism):
    """Decoder score modifier that reads a source feature (the source's word count, from src_word_ids): adds a
    learned multiple of it to every score of one head. Its feature must reach the decoder in beam search too."""

    shape = "score_modifier"
    features = ("src_word_ids",)
    default_layers = "0"

    def __init__(self, args, embed_dim, num_heads, layer_index):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.scale = nn.Parameter(torch.tensor(0.01))

    def forward(self, x, syntax, key_padding_mask, incremental_state=None):
        words = (syntax["src_word_ids"].max(dim=1).values + 1).to(torch.float32)  # (B,)
        return ScoreModification((self.scale * words)[:, None, None, None], num_heads=1, mode="add")


@register_model_architecture("syntax_transformer", "toy_syntax_tiny")
def toy_syntax_tiny(args):
    set_sizes(args, **TINY)
    syntax_defaults(args)
    base_architecture(args)


@register_model_architecture("syntax_transformer", "toy_graph_gru_tiny")
def toy_graph_gru_tiny(args):
    """The toy sizes with the toy graph decoder: a preset chooses a decoder by giving --decoder-type its default
    (a command-line --decoder-type still wins)."""
    set_default(args, "decoder_type", "toy_graph_gru")
    toy_syntax_tiny(args)
