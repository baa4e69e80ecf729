"""--target-transitions: the target tokens become the transition sequence of the target tree (pairs whose tree
is not projective are dropped, or the tree lifted with --projectivize), and the root label decoding gives."""
from collections import Counter

from fairseq_syntax.data.transitions.channels import transition_sequence, word_rule
from fairseq_syntax.data.transitions.projectivity import crossing_arcs, projectivize
from fairseq_syntax.data.subword import NO_WORD
from fairseq_syntax.data.transitions.errors import InvalidTreeError
from fairseq_syntax.data.transitions.tokens import ATTACHED_MARK, ROOT_LABEL
from .reading import SplitData


class TargetTransitions:
    """Preprocessor's target transitions (preprocessor.py); uses its args and langs."""

    def target_root_label(self, datas) -> str:
        """The label the target parser gives the root word (UD "root", spaCy's English "ROOT"): the transitions
        delete the root edge, so decoding labels the last word left with it. The most frequent root label of the
        target trees (--add-to: the data-bin's)."""
        given = getattr(self.args, "target_root_label", None)
        if given:
            return given
        tgt = self.langs[1]
        counts = Counter(tree.labels[list(tree.heads).index(0)] for data in datas for tree in data.trees[tgt]
                         if 0 in tree.heads)
        return counts.most_common(1)[0][0] if counts else ROOT_LABEL

    def transition_split(self, data: SplitData, pieces, word_ids):
        """--target-transitions: the target's pieces become the oracle's transition sequence (and its word ids
        NO_WORD on arcs); a pair whose target tree is not projective is dropped with that reason (or its tree lifted,
        --projectivize), and one whose words decoding could not read (a word with a space inside) too."""
        tgt = self.langs[1]
        rule = word_rule(self.args.word_vocabulary)
        tokens, ids, keep = [], [], []
        for position, (tree, sentence, words) in enumerate(zip(data.trees[tgt], pieces[tgt], word_ids[tgt])):
            heads = list(tree.heads)
            crossing = crossing_arcs(heads)
            if crossing is not None and self.args.projectivize:
                heads, lifted = projectivize(heads)
                data.projectivized += 1
                data.lifted_words += lifted
            elif crossing is not None:
                (h1, d1), (h2, d2) = crossing
                data.drops.append((data.line_numbers[position], tgt, f"non-projective target tree (arc {h1}->{d1} "
                                   f"crosses arc {h2}->{d2}; see --projectivize)", data.texts[tgt][position]))
                data.non_projective += 1
                continue
            try:
                sequence, sequence_ids = transition_sequence(heads, tree.labels, sentence, words, rule)
            except InvalidTreeError as error:
                data.drops.append((data.line_numbers[position], tgt, f"target transitions: {error}",
                                   data.texts[tgt][position]))
                data.unreadable_words += 1
                continue
            keep.append(position)
            tokens.append(sequence)
            ids.append(sequence_ids)
            data.attached_words += sequence.count(ATTACHED_MARK)
            data.collapsed_spaces += (len(sentence) - sum(1 for w in sequence_ids if w != NO_WORD) +
                                      sequence.count(ATTACHED_MARK))
        data.select(keep)
        pieces = {lang: tokens if lang == tgt else [pieces[lang][p] for p in keep] for lang in pieces}
        word_ids = {lang: ids if lang == tgt else [word_ids[lang][p] for p in keep] for lang in word_ids}
        return pieces, word_ids
