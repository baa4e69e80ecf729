"""Reading a split: its lines (or CoNLL-U trees), normalised and checked, then parsed and (--word-vocabulary)
split into words; every dropped line is kept with its reason (SplitData)."""
import sys
from dataclasses import dataclass, field
from typing import Dict, List

from tqdm import tqdm

from fairseq_syntax.data.channels import MAX_WORDS
from fairseq_syntax.data.text_normalization import normalize_line, parser_view
from fairseq_syntax.data.word_codec import sentence_problem
from fairseq_syntax.parsers import ParseError
from fairseq_syntax.parsers.base import realigned
from fairseq_syntax.parsers.conllu_reader import read_conllu
from .text_input import find_input, read_lines


@dataclass
class SplitData:
    name: str
    line_numbers: List[int] = field(default_factory=list)
    texts: Dict[str, List[str]] = field(default_factory=dict)
    trees: Dict[str, list] = field(default_factory=dict)
    # --word-vocabulary: the words (tokenizer output) of the sides without trees
    words: Dict[str, list] = field(default_factory=dict)
    drops: List[tuple] = field(default_factory=list)  # (line, side, reason, text)
    non_projective: int = 0  # --target-transitions: pairs dropped for a non-projective target tree
    projectivized: int = 0  # --projectivize: non-projective target trees lifted instead
    lifted_words: int = 0  # --projectivize: words that got a new head
    attached_words: int = 0  # --target-transitions: words written without a space (an <attached> mark each)
    collapsed_spaces: int = 0  # --target-transitions: extra space pieces of runs of spaces left out
    # --target-transitions: pairs dropped because decoding cannot read their words (a word with a space inside)
    unreadable_words: int = 0

    def select(self, positions: List[int]) -> None:
        """Keep only these kept-sentence positions, in step across line numbers, texts and trees."""
        self.line_numbers = [self.line_numbers[p] for p in positions]
        self.texts = {lang: [texts[p] for p in positions] for lang, texts in self.texts.items()}
        self.trees = {lang: [trees[p] for p in positions] for lang, trees in self.trees.items()}
        self.words = {lang: [words[p] for p in positions] for lang, words in self.words.items()}


class SplitReading:
    """Preprocessor's reading of the input files (preprocessor.py); uses its args, langs, parser_specs, parsers
    and tokenizers."""

    def shard_range(self, count: int, split: str) -> range:
        """The training lines of this shard: a contiguous chunk, so shards concatenate to the whole."""
        if split != "train" or self.args.num_shards == 1:
            return range(count)
        n, i = self.args.num_shards, self.args.shard_id
        return range(i * count // n, (i + 1) * count // n)

    def read_split(self, split: str, prefix: str) -> SplitData:
        data = SplitData(split)
        raw = {}
        paths = {}
        for lang in self.langs:
            if self.parser_specs[lang] == "conllu":
                paths[lang] = find_input(prefix, lang, ".conllu")
                raw[lang] = list(read_conllu(paths[lang]))
            else:
                paths[lang] = find_input(prefix, lang)
                raw[lang] = read_lines(paths[lang])
        counts = {lang: len(raw[lang]) for lang in self.langs}
        if len(set(counts.values())) != 1:
            unit = {lang: "sentences" if self.parser_specs[lang] == "conllu" else "lines" for lang in self.langs}
            raise SystemExit("mismatched inputs: " + ", ".join(
                f"{paths[lang]} has {counts[lang]} {unit[lang]}" for lang in self.langs))
        # 1. normalise and check every line
        keep = []
        texts = {lang: [] for lang in self.langs}
        given_trees = {lang: [] for lang in self.langs if self.parser_specs[lang] == "conllu"}
        for index in self.shard_range(counts[self.langs[0]], split):
            reason, row = None, {}
            for lang in self.langs:
                item = raw[lang][index]
                if self.parser_specs[lang] == "conllu":
                    start, tree = item
                    if isinstance(tree, ParseError):
                        reason = reason or (lang, f"unusable tree: {tree}")
                        row[lang] = ""
                        continue
                    text, problem = normalize_line(tree.text)
                    if problem is None and text != tree.text:
                        problem = "the sentence starts or ends with whitespace"
                    row[lang] = tree
                else:
                    text, problem = normalize_line(item)
                    row[lang] = text
                if problem:
                    reason = reason or (lang, problem)
            if reason:
                data.drops.append((index + 1, reason[0], reason[1], raw_text(raw, reason[0], index)))
                continue
            keep.append(index)
            for lang in self.langs:
                if lang in given_trees:
                    given_trees[lang].append(row[lang])
                    texts[lang].append(row[lang].text)
                else:
                    texts[lang].append(row[lang])
        # 2. parse the kept sentences, batched
        trees = dict(given_trees)
        for lang, parser in self.parsers.items():
            parsed = tqdm(parser.parse([parser_view(t) for t in texts[lang]], batch_size=self.args.batch_size),
                          total=len(keep), desc=f"parse {split}.{lang}", unit="sent", mininterval=5, file=sys.stderr)
            trees[lang] = [realigned(tree, text) for tree, text in zip(parsed, texts[lang])]
        failed = set()
        for lang in trees:
            for position, tree in enumerate(trees[lang]):
                if isinstance(tree, ParseError) and position not in failed:
                    failed.add(position)
                    data.drops.append((keep[position] + 1, lang, f"parse failed: {tree}", texts[lang][position]))
                elif not isinstance(tree, ParseError) and len(tree.words) > MAX_WORDS and position not in failed:
                    failed.add(position)
                    data.drops.append((keep[position] + 1, lang, f"over {MAX_WORDS} words", texts[lang][position]))
        words = {lang: tokenizer.tokenize(texts[lang]) for lang, tokenizer in self.tokenizers.items()}
        for lang in self.langs if self.args.word_vocabulary else ():  # every word must be able to be a token
            for position, sentence in enumerate(trees[lang] if lang in trees else words[lang]):
                if position in failed:
                    continue
                problem = (f"tokenization failed: {sentence}" if isinstance(sentence, ParseError)
                           else sentence_problem(sentence))
                if problem is not None:
                    failed.add(position)
                    data.drops.append((keep[position] + 1, lang, problem, texts[lang][position]))
        data.line_numbers = [index + 1 for index in keep]
        data.texts, data.trees, data.words = texts, trees, words
        data.select([p for p in range(len(keep)) if p not in failed])
        return data


def raw_text(raw, lang, index) -> str:
    item = raw[lang][index]
    if isinstance(item, tuple):
        return "" if isinstance(item[1], ParseError) else item[1].text
    return item
