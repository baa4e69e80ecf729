"""Comparison profiles: what one kind of comparison run trains, on what, and for how long, in a TOML file of
examples/multi30k/profiles/ (chosen with `compare.py --profile NAME` or a path), not in the script.

A profile gives:
  description          one line, printed in the results table
  [data]               vocabulary = {kind = "sentencepiece", size = N} | {kind = "words", min_count = N};
                       joined_dictionary (bool); [[data.bins]]: name, src, tgt, source_parser, target_parser
                       (optional), preprocess (extra fairseq-syntax-preprocess options, e.g. ["--source-ldd"]),
                       target_transitions_parser (optional: the parser of the target language, spacy:MODEL or
                       supar:PATH|@NAME, that systems with target-side transitions, Linearized, parse their
                       data-bin's target side and their generated words with; default: target_parser when that
                       is one of those)
  [model]              options = {...}: fairseq-train options after each system's --arch (they override the
                       preset's sizes: fairseq's architecture functions only fill in what is not given)
  [training]           options = {...}: changes to the shared recipe (examples/multi30k/training.py)
  [budget]             one of max_update, max_epoch, minutes; validate_every (updates: valid loss and BLEU, the
                       learning curves); checkpoint = "best" (by valid BLEU) or "last"; patience (optional, N >= 1:
                       train until the valid BLEU has not risen for N validations in a row, fairseq's --patience,
                       the budget then a cap; a run so stopped is recorded as converged)
  [validation]         bleu_args: fairseq --eval-bleu-args (the valid-BLEU search; greedy keeps curves cheap)
  [generation]         beam (test translation)
  [run]                systems, seeds, challenge_per_set; data_bins (optional: the data-bins a plain run trains
                       on and its results plan lists; default: all; the others run when --data-bins names them)

An options table maps an option name without its dashes to a value: a string or number is the option's value,
a list its values, true a flag, false removes the option from the recipe (e.g. share-all-embeddings = false)."""
import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
BUDGET_KINDS = ("max_update", "max_epoch", "minutes")
BIN_KEYS = ("name", "src", "tgt", "source_parser", "target_parser", "preprocess", "target_transitions_parser")
OptionValue = Union[str, int, float, bool, list]


class ProfileError(ValueError):
    """A profile that cannot be run as written (the message names the file and the entry)."""


@dataclass(frozen=True)
class DataBin:
    name: str
    src: str
    tgt: str
    source_parser: str
    target_parser: Optional[str] = None
    preprocess: Tuple[str, ...] = ()
    target_transitions_parser: Optional[str] = None

    @property
    def transitions_parser(self) -> Optional[str]:
        """The target language's parser of target-side transition systems: target_transitions_parser, else
        target_parser when it parses raw words (spacy:/supar:), else None."""
        if self.target_transitions_parser:
            return self.target_transitions_parser
        return self.target_parser if is_word_parser_spec(self.target_parser) else None


def is_word_parser_spec(spec) -> bool:
    """spacy:MODEL or supar:PATH|@NAME: a parser that can parse raw (and pre-tokenised) words."""
    kind, _, argument = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    return kind in ("spacy", "supar") and bool(argument.strip())


@dataclass
class Profile:
    name: str
    path: Path
    description: str
    vocabulary: Dict[str, object]
    joined_dictionary: bool
    bins: List[DataBin]
    model_options: Dict[str, OptionValue]
    training_options: Dict[str, OptionValue]
    budget: Dict[str, float]
    validate_every: int
    checkpoint: str
    valid_bleu_args: Dict[str, object]
    beam: int
    systems: List[str]
    seeds: List[int]
    challenge_per_set: int
    # stop once the valid BLEU has not risen for this many validations (fairseq's --patience); 0: train the budget
    patience: int = 0
    # the seed whose runs translate the challenge sets: the profile's first, whichever --seeds an invocation gives
    # (a campaign trains one seed per invocation; the sets take ~40 min per target-side system here)
    challenge_seed: int = 1
    # the data-bins a run trains on when --data-bins names none, and whose runs the results plan lists
    run_bins: List[str] = field(default_factory=list)
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def budget_kind(self) -> str:
        return next(iter(self.budget))

    def budget_text(self) -> str:
        kind, value = next(iter(self.budget.items()))
        text = {"max_update": f"{value:g} updates", "max_epoch": f"{value:g} epochs",
                "minutes": f"{value:g} min wall time"}[kind]
        if self.patience:
            return (f"until the valid BLEU has not risen for {self.patience} validations in a row, at most "
                    f"{text}")
        return text

    def budget_record(self) -> Dict[str, object]:
        """What makes two runs of this profile comparable, as a results record keeps it: the budget, validation
        interval, checkpoint rule, beam, and a digest of the recipe (vocabulary, model and training options, the
        valid-BLEU search). Runs whose records differ are not averaged together (results_store.py)."""
        recipe = json.dumps([self.vocabulary, self.joined_dictionary, self.model_options, self.training_options,
                             self.valid_bleu_args], sort_keys=True, default=str)
        # patience only where a profile has it, so that the records of profiles without it keep their budget
        patience = {"patience": self.patience} if self.patience else {}
        return {**self.budget, **patience, "validate_every": self.validate_every, "checkpoint": self.checkpoint,
                "beam": self.beam, "recipe_sha256": hashlib.sha256(recipe.encode()).hexdigest()[:16]}

    def vocabulary_options(self) -> List[str]:
        """fairseq-syntax-preprocess options of the profile's vocabulary."""
        kind = self.vocabulary["kind"]
        joined = ["--joined-dictionary"] if self.joined_dictionary else []
        if kind == "sentencepiece":
            return ["--spm-vocab-size", str(self.vocabulary["size"]), *joined]
        return ["--word-vocabulary", "--word-min-count", str(self.vocabulary["min_count"]), *joined]


def find_profile(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        return path
    candidate = PROFILE_DIR / f"{name_or_path}.toml"
    if not candidate.exists():
        known = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.toml")))
        raise ProfileError(f"no profile {name_or_path!r} (known: {known}; or give a .toml path)")
    return candidate


def load_profile(name_or_path: str, known_systems: Sequence[str]) -> Profile:
    path = find_profile(name_or_path)
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ProfileError(f"{path}: {error}") from None

    def fail(message):
        raise ProfileError(f"{path}: {message}")

    def table(name):
        value = raw.get(name, {})
        if not isinstance(value, dict):
            fail(f"[{name}] must be a table")
        return value

    known_tables = {"description", "data", "model", "training", "budget", "validation", "generation", "run"}
    unknown = sorted(set(raw) - known_tables)
    if unknown:
        fail(f"unknown entries {unknown} (known: {sorted(known_tables)})")
    data, budget, run = table("data"), table("budget"), table("run")
    vocabulary = data.get("vocabulary", {"kind": "sentencepiece", "size": 8000})
    if vocabulary.get("kind") == "sentencepiece":
        vocabulary = {"kind": "sentencepiece", "size": int(vocabulary.get("size", 8000))}
    elif vocabulary.get("kind") == "words":
        vocabulary = {"kind": "words", "min_count": int(vocabulary.get("min_count", 2))}
    else:
        fail(f"data.vocabulary.kind must be 'sentencepiece' or 'words', not {vocabulary.get('kind')!r}")
    bins = []
    for number, entry in enumerate(data.get("bins", []), start=1):
        if not isinstance(entry, dict):
            fail(f"[[data.bins]] entry {number} must be a table")
        missing = [key for key in ("name", "src", "tgt", "source_parser") if key not in entry]
        if missing:
            fail(f"a [[data.bins]] entry lacks {missing}")
        where = f"[[data.bins]] {entry['name']!r}"
        unknown = sorted(set(entry) - set(BIN_KEYS))
        if unknown:
            fail(f"{where}: unknown entries {unknown} (known: {list(BIN_KEYS)})")
        transitions = entry.get("target_transitions_parser")
        if transitions is not None and not is_word_parser_spec(transitions):
            fail(f"{where}: target_transitions_parser must be a parser of the target language ({entry['tgt']}) as "
                 f"spacy:MODEL or supar:PATH|@NAME, not {transitions!r}")
        bins.append(DataBin(entry["name"], entry["src"], entry["tgt"], entry["source_parser"],
                            entry.get("target_parser"), tuple(entry.get("preprocess", ())), transitions))
    if not bins:
        fail("no [[data.bins]]")
    if len({b.name for b in bins}) != len(bins):
        fail("two data-bins with one name")
    budgets = {kind: float(budget[kind]) for kind in BUDGET_KINDS if kind in budget}
    if len(budgets) != 1:
        fail(f"[budget] needs exactly one of {list(BUDGET_KINDS)}, got {sorted(budgets) or 'none'}")
    checkpoint = budget.get("checkpoint", "best")
    if checkpoint not in ("best", "last"):
        fail(f"budget.checkpoint must be 'best' or 'last', not {checkpoint!r}")
    patience = budget.get("patience", 0)
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
        fail(f"budget.patience must be a whole number of validations (0: none), not {patience!r}")
    if patience and "minutes" in budgets:
        fail("budget.patience needs an update or epoch budget as its cap, not minutes")
    unknown = sorted(set(budget) - {*BUDGET_KINDS, "validate_every", "checkpoint", "patience"})
    if unknown:
        fail(f"[budget]: unknown entries {unknown}")
    systems = list(run.get("systems", []))
    unknown_systems = [s for s in systems if s not in known_systems]
    if not systems or unknown_systems:
        fail(f"run.systems: unknown {unknown_systems} (known: {list(known_systems)})" if unknown_systems
             else "run.systems is empty")
    seeds = [int(s) for s in run.get("seeds", [1])]
    bin_names = [b.name for b in bins]
    run_bins = list(run.get("data_bins", bin_names))
    unknown_bins = [name for name in run_bins if name not in bin_names]
    if not run_bins or unknown_bins:
        fail(f"run.data_bins: unknown {unknown_bins} (known: {bin_names})" if unknown_bins
             else "run.data_bins is empty")
    return Profile(
        name=path.stem, path=path, description=str(raw.get("description", path.stem)), vocabulary=vocabulary,
        joined_dictionary=bool(data.get("joined_dictionary", True)), bins=bins,
        model_options=dict(table("model").get("options", {})),
        training_options=dict(table("training").get("options", {})), budget=budgets,
        validate_every=int(budget.get("validate_every", 0)), checkpoint=checkpoint, patience=patience,
        valid_bleu_args=dict(table("validation").get("bleu_args", {"beam": 1})),
        beam=int(table("generation").get("beam", 5)), systems=systems, seeds=seeds,
        challenge_per_set=int(run.get("challenge_per_set", 0)), challenge_seed=seeds[0],
        run_bins=run_bins)


def option_list(options: Dict[str, OptionValue]) -> List[str]:
    """An options table as command-line arguments (false entries are removals: not listed)."""
    args = []
    for name, value in options.items():
        if value is False:
            continue
        args.append(f"--{name}")
        if value is True:
            continue
        args.extend(str(v) for v in value) if isinstance(value, list) else args.append(str(value))
    return args


def split_options(args: Sequence[str]) -> List[Tuple[str, List[str]]]:
    """Command-line arguments as (option, its values) in order; values are the arguments up to the next option."""
    groups: List[Tuple[str, List[str]]] = []
    for arg in args:
        arg = str(arg)
        if arg.startswith("--") or (arg.startswith("-") and len(arg) == 2 and arg[1].isalpha()):
            groups.append((arg, []))
        elif not groups:
            raise ValueError(f"argument {arg!r} before any option")
        else:
            groups[-1][1].append(arg)
    return groups


def with_options(args: Sequence[str], changes: Dict[str, OptionValue]) -> List[str]:
    """`args` with each option of `changes` replaced (in place), removed (false) or appended (new)."""
    groups = split_options(args)
    changed = {f"--{name}": value for name, value in changes.items()}
    result = []
    for option, values in groups:
        if option in changed:
            value = changed.pop(option)
            if value is not False:
                result += option_list({option[2:]: value})
            continue
        result += [option, *values]
    for option, value in changed.items():
        result += option_list({option[2:]: value})
    return result
