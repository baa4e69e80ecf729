"""CoNLL-U sentences as the project writes them: the generated trees (--trees-out of a data-bin whose target has
transitions or of a graph decoder, the hub's trees) and parses of words (fairseq-syntax-evaluate parse-trees, the
parser evaluation of preprocessing). A model may generate any character, and CoNLL-U is read by its tabs and
newlines: no field or comment carries a control character or a line break, and a word with nothing visible is
written `_`, CoNLL-U's "not given"."""
import logging
import unicodedata
from typing import Optional, Sequence, Tuple, Union

from .text_normalization import has_visible_text

logger = logging.getLogger(__name__)

# the comment a graph decoder's --trees-out gives each sentence with its raw heads (each word's argmax, before the
# maximum-spanning-tree decoding), scored beside the tree as `argmax_uas` (evaluation/trees.py)
ARGMAX_HEADS = "argmax_heads"

_LINE_SEPARATORS = ("Zl", "Zp")  # Unicode's line and paragraph separators: str.splitlines breaks lines at them


def without_control_characters(text: str) -> str:
    """`text` with no control character (Unicode Cc) and no line or paragraph separator (Zl, Zp): a tab or a
    newline would break CoNLL-U's columns and lines, and a sampled byte piece may spell any other (<0x00>, <0x7F>,
    U+0085). Whitespace ones, and the separators, become a space (they still separate what they stand between); the
    others are left out."""
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if category in _LINE_SEPARATORS or (category == "Cc" and char.isspace()):
            kept.append(" ")
        elif category != "Cc":
            kept.append(char)
    return "".join(kept)


def conllu_field(text: str) -> str:
    """A field (FORM, DEPREL, the sent_id): without control characters (without_control_characters) and whitespace
    at its ends, and `_` where nothing visible is left: an empty word, or one of characters with nothing to see (a
    zero width space, a soft hyphen, a lone combining mark), which sampled byte pieces may spell."""
    text = without_control_characters(text).strip()
    return text if has_visible_text(text) else "_"


def format_conllu_sentence(words: Sequence[str], spaces_before: Sequence[str], heads: Sequence[int],
                           labels: Sequence[str], sent_id: Optional[Union[str, int]] = None,
                           text: Optional[str] = None, comments: Sequence[Tuple[str, str]] = ()) -> str:
    """One CoNLL-U sentence (ID, FORM, HEAD, DEPREL; SpaceAfter=No in MISC where the next word has no whitespace
    before it), ending with a blank line: `# sent_id` where given, `# text` (by default the words as written, each
    after its whitespace), then `comments` as further `# key = value` lines. Every field goes through conllu_field,
    the text and comments through without_control_characters; control characters left out are logged."""
    def spoken(tokens: Sequence[str]) -> str:  # the tokens, each after its whitespace
        return "".join(space + token for space, token in zip(spaces_before, tokens))

    forms = [conllu_field(word) for word in words]
    written_text = spoken(forms) if text is None else text
    if any(without_control_characters(raw) != raw for raw in (written_text, *words)):
        logger.warning("CoNLL-U sentence %s: control characters left out of its words and text (whitespace ones "
                       "as a space): %r", sent_id, spoken(words) if text is None else text)
    lines = [] if sent_id is None else [f"# sent_id = {conllu_field(str(sent_id))}"]
    lines.append("# text = " + without_control_characters(written_text))
    lines.extend(f"# {key} = {without_control_characters(value)}" for key, value in comments)
    for index, (form, head, label) in enumerate(zip(forms, heads, labels)):
        misc = "SpaceAfter=No" if index + 1 < len(forms) and not spaces_before[index + 1] else "_"
        lines.append("\t".join([str(index + 1), form, "_", "_", "_", "_", str(head), conllu_field(label or ""),
                                "_", misc]))  # (a label None: not given)
    return "\n".join(lines) + "\n\n"
