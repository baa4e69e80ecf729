"""The batched transition function (fairseq_syntax/data/transitions/function.py): the paper's example worked by hand
(§3's table), and every prefix of the sequences of UD German PUD (and GSD) against the Python reference
TransitionState and its edge list, on the CPU and on CUDA."""
import random
from pathlib import Path

import pytest
import torch

from fairseq_syntax.data.transitions.projectivity import projectivize
from fairseq_syntax.data.transitions.errors import InvalidTransitionError
from fairseq_syntax.data.transitions.function import TransitionScan
from fairseq_syntax.data.transitions.oracle import oracle
from fairseq_syntax.data.transitions.state import TransitionState, transition_edges
from fairseq_syntax.data.transitions.tokens import (
    EOS, mark_attached_words, parse_arc, vocabulary_classes, vocabulary_labels,
)

from .devices import on
from .test_transitions import M, PAPER_TOKENS, make_pieces, read_treebank, split_word

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
PAD = 1


def vocabulary(sequences, extra=()):
    symbols = SPECIALS + sorted({t for s in sequences for t in s} | set(extra))
    labels = sorted({p[1] for t in symbols if (p := parse_arc(t))})
    label_index = {label: i for i, label in enumerate(labels)}
    return symbols, vocabulary_classes(symbols), vocabulary_labels(symbols, label_index), label_index


def ids_of(sequences, symbols, width=None):
    index = {s: i for i, s in enumerate(symbols)}
    width = width or max(len(s) for s in sequences)
    return torch.tensor([[index[t] for t in s] + [PAD] * (width - len(s)) for s in sequences])


def test_paper_example_by_hand(device):
    """"Jo@@ hn put LEFT-ARC:nsubj the coals LEFT-ARC:det RIGHT-ARC:obj out RIGHT-ARC:compound:prt" (positions 0..9):
    the words, arcs and, per token, its parents in the graph with the step each appears (§3: LEFT-ARC x with top a,
    second b adds a->b, x->b, a->x; RIGHT-ARC b->a, x->a, b->x; from/to a word = from/to each of its pieces)."""
    symbols, classes, labels, label_index = vocabulary([PAPER_TOKENS])
    scan = TransitionScan.of(on(device, ids_of([PAPER_TOKENS], symbols)), on(device, classes), on(device, labels))
    assert scan.word[0].tolist() == [0, 0, 1, -1, 2, 3, -1, -1, 4, -1]
    assert scan.head[0].tolist() == [-1, -1, -1, 1, -1, -1, 3, 1, -1, 1]
    assert scan.dependent[0].tolist() == [-1, -1, -1, 0, -1, -1, 2, 3, -1, 4]
    nsubj, det, obj, prt = (label_index[x] for x in ("nsubj", "det", "obj", "compound:prt"))
    assert scan.label[0].tolist() == [-1, -1, -1, nsubj, -1, -1, det, obj, -1, prt]
    assert (int(scan.depth[0]), int(scan.stack[0, 0]), int(scan.num_words[0])) == (1, 1, 5)
    assert scan.allowed_classes()[0].tolist()[EOS] and not bool(scan.open[0])
    parents = {  # token -> {parent token: step}
        0: {2: 3, 3: 3}, 1: {2: 3, 3: 3}, 2: {}, 3: {2: 3},
        4: {5: 6, 6: 6}, 5: {2: 7, 7: 7}, 6: {5: 6}, 7: {2: 7},
        8: {2: 9, 9: 9}, 9: {2: 9},
    }
    steps = scan.parent_steps()[0].cpu()
    for token, expected in parents.items():
        assert {j: int(steps[token, j]) for j in range(10) if steps[token, j] >= 0} == expected, token
    # the graph of the first 7 tokens: "coals" has no parent yet (its RIGHT-ARC:obj is token 7)
    assert not bool(((steps[5] >= 0) & (steps[5] < 7)).any()) and bool(((steps[4] >= 0) & (steps[4] < 7)).any())
    # the same prefix scanned alone gives the same graph
    short = TransitionScan.of(on(device, ids_of([PAPER_TOKENS[:7]], symbols)), on(device, classes))
    assert torch.equal(short.parent_steps()[0].cpu(), torch.where(steps[:7, :7] < 7, steps[:7, :7], -1))


@pytest.fixture(scope="module")
def pud_sequences(data_root):
    """The oracle's sequences of every German PUD and GSD tree (non-projective ones lifted), words split into 1-3
    pieces at random, attached-word marks where the sentence has no space: (tokens, word ids, heads, labels)."""
    files = ["UD_German-PUD/de_pud-ud-test.conllu.gz", "UD_German-GSD/de_gsd-ud-test.conllu.gz"]
    paths = [Path(data_root) / "ud" / f for f in files]
    if not all(p.exists() for p in paths):
        pytest.skip(f"missing treebanks: {paths}")
    rng = random.Random(5)
    out = []
    for forms, heads, labels, space_before in (s for p in paths for s in read_treebank(p)):
        heads, _ = projectivize(heads)
        pieces, word_ids = make_pieces(forms, [split_word(f, rng) for f in forms], space_before)
        marked, marked_ids = mark_attached_words(pieces, word_ids)
        sequence = oracle(heads, labels, marked, marked_ids)
        out.append((sequence.tokens, heads, labels))
    return out


def test_every_prefix_equals_the_reference(pud_sequences, device):
    """All sequences in one right-padded batch (padding is never valid: it changes nothing), one column at a time:
    after every step each row's stack, words, open/attached flags, its history (word of each piece, head,
    dependent and label of each arc) and validity equal TransitionState's on the same prefix; the final graph
    equals the reference edge list's step matrix, and the graph of every prefix is the steps before it."""
    sequences = [tokens for tokens, _, _ in pud_sequences]
    symbols, classes, labels, label_index = vocabulary(sequences)
    ids = ids_of(sequences, symbols)
    references = [TransitionState() for _ in sequences]
    scan = TransitionScan.initial(len(sequences), torch.device(device))
    classes_d, labels_d = on(device, classes), on(device, labels)
    for column in range(ids.size(1)):
        scan = scan.extend(on(device, ids[:, column:column + 1]), classes_d, labels_d)
        depth, stack, words = scan.depth.tolist(), scan.stack.tolist(), scan.num_words.tolist()
        is_open, bare, allowed = scan.open.tolist(), scan.bare.tolist(), scan.allowed_classes().tolist()
        for row, (tokens, reference) in enumerate(zip(sequences, references)):
            if column < len(tokens):
                reference.step(tokens[column])
            assert depth[row] == len(reference.stack) and stack[row][:depth[row]] == reference.stack, (row, column)
            assert words[row] == reference.num_words and is_open[row] == reference.open, (row, column)
            assert bare[row] == reference.bare, (row, column)
            assert {c for c, a in enumerate(allowed[row]) if a} == set(reference.allowed()), (row, column)
    word, head, dependent, label = (x.tolist() for x in (scan.word, scan.head, scan.dependent, scan.label))
    for row, (tokens, reference) in enumerate(zip(sequences, references)):
        n = len(tokens)
        pieces = {p: w for w, positions in enumerate(reference.word_pieces) for p in positions}
        assert word[row][:n] == [pieces.get(p, -1) for p in range(n)], row
        arcs = {arc.step: arc for arc in reference.arcs}
        assert head[row][:n] == [arcs[p].head if p in arcs else -1 for p in range(n)], row
        assert dependent[row][:n] == [arcs[p].dependent if p in arcs else -1 for p in range(n)], row
        assert label[row][:n] == [label_index[arcs[p].label] if p in arcs else -1 for p in range(n)], row
        assert word[row][n:] == head[row][n:] == [-1] * (ids.size(1) - n)  # padding changed nothing
    steps = scan.parent_steps().cpu()
    for row, tokens in enumerate(sequences):
        n = len(tokens)
        expected = torch.from_numpy(transition_edges(tokens).step_matrix(n)).t()  # [target, source]
        assert torch.equal(steps[row, :n, :n], expected), row
        assert bool((steps[row, n:] == -1).all()) and bool((steps[row, :, n:] == -1).all())


def test_invalid_tokens_change_nothing_and_chunks_equal_columns(device):
    """A token that is not valid in its row's state is recorded as OTHER and leaves the state as it was (the
    reference raises and keeps its state); extending by several columns at once equals one at a time; reordering
    rows moves every field with them."""
    tokens = [M + "Der", M + "Hund", "LEFT-ARC:det", M + "bellt", "RIGHT-ARC:nsubj", "</s>"]
    symbols, classes, labels, _ = vocabulary([tokens], extra=["e", "LEFT-ARC:obj"])
    index = {s: i for i, s in enumerate(symbols)}
    rows = [[M + "Der", "LEFT-ARC:obj", M + "Hund", "LEFT-ARC:det", "</s>", M + "bellt"],  # arc on one word
            ["e", M + "Der", "e", "</s>", "</s>", "e"],  # continuation first; after EOS nothing
            tokens]
    ids = on(device, torch.tensor([[index[t] for t in row] for row in rows]))
    whole = TransitionScan.of(ids, on(device, classes), on(device, labels))
    assert whole.applied.tolist() == [[True, False, True, True, True, False], [False, True, True, True, False,
                                                                                False], [True] * 6]
    for row, sequence in enumerate(rows):
        reference = TransitionState()
        for token in sequence:
            try:
                reference.step(token)
            except InvalidTransitionError:
                pass
        assert int(whole.depth[row]) == len(reference.stack) and bool(whole.finished[row]) == reference.finished
        assert int(whole.num_words[row]) == reference.num_words
    chunked = TransitionScan.initial(3, torch.device(device))
    for start, stop in ((0, 2), (2, 3), (3, 6)):
        chunked = chunked.extend(ids[:, start:stop], on(device, classes), on(device, labels))
    for name in TransitionScan.__dataclass_fields__:
        assert torch.equal(getattr(chunked, name), getattr(whole, name)), name
    order = on(device, torch.tensor([2, 0, 0]))
    moved = whole.index_select(order)
    for name in TransitionScan.__dataclass_fields__:
        assert torch.equal(getattr(moved, name), getattr(whole, name)[order]), name
