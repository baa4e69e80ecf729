"""Tree scoring of `fairseq-syntax-evaluate` (the options --generated-trees / --parsed-trees of the scoring
command): UAS/LAS of the trees a system generated with its output against a parser's parse of the same output.

Both files are CoNLL-U, read with the project's one reader (fairseq_syntax.parsers.conllu_reader, the convention
of preprocessing): trees over surface words, a multiword token (e.g. German "zum" = "zu dem") one word with the
head and label of its word closest to the root, empty nodes skipped. Trees are not checked for well-formedness: a
generated tree with two roots or a cycle is still scored.

Sentences are paired by `# sent_id` when every sentence of both files has one (`fairseq-generate --trees-out` and
`fairseq-syntax-evaluate parse-trees` write them): the same ids in any order, else an error naming the ids one file
lacks; otherwise by position. A graph decoder (Dyn-STGCD) writes each word's raw argmax head beside its tree
(`# argmax_heads = ...`): their UAS is reported too, as `argmax_uas`.
"""
import argparse
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from fairseq_syntax.data.conllu_output import ARGMAX_HEADS  # the comment of a graph decoder's raw heads
from fairseq_syntax.parsers.base import ParsedSentence, ParseError
from fairseq_syntax.parsers.conllu_reader import read_blocks, read_conllu

from . import metrics
from .metrics import EvaluationError
from .reporting import fmt, plots

TreeForPlot = Tuple[str, ParsedSentence]  # (system name, one of its generated trees)


def read_trees(path: Path, what: str) -> List[ParsedSentence]:
    """Every sentence of a (possibly gzipped) CoNLL-U file as a tree over its surface words (words, heads,
    labels), read by conllu_reader.read_conllu without the well-formedness check; EvaluationError naming `what`
    and the sentence for a sentence that cannot be read (no head, a head outside the sentence, malformed
    CoNLL-U...)."""
    if not Path(path).is_file():
        raise EvaluationError(f"{what} not found: {path}")
    trees = []
    try:
        for number, (_, tree) in enumerate(read_conllu(str(path), check_tree=False), start=1):
            if isinstance(tree, ParseError):
                raise EvaluationError(f"{what}: sentence {number}: {tree}")
            trees.append(tree)
    except UnicodeDecodeError as error:
        raise EvaluationError(f"{what} ({path}): not UTF-8 text ({error})") from None
    return trees


def sentence_ids(path: Path) -> List[Optional[str]]:
    """The `# sent_id` of every sentence block of a CoNLL-U file (None where a block has none), in order."""
    ids = []
    for _, block in read_blocks(str(path)):
        found = None
        for line in block.splitlines():
            if line.startswith("#") and line[1:].strip().startswith("sent_id"):
                key, _, value = line[1:].partition("=")
                if key.strip() == "sent_id":
                    found = value.strip()
                    break
        ids.append(found)
    return ids


def paired_by_id(generated: Path, parsed: Path, gen_trees: List[ParsedSentence],
                 ref_trees: List[ParsedSentence]) -> List[ParsedSentence]:
    """`ref_trees` in the order of `gen_trees`' sent_ids when both files give every sentence one (EvaluationError
    when the ids differ or repeat), else as they are (paired by position)."""
    gen_ids, ref_ids = sentence_ids(generated), sentence_ids(parsed)
    if None in gen_ids or None in ref_ids or len(gen_ids) != len(gen_trees) or len(ref_ids) != len(ref_trees):
        return ref_trees
    for ids, path in ((gen_ids, generated), (ref_ids, parsed)):
        if len(set(ids)) != len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise EvaluationError(f"{path}: sent_id repeated: {', '.join(repeated[:10])}")
    if gen_ids == ref_ids:
        return ref_trees
    gen_set, ref_set = set(gen_ids), set(ref_ids)
    missing, extra = [i for i in gen_ids if i not in ref_set], [i for i in ref_ids if i not in gen_set]
    if missing or extra:
        raise EvaluationError(f"the sentences differ: {parsed} lacks sent_id {', '.join(missing[:10]) or '-'}; "
                              f"{generated} lacks sent_id {', '.join(extra[:10]) or '-'}")
    position = {sent_id: index for index, sent_id in enumerate(ref_ids)}
    return [ref_trees[position[sent_id]] for sent_id in gen_ids]


def named_files(specs: Optional[Sequence[str]], option: str) -> Dict[str, Path]:
    named = {}
    for spec in specs or ():
        if "=" not in spec:
            raise EvaluationError(f"{option} takes NAME=FILE, got {spec!r}")
        name, path = spec.split("=", 1)
        named[name] = Path(path)
    return named


def add_tree_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The tree-scoring options of the scoring command."""
    parser.add_argument("--generated-trees", action="append", metavar="NAME=CONLLU",
                        help="trees a system generated with its output (CoNLL-U)")
    parser.add_argument("--parsed-trees", action="append", metavar="NAME=CONLLU",
                        help="a parser's parse of the same system output (CoNLL-U), the reference for UAS/LAS")
    parser.add_argument("--tree-ignore-labels", default="", help="comma-separated labels not scored (e.g. punct)")
    parser.add_argument("--tree-label-level", choices=("full", "universal"), default="full")
    parser.add_argument("--tree-index", type=int, default=0, help="sentence of the generated-tree plot")
    return parser


def run_trees(args, system_names: Iterable[str]) -> Tuple[Dict[str, Dict[str, float]], Optional[TreeForPlot]]:
    """UAS/LAS per system named in --generated-trees (its --parsed-trees file is the reference), and the generated
    tree of the plot (--tree-index of the first system with trees; None without trees)."""
    system_names = set(system_names)
    generated = named_files(args.generated_trees, "--generated-trees")
    parsed = named_files(args.parsed_trees, "--parsed-trees")
    if set(generated) != set(parsed):
        raise EvaluationError("--generated-trees and --parsed-trees must name the same systems")
    ignore = [label for label in args.tree_ignore_labels.split(",") if label]
    results: Dict[str, Dict[str, float]] = {}
    tree_for_plot = None
    for name in generated:
        if name not in system_names:
            raise EvaluationError(f"trees given for {name!r}, which is not a --system")
        results[name], gen_trees = tree_scores(name, generated[name], parsed[name], ignore, args.tree_label_level)
        if tree_for_plot is None and gen_trees:
            tree_for_plot = (name, gen_trees[min(args.tree_index, len(gen_trees) - 1)])
    return results, tree_for_plot


def argmax_heads(path: Path) -> List[Optional[List[int]]]:
    """The `# argmax_heads = h1 h2 ...` of every sentence block of a CoNLL-U file (None where a block has none):
    a graph decoder's raw heads (each word's highest-scoring one) before they were decoded into the tree."""
    found = []
    for _, block in read_blocks(str(path)):
        heads = None
        for line in block.splitlines():
            key, _, value = line[1:].partition("=") if line.startswith("#") else ("", "", "")
            if key.strip() == ARGMAX_HEADS:
                heads = [int(h) for h in value.split()]
        found.append(heads)
    return found


def tree_scores(name: str, generated: Path, parsed: Path, ignore_labels: Sequence[str] = (),
                label_level: str = "full") -> Tuple[Dict[str, float], List[ParsedSentence]]:
    """UAS/LAS of a system's generated trees against a parser's parse of the same words (paired by sent_id), and
    the generated trees; where every generated sentence also carries its raw argmax heads (ARGMAX_HEADS), their
    UAS as `argmax_uas`. EvaluationError naming the system and both files."""
    gen_trees = read_trees(generated, f"generated trees of {name!r}")
    ref_trees = read_trees(parsed, f"parsed trees of {name!r}")
    try:
        ref_trees = paired_by_id(generated, parsed, gen_trees, ref_trees)
        scores = metrics.tree_attachment_scores(ref_trees, gen_trees, ignore_labels=list(ignore_labels),
                                                label_level=label_level)
        raw = argmax_heads(generated)
        if gen_trees and len(raw) == len(gen_trees) and all(heads is not None for heads in raw):
            for number, (tree, heads) in enumerate(zip(gen_trees, raw), start=1):
                if len(heads) != len(tree.words):
                    raise EvaluationError(f"sentence {number}: {len(heads)} {ARGMAX_HEADS} for {len(tree.words)} "
                                          f"words")
            argmax_trees = [ParsedSentence(t.words, t.spaces_before, heads, t.labels)
                            for t, heads in zip(gen_trees, raw)]
            scores["argmax_uas"] = metrics.tree_attachment_scores(ref_trees, argmax_trees)["uas"]
    except EvaluationError as error:
        raise EvaluationError(f"trees of {name!r} ({generated} vs {parsed}): {error}") from None
    return scores, gen_trees


def plot_tree(tree_for_plot: TreeForPlot, out_dir: Path) -> str:
    name, tree = tree_for_plot
    return str(plots().plot_dependency_tree(tree.words, tree.heads, tree.labels, Path(out_dir) / "tree.png",
                                            title=f"generated tree ({name})"))


def trees_markdown(systems: Dict[str, dict]) -> List[str]:
    """The report's section on generated trees (no lines when no system has tree scores)."""
    trees = {name: s["trees"] for name, s in systems.items() if s.get("trees")}
    if not trees:
        return []
    lines = ["", "## Generated trees against a parse of the same output", "",
             "| System | UAS | LAS | Words | Sentences |", "|---|---|---|---|---|"]
    argmax = any("argmax_uas" in t for t in trees.values())
    if argmax:  # a graph decoder's raw heads, before the tree decoding
        lines[-2:] = ["| System | UAS | UAS of the raw argmax | LAS | Words | Sentences |", "|---|---|---|---|---|---|"]
    for name, t in trees.items():
        raw = f" {fmt(t['argmax_uas']) if 'argmax_uas' in t else '-'} |" if argmax else ""
        lines.append(f"| {name} | {fmt(t['uas'])} |{raw} {fmt(t['las'])} | {t['words']} | {t['sentences']} |")
    return lines
