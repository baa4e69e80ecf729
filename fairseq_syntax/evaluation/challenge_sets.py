"""Reader for Choshen & Abend's (2019) challenge sets of long-distance dependencies, as kept in
`$DATA_ROOT/challenge_sets/choshen_abend_2019/challenge` (files gzipped; plain files are read too).

What the sets' README (and the snapshot's SOURCE.txt) say about the files, and how this reader uses them:

* `<L>_<phenomenon>[_news][_exactly][<N>].{en,de}`: line-parallel ("Moses style") English/German sentence pairs
  in which the language L (en or de) shows the phenomenon (reflexive, particle, preposition_stranding) with
  head and dependent at least N words apart (N defaults to 1 when there is no number), or exactly N words apart
  with `_exactly`. Without `_news` the pairs come from OPUS Books (domain "books", detokenized text); with
  `_news` from newstest2013 (domain "news", Moses-tokenized text). So en_* sets are source-side challenges for
  En->De and target-side ones for De->En, and de_* the reverse: each set gives both directions.
* `Books_reorder<N>` / `newstest2013_reorder<N>`: pairs that need reordering of at least N words (phenomenon
  "reorder", both sides; lines padded with spaces, stripped here).
* `<name>.ids`: the line of each pair in the corpus it was taken from. In the non-exactly sets there is one id
  per pair. The `*_exactly*.ids` files hold their id list written several times over (3 or 5 copies; in
  de_reflexive_exactly0.ids the copies in between are truncated prefixes: 6422 + 5313 + 4434 + 6422 + 6422 lines).
  The ids of the pairs are the first len(pairs) lines; every later line must repeat that list from its start
  (each copy is a prefix of the first), which is checked. Checked once on the real files: the first len(pairs) ids
  of every `_exactly` set name, in order, the same sentence pairs as the matching minimum-distance set
  (en_particle_exactly3 -> en_particle3, ..._exactly -> the set without a number). A file that breaks the
  pattern gets ids None and a warning instead of wrong ids.
* `<name>.conllu` (UDPipe parses of the tokenized side, many missing from the snapshot) and
  `<name>_marked.txt` (head/dependent marked with *...*) are not read here.
* Subdirectories en-tr/, en-ru/, en-ko/: `en_<phenomenon>_<domain>.tc.en` with `.tc.tr` / `.tc.ru` / `.ko`,
  small sets from other corpora (domain: the corpus name as in the file, bibleA, TED, mozilla, ...; "Books" is
  given as "books"), truecased and tokenized; their distance is the default minimum of 1.

`newstest2013.{en,de}` (the full corpus the news sets come from) and the missing `Books.de-en.*` are corpora, not
challenge sets, and are skipped.
"""
import gzip
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from .. import paths

CHALLENGE_SUBDIR = Path("challenge_sets") / "choshen_abend_2019" / "challenge"
PHENOMENA = ("reflexive", "particle", "preposition_stranding", "reorder")

_LDD_NAME = re.compile(r"^(?P<lang>en|de)_(?P<phenomenon>reflexive|particle|preposition_stranding)"
                       r"(?P<news>_news)?(?P<exactly>_exactly)?(?P<distance>\d+)?$")
_REORDER_NAME = re.compile(r"^(?P<corpus>Books|newstest2013)_reorder(?P<distance>\d+)$")
_PAIR_NAME = re.compile(r"^(?P<lang>en)_(?P<phenomenon>reflexive|particle|preposition_stranding)_(?P<domain>[^.]+)$")
_PAIR_DIR = re.compile(r"^(?P<a>[a-z]{2})-(?P<b>[a-z]{2})$")


class ChallengeSetError(ValueError):
    """A challenge set that cannot be read as asked (unknown direction, sides of different lengths)."""


def default_challenge_dir(data_root: Optional[Path] = None) -> Path:
    return Path(data_root or paths.data_root()) / CHALLENGE_SUBDIR


def open_text(path: Path):
    path = Path(path)
    return gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else open(path, encoding="utf-8")


def read_lines(path: Path, strip: bool = True) -> List[str]:
    """Lines without their newline (and without surrounding whitespace when strip)."""
    with open_text(path) as f:
        return [line.strip() if strip else line.rstrip("\n") for line in f]


@dataclass(frozen=True)
class ChallengeSetInfo:
    """One challenge set on disk (both language sides)."""
    name: str                      # file stem, with the pair subdirectory for other pairs: "en-tr/en_particle_bibleA"
    phenomenon: str                # reflexive | particle | preposition_stranding | reorder
    phenomenon_lang: Optional[str]  # side where the phenomenon was found; None for reordering (both sides)
    domain: str                    # books | news | the corpus name for other pairs (bibleA, TED, mozilla, ...)
    distance: int                  # head-dependent distance in words (minimum, or exact when `exact`)
    exact: bool
    langs: Tuple[str, str]         # the two languages, e.g. ("en", "de")
    files: Dict[str, Path] = field(compare=False)  # language -> text file
    ids_file: Optional[Path] = field(default=None, compare=False)
    tokenized: bool = False        # Moses-tokenized text (news and other-pair sets) rather than plain text

    @property
    def directions(self) -> List[str]:
        a, b = self.langs
        return [f"{a}-{b}", f"{b}-{a}"]

    def side(self, direction: str) -> str:
        """Where the phenomenon is for a translation direction: "source", "target" or "both" (reordering)."""
        src, _ = split_direction(direction)
        if self.phenomenon_lang is None:
            return "both"
        return "source" if self.phenomenon_lang == src else "target"

    @property
    def distance_label(self) -> str:
        return f"={self.distance}" if self.exact else f">={self.distance}"


@dataclass
class ChallengeSet:
    """One challenge set read for one direction."""
    info: ChallengeSetInfo
    direction: str
    sources: List[str]
    references: List[str]
    ids: Optional[List[int]]

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def key(self) -> str:
        return f"{self.info.name}:{self.direction}"

    @property
    def side(self) -> str:
        return self.info.side(self.direction)

    def __len__(self) -> int:
        return len(self.sources)


def split_direction(direction: str) -> Tuple[str, str]:
    parts = direction.split("-")
    if len(parts) != 2 or not all(parts):
        raise ChallengeSetError(f"direction must look like en-de, got {direction!r}")
    return parts[0], parts[1]


def _stem(path: Path) -> Tuple[str, str]:
    """("en_particle3", "en") for en_particle3.en.gz; ("en_particle_TED", "en") for en_particle_TED.tc.en.gz."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    stem, _, lang = name.rpartition(".")
    if stem.endswith(".tc"):
        stem = stem[:-3]
    return stem, lang


def _find(directory: Path, base: str) -> Optional[Path]:
    for candidate in (directory / (base + ".gz"), directory / base):
        if candidate.exists():
            return candidate
    return None


def discover(challenge_dir: Optional[Path] = None) -> List[ChallengeSetInfo]:
    """Every challenge set under the directory, sorted by name."""
    directory = Path(challenge_dir) if challenge_dir is not None else default_challenge_dir()
    if not directory.is_dir():
        raise FileNotFoundError(f"challenge-set directory not found: {directory}")
    found: List[ChallengeSetInfo] = []
    stems = {}
    for path in directory.iterdir():
        if path.is_file():
            stem, lang = _stem(path)
            if lang in ("en", "de"):
                stems.setdefault(stem, {})[lang] = path
    for stem, files in stems.items():
        if set(files) != {"en", "de"}:
            warnings.warn(f"challenge set {directory / stem} has only the {'/'.join(files)} side; skipped")
            continue
        ldd, reorder = _LDD_NAME.match(stem), _REORDER_NAME.match(stem)
        if ldd:
            exact = bool(ldd["exactly"])
            distance = int(ldd["distance"]) if ldd["distance"] else 1
            news = bool(ldd["news"])
            found.append(ChallengeSetInfo(stem, ldd["phenomenon"], ldd["lang"], "news" if news else "books", distance,
                                          exact, ("en", "de"), files, _find(directory, stem + ".ids"), news))
        elif reorder:
            news = reorder["corpus"] == "newstest2013"
            found.append(ChallengeSetInfo(stem, "reorder", None, "news" if news else "books",
                                          int(reorder["distance"]), False, ("en", "de"), files, None, news))
        # anything else (newstest2013 itself, the full Books corpus) is a corpus, not a challenge set
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and _PAIR_DIR.match(p.name)):
        a, b = sub.name.split("-")
        pair_stems = {}
        for path in sub.iterdir():
            stem, lang = _stem(path)
            if lang in (a, b):
                pair_stems.setdefault(stem, {})[lang] = path
        for stem, files in pair_stems.items():
            match = _PAIR_NAME.match(stem)
            if not match or set(files) != {a, b}:
                continue
            domain = "books" if match["domain"] == "Books" else match["domain"]
            found.append(ChallengeSetInfo(f"{sub.name}/{stem}", match["phenomenon"], match["lang"], domain, 1,
                                          False, (a, b), files, None, True))
    return sorted(found, key=lambda info: info.name)


def read_ids(path: Path, count: int) -> Optional[List[int]]:
    """The `count` ids of a set's pairs from its .ids file. A file with exactly `count` lines is the list itself;
    a longer one (the *_exactly*.ids files) must be that list written again and again, each later copy a prefix of
    the first (checked): then the first `count` ids are returned. Anything else warns and returns None."""
    lines = read_lines(path)
    while lines and lines[-1] == "":
        lines.pop()
    try:
        ids = [int(x) for x in lines]
    except ValueError:
        warnings.warn(f"{path}: ids that are not integers; ignored")
        return None
    if len(ids) < count:
        warnings.warn(f"{path}: {len(ids)} ids for {count} sentence pairs; ignored")
        return None
    first = ids[:count]
    if len(set(first)) != count or first != sorted(first):
        warnings.warn(f"{path}: the first {count} ids are not distinct and increasing; ignored")
        return None
    position = count
    while position < len(ids):  # each further copy starts again at first[0] and follows `first`
        end = position + 1
        while end < len(ids) and ids[end] > ids[end - 1]:
            end += 1
        copy = ids[position:end]
        if copy != first[:len(copy)]:
            warnings.warn(f"{path}: line {position + 1} starts a run of ids that does not repeat the first "
                          f"{count}; ignored")
            return None
        position = end
    return first


def load(info: ChallengeSetInfo, direction: str) -> ChallengeSet:
    """Sources and references of a set for one direction (e.g. "en-de": English sources, German references)."""
    src, tgt = split_direction(direction)
    if {src, tgt} != set(info.langs):
        raise ChallengeSetError(f"{info.name} is {'-'.join(info.langs)}; it has no direction {direction}")
    sources, references = read_lines(info.files[src]), read_lines(info.files[tgt])
    if len(sources) != len(references):
        raise ChallengeSetError(f"challenge set {info.name}: {info.files[src]} has {len(sources)} lines but "
                         f"{info.files[tgt]} has {len(references)}")
    ids = read_ids(info.ids_file, len(sources)) if info.ids_file is not None else None
    return ChallengeSet(info, direction, sources, references, ids)


def select(infos: Iterable[ChallengeSetInfo], phenomena: Optional[Sequence[str]] = None,
           domains: Optional[Sequence[str]] = None, names: Optional[Sequence[str]] = None,
           phenomenon_langs: Optional[Sequence[str]] = None, exact: Optional[bool] = None,
           distances: Optional[Sequence[int]] = None, langs: Optional[Sequence[str]] = None) -> List[ChallengeSetInfo]:
    """The sets that pass every filter given (None = no filter)."""
    chosen = []
    for info in infos:
        if phenomena is not None and info.phenomenon not in phenomena:
            continue
        if domains is not None and info.domain not in domains:
            continue
        if names is not None and info.name not in names:
            continue
        if phenomenon_langs is not None and info.phenomenon_lang not in phenomenon_langs:
            continue
        if exact is not None and info.exact != exact:
            continue
        if distances is not None and info.distance not in distances:
            continue
        if langs is not None and set(info.langs) != set(langs):
            continue
        chosen.append(info)
    return chosen


def iter_challenge_sets(challenge_dir: Optional[Path] = None, directions: Optional[Sequence[str]] = None,
                        **filters) -> Iterator[ChallengeSet]:
    """Every (set, direction) pair: each phenomenon x domain x distance variant x direction, with its sentences.
    `directions` (e.g. ["en-de"]) keeps only those; filters are those of `select`."""
    for info in select(discover(challenge_dir), **filters):
        for direction in info.directions:
            if directions is None or direction in directions:
                yield load(info, direction)


# The sets whose sizes match the En<->De challenge sets of Choshen & Abend (2022, App. B), per SOURCE.txt: the
# default minimum distance (1) for reflexive and preposition stranding, exactly-0 for English particles.
PAPER_SETS = ("en_reflexive", "en_particle_exactly0", "en_preposition_stranding", "en_reflexive_news",
              "en_particle_news", "en_preposition_stranding_news", "de_particle", "de_particle_news",
              "de_reflexive", "de_reflexive_news")
