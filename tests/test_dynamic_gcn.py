"""Dyn-STGCD's spatial and temporal graph layers (Li et al., "Neural Machine Translation with Dynamic Graph
Convolutional Decoder"): modules/dyn_stgcd/dynamic_gcn.py (graph-attention coefficients of eq. 7, the evolving
weight of eq. 6 / appendix A.1, the normalised propagation of eq. 2 with the <sog> node, DynamicGCN over several
steps: eq. 5-7), modules/dyn_stgcd/temporal_convolution.py (§3.4, A.3) and the pure functions of
fairseq_syntax/models/dyn_stgcd.py (gold target graph of appendix B.1, smooth-L1 graph loss of eq. 9 / A.4, the
hidden-graph option).

Every module is compared with loops written from the paper's equations (per node, per column, per entry, float64
on the CPU), on random inputs with padded nodes that hold garbage; the modules run on the CPU and on CUDA when there
is one (tests/devices.py). Hand-worked examples for the pure functions."""
import math

import numpy as np
import pytest
import torch

from fairseq_syntax.data.channels import SentenceSyntax
from fairseq_syntax.data.features import collate_features
from fairseq_syntax.models.dyn_stgcd import parse_hidden_graphs
from fairseq_syntax.modules.dyn_stgcd.target_graph import (
    argmax_heads, gold_heads, gold_target_graph, graph_loss, head_loss, piece_graph, tree_heads, word_scores,
)
from fairseq_syntax.modules.dyn_stgcd.dynamic_gcn import (
    DynamicGCN, EvolvingWeight, GraphAttentionCoefficients, PairwiseScores, masked_log_softmax,
    normalized_propagation,
)
from fairseq_syntax.modules.dyn_stgcd.temporal_convolution import TemporalConvolution

from .devices import assert_same, on

TOLERANCES = dict(rtol=1e-4, atol=1e-5)  # float32 module against float64 loops
GARBAGE = 2.0  # padded nodes hold values of either sign with magnitudes in [2, 3): the scale of the real ones, so
# that a padded node that leaked into a softmax would neither vanish nor saturate it


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def real_nodes(mask, b):
    return [i for i in range(mask.size(1)) if bool(mask[b, i])]


def random_nodes(generator, mask, dim):
    """(B, n, dim) standard normal on real nodes, garbage on padded ones (magnitudes GARBAGE to GARBAGE + 1)."""
    nodes = torch.randn(*mask.shape, dim, generator=generator)
    sign = torch.randn(*mask.shape, dim, generator=generator).sign()
    garbage = sign * (GARBAGE + torch.rand(*mask.shape, dim, generator=generator))
    return torch.where(mask.unsqueeze(-1), nodes, garbage)


# ---- the equations as loops --------------------------------------------------------------------------------------

def naive_attention(module, nodes, mask):
    """Eq. 7's raw adjacency, entry by entry: ã_ij = exp(LR(psi^T [W y_i || W y_j])) / sum_{k in N_i} exp(LR(psi^T
    [W y_i || W y_k])), LR = LeakyReLU of slope 0.2, psi = [psi_i; psi_j], N_i = the real nodes; 0 in the rows and
    columns of padded nodes. Float64."""
    W = module.project.weight.detach().double()
    psi = module.psi.detach().double().reshape(-1)  # (2 * attention_dim,): psi^T [a || b] = psi_i . a + psi_j . b

    def score(b, i, j):
        e = float(psi @ torch.cat([W @ nodes[b, i].double(), W @ nodes[b, j].double()]))
        return math.exp(e if e > 0 else 0.2 * e)

    return row_softmax_loop(score, mask)


def row_softmax_loop(score, mask):
    """ã_ij = score(b, i, j) / sum_{k in N_i} score(b, i, k), N_i = the real nodes; 0 in the rows and columns of
    padded nodes (float64, (B, n, n))."""
    batch, n = mask.shape
    out = torch.zeros(batch, n, n, dtype=torch.float64)
    for b in range(batch):
        real = real_nodes(mask, b)
        for i in real:
            total = sum(score(b, i, k) for k in real)
            for j in real:
                out[b, i, j] = score(b, i, j) / total
    return out


def naive_attention_v2(module, nodes, mask):
    """The gatv2 option's raw adjacency (Brody et al. 2022, eq. 7 of theirs), entry by entry: ã_ij =
    exp(a . LR(W [y_i || y_j])) / sum_{k in N_i} exp(a . LR(W [y_i || y_k])), W = [W_i W_j] (the module's projection:
    its first attention_dim outputs are W_i's, the rest W_j's), LR of slope 0.2; 0 for padded nodes. Float64."""
    W = module.project.weight.detach().double()
    half = W.size(0) // 2
    W_i, W_j = W[:half], W[half:]
    a = module.score.weight.detach().double().reshape(-1)

    def score(b, i, j):
        hidden = W_i @ nodes[b, i].double() + W_j @ nodes[b, j].double()
        hidden = torch.where(hidden > 0, hidden, 0.2 * hidden)
        return math.exp(float(a @ hidden))

    return row_softmax_loop(score, mask)


def naive_evolving_weight(module, nodes, mask, previous):
    """Appendix A.1 column by column (each column of W a GRU state): x_c = sum_i softmax_i(y_i . q_c) y_i over the
    real nodes (q_c = column c of the queries), then
        z = sigmoid(P_Z x_c + Q_Z w_c + b_Z[:, c]),   r = sigmoid(P_R x_c + Q_R w_c + b_R[:, c]),
        w~ = tanh(P_W x_c + Q_W (r * w_c) + b_W[:, c]),   w_new = (1 - z) * w_c + z * w~.
    Float64, (B, g, g)."""
    P = module.input_weights.detach().double()  # 0 = Z, 1 = R, 2 = W
    Q = module.state_weights.detach().double()
    bias = module.biases.detach().double()
    queries = module.queries.detach().double()
    batch, _, g = nodes.shape
    out = torch.zeros(batch, g, g, dtype=torch.float64)
    for b in range(batch):
        real = real_nodes(mask, b)
        for c in range(g):
            scores = [float(nodes[b, i].double() @ queries[:, c]) for i in real]
            top = max(scores)
            exps = [math.exp(s - top) for s in scores]
            x = torch.zeros(g, dtype=torch.float64)
            for i, e in zip(real, exps):
                x = x + (e / sum(exps)) * nodes[b, i].double()
            w = previous[b, :, c].double()
            z = torch.sigmoid(P[0] @ x + Q[0] @ w + bias[0][:, c])
            r = torch.sigmoid(P[1] @ x + Q[1] @ w + bias[1][:, c])
            candidate = torch.tanh(P[2] @ x + Q[2] @ (r * w) + bias[2][:, c])
            out[b, :, c] = (1 - z) * w + z * candidate
    return out


def naive_propagation(adjacency, mask, nodes, sog=None):
    """Eq. 2's D^-1/2 Â D^-1/2 per node, with <sog> linked to every real node: out_i = sum_j Â_ij / sqrt(d_i d_j)
    y_j + sog / sqrt(d_i d_sog), Â = A + I over the real nodes, d_i = sum_j Â_ij (+ 1 for the edge to <sog>),
    d_sog = (number of real nodes) + 1 (its links and itself); 0 on padded nodes. Float64."""
    batch, n, dim = nodes.shape
    out = torch.zeros(batch, n, dim, dtype=torch.float64)
    for b in range(batch):
        real = real_nodes(mask, b)
        hat = {(i, j): float(adjacency[b, i, j]) + (1.0 if i == j else 0.0) for i in real for j in real}
        degree = {i: sum(hat[i, j] for j in real) + (1.0 if sog is not None else 0.0) for i in real}
        for i in real:
            for j in real:
                out[b, i] += hat[i, j] / math.sqrt(degree[i] * degree[j]) * nodes[b, j].double()
            if sog is not None:
                out[b, i] += sog[b].double() / math.sqrt(degree[i] * (len(real) + 1))
    return out


# ---- 1. graph-attention coefficients (eq. 7) ---------------------------------------------------------------------

def coefficients_match_their_loop(device, module, naive, generator):
    """The module's coefficients (embed_dim 5) against `naive` on 4 rows of 6 nodes: full, right padding, left
    padding, one real node (ã_00 = 1); gives (nodes, mask, the loop's coefficients)."""
    mask = torch.tensor([[True] * 6,
                         [True, True, True, True, False, False],
                         [False, False, True, True, True, True],
                         [True, False, False, False, False, False]])
    nodes = random_nodes(generator, mask, 5)
    got = on(device, module)(on(device, nodes), on(device, mask)).cpu()
    assert got.dtype == torch.float32 and got.shape == (4, 6, 6)
    expected = naive(module, nodes, mask)
    torch.testing.assert_close(got.double(), expected, **TOLERANCES)
    assert float(expected[3, 0, 0]) == 1.0
    return nodes, mask, expected


def test_graph_attention_coefficients_equal_the_softmax_over_real_neighbours(device):
    """Eq. 7's ã_ij = exp(LR(psi^T [W y_i || W y_j])) / sum_{k in N_i} exp(...), LeakyReLU slope 0.2, N_i = the
    real nodes, with the module's own W and psi; rows and columns of padded nodes are 0, and the garbage in padded
    nodes changes nothing."""
    generator = torch.Generator().manual_seed(11)
    torch.manual_seed(11)
    module = GraphAttentionCoefficients(embed_dim=5, attention_dim=3)
    with torch.no_grad():
        module.psi.mul_(4.0)  # scores on both sides of the LeakyReLU's kink
    nodes, mask, _ = coefficients_match_their_loop(device, module, naive_attention, generator)
    # the kink is exercised: some scores are negative, some positive
    W, psi = module.project.weight.detach(), module.psi.detach().reshape(-1)
    raw = [float(psi @ torch.cat([W @ nodes[0, i], W @ nodes[0, j]])) for i in range(6) for j in range(6)]
    assert min(raw) < 0 < max(raw)


def rankings(coefficients, mask, b):
    """Each real row's real columns, ordered by coefficient (largest first)."""
    real = real_nodes(mask, b)
    return [tuple(sorted(real, key=lambda j: -float(coefficients[b, i, j]))) for i in real]


def test_the_papers_graph_attention_ranks_the_candidates_alike_in_every_row():
    """Why the paper's eq. 7 gives every word the same head (docs/run-log.md, 2026-11-28, Dyn-STGCD seed 1's
    trees): its score LeakyReLU(psi_i . W y_i + psi_j . W y_j) is increasing in the candidate's term, so every row
    orders the candidate nodes alike (Brody et al. 2022's static attention), computed from the loop, not from the
    module."""
    generator = torch.Generator().manual_seed(13)
    torch.manual_seed(13)
    module = GraphAttentionCoefficients(embed_dim=5, attention_dim=3)
    with torch.no_grad():
        module.psi.mul_(4.0)
    mask = torch.tensor([[True] * 7, [False, False, True, True, True, True, True]])
    nodes = random_nodes(generator, mask, 5)
    expected = naive_attention(module, nodes, mask)
    for b in range(2):
        orders = rankings(expected, mask, b)
        assert len(set(orders)) == 1, orders
    torch.testing.assert_close(module(nodes, mask).double(), expected, **TOLERANCES)


def test_gatv2_coefficients_equal_the_softmax_of_their_loop_and_rank_per_row(device):
    """The gatv2 option (Brody et al.'s a . LeakyReLU(W [y_i || y_j])) against its loop, padding on either side with
    garbage in the padded nodes; and, unlike the paper's scores, rows that order the candidates differently."""
    generator = torch.Generator().manual_seed(14)
    torch.manual_seed(14)
    module = GraphAttentionCoefficients(embed_dim=5, attention_dim=3, scores="gatv2")
    with torch.no_grad():
        module.score.weight.mul_(4.0)
    _, mask, expected = coefficients_match_their_loop(device, module, naive_attention_v2, generator)
    assert len(set(rankings(expected, mask, 0))) > 1
    with pytest.raises(ValueError, match="gatv3"):
        GraphAttentionCoefficients(embed_dim=5, attention_dim=3, scores="gatv3")


@pytest.mark.parametrize("chunk_values", [1 << 20, 40])
def test_gatv2_pairwise_scores_and_their_gradients_equal_the_formula(monkeypatch, chunk_values):
    """PairwiseScores (gatv2's raw scores, its (B, n, m, d') pre-activations never kept, made a few sentences at a
    time, again in the backward pass): values entry by entry from s_ij = a . LeakyReLU(r_i + c_j) in float64, and
    gradients against finite differences (gradcheck), in one chunk and in chunks of one sentence (40 values)."""
    monkeypatch.setattr("fairseq_syntax.modules.dyn_stgcd.dynamic_gcn.PAIRWISE_CHUNK_VALUES", chunk_values)
    generator = torch.Generator().manual_seed(3)
    rows, columns, weight = (torch.randn(*shape, generator=generator, dtype=torch.float64, requires_grad=True)
                             for shape in ((3, 4, 2), (3, 5, 2), (2,)))
    scores = PairwiseScores.apply(rows, columns, weight, 0.2)
    assert scores.shape == (3, 4, 5)
    for b, i, j in np.ndindex(3, 4, 5):
        hidden = [float(rows[b, i, k] + columns[b, j, k]) for k in range(2)]
        expected = sum(float(weight[k]) * (h if h > 0 else 0.2 * h) for k, h in enumerate(hidden))
        assert math.isclose(float(scores[b, i, j]), expected, rel_tol=1e-12, abs_tol=1e-12)
    assert torch.autograd.gradcheck(lambda r, c, a: PairwiseScores.apply(r, c, a, 0.2),
                                    (rows, columns, weight))


# ---- 2. evolving weight (eq. 6, appendix A.1) --------------------------------------------------------------------

def test_evolving_weight_equals_a_gru_per_column_over_the_attention_summary(device):
    """Appendix A.1: W_t = (1 - Z) . W_{t-1} + Z . W~ column by column, Z / R / W~ from P x_c + Q w_c + b_c with
    x_c = sum_i softmax_i(y_i . q_c) y_i over the real nodes; the module's own P, Q, B (biases randomised: they
    start at zero), padded nodes holding garbage."""
    generator = torch.Generator().manual_seed(12)
    torch.manual_seed(12)
    g = 4
    module = EvolvingWeight(g)
    with torch.no_grad():
        module.biases.normal_(0.0, 0.7, generator=generator)
    mask = torch.tensor([[True] * 5,
                         [True, True, True, False, False],
                         [False, True, True, True, True],
                         [True, False, False, False, False]])
    nodes = random_nodes(generator, mask, g)
    previous = torch.randn(4, g, g, generator=generator)
    got = on(device, module)(on(device, nodes), on(device, mask), on(device, previous)).cpu()
    assert got.shape == (4, g, g)
    torch.testing.assert_close(got.double(), naive_evolving_weight(module, nodes, mask, previous), **TOLERANCES)
    # the trainable W_{-1} is what a sentence starts from
    assert torch.equal(module.initial_state(3)[2], module.initial)


# ---- 3. normalised propagation (eq. 2 with <sog>) ----------------------------------------------------------------

@pytest.mark.parametrize("with_sog", [True, False], ids=["sog", "no-sog"])
def test_normalized_propagation_equals_the_per_node_sum(device, with_sog):
    """Eq. 2 per node: out_i = sum_j Â_ij / sqrt(d_i d_j) y_j (+ sog / sqrt(d_i d_sog)), Â = A + I on the real
    nodes, d_i = sum_j Â_ij (+ 1 with <sog>), d_sog = number of real nodes + 1; padded nodes give 0, and the
    garbage in their adjacency entries and vectors reaches no real node."""
    generator = torch.Generator().manual_seed(13 + with_sog)
    mask = torch.tensor([[True] * 5,
                         [True, True, True, False, False],
                         [False, False, True, True, True]])
    dim = 3
    nodes = random_nodes(generator, mask, dim)
    adjacency = torch.rand(3, 5, 5, generator=generator)  # a soft directed graph, as A_t is
    both = mask.unsqueeze(2) & mask.unsqueeze(1)
    adjacency = torch.where(both, adjacency, torch.full_like(adjacency, 100.0))
    sog = torch.randn(3, dim, generator=generator) if with_sog else None
    got = normalized_propagation(on(device, adjacency), on(device, mask), on(device, nodes), on(device, sog)).cpu()
    expected = naive_propagation(adjacency, mask, nodes, sog)
    torch.testing.assert_close(got.double(), expected, **TOLERANCES)
    assert torch.equal(got[~mask], torch.zeros_like(got[~mask]))


# ---- 4. DynamicGCN over several steps (eq. 5-7) ------------------------------------------------------------------

@pytest.mark.parametrize("node_dim", [None, 6], ids=["one-width", "wider-nodes"])
@pytest.mark.parametrize("edges", ["next_step", "own_step"])
@pytest.mark.parametrize("first_layer", [False, True], ids=["inputs", "first-layer"])
@pytest.mark.parametrize("teacher_forced", [False, True], ids=["free", "teacher-forced"])
def test_dynamic_gcn_steps_follow_the_recurrence_of_eq_7(device, teacher_forced, first_layer, edges, node_dim):
    """Steps t = 0..5 of one layer, B = 2 (row 1's nodes 4 and 5 padded, with garbage), against eq. 7 per entry:
    A_t[i][j] = sigmoid(alpha (A_{t-1}[i][j] + Ã[i][j]) + beta) over a matrix of the maximum number of nodes
    that starts at A_{-1} = I, so that a node that does not exist yet goes through the update at every step with
    nothing added; alpha / beta = refine's weight and bias. next_step (eq. 7 as printed): Ã = Ã_{t-1}, the GAT
    coefficients (loop above) of the outputs handed to next_state at step t-1 over the nodes 0..t-1 (0 in the new
    node's row and column). own_step: Ã = Ã_t, the coefficients of the step's edge inputs over the nodes 0..t, the
    new node's row and column included. Teacher-forced: A_{t-1} is the gold graph of the nodes 0..t-1 (the
    identity for the new node). Also W_t (the A.1 loop, from W_{-1} = the trainable initial matrix), the convolved
    nodes ReLU(D^-1/2 Â D^-1/2 [Y; sog] W_t) (eq. 2, 5), 0 on padded nodes, and the raw scores given back (their
    row softmax over the real nodes is the loop's Ã). First layer: its input Y^0 is 0, passed as None (the step
    computes nothing of it), and the loops run on zeros. Wider nodes (node_dim 6 over a 4-wide graph,
    --dyn-stgcd-node-dim): the inputs, edge inputs and outputs are 6 wide, the graph attention reads them whole,
    and W_t and the convolution read the inputs projected to the graph's width (x P^T, P the layer's to_graph)."""
    generator = torch.Generator().manual_seed(14 + teacher_forced)
    torch.manual_seed(14)
    g, steps, batch = 4, 6, 2
    width = node_dim or g  # of the nodes
    own_step = edges == "own_step"
    module = DynamicGCN(g, attention_dim=3, new_node_edges=edges, node_dim=node_dim)
    assert (module.to_graph is None) == (node_dim is None)
    with torch.no_grad():
        module.refine.weight.fill_(0.7)
        module.refine.bias.fill_(-0.4)
        module.weight.biases.normal_(0.0, 0.5, generator=generator)
        module.attention.psi.mul_(3.0)
    mask = torch.ones(batch, steps, dtype=torch.bool)
    mask[1, 4:] = False
    sog = torch.randn(batch, g, generator=generator)
    gold = (torch.rand(batch, steps, steps, generator=generator) < 0.3).float()
    gold = torch.maximum(gold, torch.eye(steps))
    gold = torch.where(mask.unsqueeze(2) & mask.unsqueeze(1), gold, torch.full_like(gold, 7.0))  # garbage
    alpha, beta = module.refine.weight.item(), module.refine.bias.item()

    layer = on(device, module)
    state = layer.initial_state(torch.zeros(batch, 0, width, device=device))
    running = [[[1.0 if i == j else 0.0 for j in range(steps)] for i in range(steps)] for _ in range(batch)]
    weight = module.weight.initial.detach().double().expand(batch, g, g)
    previous_outputs = None
    for t in range(steps):
        n = t + 1
        step_mask = mask[:, :n]
        inputs = random_nodes(generator, step_mask, width)  # Y^{l-1}_t: every node re-encoded at every step
        inputs = torch.zeros_like(inputs) if first_layer else inputs
        edge_inputs = random_nodes(generator, step_mask, width)  # what own_step reads (the first block: embeddings)
        outputs = random_nodes(generator, step_mask, width)  # Y^l_t, what eq. 8's MLP would give
        # what the graph convolves: the inputs, or their projection to the graph's width
        graph_inputs = (inputs if module.to_graph is None
                        else torch.zeros(batch, n, g) if first_layer else inputs @ module.to_graph.weight.detach().t())
        gold_previous = gold[:, :t, :t] if teacher_forced else None

        # eq. 7 per entry, on the whole (steps x steps) matrix; Ã over the nodes 0..m-1
        m = n if own_step else t
        coefficients = (naive_attention(module.attention, edge_inputs if own_step else previous_outputs,
                                        mask[:, :m]) if m else None)
        for b in range(batch):
            for i in range(steps):
                for j in range(steps):
                    if teacher_forced:
                        base = float(gold[b, i, j]) if i < t and j < t else (1.0 if i == j else 0.0)
                    else:
                        base = running[b][i][j]
                    added = float(coefficients[b, i, j]) if i < m and j < m else 0.0
                    running[b][i][j] = sigmoid(alpha * (base + added) + beta)
        expected_adjacency = torch.zeros(batch, n, n, dtype=torch.float64)
        for b in range(batch):
            for i in real_nodes(step_mask, b):
                for j in real_nodes(step_mask, b):
                    expected_adjacency[b, i, j] = running[b][i][j]
        weight = naive_evolving_weight(module.weight, graph_inputs, step_mask, weight)
        propagated = naive_propagation(expected_adjacency, step_mask, graph_inputs, sog)
        expected_convolved = torch.zeros(batch, n, g, dtype=torch.float64)
        for b in range(batch):
            for i in range(n):
                expected_convolved[b, i] = torch.relu(propagated[b, i] @ weight[b])

        convolved, adjacency, new_weight, scores = layer.step(
            None if first_layer else on(device, inputs), on(device, step_mask), state, on(device, sog),
            on(device, gold_previous), edge_inputs=on(device, edge_inputs))
        assert adjacency.dtype == torch.float32 and adjacency.shape == (batch, n, n)
        torch.testing.assert_close(adjacency.cpu().double(), expected_adjacency, **TOLERANCES)
        torch.testing.assert_close(new_weight.cpu().double(), weight, **TOLERANCES)
        torch.testing.assert_close(convolved.cpu().double(), expected_convolved, **TOLERANCES)
        if m:
            assert scores.shape == (batch, m, m)
            softmax = GraphAttentionCoefficients.coefficients(scores, on(device, mask[:, :m]))
            torch.testing.assert_close(softmax.cpu().double(), coefficients, **TOLERANCES)
        else:
            assert scores is None
        state = layer.next_state(state, adjacency, new_weight, on(device, outputs))
        previous_outputs = outputs
    # the comparison tells the A_{-1} = I reading apart from a new node that enters at I and is updated once: the
    # last node's diagonal went through 6 updates, far from one update's value
    if not teacher_forced:
        assert abs(running[0][5][5] - sigmoid(alpha + beta)) > 100 * TOLERANCES["atol"]


def test_own_step_gives_the_newest_node_edges_of_its_own():
    """own_step: at its step, the newest node's row of A_t varies with its own edge input (its edges are computed
    then), where next_step gives it one content-free value in every entry off the diagonal (eq. 7 as printed: the
    last word's row is the same whatever the word, so its argmax is BOS, the root)."""
    torch.manual_seed(21)
    g, batch = 4, 3
    rows = {}
    for edges in ("next_step", "own_step"):
        layer = DynamicGCN(g, attention_dim=3, new_node_edges=edges, attention_scores="gatv2")
        state = layer.initial_state(torch.zeros(batch, 0, g))
        generator = torch.Generator().manual_seed(22)
        for t in range(4):
            nodes = torch.randn(batch, t + 1, g, generator=generator)
            with torch.no_grad():
                convolved, adjacency, weight, _ = layer.step(nodes, None, state, edge_inputs=nodes)
            state = layer.next_state(state, adjacency, weight, convolved)
        rows[edges] = adjacency[:, -1, :-1]  # the newest node's entries off the diagonal
    assert torch.equal(rows["next_step"], rows["next_step"][:1, :1].expand_as(rows["next_step"]))
    assert float(rows["own_step"].std(dim=1).min()) > 1e-3  # per node, its entries differ


def test_eq_7_starts_near_the_identity():
    """eq. 7's Linear at its initial values: A_{-1} = I is (nearly) a fixed point, so with nothing added (no Ã:
    the static adjacency) A stays near the identity over many steps (off the diagonal below 0.05, on it above
    0.95; at weight 1, bias 0 every entry off the diagonal was 0.5 after one step and ~0.66 after a few), and a
    coefficient near 1 lifts an entry from there above 0.9 in one step."""
    layer = DynamicGCN(4, attention_dim=3, dynamic_adjacency=False)
    state = layer.initial_state(torch.zeros(1, 0, 4))
    for t in range(12):
        nodes = torch.randn(1, t + 1, 4)
        _, adjacency, weight, _ = layer.step(nodes, None, state)
        state = layer.next_state(state, adjacency, weight, nodes)
    eye = torch.eye(12, dtype=torch.bool)
    assert float(adjacency[0][~eye].max()) < 0.05 and float(adjacency[0][eye].min()) > 0.95
    off = float(adjacency[0, 3, 1])
    assert float(layer.refined(torch.tensor([off + 0.95]))) > 0.9


def test_no_mask_is_every_node_real(device):
    """The decoder passes node_mask None when a step has no padding (every step of training and beam search):
    each module then equals its equation's loop with every node real, and a whole DynamicGCN step too."""
    generator = torch.Generator().manual_seed(17)
    torch.manual_seed(17)
    g, n, batch = 4, 5, 3
    every = torch.ones(batch, n, dtype=torch.bool)
    nodes = torch.randn(batch, n, g, generator=generator)
    attention = GraphAttentionCoefficients(embed_dim=g, attention_dim=3)
    torch.testing.assert_close(on(device, attention)(on(device, nodes), None).cpu().double(),
                               naive_attention(attention, nodes, every), **TOLERANCES)
    weight = EvolvingWeight(g)
    with torch.no_grad():
        weight.biases.normal_(0.0, 0.7, generator=generator)
    previous = torch.randn(batch, g, g, generator=generator)
    torch.testing.assert_close(on(device, weight)(on(device, nodes), None, on(device, previous)).cpu().double(),
                               naive_evolving_weight(weight, nodes, every, previous), **TOLERANCES)
    adjacency = torch.rand(batch, n, n, generator=generator)
    for sog in (None, torch.randn(batch, g, generator=generator)):
        got = normalized_propagation(on(device, adjacency), None, on(device, nodes), on(device, sog)).cpu()
        torch.testing.assert_close(got.double(), naive_propagation(adjacency, every, nodes, sog), **TOLERANCES)
    temporal = TemporalConvolution(g, kernel_size=3, dilation=2).eval()
    torch.testing.assert_close(on(device, temporal)(on(device, nodes), None, on(device, adjacency)).cpu().double(),
                               naive_temporal(temporal, nodes, every, adjacency), **TOLERANCES)
    # two steps of a layer without a mask and with an all-real one (the masked path is checked against eq. 7 above)
    layer = on(device, DynamicGCN(g, attention_dim=3))
    states = [layer.initial_state(on(device, nodes[:, :0])) for _ in range(2)]
    sog = on(device, torch.randn(batch, g, generator=generator))
    for t in range(2):
        inputs = on(device, nodes[:, :t + 1])
        results = [layer.step(inputs, mask, state, sog) for mask, state in
                   zip((None, on(device, every[:, :t + 1])), states)]
        for got, expected in zip(results[0][:3], results[1][:3]):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
        states = [layer.next_state(state, adjacency, weight, convolved)
                  for state, (convolved, adjacency, weight, _) in zip(states, results)]
    # the first layer's Y^0 = 0 passed as None (nothing of it computed) equals zeros through the masked path
    states = [layer.initial_state(on(device, nodes[:, :0])) for _ in range(2)]
    for t in range(3):
        zeros = on(device, torch.zeros(batch, t + 1, g))
        results = [layer.step(None, None, states[0], sog),
                   layer.step(zeros, on(device, every[:, :t + 1]), states[1], sog)]
        for got, expected in zip(results[0][:3], results[1][:3]):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
        states = [layer.next_state(state, adjacency, weight, on(device, nodes[:, :t + 1]))
                  for state, (_, adjacency, weight, _) in zip(states, results)]


# ---- 5. temporal convolution (§3.4, A.3) -------------------------------------------------------------------------

def naive_temporal(layer, nodes, mask, adjacency):
    """§3.4 per node: h_i = P x_i + p (the width-1 convolution; padded nodes zeroed before the causal one);
    c_i = b + sum_{k=0}^{h-1} f(k) h_{i - d k} (A.3; h_{i'} = 0 for i' < 0; f(k) = Conv1d weight[..., h - 1 - k]);
    the basic GCN of eq. 2 (no <sog>) over the adjacency, the graph Linear, ReLU; out_i = LayerNorm(x_i + that).
    Real nodes only (float64)."""
    P, p = layer.pointwise.weight.detach().double(), layer.pointwise.bias.detach().double()
    conv = layer.causal.convolution
    f, conv_bias = conv.weight.detach().double(), conv.bias.detach().double()
    h, d = layer.causal.kernel_size, layer.causal.dilation
    G, graph_bias = layer.graph.weight.detach().double(), layer.graph.bias.detach().double()
    gamma, shift = layer.layer_norm.weight.detach().double(), layer.layer_norm.bias.detach().double()
    batch, n, g = nodes.shape
    hidden = torch.zeros(batch, n, g, dtype=torch.float64)
    history = torch.zeros(batch, n, g, dtype=torch.float64)
    for b in range(batch):
        for i in real_nodes(mask, b):
            hidden[b, i] = P @ nodes[b, i].double() + p
        for i in range(n):
            history[b, i] = conv_bias
            for k in range(h):
                if i - d * k >= 0:
                    history[b, i] += f[:, :, h - 1 - k] @ hidden[b, i - d * k]
    propagated = naive_propagation(adjacency, mask, history)
    out = torch.zeros(batch, n, g, dtype=torch.float64)
    for b in range(batch):
        for i in real_nodes(mask, b):
            v = nodes[b, i].double() + torch.relu(G @ propagated[b, i] + graph_bias)
            mean = sum(float(x) for x in v) / g
            variance = sum((float(x) - mean) ** 2 for x in v) / g
            out[b, i] = (v - mean) / math.sqrt(variance + layer.layer_norm.eps) * gamma + shift
    return out


@pytest.mark.parametrize("kernel_size,dilation", [(3, 1), (2, 2), (3, 2)])
def test_temporal_convolution_equals_the_per_node_loops(device, kernel_size, dilation):
    """§3.4 / A.3: width-1 convolution, dilated causal convolution sum_k f(k) h_{i - d k} (padded nodes zeroed
    first), basic GCN of eq. 2 with the graph Linear, ReLU, residual, LayerNorm, on right- and left-padded rows
    whose padded nodes hold garbage; compared on the real nodes."""
    generator = torch.Generator().manual_seed(15 * kernel_size + dilation)
    torch.manual_seed(15 * kernel_size + dilation)
    g, n = 5, 7
    layer = TemporalConvolution(g, kernel_size, dilation).eval()
    with torch.no_grad():
        layer.layer_norm.weight.normal_(1.0, 0.3, generator=generator)
        layer.layer_norm.bias.normal_(0.0, 0.3, generator=generator)
    mask = torch.tensor([[True] * n,
                         [True] * (n - 2) + [False] * 2,
                         [False] * 2 + [True] * (n - 2)])
    nodes = random_nodes(generator, mask, g)
    adjacency = torch.rand(3, n, n, generator=generator)
    adjacency = torch.where(mask.unsqueeze(2) & mask.unsqueeze(1), adjacency, torch.full_like(adjacency, 100.0))
    got = on(device, layer)(on(device, nodes), on(device, mask), on(device, adjacency)).cpu()
    expected = naive_temporal(layer, nodes, mask, adjacency)
    torch.testing.assert_close(got[mask].double(), expected[mask], **TOLERANCES)


def test_temporal_convolution_never_reads_a_later_node_over_a_lower_triangular_graph(device):
    """Causality in node order (§3.4): with edges only to earlier nodes (A lower-triangular, as the basic GCN mixes
    neighbours through it), node i's output is the same whatever the inputs of the nodes after i and their rows of
    A hold."""
    generator = torch.Generator().manual_seed(16)
    torch.manual_seed(16)
    g, n = 4, 8
    layer = on(device, TemporalConvolution(g, kernel_size=3, dilation=2).eval())
    mask = torch.tensor([[True] * n, [True] * (n - 3) + [False] * 3])
    nodes = random_nodes(generator, mask, g)
    adjacency = torch.tril(torch.rand(2, n, n, generator=generator))
    out = layer(on(device, nodes), on(device, mask), on(device, adjacency))
    for i in range(n - 1):
        changed_nodes, changed_adjacency = nodes.clone(), adjacency.clone()
        changed_nodes[:, i + 1:] = torch.randn(2, n - i - 1, g, generator=generator)
        changed_adjacency[:, i + 1:] = torch.tril(torch.rand(2, n, n, generator=generator))[:, i + 1:]
        again = layer(on(device, changed_nodes), on(device, mask), on(device, changed_adjacency))
        assert_same(again[:, :i + 1], out[:, :i + 1], device)
        assert not torch.allclose(again[0, i + 1:], out[0, i + 1:])  # the later nodes did change


# ---- 6. gold target graph (appendix B.1, eq. 9's A*) ------------------------------------------------------------

# Two target sentences in prev_output_tokens' columns (0 = BOS, then the pieces; the EOS is not an input):
#   sentence 0: words w0 (column 1), w1 (columns 2, 3), w2 (column 4), padding in column 5; heads (1-based, 0 =
#               root) [3, 3, 0]: w0 <- w2, w1 <- w2, w2 the root
#   sentence 1: words w0 (columns 1, 2), w1 (column 3), padding in 4, 5; heads [0, 1]: w0 the root, w1 <- w0
# prev_word_ids: the 0-based word of each piece, -1 elsewhere; prev_parent_first ("position" kind): the column of
# the first piece of the piece's parent word, the root's pieces at the root's first piece, non-piece columns at
# themselves (what fairseq_syntax/data/features.py gives for these trees).
WORD_IDS = torch.tensor([[-1, 0, 1, 1, 2, -1],
                         [-1, 0, 0, 1, -1, -1]])
PARENT_FIRST = torch.tensor([[0, 4, 4, 4, 4, 5],
                             [0, 1, 1, 1, 4, 5]])
NODE_MASK = torch.tensor([[True, True, True, True, True, False],
                          [True, True, True, True, False, False]])
# row = dependent column, 1 at its head: a word's first piece at the first piece of its head word, a later piece
# at its own word's first piece ("all subunits from one word are linked to the first unit", B.1), the root's first
# piece at BOS (column 0); plus the diagonal of the real nodes
EXPECTED_GOLD = torch.tensor([
    [[1, 0, 0, 0, 0, 0],   # BOS
     [0, 1, 0, 0, 1, 0],   # w0 -> w2
     [0, 0, 1, 0, 1, 0],   # w1's first piece -> w2
     [0, 0, 1, 1, 0, 0],   # w1's second piece -> w1's first piece
     [1, 0, 0, 0, 1, 0],   # w2, the root -> BOS
     [0, 0, 0, 0, 0, 0]],  # padding
    [[1, 0, 0, 0, 0, 0],   # BOS
     [1, 1, 0, 0, 0, 0],   # w0's first piece, the root -> BOS
     [0, 1, 1, 0, 0, 0],   # w0's second piece -> w0's first piece
     [0, 1, 0, 1, 0, 0],   # w1 -> w0
     [0, 0, 0, 0, 0, 0],
     [0, 0, 0, 0, 0, 0]]], dtype=torch.float32)
# without the root column and the diagonal: the arcs between pieces only
EXPECTED_PIECES = torch.tensor([
    [[0, 0, 0, 0, 0, 0],
     [0, 0, 0, 0, 1, 0],
     [0, 0, 0, 0, 1, 0],
     [0, 0, 1, 0, 0, 0],
     [0, 0, 0, 0, 0, 0],
     [0, 0, 0, 0, 0, 0]],
    [[0, 0, 0, 0, 0, 0],
     [0, 0, 0, 0, 0, 0],
     [0, 1, 0, 0, 0, 0],
     [0, 1, 0, 0, 0, 0],
     [0, 0, 0, 0, 0, 0],
     [0, 0, 0, 0, 0, 0]]], dtype=torch.float32)


def test_hand_written_features_are_what_the_data_pipeline_gives():
    """The inputs above are the prev_output features fairseq_syntax/data/features.py collates for the two trees."""
    sentences = [SentenceSyntax(word_ids=np.array([0, 1, 1, 2]), heads=np.array([3, 3, 0]), labels=np.ones(3)),
                 SentenceSyntax(word_ids=np.array([0, 0, 1]), heads=np.array([0, 1]), labels=np.ones(2))]
    features = collate_features(["prev_parent_first", "prev_word_ids"], {"target": sentences},
                                {"target": np.array([5, 4])}, {"prev_output": 6}, {"target": False})
    assert torch.equal(features["prev_parent_first"], PARENT_FIRST)
    assert torch.equal(features["prev_word_ids"], WORD_IDS)


def test_gold_target_graph_of_a_hand_worked_example():
    """Eq. 9's A* over the decoder columns (appendix B.1): row = dependent column, 1 at the first piece of its head
    word, a later piece of a word (sentence 0's column 3, of a dependent word; sentence 1's column 2, of the root)
    at its own word's first piece only ("all subunits from one word are linked to the first unit", one head per
    piece), the root's first piece at BOS, 1 on the diagonal of the real nodes, 0 in the rows and columns of
    padding; piece_graph without a root column: the arcs only."""
    gold = gold_target_graph(PARENT_FIRST, WORD_IDS, NODE_MASK)
    assert gold.dtype == torch.float32 and gold.shape == (2, 6, 6)
    assert torch.equal(gold, EXPECTED_GOLD)
    assert torch.equal(piece_graph(PARENT_FIRST, WORD_IDS), EXPECTED_PIECES)
    # a tree: every real row but BOS's has exactly one head besides itself
    for b in range(2):
        for i in real_nodes(NODE_MASK, b)[1:]:
            assert float(gold[b, i].sum()) == 2.0


# ---- 7. graph loss (eq. 9, A.4) ----------------------------------------------------------------------------------

def test_graph_loss_is_the_smooth_l1_summed_over_each_rows_entries_and_averaged_over_rows():
    """A.4's smooth-L1 (0.5 x^2 for |x| <= 1, |x| - 0.5 otherwise) of A_t - A*_t, summed over the real entries of
    each real row and averaged over the real rows of each sentence; padded entries (any difference) excluded.
    Hand-computed."""
    gold = torch.zeros(2, 3, 3)
    gold[:, 0, 0] = gold[:, 1, 1] = 1.0
    difference = torch.zeros(2, 3, 3)
    # sentence 0, three real rows: 0.5 -> 0.125, 2.0 -> 1.5, -1.0 -> 0.5 (the boundary: 0.5 x^2)
    difference[0, 0, 0], difference[0, 1, 2], difference[0, 2, 1] = 0.5, 2.0, -1.0
    # sentence 1, node 2 padded (2 real rows): -3.0 -> 2.5, 0.5 -> 0.125; the padded entries are not counted
    difference[1, 0, 1], difference[1, 1, 1] = -3.0, 0.5
    difference[1, 0, 2], difference[1, 2, 0], difference[1, 2, 2] = 5.0, -7.0, 40.0
    mask = torch.tensor([[True, True, True], [True, True, False]])
    loss = graph_loss(gold + difference, gold, mask)
    expected = torch.tensor([(0.125 + 1.5 + 0.5) / 3, (2.5 + 0.125) / 2])
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)


def test_gold_heads_and_the_head_loss_by_hand():
    """gold_heads: each row's column off the diagonal in A* (-1 for BOS and padding). head_loss at a step of m
    nodes: the mean over the rows whose gold head is among the step's nodes of -log p(head); the log-probabilities
    are masked_log_softmax's (a row's distribution over the real nodes, padded entries 0, no NaN)."""
    heads = gold_heads(gold_target_graph(PARENT_FIRST, WORD_IDS, NODE_MASK))
    assert heads.tolist() == [[-1, 4, 4, 2, 0, -1], [-1, 0, 1, 1, -1, -1]]
    scores = torch.tensor([[[0.0, 1.0, 2.0, 3.0], [1.0, 0.0, 0.5, -1.0], [2.0, 1.0, 0.0, 9.0],
                            [0.3, 0.2, 0.1, 0.0]]] * 2)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    allowed = mask.unsqueeze(2) & mask.unsqueeze(1)
    log_probs = masked_log_softmax(scores, allowed, dim=2)
    assert torch.isfinite(log_probs).all() and float(log_probs[1, 3].abs().sum()) == 0.0
    expected = torch.zeros(2, 4, 4)
    for b in range(2):
        for i in range(4):
            real = [j for j in range(4) if bool(mask[b, j]) and bool(mask[b, i])]
            for j in real:
                expected[b, i, j] = float(scores[b, i, j]) - math.log(sum(math.exp(float(scores[b, i, k]))
                                                                         for k in real))
    torch.testing.assert_close(log_probs, expected)
    full = masked_log_softmax(scores, None, dim=2)
    loss = head_loss(full, heads)
    # sentence 0 at 4 nodes: rows 1 and 2 have their heads (4) later, row 3's head is 2: only row 3 counts;
    # sentence 1: rows 1 (head 0), 2 (head 1), 3 (head 1)
    expected_loss = [-full[0, 3, 2], -(full[1, 1, 0] + full[1, 2, 1] + full[1, 3, 1]) / 3]
    torch.testing.assert_close(loss, torch.stack(expected_loss))
    torch.testing.assert_close(full[0, 3, 2], torch.log_softmax(scores[0, 3], dim=0)[2])
    assert float(head_loss(log_probs[:, :1, :1], heads).abs().sum()) == 0.0


def all_single_root_trees(words):
    """Every head sequence over `words` words (1-based, 0 the root) that is a tree with one root."""
    import itertools

    for heads in itertools.product(range(words + 1), repeat=words):
        if sum(h == 0 for h in heads) != 1 or any(h == i + 1 for i, h in enumerate(heads)):
            continue
        reaches_root = True
        for start in range(1, words + 1):
            seen, node = set(), start
            while node != 0 and node not in seen:
                seen.add(node)
                node = heads[node - 1]
            reaches_root &= node == 0
        if reaches_root:
            yield list(heads)


def test_tree_heads_is_the_best_single_root_tree_and_argmax_the_raw_reading():
    """word_scores over a hypothesis's pieces (a word's first piece's row, max over each word's columns); the
    maximum spanning tree (SuPar's Chu-Liu/Edmonds) is, on random scores of 5 words, the single-root tree of the
    largest score among all of them (enumerated), while the raw argmax is each row's best head and may be no
    tree; by hand, a cycle the argmax keeps and the tree breaks."""
    generator = torch.Generator().manual_seed(31)
    for _ in range(5):
        scores = torch.randn(6, 6, generator=generator) * 3
        words, matrix = word_scores(scores, [f"\u2581w{i}" for i in range(5)])
        assert len(words) == 5 and matrix.shape == (6, 6)
        best = max(all_single_root_trees(5), key=lambda h: sum(float(matrix[i + 1, v]) for i, v in enumerate(h)))
        tree = tree_heads(matrix)
        assert sum(float(matrix[i + 1, v]) for i, v in enumerate(tree)) == pytest.approx(
            sum(float(matrix[i + 1, v]) for i, v in enumerate(best)))
        assert tree in list(all_single_root_trees(5))
        assert argmax_heads(matrix) == [int(matrix[i].argmax()) for i in range(1, 6)]
    # pieces '▁a', '▁b', 'c', '▁d' (columns 1-4; words a, bc, d): a <-> bc a cycle by argmax, d the root
    scores = torch.full((5, 5), -5.0)
    scores[1, 3] = 2.0   # a -> bc (its second piece's column counts for the word)
    scores[2, 1] = 3.0   # bc -> a
    scores[4, 0] = 1.0   # d -> root
    scores[1, 4] = 1.5   # a -> d: the tree's choice, a (2.0 -> 1.5) cheaper to move than bc (3.0 -> -5.0)
    words, matrix = word_scores(scores, ["\u2581a", "\u2581b", "c", "\u2581d"])
    assert words == [["\u2581a"], ["\u2581b", "c"], ["\u2581d"]]
    assert argmax_heads(matrix) == [2, 1, 0]
    assert tree_heads(matrix) == [3, 1, 0]


# ---- 8. the hidden-graph option ----------------------------------------------------------------------------------

def test_parse_hidden_graphs():
    """--dyn-stgcd-hidden-graphs COUNTxNODES groups (the paper's 6 graphs of 6 nodes and 6 of 4); a malformed spec
    is refused with the option's name."""
    assert parse_hidden_graphs("6x6,6x4") == [(6, 6), (6, 4)]
    assert parse_hidden_graphs(" 3X5 ") == [(3, 5)]
    for bad in ("6", "6x", "6x6,", "6x6x2", "axb", "6-6"):
        with pytest.raises(ValueError, match="--dyn-stgcd-hidden-graphs"):
            parse_hidden_graphs(bad)
