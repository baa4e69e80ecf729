"""bench/target_words.py: how bench/bench.py counts the Linearized system's target words and sets its forced
generation length (issue 12), and bench/decoder_cost.py at the tiny size."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fairseq_syntax.data.transitions.tokens import ATTACHED_MARK, vocabulary_classes
from fairseq_syntax.data.transitions.function import TransitionScan
from fairseq_syntax.tasks.constrained_generation import transition_mask

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from target_words import forced_lengths, target_token_counts, word_share  # noqa: E402

SYMBOLS = ["<s>", "<pad>", "</s>", "<unk>", "\u2581Ein", "\u2581Hund", "e", ".", ATTACHED_MARK,
           "LEFT-ARC:det", "RIGHT-ARC:punct", "LEFT-ARC:nsubj", "\u2581"]
IDS = {symbol: index for index, symbol in enumerate(SYMBOLS)}


def ids(*tokens):
    return np.array([IDS[t] for t in tokens])


def test_words_are_pieces_and_eos_not_arcs_or_marks():
    classes = vocabulary_classes(SYMBOLS).numpy()
    # "Ein Hunde." as transitions: ▁Ein ▁Hund e LEFT-ARC:det <attached> . RIGHT-ARC:punct </s>, twice
    sentence = ids("\u2581Ein", "\u2581Hund", "e", "LEFT-ARC:det", ATTACHED_MARK, ".", "RIGHT-ARC:punct", "</s>")
    counts = target_token_counts(np.concatenate([sentence, sentence]), classes, SYMBOLS)
    assert counts == {"tokens": 16, "pieces": 8, "eos": 2, "words": 10}
    assert word_share(counts) == pytest.approx(10 / 16)
    # a plain target (pieces + EOS): every token is a word, as fairseq's wps counts it
    plain = target_token_counts(ids("\u2581Ein", "\u2581Hund", "e", ".", "</s>"), classes, SYMBOLS)
    assert word_share(plain) == 1.0
    # a lone U+2581 is a piece of the plain target too (its class is the mark's: a piece of its word must follow)
    assert target_token_counts(ids("\u2581", "e", "</s>"), classes, SYMBOLS)["words"] == 3


def test_forced_length_scales_pieces_by_the_transition_tokens_they_come_with():
    # 8 pieces, 6 arcs and marks, 2 EOS: 14 tokens before EOS per 8 pieces
    counts = {"tokens": 16, "pieces": 8, "eos": 2, "words": 10}
    assert forced_lengths(counts, 25) == (44, 44)  # round(25 * 14 / 8) = 44, exactly
    plain = {"tokens": 27, "pieces": 25, "eos": 2, "words": 27}
    assert forced_lengths(plain, 25) == (25, 25)


@pytest.mark.parametrize("max_len", [5, 8, 13])
def test_with_the_minimum_equal_to_the_maximum_the_masks_always_allow_a_token(max_len):
    """Forced lengths (min = max): fairseq-generate's --min-len forbids EOS before it; a mask that only knew the
    maximum could leave EOS as the only valid token (one word on the stack, none open) one step before it, and
    every token would be -inf. The masks plan for the whole window: every state reachable under them (beam search's
    transition_mask, breadth first, one prefix per state) keeps an allowed token at every step."""
    classes = vocabulary_classes(SYMBOLS)
    _, min_len = forced_lengths({"tokens": max_len + 1, "pieces": max_len, "eos": 1, "words": max_len + 1},
                                max_len)
    assert min_len == max_len
    assert _always_allowed(classes, max_len, min_len)
    assert not _always_allowed(classes, max_len, min_len, mask_knows_minimum=False)  # the conflict there was


def _always_allowed(classes, max_len, min_len, mask_knows_minimum=True):
    """Whether every hypothesis following the masks for max_len steps has an allowed token at each step."""
    eos = IDS["</s>"]
    # one token of each class: a word-initial and a continuation piece, the mark, two arcs
    moves = [IDS[t] for t in ("\u2581Hund", "e", ATTACHED_MARK, "LEFT-ARC:det", "RIGHT-ARC:punct")]
    prefixes = [[eos]]  # fairseq's BOS (EOS) first
    for step in range(max_len + 1):
        batch = torch.tensor(prefixes)
        allowed = transition_mask(batch, classes, max_len, min_len if mask_knows_minimum else 0)
        if step < min_len:
            allowed[:, eos] = False
        if not bool(allowed.any(1).all()):
            return False
        following = {}
        for row, prefix in enumerate(prefixes):
            for token in moves:
                if allowed[row, token]:
                    after = TransitionScan.of(torch.tensor([prefix[1:] + [token]]), classes)
                    key = (int(after.depth), bool(after.open), bool(after.bare))
                    following.setdefault(key, prefix + [token])
        if not following:
            return True
        prefixes = list(following.values())
    return True


def test_mask_ab_splits_the_extra_time_into_masks_decoder_and_search():
    """bench.py's A/B of the masks: per pair, time with / time without - 1, and the extra seconds of the median
    pair split into the masks' own time, the plain decoder step and the rest of the search (by hand below)."""
    from bench import mask_ab

    def run(seconds, mask, decoder, faults):
        return {"generate_seconds": seconds, "mask_seconds": mask, "decoder_seconds": decoder, "rows": 100,
                "minor_faults": faults}

    pairs = [{"with": run(11.0, 0.5, 6.2, 30), "without": run(10.0, 0.0, 6.0, 10)},
             {"with": run(12.6, 0.6, 7.0, 50), "without": run(12.0, 0.0, 6.9, 20)},
             {"with": run(24.0, 0.4, 12.0, 40), "without": run(20.0, 0.0, 11.0, 10)}]
    ab = mask_ab(pairs)
    assert ab["pairs"] == 3
    assert ab["end_to_end_per_pair"] == pytest.approx([0.1, 0.05, 0.2])
    assert ab["end_to_end"] == pytest.approx(0.1)
    assert (ab["end_to_end_min"], ab["end_to_end_max"]) == (pytest.approx(0.05), pytest.approx(0.2))
    assert ab["extra_seconds"] == pytest.approx(1.0)  # medians of 1.0, 0.6, 4.0
    assert ab["mask_seconds"] == pytest.approx(0.5)
    assert ab["decoder_extra_seconds"] == pytest.approx(0.2)  # 0.2, 0.1, 1.0
    # rest: (11 - 6.2 - 0.5) - (10 - 6) = 0.3; (12.6 - 7 - 0.6) - (12 - 6.9) = -0.1; (24 - 12 - 0.4) - 9 = 2.6
    assert ab["rest_extra_seconds"] == pytest.approx(0.3)
    assert (ab["minor_faults_with"], ab["minor_faults_without"]) == (40, 10)


@pytest.mark.slow  # (a smoke run of a benchmark: every decoder trains and generates)
def test_decoder_cost_bench_runs_every_decoder_and_vanilla_on_the_same_sentences(data_root, tmp_path):
    """bench/decoder_cost.py at the tiny size: vanilla reads the same sentences from its plain data-bin (the bench
    stops if their pieces + EOS differ from the transition batches'), every decoder is timed for training and
    generation, and the generation lengths are the pieces for vanilla and more (arcs, marks) for the others."""
    import json

    import decoder_cost

    decoder_cost.main(["--workdir", str(tmp_path), "--sentences", "120", "--valid-sentences", "12", "--batches", "1",
                       "--repeats", "1", "--arch-size", "tiny", "--max-tokens", "400", "--generate-pieces", "6"])
    report = json.loads((tmp_path / "decoder_cost.json").read_text())
    assert set(report["seconds"]) == set(report["generate_sentences_per_second"]) == set(decoder_cost.DECODERS)
    assert set(report["decode_references_sentences_per_second"]) == set(decoder_cost.DECODERS)
    assert report["decode_references_vs_linearized"]["linearized"] == 1.0
    assert report["target_tokens"] > report["target_words"] > 0  # transition targets also hold arcs and marks
    assert report["generate_lengths"]["vanilla"] == [6, 6]
    assert all(max_len > 6 and min_len == max_len for name, (max_len, min_len)
               in report["generate_lengths"].items() if name != "vanilla")
    assert report["speed_vs_vanilla"]["vanilla"] == report["speed_vs_linearized"]["linearized"] == 1.0
    assert report["columns"]["exact_views"] > report["columns"]["causal"]


@pytest.mark.slow  # (a smoke run of a benchmark: three systems train a few updates)
def test_decoder_race_trains_each_system_on_the_same_batches(data_root, tmp_path):
    """bench/decoder_race.py at the tiny size: every system's valid NLL at each validation and its seconds per
    update; the race is deterministic (Linearized twice gives its curve to the digit), and B comes from
    --reencode-every."""
    import json

    import decoder_race

    arguments = ["--workdir", str(tmp_path), "--sentences", "120", "--updates", "4", "--validate-every", "2",
                 "--size", "tiny", "--max-tokens", "400", "--reencode-every", "3"]
    decoder_race.main([*arguments, "--systems", "linearized,bitran_b4"])
    report = json.loads((tmp_path / "decoder_race.json").read_text())
    assert report["reencode_every"] == 3 and report["systems"]["bitran_b4"]["options"][-2:] == ["--reencode-every",
                                                                                               "3"]
    for row in report["systems"].values():
        assert list(row["valid_nll"]) == ["2", "4"] and all(0 < v < 20 for v in row["valid_nll"].values())
        assert row["seconds_per_update"] > 0
    # the transition targets' positions in their classes under B = 3, each system scored on all of them
    positions = report["valid_positions_by_class"]
    assert set(positions) == set(decoder_race.POSITION_CLASSES) and all(n > 0 for n in positions.values())
    for row in report["systems"].values():
        by_class = row["valid_nll_by_position"]["4"]
        assert set(by_class) == set(positions)
        pooled = sum(by_class[name] * n for name, n in positions.items()) / sum(positions.values())
        assert abs(pooled - row["valid_nll"]["4"]) < 1e-6 * row["valid_nll"]["4"]
    decoder_race.main([*arguments, "--systems", "linearized", "--out", str(tmp_path / "again.json")])
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["systems"]["linearized"]["valid_nll"] == report["systems"]["linearized"]["valid_nll"]
    # an existing data-bin (the plain one made beside the transitions, both sides parsed), a Dyn-STGCD width, and
    # vanilla, which takes no syntax feature, on the same batches
    decoder_race.main([*arguments, "--data-bin", str(tmp_path / "data-bin-plain"), "--systems",
                       "vanilla,dyn_stgcd_no_spatial@8", "--out", str(tmp_path / "width.json")])
    width = json.loads((tmp_path / "width.json").read_text())
    assert width["data_bin"] == str(tmp_path / "data-bin-plain") and width["languages"] == ["de", "en"]
    assert width["systems"]["dyn_stgcd_no_spatial@8"]["options"][-2:] == ["--dyn-stgcd-graph-dim", "8"]
    assert "valid_positions_by_class" not in width  # no arc tokens on a plain target
    assert width["systems"]["vanilla"]["time_vs_vanilla"] == 1.0
    assert width["systems"]["dyn_stgcd_no_spatial@8"]["time_vs_vanilla"] > 0
    assert width["systems"]["vanilla"]["parameters"] > width["systems"]["dyn_stgcd_no_spatial@8"]["parameters"] > 0


def test_decoder_race_position_classes_follow_the_block_starts_and_the_arcs_since_them():
    """A position's class under re-encoding every B columns, against a loop over the columns: 0 at a block start,
    2 after it when an arc token is among the input columns since the start (the start's own excluded), else 1."""
    import decoder_race

    generator = torch.Generator().manual_seed(0)
    is_arc = torch.rand(12, generator=generator) < 0.4
    tokens = torch.randint(0, 12, (5, 17), generator=generator)
    for every in (1, 2, 3, 5, 40):
        classes = decoder_race.position_classes(tokens, is_arc, every)
        for row in range(tokens.size(0)):
            for column in range(tokens.size(1)):
                start = column - column % every
                since = [bool(is_arc[tokens[row, j]]) for j in range(start + 1, column + 1)]
                expected = 0 if column == start else 2 if any(since) else 1
                assert int(classes[row, column]) == expected, (every, row, column)
    assert decoder_race.position_classes(tokens, is_arc, 1).eq(0).all()


def test_decoder_race_systems_and_the_features_each_model_gets():
    """SYSTEM@G only for Dyn-STGCD systems; each model's batch keeps the features its task reads, and nothing
    else of the features registry (vanilla's forward takes no syntax argument)."""
    import decoder_race

    assert decoder_race.known_system("dyn_stgcd@64") and decoder_race.known_system("vanilla")
    assert not decoder_race.known_system("vanilla@64") and not decoder_race.known_system("dyn_stgcd@wide")
    assert decoder_race.system_options("dyn_stgcd@64", 4)[-2:] == ["--dyn-stgcd-graph-dim", "64"]
    assert "--dyn-stgcd-graph-dim" not in decoder_race.system_options("dyn_stgcd", 4)
    sample = {"id": torch.arange(2), "net_input": {"src_tokens": 1, "prev_output_tokens": 2, "src_parent_first": 3,
                                                    "prev_word_ids": 4}}
    kept = decoder_race.own_features(sample, {"src_parent_first"})
    assert kept["net_input"] == {"src_tokens": 1, "prev_output_tokens": 2, "prev_word_ids": 4}
    assert "src_parent_first" in sample["net_input"]  # the shared batch is not changed for the next system


@pytest.mark.slow  # (a smoke run of a benchmark: two systems train and generate, each in a process of its own)
def test_dyn_stgcd_cost_bench_reports_each_systems_figures_and_the_ratios(data_root, tmp_path):
    """bench/dyn_stgcd_cost.py at the tiny size on the CPU: every system's training and generation figures come
    from their own processes, and each ratio is the system's figure over vanilla's of the same round."""
    import json

    import dyn_stgcd_cost

    out = tmp_path / "report.json"
    dyn_stgcd_cost.main(["--workdir", str(tmp_path), "--sentences", "120", "--batches", "1", "--repeats", "1",
                         "--arch-size", "tiny", "--max-tokens", "400", "--generate-pieces", "4",
                         "--no-matched-baseline", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["device"] == "cpu"
    (measured,) = report["rounds"]
    assert set(measured) == {"vanilla", "dyn_stgcd"}
    for figures in measured.values():
        assert figures["train_words_per_second"] > 0 and figures["generate_sentences_per_second"] > 0
        assert figures["target_words"] == measured["vanilla"]["target_words"]  # the same batches
        assert not any(key.endswith("cuda_mb") for key in figures)
    ratios = report["ratio_to_vanilla"]["dyn_stgcd"]
    for key in ("train_words_per_second", "generate_sentences_per_second", "train_peak_rss_mb", "parameters"):
        assert ratios[key] == pytest.approx(measured["dyn_stgcd"][key] / measured["vanilla"][key])


def test_paired_step_times_each_tree_with_its_own_code_on_swapped_cores(data_root, tmp_path):
    """bench/paired_step.py at the tiny size: each round times the two versions at once, each child with the code of
    its own tree (the --before revision's worktree, this tree after) and its own system (--before-system: the name
    the old revision gives the variant), the cores swapped in the next round; the worktree is removed afterwards."""
    import os
    import subprocess

    import paired_step

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("paired timing needs 2 cores")
    repo = Path(paired_step.__file__).resolve().parent.parent
    rounds = paired_step.main(["--before", "HEAD", "--before-system", "vanilla", "--system", "dyn_stgcd", "--workdir",
                               str(tmp_path), "--sentences", "120", "--batches", "1", "--repeats", "1", "--rounds", "2",
                               "--arch-size", "tiny", "--max-tokens", "400"])
    assert len(rounds) == 2
    assert all((r["before"]["system"], r["after"]["system"]) == ("vanilla", "dyn_stgcd") for r in rounds)
    assert rounds[0]["cores"]["before"] == rounds[1]["cores"]["after"] != rounds[0]["cores"]["after"]
    for measured in rounds:
        before, after = Path(measured["before"]["module"]), Path(measured["after"]["module"])
        assert before.parent.parent.parent == tmp_path  # WORKDIR/paired-*/fairseq_syntax/__init__.py
        assert after.parent.parent == repo
        assert measured["ratio"] == pytest.approx(measured["after"]["seconds"] / measured["before"]["seconds"])
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in listed


def test_paired_step_times_two_systems_for_the_same_wall_time(data_root, tmp_path):
    """bench/paired_step.py --baseline: the two children run two systems with this tree's code, and each keeps
    timing passes until --seconds have gone, so the faster one does not leave the machine to the slower one."""
    import os

    import paired_step

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("paired timing needs 2 cores")
    repo = Path(paired_step.__file__).resolve().parent.parent
    rounds = paired_step.main(["--baseline", "vanilla", "--system", "dyn_stgcd", "--seconds", "4", "--workdir",
                               str(tmp_path), "--sentences", "120", "--batches", "1", "--repeats", "1", "--rounds", "1",
                               "--arch-size", "tiny", "--max-tokens", "400"])
    (measured,) = rounds
    assert (measured["before"]["system"], measured["after"]["system"]) == ("vanilla", "dyn_stgcd")
    for name in ("before", "after"):
        assert Path(measured[name]["module"]).parent.parent == repo
        assert measured[name]["timed_seconds"] >= 4 and measured[name]["passes"] >= 1
    assert measured["ratio"] == pytest.approx(measured["after"]["seconds"] / measured["before"]["seconds"])
    with pytest.raises(SystemExit):
        paired_step.main(["--baseline", "vanilla", "--before", "HEAD"])
    with pytest.raises(SystemExit):  # a system for the old revision needs an old revision
        paired_step.main(["--baseline", "vanilla", "--before-system", "vanilla"])


def test_paired_step_times_beam_search_with_part_generate(data_root, tmp_path):
    """bench/paired_step.py --part generate: both children time beam-search passes (not training steps) for the
    --seconds asked, and the round's ratio is of their fastest passes."""
    import os

    import paired_step

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("paired timing needs 2 cores")
    rounds = paired_step.main(["--baseline", "vanilla", "--system", "dyn_stgcd", "--part", "generate",
                               "--generate-pieces", "4", "--seconds", "2", "--workdir", str(tmp_path), "--sentences",
                               "120", "--batches", "1", "--repeats", "2", "--rounds", "1", "--arch-size", "tiny",
                               "--max-tokens", "400"])
    (measured,) = rounds
    for name in ("before", "after"):
        assert measured[name]["part"] == "generate"
        assert measured[name]["timed_seconds"] >= 2 and measured[name]["passes"] >= 2
        assert 0 < measured[name]["seconds"] <= measured[name]["median_seconds"]
    assert measured["ratio"] == pytest.approx(measured["after"]["seconds"] / measured["before"]["seconds"])
