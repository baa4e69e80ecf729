"""Target-side transitions in a data-bin (`fairseq-syntax-preprocess --target-transitions`): the channels that
carry the graph of every prefix, and the conversion of one parsed target sentence into its transition tokens.

The target token stream of such a data-bin is the oracle's transition sequence (oracle.py): the sentence's
pieces, with an <attached> mark before every word written without a space, interleaved with LEFT-ARC:l /
RIGHT-ARC:l tokens, then EOS. Its side channels are two edge channels, one row
per edge of the sequence's graph (state.TransitionEdges), so the graph of the prefix tokens[:n] is the rows
with step < n (positions are 0-based token positions of the target, EOS excluded):
  transition_edges        (source position, target position, step, edge kind), uint16
  transition_edge_labels  the edge's label id in dict.{tgt}.labels.txt
The tree channels (word_ids, heads, labels) are not written for that side: word_ids is one row per piece, and the
target's tokens are no longer its pieces; heads and labels are read back from the tokens by f (transition_state).
`syntax.json` lists the added tokens (tokens.transition_vocabulary: the mark, then the arc tokens) under
`target_transitions` (SyntaxManifest), in the order they were appended to the target dictionary.
"""
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..channels import ChannelSpec, LabelDictionary, SentenceSyntax, SyntaxManifest, register_channel
from .oracle import oracle
from .state import EDGE_FROM_TRANSITION, EDGE_TO_TRANSITION, EDGE_WORD
from .tokens import (
    ATTACHED_MARK, EOS, FAIRSEQ_SPECIALS, WORD_CONTINUATIONS, WORD_MARK_ONLY, WORD_START, every_piece_is_a_word,
    mark_attached_words, starts_with_word_mark, vocabulary_classes, vocabulary_labels,
)

EDGES_CHANNEL, EDGE_LABELS_CHANNEL = "transition_edges", "transition_edge_labels"
TRANSITION_CHANNELS = (EDGES_CHANNEL, EDGE_LABELS_CHANNEL)
EDGE_FIELDS = ("source", "target", "step", "kind")  # the columns of a transition_edges row
MAX_EDGE_KIND = EDGE_TO_TRANSITION

for _spec in (
    ChannelSpec(EDGES_CHANNEL, "edge", "integer", np.uint16, width=len(EDGE_FIELDS),
                help="target transition graph: (source position, target position, step, kind) of every edge; the "
                     "graph of tokens[:n] is the edges with step < n"),
    ChannelSpec(EDGE_LABELS_CHANNEL, "edge", "label", np.uint16,
                help="dependency label id of every transition_edges row (dict.{lang}.labels.txt)"),
):
    register_channel(_spec)


def word_rule(word_level: bool):
    """The word-boundary rule of a data-bin's target tokens at decoding time: every token is a word in a word-level
    data-bin, else sentencepiece's U+2581 rule (tokens.py, "Word boundaries")."""
    return every_piece_is_a_word if word_level else starts_with_word_mark


def target_token_classes(symbols: Sequence[str], word_level: bool):
    """(V,) the transition class of every symbol of a data-bin's target dictionary, by its word rule (word_rule).
    In a word-level data-bin `<unk>` is a word (one outside the vocabulary: unknown target words are read as words
    and may be generated); with sentencepiece's byte fallback it never occurs and stays never valid."""
    specials = tuple(s for s in FAIRSEQ_SPECIALS if not (word_level and s == "<unk>"))
    return vocabulary_classes(symbols, word_rule(word_level), specials=specials)


def transition_sequence(heads: Sequence[int], labels: Sequence[str], pieces: Sequence[str],
                        word_ids: Sequence[int], word_initial=starts_with_word_mark) -> Tuple[List[str], List[int]]:
    """The oracle's tokens and their word ids (NO_WORD on arcs) for a parsed sentence with its explicit
    piece -> word map, with the attached-word marks that let `word_initial` (word_rule) read the same words at
    decoding; raises errors.NonProjectiveError / InvalidTreeError."""
    marked, marked_ids = mark_attached_words(list(pieces), [int(w) for w in word_ids], word_initial)
    sequence = oracle(list(heads), list(labels), marked, marked_ids, word_initial)
    return sequence.tokens, sequence.word_ids


def transition_syntaxes(sequences: Sequence[Sequence[str]], word_ids: Sequence[Sequence[int]],
                        label_dict: LabelDictionary, word_initial=starts_with_word_mark,
                        batch_size: int = 256) -> List[SentenceSyntax]:
    """The transition channels of target sentences (their transition tokens and the word of each piece, NO_WORD on
    arcs, as transition_sequence gives them), from the batched transition function (function.py) that
    training and decoding use: the graph of each sequence as edge rows ordered by (step, kind, source, target), the
    order of state.transition_edges. Raises ValueError where the words the function reads differ from the
    given ones (the attached-word marks failed)."""
    import torch

    from .function import TransitionScan

    out: List[SentenceSyntax] = []
    for start in range(0, len(sequences), batch_size):
        chunk, chunk_ids = sequences[start:start + batch_size], word_ids[start:start + batch_size]
        symbols = sorted({token for tokens in chunk for token in tokens}) + ["<pad>"]
        index = {symbol: i for i, symbol in enumerate(symbols)}
        classes = vocabulary_classes(symbols, word_initial)
        labels = vocabulary_labels(symbols, lambda label: label_dict.encode(label))
        width = max((len(tokens) for tokens in chunk), default=0)
        ids = torch.full((len(chunk), width), index["<pad>"], dtype=torch.long)
        for row, tokens in enumerate(chunk):
            ids[row, :len(tokens)] = torch.tensor([index[token] for token in tokens], dtype=torch.long)
        scan = TransitionScan.of(ids, classes, labels)
        steps = scan.parent_steps()
        for row, (tokens, given) in enumerate(zip(chunk, chunk_ids)):
            n = len(tokens)
            if scan.word[row, :n].tolist() != [int(w) for w in given]:
                raise ValueError(f"transition sequence {start + row}: the words read from the tokens differ from "
                                 f"the given ones ({' '.join(tokens)})")
            target, source = (steps[row, :n, :n] >= 0).nonzero(as_tuple=True)
            step = steps[row, target, source]
            is_arc = scan.head[row, :n] >= 0
            kind = torch.where(is_arc[source], EDGE_FROM_TRANSITION,
                               torch.where(is_arc[target], EDGE_TO_TRANSITION, EDGE_WORD))
            order = np.lexsort((target.numpy(), source.numpy(), kind.numpy(), step.numpy()))
            rows = torch.stack([source, target, step, kind], dim=1).numpy()[order]
            out.append(SentenceSyntax(**{EDGES_CHANNEL: rows.astype(np.int64).reshape(-1),
                                         EDGE_LABELS_CHANNEL: scan.label[row, step].numpy()[order].astype(np.int64)}))
    return out


# ---- target words: fairseq's wps counts every target token, arcs and marks included -------------------------------

# sentencepiece pieces (or words of a word vocabulary); WORD_MARK_ONLY holds a lone "\u2581" piece, a piece of the
# plain target too, and the attached-word mark, which is not (target_token_counts tells them apart by symbol)
PIECE_CLASSES = (WORD_START, *WORD_CONTINUATIONS, WORD_MARK_ONLY)


def target_token_counts(token_ids: np.ndarray, classes: Sequence[int], symbols: Sequence[str]) -> Dict[str, int]:
    """Counts over target token ids (every sentence's, EOS included): `tokens` (all), `pieces`, `eos`, and
    `words` = pieces + EOS (what fairseq counts for a plain target). `classes`: the transition class of every
    dictionary symbol (target_token_classes); `symbols`: the dictionary's symbols."""
    token_ids = np.asarray(token_ids, dtype=np.int64).ravel()
    is_piece = np.isin(np.asarray(classes, dtype=np.int64), PIECE_CLASSES)
    is_piece &= np.array([symbol != ATTACHED_MARK for symbol in symbols[:len(is_piece)]], dtype=bool)
    per_token = np.asarray(classes, dtype=np.int64)[token_ids]
    pieces = int(is_piece[token_ids].sum())
    eos = int((per_token == EOS).sum())
    return {"tokens": int(token_ids.size), "pieces": pieces, "eos": eos, "words": pieces + eos}


def word_share(counts: Dict[str, int]) -> float:
    """Target words per target token (1.0 on a plain data-bin): fairseq's wps times this is words/s."""
    return counts["words"] / counts["tokens"]


def target_word_share(data_dir: str, src: str, tgt: str, split: str = "train") -> float:
    """word_share of a data-bin's `split` target side: 1.0 unless the data-bin has target transitions (its
    manifest's `target_transitions`), whose arc tokens and attached-word marks fairseq's wps counts but a plain
    target has not. Train target words/s = wps x this, the same count for every system."""
    manifest = SyntaxManifest.load(data_dir)
    if manifest is None or not manifest.target_transitions:
        return 1.0
    from fairseq.data import Dictionary, data_utils

    dictionary = Dictionary.load(os.path.join(data_dir, f"dict.{tgt}.txt"))
    prefix = os.path.join(data_dir, f"{split}.{src}-{tgt}.{tgt}")
    dataset = data_utils.load_indexed_dataset(prefix, dictionary, "mmap")
    if dataset is None:
        raise FileNotFoundError(f"{prefix}.bin/.idx: no {split} target side in {data_dir}")
    token_ids = np.concatenate([dataset[i].numpy() for i in range(len(dataset))])
    classes = target_token_classes(dictionary.symbols, manifest.word_level).numpy()
    return word_share(target_token_counts(token_ids, classes, dictionary.symbols))
