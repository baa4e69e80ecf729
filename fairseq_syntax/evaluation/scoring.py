"""Scoring systems against references, the default command of `fairseq-syntax-evaluate` (usage: the docstring of
fairseq_syntax.evaluation.cli, which is also this command's --help).

Per system: sacrebleu BLEU, chrF++ and TER with their signatures, RIBES (nltk), BLEU per source-length bucket, and
(with --baseline) sacrebleu's paired bootstrap test against the baseline with 95% confidence intervals;
optionally UAS/LAS of generated trees (the `trees` module) and the plots. --out-dir gets results.json,
results.md and the PNG plots.
"""
import argparse
import json
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from . import metrics, trees
from .attention import load_attention
from .metrics import DEFAULT_LENGTH_EDGES, METRIC_KEYS, EvaluationError
from .reporting import METRIC_TITLES, fmt, fmt_p, plots
from .system_outputs import PieceDecoder, SystemOutput, data_bin_files, parse_system_spec, read_system, read_text_lines


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
        scores["bleu-1"] = metrics.corpus_score(hypotheses, references, "bleu-1", tokenize)
        if sources is not None:
            scores["length_buckets"] = metrics.bleu_by_length(hypotheses, references, sources, length_edges, tokenize)
        results["systems"][name] = scores
    results["bootstrap"] = None
    if bootstrap_samples > 0:
        results["bootstrap"] = metrics.paired_bootstrap(systems, references, baseline, bootstrap_samples,
                                                        tokenize=tokenize)
    return results


def markdown_report(results: Dict[str, object], title: str = "Evaluation") -> str:
    systems = results["systems"]
    bootstrap = results.get("bootstrap")
    baseline = bootstrap.get("baseline") if bootstrap else None
    lines = [f"# {title}", "", f"{results['sentences']} sentences, {results['references']} reference(s)."]
    if results.get("sources_from"):
        lines.append(f"Source lengths from {results['sources_from']}.")
    lines.append("")
    header = ["System", "BLEU", "chrF++", "TER", "RIBES", "BLEU-1"]
    if bootstrap:
        header += ["BLEU mean ± 95% CI", "chrF++ mean ± 95% CI", "TER mean ± 95% CI"]
        if baseline:
            header += ["p (BLEU)", "p (chrF++)", "p (TER)"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, scores in systems.items():
        row = ([f"{name} (baseline)" if name == baseline else name] +
               [fmt(scores[k]["score"]) if k in scores else "?" for k in ("bleu", "chrf++", "ter", "ribes", "bleu-1")])
        if bootstrap:
            entry = bootstrap["systems"][name]
            row += [f"{fmt(entry[k]['mean'])} ± {fmt(entry[k]['ci'])}" for k in METRIC_KEYS]
            if baseline:
                row += [fmt_p(entry[k]["p_value"]) for k in METRIC_KEYS]
        lines.append("| " + " | ".join(row) + " |")
    if bootstrap and baseline:
        lines += ["", f"p: sacrebleu paired bootstrap resampling against {baseline} ({bootstrap['n_samples']} "
                      f"resamples, seed {bootstrap['seed']}); * p < 0.05."]
    first = next(iter(systems.values()))
    lines += ["", "Signatures:", ""]
    for key in ("bleu", "chrf++", "ter", "ribes", "bleu-1"):
        if key in first:
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
            row += [fmt(systems[name]["length_buckets"][i]["bleu"]) for name in systems]
            lines.append("| " + " | ".join(row) + " |")
    lines += trees.trees_markdown(systems)
    return "\n".join(lines) + "\n"


def write_plots(results: Dict[str, object], out_dir: Path) -> Dict[str, str]:
    written = {}
    bootstrap = results.get("bootstrap")
    if bootstrap:
        entries = {name: bootstrap["systems"][name]["bleu"] for name in results["systems"]}
    else:  # --bootstrap-samples 0: the scores without intervals
        entries = {name: {"score": s["bleu"]["score"], "mean": None, "ci": None, "p_value": None}
                   for name, s in results["systems"].items()}
    written["bleu_ci"] = str(plots().plot_scores_with_ci(entries, out_dir / "bleu_ci.png", "BLEU",
                                                         baseline=bootstrap.get("baseline") if bootstrap else None))
    buckets = {name: s["length_buckets"] for name, s in results["systems"].items() if "length_buckets" in s}
    if buckets:
        written["bleu_by_length"] = str(plots().plot_bleu_by_length(buckets, out_dir / "bleu_by_length.png"))
    return written


def _edges(text: str) -> List[int]:
    try:
        return metrics.check_length_edges([int(x) for x in text.split(",") if x.strip()])
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error))


def score_parser(description: Optional[str] = None) -> argparse.ArgumentParser:
    """The scoring command's parser; its --help shows `description` (the command-line front's usage text)."""
    parser = argparse.ArgumentParser(prog="fairseq-syntax-evaluate", description=description or __doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", action="append", required=True, metavar="NAME=FILE",
                        help="a system's fairseq-generate output or hypothesis file (repeat for more systems)")
    parser.add_argument("--references", action="append", metavar="FILE",
                        help="reference file, one line per sentence (repeat for multiple references)")
    parser.add_argument("--sources", metavar="FILE", help="source sentences, for the length buckets")
    parser.add_argument("--spm-model", metavar="FILE", help="sentencepiece model to decode hypothesis pieces")
    parser.add_argument("--data-bin", metavar="DIR",
                        help="a fairseq-syntax data-bin: references, sources and sentencepiece model (or word-level "
                             "tokens) of --gen-subset")
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
    trees.add_tree_arguments(parser)
    parser.add_argument("--attention", metavar="NPZ", help="attention weights to plot (weights, query_tokens[, "
                                                           "key_tokens, highlight])")
    parser.add_argument("--attention-head", type=int, help="head index when the weights have a head dimension")
    parser.add_argument("--quiet", action="store_true")
    return parser


def run_score(args) -> Dict[str, object]:
    reference_paths = [Path(p) for p in args.references or []]
    sources_path = Path(args.sources) if args.sources else None
    spm_model = Path(args.spm_model) if args.spm_model else None
    words = False  # a word-level data-bin's tokens (decoded without a model, unless --spm-model says otherwise)
    if args.data_bin:
        files = data_bin_files(Path(args.data_bin), args.gen_subset)
        reference_paths = reference_paths or [files["references"]]
        sources_path = sources_path or files["sources"]
        spm_model = spm_model or files["spm_model"]
        words = files["words"]
    if not reference_paths:
        raise EvaluationError("give --references FILE (or --data-bin DIR)")
    references = [read_text_lines(p, "references") for p in reference_paths]
    for path, stream in zip(reference_paths[1:], references[1:]):
        if len(stream) != len(references[0]):
            raise EvaluationError(f"{path} has {len(stream)} lines but {reference_paths[0]} has {len(references[0])}")
    expected = len(references[0])
    attention = load_attention(Path(args.attention), args.attention_head) if args.attention else None
    decoder = PieceDecoder(spm_model, words=words)
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

    tree_scores, tree_for_plot = trees.run_trees(args, results["systems"])
    for name, scores in tree_scores.items():
        results["systems"][name]["trees"] = scores

    markdown = markdown_report(results)
    if args.out_dir:
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        results["plots"] = write_plots(results, out_dir)
        if tree_for_plot is not None:
            results["plots"]["tree"] = trees.plot_tree(tree_for_plot, out_dir)
        if attention is not None:
            weights, query, key_tokens, highlight = attention
            title = f"attention: {Path(args.attention).name}" + (
                "" if args.attention_head is None else f", head {args.attention_head}")
            results["plots"]["attention"] = str(plots().plot_attention_heatmap(
                weights, query, key_tokens, out_dir / "attention.png", title, highlight))
        (out_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        (out_dir / "results.md").write_text(markdown)
    if not args.quiet:
        print(markdown)
    return results
