"""Parser backends, chosen by spec: `spacy:MODEL`, `supar:PATH` or `conllu`."""
from .base import ParsedSentence, ParseError, Parser  # noqa: F401


def build_parser(spec: str, lang: str, workers: int = 1) -> Parser:
    kind, _, argument = spec.partition(":")
    if kind == "spacy" and argument:
        from .spacy_parser import SpacyParser

        return SpacyParser(argument, n_process=workers)
    if kind == "supar" and argument:
        from .supar_parser import SuparParser

        parser = SuparParser(argument, lang)
        parser.name = spec
        return parser
    raise SystemExit(f"unknown parser spec {spec!r}: use spacy:MODEL, supar:PATH or conllu")
