"""The evaluation figures, drawn with matplotlib's object API on the Agg canvas (no pyplot, no display, no global
backend switch): BLEU with confidence intervals per system, BLEU by source length, an attention heatmap of one
head over one sentence, and a dependency tree. Every function writes one image file (PNG unless the path says
otherwise) and returns its path."""
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Arc, Rectangle

PathLike = Union[str, Path]


def _new_figure(width: float, height: float) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _save(figure: Figure, path: PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, bbox_inches="tight")
    return path


def plot_scores_with_ci(systems: Mapping[str, Mapping[str, Optional[float]]], path: PathLike,
                        metric: str = "BLEU", baseline: Optional[str] = None,
                        title: Optional[str] = None) -> Path:
    """One bar per system at its corpus score, with the bootstrap 95% confidence interval (mean +- ci) as an
    error bar. `systems`: name -> {"score", "mean", "ci", "p_value"} (paired_bootstrap's per-metric entries;
    mean/ci/p_value may be None). Systems that differ significantly from the baseline (p < 0.05) get a star."""
    names = list(systems)
    scores = [float(systems[n]["score"]) for n in names]
    figure = _new_figure(max(4.0, 1.1 * len(names) + 2), 4.0)
    ax = figure.subplots()
    colors = ["tab:gray" if n == baseline else "tab:blue" for n in names]
    x = np.arange(len(names))
    ax.bar(x, scores, color=colors, alpha=0.8)
    for i, name in enumerate(names):
        entry = systems[name]
        if entry.get("ci") is not None and entry.get("mean") is not None:
            ax.errorbar(i, entry["mean"], yerr=entry["ci"], fmt="o", color="black", capsize=6, markersize=3)
        label = f"{scores[i]:.2f}"
        p_value = entry.get("p_value")
        if p_value is not None and p_value < 0.05:
            label += " *"
        top = scores[i] + (entry.get("ci") or 0.0)
        ax.annotate(label, (i, top), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels([f"{n}\n(baseline)" if n == baseline else n for n in names], fontsize=8)
    ax.set_ylabel(metric)
    ax.set_ylim(0, max(scores + [1.0]) * 1.2)
    has_ci = any(systems[n].get("ci") is not None for n in names)
    default_title = f"{metric} with bootstrap 95% confidence intervals" if has_ci else metric
    if baseline is not None and has_ci:
        default_title += "\n(* p < 0.05 against the baseline)"
    ax.set_title(title or default_title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return _save(figure, path)


def plot_bleu_by_length(systems: Mapping[str, Sequence[Mapping[str, object]]], path: PathLike,
                        metric: str = "bleu", title: Optional[str] = None) -> Path:
    """One line per system over the source-length buckets (bleu_by_length's output, same buckets for all
    systems); the x labels give each bucket's sentence count. Empty buckets are left out of the line."""
    names = list(systems)
    if not names:
        raise ValueError("no systems to plot")
    first = systems[names[0]]
    labels = [f"{b['bucket']}\n(n={b['sentences']})" for b in first]
    figure = _new_figure(max(5.0, 0.9 * len(labels) + 2), 4.0)
    ax = figure.subplots()
    x = np.arange(len(labels))
    for name in names:
        values = [np.nan if b.get(metric) is None else float(b[metric]) for b in systems[name]]
        if len(values) != len(labels):
            raise ValueError(f"system {name!r} has {len(values)} buckets, {names[0]!r} has {len(labels)}")
        ax.plot(x, values, marker="o", label=name)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel(metric.upper() if metric == "bleu" else metric)
    ax.set_title(title or f"{metric.upper() if metric == 'bleu' else metric} by source length", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(figure, path)


def plot_attention_heatmap(weights, query_tokens: Sequence[str], key_tokens: Optional[Sequence[str]] = None,
                           path: PathLike = "attention.png", title: str = "attention",
                           highlight: Optional[Sequence[Optional[int]]] = None) -> Path:
    """Heatmap of one attention head over one sentence: weights[i, j] is how much query token i attends to key
    token j (rows: queries, columns: keys; self-attention when key_tokens is None). `highlight` gives, per query
    row, a key column to outline (e.g. the position of each word's syntactic parent for a syntax head), or None."""
    weights = np.asarray(weights, dtype=float)
    key_tokens = list(query_tokens if key_tokens is None else key_tokens)
    if weights.ndim != 2 or weights.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(f"attention weights of shape {weights.shape} for {len(query_tokens)} query and "
                         f"{len(key_tokens)} key tokens")
    size = 0.32
    figure = _new_figure(max(4.0, size * len(key_tokens) + 2.5), max(3.5, size * len(query_tokens) + 1.5))
    ax = figure.subplots()
    image = ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=max(float(weights.max()), 1e-9))
    ax.set_xticks(np.arange(len(key_tokens)))
    ax.set_xticklabels(key_tokens, rotation=90, fontsize=7)
    ax.set_yticks(np.arange(len(query_tokens)))
    ax.set_yticklabels(query_tokens, fontsize=7)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if highlight is not None:
        for row, column in enumerate(highlight):
            if column is not None and 0 <= column < len(key_tokens):
                ax.add_patch(Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.2))
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    ax.set_title(title, fontsize=10)
    return _save(figure, path)


def plot_dependency_tree(words: Sequence[str], heads: Sequence[int], labels: Optional[Sequence[str]] = None,
                         path: PathLike = "tree.png", title: Optional[str] = None) -> Path:
    """A dependency tree as arcs above the sentence (CoNLL-U heads: 1-based, 0 = root), each arc labelled at its
    top and pointing at the dependent."""
    n = len(words)
    if len(heads) != n or (labels is not None and len(labels) != n):
        raise ValueError(f"{n} words, {len(heads)} heads, {None if labels is None else len(labels)} labels")
    if any(not 0 <= int(h) <= n for h in heads):
        raise ValueError(f"a head is outside 0..{n}: {list(heads)}")
    spacing = 1.0
    max_span = max([abs(int(h) - (i + 1)) for i, h in enumerate(heads) if int(h) != 0] + [1])
    figure = _new_figure(max(4.0, 0.9 * n + 1), 1.2 + 0.45 * max_span)
    ax = figure.subplots()
    for i, word in enumerate(words):
        ax.text(i * spacing, 0, word, ha="center", va="top", fontsize=9)
    for i, head in enumerate(heads):
        head = int(head)
        label = "" if labels is None else str(labels[i])
        if head == 0:
            top = 0.5 * max_span + 0.8
            ax.annotate("", xy=(i * spacing, 0.1), xytext=(i * spacing, top),
                        arrowprops=dict(arrowstyle="->", color="tab:red"))
            ax.text(i * spacing, top, f"root{(' ' + label) if label and label.lower() != 'root' else ''}",
                    ha="center", va="bottom", fontsize=7, color="tab:red")
            continue
        start, end = sorted((head - 1, i))
        center, width = (start + end) / 2 * spacing, (end - start) * spacing
        height = 0.5 * (end - start) + 0.3
        ax.add_patch(Arc((center, 0.1), width, 2 * height, theta1=0, theta2=180, color="tab:blue", linewidth=1))
        ax.annotate("", xy=(i * spacing, 0.1), xytext=(i * spacing + (0.05 if head - 1 > i else -0.05), 0.35),
                    arrowprops=dict(arrowstyle="->", color="tab:blue"))
        if label:
            ax.text(center, 0.1 + height, label, ha="center", va="bottom", fontsize=7,
                    bbox=dict(facecolor="white", edgecolor="none", pad=0.5))
    ax.set_xlim(-1, n * spacing)
    ax.set_ylim(-0.6, 0.5 * max_span + 1.4)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)
    return _save(figure, path)


def plot_challenge_scores(table: Mapping[str, Mapping[str, Optional[float]]], path: PathLike,
                          metric: str = "BLEU", title: Optional[str] = None) -> Path:
    """Grouped bars: one group per challenge set (row key), one bar per system (inner keys)."""
    rows = list(table)
    systems = list(dict.fromkeys(s for row in table.values() for s in row))  # in order of appearance
    figure = _new_figure(max(5.0, 0.5 * len(rows) * max(1, len(systems)) + 2), 4.5)
    ax = figure.subplots()
    width = 0.8 / max(1, len(systems))
    x = np.arange(len(rows))
    for k, system in enumerate(systems):
        values = [np.nan if table[r].get(system) is None else float(table[r][system]) for r in rows]
        ax.bar(x + (k - (len(systems) - 1) / 2) * width, values, width, label=system)
    ax.set_xticks(x)
    ax.set_xticklabels(rows, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} per challenge set", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(figure, path)


__all__ = ["plot_scores_with_ci", "plot_bleu_by_length", "plot_attention_heatmap", "plot_dependency_tree",
           "plot_challenge_scores"]

