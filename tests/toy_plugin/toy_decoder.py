"""A toy decoder of its own (`--decoder-type toy_graph_gru`), built only from the decoder contract
(fairseq_syntax/models/decoders.py: SyntaxDecoder, register_decoder, the `extra` keys) and fairseq's incremental
decoder base: the worked example of a new decoder that generates a graph with its translation. Deliberately
simple; tests/test_toy_decoder.py checks what it computes, nothing of it is meant to translate well.

  states   a causal GRU over the embedded prefix: h_c for every column c (0 = BOS, which stands for the root)
  graph    arc scores s[c, j] = (W_dep h_c) . (W_head h_j), row = dependent: extra[ADJACENCY]
  readout  at column t, tanh(W [h_t; sum_{j <= t} softmax_j(s[t, j]) h_j; attention of h_t to the encoder])
           to the vocabulary (tied to the embeddings under --share-decoder-input-output-embed)

The prefix mix reads the arc scores, so the translation loss trains them (there is no graph loss). Every column
depends on the columns before it only, so beam search keeps the GRU's hidden state and the columns' states in the
incremental state and computes the newest column alone, which gives what the full forward gives."""
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq.dataclass import FairseqDataclass
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from fairseq_syntax.models.decoders import ADJACENCY, SyntaxDecoder, WordHeads, register_decoder
from fairseq_syntax.modules.dyn_stgcd.target_graph import predicted_tree

STATE_KEY = "toy_graph_gru"


@dataclass
class ToyGraphOptions(FairseqDataclass):
    # (every registered decoder's options are on the parser whichever --decoder-type is chosen: the name carries
    # the decoder's)
    toy_graph_hidden_dim: Optional[int] = field(default=None, metadata={
        "help": "width of the toy graph decoder's GRU states (default: --decoder-embed-dim)"})


@register_decoder("toy_graph_gru")
class ToyGraphDecoder(FairseqIncrementalDecoder, SyntaxDecoder):
    predicts_graph = True  # --trees-out writes the trees of hypothesis_trees

    options = ToyGraphOptions

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False):
        super().__init__(dictionary)
        embed_dim = embed_tokens.embedding_dim
        hidden = int(self.option(cfg, "toy_graph_hidden_dim") or embed_dim)
        self.padding_idx = embed_tokens.padding_idx
        self.max_target_positions = cfg.max_target_positions
        self.embed_tokens = embed_tokens
        self.dropout = nn.Dropout(cfg.dropout)
        self.gru = nn.GRU(embed_dim, hidden, batch_first=True)
        self.arc_dependent = nn.Linear(hidden, hidden, bias=False)
        self.arc_head = nn.Linear(hidden, hidden, bias=False)
        encoder_dim = cfg.encoder.embed_dim
        self.source_query = None if no_encoder_attn else nn.Linear(hidden, encoder_dim, bias=False)
        self.combine = nn.Linear(2 * hidden + (0 if no_encoder_attn else encoder_dim), embed_dim)
        self.output_projection = nn.Linear(embed_dim, len(dictionary), bias=False)
        if cfg.share_decoder_input_output_embed:
            self.output_projection.weight = embed_tokens.weight

    def max_positions(self):
        return self.max_target_positions

    # ---- forward ------------------------------------------------------------------------------------------------

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only: bool = False,
                **unused):
        # `unused`: the syntax transformer's keywords of fairseq's decoder (alignment_layer, src_lengths, ...)
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **unused):
        embedded = self.dropout(self.embed_tokens(prev_output_tokens))
        if incremental_state is None:
            states, _ = self.gru(embedded)
            return self.readout(states, encoder_out, first_query=0)
        kept = self.get_incremental_state(incremental_state, STATE_KEY)
        done = 0 if kept is None else kept["states"].size(1)
        if done != prev_output_tokens.size(1) - 1:  # a new search, or a prefix given whole: run it from BOS
            kept, done = None, 0
        new_states, hidden = self.gru(embedded[:, done:], None if kept is None else kept["hidden"])
        states = new_states if kept is None else torch.cat([kept["states"], new_states], dim=1)
        self.set_incremental_state(incremental_state, STATE_KEY, {"hidden": hidden, "states": states})
        return self.readout(states, encoder_out, first_query=done)

    def readout(self, states: Tensor, encoder_out, first_query: int) -> Tuple[Tensor, Dict]:
        """The output vectors of the columns first_query.. of `states` (B, n, H), the columns' arc scores (B, n,
        n) and the encoder attention of those columns (B, n - first_query, S)."""
        width = states.size(1)
        scores = self.arc_dependent(states) @ self.arc_head(states).transpose(1, 2)
        later = torch.ones(width, width, dtype=torch.bool, device=states.device).triu(diagonal=1)
        prefix_weights = scores[:, first_query:].masked_fill(later[first_query:], float("-inf")).softmax(dim=-1)
        queries = states[:, first_query:]
        parts = [queries, prefix_weights @ states]
        attention = None
        if self.source_query is not None:
            source_mix, attention = self.source_attention(queries, encoder_out)
            parts.append(source_mix)
        x = torch.tanh(self.combine(torch.cat(parts, dim=-1)))
        return x, {"attn": [attention], "inner_states": [x.transpose(0, 1)], ADJACENCY: scores}

    def source_attention(self, queries: Tensor, encoder_out) -> Tuple[Tensor, Tensor]:
        encoder = encoder_out["encoder_out"][0].transpose(0, 1)  # (B, S, C)
        logits = self.source_query(queries) @ encoder.transpose(1, 2) / encoder.size(-1) ** 0.5
        padding = encoder_out["encoder_padding_mask"][0] if encoder_out.get("encoder_padding_mask") else None
        if padding is not None:
            logits = logits.masked_fill(padding.unsqueeze(1), float("-inf"))
        weights = logits.softmax(dim=-1)
        return weights @ encoder, weights

    def output_layer(self, features):
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order):
        kept = self.get_incremental_state(incremental_state, STATE_KEY)
        if kept is not None:
            self.set_incremental_state(incremental_state, STATE_KEY, {
                "hidden": kept["hidden"].index_select(1, new_order),  # (layers, B, H)
                "states": kept["states"].index_select(0, new_order)})

    # ---- the generated graph --------------------------------------------------------------------------------------

    def hypothesis_trees(self, encoder_out, hypotheses: Sequence[Tensor], tree: bool = True) -> List[WordHeads]:
        """Each hypothesis scored whole (BOS, then its tokens without EOS): its arc scores over BOS and its pieces,
        read as heads over its words by predicted_tree (the maximum spanning tree, or without `tree` each word's
        argmax)."""
        eos, pad = self.dictionary.eos(), self.dictionary.pad()
        pieces = [tokens[:-1] if len(tokens) and int(tokens[-1]) == eos else tokens for tokens in hypotheses]
        prev = torch.full((len(pieces), 1 + max(len(p) for p in pieces)), pad, dtype=torch.long,
                          device=self.output_projection.weight.device)
        prev[:, 0] = eos
        for row, tokens in enumerate(pieces):
            prev[row, 1:1 + len(tokens)] = tokens
        with torch.no_grad():
            _, extra = self.extract_features(prev, encoder_out)
        return [predicted_tree(extra[ADJACENCY][row, :len(tokens) + 1, :len(tokens) + 1],
                               [self.dictionary[i] for i in tokens.tolist()], tree=tree)
                for row, tokens in enumerate(pieces)]

