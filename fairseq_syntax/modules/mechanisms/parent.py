"""PARENT (Choshen & Abend, §4 "Attending to Parent Token"): one decoder self-attention head attends only to the
token itself and its parent(s) in the graph generated so far.

"For a token o_i, we mask all but o_i and its parents": the parents of a token are the sources of the edges into
it in the prefix graph (data/transitions/function.py, §3's table): a piece's parents are the pieces of its head word and
the arc token that attached it; an arc token's parent is its head word's pieces. Which edges a column may use is
the decoder context's (decoder_context.py): in BiTran's re-encoded prefix every edge of the prefix, in fairseq's
causal decoder those its own step knew. The head's other scores are -inf; its own key always stays, so a token with
no parent yet attends to itself ("to allow ignoring it when preferable or when no parent was generated").

A ScoreModification of mode "add" (0 / -inf) on one head (--parent-head, 0-based) of every layer it is in (default:
all layers; the paper replaces one of eight heads); no parameters.
"""
from dataclasses import dataclass, field

import torch
from fairseq.dataclass import FairseqDataclass
from torch import Tensor

from ..syntax_mechanism import DECODER_CONTEXT, ScoreModification, SyntaxMechanism, register_decoder_mechanism


@dataclass
class ParentOptions(FairseqDataclass):
    parent_head: int = field(default=0, metadata={
        "help": "PARENT: the decoder self-attention head (0-based) that attends only to each token and its parents"})


def parent_mask(visible: Tensor, query_columns: Tensor) -> Tensor:
    """(B, Tq, T) bool: the keys each query may attend to: its visible parents and itself."""
    keys = torch.arange(visible.size(-1), device=visible.device)
    return visible | (keys.view(1, 1, -1) == query_columns.view(1, -1, 1))


@register_decoder_mechanism("parent")
class ParentAttention(SyntaxMechanism):
    shape = "score_modifier"
    needs_target_transitions = True
    default_layers = "all"
    options = ParentOptions

    @classmethod
    def check_args(cls, args):
        head, heads = int(cls.option(args, "parent_head")), getattr(args, "decoder_attention_heads", None)
        if head < 0 or (heads is not None and head >= heads):
            raise ValueError(f"--parent-head {head}: the decoder has {heads} attention heads (0-based)")

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int, target_transitions=None):
        super().__init__(args, embed_dim, num_heads, layer_index)  # (its graph comes with the decoder context)
        self.head = int(self.option(args, "parent_head"))

    def forward(self, x: Tensor, syntax, key_padding_mask, incremental_state=None) -> ScoreModification:
        context = syntax[DECODER_CONTEXT]
        width = context.edge_columns.size(1)
        # in incremental decoding the queries are the newest columns only
        query_columns = torch.arange(width - x.size(0), width, device=x.device)
        allowed = parent_mask(context.visible(query_columns), query_columns)
        if key_padding_mask is not None:  # a padding query (masked as a key) would have no key left: leave it free
            # (the mask's last columns are the queries': in incremental decoding it holds the newest columns only)
            allowed = allowed | key_padding_mask[:, -x.size(0):].to(torch.bool).unsqueeze(-1)
        blocked = torch.zeros(allowed.shape, dtype=torch.float32, device=x.device).masked_fill_(~allowed,
                                                                                                float("-inf"))
        return ScoreModification(blocked.unsqueeze(1), num_heads=1, mode="add", first_head=self.head)
