"""The training cost of Choshen & Abend's decoders against Linearized (fairseq's causal decoder on the same
transition sequences), measured in one run on the same batches, and against what re-encoding must cost.

  python bench/decoder_cost.py --workdir work/decoder-cost [--sentences 2000] [--batches 12] [--arch-size multi30k]

Data: the first N sentences of UD English-EWT train as a --target-transitions data-bin (the gold trees,
`--target-parser conllu`; the source is the same text, parsed from the same file), made once in WORKDIR: no
parser to train, so the benchmark runs anywhere the shared data is.
Systems (examples/multi30k/systems.py's decoders at the chosen size): linearized, bitran (exact: every prefix a
view), bitran_k4 (4 sampled prefixes per sentence), parent and gcn_decoder (exact, the same prefix policy as
bitran). Each runs forward + backward (the syntax criterion's loss) on the same batches, 1 torch thread, after one
warm-up batch; the median over --repeats of the seconds per batch is reported, as target tokens per second
(the batch's non-padding target tokens / its time) and as a ratio to Linearized. Generation: beam 5 over the
valid split, every hypothesis forced to --generate-length tokens, sentences per second (randomly initialised
models: the lengths are forced, so every decoder does the same steps).

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
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples" / "multi30k"))
from systems import MULTI30K_SYSTEMS  # noqa: E402  (examples/multi30k/systems.py)

DECODERS = ("linearized", "bitran", "bitran_k4", "parent", "gcn_decoder")
TARGETS = {"bitran_k4": ("linearized", 0.5), "parent": ("bitran", 1 / 1.3), "gcn_decoder": ("bitran", 1 / 1.3)}


def make_data_bin(workdir: Path, data_root: Path, sentences: int) -> Path:
    destdir = workdir / "data-bin"
    if (destdir / "syntax.json").exists():
        return destdir
    raw = workdir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    blocks = []
    with gzip.open(data_root / "ud" / "UD_English-EWT" / "en_ewt-ud-train.conllu.gz", "rt", encoding="utf-8") as f:
        for block in f.read().split("\n\n"):
            if block.strip():
                blocks.append(block.strip("\n"))
            if len(blocks) == sentences + 100:
                break
    for split, chosen in (("train", blocks[:sentences]), ("valid", blocks[sentences:])):
        text = "\n\n".join(chosen) + "\n\n"
        for lang in ("en", "de"):
            (raw / f"{split}.{lang}.conllu").write_text(text, encoding="utf-8")
        lines = [next(line[len("# text = "):] for line in block.splitlines() if line.startswith("# text = "))
                 for block in chosen]
        (raw / f"{split}.de").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    from fairseq_syntax_preprocess.cli import run
    run(["-s", "de", "-t", "en", "--trainpref", str(raw / "train"), "--validpref", str(raw / "valid"),
         "--source-parser", "conllu", "--target-parser", "conllu", "--target-transitions", "--projectivize",
         "--spm-vocab-size", "4000", "--joined-dictionary", "--destdir", str(destdir)])
    return destdir


def build(destdir: Path, system: str, size: str):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    arch = [a.replace("_multi30k", f"_{size}") for a in MULTI30K_SYSTEMS[system]]
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(destdir), "--user-dir", str(REPO / "fairseq_syntax"), "--task",
                                                "syntax_translation", "-s", "de", "-t", "en", *arch, "--dropout",
                                                "0.1", "--share-all-embeddings", "--criterion",
                                                "syntax_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                                                "--cpu"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return task, model.train(), criterion


def columns(prev: torch.Tensor, pad: int) -> dict:
    lengths = prev.ne(pad).sum(1)
    return {"causal": int(lengths.sum()), "exact_views": int((lengths * (lengths + 1) // 2).sum()),
            "padded_views": int(prev.size(0) * prev.size(1) ** 2),
            # k = 4 prefixes drawn uniformly per sentence: on average (L + 1) / 2 columns each
            "sampled_k4_expected": int((lengths.clamp(max=4) * (lengths + 1) / 2).sum())}


def time_step(model, criterion, sample, repeats: int, decoder_only: bool = False) -> float:
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        model.zero_grad(set_to_none=True)
        started = time.perf_counter()
        if decoder_only:
            with torch.no_grad():
                encoder_out = model.encoder(**{k: v for k, v in sample["net_input"].items()
                                               if k != "prev_output_tokens"})
            started = time.perf_counter()
            x, _ = model.decoder(sample["net_input"]["prev_output_tokens"], encoder_out=encoder_out)
            x.float().sum().backward()
        else:
            loss, _, _ = criterion(model, sample)
            loss.backward()
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def generation_speed(task, model, length: int, batch_size: int = 32) -> float:
    """Sentences per second of fairseq's beam search (beam 5) over the valid split, every hypothesis forced to
    `length` tokens before EOS (min one shorter, bench/target_words.py `forced_lengths`), under the validity masks;
    eval mode, 1 thread."""
    from argparse import Namespace

    model.eval()
    generator = task.build_generator([model], Namespace(beam=5, max_len_a=0, max_len_b=length, min_len=length - 1,
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
    sentences, started = 0, time.perf_counter()
    with torch.no_grad():
        for sample in iterator:
            task.inference_step(generator, [model], sample)
            sentences += len(sample["id"])
    return sentences / (time.perf_counter() - started)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="work/decoder-cost")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--arch-size", default="multi30k", choices=("tiny", "multi30k", "medium"))
    parser.add_argument("--generate-length", type=int, default=40,
                        help="tokens before EOS every hypothesis is forced to in the generation timing (0: none)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    from fairseq_syntax.paths import data_root

    workdir = Path(args.workdir)
    destdir = make_data_bin(workdir, data_root(), args.sentences)
    task, _, _ = build(destdir, "linearized", args.arch_size)
    task.load_dataset("train")
    dataset = task.dataset("train")
    iterator = task.get_batch_iterator(dataset, max_tokens=args.max_tokens, seed=1).next_epoch_itr(shuffle=True)
    samples = [next(iterator) for _ in range(args.batches)]
    pad = task.target_dictionary.pad()
    counted = {key: sum(columns(s["net_input"]["prev_output_tokens"], pad)[key] for s in samples)
               for key in ("causal", "exact_views", "padded_views", "sampled_k4_expected")}
    tokens = sum(int(s["target"].ne(pad).sum()) for s in samples)
    seconds, decoder_seconds, generate = {}, {}, {}
    for system in DECODERS:
        task, model, criterion = build(destdir, system, args.arch_size)
        seconds[system] = sum(time_step(model, criterion, s, args.repeats) for s in samples)
        if args.generate_length:
            generate[system] = generation_speed(task, model, args.generate_length)
        if system == "linearized":
            decoder_seconds[system] = sum(time_step(model, criterion, s, args.repeats, decoder_only=True)
                                          for s in samples)
        print(f"{system}: {seconds[system]:.2f} s for {args.batches} batches ({tokens / seconds[system]:.0f} target "
              f"tokens/s)", flush=True)
    encoder_seconds = seconds["linearized"] - decoder_seconds["linearized"]
    ratio = counted["exact_views"] / counted["causal"]
    bound = encoder_seconds + decoder_seconds["linearized"] * ratio
    report = {
        "batches": args.batches, "target_tokens": tokens, "size": args.arch_size, "max_tokens": args.max_tokens,
        "columns": counted, "exact_over_causal_columns": ratio,
        "padded_over_exact_columns": counted["padded_views"] / counted["exact_views"],
        "seconds": seconds, "tokens_per_second": {s: tokens / t for s, t in seconds.items()},
        "generate_sentences_per_second": generate, "generate_length": args.generate_length,
        "generate_speed_vs_linearized": {s: v / generate["linearized"] for s, v in generate.items()} if generate
        else {},
        "speed_vs_linearized": {s: seconds["linearized"] / t for s, t in seconds.items()},
        "linearized_decoder_seconds": decoder_seconds["linearized"], "encoder_seconds": encoder_seconds,
        "exact_reencoding_bound_seconds": bound, "bitran_over_bound": seconds["bitran"] / bound,
        "targets": {s: {"against": other, "speed_ratio": seconds[other] / seconds[s], "target": target,
                        "met": seconds[other] / seconds[s] >= target} for s, (other, target) in TARGETS.items()},
    }
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "decoder_cost.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
