"""The oracle of the transition system (preprocessing): the canonical transition sequence of a projective tree.

The oracle (static, "arcs as early as possible", the canonical order). After the last piece of each word, reduce
while possible: LEFT-ARC when the second word's head is the top word, else RIGHT-ARC when the top word's head is the
second word and the top word has all its dependents; then generate the next word's pieces. This is the order of the
paper's example ("Jo@@ hn put LEFT-ARC:nsubj the coals LEFT-ARC:det RIGHT-ARC:obj out RIGHT-ARC:compound:prt").
Arc-standard derives exactly the projective trees; a non-projective tree raises NonProjectiveError.
"""
from typing import List, NamedTuple, Optional, Sequence

from .projectivity import check_tree, crossing_arcs
from ..subword import NO_WORD  # the word id of an arc token: the project's one value for columns that are not pieces
from .errors import InvalidTreeError, NonProjectiveError
from .tokens import (
    LEFT_ARC_PREFIX, RIGHT_ARC_PREFIX, WordRule, label_problem, starts_with_word_mark, word_ids_from_pieces,
)


class TransitionSequence(NamedTuple):
    """Tokens (pieces interleaved with arc tokens) and the 0-based word of every token (NO_WORD on arcs)."""

    tokens: List[str]
    word_ids: List[int]


def oracle(heads: Sequence[int], labels: Sequence[str], pieces: Sequence[str],
           word_ids: Optional[Sequence[int]] = None,
           word_initial: WordRule = starts_with_word_mark) -> TransitionSequence:
    """The canonical transition sequence of a projective tree: heads 1-based (0 = root), one label per word,
    the sentence's pieces and the 0-based word of each piece (by the word-boundary rule when not given). Arcs come
    as early as possible (see the module doc). Raises InvalidTreeError / NonProjectiveError."""
    n = len(heads)
    if len(labels) != n:
        raise InvalidTreeError(f"{n} heads but {len(labels)} labels")
    if word_ids is None:
        word_ids = word_ids_from_pieces(pieces, word_initial)
    if len(word_ids) != len(pieces):
        raise InvalidTreeError(f"{len(pieces)} pieces but {len(word_ids)} word ids")
    previous = -1
    for index, word in enumerate(word_ids):
        if word != previous and word != previous + 1:
            raise InvalidTreeError(f"piece {index} has word id {word} after word {previous}: word ids must count "
                                   "the words in order (0, 0, 1, 2, 2, ...)")
        previous = word
    if previous + 1 != n:
        raise InvalidTreeError(f"the pieces cover {previous + 1} words but the tree has {n}")
    check_tree(heads)
    crossing = crossing_arcs(heads)
    if crossing is not None:
        raise NonProjectiveError(crossing)
    for label in set(labels):
        problem = label_problem(label)
        if problem is not None:
            raise InvalidTreeError(problem)

    pending = [0] * n  # dependents of each word not attached yet
    for head in heads:
        if head:
            pending[head - 1] += 1
    tokens: List[str] = []
    out_ids: List[int] = []
    stack: List[int] = []
    position, num_pieces = 0, len(pieces)
    for word in range(n):
        while position < num_pieces and word_ids[position] == word:
            tokens.append(pieces[position])
            out_ids.append(word)
            position += 1
        stack.append(word)
        while len(stack) >= 2:
            top, second = stack[-1], stack[-2]
            if heads[second] == top + 1 and pending[second] == 0:
                tokens.append(LEFT_ARC_PREFIX + labels[second])
                del stack[-2]
                pending[top] -= 1
            elif heads[top] == second + 1 and pending[top] == 0:
                tokens.append(RIGHT_ARC_PREFIX + labels[top])
                stack.pop()
                pending[second] -= 1
            else:
                break
            out_ids.append(NO_WORD)
    if len(stack) != 1:  # cannot happen for a projective tree; kept so a bug can never emit a wrong sequence
        raise InvalidTreeError(f"the oracle ended with {len(stack)} words on the stack")
    return TransitionSequence(tokens, out_ids)
