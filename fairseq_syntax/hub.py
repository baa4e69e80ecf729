"""Translate raw text from Python with a checkpoint and the data-bin it was trained on:

    from fairseq_syntax.hub import from_pretrained
    translator = from_pretrained("checkpoints/checkpoint_best.pt", "data-bin", beam=5)
    translator.translate("A dog runs across the field.")        # -> str
    translator.translate(["Two men talk.", "A girl reads."])      # -> list of str
    translator.translate("A dog runs.", trees=True)   # a --target-transitions model: TreeTranslation (text, words,
                                                      # heads, labels, conllu)

Sentences are normalised, parsed with the data-bin's parser when the model reads source syntax, segmented with its
sentencepiece model and translated with fairseq's beam search (the same path as fairseq-interactive; see
tasks/raw_text.py). A sentence that cannot be translated raises ValueError naming it.
"""
from typing import List, NamedTuple, Optional, Union

from fairseq import checkpoint_utils, utils
from fairseq.hub_utils import GeneratorHubInterface


class TreeTranslation(NamedTuple):
    """The best translation of a model that generates target trees (a --target-transitions data-bin): its text,
    its words, their 1-based heads (0: the root) and labels, and the tree as one CoNLL-U sentence."""
    text: str
    words: List[str]
    heads: List[int]
    labels: List[str]
    conllu: str


class SyntaxHubInterface(GeneratorHubInterface):
    """fairseq's hub interface, with raw sentences encoded (and parsed) by the syntax_translation task."""

    def encode(self, sentence: str):
        return self._encode_all([sentence])[0]

    def decode(self, tokens) -> str:
        return self.task.build_bpe(self.cfg.bpe).decode(self.tgt_dict.string(tokens))

    def _encode_all(self, sentences: List[str]):
        encoded = self.task.encode_raw(list(sentences))
        errors = [f"sentence {i} ({item.text[:80]!r}): {item.error}" for i, item in enumerate(encoded) if item.error]
        if errors:
            raise ValueError("cannot translate " + "; ".join(errors))
        return [item.tokens for item in encoded]

    def translate(self, sentences: Union[str, List[str]], beam: Optional[int] = None, verbose: bool = False,
                  trees: bool = False, **kwargs):
        """Best translation of each sentence; `beam` defaults to the one from_pretrained was given (5 if none).
        With `trees`, a TreeTranslation each (ValueError on a data-bin whose target has no transitions)."""
        if not trees:
            return self.sample(sentences, beam, verbose, **kwargs)
        if isinstance(sentences, str):
            return self.translate([sentences], beam, verbose, trees=True, **kwargs)[0]
        batched_hypos = self.generate(self._encode_all(sentences), beam or self.cfg.generation.beam, verbose,
                                      **kwargs)
        out = []
        for index, hypos in enumerate(batched_hypos):
            tree, conllu = self.task.hypothesis_tree(hypos[0]["tokens"], sent_id=str(index))
            out.append(TreeTranslation(self.decode(hypos[0]["tokens"]), tree.words, tree.heads, tree.labels, conllu))
        return out

    def sample(self, sentences: Union[str, List[str]], beam: Optional[int] = None, verbose: bool = False,
               **kwargs) -> Union[str, List[str]]:
        beam = beam or self.cfg.generation.beam
        if isinstance(sentences, str):
            return self.sample([sentences], beam=beam, verbose=verbose, **kwargs)[0]
        # all sentences parsed and encoded in one batch (GeneratorHubInterface would encode them one by one)
        batched_hypos = self.generate(self._encode_all(sentences), beam, verbose, **kwargs)
        return [self.decode(hypos[0]["tokens"]) for hypos in batched_hypos]


def from_pretrained(checkpoint: str, data_bin: str, **overrides) -> SyntaxHubInterface:
    """The model of `checkpoint` (ensembles: paths joined with ':'), with the dictionaries, sentencepiece model and
    parser of `data_bin`. `overrides` set generation options (beam=5, lenpen=1.0, ...) or task options
    (source_parser="spacy:...")."""
    import fairseq_syntax  # noqa: F401  (registers the task, models and the checkpoint loader's allowlist)

    task_overrides = {key: value for key, value in overrides.items() if key in ("source_parser",)}
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        utils.split_paths(checkpoint), arg_overrides={"data": data_bin, **task_overrides})
    for key, value in overrides.items():
        if key not in task_overrides:
            setattr(cfg.generation, key, value)
    return SyntaxHubInterface(cfg, task, models).eval()  # dropout off (fairseq's hub leaves it to the caller)
