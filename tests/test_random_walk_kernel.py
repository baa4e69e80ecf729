"""The random walk kernel of Dyn-STGCD's last decoder layer (modules/dyn_stgcd/random_walk_kernel.py) against
the explicit formula of Li et al.'s appendix A.2: the Kronecker product of the two adjacency matrices raised to
the power p, between s = vec(K^h Y^T) on either side; on random weighted graphs, padded on either side."""
import pytest
import torch

from fairseq_syntax.modules.dyn_stgcd.random_walk_kernel import RandomWalkKernel


def explicit_kernel(nodes, adjacency, hidden_nodes, hidden_adjacency, p):
    """kappa^(p) = s^T (A x A^h)^p s over the direct product graph, its vertices (i, a) numbered i * n + a (the
    order of torch.kron(A, A^h)), s[(i, a)] = K^h_a . Y_i. Float64."""
    product = torch.kron(adjacency.double(), hidden_adjacency.double())
    s = (nodes.double() @ hidden_nodes.double().T).reshape(-1)
    return s @ torch.linalg.matrix_power(product, p) @ s


def random_graph(generator, size, dim):
    adjacency = torch.rand(size, size, generator=generator) * (torch.rand(size, size, generator=generator) < 0.4)
    return torch.randn(size, dim, generator=generator), adjacency  # weighted and directed, as a soft adjacency is


@pytest.mark.parametrize("max_step", [0, 1, 2, 3])
def test_kernel_equals_the_kronecker_formula_whatever_the_padding(max_step):
    generator = torch.Generator().manual_seed(max_step)
    dim, sizes, width = 5, [4, 7, 1], 9
    torch.manual_seed(max_step)
    kernel = RandomWalkKernel(dim, num_graphs=3, graph_size=4, max_step=max_step)
    hidden = kernel.hidden_adjacency()
    assert torch.equal(hidden, hidden.transpose(1, 2)) and (hidden >= 0).all()
    assert (hidden.diagonal(dim1=1, dim2=2) == 0).all()
    graphs = [random_graph(generator, size, dim) for size in sizes]
    for left_pad in (True, False):
        nodes = torch.randn(len(sizes), width, dim, generator=generator) * 100  # padding holds garbage
        adjacency = torch.rand(len(sizes), width, width, generator=generator) * 100
        mask = torch.zeros(len(sizes), width, dtype=torch.bool)
        for b, (graph_nodes, graph_adjacency) in enumerate(graphs):
            n = len(graph_nodes)
            columns = slice(width - n, width) if left_pad else slice(0, n)
            nodes[b, columns], adjacency[b, columns, columns], mask[b, columns] = graph_nodes, graph_adjacency, True
        got = kernel(nodes, adjacency, mask)
        assert got.shape == (len(sizes), 3, max_step + 1) and got.dtype == torch.float32
        for b, (graph_nodes, graph_adjacency) in enumerate(graphs):
            for k in range(3):
                for p in range(max_step + 1):
                    expected = explicit_kernel(graph_nodes, graph_adjacency, kernel.node_embeddings[k],
                                               hidden[k], p)
                    torch.testing.assert_close(got[b, k, p].double(), expected, rtol=1e-4, atol=1e-4)


def test_gradients_reach_the_hidden_graphs_and_half_precision_inputs_are_computed_in_float32():
    torch.manual_seed(0)
    kernel = RandomWalkKernel(6, num_graphs=2, graph_size=3, max_step=2)
    nodes, adjacency = torch.randn(2, 5, 6), torch.rand(2, 5, 5)
    full = kernel(nodes, adjacency)
    full.sum().backward()
    assert kernel.pair_weights.grad is not None and kernel.node_embeddings.grad.abs().sum() > 0
    half = kernel(nodes.bfloat16(), adjacency.bfloat16())
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, kernel(nodes.bfloat16().float(), adjacency.bfloat16().float()))


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="random walk kernel"):
        RandomWalkKernel(4, num_graphs=0, graph_size=3, max_step=1)
