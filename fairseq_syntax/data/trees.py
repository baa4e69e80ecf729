"""The one check that dependency heads form a tree, for every reader and writer of single trees (parsed sentences,
CoNLL-U, transition sequences, the multi-task linearisation). The data-bin's load-time check of whole channels is
the vectorised form of the same rules (channels.py), for speed over millions of sentences."""
from typing import Optional, Sequence

import numpy as np


def tree_problem(heads: Sequence[int]) -> Optional[str]:
    """What keeps 1-based heads (0 = root) from being one tree, or None: at least one word, every head an integer
    in 0..n, no word its own head, exactly one root, no cycle."""
    n = len(heads)
    if n == 0:
        return "empty sentence: a tree needs at least one word"
    roots = []
    for dependent, head in enumerate(heads, start=1):
        if not isinstance(head, (int, np.integer)) or head < 0 or head > n:
            return f"word {dependent} has head {head!r}, outside 0..{n}"
        if head == dependent:
            return f"word {dependent} is its own head"
        if head == 0:
            roots.append(dependent)
    if len(roots) != 1:
        return f"a tree has exactly one root (head 0); this one has {len(roots)}: words {roots}"
    # every word must reach the root: walk up with a colouring (0 new, 1 on the current path, 2 reaches the root)
    state = [0] * (n + 1)
    state[0] = 2
    for start in range(1, n + 1):
        path, word = [], start
        while state[word] == 0:
            state[word] = 1
            path.append(word)
            word = heads[word - 1]
        if state[word] == 1:
            return f"the heads contain a cycle through word {word}"
        for w in path:
            state[w] = 2
    return None


def root_of(heads: Sequence[int]) -> int:
    """The 0-based root word of a tree (checked with tree_problem first)."""
    return list(heads).index(0)
