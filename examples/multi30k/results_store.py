"""The comparison's results as small committed files, one per finished run, and the tables made from them.

  results/<profile>/<data-bin>/<system>/seed<k>.json              what the run was and what it scored
  results/<profile>/<data-bin>/<system>/seed<k>.test.txt.gz       its test translations (text, one per line)
  results/<profile>/<data-bin>/references.test.txt.gz             the references they are scored against
  results/<profile>/<data-bin>/<system>/seed<k>.challenge.json    its challenge-set scores, set by set, and the
                                                                  sha256 of the test translations of the training
                                                                  that made them (another training of the same
                                                                  system and seed is left out, not paired)
  results/<profile>/<data-bin>/<system>/seed<k>.challenge.txt.gz  its challenge translations, one per exported pair
                                                                  (the references are not committed: they are
                                                                  exported again from $DATA_ROOT's challenge sets)

compare.py writes a run's files once the run has trained, translated test and (a system generating trees) parsed
its trees (a graph decoder's also read on the forced test references, Li et al.'s appendix B.3), and a run's
challenge files once it has translated the challenge sets (the profile's challenge_per_set; the first seed). A
campaign spans many sessions: each adds runs, none is re-run, and

  python examples/multi30k/results_store.py --profile cpu [--readme README.md --results-doc docs/results.md]

reads every file of the profile and writes the table (mean ± sd over seeds, Welch's test over seeds and each
seed's paired bootstrap against the baseline of the same seed, parameters, train speed, kept update), the
generated-trees table, the challenge-set table (each set's BLEU / chrF++, paired bootstrap against
vanilla's translations of the same seed where they are on record), what the profile still has to run (its
systems x seeds without a complete record, first-seed runs without challenge scores), the learning curves of each
data-bin (results/<profile>/<data-bin>/curves.{bleu,loss}.png), and the sections between
`<!-- results:<profile> begin -->` and `<!-- results:<profile> end -->` markers of the files given. A run whose
files are missing, half-written, made at another budget or that disagree with their hash is listed under "Left out"
and never averaged in. Runs of one data-bin trained in different precisions (fp16, bf16, float32: the machine
record's) get a table each, never one mean.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))
from fairseq_syntax.evaluation.challenge import (  # noqa: E402
    distance_text, export_again, score_challenge_hypotheses, set_order,
)
from fairseq_syntax.evaluation.learning_curves import plot_learning_curves  # noqa: E402
from fairseq_syntax.evaluation.metrics import EvaluationError  # noqa: E402
from fairseq_syntax.evaluation.scoring import evaluate_systems  # noqa: E402
from fairseq_syntax.evaluation.seeds import mean_sd, mean_sd_text, summarize_seeds  # noqa: E402

FORMAT = 1
RESULTS = REPO / "results"
BASELINE = "vanilla"
RECORD_KEYS = ("format", "profile", "data_bin", "system", "seed", "budget", "commands", "code", "machine",
               "finished", "seconds", "training", "curves", "test", "translations")
# export: direction, set names (in export order), max_per_set, sample seed, pairs and the references' sha256 (enough
# to export the same pairs again); sets: each set's description and scores, as `challenge score` gives them; run:
# the sha256 of the test translations of the training that translated them (its run record's, checked on reading)
CHALLENGE_KEYS = ("format", "profile", "data_bin", "system", "seed", "export", "commands", "code", "finished", "sets",
                  "translations", "run")


# ---- writing ---------------------------------------------------------------------------------------------------

def run_paths(root: Path, profile: str, data_bin: str, system: str, seed: int) -> Tuple[Path, Path]:
    """(record, translations) of one run."""
    folder = Path(root) / profile / data_bin / system
    return folder / f"seed{seed}.json", folder / f"seed{seed}.test.txt.gz"


def lines_text(lines: List[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def lines_sha256(lines: List[str]) -> str:
    """The sha256 of the lines as write_gzip_lines stores them."""
    return hashlib.sha256(lines_text(lines)).hexdigest()


def replace_with(temporary: str, path: Path) -> None:
    """Move a file written through tempfile.NamedTemporaryFile to `path`, with the permissions a plain write would
    have given it (the temporary file's are 0600: results files read only by their writer)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)
    Path(temporary).replace(path)


def write_gzip_lines(path: Path, lines: List[str]) -> str:
    """`lines` gzipped (no timestamp, so the same lines give the same bytes); returns the sha256 of the text."""
    text = lines_text(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    # through a temporary file of its own: runs of one data-bin finishing together (compare.py --jobs) store the
    # same references, and one must never read another's half-written file (a GPU run of 8 jobs lost a record so)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
            f.write(text)
    replace_with(raw.name, path)
    return hashlib.sha256(text).hexdigest()


def read_gzip_lines(path: Path) -> Tuple[List[str], str]:
    """(lines, sha256 of the text) of a file written by write_gzip_lines."""
    text = gzip.decompress(Path(path).read_bytes())
    # split at "\n" only: str.splitlines also breaks at \x1c-\x1e, \x85 and U+2028, which an undertrained model
    # does emit inside a line
    lines = text.decode("utf-8").split("\n")
    return (lines[:-1] if lines and lines[-1] == "" else lines), hashlib.sha256(text).hexdigest()


def store_references(root: Path, profile: str, data_bin: str, references: List[str]) -> None:
    """The data-bin's test references, once; a later run whose references differ is refused (ValueError)."""
    path = Path(root) / profile / data_bin / "references.test.txt.gz"
    if path.exists():
        stored, _ = read_gzip_lines(path)
        if stored != references:
            raise ValueError(f"{path} holds other references than this run's data-bin: one table cannot score both")
        return
    write_gzip_lines(path, references)


def write_run(root: Path, record: Dict, hypotheses: List[str], references: List[str]) -> Path:
    """The run's translations, then its record (written last, through a temporary file: a record that exists is
    complete)."""
    record_path, translations = run_paths(root, record["profile"], record["data_bin"], record["system"],
                                          record["seed"])
    store_references(root, record["profile"], record["data_bin"], references)
    return write_with_translations(record_path, translations, record, hypotheses, RECORD_KEYS)


def write_with_translations(record_path: Path, translations: Path, record: Dict, hypotheses: List[str],
                            keys: Tuple[str, ...]) -> Path:
    """The translations, then the record that names them with their hash (`keys`: what it must hold)."""
    record = dict(record, format=FORMAT,
                  translations={"file": translations.name, "sentences": len(hypotheses),
                                "sha256": write_gzip_lines(translations, hypotheses)})
    missing = [key for key in keys if key not in record]
    if missing:
        raise ValueError(f"{record_path.name} needs {missing}")
    write_record(record_path, record)
    return record_path


def write_record(record_path: Path, record: Dict):
    """Through a temporary file: a record that exists is complete."""
    partial = record_path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(record_path)


def challenge_paths(root: Path, profile: str, data_bin: str, system: str, seed: int) -> Tuple[Path, Path]:
    """(challenge record, challenge translations) of one run."""
    folder = Path(root) / profile / data_bin / system
    return folder / f"seed{seed}.challenge.json", folder / f"seed{seed}.challenge.txt.gz"


def write_challenge_run(root: Path, record: Dict, hypotheses: List[str]) -> Path:
    """A run's challenge translations (one per exported pair, "" where the data-bin dropped the pair), then its
    challenge record, written last like a run's."""
    record_path, translations = challenge_paths(root, record["profile"], record["data_bin"], record["system"],
                                                record["seed"])
    if len(hypotheses) != record["export"]["sentences"]:
        raise ValueError(f"{len(hypotheses)} challenge translations for {record['export']['sentences']} pairs")
    return write_with_translations(record_path, translations, record, hypotheses, CHALLENGE_KEYS)


# ---- reading ---------------------------------------------------------------------------------------------------

def run_files(folder: Path, suffix: str) -> List[Path]:
    """The runs' records (suffix ".json") or their leftover temporary files (".json.tmp"): seed<k><suffix>, not the
    challenge records beside them."""
    pattern = re.compile(r"seed\d+" + re.escape(suffix) + "$")
    return [path for path in sorted(Path(folder).glob(f"*/*/seed*{suffix}")) if pattern.match(path.name)]


class Run:
    def __init__(self, record: Dict, hypotheses: List[str]):
        self.record, self.hypotheses = record, hypotheses
        self.system, self.seed = record["system"], int(record["seed"])


def recorded_translations(path: Path, record: Dict) -> Tuple[Optional[List[str]], Optional[str]]:
    """(the translations a record names, None) or (None, why they cannot be used)."""
    translations = path.parent / record["translations"]["file"]
    if not translations.exists():
        return None, f"its translations {translations.name} are missing"
    try:
        hypotheses, digest = read_gzip_lines(translations)
    except (OSError, EOFError, ValueError) as error:
        return None, f"its translations {translations.name} are unreadable ({error})"
    if digest != record["translations"]["sha256"] or len(hypotheses) != record["translations"]["sentences"]:
        return None, f"its translations {translations.name} are not the ones it scored (sha256)"
    return hypotheses, None


def read_record(path: Path, root: Path, keys: Tuple[str, ...]) -> Tuple[Optional[Dict], Optional[str]]:
    """(the record, None) or (None, why it cannot be used: unreadable, incomplete, another format)."""
    name = path.relative_to(root)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, f"{name}: unreadable ({error})"
    missing = [key for key in keys if key not in record]
    if missing:
        return None, f"{name}: incomplete record (no {', '.join(missing)})"
    if record["format"] != FORMAT:
        return None, f"{name}: format {record['format']}, this code reads {FORMAT}"
    return record, None


def read_files(path: Path, root: Path, keys: Tuple[str, ...], refuse) -> Tuple[Optional[Dict], Optional[List[str]],
                                                                               Optional[str]]:
    """(record, translations, None) or (None, None, why they cannot be used): read_record's reasons, then
    `refuse(record)`'s (a reason or None), then recorded_translations'."""
    record, problem = read_record(path, root, keys)
    if problem:
        return None, None, problem
    hypotheses, problem = None, refuse(record)
    if not problem:
        hypotheses, problem = recorded_translations(path, record)
    return (None, None, f"{path.relative_to(root)}: {problem}") if problem else (record, hypotheses, None)


OWN_BUDGETS = ("equal_translation_pairs", "equal_target_positions")  # compare.py's scaled budgets, as records keep them


def run_budget(profile_budget: Dict, own_max_update: Optional[int] = None) -> Dict:
    """A record's budget: the profile's, with the updates the run trained where it had an update budget of its own
    (compare.py's EQUAL_PAIRS and EQUAL_POSITIONS systems)."""
    return dict(profile_budget, max_update=own_max_update) if own_max_update is not None else dict(profile_budget)


def expected_budget(record: Dict, profile_budget: Dict) -> Dict:
    """The budget a record of this profile must hold: the profile's, or, for a run with its own update budget
    scaled from the profile's (its training section's equal_* entry, whose profile_max_update must be the
    profile's), the profile's with that run's updates."""
    for key in OWN_BUDGETS:
        own = record.get("training", {}).get(key)
        if own and own.get("profile_max_update") == profile_budget.get("max_update"):
            return run_budget(profile_budget, own["max_update"])
    return dict(profile_budget)


def budget_problem(record: Dict, budget: Optional[Dict]) -> Optional[str]:
    if budget is None:
        return None
    expected = expected_budget(record, budget)
    return None if record["budget"] == expected else f"made at budget {record['budget']}, the profile's is {expected}"


def load_runs(root: Path, profile: str, budget: Optional[Dict] = None):
    """Every complete run of the profile: ({data-bin: {system: {seed: Run}}}, {data-bin: references}, problems).
    A problem is a run left out, with the reason: an unreadable or incomplete record, a missing or altered
    translations file, a run of another budget (`budget`: the profile's), a leftover temporary file."""
    folder = Path(root) / profile
    runs: Dict[str, Dict[str, Dict[int, Run]]] = {}
    references: Dict[str, List[str]] = {}
    problems: List[str] = []
    if not folder.is_dir():
        return runs, references, []  # nothing run yet: profile_report says so
    for partial in run_files(folder, ".json.tmp"):
        problems.append(f"{partial.relative_to(root)}: half-written (a run stopped while writing its record)")
    for path in run_files(folder, ".json"):
        name = path.relative_to(root)
        record, hypotheses, problem = read_files(path, root, RECORD_KEYS,
                                                 lambda record: budget_problem(record, budget))
        if problem:
            problems.append(problem)
            continue
        data_bin = record["data_bin"]
        if data_bin not in references:
            reference_file = folder / data_bin / "references.test.txt.gz"
            if not reference_file.exists():
                problems.append(f"{name}: no references for {data_bin} ({reference_file.name})")
                continue
            references[data_bin], _ = read_gzip_lines(reference_file)
        if len(hypotheses) != len(references[data_bin]):
            problems.append(f"{name}: {len(hypotheses)} translations for {len(references[data_bin])} references")
            continue
        runs.setdefault(data_bin, {}).setdefault(record["system"], {})[int(record["seed"])] = Run(record, hypotheses)
    return runs, references, problems


def load_challenges(root: Path, profile: str, runs: Dict[str, Dict[str, Dict[int, "Run"]]]):
    """The challenge records of the runs in `runs` (load_runs'): ({data-bin: {system: {seed: Run}}}, problems).
    Left out, with the reason: what load_runs leaves out of a run's record, a challenge record whose run is not in
    `runs`, and one whose exported pairs differ from those of the data-bin's other challenge records."""
    folder = Path(root) / profile
    challenges: Dict[str, Dict[str, Dict[int, Run]]] = {}
    problems: List[str] = []
    for partial in sorted(folder.glob("*/*/seed*.challenge.json.tmp")):
        problems.append(f"{partial.relative_to(root)}: half-written (a run stopped while writing its record)")
    for path in sorted(folder.glob("*/*/seed*.challenge.json")):
        record, hypotheses, problem = read_files(path, root, CHALLENGE_KEYS, lambda record: other_run(record, runs))
        if problem:
            problems.append(problem)
            continue
        data_bin, system, seed = record["data_bin"], record["system"], int(record["seed"])
        challenges.setdefault(data_bin, {}).setdefault(system, {})[seed] = Run(record, hypotheses)
    for data_bin, systems in challenges.items():  # one export per table: the one most runs translated
        exports = [json.dumps(run.record["export"], sort_keys=True) for by_seed in systems.values()
                   for run in by_seed.values()]
        common = max(set(exports), key=exports.count)
        for system, by_seed in systems.items():
            for seed in [seed for seed, run in by_seed.items()
                         if json.dumps(run.record["export"], sort_keys=True) != common]:
                export = by_seed.pop(seed).record["export"]
                problems.append(f"{profile}/{data_bin}/{system}/seed{seed}.challenge.json: other challenge pairs "
                                f"than the data-bin's other runs translated ({export['sentences']} pairs, references "
                                f"sha256 {export['references_sha256'][:12]})")
        for system in [system for system, by_seed in systems.items() if not by_seed]:
            del systems[system]
    return challenges, problems


def other_run(challenge: Dict, runs: Dict[str, Dict[str, Dict[int, "Run"]]]) -> Optional[str]:
    """Why a challenge record cannot stand beside its run's row (None: it can): the run is not in the table, or
    its translations come from another training of the same system and seed than the run record's."""
    name = f"{challenge['system']}/seed{challenge['seed']}.json"
    run = runs.get(challenge["data_bin"], {}).get(challenge["system"], {}).get(int(challenge["seed"]))
    if run is None:
        return f"its run ({name}) is not in the table"
    if challenge["run"]["test_translations_sha256"] != run.record["translations"]["sha256"]:
        return f"made by another training than its run's record ({name}): their test translations differ"
    return None


# ---- the tables ------------------------------------------------------------------------------------------------

EARLIER_SPEED_ESTIMATE = "mean of the logged intervals"  # what records without a speed_estimate hold


def summarize_bin(systems: Dict[str, Dict[int, Run]], references: List[str], baseline: str = BASELINE):
    """Per seed, the evaluator's scores of every system that has that seed (paired bootstrap against the
    baseline's run of the same seed, when there is one); then mean ± sd over seeds and Welch's test."""
    seeds = sorted({seed for by_seed in systems.values() for seed in by_seed})
    per_seed = {}
    for seed in seeds:
        present = {system: by_seed[seed].hypotheses for system, by_seed in systems.items() if seed in by_seed}
        per_seed[seed] = evaluate_systems(present, [references], baseline=baseline if baseline in present else None)
    return per_seed, summarize_seeds(per_seed, baseline if baseline in systems else None)


def system_order(systems, preferred: List[str]) -> List[str]:
    return [s for s in preferred if s in systems] + sorted(s for s in systems if s not in preferred)


def number_text(value, digits=0) -> str:
    return "?" if value is None else f"{value:,.{digits}f}"


def machine_labels(systems: Dict[str, Dict[int, Run]], order: List[str]) -> Dict[str, str]:
    """{machine text: a letter}, lettered in the order the table's rows and seeds first use them."""
    labels: Dict[str, str] = {}
    for system in order:
        for _, run in sorted(systems[system].items()):
            labels.setdefault(machine_text(run.record["machine"]), chr(ord("A") + len(labels)))
    return labels


def own_budgets_text(systems: Dict[str, Dict[int, Run]], order: List[str], budget: Dict) -> str:
    """The rows whose runs trained another number of updates than the profile's budget, and what they equal."""
    own = []
    for system in order:
        updates = sorted({run.record["budget"].get("max_update") for run in systems[system].values()
                          if run.record["budget"].get("max_update") != budget.get("max_update")})
        if updates:
            kinds = sorted({key.replace("equal_", "").replace("_", " ") for run in systems[system].values()
                            for key in OWN_BUDGETS if key in run.record["training"]})
            equal = f" (as many {' and '.join(kinds)} as the profile's budget gives {BASELINE})" if kinds else ""
            own.append(f"{system} {', '.join(number_text(u) for u in updates)} updates{equal}")
    return ("Own update budgets: " + "; ".join(own) + ".") if own else ""


def kept_update_text(training: Dict) -> str:
    """A run's kept update; for a run of a profile with patience, also where and why it stopped."""
    kept = number_text(training.get("kept_update"))
    if "converged" not in training:
        return kept
    stop = "converged" if training["converged"] else "cap"
    return f"{kept} ({stop} at {number_text(training.get('updates'))})"


def convergence_text(systems: Dict[str, Dict[int, Run]], order: List[str], budget: Dict) -> str:
    """How many runs of a profile with patience stopped because their valid BLEU had stopped rising."""
    stopped = [run.record["training"]["converged"] for system in order for run in systems[system].values()
               if "converged" in run.record["training"]]
    if not stopped:
        return ""
    return (f"Converged (valid BLEU not above its best for {budget.get('patience', '?')} validations in a row: "
            f"fairseq's --patience stopped the run): {sum(stopped)} of {len(stopped)} runs; the others reached the "
            f"cap of {number_text(budget.get('max_update', budget.get('max_epoch')))} "
            f"{'updates' if 'max_update' in budget else 'epochs'}, their valid BLEU at a new best within the last "
            f"{budget.get('patience', '?')} validations (not converged). Kept update per seed: the best checkpoint's, "
            f"then where the run stopped.")


COMPACT_COLUMNS = ("system", "seeds", "parameters", "BLEU mean ± sd", "p vs vanilla (Welch over seeds)",
                   "machine per seed", "kept update per seed")


def bin_table(data_bin: str, systems: Dict[str, Dict[int, Run]], summary: Dict, order: List[str],
              machines: Dict[str, str], compact: bool = False) -> List[str]:
    """The table's rows. The p column is Welch's test over seeds only: a paired bootstrap of one seed's
    translations measures that training (one seed retrained on another machine has moved by half a BLEU point), so
    the per-seed p values are shown unstarred and a one-seed row has no p."""
    rows = ["| system | seeds | parameters | BLEU mean ± sd | p vs vanilla (Welch over seeds) | BLEU per seed (95% CI; "
            "paired bootstrap p vs vanilla's same seed: one training each) | machine per seed | chrF++ | TER | RIBES | "
            "BLEU-1 | kept update per seed | train target words/s |", "|---" * 13 + "|"]
    for system in order:
        entry, by_seed = summary[system], systems[system]
        runs = []
        for run in entry["bleu_runs"]:
            text = f"{run['score']:.2f}" + (f" ± {run['ci']:.2f}" if run["ci"] is not None else "")
            if run["p_value"] is not None and system != BASELINE:
                text += f" (p {run['p_value']:.3f})"
            runs.append(text)
        if entry["test"] == "welch" and entry["p_value"] is not None:
            test = f"{entry['p_value']:.3f}{' *' if entry['p_value'] < 0.05 else ''}"
        else:
            test = "baseline" if system == BASELINE else ("n/a (one seed)" if len(entry["seeds"]) < 2 else "n/a")
        seed_machines = [machines[machine_text(by_seed[seed].record["machine"])] for seed in entry["seeds"]]
        machine_cell = ", ".join(seed_machines) + (" (mixed)" if len(set(seed_machines)) > 1 else "")
        training = [by_seed[seed].record["training"] for seed in entry["seeds"]]
        parameters = {t.get("parameters") for t in training}
        # words (pieces + EOS), the same count for every system; a record without it (written before
        # 2026-11-27 and not given one since) leaves the cell "?" rather than mixing in tokens/s
        speeds = [t.get("target_words_per_second") for t in training]
        speeds = speeds if all(speeds) else []
        # a speed is a figure of the machine, of how many runs shared it and of how the run's log was read: seeds
        # trained under different settings (8 jobs on one GPU, then 4) or read differently (records before
        # 2026-11-27 averaged the logged intervals, later ones take their median) are listed one by one, not
        # averaged into a speed no run had
        settings = {(machine_text(by_seed[seed].record["machine"]),
                     by_seed[seed].record["training"].get("speed_estimate", EARLIER_SPEED_ESTIMATE))
                    for seed in entry["seeds"]}
        kept_text = ", ".join(kept_update_text(t) for t in training)
        parameters_text = " / ".join(number_text(p) for p in sorted(parameters, key=lambda p: p or 0))
        if compact:
            rows.append(f"| {system} | {len(entry['seeds'])} | {parameters_text} | {mean_sd_text(entry['bleu'])} | "
                        f"{test} | {machine_cell} | {kept_text} |")
            continue
        if not speeds:
            speed_text = "?"
        elif len(settings) == 1:
            speed_text = number_text(mean(speeds))
        else:
            speed_text = "per seed: " + ", ".join(number_text(speed) for speed in speeds)
        rows.append(f"| {system} | {len(entry['seeds'])} | {parameters_text} | "
                    f"{mean_sd_text(entry['bleu'])} | {test} | {', '.join(runs)} | {machine_cell} | "
                    f"{mean_sd_text(entry['chrf++'])} | "
                    f"{mean_sd_text(entry['ter'])} | {mean_sd_text(entry['ribes'])} | "
                    f"{mean_sd_text(entry['bleu-1'])} | "
                    f"{kept_text} | {speed_text} |")
    if compact:
        rows[:2] = ["| " + " | ".join(COMPACT_COLUMNS) + " |", "|---" * len(COMPACT_COLUMNS) + "|"]
    return rows


def trees_rows(systems: Dict[str, Dict[int, Run]], order: List[str]) -> List[str]:
    rows = []
    for system in order:
        scored = [run.record["test"]["trees"] for _, run in sorted(systems[system].items())
                  if run.record["test"].get("trees")]
        if not scored:
            continue
        cells = [mean_sd_text(mean_sd([t[metric] for t in scored])) for metric in ("uas", "las")]
        # Li et al.'s B.3 measure for a graph decoder: its trees read with the references forced
        cells.append(mean_sd_text(mean_sd([t.get("on_references", {}).get("uas") for t in scored])))
        rows.append(f"| {system} | {scored[0].get('parser', '?')} | {len(scored)} | {' | '.join(cells)} | "
                    f"{', '.join(str(t['words']) for t in scored)} |")
    if not rows:
        return []
    return ["| system | parser of the trees | seeds | UAS mean ± sd | LAS mean ± sd | UAS on forced references | "
            "words per seed |", "|---" * 7 + "|", *rows]


def significant(p_value: Optional[float]) -> str:
    return " *" if p_value is not None and p_value < 0.05 else ""


def challenge_rows(systems: Dict[str, Dict[int, Run]], order: List[str]) -> List[str]:
    """Each challenge set's BLEU / chrF++ for every run that translated the sets, marked where a paired bootstrap
    against vanilla's translations of the same seed gives p < 0.05 (the references exported again from
    $DATA_ROOT: they are not committed)."""
    columns = [(system, seed) for system in order if system in systems for seed in sorted(systems[system])]
    if not columns:
        return []
    export = systems[columns[0][0]][columns[0][1]].record["export"]
    p_values, note = {}, ""
    paired = [seed for seed in sorted(systems.get(BASELINE, {}))
              if any(seed in by_seed for system, by_seed in systems.items() if system != BASELINE)]
    if not systems.get(BASELINE):
        note = " No marks: vanilla's challenge translations are not on record."
    elif paired:
        try:
            manifest, references = export_again(export["direction"], export["sets"], export["max_per_set"],
                                                export["seed"])
        except EvaluationError as error:
            note = f" No marks: the challenge sets could not be exported again ({error})."
        else:
            if lines_sha256(references) != export["references_sha256"]:
                note = " No marks: the challenge sets under $DATA_ROOT give other references than the runs had."
            for seed in paired if not note else []:
                hypotheses = {system: by_seed[seed].hypotheses for system, by_seed in systems.items()
                              if seed in by_seed}
                scored = score_challenge_hypotheses(manifest, references, hypotheses, set(), baseline=BASELINE)
                for row in scored["sets"]:
                    for system, metrics in row["bootstrap"]["systems"].items():
                        for key, values in metrics.items():
                            p_values[row["name"], system, seed, key] = values["p_value"]
    sets = {entry["name"]: entry for entry in systems[columns[0][0]][columns[0][1]].record["sets"]}
    rows = [f"Challenge sets (Choshen & Abend 2019), {export['direction']}: at most {export['max_per_set']} pairs "
            f"per set (seeded sample), BLEU / chrF++ of each run's translations; † Moses-tokenized; * p < 0.05, "
            f"paired bootstrap against vanilla's translations of the same seed: one training against one training, "
            f"not a method against a method, and {2 * len(sets) * max(0, len(columns) - 1)} such tests at once, "
            f"about one in twenty of them under 0.05 by chance.{note}", "",
            "| set | phenomenon | side | domain | distance | pairs | "
            + " | ".join(f"{system} seed {seed}" for system, seed in columns) + " |", "|---" * (6 + len(columns)) + "|"]
    for name in sorted(sets, key=lambda name: set_order(sets[name])):
        entry = sets[name]
        cells = [name + (" †" if entry["tokenized"] else ""), entry["phenomenon"], entry["side"], entry["domain"],
                 distance_text(entry), str(entry["sentences"]) + (f" ({entry['dropped']} dropped)"
                                                                   if entry["dropped"] else "")]
        for system, seed in columns:
            scored = {row["name"]: row for row in systems[system][seed].record["sets"]}[name]
            cells.append(" / ".join(f"{scored[key]['score']:.2f}{significant(p_values.get((name, system, seed, key)))}"
                                    for key in ("bleu", "chrf++")))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def precision(run: Run) -> str:
    return run.record["machine"].get("precision") or "fp32"


def by_precision(systems: Dict[str, Dict[int, Run]]) -> Dict[str, Dict[str, Dict[int, Run]]]:
    """The runs of one data-bin grouped by numeric precision: runs trained in fp16 and in float32 are not seeds of
    one recipe (the loss scaler skips updates, the sums round differently), so each precision gets a table."""
    groups: Dict[str, Dict[str, Dict[int, Run]]] = {}
    for system, by_seed in systems.items():
        for seed, run in by_seed.items():
            groups.setdefault(precision(run), {}).setdefault(system, {})[seed] = run
    return groups


def machine_text(machine: Dict) -> str:
    shown = f", {machine['precision']}" if machine.get("precision") else ""
    return f"{machine['name']}{shown}, {machine['jobs']} job(s) of {machine['threads']} thread(s)"


@dataclass(frozen=True)
class RunPlan:
    """What a profile asks to run: its data-bins, systems and seeds, and the seed whose runs translate the
    challenge sets (None: the profile translates none)."""
    data_bins: Tuple[str, ...]
    systems: Tuple[str, ...]
    seeds: Tuple[int, ...]
    challenge_seed: Optional[int] = None

    @classmethod
    def of(cls, profile) -> "RunPlan":
        return cls(tuple(profile.run_bins), tuple(profile.systems), tuple(profile.seeds),
                   profile.challenge_seed if profile.challenge_per_set > 0 else None)


def seeds_text(seeds: Sequence[int]) -> str:
    """1, 2, 3 -> "1-3"; 1, 3 -> "1, 3"."""
    seeds, parts = sorted(seeds), []
    start = previous = None
    for seed in seeds + [None]:
        if previous is not None and seed == previous + 1:
            previous = seed
            continue
        if start is not None:
            parts.append(f"{start}" if start == previous else f"{start}-{previous}")
        start = previous = seed
    return ", ".join(parts)


def not_run_yet(plan: RunPlan, runs: Dict[str, Dict[str, Dict[int, "Run"]]],
                challenges: Dict[str, Dict[str, Dict[int, "Run"]]]) -> List[str]:
    """The plan's runs with no complete record (each data-bin: system seeds), and its challenge-seed runs that
    are in the table without challenge scores: what a campaign still has to run, one line per data-bin."""
    lines = []
    for data_bin in plan.data_bins:
        done = runs.get(data_bin, {})
        missing = [(system, [seed for seed in plan.seeds if seed not in done.get(system, {})])
                   for system in plan.systems]
        missing = [(system, seeds) for system, seeds in missing if seeds]
        parts = []
        if not done:
            parts.append(f"no run yet ({len(plan.systems)} systems x seeds {seeds_text(plan.seeds)})")
        elif missing:
            parts.append("no complete record: "
                         + ", ".join(f"{system} {seeds_text(seeds)}" for system, seeds in missing))
        seed = plan.challenge_seed
        if seed is not None:
            untranslated = [system for system in plan.systems if seed in done.get(system, {})
                            and seed not in challenges.get(data_bin, {}).get(system, {})]
            if untranslated:
                parts.append(f"challenge sets not translated (seed {seed}): {', '.join(untranslated)}")
        if parts:
            lines.append(f"- {data_bin}: " + "; ".join(parts))
    return lines


def profile_report(root: Path, profile: str, preferred: List[str], budget: Optional[Dict] = None,
                   plots: bool = True, plan: Optional[RunPlan] = None, compact: bool = False) -> str:
    """The markdown of every data-bin of the profile's results (and, with `plots`, the learning curves beside
    them); with `plan`, the planned runs that have no complete record yet. `compact` (README's): the main table's
    BLEU, Welch p, machines and kept updates only, the rest left to the full report (docs/results.md)."""
    return profile_reports(root, profile, preferred, budget, plots, plan)[1 if compact else 0]


def profile_reports(root: Path, profile: str, preferred: List[str], budget: Optional[Dict] = None,
                    plots: bool = True, plan: Optional[RunPlan] = None) -> Tuple[str, str]:
    """(the full report, the compact one) of profile_report, the runs scored once."""
    runs, references, problems = load_runs(root, profile, budget)
    challenges, challenge_problems = load_challenges(root, profile, runs)
    problems += challenge_problems
    parts, compact = [], []
    tables = [(data_bin, kind, systems) for data_bin in sorted(runs)
              for kind, systems in sorted(by_precision(runs[data_bin]).items())]
    for data_bin, kind, systems in tables:
        # one precision per data-bin (the usual case): the names stay those of the data-bin alone
        mixed = sum(1 for other, _, _ in tables if other == data_bin) > 1
        label, stem = (f"{data_bin}, {kind} runs", f"curves.{kind}") if mixed else (data_bin, "curves")
        order = system_order(systems, preferred)
        _, summary = summarize_bin(systems, references[data_bin])
        first = next(iter(next(iter(systems.values())).values())).record
        machines = machine_labels(systems, order)
        parts.append(f"**{label}** (test2016, {len(references[data_bin])} sentences; budget "
                     f"{json.dumps(budget if budget is not None else first['budget'])})\n")
        read_budget = budget if budget is not None else first["budget"]
        own = " ".join(text for text in (own_budgets_text(systems, order, read_budget),
                                         convergence_text(systems, order, read_budget)) if text)
        if own:
            parts.append(own + "\n")
        parts.append("Machines (a row whose seeds ran on more than one is marked mixed: its sd holds the "
                     "machines' differences too):\n\n"
                     + "\n".join(f"- {letter}: {text}" for text, letter in machines.items()) + "\n")
        compact += parts[-(3 if own else 2):]
        compact.append("\n".join(bin_table(data_bin, systems, summary, order, machines, compact=True)) + "\n")
        parts.append("\n".join(bin_table(data_bin, systems, summary, order, machines)) + "\n")
        trees = trees_rows(systems, order)
        if trees:
            parts.append("Generated trees, against the target parser's parse of the same words (a graph decoder's "
                         "also read with the test references forced, against the parse of the references: Li et "
                         "al.'s appendix B.3):\n\n"
                         + "\n".join(trees) + "\n")
        challenge = challenge_rows({system: {seed: run for seed, run in by_seed.items() if seed in systems[system]}
                                    for system, by_seed in challenges.get(data_bin, {}).items()
                                    if system in systems}, order)
        if challenge:
            parts.append("\n".join(challenge) + "\n")
        if plots:
            curves = {system: {seed: run.record["curves"] for seed, run in sorted(systems[system].items())}
                      for system in order}
            for metric in ("bleu", "loss"):
                plot_learning_curves(curves, Path(root) / profile / data_bin / f"{stem}.{metric}.png", metric,
                                     title=f"{data_bin}: valid {'BLEU' if metric == 'bleu' else 'loss'} against "
                                           f"updates ({profile}; mean over seeds, band: min-max)")
        parts.append(f"Learning curves: `results/{profile}/{data_bin}/{stem}.bleu.png`, `{stem}.loss.png`.\n")
    if not runs:
        parts.append(f"No complete run of profile {profile} yet.\n")
        compact.append(parts[-1])
    remaining = not_run_yet(plan, runs, challenges) if plan is not None else []
    if remaining:
        parts.append(f"Still to run (the profile's systems x seeds {seeds_text(plan.seeds)}):\n\n"
                     + "\n".join(remaining) + "\n")
    if problems:
        parts.append("Left out (not averaged in):\n\n" + "\n".join(f"- {p}" for p in problems) + "\n")
    if runs:
        left = " and the runs left out" if problems else ""
        compact.append(f"Per-seed scores and bootstraps, chrF++, TER, RIBES, speeds, generated trees, challenge sets, "
                       f"learning curves, what is still to run{left}: the full report in "
                       f"[docs/results.md](docs/results.md).\n")
    return "\n".join(parts), "\n".join(compact)


def replace_section(path: Path, profile: str, text: str) -> bool:
    """Put `text` between the profile's markers in `path`; False when the file has no such markers."""
    begin, end = f"<!-- results:{profile} begin -->", f"<!-- results:{profile} end -->"
    content = Path(path).read_text(encoding="utf-8")
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(content):
        return False
    Path(path).write_text(pattern.sub(lambda _: f"{begin}\n{text.rstrip()}\n{end}", content), encoding="utf-8")
    return True


def section(path: Path, profile: str) -> Optional[str]:
    """The text between the profile's markers in `path` (None without markers)."""
    begin, end = f"<!-- results:{profile} begin -->", f"<!-- results:{profile} end -->"
    match = re.search(re.escape(begin) + r"\n(.*?)\n" + re.escape(end), Path(path).read_text(encoding="utf-8"),
                      re.DOTALL)
    return match.group(1) if match else None


def reread_speeds(root: Path, profile: str, out: Path) -> List[str]:
    """Re-read the train speed of the profile's records whose train log is still in `out` (the compare.py --out
    folder that trained them) with compare.py's current reading of the log (its SPEED_ESTIMATE), for records written
    with an earlier one, and of sampled-prefix runs recorded before their speed counted every target token of
    their batches (compare.speed_record: their epoch's positions are counted on their data-bin, found under `out`
    or a folder above it, as the record's train command names it). Returns what changed, one line per record."""
    from compare import SPEED_ESTIMATE, speed_record, train_speed
    from systems import MULTI30K_SYSTEMS, sampled_prefixes

    changed = []
    for path in run_files(Path(root) / profile, ".json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        training = record["training"]
        log = Path(out) / "systems" / record["data_bin"] / record["system"] / f"seed{record['seed']}" / "train.log"
        sampled = record["system"] in MULTI30K_SYSTEMS and sampled_prefixes(record["system"]) > 0
        current = training.get("speed_estimate") == SPEED_ESTIMATE and (
            not sampled or "positions_per_epoch" in training)
        if current or not log.exists():
            continue
        tokens = train_speed(log)
        if tokens is None:
            continue
        positions = training.get("positions_per_epoch") or (recorded_positions(path, record, Path(out))
                                                            if sampled else None)
        before = training.get("target_words_per_second")
        training.update(speed_record(tokens, training["target_word_share"], positions))
        write_record(path, record)
        changed.append(f"{path}: train target words/s {before} -> {training['target_words_per_second']}")
    return changed


def recorded_positions(path: Path, record: Dict, out: Path) -> Dict[str, int]:
    """compare.sampled_positions of a record's run, on the data-bin its train command names, found under `out` or
    a folder above it (the command's paths are relative to the repository the run ran in)."""
    import shlex

    from compare import sampled_positions

    command = shlex.split(record["commands"]["train"])
    data = command[1]
    base = next((folder for folder in (out, *out.parents) if (folder / data / "syntax.json").exists()), None)
    if base is None:
        raise SystemExit(f"{path}: its data-bin {data} is under neither {out} nor a folder above it: its sampled "
                         "positions per epoch cannot be counted")
    command[1] = str(base / data)
    command[command.index("--user-dir") + 1] = str(REPO / "fairseq_syntax")
    return sampled_positions(command, record["system"])


def main(argv=None):
    from profiles import load_profile
    from systems import MULTI30K_SYSTEMS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", help="a profile of examples/multi30k/profiles/ or a .toml path")
    parser.add_argument("--results", default=str(RESULTS), help="the results folder (default: results/)")
    parser.add_argument("--readme", help="a file with the profile's markers to update (e.g. README.md)")
    parser.add_argument("--results-doc", help="another such file (e.g. docs/results.md)")
    parser.add_argument("--no-plots", action="store_true", help="the tables only")
    parser.add_argument("--reread-speeds", metavar="OUT",
                        help="first re-read the train speed of records written with an earlier reading of the train "
                             "log, from the train logs in OUT (the compare.py --out folder of their runs)")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile, list(MULTI30K_SYSTEMS))
    if args.reread_speeds:
        for line in reread_speeds(Path(args.results), profile.name, Path(args.reread_speeds)):
            print(line, file=sys.stderr)
    text, compact = profile_reports(Path(args.results), profile.name, list(MULTI30K_SYSTEMS),
                                    profile.budget_record(), plots=not args.no_plots, plan=RunPlan.of(profile))
    # README gets the compact table, the results document the whole report
    for target, section in ((args.readme, compact), (args.results_doc, text)):
        if target and not replace_section(Path(target), profile.name, section):
            raise SystemExit(f"{target} has no <!-- results:{profile.name} begin/end --> markers")
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
