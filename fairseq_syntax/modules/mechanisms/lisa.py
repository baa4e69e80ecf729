"""LISA: linguistically-informed self-attention (Strubell et al., 2018), adapted to NMT and subwords as in
Bugliarello & Okazaki (2020), appendix A.2.

In one head of its layer, queries and keys come from feed-forward layers (linear + ReLU) of the layer input, and
the scaled dot product is replaced by a biaffine operator: score(t, j) = q_t U k_j + u . k_j (the second term is
the prior of j being anyone's parent, as in Dozat & Manning's biaffine parser). Row t of that head's attention is
supervised to put its mass on t's parent, the first piece of the parent word (the root points at itself): the
auxiliary loss is -sum_t log p(parent_t | t) over the source pieces (EOS and padding excluded). The parse is needed
in training only: without it the head attends by its own scores and there is no loss, so a LISA model translates
unparsed text.
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from torch import Tensor

from ..syntax_mechanism import ScoreModification, SyntaxMechanism, register_encoder_mechanism

LOSS = "lisa_parent"


@dataclass
class LisaOptions(FairseqDataclass):
    lisa_head: int = field(default=0, metadata={"help": "the supervised head of the LISA layer (0-based)"})
    lisa_loss_weight: float = field(default=1.0, metadata={"help": "weight of the parent loss (paper: 1)"})


def biaffine_scores(queries: Tensor, keys: Tensor, bilinear: Tensor, key_prior: Tensor) -> Tensor:
    """(B, T, d) queries and keys -> (B, T, T) scores q_t U k_j + u . k_j."""
    return torch.matmul(torch.matmul(queries, bilinear), keys.transpose(1, 2)) + torch.matmul(keys, key_prior)[:, None]


def parent_loss(scores: Tensor, parents: Tensor, is_piece: Tensor, key_padding_mask) -> Tensor:
    """-sum over pieces of log softmax(scores[t])[parent_t], in float32; padded keys take no mass."""
    scores = scores.float()
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, :].bool(), float("-inf"))
    chosen = F.log_softmax(scores, dim=-1).gather(-1, parents.unsqueeze(-1)).squeeze(-1)
    return -torch.where(is_piece, chosen, torch.zeros_like(chosen)).sum()


@register_encoder_mechanism("lisa")
class LisaParentAttention(SyntaxMechanism):
    shape = "score_modifier"
    training_features = ("src_parent_first", "src_word_ids")
    auxiliary_losses = {LOSS: "lisa_loss_weight"}
    options = LisaOptions

    def __init__(self, args, embed_dim: int, num_heads: int, layer_index: int):
        super().__init__(args, embed_dim, num_heads, layer_index)
        self.head = self.option(args, "lisa_head")
        if not 0 <= self.head < num_heads:
            raise ValueError(f"--lisa-head must be in 0..{num_heads - 1}, got {self.head}")
        head_dim = embed_dim // num_heads
        self.query = nn.Linear(embed_dim, head_dim)
        self.key = nn.Linear(embed_dim, head_dim)
        self.bilinear = nn.Parameter(torch.empty(head_dim, head_dim))
        self.key_prior = nn.Parameter(torch.zeros(head_dim))
        nn.init.xavier_uniform_(self.bilinear)
        self.num_syntax_heads = 1  # for the evaluator's attention plots

    def forward(self, x: Tensor, syntax, key_padding_mask, incremental_state=None) -> ScoreModification:
        queries = F.relu(self.query(x)).transpose(0, 1)  # (B, T, d)
        keys = F.relu(self.key(x)).transpose(0, 1)
        scores = biaffine_scores(queries, keys, self.bilinear, self.key_prior)
        if "src_parent_first" in syntax:
            loss = parent_loss(scores, syntax["src_parent_first"], syntax["src_word_ids"] >= 0, key_padding_mask)
        else:
            loss = scores.new_zeros((), dtype=torch.float32)
        return ScoreModification(scores.unsqueeze(1), num_heads=1, mode="replace", first_head=self.head,
                                 auxiliary_losses={LOSS: loss})
