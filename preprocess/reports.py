"""The reports of a preprocessing run besides the data: per split {split}.linemap (the original line number of
every kept pair) and {split}.drops.tsv (every dropped line with its reason), and the multiword-token counts of
preprocess.json."""
import logging
import os
from typing import Dict

from .reading import SplitData

logger = logging.getLogger("fairseq_syntax.preprocess")


def multiword_counts(trees) -> Dict[str, int]:
    """Of trees read from CoNLL-U: the sentences with a multiword token, the multiword tokens (each read as one
    surface word, its tree changed: conllu_reader) and the syntactic words they held."""
    return {"sentences": sum(1 for tree in trees if tree.multiword_tokens),
            "tokens": sum(tree.multiword_tokens for tree in trees),
            "syntactic_words": sum(tree.merged_words for tree in trees)}


def write_reports(destdir: str, data: SplitData):
    with open(os.path.join(destdir, f"{data.name}.linemap"), "w") as f:
        f.writelines(f"{n}\n" for n in data.line_numbers)
    with open(os.path.join(destdir, f"{data.name}.drops.tsv"), "w", encoding="utf-8") as f:
        f.write("line\tside\treason\ttext\n")
        for line, side, reason, text in sorted(data.drops):
            f.write(f"{line}\t{side}\t{reason}\t{clean_for_report(text)}\n")
    if data.drops:
        logger.warning("%s: dropped %d of %d lines (reasons in %s.drops.tsv)", data.name, len(data.drops),
                       len(data.drops) + len(data.line_numbers), data.name)


def clean_for_report(text: str) -> str:
    text = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)
    return text[:300]
