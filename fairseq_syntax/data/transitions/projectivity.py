"""Tree checks and projectivity for the transition system: `check_tree`, `crossing_arcs`, and Lift (`projectivize`).

Projectivisation. Arc-standard derives projective trees only. `projectivize` lifts non-projective arcs (Nivre &
Nilsson 2005's Lift without label encoding: the dependent of the shortest non-projective arc is reattached to its
head's head, repeated until the tree is projective); labels are kept, so the lifted tree is an approximation of the
parse, and the count of words with a new head is reported.
"""
from typing import List, Optional, Sequence, Tuple

from .errors import InvalidTreeError
from ..trees import root_of, tree_problem


def check_tree(heads: Sequence[int]) -> int:
    """Check that 1-based heads (0 = root) form one tree (trees.tree_problem). Returns the 0-based root word;
    raises InvalidTreeError."""
    problem = tree_problem(heads)
    if problem is not None:
        raise InvalidTreeError(problem)
    return root_of(heads)


def crossing_arcs(heads: Sequence[int]) -> Optional[Tuple[Tuple[int, int], Tuple[int, int]]]:
    """Two arcs (head, dependent) that cross, or None. The root arc 0 -> root counts (a word between an arc's
    ends must descend from its head, so no arc may pass over the root). For a tree, None <=> projective.
    O(n log n): arcs as spans, sorted by left end ascending and right end descending; a stack keeps the chain of
    open nested spans; a span that starts inside the innermost open one and ends past it crosses it."""
    spans = sorted(((min(h, d), max(h, d), h, d) for d, h in enumerate(heads, start=1)),
                   key=lambda span: (span[0], -span[1]))
    open_spans: List[Tuple[int, int, int, int]] = []
    for span in spans:
        left, right = span[0], span[1]
        while open_spans and open_spans[-1][1] <= left:
            open_spans.pop()
        if open_spans and open_spans[-1][1] < right:
            outer = open_spans[-1]
            return (outer[2], outer[3]), (span[2], span[3])
        open_spans.append(span)
    return None


def is_projective(heads: Sequence[int]) -> bool:
    """Whether 1-based heads (0 = root) form a projective tree (raises InvalidTreeError if not a tree)."""
    check_tree(heads)
    return crossing_arcs(heads) is None


def _dominates(heads: Sequence[int], head: int, word: int) -> bool:
    """Whether 1-based `head` is an ancestor of 1-based `word` (0 = the root dominates every word)."""
    while word != 0:
        word = heads[word - 1]
        if word == head:
            return True
    return head == 0


def _shortest_non_projective_arc(heads: Sequence[int]) -> Optional[int]:
    """The 1-based dependent of the shortest non-projective arc (leftmost on ties), None for a projective tree. An
    arc h -> d is non-projective when a word between h and d does not descend from h."""
    best, best_length = None, None
    for dependent, head in enumerate(heads, start=1):
        if head == 0:
            continue
        left, right = min(head, dependent), max(head, dependent)
        if best_length is not None and right - left >= best_length:
            continue
        if any(not _dominates(heads, head, word) for word in range(left + 1, right)):
            best, best_length = dependent, right - left
    return best


def projectivize(heads: Sequence[int]) -> Tuple[List[int], int]:
    """(projective heads, how many words got a new head): Lift (module doc, "Projectivisation") until no arc is
    non-projective. Each lift moves a dependent to its head's head, so every new head is an ancestor of the old
    one, and the root word (whose arcs are always projective) keeps its place. Raises InvalidTreeError if `heads`
    is not a tree."""
    check_tree(heads)
    lifted = list(heads)
    if crossing_arcs(lifted) is not None:
        while True:
            dependent = _shortest_non_projective_arc(lifted)
            if dependent is None:
                break
            lifted[dependent - 1] = lifted[lifted[dependent - 1] - 1]
    return lifted, sum(a != b for a, b in zip(heads, lifted))
