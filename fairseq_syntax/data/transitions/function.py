"""The transition function f of Choshen & Abend's transition system (tokens.py: the system;
oracle.py: the oracle; state.py: the Python reference TransitionState), batched and on the
device: a batch of prefixes of token ids in, the state after them (stack, words, validity) and the labeled graph of
every prefix out. Preprocessing, training (the prefix graph of every target position) and beam search (the validity
mask, and the prefix graph a decoder re-encodes) all call this one function.

State (B hypotheses, tensors on the tokens' device):
  stack (B, D)  0-based words on the stack, bottom first (D grows as needed); depth (B,) how many
  num_words (B,), open (the latest token is a piece: a continuation may follow), bare (the open word was begun by
  an attached-word mark or a lone \u2581 and has no visible text yet: only a continuation may follow), finished
  (EOS taken)
History, one column per token taken so far (B, n):
  word      the 0-based word of a piece (word-initial, continuation or attached-word mark), -1 otherwise
  head, dependent   for an arc token, its head and dependent words, -1 otherwise
  label     for an arc token, its label id (`label_of` of the vocabulary), -1 otherwise
A token that is not valid in its row's state (it cannot happen in a sequence of the oracle or a masked beam
search; it can in a hypothesis forced from outside) changes nothing and is recorded as class OTHER (`applied` is
False there), so the state stays that of the valid prefix.

The graph of the prefix tokens[:n] (§3's table, state.py "The graph of a prefix"): each arc token x at
position s with head word h and dependent word d adds h -> d (every piece to every piece), x -> d and h -> x, all
at step s. `parent_steps` gives it as one (B, n, n) matrix of the step at which source -> target appears (-1:
never): the graph of the first m tokens is 0 <= steps < m.

Incremental use: `extend(token_ids)` appends columns (one per decoding step in beam search), `index_select(order)`
reorders hypotheses as beam search does; both return a new TransitionScan.
"""
from dataclasses import dataclass, replace
from typing import Optional, Union

import torch
from torch import Tensor

from .tokens import (
    EOS, LEFT_ARC, NUM_CLASSES, OTHER, RIGHT_ARC, WORD_CONTINUE, WORD_CONTINUE_NO_TEXT, WORD_MARK_ONLY, WORD_START,
)

NO_INDEX = -1


def _can_end_within(depth: Tensor, kind: str, low: Tensor, high: Tensor) -> Tensor:
    """Whether a state with `depth` words on the stack can end (EOS included) in some number of tokens between
    `low` and `high`. The lengths it can end in (pieces P, new words W <= P, so P + W + depth tokens with the
    depth + W - 1 arcs and EOS):
      open    (its word may still grow)                  depth, depth + 1, ...     (continuation pieces)
      bare    (after a mark: a piece must come)          depth + 1, depth + 2, ...
      closed  (after an arc: a new word costs 2 or more) depth, depth + 2, depth + 3, ...
      words   (a word vocabulary: every word one token)  depth, depth + 2, depth + 4, ...
    """
    if kind == "open":
        return torch.maximum(depth, low) <= high
    if kind == "bare":
        return torch.maximum(depth + 1, low) <= high
    if kind == "closed":
        return ((low <= depth) & (depth <= high)) | (torch.maximum(depth + 2, low) <= high)
    start = torch.maximum(depth, low)
    return start + (start - depth) % 2 <= high


@dataclass(frozen=True)
class TransitionScan:
    stack: Tensor
    depth: Tensor
    num_words: Tensor
    open: Tensor
    bare: Tensor
    finished: Tensor
    word: Tensor
    head: Tensor
    dependent: Tensor
    label: Tensor
    classes: Tensor  # (B, n) the class each token was applied as (OTHER where it was not valid)

    # ---- construction ----------------------------------------------------------------------------------------

    @classmethod
    def initial(cls, batch_size: int, device: Optional[torch.device] = None) -> "TransitionScan":
        long = dict(dtype=torch.long, device=device)
        no = torch.zeros(batch_size, dtype=torch.bool, device=device)
        empty = torch.zeros(batch_size, 0, **long)
        return cls(stack=torch.zeros(batch_size, 1, **long), depth=torch.zeros(batch_size, **long),
                   num_words=torch.zeros(batch_size, **long), open=no, bare=no.clone(), finished=no.clone(),
                   word=empty, head=empty, dependent=empty, label=empty, classes=empty)

    @classmethod
    def of(cls, token_ids: Tensor, token_class: Tensor, label_of: Optional[Tensor] = None) -> "TransitionScan":
        """f of a batch of prefixes (B, n) of token ids: every column applied in turn."""
        return cls.initial(token_ids.size(0), token_ids.device).extend(token_ids, token_class, label_of)

    @property
    def length(self) -> int:
        return self.word.size(1)

    # ---- the transition function -----------------------------------------------------------------------------

    def extend(self, token_ids: Tensor, token_class: Tensor, label_of: Optional[Tensor] = None) -> "TransitionScan":
        """The state after each row also takes the tokens of `token_ids` (B, k), in order."""
        state = self
        classes = token_class[token_ids]
        labels = label_of[token_ids] if label_of is not None else torch.full_like(token_ids, NO_INDEX)
        for column in range(token_ids.size(1)):
            state = state._step(classes[:, column], labels[:, column])
        return state

    def _step(self, move: Tensor, label: Tensor) -> "TransitionScan":
        allowed = self.allowed_classes().gather(1, move.unsqueeze(1)).squeeze(1)
        move = torch.where(allowed, move, torch.full_like(move, OTHER))
        begins = (move == WORD_START) | (move == WORD_MARK_ONLY)
        continues = (move == WORD_CONTINUE) | (move == WORD_CONTINUE_NO_TEXT)
        left = move == LEFT_ARC
        arc = left | (move == RIGHT_ARC)
        eos = move == EOS
        depth = self.depth
        # one more slot per token (a stack never holds more words than tokens): no read-back of the depth, so no
        # host synchronisation in beam search
        stack = torch.cat([self.stack, torch.zeros_like(self.stack[:, :1])], dim=1)
        top = stack.gather(1, (depth - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
        second = stack.gather(1, (depth - 2).clamp(min=0).unsqueeze(1)).squeeze(1)
        head = torch.where(left, top, second)
        dependent = torch.where(left, second, top)
        # an arc leaves its head where the second word was; a new word goes on top
        slot = torch.where(arc, depth - 2, depth).clamp(min=0)
        value = torch.where(arc, head, self.num_words)
        written = arc | begins
        current = stack.gather(1, slot.unsqueeze(1)).squeeze(1)
        stack = stack.scatter(1, slot.unsqueeze(1), torch.where(written, value, current).unsqueeze(1))
        none = torch.full_like(move, NO_INDEX)
        word = torch.where(begins, self.num_words, torch.where(continues, self.num_words - 1, none))
        piece = begins | continues
        return TransitionScan(
            stack=stack, depth=depth + begins.long() - arc.long(), num_words=self.num_words + begins.long(),
            open=torch.where(piece, torch.ones_like(self.open), self.open & ~(arc | eos)),
            # a piece with no visible character gives its word no text: a word that had none still waits for it
            bare=torch.where((move == OTHER) | (move == WORD_CONTINUE_NO_TEXT), self.bare, move == WORD_MARK_ONLY),
            finished=self.finished | eos,
            word=torch.cat([self.word, word.unsqueeze(1)], dim=1),
            head=torch.cat([self.head, torch.where(arc, head, none).unsqueeze(1)], dim=1),
            dependent=torch.cat([self.dependent, torch.where(arc, dependent, none).unsqueeze(1)], dim=1),
            label=torch.cat([self.label, torch.where(arc, label, none).unsqueeze(1)], dim=1),
            classes=torch.cat([self.classes, move.unsqueeze(1)], dim=1))

    def index_select(self, order: Tensor) -> "TransitionScan":
        """Hypotheses reordered or repeated (beam search's reorder_incremental_state)."""
        return TransitionScan(**{name: getattr(self, name).index_select(0, order)
                                 for name in self.__dataclass_fields__})

    def truncate(self, length: int) -> "TransitionScan":
        """The history cut to its first `length` columns (the state fields are not recomputed: only for reading
        the graph of a shorter prefix)."""
        return replace(self, word=self.word[:, :length], head=self.head[:, :length],
                       dependent=self.dependent[:, :length], label=self.label[:, :length],
                       classes=self.classes[:, :length])

    # ---- validity -------------------------------------------------------------------------------------------

    def allowed_classes(self, remaining: Union[None, int, Tensor] = None, minimum: Union[None, int, Tensor] = None,
                        continuations: bool = True) -> Tensor:
        """(B, NUM_CLASSES) bool: the validity function of every hypothesis (TransitionState.allowed, batched).
        With a length window, only the moves after which the hypothesis can still end as a tree inside it:
        `remaining` (the most tokens it may still produce, EOS included) and `minimum` (the fewest: fairseq's
        --min-len keeps EOS back until then). `continuations`: whether the vocabulary has continuation pieces (a
        word vocabulary has none, so its words cannot be lengthened one token at a time; see `_can_end_within`)."""
        live = ~self.finished
        free = live & ~self.bare  # after a mark only a continuation piece
        depth = self.depth
        allowed = torch.stack([free, live & self.open, free & (depth >= 2), free & (depth >= 2), free & (depth == 1),
                               torch.zeros_like(live), free, live & self.open], dim=1)
        if remaining is None and minimum is None:
            assert allowed.size(1) == NUM_CLASSES
            return allowed
        big = torch.iinfo(torch.long).max // 4
        high = torch.as_tensor(big if remaining is None else remaining, device=depth.device) - 1  # after the move
        low = torch.as_tensor(-big if minimum is None else minimum, device=depth.device) - 1
        fits = _can_end_within
        window = torch.stack([
            fits(depth + 1, "open" if continuations else "words", low, high),  # a word-initial piece
            fits(depth, "open", low, high),  # a continuation piece
            fits(depth - 1, "closed" if continuations else "words", low, high),  # an arc
            fits(depth - 1, "closed" if continuations else "words", low, high),
            (high >= 0) & (low <= 0) & torch.ones_like(live),  # EOS: it is the last token
            torch.zeros_like(live),
            fits(depth + 1, "bare", low, high),  # a mark or lone U+2581: a piece must follow
            torch.where(self.bare, fits(depth, "bare", low, high), fits(depth, "open", low, high))], dim=1)
        allowed = allowed & window
        assert allowed.size(1) == NUM_CLASSES
        return allowed

    def mask(self, token_class: Tensor, remaining: Union[None, int, Tensor] = None) -> Tensor:
        """(B, V) bool, True where the token may come next (`token_class` from tokens.vocabulary_classes)."""
        return self.allowed_classes(remaining)[:, token_class]

    def tokens_to_finish(self) -> Tensor:
        """(B,) the fewest tokens (EOS included) that complete each unfinished hypothesis (0 when finished)."""
        needed = torch.where(self.depth == 0, torch.full_like(self.depth, 2), self.depth)
        return needed.masked_fill(self.finished, 0)

    @property
    def applied(self) -> Tensor:
        """(B, n) bool: whether each token was a valid move (False: it changed nothing)."""
        return self.classes != OTHER

    # ---- the graph --------------------------------------------------------------------------------------------

    def parent_steps(self) -> Tensor:
        """(B, n, n) long: [b, target, source] = the step (token position) at which the edge source -> target of
        row b's graph appears, -1 where there is none (module doc). Target first, so that row i lists the parents
        of token i: the graph of the first m tokens is 0 <= steps < m. O(B n^2), no loop."""
        batch, length = self.word.shape
        device = self.word.device
        none = torch.full((batch, length, length), NO_INDEX, dtype=torch.long, device=device)
        if length == 0:
            return none
        positions = torch.arange(length, device=device).expand(batch, length)
        is_arc = self.head >= 0
        # per word: the arc that attaches it (its step) and its head; words are < n, so n slots are enough
        slot = torch.where(is_arc, self.dependent, torch.full_like(self.dependent, length))  # n: a spare slot
        attach = torch.full((batch, length + 1), NO_INDEX, dtype=torch.long, device=device)
        attach = attach.scatter(1, slot, torch.where(is_arc, positions, attach[:, :length]))[:, :length]
        head_of = torch.full((batch, length + 1), NO_INDEX, dtype=torch.long, device=device)
        head_of = head_of.scatter(1, slot, torch.where(is_arc, self.head, head_of[:, :length]))[:, :length]
        is_piece = self.word >= 0
        word = self.word.clamp(min=0)
        piece_attach = torch.where(is_piece, attach.gather(1, word), torch.full_like(word, NO_INDEX))  # (B, j)
        piece_head = torch.where(is_piece, head_of.gather(1, word), torch.full_like(word, NO_INDEX))
        # h -> d: target j (a piece of an attached word d), source k (a piece of d's head)
        word_edge = (self.word.unsqueeze(1) == piece_head.unsqueeze(2)) & (piece_attach >= 0).unsqueeze(2)
        steps = torch.where(word_edge, piece_attach.unsqueeze(2).expand_as(none), none)
        # x -> d: target j, source the arc token that attached j's word
        from_arc = positions.unsqueeze(1) == piece_attach.unsqueeze(2)
        steps = torch.where(from_arc, piece_attach.unsqueeze(2).expand_as(none), steps)
        # h -> x: target the arc token s, source k (a piece of s's head word)
        to_arc = (self.word.unsqueeze(1) == self.head.unsqueeze(2)) & is_arc.unsqueeze(2)
        return torch.where(to_arc, positions.unsqueeze(2).expand_as(none), steps)
