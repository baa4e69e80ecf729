"""The PASCAL paper's syntax baselines on the contract: LISA (a biaffine head supervised to attend to parents) and
Sennrich & Haddow's label features in the embeddings, against naive loops (the modules on the CPU and on CUDA,
tests/devices.py) and through the fairseq commands."""
import math
import re
from argparse import Namespace

import pytest
import torch

import fairseq_syntax  # noqa: F401
from fairseq_syntax.modules import SyntaxBiasedSelfAttention
from fairseq_syntax.modules.mechanisms.lisa import LisaParentAttention, parent_loss
from fairseq_syntax_preprocess.cli import cli_main as preprocess_main

from .devices import on
from .helpers import USER_DIR, run_cli
from .test_end_to_end import data_bin, load_task  # noqa: F401  (module fixture: a small syntax data-bin)

EMBED_DIM, HEADS = 16, 4


def lisa_attention(head=1, seed=0):
    torch.manual_seed(seed)
    lisa = LisaParentAttention(Namespace(lisa_head=head), EMBED_DIM, HEADS, 0)
    attention = SyntaxBiasedSelfAttention(EMBED_DIM, HEADS, dropout=0.0, self_attention=True, score_modifier=lisa)
    for p in attention.parameters():
        torch.nn.init.normal_(p, std=0.5)
    return attention.double().eval()


def padded_batch(lengths, left_pad, seed=1):
    """x (T, B, C), key padding mask, parents (first piece of the parent, in padded columns) and the piece mask
    (EOS is the last real column of each row and is no piece)."""
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    x = torch.randn(width, len(lengths), EMBED_DIM, generator=generator, dtype=torch.float64)
    mask = torch.ones(len(lengths), width, dtype=torch.bool)
    parents = torch.arange(width).repeat(len(lengths), 1)
    is_piece = torch.zeros(len(lengths), width, dtype=torch.bool)
    for b, n in enumerate(lengths):
        offset = width - n if left_pad else 0
        mask[b, offset:offset + n] = False
        is_piece[b, offset:offset + n - 1] = True
        parents[b, offset:offset + n - 1] = offset + torch.randint(0, n - 1, (n - 1,), generator=generator)
    return x, mask, parents, is_piece


def naive_lisa(lisa, x, mask, parents, is_piece):
    """Biaffine scores, attention row and parent loss of the LISA head, one sentence and position at a time."""
    width, batch, _ = x.shape
    scores = torch.zeros(batch, width, width, dtype=x.dtype)
    rows = torch.zeros(batch, width, width, dtype=x.dtype)
    loss = 0.0
    for b in range(batch):
        q = torch.relu(lisa.query(x[:, b]))
        k = torch.relu(lisa.key(x[:, b]))
        for t in range(width):
            for j in range(width):
                bilinear = sum(q[t, a] * lisa.bilinear[a, c] * k[j, c] for a in range(q.size(1))
                               for c in range(k.size(1)))
                scores[b, t, j] = bilinear + sum(lisa.key_prior[c] * k[j, c] for c in range(k.size(1)))
            allowed = [j for j in range(width) if not mask[b, j]]
            normaliser = sum(math.exp(float(scores[b, t, j])) for j in allowed)
            for j in allowed:
                rows[b, t, j] = math.exp(float(scores[b, t, j])) / normaliser
            if is_piece[b, t]:
                loss -= math.log(float(rows[b, t, parents[b, t]]))
    return scores, rows, loss


@pytest.mark.parametrize("left_pad", [True, False])
def test_lisa_head_matches_naive_biaffine(left_pad, device):
    attention = lisa_attention(head=1)
    x, mask, parents, is_piece = padded_batch([5, 7, 3], left_pad)
    syntax = {"src_parent_first": parents, "src_word_ids": torch.where(is_piece, 0, -1)}
    module, x_on, syntax_on, mask_on = on(device, (attention, x, syntax, mask))
    modification = module.score_modifier(x_on, syntax_on, mask_on)
    _, weights = module(x_on, x_on, x_on, key_padding_mask=mask_on, need_head_weights=True,
                        score_modification=modification)
    matrix, weights = modification.matrix.detach().cpu(), weights.cpu()
    plain = SyntaxBiasedSelfAttention(EMBED_DIM, HEADS, dropout=0.0, self_attention=True).double().eval()
    plain.load_state_dict({k: v for k, v in attention.state_dict().items() if "score_modifier" not in k})
    plain.skip_embed_dim_check = True  # fairseq's own path, which returns per-head weights as (H, B, T, S)
    _, plain_weights = on(device, plain)(x_on, x_on, x_on, key_padding_mask=mask_on, need_head_weights=True)
    plain_weights = plain_weights.cpu()
    with torch.no_grad():
        scores, rows, loss = naive_lisa(attention.score_modifier, x, mask, parents, is_piece)
    real = ~mask
    torch.testing.assert_close(matrix[:, 0], scores.detach(), rtol=1e-7, atol=1e-9)
    lisa_rows = weights[1]  # (B, T, T) of head 1
    torch.testing.assert_close(lisa_rows[real], rows[real], rtol=1e-5, atol=1e-6)
    for head in (0, 2, 3):  # the other heads are plain attention (fairseq's softmax is float32 whatever the dtype)
        torch.testing.assert_close(weights[head][real], plain_weights[head][real].double(), rtol=1e-5, atol=1e-6)
    assert float(modification.auxiliary_losses["lisa_parent"].detach()) == pytest.approx(loss, rel=1e-5)


def test_parent_loss_is_zero_exactly_when_all_mass_is_on_the_parents(device):
    _, mask, parents, is_piece = on(device, padded_batch([4, 6], left_pad=True, seed=3))
    on_parents = torch.full((2, 6, 6), float("-inf"), device=device)
    on_parents.scatter_(-1, parents.unsqueeze(-1), 0.0)
    on_parents[~is_piece] = 0.0  # rows of EOS and padding: anything, they are not supervised
    assert float(parent_loss(on_parents, parents, is_piece, mask)) == 0.0
    mostly = on_parents.clone()
    first_piece_row = is_piece.nonzero()[0].tolist()
    mostly[first_piece_row[0], first_piece_row[1]] = torch.where(
        torch.isinf(mostly[first_piece_row[0], first_piece_row[1]]), -5.0, 0.0)
    assert float(parent_loss(mostly, parents, is_piece, mask)) > 0.0
    # padded keys take no mass: huge scores there change nothing
    loud_padding = on_parents.masked_fill(mask[:, None, :], 1e4)
    assert float(parent_loss(loud_padding, parents, is_piece, mask)) == 0.0


def test_label_embedding_replaces_the_last_dimensions_only(data_bin, device):  # noqa: F811
    _, destdir = data_bin
    task, cfg = load_task(destdir, "--arch", "transformer_sh_tiny")
    task.load_dataset("valid")
    model = task.build_model(cfg.model).eval().to(device)
    vanilla_task, vanilla_cfg = load_task(destdir, "--arch", "transformer_tiny_vanilla")
    vanilla = vanilla_task.build_model(vanilla_cfg.model)
    label_count = len(task.label_dicts["en"])
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert model.encoder.embed_tokens.embedding_dim == vanilla.encoder.embed_tokens.embedding_dim == 64
    assert count(model) == count(vanilla) + label_count * 10  # the label table is all it adds
    dataset = task.dataset("valid")
    batch = dataset.collater([dataset[i] for i in range(3)])
    net_input = on(device, {k: v for k, v in batch["net_input"].items() if k != "prev_output_tokens"})
    encoder = model.encoder
    with torch.no_grad():
        before = encoder.embedding_mechanism(encoder.embed_tokens(net_input["src_tokens"]), net_input, None)
        changed = dict(net_input, src_labels=net_input["src_labels"].clone())
        piece = (changed["src_labels"][1] > 0).nonzero()[0, 0]
        changed["src_labels"][1, piece] = changed["src_labels"][1, piece] % (label_count - 1) + 1  # another label
        after = encoder.embedding_mechanism(encoder.embed_tokens(net_input["src_tokens"]), changed, None)
        plain = encoder.embed_tokens(net_input["src_tokens"])
    torch.testing.assert_close(before[..., :-10], plain[..., :-10])  # the token part is the token embedding
    changed_at = (after != before).any(-1)
    assert changed_at.nonzero().tolist() == [[1, int(piece)]]  # only where the label changed
    assert torch.equal(after[1, piece, :-10], before[1, piece, :-10])


def test_label_and_token_dimensions_start_at_the_same_scale(data_bin):  # noqa: F811
    """The label vectors stand in for token dimensions before fairseq's sqrt(d) scaling: at initialisation their
    spread matches the token embeddings' (a standard-deviation-1 label table once made them sqrt(d) = 8 times
    larger at d = 64, most of the input's energy), and the padding label (EOS, padding) is zero."""
    _, destdir = data_bin
    task, cfg = load_task(destdir, "--arch", "transformer_sh_tiny")
    torch.manual_seed(0)
    model = task.build_model(cfg.model)
    labels = model.encoder.embedding_mechanism.embedding.weight.detach()
    tokens = model.encoder.embed_tokens.weight.detach()[task.source_dictionary.nspecial:]
    ratio = labels[1:].std().item() / tokens.std().item()
    assert 0.7 < ratio < 1.4, ratio
    assert torch.equal(labels[0], torch.zeros_like(labels[0]))


def train(destdir, save_dir, arch, *extra):
    result = run_cli("fairseq-train", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en",
                     "-t", "de", "--arch", arch, "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500",
                     "--max-update", "4", "--criterion", "syntax_label_smoothed_cross_entropy", "--label-smoothing",
                     "0.1", "--share-all-embeddings", "--save-dir", save_dir, "--cpu", "--no-progress-bar",
                     "--log-interval", "1", "--seed", "3", "--num-workers", "0", *extra)
    return result.stdout + result.stderr


def generate(destdir, checkpoint):
    generated = run_cli("fairseq-generate", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s",
                        "en", "-t", "de", "--path", checkpoint, "--gen-subset", "valid", "--beam", "3",
                        "--batch-size", "16", "--max-len-a", "0", "--max-len-b", "8", "--cpu", "--num-workers", "0")
    return sorted(line for line in generated.stdout.splitlines() if line.startswith("H-"))


def test_lisa_trains_with_its_parent_loss_and_translates_unparsed_text(data_bin, tmp_path):  # noqa: F811
    raw, destdir = data_bin
    output = train(destdir, tmp_path / "lisa", "transformer_lisa_tiny")
    parent_losses = [float(v) for v in re.findall(r"train_inner .*?aux_lisa_parent=([0-9.]+)", output)]
    assert len(parent_losses) == 4 and all(v > 0 for v in parent_losses)
    parsed = generate(destdir, tmp_path / "lisa" / "checkpoint_last.pt")
    # the same lines with the same sentencepiece model, never parsed: no syntax.json, no channels
    unparsed = tmp_path / "unparsed-bin"
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                     "--spm-model", str(destdir / "spm.model"), "--destdir", str(unparsed)])
    assert not list(unparsed.glob("*.heads.bin"))
    assert generate(unparsed, tmp_path / "lisa" / "checkpoint_last.pt") == parsed and len(parsed) == 40


def test_label_embedding_trains_and_generates(data_bin, tmp_path):  # noqa: F811
    _, destdir = data_bin
    output = train(destdir, tmp_path / "sh", "transformer_sh_tiny")
    assert len(re.findall(r"train_inner .*? loss=([0-9.]+)", output)) == 4
    assert len(generate(destdir, tmp_path / "sh" / "checkpoint_last.pt")) == 40


def test_criterion_weights_are_each_parts_declared_weights(data_bin):  # noqa: F811
    """The weight of an auxiliary loss comes from the part that declares it, under the user's option (the criterion
    reads `auxiliary_loss_weights` off the model's output); the fairseq decoder declares none."""
    raw, destdir = data_bin
    task, cfg = load_task(destdir, "--arch", "transformer_lisa_tiny", "--lisa-loss-weight", "0.25")
    model = task.build_model(cfg.model)
    assert model.encoder.auxiliary_loss_weights == {"lisa_parent": 0.25}
    assert model.auxiliary_loss_weights == {"lisa_parent": 0.25}
    assert task.auxiliary_losses == ("lisa_parent",)
    task, cfg = load_task(destdir, "--arch", "transformer_lisa_tiny")
    assert task.build_model(cfg.model).auxiliary_loss_weights == {"lisa_parent": 1.0}  # LisaOptions' default
