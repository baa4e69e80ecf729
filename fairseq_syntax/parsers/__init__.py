"""Parser backends, chosen by spec: `spacy:MODEL`, `supar:PATH` or `conllu`."""
from .base import ParsedSentence, ParseError, Parser  # noqa: F401


def build_parser(spec: str, lang: str, workers: int = 1, distributions=None) -> Parser:
    """`distributions` (supar_parser.DistributionOptions): also compute LDD (SuPar only)."""
    kind, _, argument = spec.partition(":")
    if distributions is not None and kind != "supar":
        raise SystemExit(f"labeled dependency distributions (--source-ldd) come from a SuPar biaffine parser's "
                         f"scores; --source-parser {spec} has none: use supar:PATH (fairseq-syntax-train-parser)")
    if kind == "spacy" and argument:
        from .spacy_parser import SpacyParser

        return SpacyParser(argument, n_process=workers)
    if kind == "supar" and argument:
        from .supar_parser import SuparParser

        parser = SuparParser(argument, lang, distributions=distributions, arc_probs=False)
        parser.name = spec
        return parser
    raise SystemExit(f"unknown parser spec {spec!r}: use spacy:MODEL, supar:PATH or conllu")
