"""The multi-task baseline of Currey & Heafield (2019) as a data-bin: a stock transformer learns to translate and
to parse the source (`fairseq-syntax-preprocess ... --source-parser P --multitask-parse`).

Pairs
-----
Every kept training pair is written twice:

    <translate> + source pieces + <translate>  ->  target pieces
    <parse>     + source pieces + <parse>      ->  linearize(source tree)

train.{src}-{tgt}.* holds the N translation pairs first, then the N parse pairs of the same lines in the same
order (pair i and pair N + i come from line `train.linemap[i]`). The order in the file does not matter: fairseq's
LanguagePairDataset draws a fresh random permutation every epoch before it sorts by length and batches, and shuffles
the batches, so both tasks are mixed in every part of an epoch and inside batches of similar lengths. valid, test and
every other split hold translation pairs only (with the translate tags), so `fairseq-generate` translates them and
BLEU is computed on `{split}.{tgt}.txt` as usual. The data-bin carries no side channels (the tags would put them
out of step with the tokens): any model that takes plain batches trains on it, e.g. the presets
`transformer_multitask*` (fairseq_syntax/models/presets/multitask.py) with `--task syntax_translation`.

Linearization
-------------
A dependency tree over the sentence's subword pieces becomes one bracketed token sequence in which the words
appear once each, in sentence order, with their pieces. Walking the words left to right, the brackets open
before word w are exactly w's subtree and those of its ancestors (outermost first):

* `<(LABEL>` opens the subtree of a word whose dependency label is LABEL (one token per label of the source
  label set; the root's label included, e.g. `<(ROOT>` for spaCy),
* `<)>` closes the innermost open subtree,
* between two words, the subtrees of the previous word's chain that are not on the next word's chain are
  closed (innermost first) and the missing ones opened (outermost first); then come the word's own pieces.

For a projective tree this is the textbook bracketing: each subtree = `<(LABEL>` + its left dependents' subtrees
+ the head word's pieces + its right dependents' subtrees + `<)>`. E.g. spaCy's tree of "A dog barks." (pieces
▁A | ▁dog | ▁bark s | ▁.; A <-det- dog <-nsubj- barks -punct-> .):

    <(ROOT> <(nsubj> <(det> ▁A <)> ▁dog <)> ▁bark s <(punct> ▁. <)> <)>

A non-projective tree has a subtree whose words are not contiguous: its bracket is closed when a word outside it
comes and opened again at its next word. Reopening names which subtree comes back: `<^>` x k then `<(^>` reopens
the (k+1)-th child (in the order their brackets were first opened) of the innermost open subtree. E.g. "great
knowledge and prices compared to anyone in the industry." (EWT dev; "compared" depends on "great" across
"knowledge and prices"):

    <(root> <(amod> ▁great <)> ▁knowledge <(conj> <(cc> ▁and <)> ▁prices <)> <(^> <(advcl> ▁compared
        <(obl> <(case> ▁to <)> ▁anyone <(nmod> <(case> ▁in <)> <(det> ▁the <)> ▁industry <)> <)> <)> <)>
        <(punct> ▁. <)> <)>

(`<(^>` with no `<^>` reopens the first child of "knowledge", the subtree of "great"). `delinearize`
rebuilds the words' pieces, heads and labels, and accepts only sequences that `linearize` produces (it
linearizes its result again and compares), so a linearization is a strict, invertible code of the tree.

Dictionary
----------
Both dictionaries are the sentencepiece vocabulary (as for every data-bin) followed by, in this order:
`<translate>`, `<parse>`, `<)>`, `<(^>`, `<^>`, then `<(LABEL>` for every label of the source label dictionary
in its id order (`dict.{src}.labels.txt`), then fairseq's padding to a multiple of 8. They are identical, so
`--share-all-embeddings` works. `multitask.json` beside `syntax.json` records the tags, the structure and label
tokens, these appended symbols, and the number of translation and parse pairs of every split.
"""
import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from .trees import tree_problem

TRANSLATE_TAG = "<translate>"
PARSE_TAG = "<parse>"
CLOSE = "<)>"
REOPEN = "<(^>"
SKIP = "<^>"
MULTITASK_NAME = "multitask.json"
FORMAT = 1

_LABEL_TOKEN = re.compile(r"^<\((.+)>$", re.S)


class LinearizationError(ValueError):
    """A tree that cannot be linearized, or a token sequence that is not a linearization."""


def label_token(label: str) -> str:
    if not label or any(c.isspace() for c in label) or label == "^":
        raise LinearizationError(f"dependency label {label!r} cannot be a token (empty, whitespace or '^')")
    return f"<({label}>"


def is_structure_token(token: str) -> bool:
    """Tokens that belong to the linearization (never a subword piece of a data-bin: the dictionary checks)."""
    return token in (CLOSE, REOPEN, SKIP) or _LABEL_TOKEN.match(token) is not None


def extra_symbols(labels: Sequence[str]) -> List[str]:
    """What a multi-task data-bin appends to the sentencepiece vocabulary, in this order."""
    return [TRANSLATE_TAG, PARSE_TAG, CLOSE, REOPEN, SKIP] + [label_token(label) for label in labels]


def _check_tree(words: Sequence[Sequence[str]], heads: Sequence[int], labels: Sequence[str]) -> None:
    n = len(words)
    if n == 0 or len(heads) != n or len(labels) != n:
        raise LinearizationError(f"{n} words, {len(heads)} heads, {len(labels)} labels")
    for w, pieces in enumerate(words):
        if not pieces:
            raise LinearizationError(f"word {w} has no pieces")
        for piece in pieces:
            if is_structure_token(piece) or not piece or any(c.isspace() for c in piece):
                raise LinearizationError(f"word {w}: piece {piece!r} is empty, has whitespace or is a structure "
                                         f"token")
    problem = tree_problem(heads)
    if problem is not None:
        raise LinearizationError(f"heads {list(heads)}: {problem}")


def linearize(words: Sequence[Sequence[str]], heads: Sequence[int], labels: Sequence[str]) -> List[str]:
    """The bracketed token sequence of a dependency tree (see the module docstring).

    words: the pieces of each word, in sentence order; heads: 1-based head word per word, 0 for the root;
    labels: the dependency label of each word."""
    _check_tree(words, heads, labels)
    n = len(words)
    parent = [h - 1 for h in heads]  # -1: the root's parent (the top level)

    def chain(w: int) -> List[int]:
        path = [w]
        while parent[path[-1]] >= 0:
            path.append(parent[path[-1]])
        return path[::-1]

    tokens: List[str] = []
    open_nodes: List[int] = []
    children_opened: Dict[int, List[int]] = {}  # node (-1: top level) -> children in order of first opening
    for w in range(n):
        target = chain(w)
        keep = 0
        while keep < min(len(open_nodes), len(target)) and open_nodes[keep] == target[keep]:
            keep += 1
        tokens.extend([CLOSE] * (len(open_nodes) - keep))
        del open_nodes[keep:]
        for node in target[keep:]:
            siblings = children_opened.setdefault(open_nodes[-1] if open_nodes else -1, [])
            if node in siblings:  # its subtree is discontinuous (non-projective): open it again
                tokens.extend([SKIP] * siblings.index(node) + [REOPEN])
            else:
                tokens.append(label_token(labels[node]))
                siblings.append(node)
            open_nodes.append(node)
        tokens.extend(words[w])
    tokens.extend([CLOSE] * len(open_nodes))
    return tokens


def delinearize(tokens: Sequence[str]) -> Tuple[List[List[str]], List[int], List[str]]:
    """(pieces of each word, 1-based heads with 0 for the root, labels): the tree `linearize` wrote. Raises
    LinearizationError for any sequence that `linearize` does not produce."""
    node_label: List[str] = []
    node_parent: List[int] = []
    node_children: List[List[int]] = []
    node_word: List[Optional[int]] = []
    words: List[List[str]] = []
    word_node: List[int] = []
    stack: List[int] = []
    skips = 0
    previous_was_piece = False
    for position, token in enumerate(tokens):
        where = f"token {position} ({token!r})"
        if skips and token not in (SKIP, REOPEN):
            raise LinearizationError(f"{where}: {SKIP} must be followed by {SKIP} or {REOPEN}")
        is_piece = False
        if token == CLOSE:
            if not stack:
                raise LinearizationError(f"{where}: closes nothing")
            stack.pop()
        elif token == SKIP:
            skips += 1
        elif token == REOPEN:
            if not stack:
                raise LinearizationError(f"{where}: reopens at the top level")
            siblings = node_children[stack[-1]]
            if skips >= len(siblings) or siblings[skips] in stack:
                raise LinearizationError(f"{where}: no closed child number {skips + 1} to reopen")
            stack.append(siblings[skips])
            skips = 0
        elif _LABEL_TOKEN.match(token):
            if not stack and node_label:
                raise LinearizationError(f"{where}: a second tree at the top level")
            node = len(node_label)
            node_label.append(_LABEL_TOKEN.match(token).group(1))
            node_parent.append(stack[-1] if stack else -1)
            node_children.append([])
            node_word.append(None)
            if stack:
                node_children[stack[-1]].append(node)
            stack.append(node)
        else:
            is_piece = True
            if not stack:
                raise LinearizationError(f"{where}: a piece outside every bracket")
            if previous_was_piece:
                words[-1].append(token)
            else:
                if node_word[stack[-1]] is not None:
                    raise LinearizationError(f"{where}: the word of this subtree was already given")
                node_word[stack[-1]] = len(words)
                words.append([token])
                word_node.append(stack[-1])
        previous_was_piece = is_piece
    if stack or skips:
        raise LinearizationError(f"{len(stack)} brackets left open at the end")
    if not words or any(w is None for w in node_word):
        raise LinearizationError("a subtree has no word of its own")
    heads = [0 if node_parent[node] < 0 else node_word[node_parent[node]] + 1 for node in word_node]
    labels = [node_label[node] for node in word_node]
    try:
        canonical = linearize(words, heads, labels)
    except LinearizationError as error:
        raise LinearizationError(f"not a linearization: {error}") from None
    if canonical != list(tokens):
        raise LinearizationError("not the canonical linearization of the tree it describes")
    return words, heads, labels


def group_pieces(pieces: Sequence[str], word_ids: Sequence[int]) -> List[List[str]]:
    """The pieces of each word, from a sentence's pieces and the word each belongs to (the word_ids channel)."""
    words: List[List[str]] = []
    for piece, word in zip(pieces, word_ids):
        if word == len(words):
            words.append([])
        elif word != len(words) - 1:
            raise LinearizationError(f"word ids {list(word_ids)} are not 0, 1, ... in order")
        words[word].append(piece)
    return words


def make_pairs(with_parse: bool, source_pieces, target_pieces, source_word_ids, source_trees):
    """Source and target token sequences of a split: the translation pairs (tagged), then, when with_parse, the
    parse pairs of the same sentences. Returns (sources, targets, {"translate": n, "parse": m})."""
    sources = [[TRANSLATE_TAG, *pieces, TRANSLATE_TAG] for pieces in source_pieces]
    targets = [list(pieces) for pieces in target_pieces]
    parses = 0
    if with_parse:
        for pieces, word_ids, tree in zip(source_pieces, source_word_ids, source_trees):
            sources.append([PARSE_TAG, *pieces, PARSE_TAG])
            targets.append(linearize(group_pieces(pieces, word_ids), tree.heads, tree.labels))
            parses += 1
    return sources, targets, {"translate": len(source_pieces), "parse": parses}


def load_info(data_bin: str) -> Optional[dict]:
    path = os.path.join(data_bin, MULTITASK_NAME)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        info = json.load(f)
    if info.get("format") != FORMAT:
        raise SystemExit(f"{path}: multi-task format {info.get('format')}, this code reads {FORMAT}")
    return info


def new_info(source_lang: str, target_lang: str, labels: Sequence[str]) -> dict:
    return {
        "format": FORMAT,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "translate_tag": TRANSLATE_TAG,
        "parse_tag": PARSE_TAG,
        "close_token": CLOSE,
        "reopen_token": REOPEN,
        "skip_token": SKIP,
        "label_tokens": {label: label_token(label) for label in labels},
        "dictionary_symbols": extra_symbols(labels),
        "train_order": "the translation pairs of train.linemap's lines, then their parse pairs in the same order "
                       "(fairseq shuffles every epoch, so the order in the file does not matter)",
        "pairs": {},
    }


def save_info(data_bin: str, info: dict) -> None:
    with open(os.path.join(data_bin, MULTITASK_NAME), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, ensure_ascii=False)
