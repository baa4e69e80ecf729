"""PASCAL attention against a naive per-sentence, per-head, per-position loop written from equations 1-3, on the
CPU and on CUDA (tests/devices.py: the module runs on the device, the loop on the CPU)."""
import math
from argparse import Namespace

import pytest
import torch

from fairseq_syntax.modules import SyntaxBiasedSelfAttention
from fairseq_syntax.modules.mechanisms.pascal import ParentScaledModifier

from .devices import on

EMBED_DIM, HEADS = 16, 4
# The density D^p is computed in float32 by design (whatever the model's dtype), so a float64 model agrees with
# the float64 loop to float32 precision.
F32 = dict(rtol=1e-5, atol=1e-6)


def build_attention(pascal_heads, variance=1.0, parent_ignoring=0.0, seed=0, combination="multiply",
                    parent_only=False):
    torch.manual_seed(seed)
    args = Namespace(pascal_heads=pascal_heads, pascal_variance=variance, parent_ignoring=parent_ignoring,
                     pascal_combination=combination, pascal_parent_only=parent_only)
    attention = SyntaxBiasedSelfAttention(EMBED_DIM, HEADS, dropout=0.0, self_attention=True,
                                          score_modifier=ParentScaledModifier(args, EMBED_DIM, HEADS, 0))
    for p in attention.parameters():  # non-trivial biases too
        torch.nn.init.normal_(p, std=0.5)
    return attention.double()


def pascal(attention, x, mask, parents, **kwargs):
    """The attention with PASCAL's modification for these parents, as a syntax encoder layer calls it."""
    halves = (2 * parents).round().long().to(x.device)  # the batch feature: twice the middle position, an integer
    mask = mask.to(x.device)
    modification = attention.score_modifier(x, {"src_parent_middle_halves": halves}, mask)
    return attention(x, x, x, key_padding_mask=mask, score_modification=modification, **kwargs)


def random_batch(lengths, left_pad, seed=1):
    """x (T, B, C), padding mask (B, T) and parent middle positions (B, T) in padded coordinates."""
    generator = torch.Generator().manual_seed(seed)
    batch, width = len(lengths), max(lengths)
    x = torch.randn(width, batch, EMBED_DIM, generator=generator, dtype=torch.float64)
    mask = torch.zeros(batch, width, dtype=torch.bool)
    parents = torch.zeros(batch, width, dtype=torch.float64)
    for b, n in enumerate(lengths):
        offset = width - n if left_pad else 0
        mask[b] = True
        mask[b, offset:offset + n] = False
        # parents anywhere inside the sentence, with half-positions as for evenly split words
        parents[b, offset:offset + n] = offset + torch.randint(0, 2 * n - 1, (n,), generator=generator) / 2.0
    return x, mask, parents


def naive_pascal(attention, x, mask, parents, pascal_heads, variance, ignored_rows=None, combination="multiply",
                 parent_only=False):
    """Equations 1-3, one sentence, head, query and key at a time; padded keys get no weight. `combination` "add":
    appendix B's scores plus the density; `parent_only`: Table 3b's row, only the key(s) at the parent's middle
    position (|j - p_t| <= 1/2) may be attended to (every unpadded key where none of them is unpadded)."""
    width, batch, _ = x.shape
    d = EMBED_DIM // HEADS
    output = torch.zeros_like(x)
    weights = torch.zeros(batch, HEADS, width, width, dtype=x.dtype)
    for b in range(batch):
        q = attention.q_proj(x[:, b])
        k = attention.k_proj(x[:, b])
        v = attention.v_proj(x[:, b])
        heads_out = []
        for h in range(HEADS):
            sl = slice(h * d, (h + 1) * d)
            rows = []
            for t in range(width):
                scores = []
                for j in range(width):
                    s = float((q[t, sl] @ k[j, sl]).detach()) / math.sqrt(d)  # eq. 1
                    if h < pascal_heads:
                        ignored = ignored_rows is not None and bool(ignored_rows[b, t])
                        density = (1.0 if ignored else math.exp(-(j - float(parents[b, t])) ** 2 / (2 * variance)) /
                                   math.sqrt(2 * math.pi * variance))  # eq. 3
                        if parent_only:
                            middle = [k for k in range(width) if abs(k - float(parents[b, t])) <= 0.5
                                      and not mask[b, k]]
                            s = s if ignored or not middle or j in middle else -math.inf
                        elif combination == "add":
                            s = s + (0.0 if ignored else density)  # appendix B
                        else:
                            s = s * density  # eq. 2
                    scores.append(-math.inf if mask[b, j] else s)
                row = torch.softmax(torch.tensor(scores, dtype=x.dtype), dim=0)
                weights[b, h, t] = row
                rows.append(row @ v[:, sl])
            heads_out.append(torch.stack(rows))
        output[:, b] = attention.out_proj(torch.cat(heads_out, dim=-1))
    return output, weights


@pytest.mark.parametrize("left_pad", [True, False])
@pytest.mark.parametrize("pascal_heads,variance", [(1, 1.0), (2, 1.0), (4, 0.5), (3, 2.0)])
def test_matches_naive_loop(left_pad, pascal_heads, variance, device):
    attention = build_attention(pascal_heads, variance).eval()
    x, mask, parents = random_batch([5, 7, 3], left_pad)
    output, head_weights = pascal(on(device, attention), x.to(device), mask, parents, need_weights=True,
                                  need_head_weights=True)
    output, head_weights = output.cpu(), head_weights.cpu()
    expected_output, expected_weights = naive_pascal(attention, x, mask, parents, pascal_heads, variance)
    real = ~mask  # rows of padded queries are never used
    torch.testing.assert_close(output.transpose(0, 1)[real], expected_output.transpose(0, 1)[real], **F32)
    torch.testing.assert_close(head_weights.transpose(0, 1)[real.unsqueeze(1).expand(-1, HEADS, -1)],
                               expected_weights[real.unsqueeze(1).expand(-1, HEADS, -1)], **F32)


@pytest.mark.parametrize("left_pad", [True, False])
@pytest.mark.parametrize("combination,parent_only", [("add", False), ("multiply", True)],
                         ids=["additive", "parent-only"])
def test_the_papers_variants_match_the_naive_loop(left_pad, combination, parent_only, device):
    """Appendix B's additive PASCAL and Table 3b's parent-only PASCAL (there a PASCAL head's weights lie on the
    parent's middle token(s) alone)."""
    attention = build_attention(2, combination=combination, parent_only=parent_only).eval()
    x, mask, parents = random_batch([5, 7, 3], left_pad)
    output, head_weights = pascal(on(device, attention), x.to(device), mask, parents, need_weights=True,
                                  need_head_weights=True)
    output, head_weights = output.cpu(), head_weights.cpu().transpose(0, 1)  # (B, H, T, T)
    expected_output, expected_weights = naive_pascal(attention, x, mask, parents, 2, 1.0, combination=combination,
                                                     parent_only=parent_only)
    real = ~mask
    torch.testing.assert_close(output.transpose(0, 1)[real], expected_output.transpose(0, 1)[real], **F32)
    torch.testing.assert_close(head_weights[real.unsqueeze(1).expand(-1, HEADS, -1)],
                               expected_weights[real.unsqueeze(1).expand(-1, HEADS, -1)], **F32)
    if parent_only:
        keys = torch.arange(x.size(0), dtype=torch.float64)
        for b, t in real.nonzero().tolist():
            at_parent = (keys - parents[b, t]).abs() <= 0.5
            assert (at_parent & real[b]).any()  # the sentences' parents are their own tokens
            assert (head_weights[b, :2, t][:, ~at_parent] == 0).all()
            assert torch.allclose(head_weights[b, :2, t][:, at_parent].sum(-1), torch.ones(2, dtype=torch.float64))
        assert torch.isfinite(output).all()  # padded rows too: a row is never all -inf
    else:
        multiplied, _ = naive_pascal(attention, x, mask, parents, 2, 1.0)
        assert not torch.allclose(expected_output, multiplied)  # the variant is another function


def test_variants_are_checked_at_build_time():
    with pytest.raises(ValueError, match="--pascal-combination"):
        build_attention(2, combination="max")
    with pytest.raises(ValueError, match="--pascal-parent-only"):
        build_attention(2, combination="add", parent_only=True)


def test_each_sentence_gets_its_own_parents(device):
    """The public code scaled the wrong sentences when PASCAL heads < heads: swapping two sentences' parent
    vectors together with the sentences must swap the outputs, and only their own rows may change."""
    attention = on(device, build_attention(pascal_heads=2).eval())
    x, mask, parents = on(device, random_batch([6, 6, 6], left_pad=True, seed=3))
    out, _ = pascal(attention, x, mask, parents, need_weights=False)
    changed = parents.clone()
    changed[1] = 0.0
    out_changed, _ = pascal(attention, x, mask, changed, need_weights=False)
    torch.testing.assert_close(out_changed[:, [0, 2]], out[:, [0, 2]], **F32)
    assert not torch.allclose(out_changed[:, 1], out[:, 1])


def test_without_syntax_is_fairseq_attention(device):
    attention = build_attention(pascal_heads=4).eval()
    x, mask, parents = random_batch([4, 6], left_pad=False)
    x_on, mask_on = on(device, (x, mask))
    plain, _ = on(device, attention)(x_on, x_on, x_on, key_padding_mask=mask_on, need_weights=False)
    plain = plain.cpu()
    expected, _ = naive_pascal(attention, x, mask, parents, pascal_heads=0, variance=1.0)
    real = ~mask
    torch.testing.assert_close(plain.transpose(0, 1)[real], expected.transpose(0, 1)[real], **F32)


def test_parent_ignoring_in_training_only(device):
    attention = build_attention(pascal_heads=2, parent_ignoring=0.5)
    x, mask, parents = random_batch([8, 5, 7], left_pad=True, seed=5)
    module = on(device, attention).eval()
    eval_out, _ = pascal(module, x.to(device), mask, parents, need_weights=False)
    eval_out = eval_out.cpu()
    expected, _ = naive_pascal(attention, x, mask, parents, 2, 1.0)
    real = ~mask
    torch.testing.assert_close(eval_out.transpose(0, 1)[real], expected.transpose(0, 1)[real], **F32)

    module.train()
    torch.manual_seed(0)
    _, weights = pascal(module, x.to(device), mask, parents, need_head_weights=True)
    weights = weights.cpu().transpose(0, 1)  # (B, H, T, T)
    _, kept = naive_pascal(attention, x, mask, parents, 2, 1.0)
    _, ignored = naive_pascal(attention, x, mask, parents, 2, 1.0, ignored_rows=torch.ones_like(mask))
    outcomes = []
    for b, t in real.nonzero().tolist():
        is_kept = torch.allclose(weights[b, :2, t], kept[b, :2, t])
        is_ignored = torch.allclose(weights[b, :2, t], ignored[b, :2, t])
        assert is_kept or is_ignored, f"row {b},{t} is neither parent-scaled nor parent-ignored"
        torch.testing.assert_close(weights[b, 2:, t], kept[b, 2:, t], **F32)  # non-PASCAL heads never change
        outcomes.append(is_ignored)
    assert 0 < sum(outcomes) < len(outcomes), "with q=0.5 some rows, not all, must be ignored"
