"""`fairseq-syntax-evaluate parse-trees`: a parser's parse of the words of generated trees, the reference of the
tree scores (`--parsed-trees` of the scoring command, module `trees`).

    fairseq-syntax-evaluate parse-trees --parser supar:de.supar --lang de --generated-trees gen.conllu \\
        --out parsed.conllu

The generated trees (e.g. `fairseq-generate --trees-out` of a --target-transitions data-bin) are read over their
surface words, as the tree scorer reads them (fairseq_syntax.parsers.conllu_reader), and each sentence's words are
parsed as they are: the parser's `parse_words` (spaCy: a Doc made from the words; SuPar: its word lists), so no
tokenizer runs and the parse has exactly the generated words. The output has one sentence per generated sentence,
in the same order, with the same `# sent_id` and `# text`, so the scorer pairs them by sent_id. A sentence the
parser cannot parse is an error naming it (no sentence is left out, none shifts). A generated word with whitespace
inside (a model can generate a space byte within a word) is given to the parser with "_" for each whitespace
character, and written back as generated.
"""
import argparse
import re
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from fairseq_syntax.data.conllu_output import format_conllu_sentence
from fairseq_syntax.parsers.base import ParsedSentence, ParseError
from fairseq_syntax.parsers.conllu_reader import read_sentences, tree_from_tokenlist

from .metrics import EvaluationError

Sentence = Tuple[Optional[str], Optional[str], ParsedSentence]  # (sent_id, # text, tree over the surface words)


def parse_trees_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-evaluate parse-trees", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parser", required=True, metavar="SPEC",
                        help="spacy:MODEL or supar:PATH (fairseq_syntax.parsers.build_parser)")
    parser.add_argument("--lang", required=True, help="language of the generated words (SuPar's)")
    parser.add_argument("--generated-trees", required=True, metavar="CONLLU", help="the generated trees (CoNLL-U)")
    parser.add_argument("--out", required=True, metavar="CONLLU", help="where the parse goes (CoNLL-U)")
    parser.add_argument("--batch-size", type=int, default=256, help="sentences per parser call")
    return parser


def read_generated(path: Path) -> List[Sentence]:
    """(sent_id, # text, tree) of every sentence of a CoNLL-U file, over its surface words (read as the tree
    scorer reads them: check_tree=False); EvaluationError naming the sentence for one that cannot be read."""
    if not Path(path).is_file():
        raise EvaluationError(f"generated trees not found: {path}")
    sentences = []
    try:
        for where, tokens in read_sentences(str(path)):
            tree = tree_from_tokenlist(tokens, where, check_tree=False)
            metadata = tokens.metadata or {}
            sentences.append((metadata.get("sent_id"), metadata.get("text"), tree))
    except ParseError as error:
        raise EvaluationError(str(error)) from None
    except UnicodeDecodeError as error:
        raise EvaluationError(f"generated trees ({path}): not UTF-8 text ({error})") from None
    return sentences


def conllu_sentence(tree: ParsedSentence, sent_id: Optional[str], text: Optional[str],
                    comments: Sequence[Tuple[str, str]] = ()) -> str:
    """One CoNLL-U sentence of a tree (data/conllu_output.format_conllu_sentence: ID, FORM, HEAD, DEPREL;
    SpaceAfter=No where the next word has no whitespace before it), ending with a blank line; `comments`: further
    `# key = value` lines after the text."""
    return format_conllu_sentence(tree.words, tree.spaces_before, tree.heads, tree.labels, sent_id, text, comments)


def parse_generated(parser, sentences: List[Sentence], source: Path, batch_size: int = 256) -> List[str]:
    """The parser's parse of every sentence's words, as CoNLL-U sentences in the same order; EvaluationError for a
    sentence it cannot parse, or a parse whose words differ from the generated ones."""
    trees = [tree for _, _, tree in sentences]
    stand_ins = [[re.sub(r"\s", "_", word) or "_" for word in t.words] for t in trees]
    parsed = parser.parse_words(stand_ins, [t.spaces_before for t in trees], batch_size=batch_size)
    out = []
    for number, ((sent_id, text, generated), words, result) in enumerate(zip(sentences, stand_ins, parsed), start=1):
        which = f"sentence {number}" + (f" (sent_id {sent_id})" if sent_id is not None else "")
        if isinstance(result, ParseError):
            raise EvaluationError(f"{source}: {which}: {parser.name} cannot parse its words "
                                  f"{generated.words}: {result}")
        if list(result.words) != words:
            raise EvaluationError(f"{source}: {which}: {parser.name} changed the words {words} into {result.words}")
        result = ParsedSentence(list(generated.words), list(generated.spaces_before), result.heads, result.labels)
        out.append(conllu_sentence(result, sent_id, text))
    if len(out) != len(sentences):
        raise EvaluationError(f"{source}: {parser.name} gave {len(out)} parses for {len(sentences)} sentences")
    return out


def run_parse_trees(args, parser=None) -> Path:
    """Parse --generated-trees with --parser and write --out (via a temporary file: no half-written output).
    `parser`: an already built one (tests), else build_parser(--parser, --lang)."""
    sentences = read_generated(Path(args.generated_trees))
    if parser is None:
        from fairseq_syntax.parsers import build_parser

        if args.parser.partition(":")[0] not in ("spacy", "supar"):
            raise EvaluationError(f"--parser {args.parser}: parse-trees needs a parser of raw words, spacy:MODEL "
                                  f"or supar:PATH")
        parser = build_parser(args.parser, args.lang)
    text = "".join(parse_generated(parser, sentences, Path(args.generated_trees), args.batch_size))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(out)
    return out
