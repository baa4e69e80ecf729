"""RGSE (Ding & Tao): the mechanism against per-node, per-step loops written from the paper's equations, on random
trees of split words padded on the left and on the right; which edges each direction reads; padding independence;
training and generation through fairseq-train and fairseq-generate. The tensor-level comparisons run on the CPU and
on CUDA (tests/devices.py: the module on the device, the loops on the CPU)."""
import argparse
import itertools
import re
from argparse import Namespace

import numpy as np
import pytest
import torch

import fairseq_syntax  # noqa: F401
from fairseq import checkpoint_utils
from fairseq_syntax.models.presets.rgse import transformer_rgse, transformer_rgse_multi30k, transformer_rgse_tiny
from fairseq_syntax.modules import ENCODER_MECHANISMS
from fairseq_syntax.modules.mechanisms.rgse import INTEGRATIONS, RESIDUALS, VARIANTS, RecurrentGraphSyntaxEncoder

from .devices import changed as changes, float32_tolerances, on
from .helpers import USER_DIR, marked_slow, run_cli

DIM = 8


# ---- a random batch: sentences of words split into pieces, a random dependency tree ----------------------------

def random_batch(word_counts, left_pad, seed=0, extra_padding=0):
    """Per sentence: 1-3 pieces per word, a random tree over its words (heads to the left and to the right), EOS
    after the pieces; columns padded on the left or on the right to the longest + `extra_padding`. Returns the
    sentences (their real columns, each word's first piece column, the word of each piece column, the 0-based head
    word or None), the batch features src_parent_first / src_labels / src_word_ids, the padding mask and the
    width."""
    generator = np.random.default_rng(seed)
    sentences = []
    for words in word_counts:
        pieces = generator.integers(1, 4, size=words)
        order = generator.permutation(words)
        heads = [None] * words
        for k in range(1, words):
            heads[order[k]] = int(order[generator.integers(0, k)])
        sentences.append(dict(pieces=pieces, heads=heads, labels=generator.integers(1, 12, size=words)))
    width = max(int(s["pieces"].sum()) + 1 for s in sentences) + extra_padding
    batch = len(sentences)
    word_ids = torch.full((batch, width), -1)
    labels = torch.zeros(batch, width, dtype=torch.long)
    parent_first = torch.arange(width).repeat(batch, 1)
    mask = torch.ones(batch, width, dtype=torch.bool)
    for b, s in enumerate(sentences):
        tokens = int(s["pieces"].sum()) + 1
        offset = width - tokens if left_pad else 0
        s["columns"] = list(range(offset, offset + tokens))
        s["first"], s["word_of"] = [], {}
        column = offset
        for w, count in enumerate(s["pieces"]):
            s["first"].append(column)
            for _ in range(count):
                s["word_of"][column] = w
                column += 1
        mask[b, offset:offset + tokens] = False
        for column, w in s["word_of"].items():
            word_ids[b, column] = w
            labels[b, column] = int(s["labels"][w])
            if s["heads"][w] is not None:
                parent_first[b, column] = s["first"][s["heads"][w]]
    syntax = {"src_parent_first": parent_first, "src_labels": labels, "src_word_ids": word_ids}
    return sentences, syntax, mask, width


def naive_incoming(sentence):
    """{node column: [source columns]} from the word tree, one piece at a time: the node itself; into the first
    piece of a head word, every piece of each of its dependent words ("monkey |-> likes": likes receives monkey);
    into the first piece of every word, the word's later pieces (dependency_graph.py makes the first piece the
    head of its word's later pieces)."""
    incoming = {column: [column] for column in sentence["columns"]}
    for column, w in sentence["word_of"].items():
        head = sentence["heads"][w]
        if head is not None:
            incoming[sentence["first"][head]].append(column)
        if column != sentence["first"][w]:
            incoming[sentence["first"][w]].append(column)
    return incoming


def reads(variant, direction, source, node):
    """Does `direction` (0 forward, 1 backward) of `variant` read the edge source -> node? Past for the forward
    direction: source before node; for the backward direction: source after node."""
    if source == node or variant in ("forward", "bi-total"):
        return True
    past = source < node if direction == 0 else source > node
    return past if variant == "bi-past" else not past


# ---- the paper's equations, one node and one step at a time ---------------------------------------------------

def gru_step(gru, x, s):
    """z, r, s', s with the module's own nn.GRU weights (gates stored r, z, n). The candidate s' is nn.GRU's
    tanh(W x + b + r * (U s + b')); the paper's tanh(W_h phi + U_h (r s)) puts r before U_h (see rgse.py)."""
    W_r, W_z, W_h = gru.weight_ih_l0.chunk(3)
    U_r, U_z, U_h = gru.weight_hh_l0.chunk(3)
    b_ir, b_iz, b_ih = gru.bias_ih_l0.chunk(3)
    b_hr, b_hz, b_hh = gru.bias_hh_l0.chunk(3)
    z = torch.sigmoid(W_z @ x + b_iz + U_z @ s + b_hz)
    r = torch.sigmoid(W_r @ x + b_ir + U_r @ s + b_hr)
    candidate = torch.tanh(W_h @ x + b_ih + r * (U_h @ s + b_hh))
    return z * s + (1 - z) * candidate


def naive_gru(gru, inputs):
    state = torch.zeros(gru.hidden_size, dtype=inputs[0].dtype)
    outputs = []
    for x in inputs:
        state = gru_step(gru, x, state)
        outputs.append(state)
    return outputs


def naive_rgse(module, x, sentences, variant, integration, residual):
    """x (T, B, C) -> (T, B, C), each sentence alone over its real columns: h~ = [h->; h<-] from the BiGRU; phi of
    each node by a loop over its incoming edges; s-> and s<- step by step; tau and the projection per position."""
    out = torch.zeros_like(x)
    directions = 1 if variant == "forward" else 2
    for b, sentence in enumerate(sentences):
        columns = sentence["columns"]
        inputs = [x[column, b] for column in columns]
        forward = naive_gru(module.context_forward, inputs)
        backward = naive_gru(module.context_backward, inputs[::-1])[::-1]
        h = {column: torch.cat([f, g]) for column, f, g in zip(columns, forward, backward)}
        incoming = naive_incoming(sentence)
        states = []
        for d in range(directions):
            phi = {}
            for node in columns:
                edges = [source for source in incoming[node] if reads(variant, d, source, node)]
                if integration == "sum":
                    phi[node] = sum(h[source] for source in edges)
                elif integration == "average":
                    phi[node] = sum(h[source] for source in edges) / len(edges)
                else:
                    w, bias = module.edge_gate.weight[d], module.edge_gate.bias[d]
                    phi[node] = sum(torch.sigmoid(w @ h[source] + bias) * h[source] for source in edges)
            sequence = columns if d == 0 else columns[::-1]
            gru = module.graph_forward if d == 0 else module.graph_backward
            states.append(dict(zip(sequence, naive_gru(gru, [phi[node] for node in sequence]))))
        for column in columns:
            parts = []
            for d in range(directions):
                s = states[d][column]
                if residual == "normal":
                    parts.append(s + h[column])
                else:
                    lam = torch.sigmoid(module.residual_omega[d] @ s + module.residual_psi[d] @ h[column])
                    parts.append(lam * s + (1 - lam) * h[column])
            out[column, b] = module.out_proj.weight @ torch.cat(parts) + module.out_proj.bias
    return out


def rgse(variant="bi-total", integration="gated", residual="gated", seed=0, dtype=torch.float64, width=None):
    torch.manual_seed(seed)
    module = RecurrentGraphSyntaxEncoder(Namespace(rgse_variant=variant, rgse_integration=integration,
                                                   rgse_residual=residual, rgse_dim=width), DIM, 2, 0)
    for p in module.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return module.to(dtype).eval()


CONFIGS = list(itertools.product(VARIANTS, INTEGRATIONS, RESIDUALS))


@pytest.mark.parametrize("variant,integration,residual,width",
                         [(*config, None) for config in CONFIGS] +
                         [("bi-total", "gated", "gated", 4), ("forward", "sum", "normal", 6)])  # --rgse-dim r
def test_matches_the_papers_equations_step_by_step(variant, integration, residual, width, device):
    module = rgse(variant, integration, residual, seed=len(variant) + len(integration), width=width)
    on_device = on(device, module)
    for left_pad in (True, False):
        sentences, syntax, mask, width = random_batch([4, 1, 6], left_pad, seed=7, extra_padding=2)
        x = torch.randn(width, len(sentences), DIM, dtype=torch.float64)  # padding columns hold noise too
        with torch.no_grad():
            got = on_device(*on(device, (x, syntax, mask))).cpu()
            expected = naive_rgse(module, x, sentences, variant, integration, residual)
        assert got.shape == x.shape
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)  # padding columns: 0 in both


def test_uses_the_dependency_direction_of_the_paper(device):
    """"monkey likes eating bananas": monkey |-> likes, eating |-> likes, bananas |-> eating. The node of "likes"
    reads monkey, likes, eating; "eating" reads eating, bananas; "monkey" and "bananas" only themselves; bi-past's
    backward "likes" reads only eating, its forward "likes" only monkey (paper §3.1 (iii))."""
    word_ids = torch.tensor([[0, 1, 2, 3, -1]])
    parent_first = torch.tensor([[1, 1, 1, 2, 4]])  # likes is the root (its own column)
    syntax = {"src_parent_first": parent_first, "src_labels": torch.ones_like(word_ids), "src_word_ids": word_ids}
    syntax = on(device, syntax)
    states = torch.eye(5, DIM, dtype=torch.float64, device=device).unsqueeze(0)  # h~ of column c: unit vector c
    phi = on(device, rgse("bi-total", "sum")).integrate(states, syntax, None)[0, :, 0, :5]
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]])
    torch.testing.assert_close(phi, expected.to(phi))
    past = on(device, rgse("bi-past", "sum")).integrate(states, syntax, None)[0, 1, :, :5]
    torch.testing.assert_close(past, torch.tensor([[1, 1, 0, 0, 0], [0, 1, 1, 0, 0]]).to(past))


@pytest.mark.parametrize("integration", INTEGRATIONS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_direction_reads_exactly_its_edges(variant, integration, device):
    """Changing h~ of one column changes phi of direction d exactly at the nodes that read it in d: past variants
    never see their future dependents, future variants never see their past ones, and sentences stay apart."""
    module = on(device, rgse(variant, integration))
    sentences, syntax, mask, width = random_batch([5, 3, 7], left_pad=True, seed=11)
    syntax, mask = on(device, (syntax, mask))
    states = torch.randn(len(sentences), width, DIM, dtype=torch.float64)
    with torch.no_grad():
        phi = module.integrate(states.to(device), syntax, mask).cpu()
        for b, sentence in enumerate(sentences):
            incoming = naive_incoming(sentence)
            for source in sentence["columns"]:
                changed_states = states.clone()
                changed_states[b, source] += torch.randn(DIM, dtype=torch.float64)
                difference = (module.integrate(changed_states.to(device), syntax, mask).cpu() - phi).abs()
                changed = changes(difference.amax(-1), device)
                expected = torch.zeros_like(changed)
                for d in range(phi.size(2)):
                    for node in sentence["columns"]:
                        expected[b, node, d] = source in incoming[node] and reads(variant, d, source, node)
                assert torch.equal(changed, expected), (b, source)


def future_dependents(sentences):
    """(sentence, head column, dependent column) for every dependency arc whose dependent comes after its head."""
    found = []
    for b, sentence in enumerate(sentences):
        for node, sources in naive_incoming(sentence).items():
            found.extend((b, node, source) for source in sources if source > node)
    return found


def test_past_variants_never_read_ahead_and_future_variants_do(device):
    """With the recurrence: in bi-past, s-> at a column never depends on h~ of a later column and s<- never on an
    earlier one (a future dependent of a head leaves the head's forward state unchanged); bi-future's and
    bi-total's forward states at the head do change."""
    sentences, syntax, mask, width = random_batch([6, 4], left_pad=False, seed=5)
    syntax, mask = on(device, (syntax, mask))
    states = torch.randn(len(sentences), width, DIM, dtype=torch.float64)
    arcs = future_dependents(sentences)
    assert arcs
    modules = {variant: on(device, rgse(variant)) for variant in ("bi-past", "bi-future", "bi-total")}

    def graph_states(variant, given):
        return modules[variant].graph_states(given.to(device), syntax, mask).cpu()

    with torch.no_grad():
        base = {variant: graph_states(variant, states) for variant in modules}
        for b, sentence in enumerate(sentences):
            for column in sentence["columns"]:
                changed_states = states.clone()
                changed_states[b, column] += 1.0
                diff = (graph_states("bi-past", changed_states) - base["bi-past"]).abs()
                before = [c for c in sentence["columns"] if c < column]
                after = [c for c in sentence["columns"] if c > column]  # padding columns are nobody's
                assert not changes(diff[b, before, 0], device).any() and not changes(diff[b, after, 1], device).any()
                assert diff[b, column, 0].max() > 0 and diff[b, column, 1].max() > 0  # the self edge
        for b, head, dependent in arcs:
            changed_states = states.clone()
            changed_states[b, dependent] += 1.0
            for variant in ("bi-future", "bi-total"):
                diff = (graph_states(variant, changed_states) - base[variant]).abs()
                assert changes(diff[b, head, 0], device).any(), (variant, head, dependent)


@pytest.mark.parametrize("variant,integration,residual", [("bi-total", "gated", "gated"),
                                                          ("bi-past", "average", "normal"),
                                                          ("forward", "sum", "gated")])
def test_left_and_right_padding_give_each_sentence_its_own_result(variant, integration, residual, device):
    """The same sentences padded on the left, on the right, and alone without any padding mask (float32)."""
    module = on(device, rgse(variant, integration, residual, dtype=torch.float32))
    counts = [3, 7, 1, 5]
    left = random_batch(counts, True, seed=2)
    right = random_batch(counts, False, seed=2)
    tokens = [torch.randn(len(s["columns"]), DIM) for s in left[0]]
    outputs = {}
    for name, (sentences, syntax, mask, width) in (("left", left), ("right", right)):
        x = torch.randn(width, len(counts), DIM) * 100  # padding: large noise
        for b, sentence in enumerate(sentences):
            x[sentence["columns"], b] = tokens[b]
        with torch.no_grad():
            out = module(*on(device, (x, syntax, mask))).cpu()
        outputs[name] = [out[sentence["columns"], b] for b, sentence in enumerate(sentences)]
        assert out.masked_select(mask.t().unsqueeze(-1)).abs().max() == 0
    for b, count in enumerate(counts):
        # the same sentence alone: its own features (a one-sentence batch of the left batch's sentence)
        single = {name: value[b:b + 1, left[2][b].logical_not()] for name, value in left[1].items()}
        offset = left[0][b]["columns"][0]
        single["src_parent_first"] = torch.where(single["src_word_ids"] >= 0, single["src_parent_first"] - offset,
                                                 torch.arange(single["src_word_ids"].size(1)))
        with torch.no_grad():
            alone = module(tokens[b].unsqueeze(1).to(device), on(device, single), None)[:, 0].cpu()
        tolerances = float32_tolerances(device, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(outputs["left"][b], outputs["right"][b], **tolerances)
        torch.testing.assert_close(outputs["left"][b], alone, **tolerances)


# ---- options and presets --------------------------------------------------------------------------------------

def test_options_presets_and_registration():
    assert ENCODER_MECHANISMS["rgse"] is RecurrentGraphSyntaxEncoder
    assert RecurrentGraphSyntaxEncoder.shape == "self_attention"
    assert set(RecurrentGraphSyntaxEncoder.features) == {"src_parent_first", "src_labels", "src_word_ids"}
    parser = argparse.ArgumentParser()
    RecurrentGraphSyntaxEncoder.add_args(parser)
    parsed = parser.parse_args(["--rgse-variant", "bi-future", "--rgse-integration", "average"])
    assert (parsed.rgse_variant, parsed.rgse_integration, parsed.rgse_residual) == ("bi-future", "average", None)
    with pytest.raises(SystemExit):
        parser.parse_args(["--rgse-variant", "backward"])
    with pytest.raises(ValueError, match="--rgse-residual"):
        RecurrentGraphSyntaxEncoder.check_args(Namespace(rgse_residual="highway"))
    base = Namespace()
    transformer_rgse(base)
    assert (base.encoder_syntax, base.encoder_syntax_layers, base.encoder_layers, base.encoder_embed_dim) == (
        "rgse", "0,1,2", 6, 512)
    assert (base.rgse_variant, base.rgse_integration, base.rgse_residual) == ("bi-total", "gated", "gated")
    multi30k, tiny = Namespace(rgse_variant="forward"), Namespace(encoder_syntax_layers="0,1")
    transformer_rgse_multi30k(multi30k)
    transformer_rgse_tiny(tiny)
    assert (multi30k.encoder_syntax_layers, multi30k.encoder_embed_dim, multi30k.rgse_variant) == ("0,1", 256,
                                                                                                   "forward")
    assert (tiny.encoder_syntax_layers, tiny.encoder_embed_dim, tiny.encoder_layers) == ("0,1", 64, 2)
    forward, total = rgse("forward"), rgse("bi-total")
    assert forward.graph_backward is None and forward.out_proj.in_features == DIM
    assert total.out_proj.in_features == 2 * DIM and total.context_forward.hidden_size == DIM // 2


# ---- through the fairseq entry points -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def rgse_bin(small_spacy_bin):
    return small_spacy_bin


RUNS = {
    "default": [],
    "bi-past-average-normal": ["--rgse-variant", "bi-past", "--rgse-integration", "average",
                               "--rgse-residual", "normal"],
    "forward-sum-two-layers": ["--rgse-variant", "forward", "--rgse-integration", "sum",
                               "--encoder-syntax-layers", "0,1"],
}


@pytest.mark.parametrize("name", marked_slow(RUNS, {"bi-past-average-normal", "forward-sum-two-layers"}))
def test_trains_and_generates(rgse_bin, tmp_path, name):
    result = run_cli("fairseq-train", rgse_bin, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en",
                     "-t", "de", "--arch", "transformer_rgse_tiny", *RUNS[name], "--optimizer", "adam", "--lr",
                     "0.002", "--max-tokens", "1500", "--max-update", "3", "--criterion",
                     "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--share-all-embeddings",
                     "--save-dir", tmp_path, "--cpu", "--no-progress-bar", "--log-interval", "1", "--seed", "3",
                     "--num-workers", "0")
    output = result.stdout + result.stderr
    updates = re.findall(r"train_inner .*? loss=([0-9.]+)", output)
    assert len(updates) == 3 and all(np.isfinite(float(loss)) for loss in updates)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))
    model, weights = state["cfg"]["model"], state["model"]
    variant = "forward" if name.startswith("forward") else ("bi-past" if name.startswith("bi-past") else "bi-total")
    assert model.encoder_syntax == "rgse" and str(model.rgse_variant) == variant
    rgse_layers = [1, 1] if name.startswith("forward") else [1, 0]
    for layer, has_rgse in enumerate(rgse_layers):
        prefix = f"encoder.layers.{layer}."
        assert any(key.startswith(prefix + "syntax_module.graph_forward") for key in weights) == bool(has_rgse)
        assert any(key.startswith(prefix + "self_attn.") for key in weights) != bool(has_rgse)
    assert any("syntax_module.graph_backward" in key for key in weights) == (variant != "forward")
    generated = run_cli("fairseq-generate", rgse_bin, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s",
                        "en", "-t", "de", "--path", tmp_path / "checkpoint_last.pt", "--gen-subset", "valid",
                        "--beam", "2", "--batch-size", "10", "--max-len-a", "0", "--max-len-b", "6", "--cpu",
                        "--num-workers", "0")
    assert len([line for line in generated.stdout.splitlines() if line.startswith("H-")]) == 24
