"""The transition function f and the validity function in plain Python (`TransitionState`: the readable
reference of function.TransitionScan, and what turns a finished sequence into a tree), with the labeled
graph of every prefix as one edge list (training).

The graph of a prefix (§3's table). Nodes are the token positions of the sequence (pieces AND arc tokens). An arc
token x at position s with head word h and dependent word d (LEFT-ARC: h = a, d = b; RIGHT-ARC: h = b, d = a)
adds, all labeled l and all appearing at step s:
  h -> d   from every piece of h to every piece of d       (kind EDGE_WORD)
  x -> d   from the arc token to every piece of d          (kind EDGE_FROM_TRANSITION)
  h -> x   from every piece of h to the arc token          (kind EDGE_TO_TRANSITION)
("an edge from/to every subword of a" is the paper's convention). Each (source, target) pair occurs at most once,
and every node of an edge of step s is at a position <= s, so the graph of the prefix tokens[:n] is the set of edges
with step < n: one edge list (`transition_edges`) serves every prefix as a mask.

Budget. A state with k words on the stack needs at least k more tokens to finish (k - 1 arcs and EOS; 2 with no
word yet: a piece and EOS). With `remaining` (how many more tokens the hypothesis may produce, EOS included), a move
is allowed only if the state it leads to can still finish: a word-initial piece needs remaining >= k + 2, a
continuation piece k + 1, an arc k, EOS 1, an attached-word mark k + 3 (the mark, at least one piece, then k + 1 to
finish), a piece with no visible character k + 1, or k + 2 while its word has no text (a piece with text must
follow); so when remaining == k only arcs (or EOS at k == 1) are allowed. If the current state can finish within
`remaining`, at least one move is always allowed.
"""
from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Union

import numpy as np

from ..subword import NO_WORD  # the word id of an arc token: the project's one value for columns that are not pieces
from .errors import InvalidTransitionError
from .tokens import (
    ATTACHED_MARK, CLASS_NAMES, EOS, LEFT_ARC, LEFT_ARC_PREFIX, OTHER, RIGHT_ARC, RIGHT_ARC_PREFIX, WORD_BEGINNINGS,
    WORD_CONTINUATIONS, WORD_CONTINUE, WORD_CONTINUE_NO_TEXT, WORD_MARK_ONLY, WORD_START, WordRule,
    starts_with_word_mark, token_class,
)

# edge kinds (TransitionEdges.kind)
EDGE_WORD, EDGE_FROM_TRANSITION, EDGE_TO_TRANSITION = range(3)

_CLASS_CACHE: dict = {}  # token -> class under the default rule (bounded: cleared when full)
_CLASS_CACHE_SIZE = 1 << 17


def _default_token_class(token: str) -> int:
    move = _CLASS_CACHE.get(token)
    if move is None:
        move = token_class(token)
        if len(_CLASS_CACHE) >= _CLASS_CACHE_SIZE:
            _CLASS_CACHE.clear()
        _CLASS_CACHE[token] = move
    return move


def _budget_allows(move: int, stack: int, remaining: int, bare: bool) -> bool:
    """Whether `move` leaves a state that can still finish within `remaining` - 1 tokens (module doc); `bare`:
    the open word has no text yet."""
    if move == WORD_CONTINUE_NO_TEXT:
        return remaining >= stack + (2 if bare else 1)
    if move == WORD_START:
        return remaining >= stack + 2
    if move == WORD_MARK_ONLY:
        return remaining >= stack + 3
    if move == WORD_CONTINUE:
        return remaining >= stack + 1
    if move in (LEFT_ARC, RIGHT_ARC):
        return remaining >= stack
    if move == EOS:
        return remaining >= 1
    return False


def tokens_to_finish(stack_size: int) -> int:
    """The fewest tokens (EOS included) that complete a state with `stack_size` words on the stack."""
    return 2 if stack_size == 0 else stack_size


class Arc(NamedTuple):
    step: int  # position of the arc token
    head: int  # 0-based words
    dependent: int
    label: str
    direction: int  # LEFT_ARC or RIGHT_ARC


class TransitionState:
    """f(prefix): the stack and the labeled graph after a prefix. Fields: `tokens` so far, `stack` (0-based words,
    bottom first), `word_pieces` (token positions of each word's pieces), `heads` (1-based, 0 while a word has no
    head; the root keeps 0), `labels` (None while unattached), `arcs` (Arc per arc token), `open` (the latest token
    is a piece: its word may still grow), `bare` (the open word was begun by an attached-word mark or a lone
    \u2581 and has no visible text yet: a piece must follow), `finished` (EOS was taken)."""

    __slots__ = ("tokens", "stack", "word_pieces", "heads", "labels", "arcs", "open", "bare", "finished",
                 "word_initial")

    def __init__(self, word_initial: WordRule = starts_with_word_mark):
        self.tokens: List[str] = []
        self.stack: List[int] = []
        self.word_pieces: List[List[int]] = []
        self.heads: List[int] = []
        self.labels: List[Optional[str]] = []
        self.arcs: List[Arc] = []
        self.open = False
        self.bare = False
        self.finished = False
        self.word_initial = word_initial

    @property
    def num_words(self) -> int:
        return len(self.word_pieces)

    @property
    def complete(self) -> bool:
        """The prefix is a whole tree: EOS may come (one word left on the stack, not waiting for a piece)."""
        return not self.finished and not self.bare and len(self.stack) == 1

    def classify(self, token: str, word_id: Optional[int] = None) -> int:
        """The class `token` would have as the next token; a piece with an explicit word id is word-initial when
        the id is one past the last word, a continuation when it is the last word's (OTHER for any other id)."""
        if self.word_initial is starts_with_word_mark:
            move = _default_token_class(token)
        else:
            move = token_class(token, self.word_initial)
        if word_id is None or move == EOS or move == OTHER:
            return move
        if move in (LEFT_ARC, RIGHT_ARC):
            return move if word_id == NO_WORD else OTHER
        if word_id == self.num_words:
            return WORD_MARK_ONLY if move in (WORD_MARK_ONLY, WORD_CONTINUE_NO_TEXT) else WORD_START
        if token == ATTACHED_MARK:
            return OTHER  # the mark only begins a word (a lone \u2581 inside one, by the map, is a space of it)
        if word_id == self.num_words - 1 and word_id >= 0:
            return WORD_CONTINUE_NO_TEXT if move == WORD_CONTINUE_NO_TEXT else WORD_CONTINUE
        return OTHER

    def allowed(self, remaining: Optional[int] = None) -> FrozenSet[int]:
        """The validity function: the classes of the tokens that may come next (with a length budget, only those
        after which the sequence can still be completed within `remaining` tokens, EOS included)."""
        if self.finished:
            return frozenset()
        stack = len(self.stack)
        if self.bare:  # only a piece of the word the mark began
            moves = list(WORD_CONTINUATIONS)
        else:
            moves = self._allowed_unmarked(stack)
        if remaining is not None:
            moves = [move for move in moves if _budget_allows(move, stack, remaining, self.bare)]
        return frozenset(moves)

    def _allowed_unmarked(self, stack: int) -> List[int]:
        moves = [WORD_START, WORD_MARK_ONLY]
        if self.open:
            moves += WORD_CONTINUATIONS
        if stack >= 2:
            moves += [LEFT_ARC, RIGHT_ARC]
        if stack == 1:
            moves.append(EOS)
        return moves

    def why_invalid(self, move: int) -> Optional[str]:
        if self.finished:
            return "the sequence has ended (EOS)"
        if self.bare and move not in WORD_CONTINUATIONS:
            return ("an attached-word mark or a lone \u2581 piece must be followed by a piece of its word with text (a "
                    "word cannot be empty)")
        if move in WORD_CONTINUATIONS and not self.open:
            if not self.word_pieces:
                return "a continuation piece cannot begin the sequence (no word in progress)"
            return "a continuation piece must follow a piece of its word (an arc or EOS completed the word)"
        if move in (LEFT_ARC, RIGHT_ARC) and len(self.stack) < 2:
            return f"an arc needs two words on the stack; it has {len(self.stack)}"
        if move == EOS and len(self.stack) != 1:
            return f"EOS needs exactly one word left on the stack (a complete tree); it has {len(self.stack)}"
        if move == OTHER:
            return "not a piece, an arc or EOS here (a special symbol, or a word id out of order)"
        return None

    def step(self, token: str, word_id: Optional[int] = None) -> int:
        """Apply one token (a piece, an arc token or EOS_SYMBOL); returns its class, raises
        InvalidTransitionError (the state is then unchanged)."""
        move = self.classify(token, word_id)
        stack = len(self.stack)
        if (self.finished or (self.bare and move not in WORD_CONTINUATIONS)
                or not (move in WORD_BEGINNINGS or (move in WORD_CONTINUATIONS and self.open)
                        or (stack >= 2 and (move == LEFT_ARC or move == RIGHT_ARC)) or (move == EOS and stack == 1))):
            raise InvalidTransitionError(f"token {len(self.tokens)} {token!r} ({CLASS_NAMES[move]}): "
                                         f"{self.why_invalid(move)}")
        position = len(self.tokens)
        self.tokens.append(token)
        # a piece with no visible character gives its word no text: a word that had none still waits for it
        self.bare = move == WORD_MARK_ONLY or (move == WORD_CONTINUE_NO_TEXT and self.bare)
        if move in WORD_BEGINNINGS:
            self.stack.append(len(self.word_pieces))
            self.word_pieces.append([position])
            self.heads.append(0)
            self.labels.append(None)
            self.open = True
        elif move in WORD_CONTINUATIONS:
            self.word_pieces[-1].append(position)
        elif move == EOS:
            self.open = False
            self.finished = True
        else:
            label = token[len(LEFT_ARC_PREFIX if move == LEFT_ARC else RIGHT_ARC_PREFIX):]
            top = self.stack.pop()
            second = self.stack.pop()
            head, dependent = (top, second) if move == LEFT_ARC else (second, top)
            self.stack.append(head)
            self.heads[dependent] = head + 1
            self.labels[dependent] = label
            self.arcs.append(Arc(position, head, dependent, label, move))
            self.open = False
        return move

    def edges(self, label_index: Union[None, Mapping[str, int], Callable[[str], int]] = None) -> "TransitionEdges":
        """The labeled graph of this prefix over token positions (module doc; the same as transition_edges)."""
        return _edges(self.arcs, self.word_pieces, label_index)


def parse_transitions(tokens: Sequence[str], word_ids: Optional[Sequence[int]] = None,
                      word_initial: WordRule = starts_with_word_mark) -> TransitionState:
    """f: the state (stack, words, heads, labels, graph) after a valid prefix; `word_ids` (one per token, NO_WORD
    on arcs) gives the subword -> word map explicitly. Raises InvalidTransitionError on an invalid prefix."""
    if word_ids is not None and len(word_ids) != len(tokens):
        raise ValueError(f"{len(tokens)} tokens but {len(word_ids)} word ids")
    state = TransitionState(word_initial)
    if word_ids is None:
        for token in tokens:
            state.step(token)
    else:
        for token, word in zip(tokens, word_ids):
            state.step(token, int(word))
    return state


def allowed_next(tokens: Sequence[str], word_ids: Optional[Sequence[int]] = None, remaining: Optional[int] = None,
                 word_initial: WordRule = starts_with_word_mark) -> FrozenSet[int]:
    """The validity function on a prefix: the classes of the tokens that may come next (EOS when it may end)."""
    return parse_transitions(tokens, word_ids, word_initial).allowed(remaining)


def is_valid_sequence(tokens: Sequence[str], word_ids: Optional[Sequence[int]] = None,
                      word_initial: WordRule = starts_with_word_mark) -> bool:
    """Whether the tokens form a whole transition sequence (every step valid, and EOS valid after the last)."""
    try:
        state = parse_transitions(tokens, word_ids, word_initial)
    except InvalidTransitionError:
        return False
    return state.complete


# ---- the graph of every prefix as one edge list (training) ---------------------------------------------------

@dataclass
class TransitionEdges:
    """E edges, int64 arrays (E,): source and target token positions, label (an id where a label index was
    given, else the label string, dtype object), step (position of the arc token that added the edge) and kind
    (EDGE_WORD, EDGE_FROM_TRANSITION, EDGE_TO_TRANSITION). The graph of tokens[:n] is the edges with step < n."""

    source: np.ndarray
    target: np.ndarray
    label: np.ndarray
    step: np.ndarray
    kind: np.ndarray

    def __len__(self):
        return len(self.source)

    def prefix(self, length: int) -> "TransitionEdges":
        """The graph of the prefix of `length` tokens."""
        keep = self.step < length
        return TransitionEdges(self.source[keep], self.target[keep], self.label[keep], self.step[keep],
                               self.kind[keep])

    def step_matrix(self, num_tokens: int) -> np.ndarray:
        """(num_tokens, num_tokens) int64: the step at which source -> target appears, -1 where never; the graph
        of tokens[:n] is (m >= 0) & (m < n)."""
        matrix = np.full((num_tokens, num_tokens), -1, dtype=np.int64)
        matrix[self.source, self.target] = self.step
        return matrix


def _edges(arcs: Sequence[Arc], word_pieces: Sequence[Sequence[int]],
           label_index: Union[None, Mapping[str, int], Callable[[str], int]]) -> TransitionEdges:
    source: List[int] = []
    target: List[int] = []
    labels: list = []
    steps: List[int] = []
    kinds: List[int] = []
    if label_index is None:
        encode = None
    elif callable(label_index):
        encode = label_index
    else:
        encode = label_index.__getitem__
    for arc in arcs:
        head_pieces, dependent_pieces = word_pieces[arc.head], word_pieces[arc.dependent]
        label = arc.label if encode is None else encode(arc.label)
        for h in head_pieces:  # h -> d
            source.extend([h] * len(dependent_pieces))
            target.extend(dependent_pieces)
        source.extend([arc.step] * len(dependent_pieces))  # x -> d
        target.extend(dependent_pieces)
        source.extend(head_pieces)  # h -> x
        target.extend([arc.step] * len(head_pieces))
        count = len(head_pieces) * len(dependent_pieces) + len(dependent_pieces) + len(head_pieces)
        labels.extend([label] * count)
        steps.extend([arc.step] * count)
        kinds.extend([EDGE_WORD] * (len(head_pieces) * len(dependent_pieces)) + [EDGE_FROM_TRANSITION] *
                     len(dependent_pieces) + [EDGE_TO_TRANSITION] * len(head_pieces))
    label_array = np.array(labels, dtype=object) if encode is None else np.array(labels, dtype=np.int64)
    return TransitionEdges(np.array(source, dtype=np.int64), np.array(target, dtype=np.int64),
                           label_array.reshape(-1), np.array(steps, dtype=np.int64), np.array(kinds, dtype=np.int64))


def transition_edges(tokens: Sequence[str], word_ids: Optional[Sequence[int]] = None,
                     label_index: Union[None, Mapping[str, int], Callable[[str], int]] = None,
                     word_initial: WordRule = starts_with_word_mark) -> TransitionEdges:
    """Every edge of the sequence's graph with the step at which it appears and its label (module doc)."""
    return parse_transitions(tokens, word_ids, word_initial).edges(label_index)
