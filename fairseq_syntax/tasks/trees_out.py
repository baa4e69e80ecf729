"""The trees of generated hypotheses, for the `syntax_translation` task: read from a hypothesis's transitions (a
data-bin whose target has transitions, --target-transitions; also the hub's trees=True) or from the graph its
decoder generated with it (a decoder that predicts_graph: Dyn-STGCD). With --trees-out, the tree of every
hypothesis a generation makes (the --nbest best of each sentence) is kept by (sentence id, rank) and the file is
rewritten whole after every batch, as CoNLL-U ordered by them (data/conllu_output.py): `# sent_id` is the id of
the H- lines of fairseq-generate or fairseq-interactive, `ID.RANK` below the best."""
import logging
import os
from collections import deque
from functools import cached_property
from typing import Dict, List, Optional, Tuple

import torch

from fairseq import utils

from ..data.channels import SyntaxManifest
from ..data.conllu_output import ARGMAX_HEADS, format_conllu_sentence
from ..data.segmentation import Segmenter, open_segmenter
from ..data.transitions.channels import word_rule
from ..data.transitions.errors import TransitionError
from ..data.transitions.output import Tree, to_conllu, transitions_to_tree
from ..models.decoders import contract_of

logger = logging.getLogger(__name__)


def graph_model(models):
    """The first model whose decoder generates a graph with its translation (Dyn-STGCD), or None."""
    return next((m for m in models if contract_of(getattr(m, "decoder", None)).predicts_graph), None)


def sentence_name(sentence_id: int, rank: int) -> str:
    """`# sent_id` of a hypothesis: the sentence's id for the best, `ID.RANK` for the others."""
    return str(sentence_id) if rank == 0 else f"{sentence_id}.{rank}"


class GeneratedTrees:
    """The trees of a task's hypotheses. `path`: --trees-out (None: none written; the hub's trees are read all the
    same); `data`: the data-bin (--data), named in errors; `transition_classes`: the class of every target symbol
    of a data-bin whose target has transitions, None for any other (only a graph decoder has trees there)."""

    def __init__(self, path: Optional[str], data: str, manifest: Optional[SyntaxManifest], target_dictionary,
                 transition_classes: Optional[torch.Tensor]):
        self.path = path
        self.data = data
        self.manifest = manifest
        self.target_dictionary = target_dictionary
        self.transition_classes = transition_classes
        self.word_rule = word_rule(manifest.word_level) if transition_classes is not None else None
        self.nbest = 1  # fairseq's --nbest: the hypotheses of a sentence that have their tree written
        self.trees: Dict[Tuple[int, int], str] = {}  # (sentence id, rank) -> its CoNLL-U sentence
        # fairseq-interactive: the input lines of the batches made, in order (InferenceDataset's batch_log)
        self.interactive_batches: Optional[deque] = None

    def prepare(self, models, args) -> None:
        """At the task's build_generator: the number of hypotheses of each sentence to write, and --trees-out
        refused where no model has trees to write."""
        self.nbest = max(1, int(getattr(args, "nbest", 1) or 1))
        if self.path and self.transition_classes is None and not graph_model(models):
            raise ValueError(f"--trees-out: the target side of {self.data} has no transitions (make the data-bin "
                             f"with fairseq-syntax-preprocess --target-parser SPEC --target-transitions), and the "
                             f"model's decoder generates no graph of its own (--decoder-type dyn_stgcd does)")

    def log_interactive_batches(self) -> None:
        """fairseq-interactive (the task's get_interactive_tokens_and_lengths) hands the task the batches it makes
        without their sentence ids: with --trees-out, the datasets made for it log theirs here."""
        if self.path and self.interactive_batches is None:
            self.interactive_batches = deque()

    def add(self, models, sample, hypos) -> None:
        """Adds the trees of a translated batch's hypotheses and rewrites --trees-out."""
        src_tokens = sample["net_input"]["src_tokens"]
        ids = sample["id"].tolist() if "id" in sample else self._input_lines_of(src_tokens)
        if self.transition_classes is None:
            self._add_graph_trees(graph_model(models), sample, ids, hypos)
        else:
            self._add_transition_trees(ids, hypos)
        with open(self.path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(self.trees[key] for key in sorted(self.trees))
        os.replace(self.path + ".tmp", self.path)

    # ---- a data-bin whose target has transitions ------------------------------------------------------------------

    def conllu(self, token_ids: torch.Tensor, sent_id: Optional[str] = None) -> str:
        """The CoNLL-U of a generated transition sequence; raises ValueError on a data-bin without target
        transitions, transitions.TransitionError on an incomplete tree."""
        return to_conllu(self._transition_tokens(token_ids), sent_id=sent_id, word_initial=self.word_rule,
                         root_label=self.manifest.target_root_label)

    def tree(self, token_ids: torch.Tensor, sent_id: Optional[str] = None) -> Tuple[Tree, str]:
        """(transitions.Tree: words, 1-based heads, labels; its CoNLL-U) of a generated transition sequence;
        errors as conllu."""
        tree = transitions_to_tree(self._transition_tokens(token_ids), word_initial=self.word_rule,
                                   root_label=self.manifest.target_root_label)
        return tree, self.conllu(token_ids, sent_id)

    def _transition_tokens(self, token_ids: torch.Tensor) -> List[str]:
        if self.transition_classes is None:
            raise ValueError(f"trees: the target side of {self.data} has no transitions (make the data-bin with "
                             "fairseq-syntax-preprocess --target-parser SPEC --target-transitions)")
        return [self.target_dictionary.symbols[i] for i in token_ids.tolist()]

    def _add_transition_trees(self, ids: List[int], hypos) -> None:
        for sentence_id, sentence_hypos in zip(ids, hypos):
            for rank, hypo in enumerate(sentence_hypos[:self.nbest]):
                name = sentence_name(sentence_id, rank)
                try:
                    self.trees[(sentence_id, rank)] = self.conllu(hypo["tokens"], name)
                except TransitionError as error:  # cannot happen with the masked generator; reported, not hidden
                    logger.warning("--trees-out: hypothesis %s is not a complete tree (%s); left out", name, error)

    # ---- a decoder that generates its graph (Dyn-STGCD) -----------------------------------------------------------

    @cached_property
    def segmenter(self) -> Segmenter:
        return open_segmenter(utils.split_paths(self.data)[0], self.manifest)

    def _add_graph_trees(self, model, sample, ids: List[int], hypos) -> None:
        """The trees of a graph-generating decoder's hypotheses (the --nbest best of each sentence): each one
        scored again whole, which gives the graph of its last step (incremental generation equals full scoring)."""
        chosen = [(row, sentence_id, rank, hypo["tokens"]) for row, (sentence_id, sentence_hypos)
                  in enumerate(zip(ids, hypos)) for rank, hypo in enumerate(sentence_hypos[:self.nbest])]
        if not chosen:
            return
        rows = torch.tensor([row for row, *_ in chosen], device=sample["net_input"]["src_tokens"].device)
        source = {name: value.index_select(0, rows) for name, value in sample["net_input"].items()
                  if name != "prev_output_tokens" and torch.is_tensor(value)}
        hypotheses = [tokens for *_, tokens in chosen]
        # (called after fairseq's generator has left its no_grad: no graph is kept for a backward that never comes)
        with torch.no_grad():
            encoder_out = model.encoder(**source)
            trees = model.decoder.hypothesis_trees(encoder_out, hypotheses)
            # each word's highest-scoring head, before the tree decoding: kept beside the tree as a comment, so
            # that the evaluator reports the raw argmax's UAS with the tree's (evaluation/trees.py, ARGMAX_HEADS)
            argmax = model.decoder.hypothesis_trees(encoder_out, hypotheses, tree=False)
        for (_, sentence_id, rank, _), (word_pieces, heads), (_, argmax_heads) in zip(chosen, trees, argmax):
            # every word of the graph is written (the heads point at them), as the segmenter spells it: one with
            # nothing visible as `_`, control characters left out (format_conllu_sentence)
            words = [self.segmenter.decode(pieces) for pieces in word_pieces]
            # the decoder predicts arcs only: DEPREL `_` (CoNLL-U's "not given"), so the evaluator reports no LAS
            self.trees[(sentence_id, rank)] = format_conllu_sentence(
                words, [""] + [" "] * (len(words) - 1), heads, ["_"] * len(words),
                sent_id=sentence_name(sentence_id, rank),
                comments=[(ARGMAX_HEADS, " ".join(str(head) for head in argmax_heads))])

    # ---- fairseq-interactive ------------------------------------------------------------------------------------

    def _input_lines_of(self, src_tokens: torch.Tensor) -> List[int]:
        """The input line numbers (fairseq-interactive's sentence ids) of a batch that came without ids: the batches
        are made and translated in the same order, so the first one logged with these tokens is it."""
        tokens = src_tokens.cpu()
        while self.interactive_batches:
            lines, logged = self.interactive_batches.popleft()
            if logged.shape == tokens.shape and torch.equal(logged, tokens):
                return lines
        raise RuntimeError("--trees-out: a batch without sentence ids that was not made by fairseq-interactive's "
                           "dataset (build_dataset_for_inference); cannot tell which sentences it holds")
