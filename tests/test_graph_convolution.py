"""The syntactic GCN (Bastings et al., 2017; the equations of Choshen & Abend, section 4) and its two Transformer
baselines (RGSE paper, section 4.1): the batched edge-list module against a per-node loop written from the
equations and against the dense (B x T x T) form, the ablation switches, edge dropout, the bidirectional GRU on
left- and right-padded batches, and both presets through fairseq-train and fairseq-generate. The tensor-level
comparisons run on the CPU and on CUDA (tests/devices.py: the module on the device, the loops on the CPU).

`python -m tests.test_graph_convolution` times the edge-list and the dense form (forward + backward, CPU)."""
import math
import random
import re
import time
from argparse import Namespace

import pytest
import torch
import torch.nn.functional as F

import fairseq_syntax  # noqa: F401  (registers the mechanisms and presets)
from fairseq import checkpoint_utils
from fairseq_syntax.modules.dependency_graph import PieceArcs, piece_arcs
from fairseq_syntax.modules.mechanisms.graph_convolution import (
    DOWN, SELF, UP, BiGRUGraphConvolution, BiGRUSublayer, BidirectionalGRU, GraphConvolution, GraphConvolutionSublayer,
    directed_edges, gather_incoming,
)

from .devices import assert_same, on
from .helpers import USER_DIR, marked_slow, run_cli

NUM_LABELS = 7  # data-bin labels 0..6 (0: EOS and padding), SUBWORD = 7
EMBED_DIM = 6


# ---- random batches: trees over words split into pieces, in padded columns ---------------------------------------

def random_sentences(word_counts, seed, split_root=True):
    """Per sentence: pieces per word (1-3), a random tree (word heads, 1-based, 0 = root; not necessarily
    projective) and a label (1..NUM_LABELS-1) per word. split_root=False gives the root word one piece."""
    generator = random.Random(seed)
    sentences = []
    for words in word_counts:
        order = list(range(words))
        generator.shuffle(order)
        heads = [0] * words
        for position, word in enumerate(order[1:], start=1):
            heads[word] = order[generator.randrange(position)] + 1
        pieces = [generator.randint(1, 3) for _ in range(words)]
        if not split_root:
            pieces[order[0]] = 1
        labels = [generator.randint(1, NUM_LABELS - 1) for _ in range(words)]
        sentences.append(dict(heads=heads, pieces=pieces, labels=labels))
    return sentences


def batch_features(sentences, left_pad, extra_padding=0):
    """The batch features as the collater makes them: each sentence's pieces, then EOS, padded on the left or the
    right; parent_first: the first column of the head word (the root word's own first column for its pieces),
    its own column elsewhere; labels: the word's label on its pieces, 0 elsewhere; word_ids: -1 elsewhere.
    Also each sentence's column offset and the padding mask (True at padding)."""
    tokens = [sum(s["pieces"]) + 1 for s in sentences]
    width = max(tokens) + extra_padding
    batch = len(sentences)
    parent_first = torch.arange(width).repeat(batch, 1)
    labels = torch.zeros(batch, width, dtype=torch.long)
    word_ids = torch.full((batch, width), -1)
    mask = torch.ones(batch, width, dtype=torch.bool)
    for b, s in enumerate(sentences):
        offset = width - tokens[b] if left_pad else 0
        s["offset"] = offset
        first_column = [offset + sum(s["pieces"][:w]) for w in range(len(s["pieces"]))]
        s["first_column"] = first_column
        mask[b, offset:offset + tokens[b]] = False
        for w, count in enumerate(s["pieces"]):
            head = s["heads"][w]
            for p in range(count):
                column = first_column[w] + p
                word_ids[b, column] = w
                labels[b, column] = s["labels"][w]
                parent_first[b, column] = first_column[head - 1] if head else first_column[w]
    return dict(src_parent_first=parent_first, src_labels=labels, src_word_ids=word_ids), mask


def rule_arcs(sentence):
    """dependency_graph's documented rule, one piece at a time: (head column, dependent column, label) of every
    piece of a non-root word from its head word's first piece, and of every later piece of a word from the word's
    first piece (label SUBWORD = NUM_LABELS)."""
    arcs = []
    for w, count in enumerate(sentence["pieces"]):
        head = sentence["heads"][w]
        for p in range(count):
            column = sentence["first_column"][w] + p
            if head:
                arcs.append((sentence["first_column"][head - 1], column, sentence["labels"][w]))
            if p > 0:
                arcs.append((sentence["first_column"][w], column, NUM_LABELS))
    return sorted(arcs)


def arcs_tensor(per_sentence):
    rows = [(b, head, dependent, label) for b, arcs in enumerate(per_sentence) for head, dependent, label in arcs]
    columns = torch.tensor(rows, dtype=torch.long).reshape(-1, 4).t()
    return PieceArcs(batch=columns[0], head=columns[1], dependent=columns[2], label=columns[3])


def arcs_on(device, arcs: PieceArcs) -> PieceArcs:
    return PieceArcs(*on(device, (arcs.batch, arcs.head, arcs.dependent, arcs.label)))


def arcs_of(arcs: PieceArcs, batch):
    arcs = arcs_on("cpu", arcs)
    return [sorted((int(h), int(d), int(lab)) for s, h, d, lab in zip(arcs.batch, arcs.head, arcs.dependent,
                                                                      arcs.label) if int(s) == b)
            for b in range(batch)]


# ---- the equations, one node and one neighbour at a time ---------------------------------------------------------

def naive_gcn(gcn: GraphConvolution, x, per_sentence, edge_scale=None, project=True):
    """gcn(h, v) = ReLU(sum_{u in N(v)} g_uv (W_dir h_u + b_lab)), g_uv = sigmoid(h_u . w^_dir + b^_lab) (g = 1
    without gates; lab = dir without labels). N(v): v itself, its heads over the arcs (down), its dependents (up).
    edge_scale: {(sentence, source, target, direction): factor} for edge dropout (missing: 1)."""
    width, batch, _ = x.shape
    L, dim = gcn.num_labels, gcn.hidden_dim  # W_dir: C -> k (k = C unless --encoder-gcn-dim), then k -> C
    W = gcn.weight.weight.detach()
    out = torch.zeros(width, batch, dim, dtype=x.dtype)
    for b in range(batch):
        for v in range(width):
            neighbours = [(v, SELF, None)]
            neighbours += [(head, DOWN, label) for head, dependent, label in per_sentence[b] if dependent == v]
            neighbours += [(dependent, UP, label) for head, dependent, label in per_sentence[b] if head == v]
            total = torch.zeros(dim, dtype=x.dtype)
            for u, direction, label in neighbours:
                if direction == SELF:
                    row = 0
                elif not gcn.labels:
                    row = direction
                else:
                    row = 1 + label if direction == DOWN else 1 + (L + 1) + label
                f = W[direction * dim:(direction + 1) * dim] @ x[u, b] + gcn.bias[row].detach()
                g = 1.0
                if gcn.gates:
                    g = torch.sigmoid(x[u, b] @ gcn.gate_weight[direction].detach() + gcn.gate_bias[row].detach())
                scale = 1.0 if direction == SELF or edge_scale is None else edge_scale.get((b, u, v, direction), 1.0)
                total = total + scale * g * f
            out[v, b] = torch.relu(total)
    return out if gcn.out_proj is None or not project else out @ gcn.out_proj.weight.detach().t()


def dense_gcn(gcn: GraphConvolution, x, arcs: PieceArcs):
    """The same layer in dense form: per direction a (B, T, T) matrix of gates, bmm with W_dir h; the biases
    through a (B, T, rows) matrix of the gates of each node's incoming edges per bias row. No edge dropout."""
    width, batch, _ = x.shape
    h = x.transpose(0, 1)  # (B, T, C)
    transformed = gcn.weight(h).view(batch, width, 3, gcn.hidden_dim)
    edges = directed_edges(arcs, batch)
    sentence, source, target = edges.source % batch, edges.source // batch, edges.target // batch
    rows = gcn.bias_rows(edges)
    if gcn.gates:
        dtype = gcn.gate_dtype(x)
        logits = h.to(dtype) @ gcn.gate_weight.to(dtype).t()  # (B, T, 3)
        gate_bias = gcn.gate_bias.to(dtype)
        gate = torch.sigmoid(logits[sentence, source, edges.direction] + gate_bias[rows]).to(x.dtype)
        own_gate = torch.sigmoid(logits[..., SELF] + gate_bias[SELF]).to(x.dtype)
    else:
        gate = x.new_ones(rows.shape)
        own_gate = x.new_ones(batch, width)
    out = own_gate.unsqueeze(-1) * (transformed[:, :, SELF] + gcn.bias[SELF].to(x.dtype))
    for direction in (DOWN, UP):
        adjacency = x.new_zeros(batch, width, width)  # [b, target, source]
        chosen = edges.direction == direction
        adjacency = adjacency.index_put((sentence[chosen], target[chosen], source[chosen]), gate[chosen],
                                        accumulate=True)
        out = out + torch.bmm(adjacency, transformed[:, :, direction])
    per_row = x.new_zeros(batch, width, gcn.num_bias_rows).index_put((sentence, target, rows), gate, accumulate=True)
    out = F.relu(out + per_row @ gcn.bias.to(x.dtype))
    return (out if gcn.out_proj is None else gcn.out_proj(out)).transpose(0, 1)


def random_gcn(labels, gates, edge_dropout=0.0, seed=0, dim=EMBED_DIM, hidden_dim=None):
    torch.manual_seed(seed)
    gcn = GraphConvolution(dim, NUM_LABELS, labels=labels, gates=gates, edge_dropout=edge_dropout,
                           hidden_dim=hidden_dim)
    for p in gcn.parameters():
        torch.nn.init.normal_(p, std=0.7)  # biases and gates away from their initial zeros
    return gcn.double().eval()


SWITCHES = pytest.mark.parametrize("labels,gates", [(True, True), (True, False), (False, True), (False, False)])
WORDS = [5, 1, 3, 7]  # a one-word sentence has only its self loop and, if split, its SUBWORD arcs


# ---- the arcs the GCN reads ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("left_pad", [True, False])
# a split ROOT word: the collater gives each of its pieces the root's FIRST column as parent (its self-parent), which
# must not become an arc (piece_arcs once compared with the piece's own column and added one per later piece)
@pytest.mark.parametrize("split_root", [False, True])
def test_piece_arcs_follow_their_documented_rule(left_pad, split_root, device):
    sentences = random_sentences(WORDS * 3, seed=4, split_root=split_root)
    syntax, _ = batch_features(sentences, left_pad)
    syntax = on(device, syntax)
    arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], NUM_LABELS)
    assert arcs_of(arcs, len(sentences)) == [rule_arcs(s) for s in sentences]


# ---- the layer against the equations ------------------------------------------------------------------------------

@SWITCHES
@pytest.mark.parametrize("left_pad", [True, False])
@pytest.mark.parametrize("hidden_dim", [None, 3])  # 3: --encoder-gcn-dim, the width of the paper_params presets
def test_gcn_matches_the_equations_node_by_node(labels, gates, left_pad, hidden_dim, device):
    sentences = random_sentences(WORDS, seed=1)
    syntax, _ = batch_features(sentences, left_pad, extra_padding=1)
    per_sentence = [rule_arcs(s) for s in sentences]
    gcn = random_gcn(labels, gates, hidden_dim=hidden_dim)
    width = syntax["src_word_ids"].size(1)
    x = torch.randn(width, len(sentences), EMBED_DIM, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got = on(device, gcn)(x.to(device), arcs_on(device, arcs_tensor(per_sentence))).cpu()
        expected = naive_gcn(gcn, x, per_sentence)
        dense = dense_gcn(gcn, x, arcs_tensor(per_sentence))
    relu = naive_gcn(gcn, x, per_sentence, project=False)
    assert (relu > 0).any() and (relu == 0).any()  # both sides of the ReLU are exercised
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(dense, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("left_pad", [True, False])
def test_each_sentence_is_its_own_graph(left_pad, device):
    """The same sentence alone, in a batch padded on either side: the same outputs at its columns."""
    sentences = random_sentences(WORDS, seed=5)
    syntax, _ = on(device, batch_features(sentences, left_pad))
    gcn = on(device, random_gcn(True, True))
    x = torch.randn(syntax["src_word_ids"].size(1), len(sentences), EMBED_DIM, dtype=torch.float64, device=device)
    arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], NUM_LABELS)
    with torch.no_grad():
        together = gcn(x, arcs)
        for b, s in enumerate(sentences):
            alone_syntax, _ = on(device, batch_features([dict(s)], left_pad=False))
            tokens = alone_syntax["src_word_ids"].size(1)
            columns = slice(s["offset"], s["offset"] + tokens)
            alone_arcs = piece_arcs(alone_syntax["src_parent_first"], alone_syntax["src_labels"],
                                    alone_syntax["src_word_ids"], NUM_LABELS)
            alone = gcn(x[columns, b:b + 1], alone_arcs)
            torch.testing.assert_close(together[columns, b:b + 1], alone, rtol=1e-12, atol=1e-12)


def test_switches_remove_exactly_their_parameters():
    full, unlabeled, ungated = (GraphConvolution(8, NUM_LABELS), GraphConvolution(8, NUM_LABELS, labels=False),
                                GraphConvolution(8, NUM_LABELS, gates=False))
    rows = 1 + 2 * (NUM_LABELS + 1)  # self, (down, up) x (labels + SUBWORD)
    assert full.bias.shape == (rows, 8) and full.gate_bias.shape == (rows,) and full.gate_weight.shape == (3, 8)
    assert unlabeled.bias.shape == (3, 8) and unlabeled.gate_bias.shape == (3,)  # one per direction
    assert ungated.gate_weight is None and ungated.gate_bias is None
    assert {name for name, _ in ungated.named_parameters()} == {"weight.weight", "bias"}


def test_unlabeled_gcn_ignores_the_labels(device):
    sentences = random_sentences(WORDS, seed=6)
    batch_features(sentences, left_pad=True)
    per_sentence = [rule_arcs(s) for s in sentences]
    relabeled = [[(h, d, (lab * 3) % (NUM_LABELS + 1)) for h, d, lab in arcs] for arcs in per_sentence]
    width = max(sum(s["pieces"]) + 1 for s in sentences)
    x = torch.randn(width, len(sentences), EMBED_DIM, dtype=torch.float64, device=device)
    unlabeled, labeled = on(device, random_gcn(False, True)), on(device, random_gcn(True, True))
    arcs, relabeled_arcs = arcs_on(device, arcs_tensor(per_sentence)), arcs_on(device, arcs_tensor(relabeled))
    with torch.no_grad():
        assert_same(unlabeled(x, arcs), unlabeled(x, relabeled_arcs), device)
        assert not torch.allclose(labeled(x, arcs), labeled(x, relabeled_arcs))


def test_gather_incoming_sums_weighted_sources(device):
    values = torch.arange(12.0).view(4, 3)
    source, target = torch.tensor([0, 1, 3, 3]), torch.tensor([2, 2, 0, 1])
    weights = torch.tensor([1.0, 2.0, 0.5, 1.0])
    out = gather_incoming(*on(device, (values, source, target)), 3, weights.to(device)).cpu()
    expected = torch.stack([0.5 * values[3], values[3], values[0] + 2 * values[1]])
    torch.testing.assert_close(out, expected)


def test_gcn_gradients_reach_every_parameter(device):
    sentences = random_sentences(WORDS, seed=7)
    batch_features(sentences, left_pad=True)
    per_sentence = [rule_arcs(s) for s in sentences]
    width = max(sum(s["pieces"]) + 1 for s in sentences)
    gcn = on(device, random_gcn(True, True)).train()
    arcs = arcs_on(device, arcs_tensor(per_sentence))
    x = torch.randn(width, len(sentences), EMBED_DIM, dtype=torch.float64, device=device, requires_grad=True)
    # on CUDA the backward of index_select sums with atomics, in any order: two backward passes may differ in the
    # last bits, which gradcheck's reentrancy check must allow
    assert torch.autograd.gradcheck(lambda inp: gcn(inp, arcs), (x,), nondet_tol=0.0 if device.type == "cpu" else 1e-12)
    gcn(x, arcs).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in gcn.parameters())


# ---- edge dropout -------------------------------------------------------------------------------------------------

def test_edge_dropout_drops_whole_edges_in_training_only_and_keeps_self_loops(device):
    sentences = random_sentences([9, 6, 8, 4], seed=8)
    syntax, _ = batch_features(sentences, left_pad=True)
    per_sentence = [rule_arcs(s) for s in sentences]
    arcs = arcs_tensor(per_sentence)
    rate = 0.4
    gcn = random_gcn(True, True, edge_dropout=rate)
    no_dropout = random_gcn(True, True, edge_dropout=0.0)
    width, batch = syntax["src_word_ids"].size(1), len(sentences)
    x = torch.randn(width, batch, EMBED_DIM, dtype=torch.float64)
    module, x_on, arcs_on_device = on(device, gcn), x.to(device), arcs_on(device, arcs)
    with torch.no_grad():
        assert_same(module.eval()(x_on, arcs_on_device), on(device, no_dropout)(x_on, arcs_on_device), device)
        module.train()
        torch.manual_seed(11)
        trained = module(x_on, arcs_on_device).cpu()
        # the same draw, from the device's generator: one uniform number per directed edge (down edges, then up
        # edges, in arc order)
        torch.manual_seed(11)
        edges = directed_edges(arcs, batch)
        keep = (torch.rand(edges.source.numel(), device=device) >= rate).cpu()
    assert 0 < int(keep.sum()) < keep.numel()
    scale = {}
    for e in range(keep.numel()):
        sentence, u, v = int(edges.source[e]) % batch, int(edges.source[e]) // batch, int(edges.target[e]) // batch
        scale[(sentence, u, v, int(edges.direction[e]))] = 1.0 / (1 - rate) if keep[e] else 0.0
    expected = naive_gcn(gcn, x, per_sentence, edge_scale=scale)
    torch.testing.assert_close(trained, expected, rtol=1e-10, atol=1e-12)
    # with (almost) every edge dropped, each output is its self loop's alone
    almost_all = random_gcn(True, True, edge_dropout=1 - 1e-9).train()
    with torch.no_grad():
        torch.manual_seed(0)
        only_self = on(device, almost_all)(x_on, arcs_on_device).cpu()
    torch.testing.assert_close(only_self, naive_gcn(almost_all, x, [[] for _ in sentences]), rtol=1e-10, atol=1e-12)


# ---- the bidirectional GRU ----------------------------------------------------------------------------------------

def test_bigru_reads_each_sentence_alone_whatever_the_padding(device):
    torch.manual_seed(0)
    cpu_rnn = BidirectionalGRU(EMBED_DIM).double()
    rnn = on(device, cpu_rnn)
    lengths = [5, 2, 7, 1, 7]
    width = max(lengths) + 1
    sentences = [torch.randn(n, EMBED_DIM, dtype=torch.float64) for n in lengths]

    def padded(left):
        x = torch.full((width, len(lengths), EMBED_DIM), 9.0, dtype=torch.float64)  # loud padding
        mask = torch.ones(len(lengths), width, dtype=torch.bool)
        for b, s in enumerate(sentences):
            offset = width - len(s) if left else 0
            x[offset:offset + len(s), b] = s
            mask[b, offset:offset + len(s)] = False
        return x, mask

    with torch.no_grad():
        outputs = {}
        for left in (True, False):
            x, mask = padded(left)
            out = rnn(x.to(device), mask.to(device)).cpu()
            assert out.shape == x.shape
            assert torch.equal(out[mask.t()], torch.zeros_like(out[mask.t()]))  # padding columns: 0
            outputs[left] = [out[width - n:, b] if left else out[:n, b] for b, n in enumerate(lengths)]
        for b, s in enumerate(sentences):
            alone = rnn(s.unsqueeze(1).to(device), None)[:, 0].cpu()
            torch.testing.assert_close(outputs[True][b], alone, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(outputs[False][b], alone, rtol=1e-12, atol=1e-12)
    # the backward direction reads the sentence from its last token: there its state is one GRU step from 0
    # (r, z, n as torch.nn.GRU defines them)
    gru, last = cpu_rnn.rnn, sentences[0][-1]
    from_input = (gru.weight_ih_l0_reverse @ last + gru.bias_ih_l0_reverse).chunk(3)
    from_state = gru.bias_hh_l0_reverse.chunk(3)  # W_hh h = 0
    reset = torch.sigmoid(from_input[0] + from_state[0])
    update = torch.sigmoid(from_input[1] + from_state[1])
    candidate = torch.tanh(from_input[2] + reset * from_state[2])
    one_step = (1 - update) * candidate
    torch.testing.assert_close(outputs[True][0][-1, EMBED_DIM // 2:], one_step.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(outputs[False][0][-1, EMBED_DIM // 2:], one_step.detach(), rtol=1e-10, atol=1e-12)


# ---- the mechanisms -----------------------------------------------------------------------------------------------

def mechanism_args(**values):
    return Namespace(**{"dropout": 0.0, "encoder_gcn_edge_dropout": 0.0,
                        "no_encoder_gcn_labels": False, "no_encoder_gcn_gates": False, **values})


@pytest.mark.parametrize("normalize_before", [False, True])
@pytest.mark.parametrize("left_pad", [True, False])
def test_gcn_sublayer_is_a_residual_normalized_gcn(left_pad, normalize_before, device):
    sentences = random_sentences(WORDS, seed=9, split_root=False)  # (piece_arcs and the rule then agree)
    syntax, mask = batch_features(sentences, left_pad)
    torch.manual_seed(3)
    mechanism = GraphConvolutionSublayer(mechanism_args(encoder_normalize_before=normalize_before), EMBED_DIM, 2, 0,
                                         source_label_count=NUM_LABELS)
    mechanism = mechanism.double().eval()
    x = torch.randn(syntax["src_word_ids"].size(1), len(sentences), EMBED_DIM, dtype=torch.float64)
    per_sentence = [rule_arcs(s) for s in sentences]
    with torch.no_grad():
        out = on(device, mechanism)(*on(device, (x, syntax, mask))).cpu()
        norm = mechanism.layer_norm
        if normalize_before:
            expected = x + naive_gcn(mechanism.gcn, norm(x), per_sentence)
        else:
            expected = norm(x + naive_gcn(mechanism.gcn, x, per_sentence))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)


def test_birnn_gcn_is_the_gcn_over_the_bigru_with_a_residual_and_ignores_padding_side(device):
    sentences = random_sentences(WORDS, seed=10, split_root=False)
    torch.manual_seed(4)
    mechanism = BiGRUGraphConvolution(mechanism_args(), EMBED_DIM, 2, 0, source_label_count=NUM_LABELS).double().eval()
    module = on(device, mechanism)
    real = {}
    for left_pad in (True, False):
        syntax, mask = batch_features(sentences, left_pad)
        width = syntax["src_word_ids"].size(1)
        x = torch.zeros(width, len(sentences), EMBED_DIM, dtype=torch.float64)
        generator = torch.Generator().manual_seed(5)
        for b, s in enumerate(sentences):
            tokens = sum(s["pieces"]) + 1
            x[s["offset"]:s["offset"] + tokens, b] = torch.randn(tokens, EMBED_DIM, dtype=torch.float64,
                                                                 generator=generator)
        with torch.no_grad():
            out = module(*on(device, (x, syntax, mask))).cpu()
            states = module.rnn(x.to(device), mask.to(device)).cpu()  # the BiGRU's own test is above
            expected = states + naive_gcn(mechanism.gcn, states, [rule_arcs(s) for s in sentences])
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
        real[left_pad] = [out[s["offset"]:s["offset"] + sum(s["pieces"]) + 1, b] for b, s in enumerate(sentences)]
    for left, right in zip(real[True], real[False]):
        torch.testing.assert_close(left, right, rtol=1e-10, atol=1e-12)


def test_birnn_is_the_bigru_alone_and_reads_no_syntax(device):
    """birnn_gcn without the graph: the sublayer's output is its BiGRU's (tested above against each sentence run
    alone), with no syntax given, and it declares no batch feature."""
    assert BiGRUSublayer.features == () and BiGRUSublayer.training_features == ()
    torch.manual_seed(6)
    mechanism = on(device, BiGRUSublayer(Namespace(), EMBED_DIM, 2, 0).double().eval())
    assert [name for name, _ in mechanism.named_parameters()] == [f"rnn.rnn.{name}" for name, _ in
                                                                  mechanism.rnn.rnn.named_parameters()]
    x = torch.randn(6, 3, EMBED_DIM, dtype=torch.float64)
    mask = torch.tensor([[True, True, False, False, False, False], [False] * 6, [True] * 5 + [False]])
    with torch.no_grad():
        out = mechanism(x.to(device), None, mask.to(device)).cpu()
        for b in range(3):
            real = ~mask[b]
            alone = mechanism.rnn(x[real, b].unsqueeze(1).to(device), None)[:, 0].cpu()
            torch.testing.assert_close(out[real, b], alone, rtol=1e-10, atol=1e-12)
            assert torch.equal(out[~real, b], torch.zeros_like(out[~real, b]))


def test_mechanisms_refuse_bad_options():
    with pytest.raises(ValueError, match="label dictionary"):
        GraphConvolutionSublayer(mechanism_args(), EMBED_DIM, 2, 0)  # no source labels
    with pytest.raises(ValueError, match="edge-dropout"):
        GraphConvolutionSublayer.check_args(mechanism_args(encoder_gcn_edge_dropout=1.0))
    with pytest.raises(ValueError, match="odd"):
        BiGRUGraphConvolution(mechanism_args(), 7, 1, 0, source_label_count=NUM_LABELS)
    with pytest.raises(ValueError, match="odd"):
        BiGRUSublayer(Namespace(), 7, 1, 0)


# ---- through fairseq -----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph_bin(small_spacy_bin):
    return small_spacy_bin


def build(destdir, *extra):
    from .test_end_to_end import load_task
    task, cfg = load_task(destdir, *extra)
    return task, task.build_model(cfg.model)


@pytest.mark.parametrize("arch", ["transformer_gcn_tiny", "transformer_birnn_gcn_tiny"])
def test_presets_put_the_mechanism_in_the_layers(graph_bin, arch):
    task, model = build(graph_bin, "--arch", arch)
    labels = len(task.label_dicts["en"])
    birnn = "birnn" in arch
    for layer in model.encoder.layers:  # tiny: both layers
        module = layer.syntax_module
        assert isinstance(module, BiGRUGraphConvolution if birnn else GraphConvolutionSublayer)
        assert (layer.self_attn is None) == birnn
        assert module.gcn.edge_dropout == 0.2 and module.gcn.labels and module.gcn.gates
        assert module.gcn.bias.shape == (1 + 2 * (labels + 1), 64)
        if birnn:
            assert module.rnn.rnn.hidden_size == 32 and module.rnn.rnn.bidirectional
    names = {name for name, _ in model.named_parameters()}
    assert "encoder.layers.0.syntax_module.gcn.weight.weight" in names
    assert model.syntax_features == {"src_parent_first", "src_labels", "src_word_ids"}
    _, ablated = build(graph_bin, "--arch", arch, "--no-encoder-gcn-labels", "--no-encoder-gcn-gates",
                       "--encoder-gcn-edge-dropout", "0.1", "--encoder-syntax-layers", "1")
    assert ablated.encoder.layers[0].syntax_module is None
    gcn = ablated.encoder.layers[1].syntax_module.gcn
    assert not gcn.labels and not gcn.gates and gcn.edge_dropout == 0.1 and gcn.bias.shape == (3, 64)


def test_birnn_preset_is_birnn_gcn_without_the_graph(graph_bin):
    """transformer_birnn_multi30k has the BiGRU where transformer_birnn_gcn_multi30k has it, in place of
    self-attention, and every parameter of it but the GCN's, names and shapes alike; it reads no syntax."""
    _, control = build(graph_bin, "--arch", "transformer_birnn_multi30k")
    _, graph = build(graph_bin, "--arch", "transformer_birnn_gcn_multi30k")
    assert control.syntax_features == set()
    layers = [isinstance(layer.syntax_module, BiGRUSublayer) for layer in control.encoder.layers]
    assert layers == [isinstance(layer.syntax_module, BiGRUGraphConvolution) for layer in graph.encoder.layers]
    assert layers == [True, True, False]
    assert [layer.self_attn is None for layer in control.encoder.layers] == layers
    shapes = {name: p.shape for name, p in control.named_parameters()}
    graph_shapes = {name: p.shape for name, p in graph.named_parameters() if ".syntax_module.gcn." not in name}
    assert shapes == graph_shapes
    assert sum(p.numel() for p in graph.parameters()) > sum(p.numel() for p in control.parameters())


# the RGSE paper's Table 3 (WMT14 En-De, Transformer base 90.2M): + GCN 90.4M, + BiRNN+GCN 91.2M, + RGSE 91.76M
PAPER_ADDED_PARAMETERS = {"transformer_gcn_paper_params": 0.2e6, "transformer_birnn_gcn_paper_params": 1.0e6,
                          "transformer_rgse_paper_params": 1.56e6}


def test_paper_params_presets_add_what_the_paper_reports(graph_bin):
    """Each *_paper_params preset adds to a Transformer base of the same vocabulary (the stock syntax_transformer
    preset) the parameters Table 3 reports, within 10%; the presets at the model's width add far more (so the
    check can fail)."""
    def count(arch, *extra):
        return sum(p.numel() for p in build(graph_bin, "--arch", arch, *extra)[1].parameters())

    base = count("syntax_transformer")
    for arch, paper in PAPER_ADDED_PARAMETERS.items():
        added = count(arch) - base
        assert abs(added - paper) <= 0.1 * paper, (arch, added, paper)
        full_width = count(arch.replace("_paper_params", "")) - base
        assert full_width > 2 * paper, (arch, full_width)


@pytest.mark.parametrize("arch", marked_slow(["transformer_gcn_tiny", "transformer_birnn_gcn_tiny",
                                              "transformer_birnn_tiny"],
                                             {"transformer_birnn_gcn_tiny", "transformer_birnn_tiny"}))
def test_trains_and_generates(graph_bin, tmp_path, arch):
    from .test_baselines import generate, train
    output = train(graph_bin, tmp_path / arch, arch)
    losses = [float(v) for v in re.findall(r"train_inner .*? loss=([0-9.]+)", output)]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    checkpoint = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / arch / "checkpoint_last.pt"))
    module = "rnn.rnn.weight_hh_l0_reverse" if arch == "transformer_birnn_tiny" else "gcn.bias"
    assert f"encoder.layers.1.syntax_module.{module}" in checkpoint["model"]
    translations = generate(graph_bin, tmp_path / arch / "checkpoint_last.pt")
    assert len(translations) == 24
    if arch == "transformer_birnn_tiny":  # no syntax read: the same lines never parsed translate the same
        from fairseq_syntax_preprocess.cli import cli_main as preprocess_main
        raw, unparsed = graph_bin.parent / "raw", tmp_path / "unparsed-bin"
        preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                         "--spm-model", str(graph_bin / "spm.model"), "--destdir", str(unparsed)])
        assert not list(unparsed.glob("*.heads.bin"))
        assert generate(unparsed, tmp_path / arch / "checkpoint_last.pt") == translations


# ---- timing: edge lists against the dense form ------------------------------------------------------------------

def benchmark(batch=64, width=30, dim=256, repeats=50, threads=None):
    """Forward + backward of the edge-list module and of the dense form, CPU, float32, on random trees."""
    if threads:
        torch.set_num_threads(threads)
    generator = random.Random(0)
    sentences = []
    while len(sentences) < batch:  # ~1.3 pieces per word, sentences filling 2/3 to all of the width
        s = random_sentences([generator.randint(10, 22)], seed=generator.randrange(10 ** 6))[0]
        if sum(s["pieces"]) + 1 <= width:
            sentences.append(s)
    syntax, _ = batch_features(sentences, left_pad=True, extra_padding=0)
    real_width = syntax["src_word_ids"].size(1)
    gcn = GraphConvolution(dim, 45).train()
    x = torch.randn(real_width, batch, dim, requires_grad=True)

    def edge_list():
        arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], 45)
        gcn(x, arcs).sum().backward()

    def dense():
        arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], 45)
        dense_gcn(gcn, x, arcs).sum().backward()

    steps = {"edge list": edge_list, "dense bmm": dense}
    for step in steps.values():
        for _ in range(3):
            step()
    times = {name: [] for name in steps}
    for _ in range(repeats):  # interleaved, so that load from other processes hits both alike
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append((time.perf_counter() - start) * 1000)
    results = {name: sorted(values)[len(values) // 2] for name, values in times.items()}
    arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], 45)
    print(f"B={batch} T={real_width} C={dim} arcs={len(arcs)} threads={torch.get_num_threads()} "
          f"(edge dropout 0, gates and labels on; forward + backward, median of {repeats})")
    for name, ms in results.items():
        print(f"  {name}: {ms:.2f} ms")
    return results


if __name__ == "__main__":
    benchmark(threads=1)
    benchmark(threads=2)


def test_checkpoints_with_the_old_option_names_keep_their_settings(graph_bin, tmp_path):  # noqa: F811
    """The encoder GCN's options were --gcn-edge-dropout, --no-gcn-labels, --no-gcn-gates before the decoder got a
    GCN of its own: a checkpoint saved under those names loads with its settings (not the defaults)."""
    result = run_cli("fairseq-train", graph_bin, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en",
                     "-t", "de", "--arch", "transformer_gcn_tiny", "--no-encoder-gcn-labels",
                     "--encoder-gcn-edge-dropout", "0.1", "--optimizer", "adam", "--max-tokens", "1500",
                     "--max-update", "1", "--save-dir", tmp_path, "--cpu", "--num-workers", "0")
    assert result.returncode == 0
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    model_cfg = state["cfg"]["model"]
    for new, old in (("no_encoder_gcn_labels", "no_gcn_labels"), ("encoder_gcn_edge_dropout", "gcn_edge_dropout"),
                     ("no_encoder_gcn_gates", "no_gcn_gates")):
        if hasattr(model_cfg, new):  # as a checkpoint of the old code
            setattr(model_cfg, old, getattr(model_cfg, new))
            delattr(model_cfg, new)
    torch.save(state, tmp_path / "old.pt")
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "old.pt")],
                                                                 arg_overrides={"data": str(graph_bin)})
    gcn = models[0].encoder.layers[0].syntax_module.gcn
    assert (gcn.labels, gcn.gates, gcn.edge_dropout) == (False, True, 0.1)
