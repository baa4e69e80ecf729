"""Nothing in the plugin assumes the CPU or float32 (the project's rule: positions travel as integers, densities are
computed in float32, so fp16 / bf16 training keeps them exact).

- Tiny syntax transformers (PASCAL, LDD, the GCN, BiGRU + GCN, RGSE, LISA, label features) train one step, forward
  and backward, under torch.autocast in float16 and bfloat16: on the CPU here, on CUDA where there is one. The
  syntax densities (PASCAL's D^p, LDD's distributions), the GCN's gate logits and LISA's parent loss are float32
  inside the autocast region.
- The same densities and gate logits are bit for bit what they are without autocast.
- PASCAL and LDD attention and the GCN layer (given its arcs) run on the "meta" device: a tensor made on the CPU
  inside them, or a value read back to the host (.item(), int(tensor), a data-dependent shape), fails there. On
  CUDA, PASCAL and the GCN layer run under torch.cuda.set_sync_debug_mode("error").
Batches are made by the real collater (fairseq_syntax.data.features.collate_features) from random trees.
"""
from argparse import Namespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fairseq_syntax  # noqa: F401  (registers the mechanisms, models and architectures)
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY
from fairseq_syntax.data.channels import SentenceSyntax
from fairseq_syntax.data.dependency_distributions import NUM_GROUPS, PROBABILITY_SCALE
from fairseq_syntax.data.features import collate_features
from fairseq_syntax.modules import SyntaxBiasedSelfAttention
from fairseq_syntax.modules.decoder_context import DecoderContext
from fairseq_syntax.modules.dependency_graph import PieceArcs, piece_arcs
from fairseq_syntax.modules.mechanisms.graph_convolution import GraphConvolution
from fairseq_syntax.modules.mechanisms.ldd import VARIANTS as LDD_VARIANTS, LabeledDependencyDistributions
from fairseq_syntax.modules.mechanisms.pascal import ParentScaledModifier

from .devices import on, requires_cuda
from .helpers import toy_dictionary, with_labels

NUM_LABELS = 12
LOW_PRECISION = [pytest.param(torch.float16, id="float16"), pytest.param(torch.bfloat16, id="bfloat16")]
ARCHS = ["transformer_pascal_tiny", "transformer_ldd_tiny", "transformer_gcn_tiny", "transformer_birnn_gcn_tiny",
         "transformer_birnn_tiny", "transformer_rgse_tiny", "transformer_lisa_tiny", "transformer_sh_tiny"]
SOURCE_FEATURES = ["src_parent_middle_halves", "src_parent_first", "src_labels", "src_word_ids", "src_heads",
                   "src_label_groups", "src_ldd_dependents", "src_ldd_heads", "src_ldd_groups", "src_ldd_probs"]


DICT = with_labels(toy_dictionary(40), NUM_LABELS)


def skip_unsupported(device, dtype):
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")


# ---- a batch from the real collater -----------------------------------------------------------------------------

def random_sentence(generator, words):
    """A tree over `words` words split into 1-3 pieces (word 0 the root, every other word's head an earlier word),
    labels, label groups (16: outside the groups) and stored LDD arcs: each word's 1-best head with most of the
    mass and, but for the root, the root with the rest."""
    pieces = generator.integers(1, 4, size=words)
    heads = np.array([0] + [int(generator.integers(1, i + 1)) for i in range(1, words)])
    groups = generator.integers(0, NUM_GROUPS, size=2 * words)
    dependents = np.concatenate([np.arange(words), np.arange(1, words)])
    arc_heads = np.concatenate([heads, np.zeros(words - 1, dtype=np.int64)])
    probs = np.concatenate([np.full(words, 200), np.full(words - 1, PROBABILITY_SCALE - 200)])
    return SentenceSyntax(word_ids=np.repeat(np.arange(words), pieces), heads=heads,
                          labels=generator.integers(1, NUM_LABELS, size=words),
                          label_groups=generator.integers(0, NUM_GROUPS + 1, size=words),
                          ldd_dependents=dependents, ldd_heads=arc_heads, ldd_groups=groups[:len(dependents)],
                          ldd_probs=probs)


def random_batch(word_counts=(5, 2, 8, 4), target_length=7, seed=0):
    """A left-padded source (pieces then EOS) with every source feature, and a target of `target_length` tokens."""
    generator = np.random.default_rng(seed)
    syntaxes = [random_sentence(generator, words) for words in word_counts]
    lengths = np.array([len(s.word_ids) + 1 for s in syntaxes])
    width = int(lengths.max())
    src_tokens = torch.full((len(syntaxes), width), DICT.pad())
    for b, length in enumerate(lengths):
        src_tokens[b, width - length:-1] = torch.from_numpy(generator.integers(DICT.nspecial, len(DICT), length - 1))
        src_tokens[b, -1] = DICT.eos()
    features = collate_features(SOURCE_FEATURES, {"source": syntaxes}, {"source": lengths}, {"source": width},
                                {"source": True})
    assert not any(value.is_floating_point() for value in features.values())  # positions travel as integers
    target = torch.from_numpy(generator.integers(DICT.nspecial, len(DICT), (len(syntaxes), target_length)))
    target[:, -1] = DICT.eos()
    previous = torch.cat([torch.full((len(syntaxes), 1), DICT.eos()), target[:, :-1]], dim=1)
    net_input = {"src_tokens": src_tokens, "src_lengths": torch.from_numpy(lengths),
                 "prev_output_tokens": previous, **features}
    return net_input, target


def tiny_model(arch, seed=0):
    task = Namespace(source_dictionary=DICT, target_dictionary=DICT,
                     cfg=Namespace(source_lang="en", target_lang="de"))
    args = Namespace(arch=arch, share_all_embeddings=True)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task)


# ---- autocast ---------------------------------------------------------------------------------------------------

class Recorder:
    """The dtypes of what the syntax mechanisms compute inside a forward pass: each score modifier's matrix, each
    GCN's gate logits."""

    def __init__(self, model):
        self.matrices, self.gate_logits = [], []
        for module in model.modules():
            if isinstance(module, (ParentScaledModifier, LabeledDependencyDistributions)):
                module.register_forward_hook(lambda _, __, output: self.matrices.append(output.matrix.dtype))
            if isinstance(module, GraphConvolution):
                module.gate_logits = self.recording(module.gate_logits)

    def recording(self, method):
        def call(x):
            logits = method(x)
            self.gate_logits.append(logits.dtype)
            return logits

        return call


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_models_train_under_autocast_with_float32_densities(arch, dtype, device):
    skip_unsupported(device, dtype)
    model = tiny_model(arch).to(device).train()
    recorder = Recorder(model)
    net_input, target = on(device, random_batch())
    with torch.autocast(device_type=device.type, dtype=dtype):
        logits, extra = model(**net_input)
        losses = extra.get("auxiliary_losses", {})
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1), reduction="sum")
        loss = loss + sum(losses.values())
    assert logits.dtype == dtype  # autocast was on: the output projection ran in low precision
    loss.backward()
    assert torch.isfinite(loss)
    gradients = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in gradients.values())
    own = [name for name, _ in model.named_parameters()  # the mechanism's parameters (PASCAL and LDD have none)
           if any(part in name for part in (".syntax_module.", ".score_modifier.", "embedding_mechanism."))]
    assert all(name in gradients for name in own) and bool(own) == (arch not in (
        "transformer_pascal_tiny", "transformer_ldd_tiny"))
    # what the project computes in float32 stays float32 inside the autocast region
    if arch in ("transformer_pascal_tiny", "transformer_ldd_tiny"):
        assert recorder.matrices and set(recorder.matrices) == {torch.float32}
    if "gcn" in arch:
        assert recorder.gate_logits and set(recorder.gate_logits) == {torch.float32}
    if arch == "transformer_lisa_tiny":
        assert losses["lisa_parent"].dtype == torch.float32 and losses["lisa_parent"] > 0


def pascal_and_ldd_inputs(device, seed=0):
    net_input, _ = random_batch(seed=seed)
    x = torch.randn(net_input["src_tokens"].size(1), net_input["src_tokens"].size(0), 16)
    return on(device, (x, net_input, net_input["src_tokens"].eq(DICT.pad())))


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_densities_and_gates_are_the_same_float32_values_under_autocast(dtype, device):
    """Autocast lowers matmuls to float16 / bfloat16: the densities and the GCN's gate logits must not notice."""
    skip_unsupported(device, dtype)
    x, syntax, mask = pascal_and_ldd_inputs(device)
    modifiers = [ParentScaledModifier(Namespace(), 16, 4, 0)] + [
        LabeledDependencyDistributions(Namespace(ldd_variant=variant, ldd_layer_heads=NUM_GROUPS), 16, NUM_GROUPS, 0)
        for variant in LDD_VARIANTS]
    gcn = GraphConvolution(16, NUM_LABELS).to(device)
    plain = [modifier.eval()(x, syntax, mask).matrix for modifier in modifiers] + [gcn.gate_logits(x)]
    with torch.autocast(device_type=device.type, dtype=dtype):
        assert (x @ x.transpose(1, 2)).dtype == dtype  # autocast is on
        autocast = [modifier(x, syntax, mask).matrix for modifier in modifiers] + [gcn.gate_logits(x)]
    for name, expected, got in zip(["pascal", *LDD_VARIANTS, "gcn gates"], plain, autocast):
        assert got.dtype == torch.float32, name
        assert torch.equal(got, expected), name


# ---- device placement and host syncs ----------------------------------------------------------------------------

def attention_with(modifier, heads):
    torch.manual_seed(0)
    return SyntaxBiasedSelfAttention(16, heads, dropout=0.0, self_attention=True, score_modifier=modifier)


def check_on(device, train=False):
    """PASCAL and every LDD variant in their attention, and the GCN layer given its arcs: outputs on `device`."""
    x, syntax, mask = pascal_and_ldd_inputs("cpu")
    arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], NUM_LABELS)
    modules = [attention_with(ParentScaledModifier(Namespace(parent_ignoring=0.3), 16, 4, 0), 4)] + [
        attention_with(LabeledDependencyDistributions(Namespace(ldd_variant=variant, ldd_layer_heads=NUM_GROUPS), 16,
                                                      NUM_GROUPS, 0), NUM_GROUPS) for variant in LDD_VARIANTS]
    gcn = GraphConvolution(16, NUM_LABELS, edge_dropout=0.2)
    x, syntax, mask = on(device, (x, syntax, mask))
    arcs = PieceArcs(*on(device, (arcs.batch, arcs.head, arcs.dependent, arcs.label)))
    outputs = []
    for attention in modules:
        attention = attention.to(device).train(train)
        modification = attention.score_modifier(x, syntax, mask)
        outputs.append(attention(x, x, x, key_padding_mask=mask, score_modification=modification,
                                 need_weights=False)[0])
    outputs.append(gcn.to(device).train(train)(x, arcs))
    return x, outputs


def test_on_moves_the_tensors_of_a_dataclass():
    """`on` moves a dataclass's tensors too: the GCN decoder's equation test hands its module a DecoderContext, which
    `on` once returned as it was, so the CUDA run got CPU indices (found on an H100, 2026-11-26)."""
    context = DecoderContext(torch.zeros(2, 3, dtype=torch.long), torch.full((2, 3, 3), -1),
                             torch.full((2, 3, 3), -1), "block", torch.tensor([1, 2]))
    moved = on(torch.device("meta"), context)
    assert all(t.device.type == "meta" for t in (moved.tokens, moved.edge_columns, moved.edge_labels,
                                                 moved.reencoded_until))
    assert moved.policy == "block" and context.tokens.device.type == "cpu"


@pytest.mark.parametrize("train", [False, True])
def test_pascal_ldd_and_the_gcn_layer_run_on_the_meta_device(train):
    """"meta" tensors have no data: a CPU tensor mixed in, or a value read back to the host (.item(), int(), a
    shape that depends on the data), raises. (The GCN's arcs come from piece_arcs, whose number of arcs depends on
    the data, so they are made before.)"""
    x, outputs = check_on(torch.device("meta"), train)
    for output in outputs:
        assert output.device.type == "meta" and output.shape == x.shape


@requires_cuda
@pytest.mark.parametrize("train", [False, True])
def test_pascal_ldd_and_the_gcn_layer_do_not_synchronize_with_the_host(train):
    """PASCAL's and LDD's attention and the GCN layer (its arcs made before) queue their kernels without waiting for
    the GPU. (LDD's expansion to pieces, data/subword.copy_to_pieces, once made its fill value a device tensor from a
    Python number: a host-to-device copy that synchronized.)"""
    device = torch.device("cuda")
    with torch.no_grad():
        check_on(device, train)  # warm-up: CUDA and cuBLAS initialisation outside the check
    x, syntax, mask = pascal_and_ldd_inputs(device)
    arcs = piece_arcs(syntax["src_parent_first"], syntax["src_labels"], syntax["src_word_ids"], NUM_LABELS)
    pascal = attention_with(ParentScaledModifier(Namespace(parent_ignoring=0.3), 16, 4, 0), 4).to(device).train(train)
    gcn = GraphConvolution(16, NUM_LABELS, edge_dropout=0.2).to(device).train(train)
    ldd = [attention_with(LabeledDependencyDistributions(Namespace(ldd_variant=variant, ldd_layer_heads=NUM_GROUPS), 16,
                                                         NUM_GROUPS, 0), NUM_GROUPS).to(device).train(train)
           for variant in LDD_VARIANTS]
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        modification = pascal.score_modifier(x, syntax, mask)
        out = pascal(x, x, x, key_padding_mask=mask, score_modification=modification, need_weights=False)[0]
        out = out + gcn(x, arcs)
        for attention in ldd:
            modification = attention.score_modifier(x, syntax, mask)
            out = out + attention(x, x, x, key_padding_mask=mask, score_modification=modification,
                                  need_weights=False)[0]
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert torch.isfinite(out).all()
