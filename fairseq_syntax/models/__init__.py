from . import syntax_transformer, pascal_presets  # noqa: F401
