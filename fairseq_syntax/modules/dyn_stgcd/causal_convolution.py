"""The dilated causal convolution of Dyn-STGCD's temporal layer (Li et al., §3.4 and appendix A.3, after the TCN
of Bai et al., 2018), over the target positions of a decoder, in training (all positions at once) and in
incremental decoding (one new position per step, with the inputs it still needs kept per hypothesis):

    H(t) = (Y *_d f)(t) = sum_{i=0}^{h-1} f(i) . Y_{t - d i}        (Y_{t'} = 0 for t' < 0)

with h the kernel size and d the dilation: output t reads inputs t, t - d, ..., t - (h - 1) d and nothing later.
The parameters are a torch Conv1d's (with (h - 1) d zeros on the left it computes exactly this; its kernel index
runs the other way: f(i) is weight[..., h - 1 - i]), but the product runs as one GEMM over the h shifted inputs
side by side: Dyn-STGCD calls it at every step with a new length and batch, where oneDNN's convolution made a new
primitive per shape (docs/results.md: 8-23% of a training step saved). Padded positions are zeroed on the way in
(left padding must not leak into the first real positions; fairseq pads targets on the right in training, but a
prefix given whole at generation may not).
Incremental state: the last (h - 1) d inputs of each hypothesis, reordered with the beam.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.incremental_decoding_utils import with_incremental_state
from torch import Tensor


@with_incremental_state
class DilatedCausalConvolution(nn.Module):
    """(B, T, C_in) -> (B, T, C_out): one dilated causal convolution (kernel size h, dilation d)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1):
        super().__init__()
        if kernel_size < 1 or dilation < 1:
            raise ValueError(f"dilated causal convolution: kernel size {kernel_size} and dilation {dilation} must "
                             "be at least 1")
        self.kernel_size, self.dilation = kernel_size, dilation
        self.context = (kernel_size - 1) * dilation  # the past inputs an output reads
        self.convolution = nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation)

    def forward(self, x: Tensor, padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None) -> Tensor:
        """x (B, T, C_in); padding_mask (B, T) True on padding. With `incremental_state`, x holds the newest
        position(s) only and the kept inputs of earlier steps come first."""
        if padding_mask is not None:
            x = x.masked_fill(padding_mask.unsqueeze(-1), 0.0)
        kept_length = 0
        if incremental_state is not None:
            kept = self.get_incremental_state(incremental_state, "inputs")
            if kept is not None:
                kept_length = kept["inputs"].size(1)
                x = torch.cat([kept["inputs"], x], dim=1)
            if self.context:
                self.set_incremental_state(incremental_state, "inputs", {"inputs": x[:, -self.context:].clone()})
        # zeros for the context not kept: the output has one column per new position
        padded = F.pad(x, (0, 0, self.context - kept_length, 0))
        length, dilation = padded.size(1) - self.context, self.dilation
        # tap k reads the inputs (h - 1 - k) d back, as the Conv1d's kernel column k does
        taps = torch.cat([padded[:, k * dilation:k * dilation + length] for k in range(self.kernel_size)], dim=-1)
        weight = self.convolution.weight.permute(0, 2, 1).reshape(self.convolution.out_channels, -1)  # (out, h x in)
        return F.linear(taps, weight, self.convolution.bias)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        kept = self.get_incremental_state(incremental_state, "inputs")
        if kept is not None:
            self.set_incremental_state(incremental_state, "inputs",
                                       {"inputs": kept["inputs"].index_select(0, new_order)})
