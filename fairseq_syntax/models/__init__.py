from . import sizes, syntax_transformer, pascal_presets  # noqa: F401
