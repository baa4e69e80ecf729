"""What the reports of `fairseq-syntax-evaluate`'s tools share: metric display names, number formatting for the
Markdown tables, and the plots module (imported only when a figure is drawn)."""
from typing import Optional

METRIC_TITLES = {"bleu": "BLEU", "chrf++": "chrF++", "ter": "TER", "ribes": "RIBES", "bleu-1": "BLEU-1"}


def plots():
    """The plots module, imported when a figure is drawn (matplotlib's import is slow and chatty)."""
    from . import plots as plots_module
    return plots_module


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def fmt_p(value: Optional[float]) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" + (" *" if value < 0.05 else "")
