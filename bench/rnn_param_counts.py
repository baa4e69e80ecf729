"""Parameter counts of the recurrent presets at the paper's size (fairseq_syntax/models/presets/lstm.py: `lstm_birnn2`,
`lstm_gcn`, `lstm_rgse` and its --rgse-variant), next to Ding & Tao's Table 2 (NC-v11 En-De), in the GRU form (the
presets' default) and the LSTM form (--rnn-cell lstm). Separate source and target vocabularies, no shared embeddings
(English words against German BPE pieces, as Bastings et al. and the RGSE paper's NC-v11 setting have them).

  python bench/rnn_param_counts.py [--source-vocab N | --fit baseline|forward-rgse] [--target-vocab N]

--fit picks the source vocabulary that gives the GRU form's 2-layer baseline (the default) or its forward RGSE model
the paper's count, 62.3M or 41.4M (the papers do not give their vocabulary sizes); --target-vocab defaults to 8000
(the paper's 8K BPE merges). The columns "- baseline" are differences to the 2-layer baseline, which do not depend
on the vocabularies; "GRU / paper" is our GRU form's count over the paper's.
"""
import argparse
from argparse import Namespace

import torch
from fairseq.data import Dictionary

import fairseq_syntax  # noqa: F401  (registers the models and presets)
from fairseq_syntax.data.channels import LabelDictionary
from fairseq_syntax.data.vocabulary import SyntaxDictionary
from fairseq_syntax.models.presets.lstm import lstm_birnn2, lstm_gcn, lstm_rgse
from fairseq_syntax.models.syntax_lstm import SyntaxLSTMModel

PAPER_BASELINE = 62.3e6
ROWS = (  # Table 2, En-De #para.
    ("Bi-RNN (2 layers encoder)", lstm_birnn2, {}, 62.3e6),
    ("Bi-RNN + GCN", lstm_gcn, {}, None),
    ("Bi-RNN + forward RGSE", lstm_rgse, {"rgse_variant": "forward"}, 41.4e6),
    ("Bi-RNN + bi past RGSE", lstm_rgse, {"rgse_variant": "bi-past"}, 45.6e6),
    ("Bi-RNN + bi future RGSE", lstm_rgse, {"rgse_variant": "bi-future"}, 45.4e6),
    ("Bi-RNN + bi total RGSE", lstm_rgse, {"rgse_variant": "bi-total"}, 52.2e6),
)
SOURCE_LABELS = 45  # the GCN's bias rows: a UD-sized label set (a few thousand parameters either way)


def dictionary(size: int) -> Dictionary:
    words = Dictionary()
    for i in range(size - len(words)):
        words.add_symbol(f"w{i}")
    return words


def count(preset, options, cell: str, source_vocab: int, target_vocab: int) -> int:
    labels = LabelDictionary([f"label{i}" for i in range(1, SOURCE_LABELS)])
    task = Namespace(source_dictionary=SyntaxDictionary.extend(dictionary(source_vocab), labels),
                     target_dictionary=dictionary(target_vocab), cfg=Namespace(source_lang="en", target_lang="de"))
    args = Namespace(criterion="cross_entropy", rnn_cell=cell, **options)
    preset(args)
    with torch.device("meta"):  # sizes only: no memory, no initialisation
        model = SyntaxLSTMModel.build_model(args, task)
    return sum(p.numel() for p in model.parameters())


def millions(value) -> str:
    return "n/a" if value is None else f"{value / 1e6:.2f}M"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-vocab", type=int, default=None)
    parser.add_argument("--target-vocab", type=int, default=8000)
    parser.add_argument("--fit", choices=("baseline", "forward-rgse"), default="baseline")
    args = parser.parse_args()
    source_vocab = args.source_vocab
    if source_vocab is None:  # the count grows by the embedding size per source word
        _, preset, options, paper = ROWS[0] if args.fit == "baseline" else ROWS[2]
        small = count(preset, options, "gru", 1000, args.target_vocab)
        slope = count(preset, options, "gru", 1001, args.target_vocab) - small
        source_vocab = 1000 + round((paper - small) / slope)
    print(f"vocabularies: source {source_vocab}, target {args.target_vocab} (fairseq's 4 special symbols included)")
    print("| system | paper | ours, GRU form | ours, LSTM form | GRU / paper | paper - baseline | GRU - baseline | "
          "LSTM - baseline |")
    print("|---|---|---|---|---|---|---|---|")
    baseline = {}
    for name, preset, options, paper in ROWS:
        ours = {cell: count(preset, options, cell, source_vocab, args.target_vocab) for cell in ("gru", "lstm")}
        baseline = baseline or ours
        ratio = "n/a" if paper is None else f"{ours['gru'] / paper:.3f}"
        print(f"| {name} | {millions(paper)} | {millions(ours['gru'])} | {millions(ours['lstm'])} | {ratio} | "
              f"{'n/a' if paper is None else f'{(paper - PAPER_BASELINE) / 1e6:+.2f}M'} | "
              f"{(ours['gru'] - baseline['gru']) / 1e6:+.2f}M | {(ours['lstm'] - baseline['lstm']) / 1e6:+.2f}M |")


if __name__ == "__main__":
    main()
