"""The RNNsearch decoder of Bahdanau et al. (2015, §3.1 and appendix A.2.2), the decoder of the RGSE paper's recurrent
rows (Ding & Tao §3.1: "GRU, as we follow the Recurrent NMT model settings of Bahdanau et al."), on fairseq's
FairseqIncrementalDecoder: the `--rnn-cell gru` form of the `syntax_lstm` model (models/syntax_lstm.py).

At target step t (y_0 = EOS, fairseq's first prev_output_token), over the encoder's annotations h_j (T, B, C):
  s_0 = tanh(W_s h<-_1)                          h<-_1: the backward encoder RNN's state at the first source token
  c_t = sum_j a_tj h_j, a_t = softmax_j(v^T tanh(W_a s_{t-1} + U_a h_j + b_a))      (modules/additive_attention.py,
                                                 over each sentence's own columns: the encoder's padding mask)
  s_t = GRU([E y_{t-1}; c_t], s_{t-1})           one GRU cell of --decoder-hidden-size units
  t~  = U_o s_t + V_o E y_{t-1} + C_o c_t        2 l units, l = --decoder-out-embed-dim
  t   = maxout(t~): t_k = max(t~_{2k-1}, t~_{2k})   (Bahdanau's deep output with a single maxout hidden layer)
  p(y_t | y_<t, x) = softmax(W_o t)              W_o: the output embeddings (shared with E under
                                                 --share-decoder-input-output-embed / --share-all-embeddings)

Where the papers leave a choice (Ding & Tao give none of these; the choices of Bahdanau et al. unless said):
  - h<-_1 is the backward state of the top encoder layer (the 2-layer baseline's too), the BiRNN's own state: the
    syntax layer over the annotations has no sentence state (the LSTM form also starts from the BiRNN's final
    states). A unidirectional encoder gives its forward state after the last token instead.
  - the output reads s_t, as Bahdanau et al.'s eq. (4), p(y_t) = g(y_{t-1}, s_t, c_t); their appendix A.2.2 writes
    U_o s_{t-1}.
  - the GRU is torch's GRUCell: its candidate state puts the reset gate after the recurrent product,
    tanh(W x + b + r * (U s + b')), cuDNN's form, where Bahdanau et al. write tanh(W x + U (r * s)) (Cho et al.'s);
    the gates and the update are the same. Biases everywhere (Bahdanau et al. leave them out of their equations).
  - the attention has --decoder-hidden-size units (Bahdanau et al.: n' = n).
  - dropout (Bahdanau et al. use none; fairseq's lstm options): --decoder-dropout-in on the target embeddings E y,
    --decoder-dropout-out on t before W_o.
  - initialisation: fairseq's lstm model's, uniform(-0.1, 0.1) for every weight and bias of the decoder (not
    Bahdanau et al.'s orthogonal and Gaussian ones); embeddings as fairseq's.
  - one decoder layer (Bahdanau et al.'s); --decoder-layers other than 1 is refused by the model.

Incremental decoding (beam search): the incremental state (fairseq's get/set_incremental_state) holds s_{t-1} (B, H)
and the projected annotations U_a h (T, B, A), computed once per sentence; reorder_incremental_state selects the
rows of both. decoder(prefix) gives for every position what step-by-step decoding gives.
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder
from fairseq.models.lstm import DEFAULT_MAX_TARGET_POSITIONS, Embedding
from fairseq.modules import FairseqDropout
from torch import Tensor

from ..modules.additive_attention import AdditiveAttention

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


class BahdanauGRUDecoder(FairseqIncrementalDecoder):
    """The decoder of the module docstring. encoder_out: fairseq's LSTM encoder tuple (annotations (T, B, C), final
    hidden states (layers, B, directions x encoder_hidden_size), unused, padding mask (T, B))."""

    def __init__(self, dictionary, embed_dim: int, hidden_size: int, out_embed_dim: int, encoder_output_units: int,
                 encoder_hidden_size: int, encoder_bidirectional: bool, dropout_in: float = 0.0,
                 dropout_out: float = 0.0, pretrained_embed: Optional[nn.Embedding] = None,
                 share_input_output_embed: bool = False, max_target_positions: int = DEFAULT_MAX_TARGET_POSITIONS):
        super().__init__(dictionary)
        self.dropout_in_module = FairseqDropout(dropout_in, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout_out, module_name=self.__class__.__name__)
        self.hidden_size, self.out_embed_dim = hidden_size, out_embed_dim
        self.encoder_hidden_size, self.encoder_bidirectional = encoder_hidden_size, encoder_bidirectional
        self.max_target_positions = max_target_positions
        self.share_input_output_embed = share_input_output_embed
        self.need_attn = True
        self.embed_tokens = (pretrained_embed if pretrained_embed is not None
                             else Embedding(len(dictionary), embed_dim, dictionary.pad()))
        self.init_state = nn.Linear(encoder_hidden_size, hidden_size)  # W_s
        self.attention = AdditiveAttention(hidden_size, encoder_output_units, hidden_size)
        self.cell = nn.GRUCell(embed_dim + encoder_output_units, hidden_size)
        self.deep_output = nn.Linear(hidden_size + encoder_output_units + embed_dim, 2 * out_embed_dim)  # U_o C_o V_o
        self.fc_out = None if share_input_output_embed else nn.Linear(out_embed_dim, len(dictionary))  # W_o
        for name, parameter in self.named_parameters():
            if not name.startswith("embed_tokens."):
                nn.init.uniform_(parameter, -0.1, 0.1)

    def initial_state(self, final_hiddens: Tensor) -> Tensor:
        """s_0 = tanh(W_s h<-_1) from the encoder's final states (layers, B, directions x H)."""
        top = final_hiddens[-1]
        first = top[:, self.encoder_hidden_size:] if self.encoder_bidirectional else top
        return torch.tanh(self.init_state(first))

    def forward(self, prev_output_tokens: Tensor, encoder_out: Tuple[Tensor, ...],
                incremental_state: Optional[IncrementalState] = None, **kwargs):
        x, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(x), attn

    def extract_features(self, prev_output_tokens: Tensor, encoder_out: Tuple[Tensor, ...],
                         incremental_state: Optional[IncrementalState] = None, **kwargs):
        """t (B, T, out_embed_dim), before W_o, and the attention weights (B, T, source columns) in evaluation
        (None in training or after make_generation_fast_)."""
        annotations, final_hiddens, padding_mask = encoder_out[0], encoder_out[1], encoder_out[3]
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            state, keys = cached["state"], cached["keys"]
        else:
            state, keys = self.initial_state(final_hiddens), self.attention.project_keys(annotations)
        embedded = self.dropout_in_module(self.embed_tokens(prev_output_tokens)).transpose(0, 1)  # (T, B, E)
        states, contexts, weights = [], [], []
        for previous in embedded:
            context, alignment = self.attention(state, keys, annotations, padding_mask)
            state = self.cell(torch.cat([previous, context], dim=1), state)
            states.append(state)
            contexts.append(context)
            weights.append(alignment)
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "cached_state", {"state": state, "keys": keys})
        deep = self.deep_output(torch.cat([torch.stack(states), torch.stack(contexts), embedded], dim=-1))
        x = deep.view(*deep.shape[:-1], self.out_embed_dim, 2).amax(dim=-1)  # maxout over pairs
        x = self.dropout_out_module(x).transpose(0, 1)
        attn = torch.stack(weights).permute(2, 0, 1) if not self.training and self.need_attn else None
        return x, attn

    def output_layer(self, x: Tensor) -> Tensor:
        return F.linear(x, self.embed_tokens.weight) if self.fc_out is None else self.fc_out(x)

    def reorder_incremental_state(self, incremental_state: IncrementalState, new_order: Tensor):
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        self.set_incremental_state(incremental_state, "cached_state", {
            "state": cached["state"].index_select(0, new_order), "keys": cached["keys"].index_select(1, new_order)})

    def max_positions(self):
        return self.max_target_positions

    def make_generation_fast_(self, need_attn: bool = False, **kwargs):
        self.need_attn = need_attn
