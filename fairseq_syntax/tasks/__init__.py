from . import syntax_translation  # noqa: F401
