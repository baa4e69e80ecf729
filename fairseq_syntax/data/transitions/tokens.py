"""The tokens of Choshen & Abend's transition system ("Enhancing the Transformer Decoder with Transition-based
Syntax", §3 and appendix B "Transitions"): the arc tokens and the attached-word mark, the word-boundary rule, the
class of every token (and of every vocabulary symbol, for the batched function's masks), and the vocabulary a
transition data-bin adds. The rest of the system: projectivity.py (tree checks, Lift), oracle.py (the
oracle), state.py (f, the validity function and the graph of a prefix in plain Python),
output.py (a finished sequence as a tree, text, CoNLL-U), function.py (f batched, on device),
errors.py (the system's errors).

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
word whose first piece it has only without the mark ("\u2581" "\u00c4" ...); so does "\u2581" followed by
characters with nothing visible (a vocabulary normalised otherwise may hold "\u2581\u200b"). It is in the same
class as the mark (WORD_MARK_ONLY: it begins a word, and a continuation piece must follow), so no generated word,
and no translation, is empty; a parsed word that segments to such pieces alone has no text and is refused by the
oracle's writer (`mark_attached_words`).
Pieces with no visible character. A continuation piece may spell nothing visible either: sentencepiece's
byte-fallback pieces of control and whitespace characters (<0x09> a tab, <0x00>, <0x7F>), which an undertrained
model samples as often as any piece, and pieces of format characters (Unicode Cf: U+200B, U+00AD), of whitespace
other than ASCII's or of combining marks alone (text_normalization.is_visible). Such a piece (class
WORD_CONTINUE_NO_TEXT) continues the word like any continuation, but does not give it text: after a mark or a lone
"\u2581" its word still waits for a piece with text. So it is part of the previous word after that word's text,
and where a word starts it may only come before the word's text; it never makes a word of its own. It is not
masked where a word starts: the codec writes whitespace before a word into the word ("\u2581" "<0x09>" "W" ...: a
tab, then "Wasserfont\u00e4ne", in Multi30k's German), and such targets must stay valid. A byte from 0x80 up
counts as text: it is part of a character outside the vocabulary, the rest of it in the next pieces, which one
piece cannot see (a word of such bytes that spell nothing visible, <0xE2> <0x80> <0x8B> a zero width space, is
written `_` in CoNLL-U: data/conllu_output.py).
"""
import re
from typing import Callable, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ..text_normalization import has_visible_text
from .errors import InvalidTreeError

WORD_MARK = "\u2581"
ATTACHED_MARK = "<attached>"  # begins a word written without a space before it (module doc, "Attached words")
LEFT_ARC_PREFIX = "LEFT-ARC:"
RIGHT_ARC_PREFIX = "RIGHT-ARC:"
EOS_SYMBOL = "</s>"  # fairseq's end of sentence; a transition sequence itself never contains it
ROOT_LABEL = "root"  # UD's label of the root word (its edge is deleted from the transitions)
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "<unk>")  # never valid as a generated token (`vocabulary_classes`)

# token classes (shared by the Python validity function and the batched one, function.py)
WORD_START, WORD_CONTINUE, LEFT_ARC, RIGHT_ARC, EOS, OTHER, WORD_MARK_ONLY, WORD_CONTINUE_NO_TEXT = range(8)
NUM_CLASSES = 8
CLASS_NAMES = ("word-initial piece", "continuation piece", "LEFT-ARC", "RIGHT-ARC", "EOS", "other",
               "word mark with no text (attached-word mark or a lone \u2581)",
               "continuation piece with no visible character")
WORD_BEGINNINGS = (WORD_START, WORD_MARK_ONLY)  # the classes that push a word
WORD_CONTINUATIONS = (WORD_CONTINUE, WORD_CONTINUE_NO_TEXT)  # the classes that grow the open word

_WHITESPACE = re.compile(r"\s")
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # sentencepiece's byte fallback: the piece of byte 0xNN
_FAIRSEQ_PADDING = re.compile(r"madeupword\d+")  # symbols fairseq adds to pad a dictionary's size
_ARC_PREFIXES = (LEFT_ARC_PREFIX, RIGHT_ARC_PREFIX)

# ---- tokens ---------------------------------------------------------------------------------------------------

def left_arc(label: str) -> str:
    return LEFT_ARC_PREFIX + _checked_label(label)


def right_arc(label: str) -> str:
    return RIGHT_ARC_PREFIX + _checked_label(label)


def label_problem(label) -> Optional[str]:
    if not isinstance(label, str) or not label or _WHITESPACE.search(label):
        return f"dependency label {label!r} cannot be part of a transition token (empty or with whitespace)"
    return None


def _checked_label(label: str) -> str:
    problem = label_problem(label)
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


def spells_visible_text(piece: str) -> bool:
    """Whether a piece decodes to some visible character (module doc, "Pieces with no visible character";
    text_normalization.is_visible): U+2581 is a space, a byte-fallback piece of an ASCII byte is that character, one
    of a byte from 0x80 up counts as text."""
    byte = BYTE_PIECE.fullmatch(piece)
    if byte is not None:
        value = int(byte.group(1), 16)
        if value >= 0x80:
            return True
        piece = chr(value)
    return has_visible_text(piece.replace(WORD_MARK, ""))


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
        return WORD_CONTINUE if spells_visible_text(token) else WORD_CONTINUE_NO_TEXT
    # module doc, "Empty words": "\u2581" and nothing visible after it (a word vocabulary's tokens have no "\u2581")
    return WORD_MARK_ONLY if token.startswith(WORD_MARK) and not spells_visible_text(token) else WORD_START


def mark_attached_words(pieces: Sequence[str], word_ids: Sequence[int],
                        word_initial: WordRule = starts_with_word_mark) -> Tuple[List[str], List[int]]:
    """The pieces (and their 0-based word ids) with ATTACHED_MARK before the first piece of every word that the
    word-boundary rule would not read as a new word, so that the rule reads exactly the given words. Extra spaces
    before a word (a run of spaces: sentencepiece writes "\u2581" pieces, then "\u2581word") are left out, so the
    word's own piece begins it: a run of spaces becomes one. Raises InvalidTreeError where no mark can help: a
    piece inside a word that the rule reads as a new word (a word with a space in it), or a word whose pieces
    spell nothing visible (only "\u2581", or control and whitespace bytes: module doc, "Empty words")."""
    marked, marked_ids, previous, start = [], [], None, 0

    def require_text(word):
        if not any(p != ATTACHED_MARK and spells_visible_text(p) for p in marked[start:]):
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


def strip_transitions(tokens: Sequence[str]) -> List[str]:
    """The pieces of a transition sequence (arc tokens, attached-word marks and EOS removed)."""
    return [token for token in tokens if token != EOS_SYMBOL and token != ATTACHED_MARK and not is_arc(token)]


def is_transition_token(token: str) -> bool:
    """An arc token or an attached-word mark: a token of a transition sequence that is not a piece of the text."""
    return token == ATTACHED_MARK or is_arc(token)


# ---- the vocabulary's classes for the batched function (function.py) ------------------------------

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
