"""The transition system of Choshen & Abend's target-syntax decoder ("Enhancing the Transformer Decoder with
Transition-based Syntax", §3 and appendix B "Transitions"): the system, its oracle (preprocessing), the transition
function and validity function in plain Python (`TransitionState`: the readable reference, and what turns a
finished sequence into a tree and CoNLL-U), and the class of every vocabulary symbol. The batched, on-device
transition function that training and beam search call is transition_function.TransitionScan.

The system. Arc-standard (Nivre 2003) in which SHIFT is replaced by generating the next subword piece:
  piece t          a word-initial piece pushes a new word; a continuation piece is appended to the word on top
  LEFT-ARC:l       a (top) and b (second): b <-l- a, b is popped                      stack ... b a -> ... a
  RIGHT-ARC:l      a (top) and b (second): b -l-> a, a is popped                      stack ... b a -> ... b
The root edge is deleted (appendix B): the sequence ends when one word is left, and that word is the root (its
label is `root_label` when a tree is read out). Arc tokens exist for every label but the root's (`arc_tokens`).

Word boundaries. A piece starts a new word when it starts with "\u2581" (sentencepiece's mark; `word_initial` is
pluggable: `every_piece_is_a_word` for a word vocabulary), or, where the subword -> word map is given explicitly
(`word_ids`, one per token, -1 on arc tokens), when its word id is one past the last word. The paper's BPE marks
the LAST piece of a word ("Jo@@ hn": "hn" has no "@@", so the word is complete when it is generated);
sentencepiece marks the FIRST, so a word's completeness is only known from the token that follows it: a word is
*open* while the latest token is one of its pieces, and it is completed by the next token that is not a
continuation piece (a word-initial piece, an arc, or EOS). Hence:
  - a continuation piece is valid only right after a piece (its word is still open);
  - an arc needs two words on the stack; it completes the open word on top, if any (no piece of that word can
    follow it: no arc falls inside a word, and no word grows after an arc touched it);
  - EOS is valid only when exactly one word is left on the stack (EOS completes that word if open).
Attached words. A word written without a space before it ("." or "," after a word, "n't") has no "\u2581", so by
the rule alone it would continue the previous word, and decoding, which has no word ids, would read other words
than the parser's. Preprocessing therefore writes ATTACHED_MARK ("<attached>") as the first token of every such
word (`mark_attached_words`, one rule for the writer and the decoder): the mark begins a word and must be followed
by a continuation piece (class WORD_MARK_ONLY; an empty word is invalid), and it spells nothing, so the text and the
word's surface form are the pieces' ("bark" "<attached>" "." -> "bark."). A word vocabulary needs no mark (every
token is a word).
Empty words. A piece that is only "\u2581" spells a space and nothing of a word: sentencepiece writes it before a
word whose first piece it has only without the mark ("\u2581" "\u00c4" ...). It is in the same class as the mark
(WORD_MARK_ONLY: it begins a word, and a continuation piece must follow), so no generated word, and no translation,
is empty; a parsed word that segments to such pieces alone has no text and is refused by the oracle's writer
(`mark_attached_words`).

Projectivisation. Arc-standard derives projective trees only. `projectivize` lifts non-projective arcs (Nivre &
Nilsson 2005's Lift without label encoding: the dependent of the shortest non-projective arc is reattached to its
head's head, repeated until the tree is projective); labels are kept, so the lifted tree is an approximation of the
parse, and the count of words with a new head is reported.

The oracle (static, "arcs as early as possible", the canonical order). After the last piece of each word, reduce
while possible: LEFT-ARC when the second word's head is the top word, else RIGHT-ARC when the top word's head is the
second word and the top word has all its dependents; then generate the next word's pieces. This is the order of the
paper's example ("Jo@@ hn put LEFT-ARC:nsubj the coals LEFT-ARC:det RIGHT-ARC:obj out RIGHT-ARC:compound:prt").
Arc-standard derives exactly the projective trees; a non-projective tree raises NonProjectiveError.

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
finish); so when remaining == k only arcs (or EOS at k == 1) are allowed. If the current state can finish within
`remaining`, at least one move is always allowed.

Pure Python (oracle, f, validity, trees) plus torch for the vocabulary's classes; no parser or model imports.
"""
import re
from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from .subword import NO_WORD  # the word id of an arc token: the project's one value for columns that are not pieces
from .trees import root_of, tree_problem

WORD_MARK = "\u2581"
ATTACHED_MARK = "<attached>"  # begins a word written without a space before it (module doc, "Attached words")
LEFT_ARC_PREFIX = "LEFT-ARC:"
RIGHT_ARC_PREFIX = "RIGHT-ARC:"
EOS_SYMBOL = "</s>"  # fairseq's end of sentence; a transition sequence itself never contains it
ROOT_LABEL = "root"  # UD's label of the root word (its edge is deleted from the transitions)
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "<unk>")  # never valid as a generated token (`vocabulary_classes`)

# token classes (shared by the Python validity function and the batched one, transition_function.py)
WORD_START, WORD_CONTINUE, LEFT_ARC, RIGHT_ARC, EOS, OTHER, WORD_MARK_ONLY = range(7)
NUM_CLASSES = 7
CLASS_NAMES = ("word-initial piece", "continuation piece", "LEFT-ARC", "RIGHT-ARC", "EOS", "other",
               "word mark with no text (attached-word mark or a lone \u2581)")
WORD_BEGINNINGS = (WORD_START, WORD_MARK_ONLY)  # the classes that push a word

# edge kinds (TransitionEdges.kind)
EDGE_WORD, EDGE_FROM_TRANSITION, EDGE_TO_TRANSITION = range(3)

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_WHITESPACE = re.compile(r"\s")
_FAIRSEQ_PADDING = re.compile(r"madeupword\d+")  # symbols fairseq adds to pad a dictionary's size
_ARC_PREFIXES = (LEFT_ARC_PREFIX, RIGHT_ARC_PREFIX)


class TransitionError(ValueError):
    """Base of this module's errors."""


class InvalidTreeError(TransitionError):
    """The heads/labels/pieces given to the oracle are not one tree over the pieces' words; `reason` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class NonProjectiveError(InvalidTreeError):
    """A tree arc-standard cannot derive; `crossing` holds two crossing arcs (head, dependent), 1-based words,
    head 0 = the root arc."""

    def __init__(self, crossing: Tuple[Tuple[int, int], Tuple[int, int]]):
        self.crossing = crossing
        (h1, d1), (h2, d2) = crossing
        super().__init__(f"non-projective tree: arc {h1}->{d1} crosses arc {h2}->{d2} (1-based words, 0 = root); "
                         "arc-standard transitions derive projective trees only")


class InvalidTransitionError(TransitionError):
    """A token that may not follow the prefix it was given after."""


# ---- tokens ---------------------------------------------------------------------------------------------------

def left_arc(label: str) -> str:
    return LEFT_ARC_PREFIX + _checked_label(label)


def right_arc(label: str) -> str:
    return RIGHT_ARC_PREFIX + _checked_label(label)


def _label_problem(label) -> Optional[str]:
    if not isinstance(label, str) or not label or _WHITESPACE.search(label):
        return f"dependency label {label!r} cannot be part of a transition token (empty or with whitespace)"
    return None


def _checked_label(label: str) -> str:
    problem = _label_problem(label)
    if problem is not None:
        raise ValueError(problem)
    return label


def transition_vocabulary(labels: Sequence[str], root_label: str = ROOT_LABEL) -> List[str]:
    """The tokens a transition data-bin adds to the target dictionary: the attached-word mark, then the arc
    tokens (arc_tokens)."""
    return [ATTACHED_MARK] + arc_tokens(labels, root_label)


def arc_tokens(labels: Sequence[str], root_label: str = ROOT_LABEL) -> List[str]:
    """The arc tokens: LEFT-ARC:l and RIGHT-ARC:l for every label but the root's, in the given
    order (labels repeated or equal to `root_label` are skipped)."""
    seen, tokens = set(), []
    for label in labels:
        if label == root_label or label in seen:
            continue
        seen.add(label)
        tokens += [left_arc(label), right_arc(label)]
    return tokens


def parse_arc(token: str) -> Optional[Tuple[int, str]]:
    """(LEFT_ARC or RIGHT_ARC, label) of an arc token, None for anything else."""
    if not token.startswith(_ARC_PREFIXES):
        return None
    if token.startswith(LEFT_ARC_PREFIX) and len(token) > len(LEFT_ARC_PREFIX):
        return LEFT_ARC, token[len(LEFT_ARC_PREFIX):]
    if token.startswith(RIGHT_ARC_PREFIX) and len(token) > len(RIGHT_ARC_PREFIX):
        return RIGHT_ARC, token[len(RIGHT_ARC_PREFIX):]
    return None


def is_arc(token: str) -> bool:
    return parse_arc(token) is not None


def starts_with_word_mark(piece: str) -> bool:
    """The default word-boundary rule: a sentencepiece piece starting with U+2581 (or the attached-word mark)
    begins a new word."""
    return piece.startswith(WORD_MARK) or piece == ATTACHED_MARK


def every_piece_is_a_word(piece: str) -> bool:
    """The word-boundary rule of a word vocabulary (word_codec): every token is a word of its own."""
    return True


WordRule = Callable[[str], bool]


def token_class(token: str, word_initial: WordRule = starts_with_word_mark, eos: str = EOS_SYMBOL,
                specials: Sequence[str] = FAIRSEQ_SPECIALS) -> int:
    """The class of a token read by the word-boundary rule (no explicit word map); fairseq's specials and its
    padding symbols (madeupword0000, ...) are OTHER: never valid."""
    if token == eos:
        return EOS
    if token == ATTACHED_MARK:
        return WORD_MARK_ONLY
    if token in specials or _FAIRSEQ_PADDING.fullmatch(token):
        return OTHER
    arc = parse_arc(token)
    if arc is not None:
        return arc[0]
    if not word_initial(token):
        return WORD_CONTINUE
    return WORD_MARK_ONLY if token and not token.strip(WORD_MARK) else WORD_START  # module doc, "Empty words"


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


def mark_attached_words(pieces: Sequence[str], word_ids: Sequence[int],
                        word_initial: WordRule = starts_with_word_mark) -> Tuple[List[str], List[int]]:
    """The pieces (and their 0-based word ids) with ATTACHED_MARK before the first piece of every word that the
    word-boundary rule would not read as a new word, so that the rule reads exactly the given words. Extra spaces
    before a word (a run of spaces: sentencepiece writes "\u2581" pieces, then "\u2581word") are left out, so the
    word's own piece begins it: a run of spaces becomes one. Raises InvalidTreeError where no mark can help: a
    piece inside a word that the rule reads as a new word (a word with a space in it), or a word whose pieces
    spell nothing (only "\u2581": module doc, "Empty words")."""
    marked, marked_ids, previous, start = [], [], None, 0

    def require_text(word):
        if all(p == ATTACHED_MARK or not p.strip(WORD_MARK) for p in marked[start:]):
            raise InvalidTreeError(f"word {word} has no text after segmentation (its pieces: {marked[start:]!r})")

    for index, (piece, word) in enumerate(zip(pieces, word_ids)):
        begins = word != previous
        if begins:
            if previous is not None:
                require_text(previous)
            start = len(marked)
            if not word_initial(piece):
                marked.append(ATTACHED_MARK)
                marked_ids.append(word)
        elif word_initial(piece):
            if not all(p.strip(WORD_MARK) == "" for p in marked[start:]):
                raise InvalidTreeError(f"piece {index} {piece!r} is inside word {word} but begins a word by the "
                                       "word-boundary rule (a word with a space in it)")
            del marked[start:], marked_ids[start:]  # only spaces so far: this piece begins the word
        marked.append(piece)
        marked_ids.append(word)
        previous = word
    if previous is not None:
        require_text(previous)
    return marked, marked_ids


def word_ids_from_pieces(pieces: Sequence[str], word_initial: WordRule = starts_with_word_mark) -> List[int]:
    """0-based word of every piece by the word-boundary rule; the first piece must begin a word."""
    word_ids, word = [], -1
    for index, piece in enumerate(pieces):
        if word_initial(piece):
            word += 1
        elif word < 0:
            raise InvalidTreeError(f"the first piece {piece!r} does not begin a word by the word-boundary rule "
                                   "(no leading U+2581): give the subword -> word map explicitly (word_ids)")
        word_ids.append(word)
    return word_ids


# ---- trees: checks and projectivity --------------------------------------------------------------------------

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


# ---- the oracle ---------------------------------------------------------------------------------------------

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
        problem = _label_problem(label)
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


# ---- the transition function f and the validity function ----------------------------------------------------

def _budget_allows(move: int, stack: int, remaining: int) -> bool:
    """Whether `move` leaves a state that can still finish within `remaining` - 1 tokens (module doc)."""
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
    is a piece: its word may still grow), `bare` (the latest token is an attached-word mark: a piece must follow),
    `finished` (EOS was taken)."""

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
            return WORD_MARK_ONLY if move == WORD_MARK_ONLY else WORD_START
        if token == ATTACHED_MARK:
            return OTHER  # the mark only begins a word (a lone \u2581 inside one, by the map, is a space of it)
        if word_id == self.num_words - 1 and word_id >= 0:
            return WORD_CONTINUE
        return OTHER

    def allowed(self, remaining: Optional[int] = None) -> FrozenSet[int]:
        """The validity function: the classes of the tokens that may come next (with a length budget, only those
        after which the sequence can still be completed within `remaining` tokens, EOS included)."""
        if self.finished:
            return frozenset()
        stack = len(self.stack)
        if self.bare:  # only a piece of the word the mark began
            moves = [WORD_CONTINUE]
        else:
            moves = self._allowed_unmarked(stack)
        if remaining is not None:
            moves = [move for move in moves if _budget_allows(move, stack, remaining)]
        return frozenset(moves)

    def _allowed_unmarked(self, stack: int) -> List[int]:
        moves = [WORD_START, WORD_MARK_ONLY]
        if self.open:
            moves.append(WORD_CONTINUE)
        if stack >= 2:
            moves += [LEFT_ARC, RIGHT_ARC]
        if stack == 1:
            moves.append(EOS)
        return moves

    def why_invalid(self, move: int) -> Optional[str]:
        if self.finished:
            return "the sequence has ended (EOS)"
        if self.bare and move != WORD_CONTINUE:
            return ("an attached-word mark or a lone \u2581 piece must be followed by a piece of its word (a word "
                    "cannot be empty)")
        if move == WORD_CONTINUE and not self.open:
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
        if self.finished or (self.bare and move != WORD_CONTINUE) or \
                not (move in WORD_BEGINNINGS or (move == WORD_CONTINUE and self.open) or
                     (stack >= 2 and (move == LEFT_ARC or move == RIGHT_ARC)) or (move == EOS and stack == 1)):
            raise InvalidTransitionError(f"token {len(self.tokens)} {token!r} ({CLASS_NAMES[move]}): "
                                         f"{self.why_invalid(move)}")
        position = len(self.tokens)
        self.tokens.append(token)
        self.bare = move == WORD_MARK_ONLY
        if move in WORD_BEGINNINGS:
            self.stack.append(len(self.word_pieces))
            self.word_pieces.append([position])
            self.heads.append(0)
            self.labels.append(None)
            self.open = True
        elif move == WORD_CONTINUE:
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


# ---- trees and text out ---------------------------------------------------------------------------------------

def _decode(pieces: Sequence[str]) -> str:
    pieces = [piece for piece in pieces if piece != ATTACHED_MARK]  # the mark spells nothing
    joined = "".join(pieces)
    if "<0x" not in joined:  # no byte piece
        return joined.replace(WORD_MARK, " ")
    out: List[str] = []
    pending = bytearray()
    for piece in pieces:
        byte = _BYTE_PIECE.fullmatch(piece) if piece.startswith("<0x") else None
        if byte is not None:
            pending.append(int(byte.group(1), 16))
            continue
        if pending:
            out.append(pending.decode("utf-8", errors="replace"))
            pending = bytearray()
        out.append(piece.replace(WORD_MARK, " "))
    if pending:
        out.append(pending.decode("utf-8", errors="replace"))
    return "".join(out)


def decode_pieces(pieces: Sequence[str]) -> str:
    """Text of sentencepiece pieces as this project's codecs decode it: U+2581 -> " ", byte-fallback pieces
    (<0xNN>) -> their UTF-8 bytes, and the leading space of the sentence dropped."""
    text = _decode(pieces)
    return text[1:] if text.startswith(" ") else text


def strip_transitions(tokens: Sequence[str]) -> List[str]:
    """The pieces of a transition sequence (arc tokens, attached-word marks and EOS removed)."""
    return [token for token in tokens if token != EOS_SYMBOL and token != ATTACHED_MARK and not is_arc(token)]


def is_transition_token(token: str) -> bool:
    """An arc token or an attached-word mark: a token of a transition sequence that is not a piece of the text."""
    return token == ATTACHED_MARK or is_arc(token)


def sequence_text(tokens: Sequence[str]) -> str:
    """The sentence a transition sequence spells (its pieces decoded)."""
    return decode_pieces(strip_transitions(tokens))


class Tree(NamedTuple):
    words: List[str]
    heads: List[int]  # 1-based, 0 = root
    labels: List[str]


def _finished_state(tokens, word_ids, word_initial) -> TransitionState:
    state = parse_transitions(tokens, word_ids, word_initial)
    if not (state.complete or state.finished):
        raise InvalidTransitionError(f"the sequence is not a complete tree: {len(state.stack)} words on the stack "
                                     "(one is needed)")
    return state


def _word_texts(state: TransitionState) -> Tuple[List[str], List[str]]:
    """Each word's text and the whitespace before it, from its pieces."""
    words, spaces = [], []
    for positions in state.word_pieces:
        text = _decode([state.tokens[p] for p in positions])
        word = text.lstrip()
        words.append(word)
        spaces.append(text[:len(text) - len(word)])
    return words, spaces


def transitions_to_tree(tokens: Sequence[str], word_ids: Optional[Sequence[int]] = None,
                        root_label: str = ROOT_LABEL, word_initial: WordRule = starts_with_word_mark) -> Tree:
    """(words as text, 1-based heads with 0 for the root, labels) of a finished transition sequence (a final
    EOS_SYMBOL may be there or not); the last word left on the stack is the root, labeled `root_label`."""
    state = _finished_state(tokens, word_ids, word_initial)
    words, _ = _word_texts(state)
    heads = list(state.heads)
    labels = list(state.labels)
    labels[state.stack[0]] = root_label
    return Tree(words, heads, labels)


def _conllu_field(text: str) -> str:
    text = re.sub(r"[\t\n\r]", " ", text)
    return text if text else "_"


def to_conllu(tokens: Sequence[str], word_ids: Optional[Sequence[int]] = None, root_label: str = ROOT_LABEL,
              sent_id: Optional[str] = None, word_initial: WordRule = starts_with_word_mark) -> str:
    """A finished transition sequence as one CoNLL-U sentence (ID, FORM, HEAD, DEPREL filled, SpaceAfter=No in
    MISC where the next word has no whitespace before it, `# text` from the pieces), ending with a blank line."""
    state = _finished_state(tokens, word_ids, word_initial)
    words, spaces = _word_texts(state)
    labels = list(state.labels)
    labels[state.stack[0]] = root_label
    lines = []
    if sent_id is not None:
        lines.append(f"# sent_id = {_conllu_field(sent_id)}")
    lines.append("# text = " + re.sub(r"[\n\r]", " ", sequence_text(state.tokens)))
    for index, (word, head, label) in enumerate(zip(words, state.heads, labels)):
        misc = "SpaceAfter=No" if index + 1 < len(words) and not spaces[index + 1] else "_"
        lines.append("\t".join([str(index + 1), _conllu_field(word), "_", "_", "_", "_", str(head), label, "_",
                                misc]))
    return "\n".join(lines) + "\n\n"


# ---- the vocabulary's classes for the batched function (transition_function.py) ------------------------------

def vocabulary_classes(symbols: Sequence[str], word_initial: WordRule = starts_with_word_mark,
                       eos: str = EOS_SYMBOL, specials: Sequence[str] = FAIRSEQ_SPECIALS,
                       device: Optional[torch.device] = None) -> Tensor:
    """(V,) int64 class of every symbol of a target dictionary (e.g. fairseq's `dictionary.symbols`): pieces by
    the word-boundary rule, arc tokens, EOS, and OTHER for specials (<s>, <pad>, <unk>) and fairseq's padding
    symbols (madeupword...), which are never allowed."""
    classes = [token_class(symbol, word_initial, eos, specials) for symbol in symbols]
    return torch.tensor(classes, dtype=torch.long, device=device)


def vocabulary_labels(symbols: Sequence[str], label_index: Union[Mapping[str, int], Callable[[str], int]],
                      device: Optional[torch.device] = None) -> Tensor:
    """(V,) int64: the label id (`label_index`, e.g. the data-bin's label dictionary) of every arc symbol, -1 for
    every other symbol."""
    encode = label_index if callable(label_index) else label_index.__getitem__
    labels = []
    for symbol in symbols:
        arc = parse_arc(symbol)
        labels.append(-1 if arc is None else int(encode(arc[1])))
    return torch.tensor(labels, dtype=torch.long, device=device)
