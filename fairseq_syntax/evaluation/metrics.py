"""Scoring functions for translations: pure functions over lists of strings, no file access.

Every string metric comes from sacrebleu's metric classes (BLEU, chrF++ = chrF with word n-grams up to 2, TER),
reported with sacrebleu's signature, so the numbers are exactly what the `sacrebleu` command prints for the same
text. RIBES comes from nltk; the paired bootstrap test is sacrebleu's own `PairedTest` (the `--paired-bs` of the
`sacrebleu` command: Moses' bootstrap-hypothesis-difference-significance, 1000 resamples, seed from the
SACREBLEU_SEED environment variable, 12345 when unset).

`references` everywhere is either one reference stream (a list of strings, one per hypothesis) or a list of
streams (multiple references per hypothesis, as sacrebleu takes them).
"""
import bisect
import os
from typing import Dict, List, Mapping, Optional, Sequence, Union

import nltk
from nltk.translate.ribes_score import corpus_ribes as _nltk_corpus_ribes
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

References = Union[Sequence[str], Sequence[Sequence[str]]]

# metric key in our results -> how to build the sacrebleu metric
METRIC_KEYS = ("bleu", "chrf++", "ter")
EXTRA_METRIC_KEYS = ("bleu-1",)  # on request (corpus_score), not in every report
DEFAULT_LENGTH_EDGES = (10, 20, 30, 40, 50)
DEFAULT_BOOTSTRAP_SAMPLES = 1000


class EvaluationError(ValueError):
    """Inputs that cannot be scored (counts that differ, unknown system names, bad bucket edges...)."""


def reference_streams(references: References) -> List[List[str]]:
    """One stream (list of strings) per reference, whether one stream or several were given."""
    references = list(references)
    if not references or isinstance(references[0], str):
        return [list(references)]
    return [list(stream) for stream in references]


def check_counts(hypotheses: Sequence[str], references: References, what: str = "hypotheses") -> List[List[str]]:
    streams = reference_streams(references)
    for number, stream in enumerate(streams, start=1):
        if len(stream) != len(hypotheses):
            raise EvaluationError(f"{what}: {len(hypotheses)} lines, but reference stream {number} has "
                                  f"{len(stream)}")
    return streams


def make_metric(key: str, tokenize: str = "13a"):
    """A fresh sacrebleu metric object for one of METRIC_KEYS. `tokenize` is BLEU's tokenizer (13a, intl, zh,
    ja-mecab, ko-mecab, char, none, flores101/200, spm); chrF++ and TER use their own defaults."""
    if key == "bleu":
        return BLEU(tokenize=tokenize)
    if key == "bleu-1":  # unigram precision times the brevity penalty (the LDD paper's BLEU-1)
        return BLEU(tokenize=tokenize, max_ngram_order=1)
    if key == "chrf++":
        return CHRF(word_order=2)
    if key == "ter":
        return TER()
    raise EvaluationError(f"unknown metric {key!r}; use one of {', '.join(METRIC_KEYS + EXTRA_METRIC_KEYS)}")


def corpus_score(hypotheses: Sequence[str], references: References, key: str = "bleu",
                 tokenize: str = "13a") -> Dict[str, object]:
    """{"name", "score", "signature", "text"} for one sacrebleu metric on the corpus."""
    streams = check_counts(hypotheses, references)
    metric = make_metric(key, tokenize)
    score = metric.corpus_score(list(hypotheses), streams)
    signature = str(metric.get_signature()) + ("|ngram:1" if key == "bleu-1" else "")  # sacrebleu's omits it
    return {"name": score.name, "score": float(score.score), "signature": signature,
            "text": str(score)}


def corpus_scores(hypotheses: Sequence[str], references: References, keys: Sequence[str] = METRIC_KEYS,
                  tokenize: str = "13a") -> Dict[str, Dict[str, object]]:
    """BLEU, chrF++ and TER (or the given subset of METRIC_KEYS) with their signatures."""
    return {key: corpus_score(hypotheses, references, key, tokenize) for key in keys}


def ribes_tokenizer(tokenize: str = "13a"):
    """The function that splits a sentence into RIBES tokens: sacrebleu's tokenizer of that name followed by a
    whitespace split ("none": a plain whitespace split of the text as it is)."""
    tokenizer = BLEU(tokenize=tokenize).tokenizer
    return lambda text: tokenizer(text.strip()).split()


def corpus_ribes(hypotheses: Sequence[str], references: References, tokenize: str = "13a",
                 alpha: float = 0.25, beta: float = 0.10) -> Dict[str, object]:
    """Corpus RIBES (nltk.translate.ribes_score.corpus_ribes: the mean of sentence RIBES, best reference per
    sentence), times 100.

    Tokens: each hypothesis and reference goes through sacrebleu's `tokenize` tokenizer (13a by default, the
    tokenizer BLEU uses, which splits off punctuation) and is then split on whitespace. tokenize="none" splits the
    text on whitespace only (use it for text that is already tokenized, e.g. Moses-tokenized or MeCab-split
    Japanese). nltk's RIBES is a re-implementation of the official RIBES.py (1.03.1); the official script can differ
    slightly."""
    streams = check_counts(hypotheses, references)
    split = ribes_tokenizer(tokenize)
    hyp_tokens = [split(h) for h in hypotheses]
    ref_tokens = [[split(stream[i]) for stream in streams] for i in range(len(hypotheses))]
    score = 100.0 * _nltk_corpus_ribes(ref_tokens, hyp_tokens, alpha=alpha, beta=beta)
    signature = f"nrefs:{len(streams)}|tok:{tokenize}|alpha:{alpha}|beta:{beta}|nltk:{nltk.__version__}"
    return {"name": "RIBES", "score": float(score), "signature": signature, "text": f"RIBES = {score:.2f}"}


# ---------------------------------------------------------------------------------------------- length buckets

def check_length_edges(edges: Sequence[int]) -> List[int]:
    edges = [int(e) for e in edges]
    if not edges or edges[0] <= 0 or any(b <= a for a, b in zip(edges, edges[1:])):
        raise EvaluationError(f"length bucket edges must be positive and strictly increasing, got {edges}")
    return edges


def length_bucket_labels(edges: Sequence[int] = DEFAULT_LENGTH_EDGES) -> List[str]:
    """Edges (10, 20, 30) give the buckets 0-9, 10-19, 20-29 and 30+ (source words)."""
    edges = check_length_edges(edges)
    lows = [0] + edges
    return [f"{low}-{high - 1}" for low, high in zip(lows, edges)] + [f"{edges[-1]}+"]


def source_word_count(source: str) -> int:
    """A source sentence's length: its number of whitespace-separated words."""
    return len(source.split())


def length_bucket_index(length: int, edges: Sequence[int] = DEFAULT_LENGTH_EDGES) -> int:
    """Index of the bucket [edges[i-1], edges[i]) that holds `length` (0 below the first edge, len(edges) for
    edges[-1] and above)."""
    return bisect.bisect_right(list(edges), length)


def bleu_by_length(hypotheses: Sequence[str], references: References, sources: Sequence[str],
                   edges: Sequence[int] = DEFAULT_LENGTH_EDGES, tokenize: str = "13a",
                   keys: Sequence[str] = ("bleu",)) -> List[Dict[str, object]]:
    """Corpus scores (BLEU by default) over the sentences of each source-length bucket. Buckets are on the source's
    whitespace word count: edges (10, 20) give [0, 10), [10, 20), [20, inf). A bucket without sentences has
    score None."""
    edges = check_length_edges(edges)
    streams = check_counts(hypotheses, references)
    if len(sources) != len(hypotheses):
        raise EvaluationError(f"{len(sources)} sources for {len(hypotheses)} hypotheses")
    labels = length_bucket_labels(edges)
    members: List[List[int]] = [[] for _ in labels]
    for i, source in enumerate(sources):
        members[length_bucket_index(source_word_count(source), edges)].append(i)
    lows = [0] + edges
    highs = [e - 1 for e in edges] + [None]
    buckets = []
    for label, low, high, indices in zip(labels, lows, highs, members):
        bucket = {"bucket": label, "min_words": low, "max_words": high, "sentences": len(indices)}
        for key in keys:
            if indices:
                bucket[key] = corpus_score([hypotheses[i] for i in indices],
                                           [[stream[i] for i in indices] for stream in streams], key, tokenize)["score"]
            else:
                bucket[key] = None
        buckets.append(bucket)
    return buckets


# ------------------------------------------------------------------------------------------- paired bootstrap

def _result_dict(result) -> Dict[str, Optional[float]]:
    as_float = lambda v: None if v is None else float(v)  # noqa: E731
    return {"score": as_float(result.score), "mean": as_float(result.mean), "ci": as_float(result.ci),
            "p_value": as_float(result.p_value)}


def paired_bootstrap(systems: Mapping[str, Sequence[str]], references: References, baseline: Optional[str] = None,
                     n_samples: int = DEFAULT_BOOTSTRAP_SAMPLES, keys: Sequence[str] = METRIC_KEYS,
                     tokenize: str = "13a") -> Dict[str, object]:
    """sacrebleu's paired bootstrap resampling test (sacrebleu.significance.PairedTest, test_type="bs") of every
    system against `baseline`, with the 95% confidence interval of each system's score.

    Returns {"baseline", "n_samples", "seed", "signatures": {metric key: signature},
    "systems": {name: {metric key: {"score", "mean", "ci", "p_value"}}}}: "mean" and "ci" are the bootstrap mean and
    the half-width of the 95% interval around it; "p_value" is None for the baseline. With baseline=None (or a
    single system) each system only gets its own confidence interval, each resampled on its own."""
    if not systems:
        raise EvaluationError("no systems to test")
    if baseline is not None and baseline not in systems:
        raise EvaluationError(f"baseline {baseline!r} is not one of the systems: {', '.join(systems)}")
    streams = None
    for name, hypotheses in systems.items():
        streams = check_counts(hypotheses, references, what=f"system {name!r}")
    for key in keys:
        make_metric(key, tokenize)  # unknown keys fail here, before any work

    def run(named):
        metric_objects = {key: make_metric(key, tokenize) for key in keys}
        test = PairedTest([(n, list(h)) for n, h in named], metric_objects, references=streams, test_type="bs",
                          n_samples=n_samples)
        signatures, scores = test()
        # PairedTest keys its output by the score name (BLEU, chrF2++, TER) in the order of `keys`
        names = [name for name in scores if name != "System"]
        return ({key: str(signatures[name]) for key, name in zip(keys, names)},
                {system: {key: _result_dict(scores[name][row]) for key, name in zip(keys, names)}
                 for row, system in enumerate(scores["System"])})

    results: Dict[str, Dict[str, Dict[str, Optional[float]]]] = {}
    if baseline is not None and len(systems) > 1:
        order = [(baseline, systems[baseline])] + [(n, h) for n, h in systems.items() if n != baseline]
        signatures, results = run(order)
    else:
        signatures = {}
        for name, hypotheses in systems.items():
            signatures, one = run([(name, hypotheses)])
            results.update(one)
    results = {name: results[name] for name in systems}
    return {"baseline": baseline, "n_samples": n_samples, "seed": os.environ.get("SACREBLEU_SEED", "12345"),
            "signatures": signatures, "systems": results}


# -------------------------------------------------------------------------------------------------- trees

def _label_at_level(label: str, level: str) -> str:
    return label.split(":")[0] if level == "universal" else label


# CoNLL-U's DEPREL of a word whose label is not given (read back as "_" by conllu_reader without the label check)
UNLABELED = ("_", "", None)


def attachment_scores(gold_heads: Sequence[Sequence[int]], gold_labels: Sequence[Sequence[str]],
                      pred_heads: Sequence[Sequence[int]], pred_labels: Sequence[Sequence[str]],
                      ignore_labels: Sequence[str] = (), label_level: str = "full",
                      gold_words: Optional[Sequence[Sequence[str]]] = None,
                      pred_words: Optional[Sequence[Sequence[str]]] = None) -> Dict[str, float]:
    """UAS and LAS (percent of words) of predicted dependency trees against gold ones, CoNLL-U style: per sentence
    a list of 1-based head indices (0 = root) and a list of labels, one per word.

    Micro-averaged over all words of all sentences. Words whose gold label is in `ignore_labels` (compared at
    `label_level`, e.g. "punct") are not counted. label_level "universal" compares labels without their subtype
    ("nmod:poss" == "nmod"). The two sides must have the same words: the sentence counts and every sentence's
    length must agree (and the words themselves when gold_words/pred_words are given), otherwise EvaluationError.
    LAS is None when the predicted trees carry no labels at all (every DEPREL `_`: a decoder that predicts arcs
    only, such as Dyn-STGCD), rather than a score against labels nobody predicted.
    """
    if label_level not in ("full", "universal"):
        raise EvaluationError(f"label_level must be 'full' or 'universal', got {label_level!r}")
    counts = {len(gold_heads), len(gold_labels), len(pred_heads), len(pred_labels)}
    if len(counts) != 1:
        raise EvaluationError(f"sentence counts differ: gold heads {len(gold_heads)}, gold labels {len(gold_labels)}, "
                              f"predicted heads {len(pred_heads)}, predicted labels {len(pred_labels)}")
    if (gold_words is None) != (pred_words is None):
        raise EvaluationError("give the words of both sides or of neither")
    ignore = {_label_at_level(label, label_level) for label in ignore_labels}
    total = unlabeled = labeled = ignored = 0
    for index, (gh, gl, ph, pl) in enumerate(zip(gold_heads, gold_labels, pred_heads, pred_labels)):
        if not (len(gh) == len(gl) == len(ph) == len(pl)):
            raise EvaluationError(f"sentence {index}: gold has {len(gh)} heads/{len(gl)} labels, prediction "
                                  f"{len(ph)} heads/{len(pl)} labels")
        if gold_words is not None and list(gold_words[index]) != list(pred_words[index]):
            raise EvaluationError(f"sentence {index}: the words differ: gold {list(gold_words[index])} vs "
                                  f"predicted {list(pred_words[index])}")
        for g_head, g_label, p_head, p_label in zip(gh, gl, ph, pl):
            g_label, p_label = _label_at_level(g_label, label_level), _label_at_level(p_label, label_level)
            if g_label in ignore:
                ignored += 1
                continue
            total += 1
            if int(g_head) == int(p_head):
                unlabeled += 1
                if g_label == p_label:
                    labeled += 1
    labeled_trees = any(label not in UNLABELED for labels in pred_labels for label in labels)
    las = (100.0 * labeled / total if total else 0.0) if labeled_trees else None
    return {"uas": 100.0 * unlabeled / total if total else 0.0, "las": las,
            "words": total, "ignored_words": ignored, "sentences": len(gold_heads)}


def tree_attachment_scores(gold_trees, pred_trees, **kwargs) -> Dict[str, float]:
    """attachment_scores over two lists of trees with `.words`, `.heads`, `.labels` (e.g. preprocess's
    ParsedSentence, as read from CoNLL-U by fairseq_syntax.parsers.conllu_reader.read_conllu: over surface words, a
    multiword token one word, the convention the evaluation's `trees` module reads both sides with); the words must
    match."""
    if len(gold_trees) != len(pred_trees):
        raise EvaluationError(f"{len(gold_trees)} gold trees but {len(pred_trees)} predicted trees")
    return attachment_scores([t.heads for t in gold_trees], [t.labels for t in gold_trees],
                             [t.heads for t in pred_trees], [t.labels for t in pred_trees],
                             gold_words=[t.words for t in gold_trees], pred_words=[t.words for t in pred_trees],
                             **kwargs)


__all__ = ["EvaluationError", "METRIC_KEYS", "EXTRA_METRIC_KEYS", "DEFAULT_LENGTH_EDGES", "reference_streams",
           "check_counts", "make_metric", "corpus_score", "corpus_scores", "corpus_ribes", "ribes_tokenizer",
           "length_bucket_labels", "length_bucket_index", "source_word_count", "bleu_by_length", "paired_bootstrap",
           "attachment_scores", "tree_attachment_scores"]
