"""The toy graph decoder (tests/toy_plugin/toy_decoder.py), built only from the decoder contract
(fairseq_syntax/models/decoders.py): chosen by a preset or by --decoder-type, its own option reaching it,
incremental decoding equal to the full forward, and fairseq-train, fairseq-generate and --trees-out through the
real commands on a small data-bin whose target has no transitions (its trees are the decoder's own graph)."""
import math
import re

import conllu
import torch

import fairseq_syntax  # noqa: F401
from fairseq_syntax.models.decoders import ADJACENCY, DECODERS, contract_of

from .helpers import (
    REPO, assert_incremental_decoding_equals_full, build_task_and_model, four_hypotheses_of_one_source, is_tree,
    run_cli,
)

TOY_PLUGIN = REPO / "tests" / "toy_plugin"
COMMON = ["--user-dir", TOY_PLUGIN, "--task", "syntax_translation", "-s", "en", "-t", "de", "--cpu", "--num-workers",
          "0"]


def build(destdir, *options):
    """The task and a freshly built model (seeded, eval mode, no dropout) of the toy preset with `options`."""
    return build_task_and_model(destdir, *COMMON, "--arch", "toy_graph_gru_tiny", "--dropout", "0", *options)


def test_the_preset_or_decoder_type_chooses_the_decoder_and_its_option_reaches_it(small_spacy_bin):
    _, model = build(small_spacy_bin, "--toy-graph-hidden-dim", "24")
    assert type(model.decoder) is DECODERS["toy_graph_gru"]
    assert contract_of(model.decoder).predicts_graph and model.decoder.gru.hidden_size == 24
    _, plain = build(small_spacy_bin, "--decoder-type", "transformer")  # the command line wins over the preset
    assert not isinstance(plain.decoder, DECODERS["toy_graph_gru"]) and not contract_of(plain.decoder).predicts_graph


def test_incremental_decoding_equals_the_full_forward(small_spacy_bin):
    """Four forced prefixes of one source, step by step with fairseq's incremental state and the rows reordered
    midway as beam search reorders them: every step's output (the newest column only) and the last step's arc
    scores are those of the full forward."""
    task, model = build(small_spacy_bin)
    prefixes, encoder_out = four_hypotheses_of_one_source(task, model, 8)
    full, last_step = assert_incremental_decoding_equals_full(model.decoder, prefixes, encoder_out, reorder_at=4,
                                                              name="toy_graph_gru")
    torch.testing.assert_close(last_step[ADJACENCY], full[ADJACENCY], rtol=1e-4, atol=1e-5)


def test_trains_generates_and_writes_trees(small_spacy_bin, tmp_path):
    """fairseq-train 3 updates with --decoder-type (finite losses, a checkpoint with the decoder's weights), then
    fairseq-generate with --trees-out: one CoNLL-U tree per hypothesis (--nbest 2), over that hypothesis's words,
    heads a tree (the maximum spanning tree: one root, no cycle), each word's raw argmax head beside it."""
    save_dir = tmp_path / "ckpt"
    trained = run_cli("fairseq-train", small_spacy_bin, *COMMON, "--arch", "toy_syntax_tiny", "--decoder-type",
                      "toy_graph_gru", "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.005",
                      "--max-tokens", "800", "--max-update", "3", "--criterion", "syntax_label_smoothed_cross_entropy",
                      "--label-smoothing", "0.1", "--save-dir", save_dir, "--no-progress-bar", "--log-interval", "1",
                      "--seed", "3")
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([-0-9.a-z]+)", trained.stdout + trained.stderr)]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    checkpoint = save_dir / "checkpoint_last.pt"
    weights = torch.load(checkpoint, weights_only=True)["model"]
    assert "decoder.gru.weight_hh_l0" in weights and "decoder.arc_head.weight" in weights

    trees = tmp_path / "trees.conllu"
    generated = run_cli("fairseq-generate", small_spacy_bin, *COMMON, "--path", checkpoint, "--gen-subset", "valid",
                        "--beam", "3", "--nbest", "2", "--batch-size", "8", "--max-len-a", "0", "--max-len-b", "12",
                        "--trees-out", trees)
    sentences = len((small_spacy_bin / "valid.de.txt").read_text(encoding="utf-8").splitlines())
    ranked = {}  # sentence id -> its hypotheses' (pieces, detokenized text), best first
    for match in re.finditer(r"^H-(\d+)\t\S+\t(.*)\nD-\1\t\S+\t(.*)$", generated.stdout, re.M):
        ranked.setdefault(match.group(1), []).append((match.group(2).split(" "), match.group(3)))
    assert len(ranked) == sentences and all(len(hypotheses) == 2 for hypotheses in ranked.values())
    # --trees-out names rank r > 0 "id.r"
    hypotheses = {(i if rank == 0 else f"{i}.{rank}"): hypothesis for i, best_first in ranked.items()
                  for rank, hypothesis in enumerate(best_first)}
    written = {s.metadata["sent_id"]: s for s in conllu.parse(trees.read_text(encoding="utf-8"))}
    assert sorted(written) == sorted(hypotheses)
    for name, sentence in written.items():
        pieces, text = hypotheses[name]
        words = sum(1 for c, piece in enumerate(pieces) if c == 0 or piece.startswith("\u2581"))
        heads = [token["head"] for token in sentence]
        assert len(sentence) == words and all(0 <= head <= words for head in heads), (name, pieces, heads)
        assert is_tree(heads), (name, heads)
        # the words spelled: a word of no letters (a lone U+2581 piece) is written `_`
        assert [token["form"] for token in sentence if token["form"] != "_"] == [w for w in text.split(" ") if w]
        argmax = [int(head) for head in sentence.metadata["argmax_heads"].split()]
        assert len(argmax) == words and all(0 <= head <= words and head != i + 1 for i, head in enumerate(argmax))
