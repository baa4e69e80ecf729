"""The transition system of Choshen & Abend's target-syntax decoder (fairseq_syntax/data/transitions/:
one module per subject).

Expected values never come from the module under test: hand-written examples follow the paper's §3 table, and the
property tests compare against small independent references written here (a brute-force projectivity check, a
stack-counting simulator of the validity rules, a brute-force search for the length budget, the edges rebuilt from
the tree itself).
"""
import gzip
import random
import re
import string
import time
import unicodedata
from collections import deque
from dataclasses import replace
from pathlib import Path

import conllu
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_syntax.data.transitions.projectivity import check_tree, is_projective, projectivize
from fairseq_syntax.data.transitions.channels import target_token_classes
from fairseq_syntax.data.transitions.errors import InvalidTransitionError, InvalidTreeError, NonProjectiveError
from fairseq_syntax.data.transitions.function import TransitionScan
from fairseq_syntax.data.transitions.oracle import oracle
from fairseq_syntax.data.transitions.output import decode_pieces, sequence_text, to_conllu, transitions_to_tree
from fairseq_syntax.data.transitions.state import (
    EDGE_FROM_TRANSITION, EDGE_TO_TRANSITION, EDGE_WORD, TransitionState, allowed_next, is_valid_sequence,
    parse_transitions, tokens_to_finish, transition_edges,
)
from fairseq_syntax.data.transitions.tokens import (
    EOS, LEFT_ARC, OTHER, RIGHT_ARC, WORD_CONTINUE, WORD_CONTINUE_NO_TEXT, WORD_MARK_ONLY, WORD_START, arc_tokens,
    every_piece_is_a_word, left_arc, mark_attached_words, parse_arc, token_class, transition_vocabulary,
    vocabulary_classes,
)
from fairseq_syntax.tasks.constrained_generation import transition_mask

from .helpers import assert_conllu_lines_are_whole, byte_pieces

M = "\u2581"
MARK = "<attached>"  # the attached-word mark, spelled here (not imported) so that the tests pin the format
ALL_MOVES = (WORD_START, WORD_CONTINUE, LEFT_ARC, RIGHT_ARC, EOS, WORD_MARK_ONLY, WORD_CONTINUE_NO_TEXT)
CONTINUATIONS = {WORD_CONTINUE, WORD_CONTINUE_NO_TEXT}


# ---- independent references --------------------------------------------------------------------------------

def reference_projective(heads):
    """Brute force: every word strictly between a head and its dependent descends from that head."""
    n = len(heads)
    ancestors = []
    for word in range(1, n + 1):
        seen, w = set(), word
        while w != 0:
            w = heads[w - 1]
            seen.add(w)
        ancestors.append(seen)
    for dependent, head in enumerate(heads, start=1):
        if head == 0:
            continue
        for k in range(min(head, dependent) + 1, max(head, dependent)):
            if head not in ancestors[k - 1]:
                return False
    return True


def reference_allowed(classes, remaining=None):
    """The validity rules of the paper + the module doc, by counting: a stack of words, whether the latest token
    was a piece, whether it was an attached-word mark (a word cannot be empty); with a budget, by brute-force
    search over abstract states (stack size, open, bare)."""
    state, finished = (0, False, False), False
    for c in classes:
        assert not finished
        state = _abstract_step(*state, c)
        assert state is not None
        finished = state[0] == "done"
    if finished:
        return set()
    allowed = set()
    for move in ALL_MOVES:
        nxt = _abstract_step(*state, move)
        if nxt is None:
            continue
        if remaining is None or (remaining >= 1 and _can_finish(nxt, remaining - 1)):
            allowed.add(move)
    return allowed


def _abstract_step(stack, is_open, bare, move):
    if stack == "done":
        return None
    if bare:  # after a mark only a piece of its word, and the word has no text until a piece with text
        return (stack, True, move == WORD_CONTINUE_NO_TEXT) if move in CONTINUATIONS else None
    if move == WORD_START:
        return stack + 1, True, False
    if move == WORD_MARK_ONLY:
        return stack + 1, True, True
    if move in CONTINUATIONS:
        return (stack, True, False) if is_open else None
    if move in (LEFT_ARC, RIGHT_ARC):
        return (stack - 1, False, False) if stack >= 2 else None
    if move == EOS:
        return ("done", False, False) if stack == 1 else None
    return None


def _can_finish(state, budget):
    """Breadth-first search: can EOS be reached from `state` within `budget` tokens?"""
    frontier, seen = deque([(state, budget)]), set()
    while frontier:
        state, left = frontier.popleft()
        if state[0] == "done":
            return True
        if left <= 0 or (state, left) in seen:
            continue
        seen.add((state, left))
        for move in ALL_MOVES:
            nxt = _abstract_step(*state, move)
            if nxt is not None:
                frontier.append((nxt, left - 1))
    return False


def spells_nothing_visible(piece):
    """The byte-fallback piece of an ASCII control character or a space."""
    return re.fullmatch(r"<0x([01][0-9A-F]|20|7F)>", piece) is not None


def reference_classes(tokens, word_ids=None):
    """Class of every token of a sequence, decided here (arcs by prefix, pieces by U+2581 or by word ids)."""
    out, last_word = [], -1
    for i, token in enumerate(tokens):
        if token.startswith("LEFT-ARC:"):
            out.append(LEFT_ARC)
        elif token.startswith("RIGHT-ARC:"):
            out.append(RIGHT_ARC)
        elif token == MARK or (token and set(token) == {M}):  # the mark, or a piece that spells only a space
            out.append(WORD_MARK_ONLY)
            last_word = word_ids[i] if word_ids is not None else last_word
        elif word_ids is not None:
            no_text = spells_nothing_visible(token)
            if word_ids[i] > last_word:
                out.append(WORD_MARK_ONLY if no_text else WORD_START)
            else:
                out.append(WORD_CONTINUE_NO_TEXT if no_text else WORD_CONTINUE)
            last_word = word_ids[i]
        elif token.startswith(M):
            out.append(WORD_START)
        else:
            out.append(WORD_CONTINUE_NO_TEXT if spells_nothing_visible(token) else WORD_CONTINUE)
    return out


def reference_edges(tokens, word_of_piece, heads, labels):
    """The §3 edges rebuilt from the tree: the arc token that attaches word d is the one at which the reference
    simulation of the stack attaches d; edges head->dep (all piece pairs), x->dep pieces, head pieces->x."""
    pieces_of = {}
    for position, word in enumerate(word_of_piece):
        if word >= 0:
            pieces_of.setdefault(word, []).append(position)
    stack, edges = [], set()
    for position, token in enumerate(tokens):
        if word_of_piece[position] >= 0:
            if not stack or stack[-1] != word_of_piece[position]:
                stack.append(word_of_piece[position])
            continue
        a, b = stack[-1], stack[-2]
        left = token.startswith("LEFT-ARC:")
        head, dep = (a, b) if left else (b, a)
        assert heads[dep] == head + 1 and token.split(":", 1)[1] == labels[dep]
        stack.remove(dep)
        for h in pieces_of[head]:
            edges |= {(h, d, labels[dep], position) for d in pieces_of[dep]}
        edges |= {(position, d, labels[dep], position) for d in pieces_of[dep]}
        edges |= {(h, position, labels[dep], position) for h in pieces_of[head]}
    return edges


def edge_set(edges):
    return {(int(s), int(t), lab, int(step)) for s, t, lab, step in zip(edges.source, edges.target, edges.label,
                                                                         edges.step)}


def split_word(form, rng):
    """1-3 random pieces of a word (never empty)."""
    size = len(form)
    if size == 1:
        return [form]
    k = rng.randint(1, 3 if size > 2 else 2)
    if k == 1:
        return [form]
    if k == 2:
        cut = rng.randint(1, size - 1)
        return [form[:cut], form[cut:]]
    first, second = sorted(rng.sample(range(1, size), 2))
    return [form[:first], form[first:second], form[second:]]


def make_pieces(forms, parts=None, space_before=None):
    """Pieces and word ids: each word whole or as the given parts; its first piece gets U+2581 when the word has
    a space before it (every word when space_before is None)."""
    pieces, word_ids = [], []
    for w, form in enumerate(forms):
        word_parts = list(parts[w]) if parts is not None else [form]
        if space_before is None or space_before[w]:
            word_parts[0] = M + word_parts[0]
        pieces += word_parts
        word_ids += [w] * len(word_parts)
    return pieces, word_ids


# ---- hand-written examples (the paper's §3 and its example) -------------------------------------------------

# "Jo@@ hn put LEFT-ARC:nsubj the coals LEFT-ARC:det RIGHT-ARC:obj out RIGHT-ARC:compound:prt" (§3), with
# sentencepiece's word-initial mark instead of BPE's "@@"
PAPER_HEADS = [2, 0, 4, 2, 2]
PAPER_LABELS = ["nsubj", "root", "det", "obj", "compound:prt"]
PAPER_PIECES = [M + "Jo", "hn", M + "put", M + "the", M + "coals", M + "out"]
PAPER_TOKENS = [M + "Jo", "hn", M + "put", "LEFT-ARC:nsubj", M + "the", M + "coals", "LEFT-ARC:det",
                "RIGHT-ARC:obj", M + "out", "RIGHT-ARC:compound:prt"]


def test_paper_example_oracle_and_tree():
    seq = oracle(PAPER_HEADS, PAPER_LABELS, PAPER_PIECES)
    assert seq.tokens == PAPER_TOKENS
    assert seq.word_ids == [0, 0, 1, -1, 2, 3, -1, -1, 4, -1]
    state = parse_transitions(PAPER_TOKENS)
    assert state.stack == [1] and state.complete
    assert state.word_pieces == [[0, 1], [2], [4], [5], [8]]
    assert transitions_to_tree(PAPER_TOKENS) == (["John", "put", "the", "coals", "out"], PAPER_HEADS,
                                                    PAPER_LABELS)
    assert sequence_text(PAPER_TOKENS) == "John put the coals out"


def test_paper_example_graph():
    """§3's table: LEFT-ARC:l (x) with top a, second b adds a->b, x->b, a->x; RIGHT-ARC:l adds b->a, x->a, b->x;
    an edge from/to a word is from/to each of its pieces. Positions: 0 Jo 1 hn 2 put 3 LA:nsubj 4 the 5 coals
    6 LA:det 7 RA:obj 8 out 9 RA:compound:prt."""
    expected = {
        (2, 0, "nsubj", 3), (2, 1, "nsubj", 3), (3, 0, "nsubj", 3), (3, 1, "nsubj", 3), (2, 3, "nsubj", 3),
        (5, 4, "det", 6), (6, 4, "det", 6), (5, 6, "det", 6),
        (2, 5, "obj", 7), (7, 5, "obj", 7), (2, 7, "obj", 7),
        (2, 8, "compound:prt", 9), (9, 8, "compound:prt", 9), (2, 9, "compound:prt", 9),
    }
    edges = transition_edges(PAPER_TOKENS)
    assert edge_set(edges) == expected and len(edges) == len(expected)
    kinds = {(int(s), int(t)): int(k) for s, t, k in zip(edges.source, edges.target, edges.kind)}
    assert kinds[(2, 0)] == EDGE_WORD and kinds[(3, 0)] == EDGE_FROM_TRANSITION
    assert kinds[(2, 3)] == EDGE_TO_TRANSITION
    # the graph of a prefix is the edges with step < its length; f of the prefix gives the same
    assert edge_set(edges.prefix(7)) == {e for e in expected if e[3] < 7}
    assert edge_set(parse_transitions(PAPER_TOKENS[:7]).edges()) == {e for e in expected if e[3] < 7}
    assert len(edges.prefix(3)) == 0
    matrix = edges.step_matrix(len(PAPER_TOKENS))
    assert matrix[2, 0] == 3 and matrix[0, 2] == -1 and (matrix >= 0).sum() == len(expected)
    ids = transition_edges(PAPER_TOKENS, label_index={"nsubj": 1, "det": 2, "obj": 3, "compound:prt": 4})
    assert ids.label.dtype == np.int64 and sorted(set(ids.label.tolist())) == [1, 2, 3, 4]


def test_right_arc_waits_for_the_dependents_of_its_word():
    # "ate fish with bones": fish's RIGHT-ARC:obj must wait until bones (its nmod) is attached
    heads, labels = [0, 1, 4, 2], ["root", "obj", "case", "nmod"]
    pieces = [M + "ate", M + "fish", M + "with", M + "bo", "nes"]
    expected = [M + "ate", M + "fish", M + "with", M + "bo", "nes", "LEFT-ARC:case", "RIGHT-ARC:nmod",
                "RIGHT-ARC:obj"]
    assert oracle(heads, labels, pieces).tokens == expected
    assert transitions_to_tree(expected) == (["ate", "fish", "with", "bones"], heads, labels)
    # "She ate fish quickly": every arc right after its word
    assert oracle([2, 0, 2, 2], ["nsubj", "root", "obj", "advmod"],
                     [M + "She", M + "ate", M + "fish", M + "quickly"]).tokens == [
        M + "She", M + "ate", "LEFT-ARC:nsubj", M + "fish", "RIGHT-ARC:obj", M + "quickly", "RIGHT-ARC:advmod"]
    # one word: no arc at all (the root edge is deleted)
    assert oracle([0], ["root"], [M + "Hi", "!"]).tokens == [M + "Hi", "!"]


def test_validity_by_hand():
    def allowed(tokens, remaining=None):
        return allowed_next(tokens, remaining=remaining)

    new_word = {WORD_START, WORD_MARK_ONLY}
    assert allowed([]) == new_word  # no continuation, arc or EOS before the first word
    assert allowed([M + "Jo"]) == new_word | CONTINUATIONS | {EOS}  # one word: it may end
    assert allowed([M + "Jo", "hn", M + "put"]) == new_word | CONTINUATIONS | {LEFT_ARC, RIGHT_ARC}
    # after an arc the top word is complete: no continuation piece; one word left: EOS
    assert allowed(PAPER_TOKENS[:4]) == new_word | {EOS}
    assert allowed(PAPER_TOKENS[:7]) == new_word | {LEFT_ARC, RIGHT_ARC}
    assert allowed(PAPER_TOKENS) == new_word | {EOS}
    # an attached-word mark begins a word that must get a piece: nothing else may follow it
    assert allowed([M + "dogs", MARK]) == CONTINUATIONS
    assert allowed([M + "dogs", MARK, "."]) == new_word | CONTINUATIONS | {LEFT_ARC, RIGHT_ARC}
    with pytest.raises(InvalidTransitionError, match="cannot be empty"):
        parse_transitions([M + "a", MARK, "RIGHT-ARC:punct"])
    with pytest.raises(InvalidTransitionError, match="cannot be empty"):
        parse_transitions([M + "a", MARK, M + "b"])
    assert transitions_to_tree([M + "bark", MARK, ".", "RIGHT-ARC:punct"]) == (["bark", "."], [0, 1],
                                                                                  ["root", "punct"])
    assert sequence_text([M + "bark", MARK, ".", "RIGHT-ARC:punct"]) == "bark."
    # a lone U+2581 piece spells only a space: like the mark, a piece of its word must follow (no empty word, no
    # empty translation); sentencepiece writes it before a word whose first piece it has only without the mark
    assert token_class(M) == token_class(M + M) == WORD_MARK_ONLY
    assert allowed([M]) == allowed([M + "dogs", M]) == CONTINUATIONS
    for empty in ([M, "</s>"], [M + "a", M, "RIGHT-ARC:x"], [M + "a", M, M + "b"]):
        with pytest.raises(InvalidTransitionError, match="cannot be empty"):
            parse_transitions(empty)
    assert transitions_to_tree([M + "a", M, "\u00c4", "RIGHT-ARC:x"]) == (["a", "\u00c4"], [0, 1], ["root", "x"])
    with pytest.raises(InvalidTransitionError, match="arc needs two words"):
        parse_transitions([M + "a", "LEFT-ARC:x"])
    with pytest.raises(InvalidTransitionError, match="continuation piece must follow"):
        parse_transitions([M + "a", M + "b", "LEFT-ARC:x", "c"])
    with pytest.raises(InvalidTransitionError, match="cannot begin"):
        parse_transitions(["a"])
    state = parse_transitions([M + "a", M + "b"])
    with pytest.raises(InvalidTransitionError, match="EOS needs exactly one word"):
        state.step("</s>")
    state.step("RIGHT-ARC:x")
    state.step("</s>")
    assert state.finished and state.allowed() == set()
    with pytest.raises(InvalidTransitionError, match="has ended"):
        state.step(M + "c")
    assert transitions_to_tree(state.tokens) == (["a", "b"], [0, 1], ["root", "x"])  # a final EOS is fine
    assert sequence_text(state.tokens) == "a b"
    assert not is_valid_sequence([M + "a", M + "b"]) and is_valid_sequence([M + "a", M + "b", "LEFT-ARC:x"])
    # explicit word ids decide word boundaries whatever the pieces look like
    state = parse_transitions(["x", ",", "y"], word_ids=[0, 1, 1])
    assert state.word_pieces == [[0], [1, 2]]
    with pytest.raises(InvalidTransitionError):
        parse_transitions(["x", "y", "LEFT-ARC:d", "z"], word_ids=[0, 1, -1, 1])  # word 1 grows after an arc
    with pytest.raises(InvalidTransitionError):
        parse_transitions(["x", "y"], word_ids=[0, 2])  # word ids out of order


def test_length_budget_by_hand():
    three = [M + "a", M + "b", M + "c"]  # three words on the stack: 2 arcs + EOS still needed
    assert allowed_next(three, remaining=3) == {LEFT_ARC, RIGHT_ARC}
    assert allowed_next(three, remaining=4) == CONTINUATIONS | {LEFT_ARC, RIGHT_ARC}
    assert allowed_next(three, remaining=5) == CONTINUATIONS | {WORD_START, LEFT_ARC, RIGHT_ARC}
    assert allowed_next(three, remaining=2) == set()  # already too late
    assert allowed_next([M + "a"], remaining=1) == {EOS}
    assert allowed_next([], remaining=2) == {WORD_START}
    # a mark needs the mark, a piece, then k + 1 tokens (2 arcs, EOS): 5 with two words on the stack
    assert WORD_MARK_ONLY not in allowed_next([M + "a", M + "b"], remaining=4)
    assert WORD_MARK_ONLY in allowed_next([M + "a", M + "b"], remaining=5)
    assert allowed_next([M + "a", MARK], remaining=3) == {WORD_CONTINUE}  # the piece, an arc, EOS
    assert allowed_next([M + "a", MARK], remaining=4) == CONTINUATIONS  # a tab, a piece with text, an arc, EOS
    assert allowed_next([M + "a", MARK], remaining=2) == set()
    assert tokens_to_finish(0) == 2 and tokens_to_finish(3) == 3


def test_projectivity_by_hand():
    assert is_projective([2, 0, 4, 2, 2]) and is_projective([0]) and is_projective([0, 1, 2, 3])
    # arcs 3->1 and 4->2 cross
    assert not is_projective([3, 4, 0, 3])
    # arc 3->1 passes over the root (word 2): no arc crossing another word-word arc, still non-projective
    assert not is_projective([3, 0, 2])
    with pytest.raises(NonProjectiveError, match="non-projective"):
        oracle([3, 4, 0, 3], ["a", "b", "root", "c"], [M + "w", M + "x", M + "y", M + "z"])


def test_invalid_trees_raise_clear_errors():
    pieces = [M + "a", M + "b", M + "c"]
    for heads, message in [([0, 0, 1], "exactly one root"), ([2, 3, 1], "exactly one root"),
                           ([0, 3, 2], "cycle"), ([0, 5, 1], "outside"), ([0, 2, 1], "own head")]:
        with pytest.raises(InvalidTreeError, match=message):
            oracle(heads, ["x"] * 3, pieces)
    with pytest.raises(InvalidTreeError, match="2 words but the tree has 3|cover 2 words"):
        oracle([0, 1, 1], ["x"] * 3, [M + "a", "b", M + "c"])
    with pytest.raises(InvalidTreeError, match="first piece"):
        oracle([0], ["root"], ["a"])
    with pytest.raises(InvalidTreeError, match="labels"):
        oracle([0, 1], ["root"], [M + "a", M + "b"])


def test_tokens_and_vocabulary_classes():
    assert arc_tokens(["nsubj", "root", "obj", "nsubj"]) == ["LEFT-ARC:nsubj", "RIGHT-ARC:nsubj",
                                                                 "LEFT-ARC:obj", "RIGHT-ARC:obj"]
    assert parse_arc("RIGHT-ARC:compound:prt") == (RIGHT_ARC, "compound:prt")
    assert parse_arc(M + "LEFT") is None and parse_arc("LEFT-ARC:") is None
    symbols = ["<s>", "<pad>", "</s>", "<unk>", M + "the", "ing", "LEFT-ARC:det", "RIGHT-ARC:obj", "madeupword0000",
               MARK, "<0x09>", "<0xC3>"]
    assert vocabulary_classes(symbols).tolist() == [OTHER, OTHER, EOS, OTHER, WORD_START, WORD_CONTINUE,
                                                       LEFT_ARC, RIGHT_ARC, OTHER, WORD_MARK_ONLY,
                                                       WORD_CONTINUE_NO_TEXT, WORD_CONTINUE]
    assert transition_vocabulary(["nsubj", "root"]) == [MARK, "LEFT-ARC:nsubj", "RIGHT-ARC:nsubj"]
    assert vocabulary_classes(["ing", ","], word_initial=every_piece_is_a_word).tolist() == [WORD_START] * 2
    with pytest.raises(ValueError):
        left_arc("a b")


def test_conllu_output_by_hand():
    text = to_conllu([M + "Hello", ",", M + "wor", "ld", "LEFT-ARC:punct", "RIGHT-ARC:vocative"],
                        word_ids=[0, 1, 2, 2, -1, -1], sent_id="s1")
    assert text == ("# sent_id = s1\n# text = Hello, world\n"
                    "1\tHello\t_\t_\t_\t_\t0\troot\t_\tSpaceAfter=No\n"
                    "2\t,\t_\t_\t_\t_\t3\tpunct\t_\t_\n"
                    "3\tworld\t_\t_\t_\t_\t1\tvocative\t_\t_\n\n")
    [sentence] = conllu.parse(text)
    assert [t["head"] for t in sentence] == [0, 3, 1] and sentence.metadata["text"] == "Hello, world"
    with pytest.raises(InvalidTransitionError, match="not a complete tree"):
        to_conllu([M + "a", M + "b"])


def test_decode_pieces_bytes_and_marks():
    assert decode_pieces([M + "a", "<0x09>", "b", M, "(", "c"]) == "a\tb (c"
    assert decode_pieces([M + "x", "<0xC3>", "<0xA4>"]) == "x\u00e4"
    assert transitions_to_tree([M + "x", "<0xC3>", "<0xA4>"]).words == ["x\u00e4"]


# sentencepiece's byte-fallback pieces of characters with nothing visible: a tab, NUL, DEL and a space (sentencepiece
# writes a space as U+2581, but an undertrained model may sample <0x20> as any other piece)
INVISIBLE_PIECES = ("<0x09>", "<0x00>", "<0x7F>", "<0x20>")


def conllu_forms(text):
    return [token["form"] for sentence in conllu.parse(text) for token in sentence]


def test_a_piece_with_no_visible_character_makes_no_word():
    """Issue 79: sampled from an early model, such a piece after a lone U+2581 or the attached-word mark was a word
    of its own, written into CoNLL-U as `_` or as the raw byte. Where a word would start it may only come before the
    word's text (the project's codec writes a tab before a word so); after text it is part of that word. The
    generator's mask (the data-bin's token classes) agrees, and preprocessing refuses a word with no text."""
    for invisible in INVISIBLE_PIECES:
        for begins in (M, MARK):
            for empty in ([M + "a", begins, invisible, "RIGHT-ARC:x"], [M + "a", begins, invisible, M + "b"],
                          [begins, invisible, "</s>"], [M + "a", begins, invisible, "<0x09>", "LEFT-ARC:x"]):
                with pytest.raises(InvalidTransitionError, match="cannot be empty"):
                    parse_transitions(empty)
            assert conllu_forms(to_conllu([M + "a", begins, invisible, "b", "RIGHT-ARC:x"])) == ["a", "b"]
        assert conllu_forms(to_conllu([M + "a", invisible, M + "b", "RIGHT-ARC:x"])) == ["a", "b"]
        with pytest.raises(InvalidTreeError, match="no text"):
            mark_attached_words([M + "a", M, invisible], [0, 1, 1])
        assert mark_attached_words([M + "a", invisible, "b"], [0, 1, 1]) == ([M + "a", MARK, invisible, "b"],
                                                                             [0, 1, 1, 1])
    symbols = ["<s>", "<pad>", "</s>", "<unk>", M + "a", "b", M, MARK, "LEFT-ARC:x", "RIGHT-ARC:x", *INVISIBLE_PIECES,
               "<0xC3>", "<0xA4>"]
    index = {symbol: i for i, symbol in enumerate(symbols)}
    token_classes = target_token_classes(symbols, word_level=False)

    def allowed_after(tokens):  # the generator's mask after fairseq's BOS and `tokens`
        prefix = torch.tensor([[index["</s>"]] + [index[token] for token in tokens]])
        return {symbol for symbol, allowed in zip(symbols, transition_mask(prefix, token_classes)[0]) if allowed}

    pieces = {"b", *INVISIBLE_PIECES, "<0xC3>", "<0xA4>"}
    for begins in (M, MARK):
        assert allowed_after([M + "a", begins]) == pieces
        for invisible in INVISIBLE_PIECES:
            assert allowed_after([M + "a", begins, invisible]) == pieces  # the word's text must still come
    assert allowed_after([M + "a", M, "<0xC3>"]) == allowed_after([M + "a", M, "b"]) == {
        M + "a", M, MARK, "LEFT-ARC:x", "RIGHT-ARC:x", *pieces}  # a byte of a character outside the vocabulary
    assert allowed_after([M + "a", M + "a", "<0x09>"]) == allowed_after([M + "a", M + "a", "b"])


def test_sampled_sequences_make_words_with_text():
    """Sequences sampled uniformly under the generator's mask and length window over a vocabulary where a third of
    the pieces spell nothing visible: no word written into CoNLL-U is empty, and no line carries a control
    character."""
    symbols = ["<s>", "<pad>", "</s>", "<unk>", M + "a", M + "b", "c", "<0xC3>", "<0xA4>", M, MARK, "LEFT-ARC:x",
               "RIGHT-ARC:x", *INVISIBLE_PIECES]
    token_classes = target_token_classes(symbols, word_level=False)
    torch.manual_seed(3)
    batch, max_len = 256, 12
    tokens = torch.full((batch, 1), 2)  # fairseq's BOS (EOS)
    for _ in range(max_len + 1):
        allowed = transition_mask(tokens, token_classes, max_len=max_len)
        allowed[:, 2] |= ~allowed.any(dim=1)  # a finished row repeats EOS
        tokens = torch.cat([tokens, torch.multinomial(allowed.float(), 1)], dim=1)
    for row in tokens.tolist():
        sequence = [symbols[i] for i in row[1:row.index(2, 1)]]
        text = to_conllu(sequence)
        assert "_" not in conllu_forms(text), sequence  # an empty word
        assert not [char for char in text if unicodedata.category(char) == "Cc" and char not in "\t\n"], sequence


def test_conllu_output_carries_no_control_characters(caplog):
    """The CoNLL-U writer's last line of defence: a control character a word or the text holds (a piece after the
    word's text may spell one) is left out, whitespace ones as a space, and logged."""
    with caplog.at_level("WARNING"):
        text = to_conllu([M + "a", "<0x00>", "<0x09>", "b", "<0x1C>", M + "c", "<0x7F>", "RIGHT-ARC:x"])
    lines = text.rstrip("\n").split("\n")
    assert lines[0] == "# text = a b  c"
    assert [line.split("\t")[1] for line in lines[1:]] == ["a b", "c"]
    assert not [char for char in text if unicodedata.category(char) == "Cc" and char not in "\t\n"]
    assert "control character" in caplog.text


# characters with nothing to see, of more than one byte in UTF-8: format characters (Unicode Cf: a zero width
# space, a byte order mark, a soft hyphen), whitespace other than ASCII's (a no-break and an ideographic space) and
# a combining mark with no character to combine with
INVISIBLE_CHARACTERS = ("\u200b", "\ufeff", "\u00ad", "\u00a0", "\u3000", "\u0301")


def test_a_piece_that_begins_a_word_with_no_visible_character_makes_no_word():
    """Issue 79: "\u2581" followed by characters with nothing to see spells a space and nothing of a word, as a lone
    "\u2581" does: it is in the class of a lone "\u2581", so its word waits for a piece with text (the validity
    function and the generator's mask alike); a continuation piece of such characters is no text either."""
    for char in INVISIBLE_CHARACTERS:
        assert token_class(M + char) == WORD_MARK_ONLY, repr(char)
        assert token_class(char) == WORD_CONTINUE_NO_TEXT, repr(char)
        for empty in ([M + "a", M + char, "RIGHT-ARC:x"], [M + "a", MARK, char, "RIGHT-ARC:x"]):
            with pytest.raises(InvalidTransitionError, match="cannot be empty"):
                parse_transitions(empty)
        with pytest.raises(InvalidTreeError, match="no text"):
            mark_attached_words([M + "a", M + char], [0, 1])
    symbols = ["<s>", "<pad>", "</s>", "<unk>", M + "a", "b", M + "\u200b", "LEFT-ARC:x", "RIGHT-ARC:x"]
    prefix = torch.tensor([[2, symbols.index(M + "a"), symbols.index(M + "\u200b")]])
    allowed = transition_mask(prefix, target_token_classes(symbols, word_level=False))[0]
    assert [symbol for symbol, ok in zip(symbols, allowed) if ok] == ["b"]  # the word's text must come


def test_conllu_output_writes_no_word_with_only_invisible_characters(caplog):
    """Issue 79: sampled byte-fallback pieces may spell a character of several bytes with nothing to see, which no
    single piece shows (a byte from 0x80 up counts as text): such a word is written `_`, CoNLL-U's "not given",
    as an empty one is, and the text keeps the character. A line or paragraph separator (Unicode Zl, Zp) inside a
    word is whitespace written as a space, as a tab is, and a C1 control character (U+0085) is left out as a
    space."""
    for char in INVISIBLE_CHARACTERS + ("\u2028", "\u2029", "\u0085"):
        text = to_conllu([M + "a", M, *byte_pieces(char), "RIGHT-ARC:x"], sent_id="s")
        assert_conllu_lines_are_whole(text)
        assert conllu_forms(text) == ["a", "_"], repr(char)
    for char, written in (("\u2028", "a b"), ("\u2029", "a b"), ("\u0085", "a b"), ("\u200b", "a\u200bb")):
        text = to_conllu([M + "a", *byte_pieces(char), "b", M + "c", "RIGHT-ARC:x"])
        assert_conllu_lines_are_whole(text)
        assert conllu_forms(text) == [written, "c"], repr(char)
        assert text.startswith(f"# text = {written} c\n")


# ---- the treebanks -------------------------------------------------------------------------------------------

def _raw(line, i):
    return line[i]


def _space_after_no(misc):
    return misc is not None and "SpaceAfter=No" in misc.split("|")


def read_treebank(path):
    """(forms, heads, labels, space_before) of every sentence: word tokens only (integer ids: no multiword
    ranges, no empty nodes). FEATS, DEPS and MISC are kept as text (faster)."""
    sentences = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for sentence in conllu.parse_incr(f, field_parsers={"feats": _raw, "deps": _raw, "misc": _raw}):
            words = [t for t in sentence if isinstance(t["id"], int)]
            forms = [t["form"] for t in words]
            heads = [t["head"] for t in words]
            labels = [t["deprel"] for t in words]
            space_after = [not _space_after_no(t["misc"]) for t in words]
            # a multiword token carries SpaceAfter for its words
            last_of = {t["id"][2]: t for t in sentence if isinstance(t["id"], tuple) and t["id"][1] == "-"}
            for i, w in enumerate(words):
                if w["id"] in last_of and _space_after_no(last_of[w["id"]]["misc"]):
                    space_after[i] = False
            sentences.append((forms, heads, labels, [True] + space_after[:-1]))
    return sentences


# EWT train, and for German the dev and test splits of GSD (its train split is missing from shared/data) and PUD
TREEBANKS = {
    "en_ewt_train": ("UD_English-EWT/en_ewt-ud-train.conllu.gz",),
    "de": ("UD_German-GSD/de_gsd-ud-dev.conllu.gz", "UD_German-GSD/de_gsd-ud-test.conllu.gz",
           "UD_German-PUD/de_pud-ud-test.conllu.gz"),
}


@pytest.fixture(scope="module")
def treebanks(data_root):
    out = {}
    for name, files in TREEBANKS.items():
        paths = [Path(data_root) / "ud" / f for f in files]
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            pytest.skip(f"missing treebank files: {missing}")
        out[name] = [s for p in paths for s in read_treebank(p)]
    return out


@pytest.mark.parametrize("name", list(TREEBANKS))
def test_treebank_round_trip(treebanks, name, capsys):
    """f(oracle(tree)) == tree for every projective tree, with words as single pieces and split into 1-3 random
    pieces (word boundaries by U+2581), and with an explicit word map where U+2581 marks only real spaces (as
    the project's codec writes "," after a word); non-projective trees raise and are counted."""
    started, cpu_started = time.perf_counter(), time.process_time()
    rng = random.Random(12)
    sentences = treebanks[name]
    non_projective = 0
    for forms, heads, labels, space_before in sentences:
        assert not any(M in f for f in forms)
        projective = reference_projective(heads)
        assert is_projective(heads) == projective
        if not projective:
            non_projective += 1
            with pytest.raises(NonProjectiveError):
                oracle(heads, labels, *make_pieces(forms))
            continue
        n = len(forms)
        parts = [split_word(form, rng) for form in forms]
        for split in (None, parts):  # single pieces, 1-3 random pieces; boundaries by the U+2581 rule
            pieces, _ = make_pieces(forms, split)
            seq = oracle(heads, labels, pieces)
            assert len(seq.tokens) == len(pieces) + n - 1  # every piece once, one arc per non-root word
            assert [t for t in seq.tokens if not t.startswith(("LEFT-ARC:", "RIGHT-ARC:"))] == pieces
            assert transitions_to_tree(seq.tokens) == (forms, heads, labels)
            assert sequence_text(seq.tokens) == " ".join(forms)
        # the same pieces with the word-initial mark only where the sentence has a space, and the explicit word map
        pieces, word_ids = make_pieces(forms, parts, space_before)
        seq = oracle(heads, labels, pieces, word_ids)
        assert [w for w in seq.word_ids if w >= 0] == word_ids
        assert transitions_to_tree(seq.tokens, seq.word_ids) == (forms, heads, labels)
        text = "".join((" " if s and i else "") + f for i, (f, s) in enumerate(zip(forms, space_before)))
        assert sequence_text(seq.tokens) == text
        # decoding has no word map: with an attached-word mark before every word without a space, the U+2581 rule
        # alone reads the parser's words (the form of a --target-transitions data-bin)
        marked, marked_ids = mark_attached_words(pieces, word_ids)
        assert [piece for piece in marked if piece != MARK] == pieces
        assert marked.count(MARK) == space_before.count(False)
        seq = oracle(heads, labels, marked)
        assert transitions_to_tree(seq.tokens) == (forms, heads, labels)
        assert sequence_text(seq.tokens) == text
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    with capsys.disabled():
        print(f"\n{name}: {len(sentences)} trees, {non_projective} non-projective "
              f"({100.0 * non_projective / len(sentences):.2f}%), {len(sentences) - non_projective} round-tripped "
              f"x3 in {elapsed:.1f}s ({cpu:.1f}s CPU)")
    assert 0 < non_projective < len(sentences) // 5


def test_conllu_output_reads_back(treebanks):
    """German sentences out as CoNLL-U (explicit word map with the real spaces) and back with `conllu`."""
    rng = random.Random(3)
    checked = 0
    for forms, heads, labels, space_before in treebanks["de"]:
        if not reference_projective(heads):
            continue
        pieces, word_ids = make_pieces(forms, [split_word(f, rng) for f in forms], space_before)
        marked, _ = mark_attached_words(pieces, word_ids)
        seq = oracle(heads, labels, marked)  # as decoding reads it: no word map
        [sentence] = conllu.parse(to_conllu(seq.tokens, sent_id=f"s{checked}"))
        assert [t["form"] for t in sentence] == forms
        assert [t["head"] for t in sentence] == heads and [t["deprel"] for t in sentence] == labels
        space_after = [not (t["misc"] and t["misc"].get("SpaceAfter") == "No") for t in sentence]
        assert space_after[:-1] == space_before[1:]
        assert sentence.metadata["text"] == sequence_text(seq.tokens) == decode_pieces(pieces)
        checked += 1
    assert checked > 1000


# ---- random trees (hypothesis) -------------------------------------------------------------------------------

LABELS = ["nsubj", "obj", "det", "amod", "compound:prt", "case"]
PIECE_TEXT = st.text(alphabet=string.ascii_letters + "äß,.'", min_size=1, max_size=3)


@st.composite
def projective_trees(draw, max_words=14):
    """A random projective tree by recursive construction: a span's root, and each side of it cut into
    consecutive spans, each a subtree attached to the root (every projective tree can come out)."""
    n = draw(st.integers(1, max_words))
    heads = [0] * n

    def build(lo, hi):
        root = draw(st.integers(lo, hi - 1))
        for start, end in ((lo, root), (root + 1, hi)):
            i = start
            while i < end:
                j = draw(st.integers(i + 1, end))
                heads[build(i, j)] = root + 1
                i = j
        return root

    heads[build(0, n)] = 0
    labels = [draw(st.sampled_from(LABELS)) if h else "root" for h in heads]
    words = [[M + draw(PIECE_TEXT)] + draw(st.lists(PIECE_TEXT, max_size=2)) for _ in range(n)]
    return heads, labels, words


@st.composite
def random_trees(draw, max_words=9):
    """Any tree (each word attaches to one placed before it in a random order): projective or not."""
    n = draw(st.integers(1, max_words))
    order = draw(st.permutations(range(1, n + 1)))
    heads = {order[0]: 0}
    for k, node in enumerate(order[1:], start=1):
        heads[node] = order[draw(st.integers(0, k - 1))]
    return [heads[i] for i in range(1, n + 1)]


def flatten(words):
    pieces = [p for w in words for p in w]
    word_ids = [i for i, w in enumerate(words) for _ in w]
    return pieces, word_ids


@settings(max_examples=300, deadline=None)
@given(tree=projective_trees())
def test_random_projective_trees(tree):
    heads, labels, words = tree
    assert reference_projective(heads)
    pieces, word_ids = flatten(words)
    seq = oracle(heads, labels, pieces)
    forms = ["".join(w)[1:] for w in words]
    assert transitions_to_tree(seq.tokens) == (forms, heads, labels)
    assert transitions_to_tree(seq.tokens, seq.word_ids) == (forms, heads, labels)
    assert sequence_text(seq.tokens) == " ".join(forms)
    # every prefix is accepted, EOS whenever one word is left, and f of a prefix has the full graph's edges of step < n
    classes = reference_classes(seq.tokens)
    full = transition_edges(seq.tokens)
    assert edge_set(full) == reference_edges(seq.tokens, seq.word_ids, heads, labels)
    assert all(max(s, t) <= step for s, t, step in zip(full.source, full.target, full.step))
    for n in range(len(seq.tokens) + 1):
        state = parse_transitions(seq.tokens[:n])
        allowed = state.allowed()
        assert allowed == reference_allowed(classes[:n])
        if n < len(seq.tokens):
            assert classes[n] in allowed
        assert (EOS in allowed) == (len(state.stack) == 1)  # a complete tree over the words so far
        assert edge_set(state.edges()) == edge_set(full.prefix(n))
        # the prefix's words, heads, labels: the tree's, for the words attached so far
        for word, head in enumerate(state.heads):
            assert head == 0 or (head == heads[word] and state.labels[word] == labels[word])
    assert EOS in parse_transitions(seq.tokens).allowed()
    # canonical order: arcs as early as possible -- no arc was possible where the oracle generated a new word
    pending = [heads.count(w + 1) for w in range(len(heads))]
    stack = []
    for position, token in enumerate(seq.tokens):
        if seq.word_ids[position] >= 0:
            if classes[position] == WORD_START and len(stack) >= 2:
                a, b = stack[-1], stack[-2]
                assert not (heads[b] == a + 1 and pending[b] == 0)
                assert not (heads[a] == b + 1 and pending[a] == 0)
            if classes[position] == WORD_START:
                stack.append(seq.word_ids[position])
            continue
        a, b = stack[-1], stack[-2]
        dep = b if token.startswith("LEFT-ARC:") else a
        stack.remove(dep)
        pending[heads[dep] - 1] -= 1


@settings(max_examples=400, deadline=None)
@given(heads=random_trees())
def test_projectivity_and_oracle_errors_on_random_trees(heads):
    projective = reference_projective(heads)
    assert is_projective(heads) == projective
    labels = ["root" if h == 0 else "dep" for h in heads]
    pieces = [M + f"w{i}" for i in range(len(heads))]
    if projective:
        assert transitions_to_tree(oracle(heads, labels, pieces).tokens).heads == heads
    else:
        with pytest.raises(NonProjectiveError) as error:
            oracle(heads, labels, pieces)
        (h1, d1), (h2, d2) = error.value.crossing
        a, b = sorted((h1, d1)), sorted((h2, d2))
        assert a[0] < b[0] < a[1] < b[1] or b[0] < a[0] < b[1] < a[1]  # the reported arcs do cross
        assert heads[d1 - 1] == h1 and heads[d2 - 1] == h2


def test_attached_words_by_hand():
    # "Dogs bark." with "." attached: by the rule alone "." would continue "bark"
    pieces, word_ids = [M + "Dogs", M + "bark", "."], [0, 1, 2]
    assert mark_attached_words(pieces, word_ids) == ([M + "Dogs", M + "bark", MARK, "."], [0, 1, 2, 2])
    seq = oracle([2, 0, 2], ["nsubj", "root", "punct"], *mark_attached_words(pieces, word_ids))
    assert seq.tokens == [M + "Dogs", M + "bark", "LEFT-ARC:nsubj", MARK, ".", "RIGHT-ARC:punct"]
    assert transitions_to_tree(seq.tokens) == (["Dogs", "bark", "."], [2, 0, 2], ["nsubj", "root", "punct"])
    # a run of spaces before a word ("am  hohen": pieces "\u2581" "\u2581hohen"): the word's own piece begins it
    assert mark_attached_words([M + "am", M, M + "hohen"], [0, 1, 1]) == ([M + "am", M + "hohen"], [0, 1])
    assert mark_attached_words([M + "am", M, M, "(", "x"], [0, 1, 1, 1, 1]) == (
        [M + "am", M, "(", "x"], [0, 1, 1, 1])  # "\u2581" "\u2581" "(": the last space piece begins the word
    with pytest.raises(InvalidTreeError, match="space in it"):
        mark_attached_words([M + "a", "b", M + "c"], [0, 0, 0])
    # a word whose pieces spell nothing (only U+2581) cannot be written: no sequence holds an empty word
    for pieces, word_ids in (([M + "a", M], [0, 1]), ([M, M + "a"], [0, 1]), ([M + "a", M, M], [0, 1, 1])):
        with pytest.raises(InvalidTreeError, match="no text"):
            mark_attached_words(pieces, word_ids)
    # a word vocabulary needs no mark; a piece inside a word that the rule reads as a new word cannot be helped
    assert mark_attached_words(["Dogs", "."], [0, 1], every_piece_is_a_word) == (["Dogs", "."], [0, 1])
    with pytest.raises(InvalidTreeError, match="space in it"):
        mark_attached_words([M + "New", M + "York"], [0, 0])


def test_projectivize_by_hand():
    # arcs 3->1 and 4->2 cross; 4->2 is the non-projective one (word 3 between does not descend from 4): 2 -> 3
    assert projectivize([3, 4, 0, 3]) == ([3, 3, 0, 3], 1)
    # arc 3->1 passes over the root (word 2): 1 is lifted to 3's head
    assert projectivize([3, 0, 2]) == ([2, 0, 2], 1)
    assert projectivize([2, 0, 4, 2, 2]) == ([2, 0, 4, 2, 2], 0)
    with pytest.raises(InvalidTreeError):
        projectivize([0, 0])


def _ancestors(heads, word):
    out = []
    while word != 0:
        word = heads[word - 1]
        out.append(word)
    return out


@settings(max_examples=400, deadline=None)
@given(heads=random_trees(max_words=12))
def test_projectivize_random_trees(heads):
    """Lifting gives a projective tree (brute-force reference) in which every word's head is its old head or an
    ancestor of it in the original tree; projective trees are unchanged; the count is the words with a new head."""
    lifted, changed = projectivize(heads)
    assert check_tree(lifted) == heads.index(0)  # the same root, still one tree
    assert reference_projective(lifted)
    assert changed == sum(a != b for a, b in zip(heads, lifted))
    for word, (old, new) in enumerate(zip(heads, lifted), start=1):
        assert new == old or new in _ancestors(heads, old)
    if reference_projective(heads):
        assert lifted == heads
    labels = ["root" if h == 0 else "dep" for h in lifted]
    pieces = [M + f"w{i}" for i in range(len(lifted))]
    assert transitions_to_tree(oracle(lifted, labels, pieces).tokens).heads == lifted


# ---- random sequences, invalid steps, and the batched mask ---------------------------------------------------

VOCAB = ["<s>", "<pad>", "</s>", "<unk>", M + "a", M + "b", "c", "d", "LEFT-ARC:x", "RIGHT-ARC:x", "LEFT-ARC:y",
         "RIGHT-ARC:y", "madeupword0000", MARK, "<0x09>"]
VOCAB_CLASS = {0: OTHER, 1: OTHER, 2: EOS, 3: OTHER, 4: WORD_START, 5: WORD_START, 6: WORD_CONTINUE,
               7: WORD_CONTINUE, 8: LEFT_ARC, 9: RIGHT_ARC, 10: LEFT_ARC, 11: RIGHT_ARC, 12: OTHER, 13: WORD_MARK_ONLY,
               14: WORD_CONTINUE_NO_TEXT}
BY_CLASS = {c: [i for i, k in VOCAB_CLASS.items() if k == c] for c in (*ALL_MOVES, OTHER)}


def test_random_sequences_and_invalid_steps():
    """Random walks over the tokens; at every step every token of the vocabulary is tried: the state accepts it
    exactly when the reference allows its class (and is unchanged after a refusal)."""
    rng = random.Random(5)
    for _ in range(300):
        state, classes = TransitionState(), []
        for _ in range(rng.randint(0, 30)):
            expected = reference_allowed(classes)
            assert state.allowed() == expected
            for index, symbol in enumerate(VOCAB):
                probe = parse_transitions(state.tokens) if state.tokens else TransitionState()
                try:
                    probe.step(symbol)
                    accepted = True
                except InvalidTransitionError:
                    accepted = False
                    assert probe.tokens == state.tokens
                assert accepted == (VOCAB_CLASS[index] in expected), (state.tokens, symbol)
            if not expected:
                break
            options = [i for i in range(len(VOCAB)) if VOCAB_CLASS[i] in expected]
            if EOS in expected and rng.random() < 0.8:  # mostly go on: longer sequences
                options = [i for i in options if VOCAB_CLASS[i] != EOS] or options
            index = rng.choice(options)
            state.step(VOCAB[index])
            classes.append(VOCAB_CLASS[index])


def test_batched_mask_agrees_with_the_validity_function():
    """B hypotheses stepped together by the batched transition function (TransitionScan): its mask equals, row by
    row, the Python validity function (with and without a per-row length budget) and flags random (often
    invalid) picks; `extend` follows the picks."""
    torch.manual_seed(0)
    rng = random.Random(7)
    vocab_class = vocabulary_classes(VOCAB)
    assert vocab_class.tolist() == [VOCAB_CLASS[i] for i in range(len(VOCAB))]
    batch = 64
    for _ in range(5):
        limits = [rng.randint(1, 25) for _ in range(batch)]
        states = [TransitionState() for _ in range(batch)]
        batched = TransitionScan.initial(batch)
        for t in range(26):
            remaining = torch.tensor([limit - t for limit in limits])
            for budget in (None, remaining):
                mask = batched.mask(vocab_class, budget)
                assert mask.shape == (batch, len(VOCAB))
                for b, state in enumerate(states):
                    allowed = state.allowed(None if budget is None else int(budget[b]))
                    assert mask[b].tolist() == [VOCAB_CLASS[i] in allowed for i in range(len(VOCAB))], (b, t)
            # random picks: valid() says which are allowed
            picks = torch.randint(len(VOCAB), (batch,))
            valid = batched.allowed_classes().gather(1, vocab_class[picks].unsqueeze(1)).squeeze(1)
            assert valid.tolist() == [VOCAB_CLASS[int(p)] in s.allowed() for p, s in zip(picks, states)]
            # follow a valid pick where there is one (unfinished rows), padding elsewhere
            chosen = []
            for state in states:
                options = [i for i in range(len(VOCAB)) if VOCAB_CLASS[i] in state.allowed()]
                if options and rng.random() < 0.1 and state.complete:
                    options = BY_CLASS[EOS]
                chosen.append(rng.choice(options) if options else 1)
            for b, index in enumerate(chosen):
                if VOCAB_CLASS[index] != OTHER:
                    states[b].step(VOCAB[index])
            batched = batched.extend(torch.tensor(chosen).unsqueeze(1), vocab_class)
            assert batched.depth.tolist() == [len(s.stack) for s in states]
            assert [row[:len(s.stack)] for row, s in zip(batched.stack.tolist(), states)] == [s.stack for s in states]
            assert batched.open.tolist() == [s.open for s in states]
            assert batched.finished.tolist() == [s.finished for s in states]
            assert batched.num_words.tolist() == [s.num_words for s in states]
            assert batched.bare.tolist() == [s.bare for s in states]
        # reordering (beam search) keeps rows together
        order = torch.randperm(batch)
        moved = batched.index_select(order)
        assert moved.depth.tolist() == [len(states[int(i)].stack) for i in order]


def test_budget_always_lets_the_beam_finish():
    """Hypotheses that only take budget-allowed tokens never get stuck and always end with EOS within their
    limit (the limit counts every token, EOS included); the batched mask and the Python function agree."""
    rng = random.Random(11)
    vocab_class = vocabulary_classes(VOCAB)
    batch = 128
    limits = torch.tensor([rng.randint(2, 30) for _ in range(batch)])
    batched = TransitionScan.initial(batch)
    states = [TransitionState() for _ in range(batch)]
    for t in range(31):
        remaining = limits - t
        mask = batched.mask(vocab_class, remaining)
        live = ~batched.finished
        assert bool(mask[live].any(dim=1).all()), "a live hypothesis has no allowed token"
        assert bool((remaining[live] >= 1).all())
        # sample uniformly among allowed tokens (as a beam would, arbitrarily)
        scores = torch.rand(batch, len(VOCAB)).masked_fill(~mask, -1.0)
        picks = scores.argmax(dim=1).masked_fill(~live, 1)
        for b, state in enumerate(states):
            if not state.finished:
                assert VOCAB_CLASS[int(picks[b])] in state.allowed(int(remaining[b]))
                state.step(VOCAB[int(picks[b])])
        batched = batched.extend(picks.unsqueeze(1), vocab_class)
    assert all(s.finished for s in states) and bool(batched.finished.all())
    for state, limit in zip(states, limits.tolist()):
        assert len(state.tokens) <= limit and state.tokens[-1] == "</s>"
        assert is_valid_sequence(state.tokens[:-1])
    assert batched.tokens_to_finish().tolist() == [0] * batch
    assert replace(TransitionScan.initial(3), depth=torch.tensor([0, 1, 4]),
                   open=torch.tensor([False, True, False])).tokens_to_finish().tolist() == [2, 1, 4]


@settings(max_examples=200, deadline=None)
@given(classes=st.lists(st.sampled_from((WORD_START, WORD_CONTINUE, LEFT_ARC, RIGHT_ARC, WORD_MARK_ONLY,
                                         WORD_CONTINUE_NO_TEXT)),
                        max_size=20), remaining=st.integers(0, 12))
def test_budget_matches_brute_force_search(classes, remaining):
    """The budget rule (a formula in the module) against a breadth-first search over all continuations."""
    state, tokens = (0, False, False), []
    spelled = {WORD_START: M + "a", WORD_CONTINUE: "c", LEFT_ARC: "LEFT-ARC:x", RIGHT_ARC: "RIGHT-ARC:x",
               WORD_MARK_ONLY: MARK, WORD_CONTINUE_NO_TEXT: "<0x09>"}
    for move in classes:  # keep the valid moves of the random list
        nxt = _abstract_step(*state, move)
        if nxt is None:
            continue
        state = nxt
        tokens.append(spelled[move])
    assert allowed_next(tokens, remaining=remaining) == reference_allowed(reference_classes(tokens), remaining)
    stack, is_open, bare = state
    batched = replace(TransitionScan.initial(1), depth=torch.tensor([stack]), open=torch.tensor([is_open]),
                      bare=torch.tensor([bare]))
    allowed = batched.allowed_classes(remaining)[0].tolist()
    assert {c for c in ALL_MOVES if allowed[c]} == reference_allowed(reference_classes(tokens), remaining)


def _ends_inside(state, low, high, moves):
    """Breadth-first search: can EOS be reached from `state` with a number of tokens t (EOS included), low <= t <=
    high, using only `moves`?"""
    frontier, seen = deque([(state, 0)]), set()
    while frontier:
        state, used = frontier.popleft()
        if used > high or (state, used) in seen:
            continue
        seen.add((state, used))
        if state[0] == "done":
            if used >= low:
                return True
            continue
        for move in moves:
            nxt = _abstract_step(*state, move)
            if nxt is not None:
                frontier.append((nxt, used + 1))
    return False


@settings(max_examples=300, deadline=None)
@given(data=st.data(), remaining=st.integers(0, 12), continuations=st.booleans())
def test_length_window_matches_brute_force_search(data, remaining, continuations):
    """The length window (fairseq's max_len and min_len: at most `remaining`, at least `minimum` more tokens, EOS
    included) against a breadth-first search over every continuation; without continuation pieces (a word
    vocabulary) a word cannot be lengthened by one token, so only words and arcs may fill the window."""
    moves = ALL_MOVES if continuations else (WORD_START, LEFT_ARC, RIGHT_ARC, EOS)
    minimum = data.draw(st.integers(max(0, remaining - 5), remaining + 1))  # narrow windows are the hard ones
    classes = data.draw(st.lists(st.sampled_from([m for m in moves if m != EOS]), max_size=16))
    state = (0, False, False)
    for move in classes:  # keep the valid moves of the random list
        nxt = _abstract_step(*state, move)
        if nxt is not None:
            state = nxt
    expected = set()
    for move in moves:
        nxt = _abstract_step(*state, move)
        if nxt is not None and _ends_inside(nxt, minimum - 1, remaining - 1, moves):
            expected.add(move)
    stack, is_open, bare = state
    batched = replace(TransitionScan.initial(1), depth=torch.tensor([stack]), open=torch.tensor([is_open]),
                      bare=torch.tensor([bare]))
    allowed = batched.allowed_classes(remaining, minimum, continuations)[0].tolist()
    assert {c for c in moves if allowed[c]} == expected
    # a state that can end inside the window always has a move that keeps it so (no dead end in beam search)
    if _ends_inside(state, minimum, remaining, moves):
        assert expected


# ---- the project's sentencepiece codec -----------------------------------------------------------------------

def test_real_sentencepiece_pieces(tmp_path):
    """Pieces of the project's codec (attached words without U+2581, byte pieces for tabs and no-break spaces)
    with its explicit word map: the tree and the text come back; decode_pieces equals sentencepiece's decode."""
    from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder, train_sentencepiece
    from fairseq_syntax.parsers.base import ParsedSentence

    sentences = ["A man is riding a bike down the street.", "Zwei Hunde spielen im Schnee.",
                 "Children (three of them) are swimming!", "Ein Mann fährt Fahrrad; er lächelt."] * 50
    encoder = WordAlignedEncoder(train_sentencepiece(sentences, 330, str(tmp_path / "m")))
    cases = [
        (["Children", "(", "three", ")", "swim", "!"], ["", " ", "", " ", "\t", ""], [5, 3, 1, 3, 0, 5]),
        (["Zwei", "Hunde", "spielen", "im", "Schnee", "."], ["", " ", "\u00a0", " ", " ", ""],
         [2, 3, 0, 5, 3, 3]),
        (["Am", "hohen", "Brett", "."], ["", "   ", " ", ""], [0, 3, 1, 1]),  # a run of spaces
    ]
    for words, spaces, heads in cases:
        labels = ["root" if h == 0 else "dep" for h in heads]
        assert reference_projective(heads)
        pieces, word_ids = encoder.encode_words(ParsedSentence(words, spaces, heads, labels))
        assert decode_pieces(pieces) == encoder.decode(pieces) == "".join(s + w for s, w in zip(spaces, words))
        seq = oracle(heads, labels, pieces, word_ids)
        assert transitions_to_tree(seq.tokens, seq.word_ids) == (words, heads, labels)
        assert sequence_text(seq.tokens) == encoder.decode(pieces)
        marked = oracle(heads, labels, *mark_attached_words(pieces, word_ids))
        assert transitions_to_tree(marked.tokens) == (words, heads, labels)  # no word map: the rule reads them
        # the same text, where a run of spaces is one space
        assert sequence_text(marked.tokens) == "".join((" " if s.strip(" ") == "" and len(s) > 1 else s) + w
                                                          for s, w in zip(spaces, words))


def test_every_reader_of_single_trees_applies_the_one_check():
    """Parsed sentences (parsers and CoNLL-U), transition sequences and the multi-task linearisation refuse the same
    heads with the same reason (data/trees.py): they once had three walks of their own with three wordings, and the
    parsed sentence's accepted a non-integer head."""
    from fairseq_syntax.data.multitask import LinearizationError, linearize
    from fairseq_syntax.data.trees import tree_problem
    from fairseq_syntax.parsers.base import ParsedSentence, ParseError

    bad = {(0, 0, 1): "exactly one root", (2, 3, 1): "exactly one root", (0, 3, 2): "cycle through word",
           (0, 5, 1): "outside 0..3", (0, 2, 1): "word 2 is its own head", (0, 1.0, 1): "outside 0..3"}
    for heads, reason in bad.items():
        problem = tree_problem(list(heads))
        assert problem is not None and reason in problem, (heads, problem)
        with pytest.raises(InvalidTreeError) as transitions_error:
            check_tree(list(heads))
        with pytest.raises(ParseError) as parsed_error:
            ParsedSentence(["a", "b", "c"], ["", " ", " "], list(heads), ["x"] * 3).validate()
        with pytest.raises(LinearizationError) as linearized_error:
            linearize([["a"], ["b"], ["c"]], list(heads), ["x"] * 3)
        for error in (transitions_error, parsed_error, linearized_error):
            assert problem in str(error.value), (heads, str(error.value))
    assert tree_problem([0, 1, 1]) is None and check_tree([2, 0, 2]) == 1
