"""Running torch's (time-first) RNNs, LSTM or GRU, uni- or bidirectional, one or more layers, over fairseq batches
padded on either side: the one helper of the recurrent encoder (models/syntax_lstm.py) and of the BiGRU of the
`birnn_gcn` mechanism (graph_convolution.py)."""
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

RNNState = Union[Tensor, Tuple[Tensor, Tensor]]  # h_n (GRU) or (h_n, c_n) (LSTM), (layers x directions, B, H)


def padded_rnn(rnn: nn.RNNBase, x: Tensor, padding_mask: Optional[Tensor],
               enforce_sorted: bool = False) -> Tuple[Tensor, RNNState]:
    """Run `rnn` over each sentence's own columns only, whether the batch is padded on the left (fairseq's source
    side), on the right or not at all: each row's real columns are moved to the front in order (a stable sort of
    the mask, as fairseq's padding conversion does for a left-padded row), packed with their lengths, and the
    outputs moved back to their columns. x (T, B, C), padding_mask (B, T) True at padding (None: no padding).

    Returns the outputs (T, B, directions x H) in the columns of x, 0 at padding, and the final state as `rnn`
    returns it, in batch order: the state after each row's last real column (forward) or first (backward), so
    padding never reaches it. `enforce_sorted`: rows sorted by decreasing length (pack_padded_sequence's check;
    the result is the same either way). A row of padding only is run over its first column (packing needs a length
    of at least 1); that column is padding, which the callers mask. The lengths go to the CPU for the packing: the
    one device sync, which also tells whether there is any padding (none: the RNN runs on x as it is)."""
    if padding_mask is None:
        return rnn(x)
    width = x.size(0)
    lengths = (~padding_mask).sum(dim=1).clamp(min=1).cpu()
    if not bool((lengths < width).any()):
        return rnn(x)
    index = torch.argsort(padding_mask.to(torch.uint8), dim=1, stable=True).t().unsqueeze(-1)  # (T, B, 1)
    front = x.gather(0, index.expand_as(x))
    packed, state = rnn(pack_padded_sequence(front, lengths, enforce_sorted=enforce_sorted))
    out, _ = pad_packed_sequence(packed, total_length=width)  # (T, B, C'), zeros past each length
    return out.new_zeros(out.shape).scatter(0, index.expand_as(out), out), state
