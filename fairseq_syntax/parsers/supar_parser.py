"""Dependency parses from a SuPar (biaffine) parser over spaCy-tokenised raw sentences.

Raw sentences are split into words with a blank spaCy pipeline's tokenizer (`spacy.blank(lang)`: rules only,
nothing is downloaded), every word keeps its character offset so the whitespace between words is recorded exactly,
and the pre-tokenised word lists are parsed by SuPar in batches (`parse_words` takes such word lists directly, e.g.
the words of generated trees, which are then parsed exactly as given). SuPar is never given `lang=` (that would make it
tokenise with stanza, which downloads models).

Trust: a SuPar model file is a pickle holding functions (dill), so it can only be read with
`torch.load(..., weights_only=False)`, which runs arbitrary code from the file. `SuparParser` does that for the
one file the user names (a model they trained with `fairseq-syntax-train-parser` or otherwise trust), and only for
that load: see `trusted_supar_checkpoint`. Never point it at a model file from an untrusted source.
"""
import contextlib
import itertools
import os
import re
import threading
import warnings
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence

from fairseq_syntax.data.dependency_distributions import (
    DEFAULT_MASS, DEFAULT_MAX_HEADS, CompressionStats, arc_distributions, compress,
)
from fairseq_syntax.data.label_groups import group_matrix, guess_scheme

from .base import ParsedSentence, ParseError, Parser, given_spaces, spaces_from_offsets

_WORD = re.compile(r"\S+")
DEFAULT_MAX_WORDS = 250
_TORCH_LOAD_LOCK = threading.RLock()


@contextlib.contextmanager
def trusted_supar_checkpoint(path: str):
    """Within this block, `torch.load` of exactly the file `path` unpickles it in full (weights_only=False).

    torch >= 2.6 loads with weights_only=True, which cannot read SuPar model files (dill-pickled fields and
    functions). SuPar calls `torch.load(path)` itself, so for the duration of the block `torch.load` is wrapped: a
    call for `path` (the file the user named and trusts) gets weights_only=False and, without CUDA, map_location
    "cpu"; every other call, from any thread, is passed through unchanged. The original `torch.load` is restored
    on exit, also when loading fails.
    """
    import torch

    target = os.path.realpath(path)
    original = torch.load

    def load(f, *args, **kwargs):
        if isinstance(f, (str, os.PathLike)) and os.path.realpath(f) == target:
            kwargs["weights_only"] = False
            if not torch.cuda.is_available():
                kwargs.setdefault("map_location", "cpu")
        return original(f, *args, **kwargs)

    with _TORCH_LOAD_LOCK:
        torch.load = load
        try:
            yield
        finally:
            torch.load = original


@contextlib.contextmanager
def _quiet_supar_warnings():
    """SuPar 1.1.4 on torch 2.x warns (FutureWarning/UserWarning, from inside supar) on every batch."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"supar(\.|$)")
        warnings.filterwarnings("ignore", category=UserWarning, module=r"supar(\.|$)")
        yield


def load_supar_model(model_path: str):
    """Load a SuPar parser from a local model file the caller trusts (see the module docstring). No downloads:
    SuPar would treat a missing path as the name of a released model and fetch it, so a missing file is an error."""
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"SuPar model file not found: {model_path}")
    import supar

    with trusted_supar_checkpoint(model_path):
        return supar.Parser.load(model_path)


@dataclass
class DistributionOptions:
    """What `--source-ldd` stores (see fairseq_syntax/data/dependency_distributions.py)."""

    mass: float = DEFAULT_MASS
    max_heads: int = DEFAULT_MAX_HEADS
    marginals: str = "softmax"
    label_scheme: str = "auto"


class SuparParser(Parser):
    """Parses raw sentences with a SuPar dependency parser (trained by `fairseq-syntax-train-parser`).

    `model_path` is a SuPar model file the user names and trusts (it is unpickled in full). `lang` is the language
    of the sentences; `tokenizer_lang` picks the spaCy blank tokenizer (default: `lang`). Results carry `arc_probs`,
    SuPar's n x (n+1) head distributions (column 0 is the root).

    With `distributions` (a DistributionOptions), every result also carries `distributions`: the compressed labeled
    dependency distributions of LDD (fairseq_syntax/data/dependency_distributions.py), computed from the score
    tensors of SuPar's own forward pass during `predict` (a forward hook reads them; SuPar is not changed), and
    `arc_probs` is not computed. `self.distribution_stats` sums what the compression kept.

    Sentences of more than `max_words` words (None: no limit) come back as ParseError without being parsed:
    SuPar repairs non-tree outputs with a pure-Python, recursive Chu-Liu/Edmonds whose cost grows steeply with
    length (seconds for a 250-word sentence from a weak model) and which hits Python's recursion limit at about
    1,000 words. `tokens_per_batch` is SuPar's own (token) batch size inside each call.
    """

    name = "supar"

    def __init__(self, model_path: str, lang: str, tokenizer_lang: Optional[str] = None,
                 max_words: Optional[int] = DEFAULT_MAX_WORDS, tokens_per_batch: int = 5000,
                 distributions: Optional["DistributionOptions"] = None, arc_probs: bool = True):
        import spacy
        import torch

        self.model_path = model_path
        self.lang = lang
        self.tokenizer_lang = tokenizer_lang or lang
        self.max_words = max_words
        self.tokens_per_batch = tokens_per_batch
        self._tokenizer = spacy.blank(self.tokenizer_lang).tokenizer
        with _quiet_supar_warnings():
            self._parser = load_supar_model(model_path)
        self.distributions = distributions
        self.arc_probs = arc_probs and distributions is None
        self.distribution_stats = CompressionStats()
        if distributions is not None:
            self.label_scheme = distributions.label_scheme
            if self.label_scheme == "auto":
                self.label_scheme = guess_scheme(self.label_inventory())
            relations = list(self._parser.REL.vocab.itos)
            specials = self._specials()
            self._special_relations = torch.tensor([relation in specials for relation in relations])
            try:
                self._group_of_relation = torch.from_numpy(group_matrix(
                    [relation if relation not in specials else "<special>" for relation in relations],
                    self.label_scheme))
            except KeyError as error:
                raise ValueError(f"{model_path}: {error.args[0]} (label scheme {self.label_scheme}; choose another "
                                 f"with --ldd-label-scheme)") from None

    def _specials(self) -> set:
        return set(getattr(self._parser.REL, "specials", []))

    def label_inventory(self) -> List[str]:
        """The model's dependency labels (SuPar's relation vocabulary without its <bos> entry); every label
        `parse` outputs is one of these."""
        specials = self._specials()
        return [label for label in self._parser.REL.vocab.itos if label not in specials]

    # -- tokenisation ---------------------------------------------------------------------------------------
    def tokenize(self, sentence: str) -> ParsedSentence:
        """Words and the whitespace before each; heads/labels left empty. Raises ParseError."""
        if not isinstance(sentence, str) or not sentence.strip():
            raise ParseError("empty sentence")
        words, starts = [], []
        for token in self._tokenizer(sentence):
            # spaCy keeps runs of extra whitespace as tokens; a word never contains whitespace
            for m in _WORD.finditer(token.text):
                words.append(m.group())
                starts.append(token.idx + m.start())
        if not words:
            raise ParseError("empty sentence")
        if self.max_words is not None and len(words) > self.max_words:
            raise ParseError(f"{len(words)} words, more than max_words={self.max_words}")
        spaces = spaces_from_offsets(sentence, words, starts)
        return ParsedSentence(words=words, spaces_before=spaces, heads=[], labels=[])

    # -- parsing --------------------------------------------------------------------------------------------
    def _predict(self, word_lists: List[List[str]]):
        """One SuPar predict call; returns [(heads, labels, probs)] in input order, or raises."""
        import torch

        transform = self._parser.transform
        captured = []
        hook = None
        if self.distributions is not None:
            hook = self._parser.model.register_forward_hook(self._capture_distributions(captured))
        # predict(prob=True) appends a 'probs' field to transform.fields, which is CoNLL's class-level list:
        # it would grow by one per call (and every sentence built later iterates over it). Give the call a
        # private copy and drop it afterwards.
        had_own_fields = "fields" in vars(transform)
        saved_fields = transform.fields
        transform.fields = list(saved_fields)
        try:
            # SuPar's length bucketing draws from torch's global RNG: fork it so callers' random state is
            # untouched and the batching (hence the output) is the same on every run.
            with torch.random.fork_rng(devices=[]), _quiet_supar_warnings():
                torch.default_generator.manual_seed(0)
                dataset = self._parser.predict(word_lists, prob=self.arc_probs, tree=True, proj=False,
                                               verbose=False, batch_size=self.tokens_per_batch, buckets=8)
            sentences = list(dataset.sentences)
            if len(sentences) != len(word_lists):
                raise RuntimeError(f"SuPar returned {len(sentences)} sentences for {len(word_lists)}")
            distributions = self._in_sentence_order(captured, dataset, word_lists) if hook else None
            out = []
            for index, (words, sent) in enumerate(zip(word_lists, sentences)):
                if list(sent.words) != words:
                    raise RuntimeError("SuPar returned sentences in a different order")
                heads = [int(h) for h in sent.arcs]
                labels = [str(r) for r in sent.rels]
                probs = getattr(sent, "probs", None)
                if probs is not None:
                    probs = probs.tolist()
                out.append((heads, labels, probs, distributions[index] if distributions else None))
            return out
        finally:
            if hook is not None:
                hook.remove()
            if had_own_fields:
                transform.fields = saved_fields
            else:
                del transform.fields

    def _capture_distributions(self, captured: list):
        """A forward hook on SuPar's model: compresses each batch's (s_arc, s_rel) as predict computes them (same
        mask as SuPar's _predict: padding out, position 0 = the pseudo-root)."""
        options = self.distributions
        pad_index = self._parser.args.pad_index

        def hook(module, inputs, outputs):
            words = inputs[0]
            word_mask = words.ne(pad_index)
            word_mask = word_mask if word_mask.dim() < 3 else word_mask.any(-1)
            word_mask[:, 0] = False
            arc_scores, relation_scores = outputs
            probs = arc_distributions(arc_scores, word_mask, options.marginals)
            sentences, stats = compress(probs, relation_scores, word_mask,
                                        self._group_of_relation.to(relation_scores.device),
                                        self._special_relations.to(relation_scores.device), options.mass,
                                        options.max_heads)
            captured.append(sentences)
            self.distribution_stats.add(stats)

        return hook

    @staticmethod
    def _in_sentence_order(captured: list, dataset, word_lists) -> list:
        """Batches come in SuPar's bucket order; it restores input order with the same flattening of
        `dataset.buckets` (supar.utils.data.Dataset.__setattr__)."""
        batch_order = [i for bucket in dataset.buckets.values() for i in bucket]
        flat = [sentence for batch in captured for sentence in batch]
        if len(flat) != len(word_lists) or sorted(batch_order) != list(range(len(word_lists))):
            raise RuntimeError(f"captured {len(flat)} distributions for {len(word_lists)} sentences")
        ordered = [None] * len(word_lists)
        for index, sentence in zip(batch_order, flat):
            ordered[index] = sentence
        if any(sentence.num_words != len(words) for words, sentence in zip(word_lists, ordered)):
            raise RuntimeError("captured distributions do not line up with the sentences")
        return ordered

    def _finish(self, sent: ParsedSentence, heads, labels, probs, distributions=None) -> object:
        n = len(sent.words)
        if self._specials().intersection(labels):  # SuPar's argmax may, in principle, pick its <bos> label
            return ParseError("the parser predicted a special (<bos>) label")
        sent.heads, sent.labels = heads, labels
        if probs is not None:
            if len(probs) != n or any(len(row) != n + 1 for row in probs):
                return ParseError("arc probabilities are not n x (n+1)")
            sent.arc_probs = probs
        sent.distributions = distributions
        try:
            sent.validate()
        except ParseError as e:
            return e
        return sent

    def parse(self, sentences: Iterable[str], batch_size: int = 256) -> Iterator[object]:
        """Yield, for each sentence in order, a ParsedSentence or a ParseError instance (empty sentence, more than
        `max_words` words, tokenizer/text mismatch, SuPar failure, or not a tree). Any iterable of strings is read
        lazily; pass stripped lines: leading whitespace is kept in spaces_before[0], trailing whitespace is not
        represented in `.text`. `batch_size` sentences go to SuPar per call; if a call fails or its output does not
        line up with its input, that batch's sentences are parsed one at a time so only the offending sentence is
        reported as failed."""
        batch_size = max(1, int(batch_size))
        iterator = iter(sentences)
        while True:
            chunk = list(itertools.islice(iterator, batch_size))
            if not chunk:
                return
            items = []
            for s in chunk:
                try:
                    items.append(self.tokenize(s))
                except ParseError as e:
                    items.append(e)
            yield from self._parse_items(items)

    def parse_words(self, word_lists: Sequence[Sequence[str]],
                    spaces_before: Optional[Sequence[Sequence[str]]] = None,
                    batch_size: int = 256) -> Iterator[object]:
        """`parse` for sentences already split into words (Parser.parse_words): SuPar parses exactly these words,
        the spaCy tokenizer does not run. A ParseError for an empty word list, an empty word or one with whitespace
        in it, or more than `max_words` words."""
        batch_size = max(1, int(batch_size))
        word_lists = list(word_lists)
        for start in range(0, len(word_lists), batch_size):
            items = []
            for index in range(start, min(start + batch_size, len(word_lists))):
                words = [str(word) for word in word_lists[index]]
                spaces = given_spaces(words, None if spaces_before is None else spaces_before[index])
                if not words:
                    items.append(ParseError("no words"))
                elif any(word == "" or any(c.isspace() for c in word) for word in words):
                    items.append(ParseError("a word is empty or contains whitespace"))
                elif self.max_words is not None and len(words) > self.max_words:
                    items.append(ParseError(f"{len(words)} words, more than max_words={self.max_words}"))
                else:
                    items.append(ParsedSentence(words=words, spaces_before=spaces, heads=[], labels=[]))
            yield from self._parse_items(items)

    def _parse_items(self, items: List[object]) -> Iterator[object]:
        """Parse the ParsedSentence items (words only) of one batch with SuPar; ParseError items pass through. If
        the batch's call fails, its sentences are parsed one at a time, so only the offending one fails."""
        todo = [i for i, it in enumerate(items) if isinstance(it, ParsedSentence)]
        results = {}
        if todo:
            try:
                for i, res in zip(todo, self._predict([items[i].words for i in todo])):
                    results[i] = res
            except Exception:  # noqa: BLE001 -- fall back to one sentence at a time
                for i in todo:
                    try:
                        results[i] = self._predict([items[i].words])[0]
                    except Exception as e:  # noqa: BLE001
                        results[i] = ParseError(f"SuPar failed: {type(e).__name__}: {e}")
        for i, item in enumerate(items):
            if isinstance(item, ParsedSentence):
                res = results[i]
                yield res if isinstance(res, ParseError) else self._finish(item, *res)
            else:
                yield item
