"""Choshen & Abend's structure-aware decoders on the decoder contract (fairseq_syntax/models/decoders.py, modules/
parent.py, modules/mechanisms/graph_decoder.py): BiTran's prefix re-encoding, PARENT and the GCN decoder.

References come from the paper, not from the code under test: PARENT's masks are worked by hand on the paper's
example (§3); the GCN decoder is checked against a per-node loop of §4's equations over the edges of the Python
reference TransitionState; BiTran's batched training views against the model run once per prefix. Tiny models
train and translate through the real fairseq commands, with their trees."""
import re

import numpy as np
import pytest
import torch

import fairseq_syntax  # noqa: F401
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq_syntax.criterions.syntax_label_smoothed_cross_entropy import SyntaxLabelSmoothedCrossEntropyCriterion
from fairseq_syntax.data.transitions.state import is_valid_sequence, transition_edges
from fairseq_syntax.data.transitions.tokens import is_arc
from fairseq_syntax.models.decoders import select_encoder_out
from fairseq_syntax.modules.decoder_context import PrefixScanner, TargetTransitions
from fairseq_syntax.modules.mechanisms.graph_convolution import DOWN, SELF, UP
from fairseq_syntax.modules.mechanisms.graph_decoder import DecoderGraphConvolution
from fairseq_syntax.modules.syntax_mechanism import DECODER_CONTEXT
from fairseq_syntax.modules.mechanisms.parent import ParentAttention

from .devices import on
from .helpers import (
    USER_DIR,
    assert_incremental_decoding_equals_full, cli_common, four_hypotheses_of_one_source, run_cli,
    train_few_updates,
)
from .test_transition_decoding import batches, transition_bin  # noqa: F401  (module fixture: EWT as the target)
from .test_transitions import PAPER_TOKENS

SYMBOLS = ["<s>", "<pad>", "</s>", "<unk>"] + sorted(set(PAPER_TOKENS))


def paper_context(policy, tokens=PAPER_TOKENS, until=None):
    transitions = TargetTransitions(SYMBOLS)
    prev = torch.tensor([[2] + [SYMBOLS.index(t) for t in tokens]])  # BOS (= EOS in fairseq) first
    reencoded_until = torch.tensor([until]) if policy == "block" else None
    return PrefixScanner(transitions).context(prev, policy, reencoded_until=reencoded_until), transitions


def test_prefix_scanner_kept_extended_and_reordered_is_the_scan_of_the_whole_prefix():
    """Beam search's use of the scanner: step by step, extended by the newest column, rows reordered and repeated
    between steps (as reorder_incremental_state does), asked twice in a step (the decoder, then the masks): at every
    step every field equals the scan of the whole prefix made at once."""
    from fairseq_syntax.data.transitions.function import TransitionScan

    torch.manual_seed(0)
    transitions = TargetTransitions(SYMBOLS)
    scanner, state = PrefixScanner(transitions), {}
    rows = torch.cat([torch.full((5, 1), 2), torch.randint(4, len(SYMBOLS), (5, 12))], dim=1)
    for step in range(1, rows.size(1) + 1):
        if step in (4, 8):
            order = torch.tensor([2, 2, 0, 4, 1])
            PrefixScanner.reorder(state, order)
            rows = rows.index_select(0, order)
        scan = scanner.scan(rows[:, :step], state)
        assert scanner.scan(rows[:, :step], state) is scan
        whole = TransitionScan.of(rows[:, 1:step], transitions.token_class, transitions.label_of)
        for name in TransitionScan.__dataclass_fields__:
            assert torch.equal(getattr(scan, name), getattr(whole, name)), (step, name)


# ---- PARENT: masks by hand ------------------------------------------------------------------------------------

def allowed_keys(policy, tokens=PAPER_TOKENS, until=None):
    context, _ = paper_context(policy, tokens, until)
    width = context.tokens.size(1)
    args = type("Args", (), {"parent_head": 1, "decoder_attention_heads": 4})()
    module = ParentAttention(args, 8, 4, 0)
    modification = module(torch.zeros(width, 1, 8), {DECODER_CONTEXT: context}, None)
    assert modification.first_head == 1 and modification.num_heads == 1 and modification.mode == "add"
    matrix = modification.matrix[0, 0]
    return {q: {k for k in range(width) if matrix[q, k] == 0} for q in range(width)}


def test_parent_masks_of_the_papers_example_by_hand():
    """Columns: 0 BOS, 1 Jo, 2 hn, 3 put, 4 LEFT-ARC:nsubj, 5 the, 6 coals, 7 LEFT-ARC:det, 8 RIGHT-ARC:obj,
    9 out, 10 RIGHT-ARC:compound:prt. §3: LEFT-ARC x (top a, second b) adds a->b, x->b, a->x; RIGHT-ARC b->a,
    x->a, b->x; a token's parents are the sources of the edges into it; PARENT keeps the token and its parents."""
    whole = {0: {0}, 1: {1, 3, 4}, 2: {2, 3, 4}, 3: {3}, 4: {4, 3}, 5: {5, 6, 7}, 6: {6, 3, 8}, 7: {7, 6},
             8: {8, 3}, 9: {9, 3, 10}, 10: {10, 3}}
    assert allowed_keys("prefix") == whole
    # fairseq's causal decoder: column c knows the graph of its own prefix (arcs at columns <= c), so only an arc
    # token, computed after its arc is taken, has a parent
    assert allowed_keys("causal") == {0: {0}, 1: {1}, 2: {2}, 3: {3}, 4: {4, 3}, 5: {5}, 6: {6}, 7: {7, 6},
                                      8: {8, 3}, 9: {9}, 10: {10, 3}}
    # BiTran's view of the first 7 tokens (columns 0..7): "coals" has no parent yet, "the" has coals and the arc
    assert allowed_keys("prefix", PAPER_TOKENS[:7]) == {0: {0}, 1: {1, 3, 4}, 2: {2, 3, 4}, 3: {3}, 4: {4, 3},
                                                         5: {5, 6, 7}, 6: {6}, 7: {7, 6}}
    # re-encoding every B steps, the prefix re-encoded at m = 4 (columns 0..4) and the columns after it causal:
    # columns <= 4 know the arcs at columns <= 4 (nsubj), a later column c those at columns <= c
    assert allowed_keys("block", until=4) == {0: {0}, 1: {1, 3, 4}, 2: {2, 3, 4}, 3: {3}, 4: {4, 3}, 5: {5},
                                              6: {6}, 7: {7, 6}, 8: {8, 3}, 9: {9}, 10: {10, 3}}
    # m = 7: "the" (5) now knows det (7), "coals" (6) not yet obj (8)
    assert allowed_keys("block", until=7) == {0: {0}, 1: {1, 3, 4}, 2: {2, 3, 4}, 3: {3}, 4: {4, 3},
                                              5: {5, 6, 7}, 6: {6}, 7: {7, 6}, 8: {8, 3}, 9: {9}, 10: {10, 3}}
    # the two ends: m = 0 is the causal decoder, m = the last column the whole prefix
    assert allowed_keys("block", until=0) == allowed_keys("causal")
    assert allowed_keys("block", until=len(PAPER_TOKENS)) == whole


# ---- the GCN decoder against §4's equations -------------------------------------------------------------------

def reference_gcn(layer, x, edges, label_of_edge):
    """§4: gcn(h, v) = ReLU( sum_{u in N(v)} g_uv (W_dir(u,v) h_u + b_lab(u,v)) ), g_uv = sigmoid(h_u . w^_dir +
    b^_lab), with a self edge per node and, per graph edge u -> v, a DOWN message into v and an UP one into u. One
    node at a time, in float64, from the layer's parameters."""
    width, batch, dim = x.shape
    weights = layer.weight.weight.detach().double().split(dim)  # W_self, W_down, W_up
    x = x.double()
    out = torch.zeros_like(x)

    def bias_row(direction, label):
        if direction == SELF:
            return 0
        if not layer.labels:
            return direction
        return 1 + (direction - DOWN) * (layer.num_labels + 1) + label

    for b in range(batch):
        for v in range(width):
            incoming = ([(v, SELF, None)] + [(u, DOWN, lab) for (bb, u, w), lab in label_of_edge.items()
                                             if bb == b and w == v and (bb, u, w) in edges["down"]] +
                        [(w, UP, lab) for (bb, u, w), lab in label_of_edge.items()
                         if bb == b and u == v and (bb, u, w) in edges["up"]])
            total = torch.zeros(dim, dtype=torch.float64)
            for u, direction, label in incoming:
                row = bias_row(direction, label)
                message = weights[direction] @ x[u, b] + layer.bias[row].detach().double()
                if layer.gates:
                    gate = torch.sigmoid(x[u, b] @ layer.gate_weight[direction].detach().double()
                                         + layer.gate_bias[row].detach().double())
                    message = gate * message
                total += message
            out[v, b] = torch.relu(total)
    return out


@pytest.mark.parametrize("policy", ["prefix", "causal", "block"])
@pytest.mark.parametrize("labels,gates", [(True, True), (False, True), (False, False)])
def test_gcn_decoder_matches_the_equations(policy, labels, gates, device):
    """Two sentences (the paper's example and a shorter one, right-padded), two layers with residuals: each layer
    against the per-node loop over the edges TransitionState gives; under "causal" a node receives along an edge
    only from the arc's column on; under "block" (the prefix re-encoded at m = 5) from column max(arc, 5) on."""
    torch.manual_seed(0)
    short = PAPER_TOKENS[:4]
    transitions = TargetTransitions(SYMBOLS)
    rows = [[2] + [SYMBOLS.index(t) for t in PAPER_TOKENS], [2] + [SYMBOLS.index(t) for t in short]]
    width = len(rows[0])
    prev = torch.tensor([row + [1] * (width - len(row)) for row in rows])
    until = 5
    context = PrefixScanner(transitions).context(
        prev, policy, reencoded_until=torch.tensor([until, until]) if policy == "block" else None)
    args = type("Args", (), {"no_decoder_gcn_labels": not labels, "no_decoder_gcn_gates": not gates,
                             "decoder_gcn_layers": 2, "decoder_gcn_edge_dropout": 0.0})()
    module = DecoderGraphConvolution(args, 6, 2, -1, target_transitions=transitions).eval()
    for layer in module.layers:  # non-zero biases so that labels matter
        torch.nn.init.normal_(layer.bias, std=0.5)
        if gates:
            torch.nn.init.normal_(layer.gate_bias, std=0.5)
    x = torch.randn(width, 2, 6)
    # the reference graph: TransitionState's edges (source, target, label, step) in decoder columns (+1 for BOS)
    label_index = {symbol.split(":", 1)[1]: int(transitions.label_of[i]) for i, symbol in enumerate(SYMBOLS)
                   if is_arc(symbol)}
    label_of_edge, edges = {}, {"down": set(), "up": set()}
    for b, tokens in enumerate([PAPER_TOKENS, short]):
        graph = transition_edges(tokens)
        for source, target, label, step in zip(graph.source, graph.target, graph.label, graph.step):
            u, v, arc = int(source) + 1, int(target) + 1, int(step) + 1
            label_of_edge[(b, u, v)] = label_index[label]
            known_to_v, known_to_u = (max(v, until), max(u, until)) if policy == "block" else (v, u)
            if policy == "prefix" or arc <= known_to_v:
                edges["down"].add((b, u, v))
            if policy == "prefix" or arc <= known_to_u:
                edges["up"].add((b, u, v))
    expected = x.double()
    for layer in module.layers:
        expected = expected + reference_gcn(layer, expected.float(), edges, label_of_edge)
    got = on(device, module)(on(device, x), {DECODER_CONTEXT: on(device, context)}, None).cpu()
    torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-5)


# ---- BiTran: training views against the model run once per prefix ---------------------------------------------

def tiny_model(destdir, *options):
    from .test_transition_decoding import build
    task, model, cfg = build(destdir, "--arch", "transformer_bitran_tiny", "--dropout", "0", *options)
    return task, model


def first_batch(task, size=5):
    return next(iter(batches(task, size=size)))


@pytest.mark.parametrize("options", [[], ["--decoder-syntax", "parent"], ["--decoder-syntax", "gcn"],
                                     ["--decoder-syntax", "parent,gcn", "--encoder-syntax", "pascal"]],
                         ids=["bitran", "parent", "gcn", "pascal+parent,gcn"])
def test_bitran_views_equal_one_run_per_prefix(transition_bin, options, device):  # noqa: F811
    """Exact training (every prefix a view, views of one width batched, target right-padded, source left-padded)
    gives at every target position what re-encoding that prefix alone gives (the generation path, one sentence,
    one prefix at a time); and the prediction at position n does not change when the tokens after it do."""
    _, destdir, _ = transition_bin
    task, model = tiny_model(destdir, *options)
    model = on(device, model).eval()
    sample = on(device, first_batch(task))
    net_input = sample["net_input"]
    prev = net_input["prev_output_tokens"]
    with torch.no_grad():
        source = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
        encoder_out = model.encoder(**source)
        features, extra = model.decoder(prev, encoder_out=encoder_out, features_only=True)
        lengths = prev.ne(task.target_dictionary.pad()).sum(1).tolist()
        assert extra["predicted"].sum(1).tolist() == lengths
        checked = 0
        for b, length in enumerate(lengths):
            one = select_encoder_out(encoder_out, torch.tensor([b], device=prev.device))
            for n in range(1, length + 1, 3):
                alone, _ = model.decoder(prev[b:b + 1, :n], encoder_out=one, incremental_state={}, features_only=True)
                torch.testing.assert_close(alone[0, -1], features[b, n - 1], rtol=1e-4, atol=1e-5)
                checked += 1
        assert checked > 20
        # causality: other tokens after column 6 change nothing at columns 0..6
        changed = prev.clone()
        changed[:, 7:] = torch.where(changed[:, 7:] != task.target_dictionary.pad(),
                                     torch.full_like(changed[:, 7:], task.target_dictionary.index("LEFT-ARC:det")),
                                     changed[:, 7:])
        after, _ = model.decoder(changed, encoder_out=encoder_out, features_only=True)
        torch.testing.assert_close(after[:, :7], features[:, :7])
        assert not torch.allclose(after[:, 7:], features[:, 7:])


@pytest.mark.parametrize("options", [[], ["--decoder-syntax", "parent,gcn"]], ids=["bitran", "parent,gcn"])
def test_sampled_prefixes_predict_k_positions_with_their_exact_values(transition_bin, options):  # noqa: F811
    """--bitran-prefixes 3: three prefixes per sentence per update (all of a shorter sentence), each with the value
    of exact training (sampled views run in right-padded groups of several widths, exact ones one width at a
    time); only those positions are output, packed (1, N, C) in the order of predicted.nonzero(), with their
    targets packed alike (get_targets), so the output projection and the loss run on them alone."""
    _, destdir, _ = transition_bin
    task, model = tiny_model(destdir, "--bitran-prefixes", "3", *options)
    sample = first_batch(task)
    prev = sample["net_input"]["prev_output_tokens"]
    model.train()  # sampling happens in training; dropout is 0
    torch.manual_seed(4)
    features, extra = model(**sample["net_input"], features_only=True)
    predicted = extra["predicted"]
    lengths = prev.ne(task.target_dictionary.pad()).sum(1)
    assert predicted.sum(1).tolist() == lengths.clamp(max=3).tolist()
    model.eval()
    exact, _ = model(**sample["net_input"], features_only=True)
    assert features.shape == (1, int(predicted.sum()), exact.size(-1)) and extra["packed"]
    torch.testing.assert_close(features[0], exact[predicted], rtol=1e-4, atol=1e-5)
    targets = model.get_targets(sample, (features, extra))
    assert torch.equal(targets[0], sample["target"][predicted])
    # the loss is per predicted token: the packed loss equals the full output's loss over the predicted positions
    criterion = SyntaxLabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    torch.manual_seed(4)
    model.train()
    loss, sample_size, logging = criterion(model, sample)
    assert sample_size == int(predicted.sum())
    logits = model.output_layer(exact[predicted].unsqueeze(0))
    lprobs = model.get_normalized_probs((logits,), log_probs=True).view(-1, logits.size(-1))
    reference = label_smoothed_nll_loss(lprobs, sample["target"][predicted].view(-1), 0.1,
                                        ignore_index=task.target_dictionary.pad())[0]
    torch.testing.assert_close(loss, reference, rtol=1e-4, atol=1e-4)


# ---- BiTran re-encoding every B steps (--reencode-every B) -----------------------------------------------------

def features_of(model, sample, tokens=None):
    net_input = dict(sample["net_input"])
    if tokens is not None:
        net_input["prev_output_tokens"] = tokens
    with torch.no_grad():
        return model(**net_input, features_only=True)[0]


@pytest.mark.parametrize("every", [2, 3, 5])
@pytest.mark.parametrize("options", [[], ["--decoder-syntax", "parent,gcn"]], ids=["bitran", "parent,gcn"])
def test_block_reencoding_generates_what_training_scores(transition_bin, every, options):  # noqa: F811
    """--reencode-every B: fairseq's incremental decoding (the prefix re-encoded at the block starts, its keys and
    values cached and extended causally until the next one, hypotheses moved between rows at step 6) gives at
    every column what the training forward gives (its views, one per block start)."""
    _, destdir, _ = transition_bin
    task, model = tiny_model(destdir, "--reencode-every", str(every), *options)
    prev, encoder_out = four_hypotheses_of_one_source(task, model, 14)
    assert_incremental_decoding_equals_full(model.decoder, prev, encoder_out, reorder_at=6, name=f"B={every}")


@pytest.mark.parametrize("every", [2, 3, 5])
def test_block_reencoding_never_reads_a_later_token(transition_bin, every):  # noqa: F811
    """A column's prediction does not move when any token after it changes (right-padded batch of 5, PARENT and
    the GCN decoder on): for every cut c, the features of columns 0..c with the tokens after c replaced."""
    _, destdir, _ = transition_bin
    task, model = tiny_model(destdir, "--reencode-every", str(every), "--decoder-syntax", "parent,gcn")
    sample = first_batch(task)
    prev = sample["net_input"]["prev_output_tokens"]
    pad, replacement = task.target_dictionary.pad(), task.target_dictionary.index("LEFT-ARC:det")
    features = features_of(model, sample)
    for cut in range(12):
        changed = prev.clone()
        later = changed[:, cut + 1:]
        changed[:, cut + 1:] = torch.where(later != pad, torch.full_like(later, replacement), later)
        after = features_of(model, sample, changed)
        torch.testing.assert_close(after[:, :cut + 1], features[:, :cut + 1], msg=lambda m: f"cut {cut}: {m}")
        assert not torch.allclose(after[:, cut + 1:], features[:, cut + 1:])


def test_block_starts_predict_exactly_as_bitran(transition_bin):  # noqa: F811
    """With B = 3 the prediction at a block start m (0, 3, 6, ...) is exact BiTran's (B = 1, same parameters),
    the prefix up to m re-encoded bidirectionally; between block starts it is not."""
    _, destdir, _ = transition_bin
    task, exact = tiny_model(destdir, "--decoder-syntax", "parent,gcn")
    _, block = tiny_model(destdir, "--decoder-syntax", "parent,gcn", "--reencode-every", "3")
    block.load_state_dict(exact.state_dict())
    sample = first_batch(task)
    exact_features, block_features = features_of(exact, sample), features_of(block, sample)
    starts = torch.arange(0, exact_features.size(1), 3)
    between = torch.tensor([c for c in range(1, exact_features.size(1)) if c % 3])
    real = sample["net_input"]["prev_output_tokens"].ne(task.target_dictionary.pad())
    torch.testing.assert_close(block_features[:, starts], exact_features[:, starts], rtol=1e-4, atol=1e-5)
    differs = (block_features[:, between] - exact_features[:, between]).abs().amax(-1) > 1e-3
    assert bool(differs[real[:, between]].all())


# ---- BiTran re-encoding at every arc token (--reencode-at-arcs) or after each run of them (--reencode-after-arcs) ---

TRIGGERS = ["--reencode-at-arcs", "--reencode-after-arcs"]


def block_starts_by_definition(trigger: str, is_arc):
    """(B, T) bool from the options' help: BOS, and every arc token's column (at arcs) or every column whose token is
    not an arc and follows one (after arcs)."""
    starts = is_arc.clone() if trigger == "--reencode-at-arcs" else torch.zeros_like(is_arc)
    if trigger == "--reencode-after-arcs":
        for column in range(1, is_arc.size(1)):
            starts[:, column] = is_arc[:, column - 1] & ~is_arc[:, column]
    starts[:, 0] = True
    return starts


@pytest.mark.parametrize("trigger", TRIGGERS, ids=["at", "after"])
@pytest.mark.parametrize("options", [[], ["--decoder-syntax", "parent,gcn"]], ids=["bitran", "parent,gcn"])
def test_reencoding_at_arcs_generates_what_training_scores(transition_bin, options, trigger):  # noqa: F811
    """--reencode-at-arcs: beam search's steps (at a step, the rows whose newest token is an arc re-encode and replace
    their rows of the cache, the others extend it causally; hypotheses moved between rows at step 6) give at every
    column what the training forward gives (one view per block start). Fails when a row re-encodes one step late,
    keeps its stale keys and values, or keeps the causal step's features."""
    _, destdir, _ = transition_bin
    task, model = tiny_model(destdir, trigger, *options)
    prev, encoder_out = four_hypotheses_of_one_source(task, model, 14)
    starts = block_starts_by_definition(trigger, model.decoder.arc_tokens[prev])[:, 1:]
    assert bool(starts.any()) and not bool(starts.all(dim=0).any())  # the rows re-encode at different columns
    assert_incremental_decoding_equals_full(model.decoder, prev, encoder_out, reorder_at=6, name=trigger)


@pytest.mark.parametrize("trigger", TRIGGERS, ids=["at", "after"])
def test_reencoding_at_arcs_keeps_the_gcn_inputs_of_the_prefix_a_row_reencoded(transition_bin, trigger):  # noqa: F811
    """Re-encoding at (after) arcs in decoding, 4 hypotheses re-encoding at different steps: after a step at which
    some rows re-encode and the others extend the cache, the GCN inputs kept for a re-encoded row are those of its
    prefix under the prefix's whole graph (the GCN run once over the row alone). At arcs beam scores cannot show
    this (a column gets edges only at an arc, where its row re-encodes), so the kept state is compared directly."""
    _, destdir, _ = transition_bin
    task, model = tiny_model(destdir, "--decoder-syntax", "gcn", trigger)
    decoder = model.decoder
    prev, encoder_out = four_hypotheses_of_one_source(task, model, 14)
    starts = block_starts_by_definition(trigger, decoder.arc_tokens[prev])
    state, checked = {}, 0
    with torch.no_grad():
        for column in range(1, prev.size(1) + 1):
            tokens = prev[:, :column]
            decoder(tokens, encoder_out=encoder_out, incremental_state=state)
            reencoded = starts[:, column - 1]
            if column == 1 or bool(reencoded.all()):
                continue  # every row re-encoded: the whole cache is theirs
            kept = decoder.input_module.get_incremental_state(state, "layer_inputs")
            for row in reencoded.nonzero(as_tuple=True)[0].tolist():
                own, row_tokens = {}, tokens[row:row + 1]
                context = decoder.prefix_scanner.context(row_tokens, "prefix")
                decoder.input_module(decoder.embed(row_tokens), {DECODER_CONTEXT: context}, None,
                                     incremental_state=own)
                expected = decoder.input_module.get_incremental_state(own, "layer_inputs")
                for index, inputs in expected.items():
                    torch.testing.assert_close(kept[index][:, row], inputs[:, 0], rtol=1e-4, atol=1e-5)
                checked += 1
    assert checked >= 3


@pytest.mark.parametrize("trigger", TRIGGERS, ids=["at", "after"])
def test_reencoding_at_arcs_is_exact_bitran_at_the_arcs_and_the_block_view_between(transition_bin,  # noqa: F811
                                                                                     trigger):
    """From the definition, same parameters, PARENT and the GCN decoder on: at BOS and at every column whose input
    token is an arc (after arcs: every column whose token is not an arc and follows one) the prediction is exact
    BiTran's (the prefix re-encoded: B = 1); at another column c it comes
    from the prefix re-encoded up to m, the last such column before c, and causal after it: the view that
    --reencode-every B computes for c when its block starts at m (B = m when c < 2m; B beyond the target when
    m = 0)."""
    _, destdir, _ = transition_bin
    task, arcs = tiny_model(destdir, "--decoder-syntax", "parent,gcn", trigger)
    _, exact = tiny_model(destdir, "--decoder-syntax", "parent,gcn")
    exact.load_state_dict(arcs.state_dict())
    sample = first_batch(task)
    prev = sample["net_input"]["prev_output_tokens"]
    real = prev.ne(task.target_dictionary.pad())
    features, exact_features = features_of(arcs, sample), features_of(exact, sample)
    starts = block_starts_by_definition(trigger, arcs.decoder.arc_tokens[prev])
    checked_starts = checked_between = 0
    block_features = {}  # B -> the --reencode-every B decoder's features of the batch
    for row in range(prev.size(0)):
        last_start = 0
        for column in range(int(real[row].sum())):
            if bool(starts[row, column]):
                last_start = column
                torch.testing.assert_close(features[row, column], exact_features[row, column], rtol=1e-4, atol=1e-5)
                checked_starts += 1
                continue
            if last_start == 0:
                every = 1000
            elif column < 2 * last_start:
                every = last_start
            else:
                continue  # no B puts last_start and column in one block: the general case is the test above
            if every not in block_features:
                _, block = tiny_model(destdir, "--decoder-syntax", "parent,gcn", "--reencode-every", str(every))
                block.load_state_dict(arcs.state_dict())
                block_features[every] = features_of(block, sample)
            torch.testing.assert_close(features[row, column], block_features[every][row, column], rtol=1e-4,
                                       atol=1e-5)
            checked_between += 1
    assert checked_starts > 5 and checked_between > 5


@pytest.mark.parametrize("mechanisms", ["none", "parent,gcn"])
def test_reencoding_beyond_the_longest_target_is_the_causal_decoder(transition_bin, mechanisms):  # noqa: F811
    """B >= the longest target: one view per sentence, re-encoded at BOS only and causal after it: fairseq's
    causal decoder over the transitions (Linearized; with PARENT and the GCN decoder on the "causal" policy),
    with the same parameters, to the float."""
    from .test_transition_decoding import build

    _, destdir, _ = transition_bin
    task, block = tiny_model(destdir, "--reencode-every", "1000", "--decoder-syntax", mechanisms)
    _, causal, _ = build(destdir, "--arch", "transformer_linearized_tiny", "--decoder-syntax", mechanisms,
                         "--dropout", "0")
    causal.load_state_dict(block.state_dict())
    sample = first_batch(task)
    real = sample["net_input"]["prev_output_tokens"].ne(task.target_dictionary.pad())  # (padding: not predicted)
    torch.testing.assert_close(features_of(block, sample)[real], features_of(causal, sample)[real], rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("reencoding", [["--reencode-every", "1"], ["--reencode-every", "3"],
                                        ["--reencode-at-arcs"], ["--reencode-after-arcs"]],
                         ids=["B=1", "B=3", "arcs", "after-arcs"])
def test_beam_search_scores_are_the_training_forwards(transition_bin, reencoding):  # noqa: F811
    """The task's generator (transition masks; beam 4, nbest 4, 3 sentences, so finished sentences leave the
    batch and the caches follow every reordering): each hypothesis's per-token scores are the log-probabilities
    the training forward gives its tokens, teacher-forced, the sentence alone."""
    from .test_transition_decoding import build

    _, destdir, _ = transition_bin
    task, model, cfg = build(destdir, "--arch", "transformer_parent_tiny", "--dropout", "0", *reencoding,
                             "--beam", "4", "--nbest", "4", "--max-len-a", "1.2", "--max-len-b", "10")
    generator = task.build_generator([model], cfg.generation)
    sample = first_batch(task, size=3)
    with torch.no_grad():
        hypotheses = task.inference_step(generator, [model], sample)
    source, pad, checked = sample["net_input"]["src_tokens"], task.source_dictionary.pad(), 0
    for b, sentence in enumerate(hypotheses):
        alone = source[b][source[b].ne(pad)].unsqueeze(0)
        for hypothesis in sentence:
            target = hypothesis["tokens"].unsqueeze(0)
            previous = torch.cat([target.new_full((1, 1), task.target_dictionary.eos()), target[:, :-1]], dim=1)
            with torch.no_grad():
                logits, _ = model(alone, torch.tensor([alone.size(1)]), previous)
                scores = model.get_normalized_probs((logits, None), log_probs=True)[0].gather(
                    1, target[0].unsqueeze(1)).squeeze(1)
            torch.testing.assert_close(hypothesis["positional_scores"], scores, rtol=1e-4, atol=1e-4)
            checked += 1
    assert checked == 12


@pytest.mark.parametrize("options", [
    ["--arch", "transformer_parent_tiny"],
    ["--arch", "transformer_linearized_tiny", "--decoder-syntax", "parent,gcn"],
    ["--arch", "transformer_linearized_tiny"],
], ids=["bitran+parent", "causal+parent,gcn", "linearized"])
def test_beam_search_scans_the_prefix_once_per_step(transition_bin, options, monkeypatch):  # noqa: F811
    """The prefix graph has one owner (PrefixScanner): in beam search the decoder's mechanisms and the generator's
    validity masks read one scan kept in the incremental state, made from the prefix once per batch (BOS only) and
    then extended by the newest column once per step, reordered with the beam; a model whose decoder keeps none
    (Linearized) has the generator keep it the same way. (The decoder and the generator each kept their own
    once, two extensions per step.)"""
    from fairseq_syntax.data.transitions.function import TransitionScan
    from fairseq_syntax.tasks.constrained_generation import ConstrainedEnsemble
    from .test_transition_decoding import build

    _, destdir, _ = transition_bin
    task, model, cfg = build(destdir, *options, "--dropout", "0", "--beam", "4", "--nbest", "2", "--max-len-a",
                             "1.2", "--max-len-b", "10")
    generator = task.build_generator([model], cfg.generation)
    counts = {"steps": 0, "made": 0, "extended": 0}
    of, extend, forward_decoder = TransitionScan.of.__func__, TransitionScan.extend, ConstrainedEnsemble.forward_decoder

    def counting_of(cls, token_ids, *args, **kwargs):
        counts["made"] += token_ids.size(1) == 0  # a prefix scan made from BOS (whole hypotheses are checked too)
        return of(cls, token_ids, *args, **kwargs)

    def counting_extend(self, token_ids, *args, **kwargs):
        counts["extended"] += token_ids.size(1) == 1
        return extend(self, token_ids, *args, **kwargs)

    def counting_forward_decoder(self, *args, **kwargs):
        counts["steps"] += 1
        return forward_decoder(self, *args, **kwargs)

    monkeypatch.setattr(TransitionScan, "of", classmethod(counting_of))
    monkeypatch.setattr(TransitionScan, "extend", counting_extend)
    monkeypatch.setattr(ConstrainedEnsemble, "forward_decoder", counting_forward_decoder)
    with torch.no_grad():
        hypotheses = task.inference_step(generator, [model], first_batch(task, size=3))
    assert len(hypotheses) == 3 and counts["steps"] > 5
    assert counts == {"steps": counts["steps"], "made": 1, "extended": counts["steps"] - 1}


@pytest.mark.parametrize("options,message", [
    (["--reencode-every", "0"], "must be >= 1"),
    (["--reencode-every", "2", "--bitran-prefixes", "3"], "does not combine"),
    (["--reencode-at-arcs", "--reencode-every", "2"], "--reencode-at-arcs chooses the block starts itself"),
    (["--reencode-at-arcs", "--bitran-prefixes", "3"], "--reencode-at-arcs chooses the block starts itself"),
    (["--reencode-after-arcs", "--reencode-every", "3"], "--reencode-after-arcs chooses the block starts itself"),
    (["--reencode-after-arcs", "--reencode-at-arcs"], "each choose the block starts: choose one"),
])
def test_reencode_every_refuses_what_it_cannot_do(transition_bin, options, message):  # noqa: F811
    _, destdir, _ = transition_bin
    with pytest.raises(ValueError, match=message):
        tiny_model(destdir, *options)


@pytest.mark.parametrize("options,message", [
    (["--arch", "transformer_linearized_tiny", "--reencode-every", "4"],
     "--reencode-every is an option of --decoder-type bitran, not transformer"),
    (["--arch", "transformer_parent_tiny", "--dyn-stgcd-kernel-size", "5"],
     "--dyn-stgcd-kernel-size is an option of --decoder-type dyn_stgcd, not bitran"),
])
def test_another_decoders_option_is_refused(transition_bin, options, message):  # noqa: F811
    """Decoder options are declared per decoder (SyntaxDecoder.options): one set away from its default with another
    decoder type would be ignored silently, so it is refused."""
    from .test_transition_decoding import build

    _, destdir, _ = transition_bin
    with pytest.raises(ValueError, match=re.escape(message)):
        build(destdir, *options)


def test_building_the_decoders_writes_nothing_into_the_model_config(transition_bin, monkeypatch):  # noqa: F811
    """Values reach a decoder's mechanisms as constructor arguments (the target's transition system), not written
    into the model config (the GCN decoder's label count once was, cfg.decoder_transition_labels)."""
    from fairseq_syntax.models.syntax_transformer import SyntaxTransformerModel
    from .test_transition_decoding import build

    build_decoder, configs = SyntaxTransformerModel.build_decoder.__func__, []

    def snapshot(value):
        # every attribute, nested ones too: TransformerConfig files `decoder_x` under cfg.decoder, which a
        # dataclass's repr (its fields only) would not show
        if hasattr(value, "__dict__"):
            return {name: snapshot(inner) for name, inner in vars(value).items()}
        return repr(value)

    def recording_build_decoder(cls, cfg, tgt_dict, embed_tokens):
        before = snapshot(cfg)
        decoder = build_decoder(cls, cfg, tgt_dict, embed_tokens)
        configs.append((before, snapshot(cfg)))
        return decoder

    monkeypatch.setattr(SyntaxTransformerModel, "build_decoder", classmethod(recording_build_decoder))
    _, destdir, _ = transition_bin
    for arch in ("transformer_gcn_decoder_tiny", "transformer_parent_tiny"):
        build(destdir, "--arch", arch, "--decoder-syntax", "parent,gcn")
    assert len(configs) == 2 and all(before == after for before, after in configs)


def test_building_the_model_writes_nothing_from_the_task_into_its_args(transition_bin):  # noqa: F811
    """The data-bin's vocabulary (the source label count, the target's transition system and word rule) reaches the
    mechanisms through the task's dictionaries: building the model adds no key to its args but the options fairseq
    and the model declare (it once wrote source_label_count, target_label_count and target_word_level there)."""
    import argparse

    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_syntax.models.syntax_transformer import SyntaxTransformerModel

    _, destdir, _ = transition_bin
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(destdir), "--user-dir", str(USER_DIR), "--task",
                                                "syntax_translation", "-s", "de", "-t", "en", "--arch",
                                                "transformer_parent_tiny", "--encoder-syntax", "label_embedding",
                                                "--decoder-syntax", "parent,gcn", "--cpu"])
    task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
    before = dict(vars(args))
    model = SyntaxTransformerModel.build_model(args, task)
    parser = argparse.ArgumentParser()
    SyntaxTransformerModel.add_args(parser)
    declared = {action.dest for action in parser._actions}
    written = {name for name, value in vars(args).items() if name not in before or before[name] != value}
    assert written and not written - declared, sorted(written - declared)
    # and the values arrived where they are used
    assert model.encoder.embedding_mechanism.embedding.num_embeddings == len(task.label_dicts["de"]) > 1
    assert model.decoder.target_transitions.num_labels == task.target_transitions.num_labels > 0
    assert torch.equal(model.decoder.target_transitions.token_class, task.target_transitions.token_class)


def test_causal_decoder_with_parent_and_gcn_decodes_incrementally_as_in_training(transition_bin):  # noqa: F811
    """fairseq's causal decoder with PARENT and the GCN decoder: step-by-step decoding with the incremental state
    (the transition state extended each step, reordered with the beam) gives the full-sequence scores. One source
    sentence, four target prefixes as its hypotheses (fairseq keeps one encoder-attention cache per sentence)."""
    _, destdir, _ = transition_bin
    from .test_transition_decoding import build
    task, model, _ = build(destdir, "--arch", "transformer_linearized_tiny", "--decoder-syntax", "parent,gcn",
                           "--dropout", "0")
    prev, encoder_out = four_hypotheses_of_one_source(task, model, 12)
    assert_incremental_decoding_equals_full(model.decoder, prev, encoder_out, reorder_at=6)


@pytest.mark.parametrize("options", [
    ["--arch", "transformer_linearized_tiny", "--decoder-syntax", "parent,gcn"],
    ["--arch", "transformer_bitran_tiny", "--decoder-syntax", "parent,gcn", "--reencode-every", "3"],
    ["--arch", "transformer_bitran_tiny", "--decoder-syntax", "parent,gcn", "--reencode-at-arcs"],
], ids=["causal", "B=3", "arcs"])
def test_incremental_decoding_of_right_padded_rows_gives_their_real_columns(transition_bin, options):  # noqa: F811
    """Rows of different lengths, right-padded, decoded step by step with the incremental state (as
    bench/decoder_cost.py's reference decoding does; beam search's rows never pad): at every real column, the full
    forward's features. PARENT read the padding of its queries at the keys' full width, which failed at a step
    whose newest column is padding (its mask then covers that column alone)."""
    from .test_transition_decoding import build

    _, destdir, _ = transition_bin
    task, model, _ = build(destdir, *options, "--dropout", "0")
    sample = first_batch(task)
    net_input = sample["net_input"]
    prev = net_input["prev_output_tokens"]
    real = prev.ne(task.target_dictionary.pad())
    assert not bool(real.all()) and bool(real[:, 0].all())  # right-padded
    with torch.no_grad():
        encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
        full = model.decoder(prev, encoder_out=encoder_out, features_only=True)[0]
        state, steps = {}, []
        for column in range(1, prev.size(1) + 1):
            steps.append(model.decoder(prev[:, :column], encoder_out=encoder_out, incremental_state=state,
                                       features_only=True)[0])
    torch.testing.assert_close(torch.cat(steps, dim=1)[real], full[real], rtol=1e-4, atol=1e-5)


# ---- through fairseq-train and fairseq-generate, with trees ----------------------------------------------------

@pytest.mark.parametrize("arch", [
    ["--arch", "transformer_parent_tiny", "--encoder-syntax", "pascal"],
    # (slow: make test keeps one CLI run of these decoders; 108 s on 2 cores)
    pytest.param(["--arch", "transformer_gcn_decoder_tiny", "--encoder-syntax", "rgse", "--encoder-syntax-layers",
                  "0,1", "--no-decoder-gcn-gates"], marks=pytest.mark.slow),
], ids=["pascal+parent", "rgse+gcn-gates"])
def test_train_generate_and_trees_through_the_cli(transition_bin, tmp_path, arch):  # noqa: F811
    """BiTran with PARENT and with the GCN decoder (an ablation switch on), each under an encoder mechanism, train 3
    updates and translate valid with beam 3: every hypothesis is a valid transition sequence, and the tree written
    to --trees-out is the graph the decoder re-encoded at its last step (the batched transition function's heads,
    computed here from the tokens). Plain BiTran and the other switches are built from the same command-line
    options in the in-process tests above."""
    raw, destdir, _ = transition_bin
    common = cli_common(destdir)
    result = train_few_updates(destdir, tmp_path / "ckpt", *arch)
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([0-9.]+)", result.stdout + result.stderr)]
    assert len(losses) == 3 and all(np.isfinite(losses))
    trees = tmp_path / "trees.conllu"
    generated = run_cli("fairseq-generate", *common, "--path", tmp_path / "ckpt" / "checkpoint_last.pt",
                        "--gen-subset", "valid", "--beam", "3", "--max-len-a", "1", "--max-len-b", "5",
                        "--trees-out", trees)
    dictionary = Dictionary.load(str(destdir / "dict.en.txt"))
    transitions = TargetTransitions(dictionary.symbols)
    written = {}
    for block in trees.read_text(encoding="utf-8").split("\n\n"):
        lines = block.strip().splitlines()
        if lines:
            sent_id = next(line.split("=", 1)[1].strip() for line in lines if line.startswith("# sent_id"))
            written[sent_id] = [int(line.split("\t")[6]) for line in lines if not line.startswith("#")]
    hypotheses = [line.split("\t") for line in generated.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == len(task_valid_lines(destdir)) == len(written)
    for hypothesis in hypotheses:
        tokens = hypothesis[2].split()
        assert is_valid_sequence(tokens), tokens
        ids = torch.tensor([[2] + [dictionary.index(t) for t in tokens]])
        scan = PrefixScanner(transitions).scan(ids)
        heads = [0] * int(scan.num_words[0])
        for head, dependent in zip(scan.head[0].tolist(), scan.dependent[0].tolist()):
            if head >= 0:
                heads[dependent] = head + 1
        assert written[hypothesis[0][2:]] == heads


def task_valid_lines(destdir):
    return (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()
