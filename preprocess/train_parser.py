"""fairseq-syntax-train-parser: train a SuPar biaffine dependency parser offline from CoNLL-U treebanks.

    fairseq-syntax-train-parser --train a.conllu.gz [--train b.conllu ...] --dev dev.conllu.gz --output MODEL \\
        [--test test.conllu] [--config small|base] [--epochs N] [--seed S]

Inputs may be gzipped; several --train files are concatenated. Multiword-token lines (IDs like 3-4) and empty
nodes (IDs like 5.1) are dropped, so the parser works on syntactic words, as spaCy's tokenizer gives them. The model
uses word and character embeddings learnt from the treebank only (no pretrained vectors, no BERT: nothing is
downloaded). Everything but the model and its scores goes to the work directory MODEL.work/ (prepared data,
config.ini, train.log). After training, UAS/LAS on --dev (and --test) are printed and written to
MODEL.scores.json. Scores count every word, punctuation included (the UD convention); SuPar's own default would
leave punctuation out.
"""
import argparse
import contextlib
import gzip
import json
import os
import random
import sys
import tempfile
import time
from typing import Dict, Iterable, Iterator, List, Sequence, Tuple

# Model sizes. `small` trains in seconds to minutes on 2 CPU cores (tests, quick experiments); `base` is SuPar's
# published biaffine configuration (3 x 400 BiLSTM, char LSTM) minus the pretrained GloVe vectors.
# n_pretrained must equal n_embed: SuPar sizes the LSTM input as n_embed + n_pretrained whenever they differ,
# even without pretrained vectors.
CONFIGS: Dict[str, Dict[str, Dict[str, object]]] = {
    "small": {
        "Network": dict(n_embed=64, n_pretrained=64, n_char_embed=32, n_char_hidden=64, n_feat_embed=64,
                        embed_dropout=0.33, n_lstm_hidden=128, n_lstm_layers=2, encoder_dropout=0.33,
                        n_arc_mlp=200, n_rel_mlp=64, mlp_dropout=0.33, scale=0),
        "Optimizer": dict(lr=2e-3, mu=0.9, nu=0.9, eps=1e-12, weight_decay=0.0, clip=5.0, decay=0.75,
                          decay_steps=5000, update_steps=1, batch_size=2000),
    },
    "base": {
        "Network": dict(n_embed=100, n_pretrained=100, n_char_embed=50, n_char_hidden=100, n_feat_embed=100,
                        embed_dropout=0.33, n_lstm_hidden=400, n_lstm_layers=3, encoder_dropout=0.33,
                        n_arc_mlp=500, n_rel_mlp=100, mlp_dropout=0.33, scale=0),
        "Optimizer": dict(lr=2e-3, mu=0.9, nu=0.9, eps=1e-12, weight_decay=0.0, clip=5.0, decay=0.75,
                          decay_steps=5000, update_steps=1, batch_size=5000),
    },
}
DEFAULT_EPOCHS = {"small": 20, "base": 50}
DATA_SECTION = dict(encoder="lstm", feat=["char"], embed=None, bert=None, unk="unk", min_freq=2, fix_len=20,
                    buckets=32, max_len=None, punct=True, tree=False, proj=False, partial=False)


# -- CoNLL-U preparation ------------------------------------------------------------------------------------
def _open_text(path: str):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, "r", encoding="utf-8")


def read_conllu_sentences(path: str) -> Iterator[List[str]]:
    """Sentences of a (possibly gzipped) CoNLL-U file as lists of lines (comments kept), without multiword-token
    and empty-node lines. Raises ValueError on a malformed word line."""
    lines: List[str] = []
    has_words = False
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if has_words:
                    yield lines
                lines, has_words = [], False
                continue
            if line.startswith("#"):
                lines.append(line)
                continue
            cols = line.split("\t")
            if len(cols) != 10:
                raise ValueError(f"{path}:{lineno}: expected 10 tab-separated columns, got {len(cols)}")
            if not cols[0].isdigit():
                if "-" in cols[0] or "." in cols[0]:
                    continue  # multiword token or empty node
                raise ValueError(f"{path}:{lineno}: bad ID {cols[0]!r}")
            if not cols[6].isdigit():
                raise ValueError(f"{path}:{lineno}: bad HEAD {cols[6]!r}")
            lines.append(line)
            has_words = True
    if has_words:
        yield lines


def prepare_conllu(paths: Sequence[str], out_path: str, limit: int = None) -> Tuple[int, int]:
    """Concatenate CoNLL-U files into one plain file SuPar reads whole: every sentence, the last included, ends
    with a blank line (SuPar drops a last sentence without one). At most `limit` sentences if given.
    Returns (sentences, words)."""
    n_sent = n_words = 0
    with open(out_path, "w", encoding="utf-8") as out:
        for path in paths:
            for lines in read_conllu_sentences(path):
                if limit is not None and n_sent >= limit:
                    break
                out.write("\n".join(lines) + "\n\n")
                n_sent += 1
                n_words += sum(1 for line in lines if not line.startswith("#"))
    if n_sent == 0:
        raise ValueError(f"no sentences in {', '.join(paths)}")
    return n_sent, n_words


def write_config(path: str, config: str) -> None:
    """SuPar .ini: values are Python literals (SuPar reads them with ast.literal_eval)."""
    sections = {"Data": DATA_SECTION, **CONFIGS[config]}
    with open(path, "w", encoding="utf-8") as f:
        for name, values in sections.items():
            f.write(f"[{name}]\n")
            for key, value in values.items():
                f.write(f"{key} = {value!r}\n")
            f.write("\n")


# -- SuPar plumbing -----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _supar_training_output(log_path: str):
    """Send SuPar's training log to stderr and `log_path`; draw its tqdm bars only on a terminal. Restores the
    supar logger and module functions afterwards (SuPar's own init_logger would configure the root logger, once)."""
    import logging

    import supar.parsers.dep as dep
    import supar.utils.transform as transform
    from supar.utils.logging import logger
    from tqdm import tqdm

    handlers = [logging.StreamHandler(sys.stderr), logging.FileHandler(log_path, "w", encoding="utf-8")]
    for h in handlers:
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(h)
    saved = (logger.propagate, logger.level, dep.progress_bar, transform.progress_bar)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    if not sys.stderr.isatty():
        def progress_bar(iterator, **kwargs):
            return tqdm(iterator, disable=True)

        dep.progress_bar = transform.progress_bar = progress_bar
    try:
        yield logger
    finally:
        logger.propagate, level, dep.progress_bar, transform.progress_bar = saved
        logger.setLevel(level)
        for h in handlers:
            logger.removeHandler(h)
            h.close()


def evaluate_parser(model_path: str, conllu_path: str, punct: bool = True) -> dict:
    """UAS and LAS (percent, 0-100) of a SuPar model (a file the caller trusts) on a gold CoNLL-U file (may be
    gzipped; multiword tokens and empty nodes are dropped). Trees are decoded well-formed (MST), as the
    preprocessing does. `punct=True` counts punctuation (UD convention)."""
    from fairseq_syntax.parsers.supar_parser import _quiet_supar_warnings, load_supar_model

    with tempfile.TemporaryDirectory() as tmp, _quiet_supar_warnings():
        parser = load_supar_model(model_path)
        data = os.path.join(tmp, "eval.conllu")
        n_sent, n_words = prepare_conllu([conllu_path], data)
        _, metric = parser.evaluate(data, punct=punct, tree=True, proj=False, partial=False, verbose=False)
    return {"UAS": round(100.0 * metric.uas, 2), "LAS": round(100.0 * metric.las, 2), "sentences": n_sent,
            "words": n_words, "scored_words": int(metric.total), "punct": punct, "file": conllu_path}


def train(train_files: Sequence[str], dev_file: str, output: str, test_file: str = None, config: str = "base",
          epochs: int = None, seed: int = 1, patience: int = 10, batch_size: int = None,
          threads: int = None) -> dict:
    import torch
    from supar import BiaffineDependencyParser
    from supar.utils import Config

    from fairseq_syntax.parsers.supar_parser import _quiet_supar_warnings, trusted_supar_checkpoint

    epochs = epochs or DEFAULT_EPOCHS[config]
    output = os.path.abspath(output)
    workdir = output + ".work"
    os.makedirs(workdir, exist_ok=True)
    if os.path.dirname(output):
        os.makedirs(os.path.dirname(output), exist_ok=True)

    data = {}
    for name, paths in (("train", train_files), ("dev", [dev_file]), ("test", [test_file] if test_file else [])):
        if paths:
            data[name] = os.path.join(workdir, f"{name}.conllu")
            n_sent, n_words = prepare_conllu(paths, data[name])
            print(f"{name}: {n_sent} sentences, {n_words} words from {', '.join(paths)}", flush=True)
            if name == "train":
                train_stats = {"sentences": n_sent, "words": n_words}
    ini = os.path.join(workdir, "config.ini")
    write_config(ini, config)

    random.seed(seed)
    torch.manual_seed(seed)
    if threads:
        torch.set_num_threads(threads)

    if "test" not in data:
        # SuPar insists on a test set and scores it after every epoch: without --test, give it one dev sentence
        # rather than scoring the whole dev set twice per epoch
        data["test"] = os.path.join(workdir, "test-placeholder.conllu")
        prepare_conllu([dev_file], data["test"], limit=1)

    # SuPar saves the model at every epoch that improves on dev: it is written in the work directory and takes its
    # place at `output` only once trained and scored, so that a model at `output` is always a finished one (make
    # and compare.py take an existing file for done; an interrupted run left a half-trained parser there)
    partial = os.path.join(workdir, "model.supar")
    kwargs = dict(path=partial, train=data["train"], dev=data["dev"], test=data["test"],
                  build=True, checkpoint=False, epochs=epochs, patience=patience, seed=seed, verbose=True)
    if batch_size:
        kwargs["batch_size"] = batch_size
    args = Config.load(conf=ini, **kwargs)
    start = time.time()
    with _supar_training_output(os.path.join(workdir, "train.log")) as logger, _quiet_supar_warnings():
        logger.info("\n" + str(args))
        parser = BiaffineDependencyParser.build(**args)
        # train() reloads the best model from `partial` (written by this very run) at the end
        with trusted_supar_checkpoint(partial):
            parser.train(**args)
    elapsed = time.time() - start

    scores = {"model": output, "config": config, "epochs": epochs, "best_epoch": getattr(parser, "best_e", None),
              "seed": seed, "train_files": list(train_files), "train": train_stats,
              "train_seconds": round(elapsed, 1), "punct": True}
    scores["dev"] = evaluate_parser(partial, dev_file)
    if test_file:
        scores["test"] = evaluate_parser(partial, test_file)
    with open(output + ".scores.json", "w", encoding="utf-8") as f:
        json.dump(scores, f, indent=2)
        f.write("\n")
    os.replace(partial, output)
    return scores


def cli_main(argv: Iterable[str] = None) -> None:
    p = argparse.ArgumentParser(prog="fairseq-syntax-train-parser", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", action="append", required=True, metavar="CONLLU",
                   help="training treebank (.conllu or .conllu.gz); repeat to concatenate several")
    p.add_argument("--dev", required=True, metavar="CONLLU", help="development treebank (model selection, scores)")
    p.add_argument("--test", metavar="CONLLU", help="optional test treebank, scored after training")
    p.add_argument("--output", required=True, metavar="MODEL", help="model file to write")
    p.add_argument("--config", choices=sorted(CONFIGS), default="base")
    p.add_argument("--epochs", type=int, help="maximum epochs (default: small %(small)d, base %(base)d)"
                   % DEFAULT_EPOCHS)
    p.add_argument("--patience", type=int, default=10, help="stop after this many epochs without dev gain")
    p.add_argument("--batch-size", type=int, help="tokens per batch (default: from --config)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int,
                   help="torch CPU threads (default: torch's, one per core); use 1 when other jobs share the "
                        "cores, where torch's spinning threads slow training many-fold")
    a = p.parse_args(None if argv is None else list(argv))
    for path in a.train + [a.dev] + ([a.test] if a.test else []):
        if not os.path.isfile(path):
            p.error(f"no such file: {path}")
    scores = train(a.train, a.dev, a.output, test_file=a.test, config=a.config, epochs=a.epochs, seed=a.seed,
                   patience=a.patience, batch_size=a.batch_size, threads=a.threads)
    for split in ("dev", "test"):
        if split in scores:
            s = scores[split]
            print(f"{split}: UAS {s['UAS']:.2f} LAS {s['LAS']:.2f} ({s['sentences']} sentences, {s['words']} words, "
                  f"punctuation included) {s['file']}", flush=True)
    print(f"model: {a.output}  scores: {a.output}.scores.json  ({scores['train_seconds']} s training)", flush=True)


if __name__ == "__main__":
    cli_main()
