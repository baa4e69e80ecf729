"""Every method under the training options that change how a step is computed, in process on the `_tiny` presets:
the loss and every parameter's gradient of one step, through the task's own criterion (so auxiliary losses count:
LISA's parent loss, the multi-task model's parse tokens, ...), with the option against without it.

- `--checkpoint-activations` and `--offload-activations` (fairseq's activation checkpointing of each layer: its
  forward runs again in the backward pass, so anything the layer reads must be a forward argument): equal to float
  tolerance, RNG-driven regularisers (parent ignoring, edge dropout) included, since fairseq's checkpoint replays
  the RNG state; on the recurrent models, which have no such option, fairseq's parser refuses it by name.
- `--update-freq 2` against one batch of the two batches' sentences: fairseq sums the gradients of the two
  backward passes and normalises by the total sample size once; the equivalent single batch gives the same
  gradient (token-normalised criterion, dropout off).
- `--bf16` (fairseq's cast of the model and the batch): one step's loss within 2% of float32's, finite gradients.
- `--eval-bleu` on a transitions data-bin: the constrained search, hypotheses and references scored as text.

Resume, 2-process DDP and --bf16 are in tests/test_training_reliability.py and tests/test_bf16_training.py."""
import functools

import pytest
import torch
from fairseq import options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_syntax  # noqa: F401

from .helpers import marked_slow
from .test_dyn_stgcd import parsed_bin  # noqa: F401  (EWT trees on both sides, no transitions)
from .test_end_to_end import data_bin  # noqa: F401  (module fixture: a small Multi30k syntax data-bin)
from .test_ldd import ldd_bin  # noqa: F401
from .test_supar_parser import tiny_model  # noqa: F401
from .test_training_reliability import METHODS, RANDOMNESS, method_bin, multitask_bin  # noqa: F401
from .test_transition_decoding import transition_bin  # noqa: F401  (EWT trees as the target: transitions)

TARGET_SIDE = ("linearized", "bitran", "parent", "gcn_decoder", "parent_b3", "dyn_stgcd")  # on their own data-bins
SOURCE_METHODS = {"vanilla_syntax": ["--arch", "transformer_pascal_tiny", "--encoder-syntax", "none"],
                  **{name: args for name, args in METHODS.items() if not name.startswith("lstm_")
                     and name not in TARGET_SIDE}}
RECURRENT = [name for name in METHODS if name.startswith("lstm_")]
# target-side transitions: Linearized (fairseq's decoder) and Choshen & Abend's decoders
TRANSITION_METHODS = {
    "linearized": ["--arch", "transformer_linearized_tiny"],
    "bitran": ["--arch", "transformer_bitran_tiny"],
    "parent": ["--arch", "transformer_parent_tiny"],
    "gcn_decoder": ["--arch", "transformer_gcn_decoder_tiny"],
    "parent_b3": ["--arch", "transformer_parent_tiny", "--reencode-every", "3"],
    "gcn_decoder_arcs": ["--arch", "transformer_gcn_decoder_tiny", "--reencode-at-arcs"],
    "gcn_decoder_after_arcs": ["--arch", "transformer_gcn_decoder_tiny", "--reencode-after-arcs"],
}
CRITERION = ["--criterion", "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1"]
# make test keeps Linearized and the GCN decoder (the re-encoding policy of BiTran and PARENT too) under each option;
# make test-slow BiTran and PARENT themselves
SLOW_TARGET_SIDE = {"bitran", "parent", "parent_b3", "gcn_decoder_arcs", "gcn_decoder_after_arcs"}


def setup(destdir, direction, *extra):
    src, tgt = direction
    args = options.parse_args_and_arch(options.get_training_parser(),
                                       [str(destdir), "--task", "syntax_translation", "-s", src, "-t", tgt, *CRITERION,
                                        *map(str, extra)])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    task.build_model(cfg.model)  # tells the task which batch features the model reads
    task.load_dataset("train")  # every data-bin here has one (the multi-task one has no valid split)
    return task, cfg


def step(task, cfg, samples, seed=1):
    """Loss and gradients of one training step over `samples` (summed, normalised once by their total sample
    size, as fairseq's trainer does with --update-freq), from the same initial weights every call."""
    torch.manual_seed(0)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    model.train()
    torch.manual_seed(seed)  # parent ignoring / edge dropout draw from it; checkpointing must replay the draws
    total_loss, total_size = 0.0, 0
    for sample in samples:
        loss, sample_size, _ = criterion(model, sample)
        loss.backward()
        total_loss, total_size = total_loss + float(loss), total_size + sample_size
    grads = {name: p.grad / total_size for name, p in model.named_parameters() if p.grad is not None}
    return model, total_loss / total_size, grads


def collate(task, indices):
    dataset = task.dataset("train")
    return dataset.collater([dataset[i] for i in indices])


def assert_same_step(plain, other, what):
    (_, loss_a, grads_a), (_, loss_b, grads_b) = plain, other
    assert loss_b == pytest.approx(loss_a, rel=1e-5), what
    assert grads_a.keys() == grads_b.keys(), what
    assert grads_a, what
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-6, msg=f"{what}: {name}")


def checkpointed_layers(model):
    layers = list(model.encoder.layers) + list(getattr(model.decoder, "layers", []))
    return sum(isinstance(layer.forward, functools.partial) for layer in layers), len(layers)


def check_activation_options(destdir, direction, method_args):
    task, cfg = setup(destdir, direction, *method_args)
    batch = [collate(task, range(6))]
    plain = step(task, cfg, batch)
    for option in (["--checkpoint-activations"], ["--offload-activations"]):
        task_c, cfg_c = setup(destdir, direction, *method_args, *option)
        checkpointed = step(task_c, cfg_c, batch)
        wrapped, layers = checkpointed_layers(checkpointed[0])
        assert wrapped == layers, f"{option}: {wrapped} of {layers} layers checkpointed"
        assert_same_step(plain, checkpointed, " ".join(option))


@pytest.mark.parametrize("method", list(SOURCE_METHODS))
def test_activation_checkpointing_changes_nothing_source_side(data_bin, method, request):  # noqa: F811
    """Dropout on, and each method's own randomness (parent ignoring, edge dropout) on where it has some."""
    destdir = data_bin[1] if method == "vanilla_syntax" else method_bin(method, data_bin, request)[0]
    check_activation_options(destdir, ("en", "de"), [*SOURCE_METHODS[method], *RANDOMNESS.get(method, [])])


@pytest.mark.parametrize("method", marked_slow(TRANSITION_METHODS, SLOW_TARGET_SIDE))
def test_activation_checkpointing_changes_nothing_target_side(transition_bin, method):  # noqa: F811
    check_activation_options(transition_bin[1], ("de", "en"), TRANSITION_METHODS[method])


@pytest.mark.parametrize("method", RECURRENT)
@pytest.mark.parametrize("option", ["--checkpoint-activations", "--offload-activations"])
def test_recurrent_models_refuse_activation_checkpointing_by_name(data_bin, method, option, capsys):  # noqa: F811
    with pytest.raises(SystemExit):
        setup(data_bin[1], ("en", "de"), *METHODS[method], option)
    assert option in capsys.readouterr().err


def check_update_freq(destdir, direction, method_args):
    task, cfg = setup(destdir, direction, *method_args, "--dropout", "0")
    # two batches of different lengths: padding differs between the halves and the whole
    halves = [collate(task, [0, 1, 2]), collate(task, [3, 4, 5, 6])]
    whole = [collate(task, range(7))]
    assert_same_step(step(task, cfg, whole), step(task, cfg, halves), "--update-freq 2")


@pytest.mark.parametrize("method", ["vanilla_syntax", *(name for name in METHODS if name not in TARGET_SIDE)])
def test_two_accumulated_batches_equal_one_batch_source_side(data_bin, method, request):  # noqa: F811
    """--update-freq 2 against a batch twice the size (no dropout, no parent ignoring, no edge dropout: METHODS
    without RANDOMNESS)."""
    if method == "vanilla_syntax":
        check_update_freq(data_bin[1], ("en", "de"), SOURCE_METHODS[method])
        return
    check_update_freq(method_bin(method, data_bin, request)[0], ("en", "de"), METHODS[method])


@pytest.mark.parametrize("method", marked_slow(TRANSITION_METHODS, SLOW_TARGET_SIDE))
def test_two_accumulated_batches_equal_one_batch_target_side(transition_bin, method):  # noqa: F811
    check_update_freq(transition_bin[1], ("de", "en"), TRANSITION_METHODS[method])


def bf16_step(task, cfg, sample):
    """Loss and gradients of one step as fairseq's trainer runs it under --bf16: the model cast to bfloat16, every
    float32 tensor of the batch cast too (fairseq's _prepare_sample), integers (positions, ids) left as they are."""
    torch.manual_seed(0)
    model = task.build_model(cfg.model).bfloat16()
    criterion = task.build_criterion(cfg.criterion)
    model.train()
    cast = utils.apply_to_sample(lambda t: t.to(torch.bfloat16) if t.dtype is torch.float32 else t, sample)
    loss, sample_size, _ = criterion(model, cast)
    loss.backward()
    return float(loss) / sample_size, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


BF16_METHODS = {**{name: (None, args) for name, args in SOURCE_METHODS.items()},
                **{name: (None, METHODS[name]) for name in RECURRENT},
                **{name: ("transitions", args) for name, args in TRANSITION_METHODS.items()}}


@pytest.mark.parametrize("method", marked_slow(BF16_METHODS, SLOW_TARGET_SIDE))
def test_bf16_step_is_float32_step_within_tolerance(data_bin, transition_bin, method, request):  # noqa: F811
    """--bf16 (fairseq's own cast, as the trainer applies it, on the CPU): the loss of one step from the same
    weights is within 2% of float32's, every gradient is finite and reaches the same parameters. The syntax
    positions' exactness under bf16 is tests/test_syntax_contract.py's; a full fairseq-syntax-train --bf16 run is
    tests/test_bf16_training.py's."""
    kind, method_args = BF16_METHODS[method]
    if kind == "transitions":
        destdir, direction = transition_bin[1], ("de", "en")
    else:
        destdir = data_bin[1] if method == "vanilla_syntax" else method_bin(method, data_bin, request)[0]
        direction = ("en", "de")
    task, cfg = setup(destdir, direction, *method_args, "--dropout", "0")
    sample = collate(task, range(6))
    _, loss32, grads32 = step(task, cfg, [sample])
    loss16, grads16 = bf16_step(task, cfg, sample)
    assert loss16 == pytest.approx(loss32, rel=0.02), (loss16, loss32)
    assert grads16.keys() == grads32.keys()
    assert all(torch.isfinite(grad).all() for grad in grads16.values())


def test_the_comparison_can_fail(data_bin):  # noqa: F811
    """The gradient comparison tells apart two steps that differ in the syntax only."""
    task, cfg = setup(data_bin[1], ("en", "de"), "--arch", "transformer_pascal_tiny", "--dropout", "0")
    none_task, none_cfg = setup(data_bin[1], ("en", "de"), "--arch", "transformer_pascal_tiny", "--dropout", "0",
                                "--encoder-syntax", "none")
    batch = [collate(task, range(6))]
    with pytest.raises(AssertionError):
        assert_same_step(step(task, cfg, batch), step(none_task, none_cfg, batch), "syntax off")


@pytest.mark.parametrize("method", list(TRANSITION_METHODS))
def test_valid_bleu_on_a_transitions_data_bin_scores_the_text(transition_bin, method, monkeypatch):  # noqa: F811
    """--eval-bleu on a --target-transitions data-bin: the validation search is the constrained one (every
    hypothesis a tree), and hypotheses and references are scored as text, transition tokens left out: each
    reference decodes to the sentence the data-bin kept (train.en.txt: the split these tests batch from)."""
    from fairseq_syntax.data.transitions.tokens import is_transition_token
    from fairseq_syntax.tasks.constrained_generation import ConstrainedSequenceGenerator

    destdir = transition_bin[1]
    task, cfg = setup(destdir, ("de", "en"), *TRANSITION_METHODS[method], "--eval-bleu", "--eval-bleu-args",
                      '{"beam": 2, "max_len_a": 1.2, "max_len_b": 10}')
    model = task.build_model(cfg.model)
    assert isinstance(task.sequence_generator, ConstrainedSequenceGenerator)
    decoded = []
    original = task.tokenizer.decode
    monkeypatch.setattr(task.tokenizer, "decode", lambda text: decoded.append((text, original(text))) or
                        decoded[-1][1])
    sample = collate(task, range(4))
    model.eval()
    _, _, logging_output = task.valid_step(sample, model, task.build_criterion(cfg.criterion))
    assert logging_output["_bleu_sys_len"] > 0 and logging_output["_bleu_ref_len"] > 0
    texts = [text for _, text in decoded]
    assert len(texts) == 8  # hypothesis, reference per sentence
    assert any(is_transition_token(token) for raw, _ in decoded for token in raw.split())  # there was something
    assert not any(is_transition_token(token) for text in texts for token in text.split())
    kept = (destdir / "train.en.txt").read_text(encoding="utf-8").splitlines()
    references = texts[1::2]
    for index, reference in zip(sample["id"].tolist(), references):
        assert reference == kept[index]


# ---- Dyn-STGCD (its own decoder: blocks run step by step, checkpointed per block and step) --------------------

DYN_STGCD = ["--arch", "dyn_stgcd_tiny"]


def short_batches(task, count):
    """The `count` shortest training sentences (each decoder step is one pass over the blocks)."""
    dataset = task.dataset("train")
    return sorted(range(len(dataset)), key=lambda i: len(dataset[i]["target"]))[:count]


def test_dyn_stgcd_activation_checkpointing_changes_nothing(parsed_bin):  # noqa: F811
    """Dropout on; the graph loss counts. Every block of every step runs again in the backward pass."""
    destdir = parsed_bin[1]
    task, cfg = setup(destdir, ("de", "en"), *DYN_STGCD)
    batch = [collate(task, short_batches(task, 6))]
    plain = step(task, cfg, batch)
    for option in (["--checkpoint-activations"], ["--offload-activations"]):
        task_c, cfg_c = setup(destdir, ("de", "en"), *DYN_STGCD, *option)
        checkpointed = step(task_c, cfg_c, batch)
        assert checkpointed[0].decoder.checkpoint_blocks
        assert_same_step(plain, checkpointed, " ".join(option))


def test_dyn_stgcd_two_accumulated_batches_equal_one_batch(parsed_bin):  # noqa: F811
    task, cfg = setup(parsed_bin[1], ("de", "en"), *DYN_STGCD, "--dropout", "0")
    short = short_batches(task, 7)
    halves = [collate(task, short[:3]), collate(task, short[3:])]
    assert_same_step(step(task, cfg, [collate(task, short)]), step(task, cfg, halves), "--update-freq 2")


def test_dyn_stgcd_bf16_step_is_float32_step_within_tolerance(parsed_bin):  # noqa: F811
    """The adjacency, its refinement, the kernel and the graph loss stay float32 under the model's bf16 cast."""
    task, cfg = setup(parsed_bin[1], ("de", "en"), *DYN_STGCD, "--dropout", "0")
    sample = collate(task, short_batches(task, 6))
    _, loss32, grads32 = step(task, cfg, [sample])
    loss16, grads16 = bf16_step(task, cfg, sample)
    assert loss16 == pytest.approx(loss32, rel=0.02), (loss16, loss32)
    assert grads16.keys() == grads32.keys()
    assert all(torch.isfinite(grad).all() for grad in grads16.values())


def test_dyn_stgcd_valid_bleu_decodes_and_scores(parsed_bin):  # noqa: F811
    """--eval-bleu with Dyn-STGCD: fairseq's validation search runs its incremental decoder (beam 2) and scores the
    hypotheses against the references as text."""
    task, cfg = setup(parsed_bin[1], ("de", "en"), *DYN_STGCD, "--eval-bleu", "--eval-bleu-args",
                      '{"beam": 2, "max_len_a": 0, "max_len_b": 12}')
    model = task.build_model(cfg.model)
    model.eval()
    sample = collate(task, short_batches(task, 4))
    _, _, logging_output = task.valid_step(sample, model, task.build_criterion(cfg.criterion))
    assert logging_output["_bleu_sys_len"] > 0 and logging_output["_bleu_ref_len"] > 0
    assert logging_output["aux_" + "target_graph"] > 0  # validation counts the graph loss too
