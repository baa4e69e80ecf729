"""Scores over training seeds: one evaluator result (results.json) per seed, each with the same systems, become
mean +- standard deviation per system and metric, beside each run's own bootstrap interval.

The significance mark says which test made it: with two or more seeds per system, Welch's t-test on the per-seed
corpus BLEU of the system against the baseline's (a seed's luck is the variance that matters between methods);
with one seed, sacrebleu's paired bootstrap of that run (test-set sampling only)."""
import math
from statistics import mean, stdev
from typing import Dict, Mapping, Optional, Sequence

from scipy import stats

METRICS = ("bleu", "chrf++", "ter", "ribes", "bleu-1")


def summarize_seeds(per_seed: Mapping[int, Mapping], baseline: Optional[str]) -> Dict[str, Dict]:
    """`per_seed`: seed -> the evaluator's results.json of that seed's systems. Returns system -> {"seeds": [...],
    metric: {"mean", "sd" (None with one seed), "values"}, "bleu_runs": [{"seed", "score", "ci", "p_value"}],
    "test": "welch" | "bootstrap" | None, "p_value"} (p against the baseline; None for the baseline itself)."""
    seeds = sorted(per_seed)
    # every system of any seed, in first-seen order (a system may lack a seed: its other seeds still count)
    systems = list(dict.fromkeys(name for seed in seeds for name in per_seed[seed]["systems"]))
    summary: Dict[str, Dict] = {}
    for system in systems:
        present = [seed for seed in seeds if system in per_seed[seed]["systems"]]
        entry: Dict[str, object] = {"seeds": present}
        for metric in METRICS:
            entry[metric] = mean_sd([per_seed[seed]["systems"][system][metric]["score"] for seed in present
                                     if per_seed[seed]["systems"][system].get(metric) is not None])
        runs = []
        for seed in present:
            boot = per_seed[seed].get("bootstrap")
            boot_entry = boot["systems"][system]["bleu"] if boot else {}
            runs.append({"seed": seed, "score": per_seed[seed]["systems"][system]["bleu"]["score"],
                         "ci": boot_entry.get("ci"), "p_value": boot_entry.get("p_value")})
        entry["bleu_runs"] = runs
        summary[system] = entry
    for system, entry in summary.items():
        entry["test"], entry["p_value"] = None, None
        if baseline is None or system == baseline or baseline not in summary:
            continue
        ours, theirs = entry["bleu"]["values"], summary[baseline]["bleu"]["values"]
        if len(ours) > 1 and len(theirs) > 1:
            entry["test"], entry["p_value"] = "welch", welch_p_value(ours, theirs)
        elif len(entry["bleu_runs"]) == 1:
            entry["test"], entry["p_value"] = "bootstrap", entry["bleu_runs"][0]["p_value"]
    return summary


def mean_sd(values: Sequence[Optional[float]]) -> Dict[str, object]:
    """{"values", "mean", "sd"} of the runs that have the score (None marks a run without it, e.g. the LAS of
    unlabeled trees): mean None without any, sd None with fewer than two."""
    present = [value for value in values if value is not None]
    return {"values": present, "mean": mean(present) if present else None,
            "sd": stdev(present) if len(present) > 1 else None}


def welch_p_value(a, b) -> Optional[float]:
    """Two-sided p of Welch's t-test (unequal variances); None when both samples have no spread (t undefined)."""
    if stdev(a) == 0 and stdev(b) == 0:
        return None
    p_value = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return None if math.isnan(p_value) else p_value


def mean_sd_text(entry: Mapping, digits: int = 2) -> str:
    """"mean ± sd" (or the single value)."""
    if entry["mean"] is None:
        return "n/a"
    if entry["sd"] is None:
        return f"{entry['mean']:.{digits}f}"
    return f"{entry['mean']:.{digits}f} ± {entry['sd']:.{digits}f}"
