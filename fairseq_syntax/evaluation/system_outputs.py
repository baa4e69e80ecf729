"""Reading what `fairseq-syntax-evaluate` scores: system files (fairseq-generate output or plain hypotheses,
sentencepiece pieces or word-level tokens decoded), references, linemaps and the files of a fairseq-syntax data-bin
split.

A system file is either `fairseq-generate` output (lines `H-<id>\\t<score>\\t<pieces>`, ids in any order, the
first H line of an id is taken) or a plain file of one hypothesis per line.
"""
import json
import re
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from . import challenge_sets
from .metrics import EvaluationError

GENERATE_LINE = re.compile(r"^([HSTDP])-(\d+)\t")
PIECE_MARK = "\u2581"


def parse_system_spec(spec: str) -> Tuple[str, Path]:
    """"NAME=PATH" -> (NAME, PATH); a bare PATH is named after its file name."""
    if "=" in spec and not Path(spec).exists():
        name, path = spec.split("=", 1)
        if not name:
            raise EvaluationError(f"--system {spec!r}: empty system name")
        return name, Path(path)
    return Path(spec).name, Path(spec)


def read_text_lines(path: Path, what: str = "file") -> List[str]:
    path = Path(path)
    if not path.is_file():
        raise EvaluationError(f"{what} not found: {path}")
    try:
        with challenge_sets.open_text(path) as f:
            return [line.rstrip("\n").rstrip("\r") for line in f]
    except UnicodeDecodeError as error:
        raise EvaluationError(f"{path}: not UTF-8 text ({error})") from None


def is_generate_output(lines: Sequence[str]) -> bool:
    """fairseq-generate output: some line is `H-<id>\\t...` (or S-/T-/D-/P-)."""
    return any(GENERATE_LINE.match(line) for line in lines)


def parse_generate_output(lines: Sequence[str], path: Path) -> Tuple[Dict[int, str], Dict[int, str]]:
    """{id: hypothesis field} from the H lines (the first H line per id: the best of an n-best list) and
    {id: source field} from the S lines, as written (pieces, not decoded)."""
    hypotheses: Dict[int, str] = {}
    sources: Dict[int, str] = {}
    for number, line in enumerate(lines, start=1):
        match = GENERATE_LINE.match(line)
        if not match:
            continue
        kind, sentence_id = match.group(1), int(match.group(2))
        fields = line.split("\t")
        if kind == "H":
            if len(fields) < 2:
                raise EvaluationError(f"{path}:{number}: H line without a score field")
            if sentence_id not in hypotheses:
                hypotheses[sentence_id] = fields[2] if len(fields) > 2 else ""
        elif kind == "S" and sentence_id not in sources:
            sources[sentence_id] = fields[1] if len(fields) > 1 else ""
    return hypotheses, sources


class PieceDecoder:
    """Turns sentencepiece pieces back into text with the data-bin's model (None: text is kept as it is, and
    pieces are an error). `words`: the tokens are those of a word-level data-bin (fairseq_syntax/data/word_codec.py,
    "▁word" and attached words), decoded without a model."""

    def __init__(self, spm_model: Optional[Path], words: bool = False):
        self.spm_model = spm_model
        self.encoder = None
        if words and spm_model is None:
            from fairseq_syntax.data.word_codec import WordCodec
            self.encoder = WordCodec()
        elif spm_model is not None:
            if not Path(spm_model).is_file():
                raise EvaluationError(f"sentencepiece model not found: {spm_model}")
            from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder
            self.encoder = WordAlignedEncoder(str(spm_model))

    def decode_all(self, lines: Sequence[str], path: Path, what: str = "hypotheses") -> List[str]:
        """Decoded lines when they hold pieces (a model is needed then), else the lines as they are (with a
        warning for hypotheses when a model was given: pieces were expected)."""
        has_pieces = any(PIECE_MARK in line for line in lines)
        if self.encoder is None:
            if has_pieces:
                raise EvaluationError(f"{path}: the {what} are sentencepiece pieces ({PIECE_MARK}); give "
                                      f"--spm-model (or --data-bin) to decode them")
            return list(lines)
        if not has_pieces:
            if what == "hypotheses":
                warnings.warn(f"{path}: no sentencepiece pieces ({PIECE_MARK}) in the file; its lines are used as "
                              f"they are")
            return list(lines)
        # the transition tokens of a --target-transitions system (arcs, <attached>) are structure, not text
        from fairseq_syntax.data.transitions.tokens import strip_transitions

        return [self.encoder.decode(strip_transitions(line.split())) for line in lines]


class SystemOutput:
    """One system's hypotheses, read from a file and checked against the number of references."""

    def __init__(self, name: str, path: Path, hypotheses: List[str], file_format: str,
                 sources: Optional[List[str]] = None):
        self.name, self.path, self.hypotheses, self.format, self.sources = name, path, hypotheses, file_format, sources
        self.dropped: List[int] = []  # 0-based lines that preprocessing dropped (empty hypotheses), with a linemap


def read_system(name: str, path: Path, expected: int, decoder: PieceDecoder, reference_desc: str,
                linemap: Optional[List[int]] = None) -> SystemOutput:
    """Hypotheses of one system, one per reference line. Generate output must hold exactly the ids
    0..expected-1; a plain file exactly `expected` lines. With `linemap` (a data-bin's {split}.linemap: the
    1-based original line of every kept sentence) the file holds one hypothesis per kept sentence and lines that
    preprocessing dropped get an empty hypothesis (SystemOutput.dropped lists them)."""
    lines = read_text_lines(path, f"system {name!r} file")
    count = expected if linemap is None else len(linemap)
    if is_generate_output(lines):
        raw, raw_sources = parse_generate_output(lines, path)
        ids = set(raw)
        if ids != set(range(count)):
            missing = sorted(set(range(count)) - ids)
            extra = sorted(ids - set(range(count)))
            detail = []
            if missing:
                detail.append(f"{len(missing)} ids missing (first: {missing[:10]})")
            if extra:
                detail.append(f"{len(extra)} ids beyond them (first: {extra[:10]})")
            raise EvaluationError(f"{path}: fairseq-generate output for system {name!r} has hypotheses for "
                                  f"{len(ids)} sentence ids, but {reference_desc} has {count} lines: "
                                  f"{'; '.join(detail)}")
        hypotheses = decoder.decode_all([raw[i] for i in range(count)], path)
        sources = None
        if set(raw_sources) == ids:  # the S lines, for length buckets when no source file is given
            try:
                sources = decoder.decode_all([raw_sources[i] for i in range(count)], path, "sources")
            except EvaluationError:
                sources = None
        file_format = "fairseq-generate"
    else:
        if len(lines) != count:
            raise EvaluationError(f"{path}: system {name!r} has {len(lines)} hypothesis lines, but {reference_desc} "
                                  f"has {count} lines")
        hypotheses = decoder.decode_all(lines, path)
        sources = None
        file_format = "text"
    output = SystemOutput(name, Path(path), hypotheses, file_format, sources)
    if linemap is not None:
        full = [""] * expected
        kept = set()
        for hypothesis, line_number in zip(hypotheses, linemap):
            if not 1 <= line_number <= expected:
                raise EvaluationError(f"linemap line {line_number} is outside 1..{expected}")
            full[line_number - 1] = hypothesis
            kept.add(line_number - 1)
        output.dropped = sorted(set(range(expected)) - kept)
        output.hypotheses = full
        output.sources = None
    return output


def read_linemap(path: Path) -> List[int]:
    lines = [line for line in read_text_lines(path, "linemap") if line.strip()]
    try:
        return [int(line) for line in lines]
    except ValueError:
        raise EvaluationError(f"{path}: a linemap holds one line number per line") from None


def is_word_level(info: dict) -> bool:
    """Whether a data-bin's syntax.json (as read) records word-level tokens (--word-vocabulary)."""
    return (info.get("segmentation") or {}).get("kind") == "words"


def data_bin_files(data_bin: Path, split: str) -> Dict[str, object]:
    """References, sources, sentencepiece model (None for a word-level data-bin, whose `words` is True) and
    linemap of a fairseq-syntax data-bin split."""
    data_bin = Path(data_bin)
    info_path = data_bin / "syntax.json"
    if not info_path.is_file():
        raise EvaluationError(f"{data_bin} is not a fairseq-syntax data-bin (no syntax.json)")
    info = json.loads(info_path.read_text())
    src, tgt = info["source_lang"], info["target_lang"]
    spm = data_bin / info["spm_model"] if info.get("spm_model") else None
    files = {"references": data_bin / f"{split}.{tgt}.txt", "sources": data_bin / f"{split}.{src}.txt",
             "spm_model": spm if spm is not None and spm.is_file() else None,
             "linemap": data_bin / f"{split}.linemap", "words": is_word_level(info)}
    for key in ("references", "sources"):
        if not files[key].is_file():
            raise EvaluationError(f"{files[key]} not found (is {split!r} a split of {data_bin}?)")
    if not files["linemap"].is_file():
        files["linemap"] = None
    return files
