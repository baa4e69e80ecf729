"""Dyn-STGCD's dilated causal convolution (modules/dyn_stgcd/causal_convolution.py) against appendix A.3's
sum written as a loop, causality, and incremental decoding (one position per step, beam reordering) against the
whole sequence at once."""
import pytest
import torch

from fairseq_syntax.modules.dyn_stgcd.causal_convolution import DilatedCausalConvolution


def naive(layer, x):
    """H(t) = sum_{i=0}^{h-1} f(i) . Y_{t - d i} + b, with Y_{t'} = 0 for t' < 0; f(i) = weight[:, :, h - 1 - i]."""
    weight, bias = layer.convolution.weight, layer.convolution.bias
    h, d = layer.kernel_size, layer.dilation
    out = torch.zeros(x.size(0), x.size(1), weight.size(0), dtype=torch.float64)
    for t in range(x.size(1)):
        out[:, t] = bias.double()
        for i in range(h):
            if t - d * i >= 0:
                out[:, t] += x[:, t - d * i].double() @ weight[:, :, h - 1 - i].double().T
    return out


@pytest.mark.parametrize("kernel_size,dilation", [(1, 1), (2, 1), (3, 2), (2, 4)])
def test_equals_the_sum_and_never_reads_the_future(kernel_size, dilation):
    torch.manual_seed(kernel_size * 10 + dilation)
    layer = DilatedCausalConvolution(5, 6, kernel_size, dilation)
    x = torch.randn(3, 11, 5)
    out = layer(x)
    torch.testing.assert_close(out.double(), naive(layer, x), rtol=1e-5, atol=1e-5)
    for t in range(10):  # changing position t + 1 changes no output at positions <= t
        changed = x.clone()
        changed[:, t + 1:] = torch.randn_like(changed[:, t + 1:])
        torch.testing.assert_close(layer(changed)[:, :t + 1], out[:, :t + 1], rtol=0, atol=0)


@pytest.mark.parametrize("kernel_size,dilation", [(1, 1), (3, 2), (2, 4)])
def test_incremental_steps_with_beam_reordering_equal_the_whole_sequence(kernel_size, dilation):
    torch.manual_seed(0)
    layer = DilatedCausalConvolution(4, 4, kernel_size, dilation)
    x = torch.randn(4, 9, 4)
    state, steps, order = {}, [], torch.arange(4)
    reorder_at, new_order = 5, torch.tensor([2, 2, 0, 3])
    for t in range(9):
        if t == reorder_at:  # beam search keeps rows 2, 2, 0, 3: their past follows them
            layer.reorder_incremental_state(state, new_order)
            order = order[new_order]
        steps.append(layer(x[order, t:t + 1], incremental_state=state))
    incremental = torch.cat(steps, dim=1)
    # before the reordering, the rows in their first order; after it, each row continues the history of the row
    # it was taken from (x[order]: the same sequences as whole inputs)
    torch.testing.assert_close(incremental[:, :reorder_at], layer(x)[:, :reorder_at], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(incremental[:, reorder_at:], layer(x[order])[:, reorder_at:], rtol=1e-6, atol=1e-6)


def test_padding_is_zeroed_before_it_can_reach_a_real_position():
    torch.manual_seed(1)
    layer = DilatedCausalConvolution(3, 3, 3, 1)
    real = torch.randn(1, 4, 3)
    padded = torch.cat([torch.full((1, 2, 3), 50.0), real], dim=1)  # two left-padding positions holding garbage
    mask = torch.tensor([[True, True, False, False, False, False]])
    torch.testing.assert_close(layer(padded, padding_mask=mask)[:, 2:], layer(real), rtol=1e-6, atol=1e-6)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="dilated causal convolution"):
        DilatedCausalConvolution(3, 3, 0)
