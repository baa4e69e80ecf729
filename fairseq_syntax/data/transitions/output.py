"""A finished transition sequence read out: its text (sentencepiece pieces decoded), its tree, and CoNLL-U."""
from typing import List, NamedTuple, Optional, Sequence, Tuple

from ..conllu_output import format_conllu_sentence
from .errors import InvalidTransitionError
from .state import TransitionState, parse_transitions
from .tokens import (
    ATTACHED_MARK, BYTE_PIECE, ROOT_LABEL, WORD_MARK, WordRule, starts_with_word_mark, strip_transitions,
)


def _decode(pieces: Sequence[str]) -> str:
    pieces = [piece for piece in pieces if piece != ATTACHED_MARK]  # the mark spells nothing
    joined = "".join(pieces)
    if "<0x" not in joined:  # no byte piece
        return joined.replace(WORD_MARK, " ")
    out: List[str] = []
    pending = bytearray()
    for piece in pieces:
        byte = BYTE_PIECE.fullmatch(piece) if piece.startswith("<0x") else None
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


def to_conllu(tokens: Sequence[str], word_ids: Optional[Sequence[int]] = None, root_label: str = ROOT_LABEL,
              sent_id: Optional[str] = None, word_initial: WordRule = starts_with_word_mark) -> str:
    """A finished transition sequence as one CoNLL-U sentence (ID, FORM, HEAD, DEPREL filled, SpaceAfter=No in
    MISC where the next word has no whitespace before it, `# text` from the pieces), ending with a blank line.
    No control character is written, and no word with nothing visible (conllu_output.py: the last line of defence,
    a sampled piece after a word's text may spell a control character, and byte pieces a character with nothing
    to see)."""
    state = _finished_state(tokens, word_ids, word_initial)
    words, spaces = _word_texts(state)
    labels = list(state.labels)
    labels[state.stack[0]] = root_label
    return format_conllu_sentence(words, spaces, state.heads, labels, sent_id=sent_id,
                                  text=sequence_text(state.tokens))
