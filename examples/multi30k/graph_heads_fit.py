"""Can a Dyn-STGCD model's graph learn its gold heads at all? Fit a few sentences of a data-bin (the same batch
at every step, teacher-forced tokens as in training, the syntax criterion: cross-entropy plus the weighted graph
loss) and print, every --every steps, how many piece rows of the last step's graph (the rows the decoder reads
its heads from, and A's) have their largest entry outside the diagonal at the gold head's column (piece level, as
eq. 9's gold graph: a later piece's head is its word's first piece, the root's is BOS) beside the losses. A
decoder that can predict heads should memorize a handful of sentences; the paper's consistency figure (95.67% UAS,
appendix B.3) needs far more than that.

  python examples/multi30k/graph_heads_fit.py DATA_BIN -s en -t de --steps 300 -- --arch dyn_stgcd_multi30k \\
      [--dyn-stgcd-graph-attention gatv2] [--dyn-stgcd-graph-loss-weight 30]

Everything after `--` goes to fairseq's training parser (architecture and model options; dropout is 0 unless
given). Output: one JSON line per report, {"step", "head_accuracy", "adjacency_head_accuracy", "loss", "nll_loss",
"graph_loss"}.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def head_accuracy(adjacency: torch.Tensor, gold: torch.Tensor, node_mask: torch.Tensor) -> float:
    """Percent of the real non-BOS rows of `adjacency` (B, n, n) whose largest entry off the diagonal (over the
    real columns) is at the column of the gold graph's head (`gold` (B, n, n), one 1 off the diagonal per row)."""
    eye = torch.eye(adjacency.size(1), dtype=torch.bool, device=adjacency.device).unsqueeze(0)
    columns = node_mask.unsqueeze(1)
    predicted = adjacency.float().masked_fill(eye | ~columns, float("-inf")).argmax(-1)
    heads = gold.float().masked_fill(eye | ~columns, 0.0).argmax(-1)
    rows = node_mask.clone()
    rows[:, 0] = False  # BOS stands for the root: it has no head
    return 100.0 * float(((predicted == heads) & rows).sum()) / max(1, int(rows.sum()))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("-s", "--source-lang", required=True)
    parser.add_argument("-t", "--target-lang", required=True)
    parser.add_argument("--split", default="valid")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--min-tokens", type=int, default=10, help="target length in pieces (with EOS)")
    parser.add_argument("--max-tokens", type=int, default=14)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    args, model_args = parser.parse_known_args(argv)
    model_args = [a for a in model_args if a != "--"]

    import fairseq_syntax  # noqa: F401  (registers the task, models and criterion)
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_syntax.modules.dyn_stgcd.target_graph import gold_target_graph

    torch.manual_seed(args.seed)
    dropout = [] if "--dropout" in model_args else ["--dropout", "0"]
    train_args = options.parse_args_and_arch(options.get_training_parser(), [
        args.data_bin, "--user-dir", str(REPO / "fairseq_syntax"), "--task", "syntax_translation",
        "-s", args.source_lang, "-t", args.target_lang, "--cpu", "--criterion", "syntax_label_smoothed_cross_entropy",
        "--label-smoothing", "0.1", *dropout, *model_args])
    cfg = convert_namespace_to_omegaconf(train_args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    if not getattr(model.decoder, "predicts_graph", False):
        raise SystemExit(f"--arch {cfg.model._name}: its decoder predicts no graph (use a dyn_stgcd architecture)")
    criterion = task.build_criterion(cfg.criterion)
    task.load_dataset(args.split)
    dataset = task.dataset(args.split)
    chosen = [i for i in range(len(dataset))
              if args.min_tokens <= len(dataset[i]["target"]) <= args.max_tokens][:args.sentences]
    if not chosen:
        raise SystemExit(f"{args.data_bin} {args.split}: no sentence of {args.min_tokens}-{args.max_tokens} pieces")
    sample = dataset.collater([dataset[i] for i in chosen])
    net_input = sample["net_input"]
    prev = net_input["prev_output_tokens"]
    node_mask = prev.ne(model.decoder.padding_idx)
    gold = gold_target_graph(net_input["prev_parent_first"], net_input["prev_word_ids"], node_mask)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    started, logged = time.time(), {}
    for step in range(args.steps + 1):
        if step % args.every == 0 or step == args.steps:
            model.eval()
            with torch.no_grad():
                _, extra = model(**net_input)
            # the losses are those of the last training step (none before the first)
            losses = {name: round(float(logged[key]), 3) for name, key in
                      (("loss", "loss"), ("nll_loss", "nll_loss"), ("graph_loss", "aux_target_graph")) if key in logged}
            # the rows the heads are read from (the decoder's head_scores: --dyn-stgcd-heads-from), and A's
            accuracy = round(head_accuracy(extra.get("head_scores", extra["adjacency"]), gold, node_mask), 2)
            on_adjacency = round(head_accuracy(extra["adjacency"], gold, node_mask), 2)
            print(json.dumps({"step": step, "head_accuracy": accuracy, "adjacency_head_accuracy": on_adjacency,
                              **losses,
                              "seconds": round(time.time() - started)}), flush=True)
        if step == args.steps:
            break
        model.train()
        loss, _, logged = criterion(model, sample)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    sys.exit(main())
