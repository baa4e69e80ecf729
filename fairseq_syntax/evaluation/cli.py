"""`fairseq-syntax-evaluate`: score translations against references, and score challenge sets.

    fairseq-syntax-evaluate --system vanilla=gen.vanilla.txt --system pascal=gen.pascal.txt --baseline vanilla \\
        --data-bin DATA_BIN --gen-subset test --out-dir results/
    fairseq-syntax-evaluate --system hyp.txt --references ref.de --sources src.en

A system file is either `fairseq-generate` output (lines `H-<id>\\t<score>\\t<pieces>`, ids in any order, the
first H line of an id is taken, pieces decoded with the sentencepiece model) or a plain file of one hypothesis
per line. Reported per system: sacrebleu BLEU, chrF++ and TER with their signatures, RIBES (nltk), BLEU per
source-length bucket, and (with --baseline) sacrebleu's paired bootstrap test against the baseline with 95%
confidence intervals; optionally UAS/LAS of generated trees against a parser's parse of the same output, and the
plots. --out-dir gets results.json, results.md and the PNG plots.

    fairseq-syntax-evaluate attention --path CHECKPOINT --data-bin DATA_BIN --index 0 --layer 0 --head 0 --out-dir D
    fairseq-syntax-evaluate challenge list
    fairseq-syntax-evaluate challenge export --direction en-de --out-dir CH [--sets paper|all|NAME,...]
    fairseq-syntax-evaluate challenge score --manifest CH/manifest.json --system NAME=FILE ... --out-dir OUT

`attention` plots one encoder self-attention head over one sentence (PASCAL's syntax heads: layer 0, the
first heads) and saves all heads' weights to D/attention.npz, which --attention plots again.
`challenge export` writes the unique sentence pairs of the chosen Choshen & Abend challenge sets for one
direction to CH/challenge.{src,tgt} (translate CH/challenge.{src}, e.g. preprocess it as a test split and run
fairseq-generate) and CH/manifest.json, which says which lines belong to which set; `challenge score` splits the
hypotheses by the manifest and scores every set (phenomenon x domain x distance, for that direction).
"""
import argparse
import json
import logging
import random
import re
import sys
import warnings
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import challenge_sets, metrics
from .metrics import DEFAULT_LENGTH_EDGES, METRIC_KEYS, EvaluationError

GENERATE_LINE = re.compile(r"^([HSTDP])-(\d+)\t")
PIECE_MARK = "\u2581"
METRIC_TITLES = {"bleu": "BLEU", "chrf++": "chrF++", "ter": "TER", "ribes": "RIBES"}


def _plots():
    """The plots module, imported when a figure is drawn (matplotlib's import is slow and chatty)."""
    from . import plots
    return plots


# ------------------------------------------------------------------------------------------------ reading

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
    pieces are an error)."""

    def __init__(self, spm_model: Optional[Path]):
        self.spm_model = spm_model
        self.encoder = None
        if spm_model is not None:
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
        return [self.encoder.decode(line.split()) for line in lines]


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


def data_bin_files(data_bin: Path, split: str) -> Dict[str, Optional[Path]]:
    """References, sources, sentencepiece model and linemap of a fairseq-syntax data-bin split."""
    data_bin = Path(data_bin)
    info_path = data_bin / "syntax.json"
    if not info_path.is_file():
        raise EvaluationError(f"{data_bin} is not a fairseq-syntax data-bin (no syntax.json)")
    info = json.loads(info_path.read_text())
    src, tgt = info["source_lang"], info["target_lang"]
    spm = data_bin / info["spm_model"] if info.get("spm_model") else None
    files = {"references": data_bin / f"{split}.{tgt}.txt", "sources": data_bin / f"{split}.{src}.txt",
             "spm_model": spm if spm is not None and spm.is_file() else None,
             "linemap": data_bin / f"{split}.linemap"}
    for key in ("references", "sources"):
        if not files[key].is_file():
            raise EvaluationError(f"{files[key]} not found (is {split!r} a split of {data_bin}?)")
    if not files["linemap"].is_file():
        files["linemap"] = None
    return files


# ----------------------------------------------------------------------------------------------- scoring

def evaluate_systems(systems: Dict[str, List[str]], references: List[List[str]], sources: Optional[List[str]] = None,
                     baseline: Optional[str] = None, tokenize: str = "13a", ribes_tokenize: Optional[str] = None,
                     length_edges: Sequence[int] = DEFAULT_LENGTH_EDGES,
                     bootstrap_samples: int = metrics.DEFAULT_BOOTSTRAP_SAMPLES) -> Dict[str, object]:
    """Every score for every system (all hypotheses already aligned with the reference streams)."""
    if baseline is not None and baseline not in systems:
        raise EvaluationError(f"--baseline {baseline!r} is not one of the systems: {', '.join(systems)}")
    ribes_tokenize = ribes_tokenize or tokenize
    results: Dict[str, object] = {"sentences": len(references[0]), "references": len(references),
                                  "tokenize": tokenize, "ribes_tokenize": ribes_tokenize,
                                  "length_edges": list(length_edges), "systems": {}}
    for name, hypotheses in systems.items():
        scores = metrics.corpus_scores(hypotheses, references, tokenize=tokenize)
        scores["ribes"] = metrics.corpus_ribes(hypotheses, references, tokenize=ribes_tokenize)
        if sources is not None:
            scores["length_buckets"] = metrics.bleu_by_length(hypotheses, references, sources, length_edges, tokenize)
        results["systems"][name] = scores
    results["bootstrap"] = None
    if bootstrap_samples > 0:
        results["bootstrap"] = metrics.paired_bootstrap(systems, references, baseline, bootstrap_samples,
                                                        tokenize=tokenize)
    return results


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _p(value: Optional[float]) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" + (" *" if value < 0.05 else "")


def markdown_report(results: Dict[str, object], title: str = "Evaluation") -> str:
    systems = results["systems"]
    bootstrap = results.get("bootstrap")
    baseline = bootstrap.get("baseline") if bootstrap else None
    lines = [f"# {title}", "", f"{results['sentences']} sentences, {results['references']} reference(s)."]
    if results.get("sources_from"):
        lines.append(f"Source lengths from {results['sources_from']}.")
    lines.append("")
    header = ["System", "BLEU", "chrF++", "TER", "RIBES"]
    if bootstrap:
        header += ["BLEU mean ± 95% CI", "chrF++ mean ± 95% CI", "TER mean ± 95% CI"]
        if baseline:
            header += ["p (BLEU)", "p (chrF++)", "p (TER)"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, scores in systems.items():
        row = [f"{name} (baseline)" if name == baseline else name] + \
              [_fmt(scores[k]["score"]) for k in ("bleu", "chrf++", "ter", "ribes")]
        if bootstrap:
            entry = bootstrap["systems"][name]
            row += [f"{_fmt(entry[k]['mean'])} ± {_fmt(entry[k]['ci'])}" for k in METRIC_KEYS]
            if baseline:
                row += [_p(entry[k]["p_value"]) for k in METRIC_KEYS]
        lines.append("| " + " | ".join(row) + " |")
    if bootstrap and baseline:
        lines += ["", f"p: sacrebleu paired bootstrap resampling against {baseline} ({bootstrap['n_samples']} "
                      f"resamples, seed {bootstrap['seed']}); * p < 0.05."]
    first = next(iter(systems.values()))
    lines += ["", "Signatures:", ""]
    for key in ("bleu", "chrf++", "ter", "ribes"):
        lines.append(f"- {METRIC_TITLES[key]}: `{first[key]['signature']}`")
    if bootstrap:
        for key, signature in bootstrap["signatures"].items():
            lines.append(f"- {METRIC_TITLES[key]} bootstrap: `{signature}`")
    if "length_buckets" in first:
        buckets = [b["bucket"] for b in first["length_buckets"]]
        lines += ["", "## BLEU by source length (words)", "",
                  "| Bucket | Sentences | " + " | ".join(systems) + " |", "|" + "---|" * (len(systems) + 2)]
        for i, bucket in enumerate(buckets):
            row = [bucket, str(first["length_buckets"][i]["sentences"])]
            row += [_fmt(systems[name]["length_buckets"][i]["bleu"]) for name in systems]
            lines.append("| " + " | ".join(row) + " |")
    trees = {name: s["trees"] for name, s in systems.items() if s.get("trees")}
    if trees:
        lines += ["", "## Generated trees against a parse of the same output", "",
                  "| System | UAS | LAS | Words | Sentences |", "|---|---|---|---|---|"]
        for name, t in trees.items():
            lines.append(f"| {name} | {_fmt(t['uas'])} | {_fmt(t['las'])} | {t['words']} | {t['sentences']} |")
    return "\n".join(lines) + "\n"


def write_plots(results: Dict[str, object], out_dir: Path) -> Dict[str, str]:
    written = {}
    bootstrap = results.get("bootstrap")
    if bootstrap:
        entries = {name: bootstrap["systems"][name]["bleu"] for name in results["systems"]}
    else:  # --bootstrap-samples 0: the scores without intervals
        entries = {name: {"score": s["bleu"]["score"], "mean": None, "ci": None, "p_value": None}
                   for name, s in results["systems"].items()}
    written["bleu_ci"] = str(_plots().plot_scores_with_ci(entries, out_dir / "bleu_ci.png", "BLEU",
                                                          baseline=bootstrap.get("baseline") if bootstrap else None))
    buckets = {name: s["length_buckets"] for name, s in results["systems"].items() if "length_buckets" in s}
    if buckets:
        written["bleu_by_length"] = str(_plots().plot_bleu_by_length(buckets, out_dir / "bleu_by_length.png"))
    return written


# ------------------------------------------------------------------------------------------------- trees

class Tree(NamedTuple):
    words: List[str]
    heads: List[int]
    labels: List[str]


def read_trees(path: Path, what: str) -> List[Tree]:
    """Every sentence of a CoNLL-U file as its syntactic words (multiword-token lines and empty nodes skipped, as
    the CoNLL 2018 evaluation does), heads and labels. Trees are not checked for well-formedness: a generated tree
    with two roots or a cycle is still scored."""
    import conllu
    from conllu.exceptions import ParseException

    if not Path(path).is_file():
        raise EvaluationError(f"{what} not found: {path}")
    trees = []
    try:
        with challenge_sets.open_text(Path(path)) as f:
            for number, sentence in enumerate(conllu.parse_incr(f), start=1):
                words = [token for token in sentence if isinstance(token["id"], int)]
                if any(not isinstance(token["head"], int) for token in words):
                    raise EvaluationError(f"{what} ({path}): sentence {number} has a word without a head")
                trees.append(Tree([t["form"] for t in words], [t["head"] for t in words],
                                  [t["deprel"] or "_" for t in words]))
    except ParseException as error:
        raise EvaluationError(f"{what} ({path}): malformed CoNLL-U: {error}") from None
    return trees


def _named_files(specs: Sequence[str], option: str) -> Dict[str, Path]:
    named = {}
    for spec in specs or ():
        if "=" not in spec:
            raise EvaluationError(f"{option} takes NAME=FILE, got {spec!r}")
        name, path = spec.split("=", 1)
        named[name] = Path(path)
    return named


# -------------------------------------------------------------------------------------------- attention

def load_attention(path: Path, head: Optional[int] = None):
    """(weights 2-D, query tokens, key tokens, highlight) from an .npz with `weights` ((T, S), or (H, T, S) with a
    head index), `query_tokens`, optional `key_tokens` and optional `highlight` (column per row, -1 = none)."""
    if not Path(path).is_file():
        raise EvaluationError(f"attention file not found: {path}")
    data = np.load(path, allow_pickle=False)
    for key in ("weights", "query_tokens"):
        if key not in data:
            raise EvaluationError(f"{path}: no {key!r} array (it has {', '.join(data.files)})")
    weights = data["weights"]
    if weights.ndim == 3:
        if head is None:
            raise EvaluationError(f"{path}: weights of {weights.shape[0]} heads; choose one with --attention-head")
        weights = weights[head]
    query = [str(t) for t in data["query_tokens"]]
    key_tokens = [str(t) for t in data["key_tokens"]] if "key_tokens" in data else None
    highlight = [None if int(c) < 0 else int(c) for c in data["highlight"]] if "highlight" in data else None
    return weights, query, key_tokens, highlight


def encoder_self_attention(checkpoint: Path, data_bin: Path, split: str = "test", index: int = 0,
                           layer: int = 0) -> Dict[str, object]:
    """Encoder self-attention of every head of one layer over one sentence of a data-bin split, from a trained
    checkpoint (CPU, no dropout). Returns {"weights": (heads, T, T) array, "query_tokens"/"key_tokens": the
    source pieces with </s>, "highlight": per piece the (rounded) position of its syntactic parent, -1 when the
    model takes no parents (src_parent_middle_halves, PASCAL), "syntax_heads": how many leading heads of this layer
    are syntax heads (0 if none), "text": the sentence}."""
    import torch
    from fairseq import checkpoint_utils

    import fairseq_syntax  # noqa: F401  (registers the task and models)

    if not Path(checkpoint).is_file():
        raise EvaluationError(f"checkpoint not found: {checkpoint}")
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                       arg_overrides={"data": str(data_bin)})
    model = models[0].eval()
    task.load_dataset(split)
    dataset = task.dataset(split)
    if not 0 <= index < len(dataset):
        raise EvaluationError(f"--index {index}: the {split} split has {len(dataset)} sentences")
    layers = model.encoder.layers
    if not 0 <= layer < len(layers):
        raise EvaluationError(f"--layer {layer}: the encoder has {len(layers)} layers")
    sample = dataset.collater([dataset[index]])
    net_input = {k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"}
    attention = layers[layer].self_attn
    if attention is None:
        raise EvaluationError(f"--layer {layer}: its syntax mechanism replaces self-attention; there are no "
                              f"attention weights to plot")
    captured = []
    original_forward, original_skip = attention.forward, getattr(attention, "skip_embed_dim_check", False)

    def capture(*args, **kwargs):
        kwargs["need_weights"] = kwargs["need_head_weights"] = True
        output = original_forward(*args, **kwargs)
        captured.append(output[1])
        return output

    attention.forward = capture
    attention.skip_embed_dim_check = True  # keeps fairseq off torch's fused path, which only returns mean weights
    try:
        with torch.no_grad():
            model.encoder(**net_input)
    finally:
        del attention.forward
        attention.skip_embed_dim_check = original_skip
    weights = captured[0][:, 0].float().numpy()  # (H, T, T)
    tokens = [task.source_dictionary[int(t)] for t in net_input["src_tokens"][0]]
    halves = net_input.get("src_parent_middle_halves")  # twice the parent's middle position
    highlight = [-1] * len(tokens) if halves is None else [int(round(int(h) / 2)) for h in halves[0]]
    modifier = getattr(attention, "score_modifier", None)
    syntax_heads = getattr(modifier, "num_syntax_heads", attention.num_heads) if modifier is not None else 0
    text_path = Path(data_bin) / f"{split}.{task.cfg.source_lang}.txt"
    text = read_text_lines(text_path)[index] if text_path.is_file() else ""
    return {"weights": weights, "query_tokens": tokens, "key_tokens": tokens, "highlight": highlight,
            "syntax_heads": syntax_heads, "layer": layer, "index": index, "text": text}


def attention_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-evaluate attention",
                                     description="Plot one encoder self-attention head over one sentence.")
    parser.add_argument("--path", required=True, help="checkpoint")
    parser.add_argument("--data-bin", required=True)
    parser.add_argument("--gen-subset", default="test")
    parser.add_argument("--index", type=int, default=0, help="sentence (line of {split}.{src}.txt)")
    parser.add_argument("--layer", type=int, default=0, help="encoder layer (PASCAL's syntax layer: 0)")
    parser.add_argument("--head", type=int, default=0, help="head (PASCAL's syntax heads come first)")
    parser.add_argument("--out-dir", required=True, help="gets attention.npz (all heads) and attention.png")
    return parser


def run_attention(args) -> Dict[str, object]:
    found = encoder_self_attention(Path(args.path), Path(args.data_bin), args.gen_subset, args.index, args.layer)
    weights = found["weights"]
    if not 0 <= args.head < weights.shape[0]:
        raise EvaluationError(f"--head {args.head}: layer {args.layer} has {weights.shape[0]} heads")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.savez(out_dir / "attention.npz", weights=weights, query_tokens=np.array(found["query_tokens"]),
             key_tokens=np.array(found["key_tokens"]), highlight=np.array(found["highlight"]))
    kind = "syntax head" if args.head < found["syntax_heads"] else "head"
    highlight = [None if c < 0 else c for c in found["highlight"]]
    title = f"encoder layer {args.layer}, {kind} {args.head}, {args.gen_subset} sentence {args.index} (red: parent)"
    path = _plots().plot_attention_heatmap(weights[args.head], found["query_tokens"], found["key_tokens"],
                                           out_dir / "attention.png", title, highlight)
    print(f"{path} ({kind}); weights of all {weights.shape[0]} heads in {out_dir / 'attention.npz'}")
    return found


# ---------------------------------------------------------------------------------------------- commands

def _edges(text: str) -> List[int]:
    try:
        return metrics.check_length_edges([int(x) for x in text.split(",") if x.strip()])
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error))


def score_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", action="append", required=True, metavar="NAME=FILE",
                        help="a system's fairseq-generate output or hypothesis file (repeat for more systems)")
    parser.add_argument("--references", action="append", metavar="FILE",
                        help="reference file, one line per sentence (repeat for multiple references)")
    parser.add_argument("--sources", metavar="FILE", help="source sentences, for the length buckets")
    parser.add_argument("--spm-model", metavar="FILE", help="sentencepiece model to decode hypothesis pieces")
    parser.add_argument("--data-bin", metavar="DIR",
                        help="a fairseq-syntax data-bin: references, sources and sentencepiece model of --gen-subset")
    parser.add_argument("--gen-subset", default="test", help="the data-bin split that was translated (test)")
    parser.add_argument("--baseline", metavar="NAME", help="system the paired bootstrap test compares against")
    parser.add_argument("--out-dir", metavar="DIR", help="write results.json, results.md and the plots here")
    parser.add_argument("--tokenize", default="13a", help="sacrebleu BLEU tokenizer (13a; zh, ja-mecab, ...)")
    parser.add_argument("--ribes-tokenize", help="sacrebleu tokenizer applied before RIBES's whitespace split "
                                                 "(default: --tokenize; none = whitespace split only)")
    parser.add_argument("--length-edges", type=_edges, default=list(DEFAULT_LENGTH_EDGES),
                        help="source-length bucket edges in words (10,20,30,40,50: 0-9, 10-19, ..., 50+)")
    parser.add_argument("--bootstrap-samples", type=int, default=metrics.DEFAULT_BOOTSTRAP_SAMPLES,
                        help="bootstrap resamples (0: no bootstrap, no confidence intervals)")
    parser.add_argument("--generated-trees", action="append", metavar="NAME=CONLLU",
                        help="trees a system generated with its output (CoNLL-U)")
    parser.add_argument("--parsed-trees", action="append", metavar="NAME=CONLLU",
                        help="a parser's parse of the same system output (CoNLL-U), the reference for UAS/LAS")
    parser.add_argument("--tree-ignore-labels", default="", help="comma-separated labels not scored (e.g. punct)")
    parser.add_argument("--tree-label-level", choices=("full", "universal"), default="full")
    parser.add_argument("--tree-index", type=int, default=0, help="sentence of the generated-tree plot")
    parser.add_argument("--attention", metavar="NPZ", help="attention weights to plot (weights, query_tokens[, "
                                                           "key_tokens, highlight])")
    parser.add_argument("--attention-head", type=int, help="head index when the weights have a head dimension")
    parser.add_argument("--quiet", action="store_true")
    return parser


def run_score(args) -> Dict[str, object]:
    reference_paths = [Path(p) for p in args.references or []]
    sources_path = Path(args.sources) if args.sources else None
    spm_model = Path(args.spm_model) if args.spm_model else None
    if args.data_bin:
        files = data_bin_files(Path(args.data_bin), args.gen_subset)
        reference_paths = reference_paths or [files["references"]]
        sources_path = sources_path or files["sources"]
        spm_model = spm_model or files["spm_model"]
    if not reference_paths:
        raise EvaluationError("give --references FILE (or --data-bin DIR)")
    references = [read_text_lines(p, "references") for p in reference_paths]
    for path, stream in zip(reference_paths[1:], references[1:]):
        if len(stream) != len(references[0]):
            raise EvaluationError(f"{path} has {len(stream)} lines but {reference_paths[0]} has {len(references[0])}")
    expected = len(references[0])
    attention = load_attention(Path(args.attention), args.attention_head) if args.attention else None
    decoder = PieceDecoder(spm_model)
    outputs: Dict[str, SystemOutput] = {}
    for spec in args.system:
        name, path = parse_system_spec(spec)
        if name in outputs:
            raise EvaluationError(f"two systems are named {name!r}")
        outputs[name] = read_system(name, path, expected, decoder, f"the references ({reference_paths[0]})")
    sources, sources_from = None, None
    if sources_path is not None:
        sources = read_text_lines(sources_path, "sources")
        if len(sources) != expected:
            raise EvaluationError(f"{sources_path} has {len(sources)} sources but the references "
                                  f"({reference_paths[0]}) have {expected} lines")
        sources_from = str(sources_path)
    else:
        with_sources = [o for o in outputs.values() if o.sources is not None]
        if with_sources:
            sources, sources_from = with_sources[0].sources, f"the S- lines of {with_sources[0].path}"
    results = evaluate_systems({n: o.hypotheses for n, o in outputs.items()}, references, sources, args.baseline,
                               args.tokenize, args.ribes_tokenize, args.length_edges, args.bootstrap_samples)
    results["reference_files"] = [str(p) for p in reference_paths]
    results["sources_from"] = sources_from
    for name, output in outputs.items():
        results["systems"][name]["file"] = str(output.path)
        results["systems"][name]["format"] = output.format

    generated = _named_files(args.generated_trees, "--generated-trees")
    parsed = _named_files(args.parsed_trees, "--parsed-trees")
    if set(generated) != set(parsed):
        raise EvaluationError("--generated-trees and --parsed-trees must name the same systems")
    tree_for_plot = None
    for name in generated:
        if name not in results["systems"]:
            raise EvaluationError(f"trees given for {name!r}, which is not a --system")
        gen_trees = read_trees(generated[name], f"generated trees of {name!r}")
        ref_trees = read_trees(parsed[name], f"parsed trees of {name!r}")
        ignore = [label for label in args.tree_ignore_labels.split(",") if label]
        try:
            scores = metrics.tree_attachment_scores(ref_trees, gen_trees, ignore_labels=ignore,
                                                    label_level=args.tree_label_level)
        except EvaluationError as error:
            raise EvaluationError(f"trees of {name!r} ({generated[name]} vs {parsed[name]}): {error}") from None
        results["systems"][name]["trees"] = scores
        if tree_for_plot is None and gen_trees:
            tree_for_plot = (name, gen_trees[min(args.tree_index, len(gen_trees) - 1)])

    markdown = markdown_report(results)
    if args.out_dir:
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        results["plots"] = write_plots(results, out_dir)
        if tree_for_plot is not None:
            name, tree = tree_for_plot
            results["plots"]["tree"] = str(_plots().plot_dependency_tree(
                tree.words, tree.heads, tree.labels, out_dir / "tree.png", title=f"generated tree ({name})"))
        if attention is not None:
            weights, query, key_tokens, highlight = attention
            title = f"attention: {Path(args.attention).name}" + (
                "" if args.attention_head is None else f", head {args.attention_head}")
            results["plots"]["attention"] = str(_plots().plot_attention_heatmap(
                weights, query, key_tokens, out_dir / "attention.png", title, highlight))
        (out_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        (out_dir / "results.md").write_text(markdown)
    if not args.quiet:
        print(markdown)
    return results


# -------------------------------------------------------------------------------------------- challenge

def challenge_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-evaluate challenge",
                                     description="Choshen & Abend (2019) challenge sets: list, export, score.")
    sub = parser.add_subparsers(dest="action", required=True)
    for action in ("list", "export"):
        p = sub.add_parser(action)
        p.add_argument("--challenge-dir", help="default: $DATA_ROOT/" + str(challenge_sets.CHALLENGE_SUBDIR))
        p.add_argument("--sets", default="paper" if action == "export" else "all",
                       help="paper (the sets of Choshen & Abend 2022), all, or comma-separated set names")
        p.add_argument("--phenomena", help="comma-separated: reflexive, particle, preposition_stranding, reorder")
        p.add_argument("--domains", help="comma-separated, e.g. books,news")
    export = sub.choices["export"]
    export.add_argument("--direction", required=True, help="e.g. en-de")
    export.add_argument("--out-dir", required=True)
    export.add_argument("--max-per-set", type=int,
                        help="keep a random sample of at most this many pairs of each set (to bound translation time)")
    export.add_argument("--seed", type=int, default=1, help="seed of the --max-per-set sample")
    score = sub.add_parser("score")
    score.add_argument("--manifest", required=True, help="manifest.json written by `challenge export`")
    score.add_argument("--system", action="append", required=True, metavar="NAME=FILE",
                       help="translations of the exported sources (generate output or one line per source)")
    score.add_argument("--spm-model")
    score.add_argument("--data-bin", help="data-bin the exported pairs were preprocessed into: its sentencepiece "
                                          "model and the --gen-subset linemap (lines it dropped score as empty)")
    score.add_argument("--gen-subset", default="test")
    score.add_argument("--linemap", help="{split}.linemap of the data-bin the sources were preprocessed into")
    score.add_argument("--metrics", default="bleu,chrf++", help="comma-separated from bleu, chrf++, ter")
    score.add_argument("--tokenize", default="13a")
    score.add_argument("--baseline", help="paired bootstrap per set against this system")
    score.add_argument("--bootstrap-samples", type=int, default=metrics.DEFAULT_BOOTSTRAP_SAMPLES)
    score.add_argument("--out-dir")
    score.add_argument("--quiet", action="store_true")
    return parser


def _select_sets(args) -> List[challenge_sets.ChallengeSetInfo]:
    directory = Path(args.challenge_dir) if args.challenge_dir else None
    infos = challenge_sets.discover(directory)
    names = None
    if args.sets == "paper":
        names = list(challenge_sets.PAPER_SETS)
    elif args.sets != "all":
        names = [n for n in args.sets.split(",") if n]
        unknown = sorted(set(names) - {i.name for i in infos})
        if unknown:
            raise EvaluationError(f"unknown challenge sets: {', '.join(unknown)}")
    split = lambda text: [x for x in text.split(",") if x] if text else None  # noqa: E731
    return challenge_sets.select(infos, phenomena=split(args.phenomena), domains=split(args.domains), names=names)


def run_challenge_list(args) -> List[dict]:
    rows = []
    for info in _select_sets(args):
        lines = len(challenge_sets.read_lines(info.files[info.langs[0]]))
        rows.append({"name": info.name, "phenomenon": info.phenomenon, "phenomenon_lang": info.phenomenon_lang,
                     "domain": info.domain, "distance": info.distance_label, "langs": "-".join(info.langs),
                     "tokenized": info.tokenized, "sentences": lines})
    print("\t".join(rows[0]) if rows else "no challenge sets")
    for row in rows:
        print("\t".join(str(v) for v in row.values()))
    return rows


def export_challenge(infos: Sequence[challenge_sets.ChallengeSetInfo], direction: str, out_dir: Path,
                     challenge_dir: Optional[Path] = None, max_per_set: Optional[int] = None,
                     seed: int = 1) -> Dict[str, object]:
    """Write the unique (source, reference) pairs of the sets to out_dir/challenge.{src,tgt} and the manifest
    (per set: its description and the 0-based lines of its pairs in those files). With max_per_set, a set with
    more pairs keeps a random sample of that many (seeded per set name; its `total` says how many it has)."""
    src, tgt = challenge_sets.split_direction(direction)
    pair_index: Dict[Tuple[str, str], int] = {}
    pairs: List[Tuple[str, str]] = []
    entries = []
    for info in infos:
        if direction not in info.directions:
            continue
        loaded = challenge_sets.load(info, direction)
        set_pairs = list(zip(loaded.sources, loaded.references))
        total = len(set_pairs)
        if max_per_set is not None and total > max_per_set:
            chosen = sorted(random.Random(f"{seed}:{info.name}").sample(range(total), max_per_set))
            set_pairs = [set_pairs[i] for i in chosen]
        indices = []
        for pair in set_pairs:
            if pair not in pair_index:
                pair_index[pair] = len(pairs)
                pairs.append(pair)
            indices.append(pair_index[pair])
        entries.append({"name": info.name, "phenomenon": info.phenomenon, "phenomenon_lang": info.phenomenon_lang,
                        "side": info.side(direction), "domain": info.domain, "distance": info.distance,
                        "exact": info.exact, "tokenized": info.tokenized, "sentences": len(indices), "total": total,
                        "has_ids": loaded.ids is not None, "indices": indices})
    if not entries:
        raise EvaluationError(f"no challenge set has the direction {direction}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"challenge.{src}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (out_dir / f"challenge.{tgt}").write_text("".join(r + "\n" for _, r in pairs), encoding="utf-8")
    manifest = {"format": "fairseq-syntax-challenge-export/1", "direction": direction, "source_lang": src,
                "target_lang": tgt, "sources": f"challenge.{src}", "references": f"challenge.{tgt}",
                "sentences": len(pairs), "challenge_dir": str(challenge_dir or challenge_sets.default_challenge_dir()),
                "sets": entries}
    (out_dir / "manifest.json").write_text(json.dumps(manifest) + "\n")
    return manifest


def run_challenge_export(args) -> Dict[str, object]:
    manifest = export_challenge(_select_sets(args), args.direction, Path(args.out_dir),
                                Path(args.challenge_dir) if args.challenge_dir else None, args.max_per_set, args.seed)
    print(f"{len(manifest['sets'])} challenge sets, {manifest['sentences']} unique sentence pairs -> "
          f"{Path(args.out_dir) / manifest['sources']} (translate this), {Path(args.out_dir) / 'manifest.json'}")
    return manifest


def score_challenge(manifest_path: Path, systems: Dict[str, Path], spm_model: Optional[Path] = None,
                    linemap: Optional[List[int]] = None, keys: Sequence[str] = ("bleu", "chrf++"),
                    tokenize: str = "13a", baseline: Optional[str] = None,
                    bootstrap_samples: int = metrics.DEFAULT_BOOTSTRAP_SAMPLES) -> Dict[str, object]:
    manifest_path = Path(manifest_path)
    if not manifest_path.is_file():
        raise EvaluationError(f"manifest not found: {manifest_path}")
    manifest = json.loads(manifest_path.read_text())
    references_path = manifest_path.parent / manifest["references"]
    references = read_text_lines(references_path, "challenge references")
    if len(references) != manifest["sentences"]:
        raise EvaluationError(f"{references_path} has {len(references)} lines, the manifest says "
                              f"{manifest['sentences']}")
    if baseline is not None and baseline not in systems:
        raise EvaluationError(f"--baseline {baseline!r} is not one of the systems: {', '.join(systems)}")
    decoder = PieceDecoder(spm_model)
    outputs = {name: read_system(name, path, len(references), decoder,
                                 f"the challenge export ({manifest_path.parent / manifest['sources']})", linemap)
               for name, path in systems.items()}
    dropped = set(next(iter(outputs.values())).dropped)  # the same linemap for every system
    sacrebleu_logger = logging.getLogger("sacrebleu")
    level = sacrebleu_logger.level
    rows = []
    try:
        for entry in manifest["sets"]:
            # sacrebleu warns about tokenized text at every call; the report marks the tokenized sets instead
            sacrebleu_logger.setLevel(logging.ERROR if entry["tokenized"] else level)
            indices = entry["indices"]
            refs = [references[i] for i in indices]
            row = {k: v for k, v in entry.items() if k != "indices"}
            row["direction"] = manifest["direction"]
            row["dropped"] = sum(1 for i in indices if i in dropped)
            row["systems"] = {}
            for name, output in outputs.items():
                hyps = [output.hypotheses[i] for i in indices]
                row["systems"][name] = {key: metrics.corpus_score(hyps, refs, key, tokenize) for key in keys}
            if baseline is not None and len(outputs) > 1 and bootstrap_samples > 0:
                row["bootstrap"] = metrics.paired_bootstrap(
                    {name: [o.hypotheses[i] for i in indices] for name, o in outputs.items()}, refs, baseline,
                    bootstrap_samples, keys=keys, tokenize=tokenize)
            rows.append(row)
    finally:
        sacrebleu_logger.setLevel(level)
    return {"direction": manifest["direction"], "manifest": str(manifest_path), "metrics": list(keys),
            "baseline": baseline, "sets": rows}


def challenge_markdown(results: Dict[str, object]) -> str:
    keys = results["metrics"]
    rows = sorted(results["sets"], key=lambda r: (r["phenomenon"], r["side"], r["domain"], r["exact"], r["distance"],
                                                  r["name"]))
    systems = list(rows[0]["systems"]) if rows else []
    header = ["Set", "Phenomenon", "Side", "Domain", "Distance", "Sentences"]
    header += [f"{name} {METRIC_TITLES[key]}" for name in systems for key in keys]
    lines = [f"# Challenge sets, {results['direction']}", "",
             "Side: where the phenomenon is (source or target side of this direction). Distance: head-dependent "
             "distance in words (>=N minimum, =N exactly). † Moses-tokenized sources and references (the news sets and "
             "the other language pairs): scores against them are not comparable with scores on detokenized text.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["name"] + (" †" if row["tokenized"] else ""), row["phenomenon"], row["side"], row["domain"],
                 ("=" if row["exact"] else ">=") + str(row["distance"]),
                 str(row["sentences"]) + (f" of {row['total']}" if row.get("total", 0) > row["sentences"] else "")]
        for name in systems:
            for key in keys:
                cell = _fmt(row["systems"][name][key]["score"])
                boot = row.get("bootstrap")
                if boot and name != results["baseline"]:
                    p_value = boot["systems"][name][key]["p_value"]
                    cell += " *" if p_value is not None and p_value < 0.05 else ""
                cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    if results.get("baseline"):
        lines += ["", f"* p < 0.05 (sacrebleu paired bootstrap against {results['baseline']})."]
    if rows:
        first = rows[0]["systems"][systems[0]]
        lines += ["", "Signatures:", ""] + [f"- {METRIC_TITLES[k]}: `{first[k]['signature']}`" for k in keys]
    return "\n".join(lines) + "\n"


def run_challenge_score(args) -> Dict[str, object]:
    keys = [k for k in args.metrics.split(",") if k]
    for key in keys:
        metrics.make_metric(key, args.tokenize)
    spm_model = Path(args.spm_model) if args.spm_model else None
    linemap = read_linemap(Path(args.linemap)) if args.linemap else None
    if args.data_bin:
        info_path = Path(args.data_bin) / "syntax.json"
        if not info_path.is_file():
            raise EvaluationError(f"{args.data_bin} is not a fairseq-syntax data-bin (no syntax.json)")
        info = json.loads(info_path.read_text())
        if spm_model is None and info.get("spm_model"):
            spm_model = Path(args.data_bin) / info["spm_model"]
        linemap_path = Path(args.data_bin) / f"{args.gen_subset}.linemap"
        if linemap is None and linemap_path.is_file():
            linemap = read_linemap(linemap_path)
    systems = {}
    for spec in args.system:
        name, path = parse_system_spec(spec)
        if name in systems:
            raise EvaluationError(f"two systems are named {name!r}")
        systems[name] = path
    results = score_challenge(Path(args.manifest), systems, spm_model, linemap, keys, args.tokenize, args.baseline,
                              args.bootstrap_samples)
    markdown = challenge_markdown(results)
    if args.out_dir:
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        shown = [r for r in results["sets"] if r["name"] in challenge_sets.PAPER_SETS] or results["sets"]
        table = {r["name"]: {name: s[keys[0]]["score"] for name, s in r["systems"].items()} for r in shown}
        if table:
            results["plots"] = {"challenge": str(_plots().plot_challenge_scores(
                table, out_dir / f"challenge_{keys[0]}.png", METRIC_TITLES[keys[0]],
                title=f"{METRIC_TITLES[keys[0]]} per challenge set, {results['direction']}"))}
        (out_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        (out_dir / "results.md").write_text(markdown)
    if not args.quiet:
        print(markdown)
    return results


# ------------------------------------------------------------------------------------------------- entry

def main(argv: Optional[Sequence[str]] = None):
    """Run the command; EvaluationError for inputs that cannot be scored."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "attention":
        return run_attention(attention_parser().parse_args(argv[1:]))
    if argv and argv[0] == "challenge":
        args = challenge_parser().parse_args(argv[1:])
        return {"list": run_challenge_list, "export": run_challenge_export,
                "score": run_challenge_score}[args.action](args)
    return run_score(score_parser().parse_args(argv))


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    # importing fairseq sets the root logger to DEBUG (fairseq.tasks.text_to_speech): keep matplotlib's font
    # search and sacrebleu's progress messages off the terminal
    logging.getLogger().setLevel(logging.WARNING)
    try:
        main(argv)
    except (EvaluationError, challenge_sets.ChallengeSetError, FileNotFoundError) as error:
        print(f"fairseq-syntax-evaluate: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli_main()
