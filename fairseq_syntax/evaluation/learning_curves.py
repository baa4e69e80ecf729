"""Learning curves from fairseq-train logs: the validations a run logged (valid loss and, with --eval-bleu, valid
BLEU, each at its update count), and one figure with a line per system (the mean over its seeds, the seeds' range
shaded), so a comparison shows where methods cross rather than one point of the race."""
import re
from pathlib import Path
from statistics import mean
from typing import Dict, List, Mapping, Optional, Union

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PathLike = Union[str, Path]
# fairseq's simple log format: "... | valid on 'valid' subset | loss 4.8 | nll_loss 3.4 | ... | bleu 21.3 | ...
# | num_updates 400 | best_bleu 21.3"
VALID_LINE = re.compile(r"\| valid on '(?P<subset>[^']+)' subset \|(?P<fields>.*)$")
FIELD = re.compile(r"\s*(?P<key>[a-z_]+) (?P<value>-?[0-9.]+(?:e[-+]?[0-9]+)?)\s*")


def read_validations(train_log: PathLike, subset: str = "valid") -> List[Dict[str, float]]:
    """The validations of a fairseq-train log (simple or tqdm format) in order: dicts with num_updates, loss and,
    when logged, bleu, nll_loss, ppl. A resumed run's log repeats no update count: a later line replaces it."""
    points: Dict[int, Dict[str, float]] = {}
    for line in Path(train_log).read_text(errors="replace").splitlines():
        match = VALID_LINE.search(line)
        if match is None or match.group("subset") != subset:
            continue
        fields = {}
        for part in match.group("fields").split("|"):
            field = FIELD.fullmatch(part)
            if field:
                fields[field.group("key")] = float(field.group("value"))
        if "num_updates" in fields and "loss" in fields:
            fields["num_updates"] = int(fields["num_updates"])
            points[fields["num_updates"]] = fields
    return [points[n] for n in sorted(points)]


def best_validation(points: List[Dict[str, float]], metric: str = "bleu") -> Optional[Dict[str, float]]:
    """The validation a best-checkpoint rule keeps: highest BLEU (first of equals), or lowest loss."""
    scored = [p for p in points if metric in p]
    if not scored:
        return None
    if metric == "loss":
        return min(scored, key=lambda p: p[metric])
    return max(scored, key=lambda p: p[metric])


def plot_learning_curves(curves: Mapping[str, Mapping[object, List[Dict[str, float]]]], path: PathLike,
                         metric: str = "bleu", title: Optional[str] = None) -> Path:
    """`curves`: system -> seed -> validations (read_validations). One line per system: the mean over the seeds
    that validated at that update count; the band spans the seeds' minimum and maximum."""
    figure = Figure(figsize=(7.0, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for system, seeds in curves.items():
        by_update: Dict[int, List[float]] = {}
        for points in seeds.values():
            for point in points:
                if metric in point:
                    by_update.setdefault(int(point["num_updates"]), []).append(point[metric])
        if not by_update:
            continue
        updates = sorted(by_update)
        values = [by_update[u] for u in updates]
        line, = ax.plot(updates, [mean(v) for v in values], marker="o", markersize=3,
                        label=f"{system} ({len(seeds)} seed{'s' if len(seeds) != 1 else ''})")
        if len(seeds) > 1:
            ax.fill_between(updates, [min(v) for v in values], [max(v) for v in values], color=line.get_color(),
                            alpha=0.15, linewidth=0)
    ax.set_xlabel("updates")
    ax.set_ylabel({"bleu": "valid BLEU", "loss": "valid loss"}.get(metric, metric))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or f"{'valid BLEU' if metric == 'bleu' else 'valid ' + metric} against updates "
                          "(mean over seeds, band: min-max)", fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, bbox_inches="tight")
    return path
