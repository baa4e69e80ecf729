"""`fairseq-syntax-evaluate attention`: plot one encoder self-attention head of a trained checkpoint over one
sentence of a data-bin split or over a raw sentence (parsed as fairseq-interactive parses it; PASCAL's syntax
heads: layer 0, the first heads), and save all heads' weights to attention.npz, which the scoring command's
--attention plots again (`load_attention`).

    fairseq-syntax-evaluate attention --path CHECKPOINT --data-bin DATA_BIN --index 0 --layer 0 --head 0 --out-dir D
    fairseq-syntax-evaluate attention --path CHECKPOINT --data-bin DATA_BIN --sentence "A dog runs." --out-dir D
"""
import argparse
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from .metrics import EvaluationError
from .reporting import plots
from .system_outputs import read_text_lines


def load_attention(path: Path, head: Optional[int] = None):
    """(weights 2-D, query tokens, key tokens, highlight) from an .npz with `weights` ((T, S), or (H, T, S) with a
    head index), `query_tokens`, optional `key_tokens` and optional `highlight` (column per row, -1 = none)."""
    if not Path(path).is_file():
        raise EvaluationError(f"attention file not found: {path}")
    data = np.load(path, allow_pickle=False)
    for key in ("weights", "query_tokens"):
        if key not in data:
            raise EvaluationError(f"{path}: no {key!r} array (it has {', '.join(data.files)})")
    weights = data["weights"]
    if weights.ndim == 3:
        if head is None:
            raise EvaluationError(f"{path}: weights of {weights.shape[0]} heads; choose one with --attention-head")
        weights = weights[head]
    query = [str(t) for t in data["query_tokens"]]
    key_tokens = [str(t) for t in data["key_tokens"]] if "key_tokens" in data else None
    highlight = [None if int(c) < 0 else int(c) for c in data["highlight"]] if "highlight" in data else None
    return weights, query, key_tokens, highlight


def encoder_self_attention(checkpoint: Path, data_bin: Path, split: str = "test", index: int = 0,
                           layer: int = 0, sentence: Optional[str] = None) -> Dict[str, object]:
    """Encoder self-attention of every head of one layer over one sentence of a data-bin split (or over the raw
    `sentence`, encoded and parsed as fairseq-interactive does), from a trained
    checkpoint (CPU, no dropout). Returns {"weights": (heads, T, T) array, "query_tokens"/"key_tokens": the
    source pieces with </s>, "highlight": per piece the (rounded) position of its syntactic parent, -1 when the
    model takes no parents (src_parent_middle_halves, PASCAL), "syntax_heads": how many leading heads of this layer
    are syntax heads (0 if none), "text": the sentence}."""
    import torch
    from fairseq import checkpoint_utils

    import fairseq_syntax  # noqa: F401  (registers the task and models)

    if not Path(checkpoint).is_file():
        raise EvaluationError(f"checkpoint not found: {checkpoint}")
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)],
                                                                       arg_overrides={"data": str(data_bin)})
    model = models[0].eval()
    if sentence is not None:
        encoded = task.encode_raw([sentence])[0]
        if encoded.error is not None:
            raise EvaluationError(f"--sentence {sentence!r}: {encoded.error}")
        dataset, index = task.build_dataset_for_inference([encoded.tokens], [encoded.tokens.numel()]), 0
    else:
        task.load_dataset(split)
        dataset = task.dataset(split)
        if not 0 <= index < len(dataset):
            raise EvaluationError(f"--index {index}: the {split} split has {len(dataset)} sentences")
    layers = model.encoder.layers
    if not -len(layers) <= layer < len(layers):
        raise EvaluationError(f"--layer {layer}: the encoder has {len(layers)} layers")
    layer %= len(layers)  # -1: the top layer
    sample = dataset.collater([dataset[index]])
    net_input = {k: v for k, v in sample["net_input"].items() if k != "prev_output_tokens"}
    attention = layers[layer].self_attn
    if attention is None:
        raise EvaluationError(f"--layer {layer}: its syntax mechanism replaces self-attention; there are no "
                              f"attention weights to plot")
    # torch's module hooks (no patched method): the pre-hook asks the layer's call for every head's weights, the
    # forward hook keeps them
    captured = []

    def ask_for_head_weights(module, args, kwargs):
        return args, {**kwargs, "need_weights": True, "need_head_weights": True}

    def keep_weights(module, args, output):
        captured.append(output[1])

    hooks = [attention.register_forward_pre_hook(ask_for_head_weights, with_kwargs=True),
             attention.register_forward_hook(keep_weights)]
    original_skip = getattr(attention, "skip_embed_dim_check", False)
    attention.skip_embed_dim_check = True  # keeps fairseq off torch's fused path, which only returns mean weights
    try:
        with torch.no_grad():
            model.encoder(**net_input)
    finally:
        for hook in hooks:
            hook.remove()
        attention.skip_embed_dim_check = original_skip
    weights = captured[0][:, 0].float().numpy()  # (H, T, T)
    tokens = [task.source_dictionary[int(t)] for t in net_input["src_tokens"][0]]
    halves = net_input.get("src_parent_middle_halves")  # twice the parent's middle position
    highlight = [-1] * len(tokens) if halves is None else [int(round(int(h) / 2)) for h in halves[0]]
    modifier = getattr(attention, "score_modifier", None)
    syntax_heads = getattr(modifier, "num_syntax_heads", attention.num_heads) if modifier is not None else 0
    text_path = Path(data_bin) / f"{split}.{task.cfg.source_lang}.txt"
    if sentence is not None:
        text = sentence
    else:
        text = read_text_lines(text_path)[index] if text_path.is_file() else ""
    return {"weights": weights, "query_tokens": tokens, "key_tokens": tokens, "highlight": highlight,
            "syntax_heads": syntax_heads, "layer": layer, "index": index, "text": text}


def attention_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fairseq-syntax-evaluate attention",
                                     description="Plot one encoder self-attention head over one sentence.")
    parser.add_argument("--path", required=True, help="checkpoint")
    parser.add_argument("--data-bin", required=True)
    parser.add_argument("--gen-subset", default="test")
    parser.add_argument("--index", type=int, default=0, help="sentence (line of {split}.{src}.txt)")
    parser.add_argument("--sentence", help="a raw source sentence instead of a split's sentence (parsed with the "
                                           "data-bin's parser when the model reads syntax)")
    parser.add_argument("--layer", type=int, default=0,
                        help="encoder layer (PASCAL's syntax layer: 0; negative counts from the top: -1 the last)")
    parser.add_argument("--head", type=int, default=0, help="head (PASCAL's syntax heads come first)")
    parser.add_argument("--out-dir", required=True, help="gets attention.npz (all heads) and attention.png")
    return parser


def run_attention(args) -> Dict[str, object]:
    found = encoder_self_attention(Path(args.path), Path(args.data_bin), args.gen_subset, args.index, args.layer,
                                   args.sentence)
    weights = found["weights"]
    if not 0 <= args.head < weights.shape[0]:
        raise EvaluationError(f"--head {args.head}: layer {args.layer} has {weights.shape[0]} heads")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    np.savez(out_dir / "attention.npz", weights=weights, query_tokens=np.array(found["query_tokens"]),
             key_tokens=np.array(found["key_tokens"]), highlight=np.array(found["highlight"]))
    kind = "syntax head" if args.head < found["syntax_heads"] else "head"
    highlight = [None if c < 0 else c for c in found["highlight"]]
    where = "raw sentence" if args.sentence is not None else f"{args.gen_subset} sentence {args.index}"
    title = f"encoder layer {args.layer}, {kind} {args.head}, {where} (red: parent)"
    path = plots().plot_attention_heatmap(weights[args.head], found["query_tokens"], found["key_tokens"],
                                          out_dir / "attention.png", title, highlight)
    print(f"{path} ({kind}); weights of all {weights.shape[0]} heads in {out_dir / 'attention.npz'}")
    return found
