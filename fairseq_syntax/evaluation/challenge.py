"""`fairseq-syntax-evaluate challenge list|export|score`: the Choshen & Abend (2019) long-distance-dependency
challenge sets (read by `challenge_sets`).

    fairseq-syntax-evaluate challenge list
    fairseq-syntax-evaluate challenge export --direction en-de --out-dir CH [--sets paper|all|NAME,...]
    fairseq-syntax-evaluate challenge score --manifest CH/manifest.json --system NAME=FILE ... --out-dir OUT

`challenge export` writes the unique sentence pairs of the chosen sets for one direction to CH/challenge.{src,tgt}
(translate CH/challenge.{src}, e.g. preprocess it as a test split and run fairseq-generate) and CH/manifest.json,
which says which lines belong to which set; `challenge score` splits the hypotheses by the manifest and scores
every set (phenomenon x domain x distance, for that direction).
"""
import argparse
import json
import logging
import random
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

from . import challenge_sets, metrics
from .metrics import EvaluationError
from .reporting import METRIC_TITLES, fmt, plots
from .system_outputs import (
    PieceDecoder, is_word_level, parse_system_spec, read_linemap, read_system, read_text_lines,
)


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
                "max_per_set": max_per_set, "seed": seed, "sets": entries}
    (out_dir / "manifest.json").write_text(json.dumps(manifest) + "\n")
    return manifest


def export_again(direction: str, set_names: Sequence[str], max_per_set: Optional[int], seed: int = 1,
                 challenge_dir: Optional[Path] = None) -> Tuple[Dict[str, object], List[str]]:
    """(manifest, references) of an earlier export of these sets, in this order, made again from the challenge
    sets (the --max-per-set sample is seeded, so the pairs are the same); nothing is left on disk."""
    try:
        infos = {info.name: info for info in challenge_sets.discover(challenge_dir)}
    except FileNotFoundError as error:
        raise EvaluationError(str(error)) from None
    missing = [name for name in set_names if name not in infos]
    if missing:
        raise EvaluationError(f"challenge sets not found: {', '.join(missing)}")
    with tempfile.TemporaryDirectory() as folder:
        manifest = export_challenge([infos[name] for name in set_names], direction, Path(folder), challenge_dir,
                                    max_per_set, seed)
        references = read_text_lines(Path(folder) / manifest["references"], "challenge references")
    return manifest, references


def run_challenge_export(args) -> Dict[str, object]:
    manifest = export_challenge(_select_sets(args), args.direction, Path(args.out_dir),
                                Path(args.challenge_dir) if args.challenge_dir else None, args.max_per_set, args.seed)
    print(f"{len(manifest['sets'])} challenge sets, {manifest['sentences']} unique sentence pairs -> "
          f"{Path(args.out_dir) / manifest['sources']} (translate this), {Path(args.out_dir) / 'manifest.json'}")
    return manifest


def score_challenge(manifest_path: Path, systems: Dict[str, Path], spm_model: Optional[Path] = None,
                    linemap: Optional[List[int]] = None, keys: Sequence[str] = ("bleu", "chrf++"),
                    tokenize: str = "13a", baseline: Optional[str] = None,
                    bootstrap_samples: int = metrics.DEFAULT_BOOTSTRAP_SAMPLES, words: bool = False
                    ) -> Dict[str, object]:
    """`words`: the hypotheses are word-level tokens (a --word-vocabulary data-bin), decoded without spm_model."""
    manifest, references, outputs = read_challenge_outputs(manifest_path, systems, spm_model, linemap, words)
    results = score_challenge_hypotheses(manifest, references, {name: o.hypotheses for name, o in outputs.items()},
                                         set(next(iter(outputs.values())).dropped), keys, tokenize, baseline,
                                         bootstrap_samples)
    return dict(results, manifest=str(manifest_path))


def read_challenge_outputs(manifest_path: Path, systems: Dict[str, Path], spm_model: Optional[Path] = None,
                           linemap: Optional[List[int]] = None, words: bool = False):
    """(manifest, references, {system: SystemOutput}) of an export: each system's text, one per exported pair
    (empty where the data-bin's linemap dropped the pair: SystemOutput.dropped)."""
    manifest_path = Path(manifest_path)
    if not manifest_path.is_file():
        raise EvaluationError(f"manifest not found: {manifest_path}")
    manifest = json.loads(manifest_path.read_text())
    references_path = manifest_path.parent / manifest["references"]
    references = read_text_lines(references_path, "challenge references")
    if len(references) != manifest["sentences"]:
        raise EvaluationError(f"{references_path} has {len(references)} lines, the manifest says "
                              f"{manifest['sentences']}")
    decoder = PieceDecoder(spm_model, words=words)
    outputs = {name: read_system(name, path, len(references), decoder,
                                 f"the challenge export ({manifest_path.parent / manifest['sources']})", linemap)
               for name, path in systems.items()}
    return manifest, references, outputs


def score_challenge_hypotheses(manifest: Dict[str, object], references: List[str],
                               hypotheses: Dict[str, List[str]], dropped: Set[int],
                               keys: Sequence[str] = ("bleu", "chrf++"), tokenize: str = "13a",
                               baseline: Optional[str] = None,
                               bootstrap_samples: int = metrics.DEFAULT_BOOTSTRAP_SAMPLES) -> Dict[str, object]:
    """Every set of the manifest scored for every system (`hypotheses`: one text per exported pair), with a paired
    bootstrap against `baseline` when there are two systems or more. `dropped`: the 0-based pairs a data-bin left
    out (each set counts its own)."""
    if baseline is not None and baseline not in hypotheses:
        raise EvaluationError(f"--baseline {baseline!r} is not one of the systems: {', '.join(hypotheses)}")
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
            for name, lines in hypotheses.items():
                hyps = [lines[i] for i in indices]
                row["systems"][name] = {key: metrics.corpus_score(hyps, refs, key, tokenize) for key in keys}
            if baseline is not None and len(hypotheses) > 1 and bootstrap_samples > 0:
                row["bootstrap"] = metrics.paired_bootstrap(
                    {name: [lines[i] for i in indices] for name, lines in hypotheses.items()}, refs, baseline,
                    bootstrap_samples, keys=keys, tokenize=tokenize)
            rows.append(row)
    finally:
        sacrebleu_logger.setLevel(level)
    return {"direction": manifest["direction"], "metrics": list(keys), "baseline": baseline, "sets": rows}


def set_order(row: Dict[str, object]):
    """The order of the sets in a table: by phenomenon, side, domain, then distance."""
    return row["phenomenon"], row["side"], row["domain"], row["exact"], row["distance"], row["name"]


def distance_text(row: Dict[str, object]) -> str:
    return ("=" if row["exact"] else ">=") + str(row["distance"])


def challenge_markdown(results: Dict[str, object]) -> str:
    keys = results["metrics"]
    rows = sorted(results["sets"], key=set_order)
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
                 distance_text(row),
                 str(row["sentences"]) + (f" of {row['total']}" if row.get("total", 0) > row["sentences"] else "")]
        for name in systems:
            for key in keys:
                cell = fmt(row["systems"][name][key]["score"])
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
    words = False
    if args.data_bin:
        info_path = Path(args.data_bin) / "syntax.json"
        if not info_path.is_file():
            raise EvaluationError(f"{args.data_bin} is not a fairseq-syntax data-bin (no syntax.json)")
        info = json.loads(info_path.read_text())
        if spm_model is None and info.get("spm_model"):
            spm_model = Path(args.data_bin) / info["spm_model"]
        words = is_word_level(info)
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
                              args.bootstrap_samples, words=words)
    markdown = challenge_markdown(results)
    if args.out_dir:
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        shown = [r for r in results["sets"] if r["name"] in challenge_sets.PAPER_SETS] or results["sets"]
        table = {r["name"]: {name: s[keys[0]]["score"] for name, s in r["systems"].items()} for r in shown}
        if table:
            results["plots"] = {"challenge": str(plots().plot_challenge_scores(
                table, out_dir / f"challenge_{keys[0]}.png", METRIC_TITLES[keys[0]],
                title=f"{METRIC_TITLES[keys[0]]} per challenge set, {results['direction']}"))}
        (out_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        (out_dir / "results.md").write_text(markdown)
    if not args.quiet:
        print(markdown)
    return results


def run_challenge(args):
    """Run the action of parsed `challenge_parser` arguments."""
    return {"list": run_challenge_list, "export": run_challenge_export, "score": run_challenge_score}[args.action](args)
