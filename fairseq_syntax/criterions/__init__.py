from . import syntax_label_smoothed_cross_entropy  # noqa: F401
