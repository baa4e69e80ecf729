"""The comparison run: vanilla and syntax methods on Multi30k at equal training, over seeds, in one results folder.

  python examples/multi30k/compare.py --profile cpu-quick --out work/compare-quick --jobs 2
  python examples/multi30k/compare.py --profile cpu --out work/compare --systems vanilla,pascal --seeds 1,2,3
  python examples/multi30k/compare.py --profile ldd-multi30k --out work/ldd --device cuda --jobs 4
  python examples/multi30k/compare.py --profile gpu --out work/campaign-gpu --device cuda --jobs 8   # to convergence

A profile (examples/multi30k/profiles/NAME.toml, see profiles.py) says what to compare: data-bins (parsers,
vocabulary), model size, the training recipe's changes, the budget (updates, epochs or wall time), how often to
validate, which checkpoint to translate (best by valid BLEU, fairseq's --eval-bleu on decoded text, or last),
systems and seeds. Command-line options override the profile's systems, seeds, budget and validation interval.

For each data-bin: every system (examples/multi30k/systems.py) trains once per seed, translates test2016 (beam of
the profile) with its kept checkpoint and is scored by fairseq-syntax-evaluate against vanilla, per seed (BLEU,
chrF++, TER, RIBES, length buckets, paired bootstrap, plots). The table gives each system's mean +- standard
deviation over seeds beside each run's bootstrap interval; the significance mark says which test made it
(Welch's t-test over seeds with 2+ seeds, else the run's paired bootstrap). The learning curves (valid BLEU and
valid loss against updates, one line per system) go to results/<data-bin>/curves.{bleu,loss}.png. A system
with target-side transitions (Linearized) trains on a data-bin of its own whose target side is parsed with the
data-bin's target_transitions_parser (the target language's parser); its test translation also writes the
generated trees (--trees-out), which that parser parses again over the same words (fairseq-syntax-evaluate
parse-trees), so the evaluator reports their UAS/LAS beside its BLEU (its hypotheses are scored on plain text
against the shared references like every other system's). A graph decoder (Dyn-STGCD) writes its trees the same
way, and its run record also gets them read with the test references forced (--score-reference), against the
parser's parse of the references: Li et al.'s consistency measure (appendix B.3). With challenge_per_set > 0,
Choshen & Abend's challenge sets of the data-bin's direction are translated by the runs of the profile's first seed
(whichever --seeds an invocation gives: `--seeds 2` alone translates none), each right after its test, and scored
per set.

--device cuda runs everything on the GPU (--fp16 / --bf16 for half precision training and generation), --jobs N
trains and translates N systems at once (on CPU each gets cores/N threads; two 1-thread trainings on 2 cores do
more than one 2-thread training). Resumable: a parser, data-bin, trained system or translation that exists is
not made again. Every invocation's wall time is added up in OUT/timing.json, every run's in OUT/runs.json.
"""
import argparse
import fcntl
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import Dict, List, Optional, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))  # its neighbours systems.py, training.py and profiles.py, also when imported
from fairseq_syntax.data.transitions.channels import target_word_share  # noqa: E402
from fairseq_syntax.evaluation.challenge import (  # noqa: E402
    distance_text, read_challenge_outputs, score_challenge_hypotheses, set_order,
)
from fairseq_syntax.evaluation.learning_curves import (  # noqa: E402
    best_validation, plot_learning_curves, read_validations,
)
from fairseq_syntax.evaluation.scoring import evaluate_systems  # noqa: E402
from fairseq_syntax.evaluation.seeds import mean_sd, mean_sd_text, summarize_seeds  # noqa: E402
from fairseq_syntax.evaluation.system_outputs import (  # noqa: E402
    PieceDecoder, data_bin_files, read_linemap, read_system, read_text_lines,
)
from fairseq_syntax.evaluation.trees import tree_scores  # noqa: E402
from fairseq_syntax.paths import data_root  # noqa: E402
from profiles import DataBin, Profile, ProfileError, load_profile, option_list, with_options  # noqa: E402
import results_store  # noqa: E402
from systems import (  # noqa: E402  (one list for bench too)
    ATTENTION_LAYER, BASELINE, EQUAL_PAIRS, EQUAL_POSITIONS, MULTI30K_SYSTEMS as SYSTEMS, OWN_DATA_BINS,
    own_data_bin_command, own_data_bin_name, sampled_prefixes,
)
from training import TRAIN_FLAGS  # noqa: E402  (the recipe of demo.sh and bench/bench.py too)

UD = data_root() / "ud"
# named SuPar parsers ("supar:@NAME" in a profile): trained here from UD, or the copy `make parsers` made
PARSERS = {
    "en_ewt": (["--train", UD / "UD_English-EWT/en_ewt-ud-train.conllu.gz",
                "--dev", UD / "UD_English-EWT/en_ewt-ud-dev.conllu.gz",
                "--test", UD / "UD_English-EWT/en_ewt-ud-test.conllu.gz"], 8),
    "de_gsd_pud": (["--train", UD / "UD_German-GSD/de_gsd-ud-dev.conllu.gz",
                    "--train", UD / "UD_German-PUD/de_pud-ud-test.conllu.gz",
                    "--dev", UD / "UD_German-GSD/de_gsd-ud-test.conllu.gz"], 20),
}
LOCK = threading.Lock()


@contextmanager
def locked(lock_path: Path):
    """An exclusive lock of `lock_path` (made when missing), between the threads of an invocation (--jobs: flock
    locks belong to each open of the file) and between invocations."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def lock_of(path: Path) -> Path:
    """The lock file guarding the making of `path` (a file or folder of OUT): .NAME.lock beside it."""
    return path.parent / f".{path.name}.lock"


def update_json(path: Path, update, default):
    """Read-modify-write of a JSON file of OUT that several compare.py invocations may share (a campaign runs one
    chain per core on one OUT): under an exclusive lock of PATH.lock, the file as it is now (`default()` when
    missing) goes through `update`, and is replaced whole through a temporary file. Returns what was written."""
    with LOCK, locked(lock_of(path)):
        value = update(json.loads(path.read_text()) if path.exists() else default())
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as temporary:
            temporary.write(json.dumps(value, indent=2) + "\n")
        results_store.replace_with(temporary.name, path)
        return value


def log(message):
    with LOCK:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(args, log_file=None, threads: Optional[int] = None, append: bool = False):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a" if append else "w") if log_file else open(os.devnull, "w") as sink:
        result = subprocess.run([str(a) for a in args], stdout=sink, stderr=subprocess.STDOUT, env=env)
    if result.returncode != 0:
        message = f"failed (exit {result.returncode}): {' '.join(map(str, args[:3]))} ... (log: {log_file})"
        # logged now: with --jobs the error reaches the main thread only when the runs before it have ended, and
        # the queued runs go on meanwhile (a killed training was once silent for hours)
        log(message)
        raise SystemExit(message)


class Settings:
    """What the command line adds to a profile: where, on which device, how many at once."""

    def __init__(self, out: Path, device: str = "cpu", precision: Optional[str] = None, jobs: int = 1,
                 raw: Optional[Path] = None, threads: Optional[int] = None, results: Optional[Path] = None,
                 challenge_shards: int = 8):
        self.out, self.device, self.precision, self.jobs = out, device, precision, max(1, jobs)
        # the challenge sets are translated in shards, each written whole, so that a translation of hours (BiTran's
        # here, re-encoding the prefix at every step: ~2 h) goes on from its last finished shard when interrupted
        self.challenge_shards = max(1, challenge_shards)
        self.raw = raw or out / "raw"  # {train,valid,test}.{src,tgt}: Multi30k (prepare_raw.py) unless given
        self.threads = threads or max(1, (os.cpu_count() or 1) // self.jobs)
        # parsers and data-bins are made before the trainings, one at a time: every core, unless --threads was given
        # (a run in the background of other work; a 2-thread parser beside a 2-thread training on 2 cores slowed
        # both ~10x, docs/run-log.md, 2026-11-26)
        self.preparation_threads = threads
        self.results = results  # where each finished run's record goes (results_store.py); None: nowhere


def train_command(profile: Profile, settings: Settings, destdir: Path, src: str, tgt: str, system: str,
                  seed: int, save_dir: Path, budget: Optional[Dict[str, float]] = None) -> List:
    """fairseq-train for one system and seed: the shared recipe with the profile's changes, the budget (the
    profile's unless given: an EQUAL_PAIRS or EQUAL_POSITIONS system's, Comparison.budget), the valid BLEU rule
    and the device."""
    recipe = with_options(TRAIN_FLAGS, profile.training_options)
    kind, value = next(iter((budget or profile.budget).items()))
    changes = {"seed": seed, "log-interval": 100,
               "max-update": int(value) if kind == "max_update" else False,
               "max-epoch": int(value) if kind == "max_epoch" else 10_000,
               "stop-time-hours": value / 60 if kind == "minutes" else False,
               # valid BLEU on decoded text (the task decodes with the data-bin's segmenter), the best kept
               "eval-bleu": True, "eval-bleu-args": json.dumps(valid_bleu_args(profile, system, destdir, src, tgt)),
               "best-checkpoint-metric": "bleu", "maximize-best-checkpoint-metric": True,
               # stop once the valid BLEU has not risen for N validations (fairseq counts them in the process, so
               # a resumed run counts afresh: it can stop later than an uninterrupted one, never earlier)
               "patience": profile.patience or False}
    if profile.validate_every > 0:  # every N updates instead of every epoch; keep one interval checkpoint
        changes.update({"validate-interval-updates": profile.validate_every,
                        "save-interval-updates": profile.validate_every, "keep-interval-updates": 1,
                        "validate-interval": 100_000})
    if settings.device != "cpu":
        changes["cpu"] = False
    if settings.precision:
        changes[settings.precision] = True
    # fairseq-train takes --bf16 for TPU training; fairseq-syntax-train is fairseq-train with bf16 on any device
    trainer = "fairseq-syntax-train" if settings.precision == "bf16" else "fairseq-train"
    return [BIN / trainer, destdir, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
            "-s", src, "-t", tgt, *SYSTEMS[system], *option_list(profile.model_options),
            *with_options(recipe, changes), "--save-dir", save_dir]


def fitting_length_rate(source_sizes, target_sizes, rate: float, offset: float) -> float:
    """The smallest max_len_a, in tenths and at least `rate`, under which fairseq's length limit (max_len_a x
    source length + max_len_b tokens before EOS; both sizes count EOS) cuts none of the given targets."""
    source = np.maximum(np.asarray(source_sizes, dtype=np.float64) - 1, 1)
    target = np.asarray(target_sizes, dtype=np.float64) - 1
    needed = float(np.max((target - offset) / source)) if len(source) else rate
    return max(rate, math.ceil(needed * 10 - 1e-9) / 10)


def valid_bleu_args(profile: Profile, system: str, destdir: Path, src: str, tgt: str) -> Dict[str, object]:
    """The profile's valid-BLEU search; for a system whose targets are transition sequences (pieces, arcs and
    marks: ~2x the pieces of the same sentence) a max_len_a that cuts no valid reference (fitting_length_rate on
    the data-bin's valid split), where the profile's, set for pieces, forced arcs and EOS early in 46 of 200
    references (de->en) and biased the valid curves and the best checkpoint."""
    args = dict(profile.valid_bleu_args)
    own = OWN_DATA_BINS.get(system)
    if own is None or "--target-transitions" not in own.options or "max_len_a" not in args:
        return args
    from fairseq.data import data_utils

    prefixes = [destdir / f"valid.{src}-{tgt}.{lang}" for lang in (src, tgt)]
    if not all(prefix.with_suffix(prefix.suffix + ".idx").exists() for prefix in prefixes):
        return args  # (--dry-run, before the data-bin is made: the profile's)
    # the datasets stay referenced while their sizes are read: the sizes are a view of the index file's memory
    # map, which fairseq closes when the dataset is collected
    datasets = [data_utils.load_indexed_dataset(str(prefix), None) for prefix in prefixes]
    sizes = [np.array(dataset.sizes) for dataset in datasets]
    del datasets
    args["max_len_a"] = fitting_length_rate(*sizes, float(args["max_len_a"]), float(args.get("max_len_b", 0)))
    return args


def generate_command(profile: Profile, settings: Settings, destdir: Path, src: str, tgt: str, checkpoint: Path,
                     split: str, trees_out: Optional[Path] = None, score_reference: bool = False) -> List:
    """fairseq-generate of one split; `trees_out`: also write the generated trees there (--trees-out, a data-bin
    whose target side has transitions or a graph decoder); `score_reference`: the references forced instead of
    searched (--score-reference: their trees as the model reads them, one hypothesis each)."""
    device = ["--cpu"] if settings.device == "cpu" else []
    precision = ["--fp16"] if settings.precision == "fp16" else []  # fairseq-generate has no bf16: fp32 there
    trees = ["--trees-out", trees_out] if trees_out else []
    search = ["--score-reference", "--beam", 1] if score_reference else ["--beam", profile.beam]
    return [BIN / "fairseq-generate", destdir, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
            "-s", src, "-t", tgt, "--path", checkpoint, "--gen-subset", split, *search,
            "--batch-size", "64", "--num-workers", "0", *device, *precision, *trees]


def epoch_batches(command: List):
    """The train dataset and the batches (arrays of its indices) fairseq-train makes of one epoch of the train
    split under `command` (a train_command), built as its trainer builds them: the task's dataset, the model's and
    task's max positions, max tokens and sentences, the batch-size multiple. (Built in this process: the model is
    built on the CPU, nothing is trained.)"""
    from fairseq import options, tasks, utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in command[1:]])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    task.load_dataset(cfg.dataset.train_subset, combine=False, epoch=1)
    model = task.build_model(cfg.model)
    dataset = task.dataset(cfg.dataset.train_subset)
    iterator = task.get_batch_iterator(
        dataset=dataset, max_tokens=cfg.dataset.max_tokens, max_sentences=cfg.dataset.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions(),
                                                  cfg.dataset.max_tokens),
        ignore_invalid_inputs=True, required_batch_size_multiple=cfg.dataset.required_batch_size_multiple,
        seed=cfg.common.seed, num_shards=1, shard_id=0, num_workers=0, epoch=1)
    return dataset, iterator.frozen_batches


def batches_per_epoch(command: List) -> int:
    """The batches fairseq-train makes of one epoch of the train split under `command` (epoch_batches)."""
    return len(epoch_batches(command)[1])


def target_positions_per_epoch(command: List, prefixes: int) -> Dict[str, int]:
    """The target positions one epoch under `command` trains: "every" (a loss at each of a target's n tokens, its
    EOS included, as a causal decoder, Linearized or exact re-encoding have) and "sampled" (min(k, n) of them, the
    k = `prefixes` sampled prefixes per sentence of --bitran-prefixes k), over the sentences of its batches."""
    dataset, batches = epoch_batches(command)
    lengths = np.concatenate([dataset.tgt_sizes[batch] for batch in batches]).astype(np.int64)
    return {"every": int(lengths.sum()), "sampled": int(np.minimum(lengths, prefixes).sum())}


def parse_trees_command(parser_spec: str, lang: str, generated: Path, out: Path) -> List:
    """The parse of the generated trees' words by the target language's parser: the reference of their UAS/LAS."""
    return [BIN / "fairseq-syntax-evaluate", "parse-trees", "--parser", parser_spec, "--lang", lang,
            "--generated-trees", generated, "--out", out]


def generates_trees(system: str) -> bool:
    """Whether `system` generates target trees (a transition sequence, or Dyn-STGCD's graph; its own data-bin has
    the target side parsed)."""
    own = OWN_DATA_BINS.get(system)
    return bool(own and own.target_parser and own.writes_trees)


def reads_trees_on_references(system: str) -> bool:
    """Whether `system`'s trees are also read with the test references forced (Dyn-STGCD's graph: the paper's
    appendix B.3 measure, UAS against the parser's parse of the references)."""
    own = OWN_DATA_BINS.get(system)
    return generates_trees(system) and bool(own.trees_on_references)


def check_target_parsers(profile: Profile, systems: List[str]) -> None:
    """Every data-bin has a target-language parser for the systems that need one (SystemExit naming the profile
    file and the data-bin otherwise)."""
    for data_bin in profile.bins:
        for system in systems:
            own = OWN_DATA_BINS.get(system)
            if own is not None and own.target_parser and not data_bin.transitions_parser:
                raise SystemExit(f"{profile.path}: [[data.bins]] {data_bin.name!r}: system {system} parses the target "
                                 f"side ({data_bin.tgt}); give the data-bin target_transitions_parser = "
                                 f"\"spacy:MODEL\" or \"supar:PATH|@NAME\" (a parser of {data_bin.tgt})")


def summarize_trees(per_seed: Dict[int, dict], systems: List[str]) -> Dict[str, dict]:
    """UAS/LAS of the generated trees per system that has them: {"seeds", "uas"/"las": {"values", "mean", "sd"},
    "words": per seed}."""
    summary = {}
    for system in systems:
        scores = {seed: result["systems"][system]["trees"] for seed, result in sorted(per_seed.items())
                  if result["systems"].get(system, {}).get("trees")}
        if not scores:
            continue
        entry = {"seeds": list(scores), "words": [t["words"] for t in scores.values()]}
        for metric in ("uas", "las"):
            entry[metric] = mean_sd([t[metric] for t in scores.values()])
        if all("argmax_uas" in t for t in scores.values()):  # a graph decoder's raw heads, before the tree
            entry["argmax_uas"] = mean_sd([t["argmax_uas"] for t in scores.values()])
        summary[system] = entry
    return summary


def preprocess_command(profile: Profile, raw: Path, data_bin: DataBin, source_parser: str,
                       target_parser: Optional[str], destdir: Path) -> List:
    target = ["--target-parser", target_parser] if target_parser else []
    return [BIN / "fairseq-syntax-preprocess", "-s", data_bin.src, "-t", data_bin.tgt, "--trainpref", raw / "train",
            "--validpref", raw / "valid", "--testpref", raw / "test", "--source-parser", source_parser, *target,
            *profile.vocabulary_options(), *data_bin.preprocess, "--destdir", destdir, "--workers", "2"]


class Comparison:
    def __init__(self, profile: Profile, settings: Settings):
        self.profile, self.settings, self.out = profile, settings, settings.out
        self.runs_path = self.out / "runs.json"
        self.runs = json.loads(self.runs_path.read_text()) if self.runs_path.exists() else {}
        self.own_runs: Dict[str, dict] = {}  # the facts this invocation recorded (record_run)
        # (data-bin, system) -> (record key, budget) of EQUAL_PAIRS (equal_pairs_budget) and EQUAL_POSITIONS
        # (equal_positions_budget) systems
        self.own_budgets: Dict[tuple, tuple] = {}

    # ---- parsers and data-bins -----------------------------------------------------------------------------

    def parser_spec(self, spec: Optional[str]) -> Optional[str]:
        """supar:@NAME -> supar:PATH of that parser (parsers/NAME.supar of `make parsers`, else trained here)."""
        if not spec or not spec.startswith("supar:@"):
            return spec
        name = spec[len("supar:@"):]
        if name not in PARSERS:
            raise SystemExit(f"{self.profile.path}: no parser named {name} (known: {', '.join(PARSERS)})")
        shipped = REPO / "parsers" / f"{name}.supar"
        return f"supar:{shipped if shipped.exists() else self.train_parser(name)}"

    def train_parser(self, name: str) -> Path:
        model = self.out / "parsers" / f"{name}.supar"
        # locked: the invocations of a campaign that share OUT make each parser once, the others wait for it
        with locked(lock_of(model)):
            if not model.exists():
                args, epochs = PARSERS[name]
                log(f"training the {name} parser ({epochs} epochs)")
                run([BIN / "python", "-m", "fairseq_syntax_preprocess.train_parser", *args, "--output", model,
                     "--config", "small", "--epochs", epochs], self.out / "parsers" / f"{name}.log",
                    self.settings.preparation_threads)
        return model

    def data_bin(self, data_bin: DataBin) -> Path:
        destdir = self.out / "data" / data_bin.name
        command = preprocess_command(self.profile, self.settings.raw, data_bin,
                                     self.parser_spec(data_bin.source_parser),
                                     self.parser_spec(data_bin.target_parser), destdir)
        with locked(lock_of(destdir)):  # made once by the invocations sharing OUT
            self.require_same_command(destdir, command)
            if not (destdir / "syntax.json").exists():
                log(f"preprocessing {data_bin.name}")
                run(command, self.out / "data" / f"{data_bin.name}.log", self.settings.preparation_threads)
        return destdir

    @staticmethod
    def require_same_command(destdir: Path, command: List) -> None:
        """A data-bin is reused only if the same command made it (another profile's vocabulary would not do)."""
        record = destdir.parent / f"{destdir.name}.command"
        text = shlex.join(str(a) for a in command)
        if record.exists() and record.read_text().strip() != text:
            raise SystemExit(f"{destdir} was made by another command ({record}); use another --out or data-bin name")
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(text + "\n")

    def system_data_bins(self, data_bin: DataBin, shared: Path, systems: List[str]) -> Dict[str, Path]:
        """The data-bin each system trains and translates on: the shared one when it holds what the system
        needs (e.g. LDD's distributions), else its own made from the same lines (the multi-task baseline; LDD on a
        spaCy data-bin), whose test split must hold the same lines so that one set of references scores all."""
        bins = {}
        for system in systems:
            own = OWN_DATA_BINS.get(system)
            # (a system that reads the target parse always has its own: the shared data-bin parses the source only)
            if own is None or (set(own.options) <= set(data_bin.preprocess) and not own.target_parser):
                bins[system] = shared
                continue
            if self.profile.vocabulary["kind"] != "sentencepiece":
                raise SystemExit(f"{system} needs a data-bin of its own ({' '.join(own.options)}), which is made "
                                 f"with the shared sentencepiece model: not in a word-vocabulary profile")
            destdir = self.out / "data" / f"{data_bin.name}.{own_data_bin_name(system)}"
            command = self.own_data_bin_args(data_bin, shared, system, destdir)
            with locked(lock_of(destdir)):
                if own.target_parser:  # made with the target language's parser: reused only if made with it
                    self.require_same_command(destdir, [BIN / "fairseq-syntax-preprocess", *command])
                if not (destdir / "syntax.json").exists():
                    log(f"preprocessing {data_bin.name} for {system}")
                    run([BIN / "fairseq-syntax-preprocess", *command], self.out / "data" / f"{destdir.name}.log",
                        self.settings.preparation_threads)
            require_same_lines(destdir, shared, "test")
            bins[system] = destdir
        return bins

    def own_data_bin_args(self, data_bin: DataBin, shared: Path, system: str, destdir: Path) -> List:
        """The fairseq-syntax-preprocess arguments of `system`'s own data-bin of `data_bin` (systems.py)."""
        own = OWN_DATA_BINS[system]
        source_parser = self.parser_spec(data_bin.source_parser)
        supar = None
        if own.supar_source and not source_parser.startswith("supar:"):
            if data_bin.src != "en":
                raise SystemExit(f"{system} needs a SuPar parser of {data_bin.src}: give {data_bin.name} one")
            supar = self.parser_spec("supar:@en_ewt")
        target = self.transitions_parser(data_bin) if own.target_parser else None
        return own_data_bin_command(system, shared, destdir, self.settings.raw, data_bin.src, data_bin.tgt,
                                    source_parser, supar_parser=supar, target_parser=target)

    def transitions_parser(self, data_bin: DataBin) -> str:
        """The resolved spec of the target language's parser of `data_bin` (target_transitions_parser)."""
        check_target_parsers(replace(self.profile, bins=[data_bin]),
                             [s for s, own in OWN_DATA_BINS.items() if own.target_parser])
        return self.parser_spec(data_bin.transitions_parser)

    # ---- training and translation --------------------------------------------------------------------------

    def tree_files(self, bin_name: str, system: str, seed: int, on_references: bool = False):
        """(generated trees, their parse) of a system's test translation, or (`on_references`) of its forced test
        references."""
        work = self.run_dir(bin_name, system, seed)
        which = "forced-references.test" if on_references else "test"
        return work / f"trees.{which}.conllu", work / f"trees.{which}.parsed.conllu"

    def run_dir(self, bin_name: str, system: str, seed: int) -> Path:
        return self.out / "systems" / bin_name / system / f"seed{seed}"

    def checkpoint(self, bin_name: str, system: str, seed: int) -> Path:
        name = "checkpoint_best.pt" if self.profile.checkpoint == "best" else "checkpoint_last.pt"
        return self.run_dir(bin_name, system, seed) / "checkpoints" / name

    def train_and_translate(self, data_bin: DataBin, destdir: Path, system: str, seed: int,
                            shared: Optional[Path] = None) -> Path:
        work = self.run_dir(data_bin.name, system, seed)
        work.mkdir(parents=True, exist_ok=True)
        key = f"{data_bin.name}/{system}/seed{seed}"
        if not (work / "trained").exists():
            # An interrupted run goes on from its last checkpoint (fairseq-train restores checkpoint_last.pt with
            # its meters); its log is appended to, so the curves keep the validations made before the interruption.
            resumed = (work / "checkpoints" / "checkpoint_last.pt").exists()
            budget = self.budget_text(data_bin.name, system)
            log(f"{'resuming' if resumed else 'training'} {key} ({budget})")
            started = time.time()
            run(train_command(self.profile, self.settings, destdir, data_bin.src, data_bin.tgt, system, seed,
                              work / "checkpoints", self.budget(data_bin.name, system)), work / "train.log",
                self.settings.threads, append=resumed)
            # after a resumption the seconds are those of the last part only, and the record says so
            seconds = round(time.time() - started, 1)
            self.record_run(key, train_seconds=seconds, **({"resumed": True} if resumed else {}))
            (work / "trained").write_text("")
        output = work / "generate.test.txt"
        trees, parsed = self.tree_files(data_bin.name, system, seed) if generates_trees(system) else (None, None)
        if not output.exists() or (trees and not trees.exists()):
            started = time.time()
            if parsed:
                parsed.unlink(missing_ok=True)  # the parse of the trees this translation replaces
            self.translate(destdir, data_bin, self.checkpoint(data_bin.name, system, seed), "test", output, trees)
            self.record_run(key, test_translate_seconds=round(time.time() - started, 1))
        if parsed and not parsed.exists():
            log(f"parsing the trees of {key}")
            started = time.time()
            run(parse_trees_command(self.transitions_parser(data_bin), data_bin.tgt, trees, parsed),
                work / "parse-trees.log", self.settings.threads)
            self.record_run(key, parse_trees_seconds=round(time.time() - started, 1))
        if reads_trees_on_references(system):
            self.trees_on_references(data_bin, destdir, system, seed)
        self.write_record(data_bin, destdir, shared or destdir, system, seed, output)
        if challenge_seed(self.profile, [seed]) is not None:
            # right after the run's test, so that its challenge record exists once the run is done, whatever the
            # invocation's other runs (a session can end before they do)
            self.challenge_run(data_bin, destdir, shared or destdir, system, seed)
        return output

    def trees_on_references(self, data_bin: DataBin, destdir: Path, system: str, seed: int) -> Tuple[Path, Path]:
        """The run's trees with the test references forced (fairseq-generate --score-reference --trees-out) and the
        target parser's parse of them, each made once."""
        key = f"{data_bin.name}/{system}/seed{seed}"
        trees, parsed = self.tree_files(data_bin.name, system, seed, on_references=True)
        work = self.run_dir(data_bin.name, system, seed)
        if not trees.exists():
            log(f"reading the trees of {key} on the forced test references")
            parsed.unlink(missing_ok=True)
            started = time.time()
            partial = trees.with_name(trees.name + ".tmp")
            run(generate_command(self.profile, self.settings, destdir, data_bin.src, data_bin.tgt,
                                 self.checkpoint(data_bin.name, system, seed), "test", partial, score_reference=True),
                work / "generate.forced-references.test.txt", self.settings.threads)
            os.replace(partial, trees)
            self.record_run(key, forced_trees_seconds=round(time.time() - started, 1))
        if not parsed.exists():
            started = time.time()
            partial = parsed.with_name(parsed.name + ".tmp")
            run(parse_trees_command(self.transitions_parser(data_bin), data_bin.tgt, trees, partial),
                work / "parse-trees.forced-references.log", self.settings.threads)
            os.replace(partial, parsed)
            self.record_run(key, parse_forced_trees_seconds=round(time.time() - started, 1))
        return trees, parsed

    def challenge_run(self, data_bin: DataBin, destdir: Path, shared: Path, system: str, seed: int) -> Path:
        """The run's translations of the challenge sets (the split added to its data-bin once, the same pairs as the
        shared data-bin's), and its challenge record; made once."""
        per_set = self.profile.challenge_per_set
        direction = f"{data_bin.src}-{data_bin.tgt}"
        manifest = challenge_split(self.out, shared, direction, per_set)
        if destdir != shared:  # the same pairs, added with that data-bin's own tags
            challenge_split(self.out, destdir, direction, per_set)
            require_same_lines(destdir, shared, "challenge")
        output = self.translate(destdir, data_bin, self.checkpoint(data_bin.name, system, seed), "challenge",
                                self.run_dir(data_bin.name, system, seed) / f"generate.challenge.max{per_set}.txt")
        self.write_challenge_record(data_bin, destdir, shared, manifest, system, seed, output)
        return output

    def write_record(self, data_bin: DataBin, destdir: Path, shared: Path, system: str, seed: int,
                     output: Path) -> None:
        """The finished run's results file (results_store.py), once: what it ran, on what, how long, its curves
        and its test scores, its translations. Scored alone here; comparisons are made from the files."""
        root = self.settings.results
        if root is None or results_store.run_paths(root, self.profile.name, data_bin.name, system, seed)[0].exists():
            return
        references, hypotheses = decoded_translations(system, shared, output)
        scores = evaluate_systems({system: hypotheses}, [references], bootstrap_samples=0)["systems"][system]
        test = {"split": "test", "sentences": len(references),
                **{key: {"score": scores[key]["score"], "signature": scores[key]["signature"]}
                   for key in ("bleu", "chrf++", "ter", "bleu-1")},
                "ribes": {"score": scores["ribes"]["score"]}}
        if generates_trees(system):
            trees, parsed = self.tree_files(data_bin.name, system, seed)
            uas_las, _ = tree_scores(system, trees, parsed)
            test["trees"] = {"uas": uas_las["uas"], "las": uas_las["las"], "words": uas_las["words"],
                             "parser": data_bin.transitions_parser}
            if "argmax_uas" in uas_las:  # a graph decoder's raw heads, before the tree decoding
                test["trees"]["argmax_uas"] = uas_las["argmax_uas"]
            if reads_trees_on_references(system):
                forced, _ = tree_scores(system, *self.tree_files(data_bin.name, system, seed, on_references=True))
                test["trees"]["on_references"] = {"uas": forced["uas"], "words": forced["words"],
                                                  **({"argmax_uas": forced["argmax_uas"]}
                                                     if "argmax_uas" in forced else {})}
        work = self.run_dir(data_bin.name, system, seed)
        curves = read_validations(work / "train.log")
        best = best_validation(curves) if self.profile.checkpoint == "best" else None
        parameters, updates = training_facts(work / "train.log")
        updates = int(updates) if updates != "?" else None
        tokens_per_second = train_speed(work / "train.log")
        # fairseq's wps counts a transition target's arcs and marks too: words/s is the same count for every system
        word_share = target_word_share(str(destdir), data_bin.src, data_bin.tgt)
        facts = self.runs.get(f"{data_bin.name}/{system}/seed{seed}", {})
        trained = train_command(self.profile, self.settings, destdir, data_bin.src, data_bin.tgt, system, seed,
                                work / "checkpoints", self.budget(data_bin.name, system))
        record = {
            "profile": self.profile.name, "data_bin": data_bin.name, "system": system, "seed": seed,
            "budget": self.budget_record(data_bin.name, system),
            "commands": {
                "train": portable_command(trained),
                "test": portable_command(generate_command(self.profile, self.settings, destdir, data_bin.src,
                                                          data_bin.tgt, self.checkpoint(data_bin.name, system, seed),
                                                          "test")),
                **({"trees_on_references": portable_command(generate_command(
                    self.profile, self.settings, destdir, data_bin.src, data_bin.tgt,
                    self.checkpoint(data_bin.name, system, seed), "test", Path("TREES.conllu"), score_reference=True))}
                   if reads_trees_on_references(system) else {}),
                "compare": portable_command([Path(sys.argv[0]).resolve(), *sys.argv[1:]])},
            "code": code_version(),
            "machine": {"name": machine_name(self.settings.device), "device": self.settings.device,
                        "precision": self.settings.precision, "threads": self.settings.threads,
                        "jobs": self.settings.jobs},
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            "seconds": {key: facts[key] for key in ("train_seconds", "test_translate_seconds", "parse_trees_seconds",
                                                    "forced_trees_seconds", "parse_forced_trees_seconds", "resumed")
                        if key in facts},
            "training": {"parameters": int(parameters.replace(",", "")) if parameters != "?" else None,
                         "updates": updates, "kept_update": int(best["num_updates"]) if best else updates,
                         **({"converged": stopped_by_patience(work / "train.log")} if self.profile.patience else {}),
                         **speed_record(tokens_per_second, word_share, sampled_positions(trained, system)),
                         **self.own_budget_record(data_bin.name, system)},
            "curves": curves, "test": test,
        }
        results_store.write_run(root, record, hypotheses, references)
        log(f"results of {data_bin.name}/{system}/seed{seed} written to {root}")

    def translate(self, destdir: Path, data_bin: DataBin, checkpoint: Path, split: str, output: Path,
                  trees_out: Optional[Path] = None) -> Path:
        """fairseq-generate's output of `split` (and the trees, with `trees_out`) in `output`, written whole. The
        challenge split goes in Settings.challenge_shards shards, each kept once written, then joined: fairseq-generate
        shards by whole batches (--distributed-world-size / --distributed-rank, without a process group), so the
        translations are those of one run, and the readers take them by sentence id."""
        if output.exists() and (not trees_out or trees_out.exists()):
            return output
        log(f"translating {split} with {output.parent.relative_to(self.out / 'systems')}")
        command = generate_command(self.profile, self.settings, destdir, data_bin.src, data_bin.tgt, checkpoint,
                                   split, trees_out)
        shards = self.settings.challenge_shards if split == "challenge" and trees_out is None else 1
        partial = output.with_suffix(".tmp")
        if shards == 1:
            run(command, partial, self.settings.threads)
            os.replace(partial, output)
            return output
        parts = [output.with_name(f"{output.stem}.shard{shard + 1}of{shards}{output.suffix}")
                 for shard in range(shards)]
        missing = [(shard, part) for shard, part in enumerate(parts) if not part.exists()]
        # on CPU, as many shards at once as the run has threads, each a process of one thread of its own (as two
        # 1-thread trainings outpace one 2-thread training here; for beam search not measured yet)
        at_once = max(1, min(len(missing), self.settings.threads)) if self.settings.device == "cpu" else 1

        queue, failed = iter(missing), []

        def translate_shards():  # the next shard not started, until none is left or one has failed
            while True:
                with LOCK:
                    shard, part = next(queue, (None, None)) if not failed else (None, None)
                if part is None:
                    return
                try:
                    run([*command, "--distributed-world-size", shards, "--distributed-rank", shard],
                        part.with_name(part.name + ".tmp"), max(1, self.settings.threads // at_once))
                except BaseException as error:  # the shards not started stay to do, as after a kill
                    with LOCK:
                        failed.append(error)
                    return
                os.replace(part.with_name(part.name + ".tmp"), part)

        with ThreadPoolExecutor(max_workers=at_once) as pool:
            for _ in range(at_once):
                pool.submit(translate_shards)
        if failed:
            raise failed[0]
        partial.write_text("".join(part.read_text(encoding="utf-8") for part in parts), encoding="utf-8")
        os.replace(partial, output)
        for part in parts:
            part.unlink()
        return output

    def tree_arguments(self, bin_name: str, systems: List[str], seed: int) -> List[str]:
        """The evaluator's --generated-trees/--parsed-trees of the systems that generate trees."""
        args = []
        for system in systems:
            if generates_trees(system):
                trees, parsed = self.tree_files(bin_name, system, seed)
                args += [f"--generated-trees={system}={trees}", f"--parsed-trees={system}={parsed}"]
        return args

    def budget(self, bin_name: str, system: str) -> Optional[Dict[str, float]]:
        """The budget train_command gets: an EQUAL_PAIRS or EQUAL_POSITIONS system's own, else None (the
        profile's)."""
        own = self.own_budgets.get((bin_name, system))
        return {"max_update": own[1]["max_update"]} if own else None

    def budget_record(self, bin_name: str, system: str) -> Dict[str, object]:
        """The record's budget: the profile's, with the updates this run trained (an EQUAL_PAIRS or EQUAL_POSITIONS
        system's own; the training section says what they equal)."""
        own = self.own_budgets.get((bin_name, system))
        return results_store.run_budget(self.profile.budget_record(), own[1]["max_update"] if own else None)

    def own_budget_record(self, bin_name: str, system: str) -> Dict[str, dict]:
        """{record key: counts} of an EQUAL_PAIRS or EQUAL_POSITIONS system's budget (a results file's training
        section), {} for the others."""
        own = self.own_budgets.get((bin_name, system))
        return {own[0]: own[1]} if own else {}

    def budget_text(self, bin_name: str, system: str) -> str:
        own = self.own_budgets.get((bin_name, system))
        if not own:
            return self.profile.budget_text()
        kind, budget = own
        equal = (f"the translation pairs of {self.profile.budget_text()} of {BASELINE}"
                 if kind == "equal_translation_pairs" else
                 f"the target positions of {self.profile.budget_text()} with a loss at every position")
        return f"{budget['max_update']} updates: {equal}"

    def update_budget(self, system: str, what: str) -> Optional[float]:
        """The profile's update budget, scaled for `system` to equal `what`; None under an epoch budget (an epoch
        holds each pair once, and each target once, in every system: equal already)."""
        kind, value = next(iter(self.profile.budget.items()))
        if self.profile.patience:
            raise SystemExit(f"{system} trains on as many {what} as {BASELINE} at a fixed budget: a profile with "
                             f"patience has none ({self.profile.budget_text()})")
        if kind == "max_epoch":
            return None
        if kind != "max_update":
            raise SystemExit(f"{system} trains on as many {what} as {BASELINE}: give it an update or epoch budget, "
                             f"not {self.profile.budget_text()}")
        return value

    def equal_pairs_budget(self, data_bin: DataBin, system: str, own: Path, shared: Path) -> Optional[dict]:
        """An EQUAL_PAIRS system's update budget: the profile's times the batches per epoch of its data-bin over
        those of the shared one under the baseline's command, so that it sees as many translation pairs as the
        baseline (an epoch holds each pair once in both). None under an epoch budget (equal already)."""
        value = self.update_budget(system, "translation pairs")
        if value is None:
            return None
        counts = {system: batches_per_epoch(train_command(self.profile, self.settings, own, data_bin.src,
                                                          data_bin.tgt, system, 1, self.out / "unused")),
                  BASELINE: batches_per_epoch(train_command(self.profile, self.settings, shared, data_bin.src,
                                                            data_bin.tgt, BASELINE, 1, self.out / "unused"))}
        return {"batches_per_epoch": counts, "profile_max_update": int(value),
                "max_update": math.ceil(value * counts[system] / counts[BASELINE])}

    def equal_positions_budget(self, data_bin: DataBin, system: str, own: Path) -> Optional[dict]:
        """An EQUAL_POSITIONS system's update budget: the profile's times the target positions of an epoch over
        those its k sampled prefixes predict (target_positions_per_epoch, on its own data-bin's batches), so that
        it is trained on as many target positions as a decoder with a loss at every position (Linearized, or the
        same decoder re-encoding every prefix) at the profile's budget. None under an epoch budget."""
        value = self.update_budget(system, "target positions")
        if value is None:
            return None
        command = train_command(self.profile, self.settings, own, data_bin.src, data_bin.tgt, system, 1,
                                self.out / "unused")
        prefixes = sampled_prefixes(system)
        positions = target_positions_per_epoch(command, prefixes)
        return {"prefixes": prefixes, "positions_per_epoch": positions, "profile_max_update": int(value),
                "max_update": math.ceil(value * positions["every"] / positions["sampled"])}

    def record_run(self, key: str, **facts) -> None:
        with LOCK:
            self.own_runs.setdefault(key, {}).update(facts, device=self.settings.device,
                                                     threads=self.settings.threads, jobs=self.settings.jobs)
            own = {name: dict(value) for name, value in self.own_runs.items()}

        def merged(runs):
            # the file as other invocations on OUT left it, with every fact this one recorded (also those an
            # invocation of an older compare.py, which wrote its whole copy, may have written over)
            for name, value in own.items():
                runs.setdefault(name, {}).update(value)
            return runs

        self.runs = update_json(self.runs_path, merged, dict)

    # ---- one data-bin --------------------------------------------------------------------------------------

    def compare_bin(self, data_bin: DataBin, systems: List[str], seeds: List[int]) -> dict:
        shared = self.data_bin(data_bin)
        bins_of = self.system_data_bins(data_bin, shared, systems)
        for system in systems:
            if (data_bin.name, system) in self.own_budgets:
                continue
            if system in EQUAL_PAIRS:
                own = ("equal_translation_pairs", self.equal_pairs_budget(data_bin, system, bins_of[system], shared))
                counted = f"batches per epoch: {own[1] and own[1]['batches_per_epoch']}"
            elif system in EQUAL_POSITIONS:
                own = ("equal_target_positions", self.equal_positions_budget(data_bin, system, bins_of[system]))
                counted = f"target positions per epoch: {own[1] and own[1]['positions_per_epoch']}"
            else:
                continue
            if own[1]:
                self.own_budgets[data_bin.name, system] = own
                log(f"{system} on {data_bin.name}: {own[1]['max_update']} updates ({counted})")
        work = [(system, seed) for seed in seeds for system in systems]
        with ThreadPoolExecutor(max_workers=self.settings.jobs) as pool:
            outputs = dict(zip(work, pool.map(lambda job: self.train_and_translate(data_bin, bins_of[job[0]],
                                                                                    *job, shared=shared), work)))
        results = self.out / "results" / data_bin.name
        baseline = BASELINE if BASELINE in systems else systems[0]
        per_seed = {}
        for seed in seeds:
            seed_dir = results / f"seed{seed}"
            log(f"evaluating {data_bin.name} seed {seed}")
            run([BIN / "fairseq-syntax-evaluate", *[f"--system={s}={outputs[s, seed]}" for s in systems],
                 "--baseline", baseline, "--data-bin", shared, "--gen-subset", "test",
                 *self.tree_arguments(data_bin.name, systems, seed), "--out-dir", seed_dir, "--quiet"],
                results / f"seed{seed}.log")
            per_seed[seed] = json.loads((seed_dir / "results.json").read_text())
        for system in systems:  # head 0 of layer 0 (or ATTENTION_LAYER) over the first test sentence, first seed
            target = results / "attention" / system
            if not (target / "attention.png").exists():
                run([BIN / "fairseq-syntax-evaluate", "attention", "--path",
                     self.checkpoint(data_bin.name, system, seeds[0]), "--data-bin", bins_of[system],
                     "--gen-subset", "test", "--index", "0", "--layer", ATTENTION_LAYER.get(system, 0), "--head", "0",
                     "--out-dir", target],
                    results / "attention" / f"{system}.log")
        curves = {system: {seed: read_validations(self.run_dir(data_bin.name, system, seed) / "train.log")
                           for seed in seeds} for system in systems}
        (results / "curves.json").write_text(json.dumps(curves, indent=1) + "\n")
        for metric in ("bleu", "loss"):
            plot_learning_curves(curves, results / f"curves.{metric}.png", metric,
                                 title=f"{data_bin.name}: valid {'BLEU' if metric == 'bleu' else 'loss'} against "
                                       f"updates ({self.profile.name}; mean over seeds, band: min-max)")
        seed = challenge_seed(self.profile, seeds)
        challenge = self.challenge(data_bin, shared, bins_of, systems, seed) if seed is not None else None
        return {"per_seed": per_seed, "summary": summarize_seeds(per_seed, baseline), "baseline": baseline,
                "curves": curves, "challenge": challenge, "trees": summarize_trees(per_seed, systems),
                "tree_parser": data_bin.transitions_parser}

    def challenge(self, data_bin: DataBin, shared: Path, bins_of: Dict[str, Path], systems: List[str], seed: int):
        per_set = self.profile.challenge_per_set
        if per_set <= 0:
            return None
        # (made by each run as it finished: train_and_translate)
        outputs = [self.challenge_run(data_bin, bins_of[s], shared, s, seed) for s in systems]
        manifest = challenge_split(self.out, shared, f"{data_bin.src}-{data_bin.tgt}", per_set)
        results = self.out / "results" / data_bin.name / "challenge"
        log(f"scoring the challenge sets on {data_bin.name}")
        run([BIN / "fairseq-syntax-evaluate", "challenge", "score", "--manifest", manifest,
             *[f"--system={s}={o}" for s, o in zip(systems, outputs)], "--baseline",
             BASELINE if BASELINE in systems else systems[0], "--data-bin", shared, "--gen-subset", "challenge",
             "--out-dir", results, "--quiet"], self.out / "results" / f"{data_bin.name}.challenge.log")
        return json.loads((results / "results.json").read_text())

    def write_challenge_record(self, data_bin: DataBin, destdir: Path, shared: Path, manifest_path: Path,
                               system: str, seed: int, output: Path) -> None:
        """The run's challenge files (results_store.py), once: its translations as text, one per exported pair, and
        each set's scores. Comparisons between runs are made from the files."""
        root = self.settings.results
        if root is None or results_store.challenge_paths(root, self.profile.name, data_bin.name, system,
                                                         seed)[0].exists():
            return
        # the training these translations come from, by its test translations: a run record of another training
        # of this system and seed (another machine's, committed) must not get them
        _, test = decoded_translations(system, shared, self.run_dir(data_bin.name, system, seed) / "generate.test.txt")
        trained = {"test_translations_sha256": results_store.lines_sha256(test)}
        record_path = results_store.run_paths(root, self.profile.name, data_bin.name, system, seed)[0]
        if record_path.exists():
            recorded = json.loads(record_path.read_text(encoding="utf-8"))["translations"]["sha256"]
            if recorded != trained["test_translations_sha256"]:
                log(f"challenge results of {data_bin.name}/{system}/seed{seed} not written: {record_path} is the "
                    f"record of another training of it (its test translations differ from this one's)")
                return
        files = data_bin_files(shared, "challenge")
        linemap = read_linemap(files["linemap"]) if files["linemap"] else None
        manifest, references, outputs = read_challenge_outputs(manifest_path, {system: output}, files["spm_model"],
                                                               linemap, files["words"])
        hypotheses = outputs[system].hypotheses
        scored = score_challenge_hypotheses(manifest, references, {system: hypotheses}, set(outputs[system].dropped),
                                            bootstrap_samples=0)
        sets = [{**{key: value for key, value in row.items() if key not in ("systems", "direction")},
                 **{key: {"score": row["systems"][system][key]["score"],
                          "signature": row["systems"][system][key]["signature"]} for key in scored["metrics"]}}
                for row in scored["sets"]]
        record = {
            "profile": self.profile.name, "data_bin": data_bin.name, "system": system, "seed": seed,
            "export": {"direction": manifest["direction"], "sets": [entry["name"] for entry in manifest["sets"]],
                       # exports before 2026-11-27 did not record these: compare.py asked for challenge_per_set with
                       # the export's default sample seed, 1
                       "max_per_set": manifest.get("max_per_set", self.profile.challenge_per_set),
                       "seed": manifest.get("seed", 1), "sentences": manifest["sentences"],
                       "references_sha256": results_store.lines_sha256(references)},
            "commands": {
                "translate": portable_command(generate_command(self.profile, self.settings, destdir, data_bin.src,
                                                               data_bin.tgt, self.checkpoint(data_bin.name, system,
                                                                                             seed), "challenge")),
                "compare": portable_command([Path(sys.argv[0]).resolve(), *sys.argv[1:]])},
            "code": code_version(), "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "sets": sets, "run": trained,
        }
        results_store.write_challenge_run(root, record, hypotheses)
        log(f"challenge results of {data_bin.name}/{system}/seed{seed} written to {root}")


def decoded_translations(system: str, shared: Path, output: Path) -> Tuple[List[str], List[str]]:
    """(the test references of the shared data-bin, a run's test translations decoded from its fairseq-generate
    `output` as the evaluator reads them)."""
    files = data_bin_files(shared, "test")
    references = read_text_lines(files["references"], "references")
    hypotheses = read_system(system, output, len(references), PieceDecoder(files["spm_model"], files["words"]),
                             f"the references ({files['references']})").hypotheses
    return references, hypotheses


def challenge_seed(profile: Profile, seeds: List[int]) -> Optional[int]:
    """The seed whose runs translate the challenge sets in an invocation training `seeds`: the profile's first seed,
    if this invocation trains it and the profile has challenge sets; else None."""
    return profile.challenge_seed if profile.challenge_per_set > 0 and profile.challenge_seed in seeds else None


def require_same_lines(own: Path, shared: Path, split: str):
    if (own / f"{split}.linemap").read_text() != (shared / f"{split}.linemap").read_text():
        raise SystemExit(f"{own} kept other {split} lines than {shared} (see their {split}.drops.tsv): one set of "
                         f"references cannot score both")


def challenge_split(out: Path, destdir: Path, direction: str, per_set: int) -> Path:
    """The challenge sets of this direction as the split `challenge` of the data-bin; returns the manifest."""
    export = out / "challenge" / f"{direction}.max{per_set}"
    # runs finishing together (--jobs, or invocations sharing OUT) each add the split: one at a time
    with locked(out / "challenge" / ".lock"):
        return add_challenge_split(out, export, destdir, direction, per_set)


def add_challenge_split(out: Path, export: Path, destdir: Path, direction: str, per_set: int) -> Path:
    if not (export / "manifest.json").exists():
        log(f"exporting the {direction} challenge sets (at most {per_set} pairs each)")
        run([BIN / "fairseq-syntax-evaluate", "challenge", "export", "--direction", direction, "--max-per-set",
             per_set, "--out-dir", export], out / "challenge" / f"{direction}.max{per_set}.log")
    if not (destdir / "challenge.linemap").exists():
        log(f"adding the challenge split to {destdir.name}")
        run([BIN / "fairseq-syntax-preprocess", "--add-to", destdir, "--testpref", f"challenge={export / 'challenge'}",
             "--workers", "2"], out / "data" / f"{destdir.name}.challenge.log")
    return export / "manifest.json"


# ---- the report ------------------------------------------------------------------------------------------------

def machine_name(device: str, cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    if device != "cpu":
        try:
            import torch
            return f"{torch.cuda.get_device_name(0)} (GPU)"
        except Exception:  # noqa: BLE001  (the name is only for the header)
            return "GPU"
    return f"{cpu_name(cpuinfo)} ({os.cpu_count()} cores)"


def cpu_name(cpuinfo: Path) -> str:
    """The model name with the family and model numbers, and AVX-512 where the CPU has it: a virtual machine names
    every generation "AMD EPYC", and the speed ratios of docs/results.md differ between generations."""
    try:
        fields = {}
        for line in cpuinfo.read_text().splitlines():
            if not line.strip():
                break  # the first processor is enough
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        return platform.processor() or "CPU"
    name = fields.get("model name") or platform.processor() or "CPU"
    details = ([f"family {fields['cpu family']} model {fields['model']}"] if {"cpu family", "model"} <= set(fields)
               else [])
    if "avx512f" in fields.get("flags", "").split():
        details.append("AVX-512")
    return f"{name}, {', '.join(details)}" if details else name


def training_facts(train_log: Path):
    """(trained parameters, updates done) from a fairseq-train log, as printed there."""
    text = train_log.read_text(errors="replace")
    parameters = re.search(r"num\. shared model params: [0-9,]+ \(num\. trained: ([0-9,]+)\)", text)
    updates = re.findall(r"num_updates[ =]([0-9]+)", text)
    return parameters.group(1) if parameters else "?", updates[-1] if updates else "?"


# what fairseq-train logs when --patience stops it (fairseq_cli/train.py, should_stop_early)
PATIENCE_STOP = "early stop since valid performance hasn't improved"


def stopped_by_patience(train_log: Path) -> bool:
    """Whether the run ended because its valid BLEU stopped rising (fairseq's --patience), rather than at its cap."""
    return PATIENCE_STOP in train_log.read_text(errors="replace")


SPEED_ESTIMATE = "median of the logged intervals"


def speed_record(tokens_per_second: Optional[float], word_share: float,
                 positions: Optional[Dict[str, int]] = None) -> Dict[str, object]:
    """A run record's speed fields: fairseq's target tokens/s as train_speed reads the log, and the words/s they
    make (a transition target's arcs and marks left out), with the reading named.

    `positions` (a sampled-prefix run's: its prefixes k and target_positions_per_epoch): fairseq's wps of such a
    run counts only the positions with a loss (min(k, n) of a target's n), so its target tokens/s are every target
    token of the batches it trains on per second, wps x every / sampled over an epoch (the same count as every other
    system's, and the bench's), and the positions trained per second are kept beside them."""
    sampled = {}
    if positions is not None and tokens_per_second is not None:
        sampled = {"trained_positions_per_second": tokens_per_second, "positions_per_epoch": positions}
        tokens_per_second = round(tokens_per_second * positions["every"] / positions["sampled"], 1)
    return {"target_tokens_per_second": tokens_per_second, "target_word_share": round(word_share, 4),
            "target_words_per_second": (round(tokens_per_second * word_share, 1)
                                        if tokens_per_second is not None else None),
            "speed_estimate": SPEED_ESTIMATE, **sampled}


def sampled_positions(command: List, system: str) -> Optional[Dict[str, int]]:
    """{"prefixes": k, "every": ..., "sampled": ...} of a sampled-prefix system's epoch under `command` (a
    train_command; target_positions_per_epoch), None for a system with a loss at every target position."""
    prefixes = sampled_prefixes(system)
    return {"prefixes": prefixes, **target_positions_per_epoch(command, prefixes)} if prefixes else None


def train_speed(train_log: Path) -> Optional[float]:
    """Median of the target tokens per second (fairseq's wps) that the run's train_inner lines logged (every
    --log-interval updates, each over its own interval), else of its end-of-epoch train lines. The median, not
    the mean: a run stopped for a while (SIGSTOP for a benchmark, a suspended machine) slows the few intervals the
    stop fell in, which would pull a mean down to a speed the run never had."""
    text = train_log.read_text(errors="replace")
    values = [float(v) for v in re.findall(r"train_inner .*?wps=([0-9.]+)", text)]
    values = values or [float(v) for v in re.findall(r"\| train \|.*?\| wps ([0-9.]+)", text)]
    return round(median(values), 1) if values else None


def portable_command(command) -> str:
    """The command as a record keeps it: the repository's own paths relative to it, the console scripts by name."""
    text = shlex.join(str(a) for a in command)
    return text.replace(f"{BIN}/", "").replace(f"{REPO}/", "")


def code_version() -> Dict[str, object]:
    """The commit the repository was at, and whether its files differed from it."""
    def git(*args):
        result = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "modified": bool(status) if status is not None else None}


def record_time(out: Path, started: float, argv) -> float:
    """Add this invocation to OUT/timing.json; returns the minutes of all invocations."""
    invocation = {"started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
                  "seconds": round(time.time() - started), "argv": list(argv)}

    def added(timing):
        timing["invocations"].append(invocation)
        return timing

    timing = update_json(out / "timing.json", added, lambda: {"invocations": []})
    return sum(i["seconds"] for i in timing["invocations"]) / 60


def significance_mark(bootstrap, system: str, key: str) -> str:
    """" *" when sacrebleu's paired bootstrap puts system apart from the baseline at p < 0.05."""
    p_value = bootstrap["systems"][system][key]["p_value"] if bootstrap else None
    return " *" if system != BASELINE and p_value is not None and p_value < 0.05 else ""


def results_table(comparison: Comparison, results: Dict[str, dict], systems: List[str]) -> List[str]:
    """One row per data-bin and system: mean +- sd over seeds, each seed's BLEU with its bootstrap interval, the
    significance test against the baseline, and the updates at the kept checkpoint."""
    table = ["| data-bin | system | parameters | seeds | BLEU mean ± sd | p (test) | BLEU per seed (95% CI) | "
             "chrF++ | TER | RIBES | BLEU-1 | kept checkpoint (update) |", "|---" * 12 + "|"]
    for name, result in results.items():
        for system in systems:
            entry = result["summary"][system]
            parameters, _ = training_facts(comparison.run_dir(name, system, entry["seeds"][0]) / "train.log")
            p_value = entry["p_value"]
            if p_value is not None:
                test = f"{p_value:.3f}{' *' if p_value < 0.05 else ''} ({entry['test']})"
            elif entry["test"]:  # e.g. Welch's t with no spread in either system's scores
                test = f"n/a ({entry['test']}: undefined)"
            else:
                test = "baseline" if system == result["baseline"] else "n/a"
            runs = ", ".join(f"{run['score']:.2f}" + (f" ± {run['ci']:.2f}" if run["ci"] is not None else "")
                             for run in entry["bleu_runs"])
            kept = []
            for seed in entry["seeds"]:
                points = result["curves"][system][seed]
                best = best_validation(points) if comparison.profile.checkpoint == "best" else None
                kept.append(str(int(best["num_updates"])) if best else
                            training_facts(comparison.run_dir(name, system, seed) / "train.log")[1])
            table.append(f"| {name} | {system} | {parameters} | {len(entry['seeds'])} | "
                         f"{mean_sd_text(entry['bleu'])} | {test} | {runs} | {mean_sd_text(entry['chrf++'])} | "
                         f"{mean_sd_text(entry['ter'])} | {mean_sd_text(entry['ribes'])} | "
                         f"{mean_sd_text(entry['bleu-1'])} | {', '.join(kept)} |")
    return table


def trees_table(results: Dict[str, dict]) -> List[str]:
    """One row per data-bin and system with generated trees: its BLEU beside the UAS/LAS of its trees against the
    target parser's parse of the same words (mean +- sd over seeds); no lines without such systems."""
    rows = []
    for name, result in results.items():
        for system, entry in (result.get("trees") or {}).items():
            rows.append(f"| {name} | {system} | {result.get('tree_parser')} | {len(entry['seeds'])} | "
                        f"{mean_sd_text(result['summary'][system]['bleu'])} | {mean_sd_text(entry['uas'])} | "
                        f"{mean_sd_text(entry['las'])} | {', '.join(map(str, entry['words']))} |")
    if not rows:
        return []
    return ["| data-bin | system | parser of the trees | seeds | BLEU mean ± sd | UAS mean ± sd | LAS mean ± sd | "
            "words per seed |", "|---" * 8 + "|", *rows]


def challenge_table(summary, systems) -> List[str]:
    table = ["| data-bin | set | phenomenon | side | domain | distance | pairs | "
             + " | ".join(f"{s} BLEU | {s} chrF++" for s in systems) + " |", "|---" * (7 + 2 * len(systems)) + "|"]
    for name, result in summary.items():
        for row in sorted(result["sets"], key=set_order):
            cells = [name, row["name"] + (" †" if row["tokenized"] else ""), row["phenomenon"], row["side"],
                     row["domain"], distance_text(row), str(row["sentences"])]
            for system in systems:
                scores = row["systems"][system]
                cells += [f"{scores[key]['score']:.2f}{significance_mark(row.get('bootstrap'), system, key)}"
                          for key in ("bleu", "chrf++")]
            table.append("| " + " | ".join(cells) + " |")
    return table


def report(comparison: Comparison, results: Dict[str, dict], systems: List[str], seeds: List[int],
           total_minutes: float) -> str:
    profile, settings = comparison.profile, comparison.settings
    precision = f", {settings.precision}" if settings.precision else ""
    header = (f"Multi30k test2016, profile `{profile.name}` ({profile.description}); budget {profile.budget_text()} "
              f"per system and seed, {profile.checkpoint} checkpoint"
              f"{' by valid BLEU' if profile.checkpoint == 'best' else ''}, beam {profile.beam}; seeds "
              f"{', '.join(map(str, seeds))}; {machine_name(settings.device)}{precision}, {settings.jobs} job(s) at "
              f"once; {time.strftime('%Y-%m-%d')}; `python examples/multi30k/compare.py "
              f"{shlex.join(sys.argv[1:])}` ({total_minutes:.0f} min in all, OUT/timing.json)")
    text = (header + "\n\n" + "\n".join(results_table(comparison, results, systems)) + "\n\n"
            "p: against the baseline; (welch): Welch's t-test on the per-seed BLEU (2+ seeds per system), "
            "(bootstrap): sacrebleu's paired bootstrap of the single run; * p < 0.05. BLEU per seed: each run's "
            "score ± its paired-bootstrap 95% interval (signatures in results/<data-bin>/seed<k>/results.md). "
            "Learning curves: results/<data-bin>/curves.bleu.png, curves.loss.png.\n")
    trees = trees_table(results)
    if trees:
        text += ("\nGenerated trees (systems with target-side transitions): UAS/LAS of the trees generated with the "
                 "test translations against the parse of the same words by the data-bin's target parser "
                 "(fairseq-syntax-evaluate parse-trees; per seed: results/<data-bin>/seed<k>/results.md)\n\n"
                 + "\n".join(trees) + "\n")
    challenge = {name: r["challenge"] for name, r in results.items() if r["challenge"]}
    if challenge:
        text += (f"\nChoshen & Abend (2019) challenge sets (seed {profile.challenge_seed}), at most "
                 f"{profile.challenge_per_set} pairs per set (seeded sample; pairs: translated), lines over 250 "
                 "subword pieces count as empty translations; † Moses-tokenized; * p < 0.05, paired bootstrap "
                 f"against {next(iter(challenge.values()))['baseline']}. Per-set details and signatures: "
                 "results/<data-bin>/challenge/\n\n"
                 + "\n".join(challenge_table(challenge, systems)) + "\n")
    return text


def apply_overrides(profile: Profile, args) -> Profile:
    """The command line's systems, seeds, budget and validation interval replace the profile's."""
    if args.systems:
        systems = [s for s in args.systems.split(",") if s]
        unknown = [s for s in systems if s not in SYSTEMS]
        if unknown:
            raise SystemExit(f"unknown systems {unknown} (known: {', '.join(SYSTEMS)})")
        profile.systems = systems
    if args.seeds:
        profile.seeds = [int(s) for s in args.seeds.split(",") if s]
    names = profile.run_bins
    if getattr(args, "data_bins", None):
        names = [name for name in args.data_bins.split(",") if name]
        known = [data_bin.name for data_bin in profile.bins]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise SystemExit(f"unknown data-bins {unknown} in profile {profile.name} (known: {', '.join(known)})")
    profile.bins = [data_bin for data_bin in profile.bins if data_bin.name in names]
    budgets = {k: getattr(args, k) for k in ("max_update", "max_epoch", "minutes") if getattr(args, k) is not None}
    if len(budgets) > 1:
        raise SystemExit("give one of --max-update, --max-epoch, --minutes")
    if budgets:
        profile.budget = {kind: float(value) for kind, value in budgets.items()}
    if args.validate_every is not None:
        profile.validate_every = args.validate_every
    if args.challenge_per_set is not None:
        profile.challenge_per_set = args.challenge_per_set
    return profile


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", help="a profile of examples/multi30k/profiles/ (cpu-quick, cpu, ldd-multi30k, "
                                          "...) or a .toml path (default: cpu)")
    parser.add_argument("--quick", action="store_true", help="the same as --profile cpu-quick")
    parser.add_argument("--out", default="work/compare")
    parser.add_argument("--systems", help="comma-separated systems (default: the profile's)")
    parser.add_argument("--seeds", help="comma-separated training seeds, e.g. 1,2,3 (default: the profile's)")
    parser.add_argument("--max-update", type=int, help="budget: updates per system and seed")
    parser.add_argument("--max-epoch", type=int, help="budget: epochs per system and seed")
    parser.add_argument("--minutes", type=float, help="budget: training wall time per system and seed")
    parser.add_argument("--validate-every", type=int, help="valid loss and BLEU every N updates (0: every epoch)")
    parser.add_argument("--challenge-per-set", type=int, help="challenge-set pairs per set (0: none)")
    parser.add_argument("--challenge-shards", type=int, default=8,
                        help="translate the challenge sets in N shards, each kept once written (an interrupted "
                             "translation goes on from the next shard; the translations are the same)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument("--fp16", action="store_const", dest="precision", const="fp16",
                           help="fairseq's mixed precision training (--fp16) and fp16 generation")
    precision.add_argument("--bf16", action="store_const", dest="precision", const="bf16",
                           help="bfloat16 training (fairseq-syntax-train, see docs/training.md); generation in fp32")
    parser.add_argument("--jobs", type=int, default=1, help="systems trained and translated at once")
    parser.add_argument("--threads", type=int, help="torch threads per job (default: cores / jobs), and of the "
                                                    "parser trainings and preprocessing (default: every core); e.g. "
                                                    "one 1-thread job in the background of other work")
    parser.add_argument("--results-dir", help="where each finished run's results file goes (default: results/ of "
                                              "the repository when the profile's budget is kept; with a budget or "
                                              "validation override, none unless given)")
    parser.add_argument("--data-bins", help="comma-separated data-bins of the profile to run (default: its "
                                            "run.data_bins, else all)")
    parser.add_argument("--raw", help="a parallel corpus DIR/{train,valid,test}.{src,tgt} instead of Multi30k "
                                      "(the tests use a small sample)")
    parser.add_argument("--dry-run", action="store_true", help="print the training commands and stop")
    args = parser.parse_args(argv)
    if args.precision and args.device == "cpu":
        parser.error(f"--{args.precision} needs --device cuda")
    try:
        profile = load_profile(args.profile or ("cpu-quick" if args.quick else "cpu"), list(SYSTEMS))
    except ProfileError as error:
        raise SystemExit(str(error)) from None
    profile_budget = profile.budget_record()
    profile = apply_overrides(profile, args)
    check_target_parsers(profile, profile.systems)
    out = Path(args.out).resolve()
    results = Path(args.results_dir).resolve() if args.results_dir else None
    if results is None and profile.budget_record() == profile_budget and not args.raw:
        results = results_store.RESULTS
    settings = Settings(out, args.device, args.precision, args.jobs, Path(args.raw).resolve() if args.raw else None,
                        args.threads, results, args.challenge_shards)
    comparison = Comparison(profile, settings)
    if args.dry_run:
        for data_bin in profile.bins:
            for system in profile.systems:
                for seed in profile.seeds:
                    print(shlex.join(str(a) for a in train_command(
                        profile, settings, out / "data" / data_bin.name, data_bin.src, data_bin.tgt, system, seed,
                        comparison.run_dir(data_bin.name, system, seed) / "checkpoints")))
        return
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    if not args.raw:
        run([BIN / "python", REPO / "examples/multi30k/prepare_raw.py", settings.raw, "--download"])
    results = {data_bin.name: comparison.compare_bin(data_bin, profile.systems, profile.seeds)
               for data_bin in profile.bins}
    (out / "results").mkdir(parents=True, exist_ok=True)
    (out / "results" / "summary.json").write_text(json.dumps(
        {name: {"summary": r["summary"], "baseline": r["baseline"], "trees": r["trees"]}
         for name, r in results.items()}, indent=1))
    text = report(comparison, results, profile.systems, profile.seeds, record_time(out, start, sys.argv[1:]))
    (out / "results" / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
