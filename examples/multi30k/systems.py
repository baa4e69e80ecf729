"""The systems that the comparison run (examples/multi30k/compare.py) and the benchmark (bench/bench.py) put side
by side: the vanilla baseline and every syntax method, each as its Multi30k-sized architecture preset (the same
sizes, fairseq_syntax/models/presets/sizes.py). A new method joins both by adding its line here."""
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

BASELINE = "vanilla"
MULTI30K_SYSTEMS = {
    BASELINE: ["--arch", "transformer_multi30k"],  # stock fairseq transformer
    "pascal": ["--arch", "transformer_pascal_multi30k"],
    # the PASCAL paper's variants: scores plus the density (appendix B), all weight on the parent (Table 3b)
    "pascal_add": ["--arch", "transformer_pascal_multi30k", "--pascal-combination", "add"],
    "pascal_parent_only": ["--arch", "transformer_pascal_multi30k", "--pascal-parent-only"],
    "lisa": ["--arch", "transformer_lisa_multi30k"],
    "sh": ["--arch", "transformer_sh_multi30k"],  # Sennrich & Haddow label embeddings
    "multitask": ["--arch", "transformer_multitask_multi30k"],  # Currey & Heafield: a stock transformer ...
    # ... at the budget that gives it as many translation pairs as the others: its data-bin holds every pair twice
    # (to translate, and to parse), so an update carries fewer translations (compare.py scales its updates)
    "multitask_pairs": ["--arch", "transformer_multitask_multi30k"],
    "ldd": ["--arch", "transformer_ldd_multi30k"],  # Liu & Sima'an, on SuPar's distributions ...
    "udp": ["--arch", "transformer_ldd_multi30k", "--ldd-variant", "udp"],  # ... and its 1-best parse ablation
    "gcn": ["--arch", "transformer_gcn_multi30k"],  # Bastings et al.'s gated GCN after self-attention (Ding & Tao)
    "birnn_gcn": ["--arch", "transformer_birnn_gcn_multi30k"],  # self-attention replaced by BiGRU + GCN
    "birnn": ["--arch", "transformer_birnn_multi30k"],  # ... by the BiGRU alone (its control: no syntax)
    "rgse": ["--arch", "transformer_rgse_multi30k"],  # Ding & Tao's recurrent graph syntax encoder
    # Choshen & Abend's Linearized ablation: a stock decoder trained on the target tree's transition sequence
    "linearized": ["--arch", "transformer_linearized_multi30k"],
    # ... and their decoders on the same sequences (Table 2): BiTran re-encodes the prefix bidirectionally at every
    # step (exact: every prefix a view; _k4: 4 sampled prefixes per sentence per update), PARENT and the GCN
    # decoder read the graph generated so far; -Labels and -Gates are the GCN's ablations
    "bitran": ["--arch", "transformer_bitran_multi30k"],
    "bitran_k4": ["--arch", "transformer_bitran_multi30k", "--bitran-prefixes", "4"],
    "parent": ["--arch", "transformer_parent_multi30k"],
    "gcn_decoder": ["--arch", "transformer_gcn_decoder_multi30k"],
    # exact re-encoding trains at ~1/40 of Linearized's speed on a CPU (docs/run-log.md, 2026-11-27: ~30 h for the cpu
    # profile's 1,600 updates): the campaign's rows of these decoders sample 4 prefixes per sentence, as bitran_k4
    "parent_k4": ["--arch", "transformer_parent_multi30k", "--bitran-prefixes", "4"],
    "gcn_decoder_k4": ["--arch", "transformer_gcn_decoder_multi30k", "--bitran-prefixes", "4"],
    # the same, trained on as many target positions as the causal decoders at the profile's budget (EQUAL_POSITIONS)
    "bitran_k4_positions": ["--arch", "transformer_bitran_multi30k", "--bitran-prefixes", "4"],
    "parent_k4_positions": ["--arch", "transformer_parent_multi30k", "--bitran-prefixes", "4"],
    "gcn_decoder_k4_positions": ["--arch", "transformer_gcn_decoder_multi30k", "--bitran-prefixes", "4"],
    "gcn_decoder_unlabeled": ["--arch", "transformer_gcn_decoder_multi30k", "--no-decoder-gcn-labels"],
    "gcn_decoder_ungated": ["--arch", "transformer_gcn_decoder_multi30k", "--no-decoder-gcn-labels",
                            "--no-decoder-gcn-gates"],
    "gcn_decoder_unlabeled_k4": ["--arch", "transformer_gcn_decoder_multi30k", "--no-decoder-gcn-labels",
                                 "--bitran-prefixes", "4"],
    "gcn_decoder_ungated_k4": ["--arch", "transformer_gcn_decoder_multi30k", "--no-decoder-gcn-labels",
                               "--no-decoder-gcn-gates", "--bitran-prefixes", "4"],
    # every position trained at every update, the prefix re-encoded every 4 target columns and decoded causally in
    # between (training and generation alike; --reencode-every 1 is the paper's BiTran): the campaign's rows of
    # these decoders, at ~2-3x Linearized's cost per update where exact re-encoding costs ~12-18x
    "bitran_b4": ["--arch", "transformer_bitran_multi30k", "--reencode-every", "4"],
    "parent_b4": ["--arch", "transformer_parent_multi30k", "--reencode-every", "4"],
    "gcn_decoder_b4": ["--arch", "transformer_gcn_decoder_multi30k", "--reencode-every", "4"],
    "gcn_decoder_unlabeled_b4": ["--arch", "transformer_gcn_decoder_multi30k", "--no-decoder-gcn-labels",
                                 "--reencode-every", "4"],
    "gcn_decoder_ungated_b4": ["--arch", "transformer_gcn_decoder_multi30k", "--no-decoder-gcn-labels",
                               "--no-decoder-gcn-gates", "--reencode-every", "4"],
    # the GCN decoder re-encoding the prefix at every arc token (where its graph changes) and causal in between: no
    # view's graph is stale (at B = 4 the GCN decoder learns less from its graph, docs/results.md); out of the
    # profiles' plans
    "gcn_decoder_arcs": ["--arch", "transformer_gcn_decoder_multi30k", "--reencode-at-arcs"],
    # re-encoded once per run of arc tokens (at the first token after it): the words' views hold their whole graph,
    # at fewer decoder columns than B = 4 (docs/results.md); out of the profiles' plans
    "gcn_decoder_after_arcs": ["--arch", "transformer_gcn_decoder_multi30k", "--reencode-after-arcs"],
    # Li et al.'s Dyn-STGCD: the translation and its graph generated together, on the target parse (no transitions),
    # and the ablations of the paper's Figure 5 (spatial / temporal convolution, dynamic W, dynamic A) and Table 4
    # (random walks: none, or on the target graph only)
    "dyn_stgcd": ["--arch", "dyn_stgcd_multi30k"],
    "dyn_stgcd_no_spatial": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-ablations", "no_spatial"],
    "dyn_stgcd_no_temporal": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-ablations", "no_temporal"],
    "dyn_stgcd_static_weight": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-ablations", "static_weight"],
    "dyn_stgcd_static_adjacency": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-ablations", "static_adjacency"],
    "dyn_stgcd_no_walks": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-no-source-walks",
                           "--dyn-stgcd-no-target-walks"],
    "dyn_stgcd_no_source_walks": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-no-source-walks"],
    # eq. 7's graph attention with Dozat & Manning's biaffine scores instead of the default GATv2 ones (two matrix
    # products, no (n, n, G) tensor per step and block). `dyn_stgcd_gatv2`, archived in
    # results/archive/cpu.before-issue77/, was the paper's other equations with GATv2 scores; GATv2 is the default now
    "dyn_stgcd_biaffine": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-graph-attention", "biaffine"],
    # the graph loss at a tenth of its default weight: at 32-wide nodes the weight-1 graph loss may take capacity from
    # the translation (a 600-update race put weight 0.1 level with dyn_stgcd_no_spatial's valid NLL, docs/results.md)
    "dyn_stgcd_graph_loss_0.1": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-graph-loss-weight", "0.1"],
    # a middle weight: 0.1 bought BLEU (27.69 vs 25.35, three seeds each) and cost heads (forced UAS 70.6 vs 84.8);
    # 0.3 asks whether one weight keeps UAS >= 80 and BLEU above weight 1's
    "dyn_stgcd_graph_loss_0.3": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-graph-loss-weight", "0.3"],
    # nodes 128 wide around the preset's 32-wide graph (--dyn-stgcd-node-dim): the decoder widened where width is
    # cheap (MLP, source attention, temporal convolution), not in the evolving weights (G^3), and its no-graph
    # ablation at the same width; a 600-update race put them far under the 32-wide rows' valid NLL
    # (docs/results.md); out of the profiles' plans
    "dyn_stgcd_nodes128": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-node-dim", "128"],
    "dyn_stgcd_nodes128_no_spatial": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-node-dim", "128",
                                      "--dyn-stgcd-ablations", "no_spatial"],
    # the paper's equations as printed (no residual around eq. 8, GAT scores, eq. 7's next-step edges, smooth-L1):
    # the form whose graph collapses (issue 77), kept to show what the deviations buy
    "dyn_stgcd_paper": ["--arch", "dyn_stgcd_multi30k", "--dyn-stgcd-no-residual", "--dyn-stgcd-graph-attention",
                        "gat", "--dyn-stgcd-new-node-edges", "next_step", "--dyn-stgcd-graph-loss", "smooth_l1"],
}
# Systems trained for the same number of translation pairs as the baseline's budget, not the same updates:
# compare.py multiplies an update budget by (batches per epoch of the system's data-bin) / (those of the shared
# one), both counted as fairseq-train makes them (an epoch holds every translation pair once in either)
EQUAL_PAIRS = ("multitask_pairs",)
# Sampled-prefix systems trained on as many target positions as a decoder with a loss at every target position
# (Linearized; the same decoder re-encoding every prefix) at the baseline's budget, not the same updates: k sampled
# prefixes give a loss at min(k, n) of a target's n positions, so compare.py multiplies an update budget by the
# positions of an epoch over the sampled ones, counted on the batches fairseq-train makes (~7x for k = 4 on the cpu
# profile's transition data-bin)
EQUAL_POSITIONS = ("bitran_k4_positions", "parent_k4_positions", "gcn_decoder_k4_positions")
TRANSITION_SYSTEMS = ("linearized", "bitran", "bitran_k4", "parent", "parent_k4", "gcn_decoder", "gcn_decoder_k4",
                      "gcn_decoder_unlabeled", "gcn_decoder_ungated", "gcn_decoder_unlabeled_k4",
                      "gcn_decoder_ungated_k4", *EQUAL_POSITIONS, "bitran_b4", "parent_b4", "gcn_decoder_b4",
                      "gcn_decoder_unlabeled_b4", "gcn_decoder_ungated_b4", "gcn_decoder_arcs",
                      "gcn_decoder_after_arcs")
DYN_STGCD_SYSTEMS = tuple(name for name in MULTI30K_SYSTEMS if name.startswith("dyn_stgcd"))
# the Dyn-STGCD systems without a spatial layer: no graph, so no trees
DYN_STGCD_WITHOUT_GRAPH = ("dyn_stgcd_no_spatial", "dyn_stgcd_nodes128_no_spatial")
# The recurrent rows of the RGSE paper's Table 2 (fairseq_syntax/models/presets/lstm.py) in the paper's GRU form
# (Bahdanau et al.'s encoder-decoder; `--rnn-cell lstm` gives fairseq's LSTM form). Not in MULTI30K_SYSTEMS yet:
# compare.py plots every system's encoder self-attention, which a recurrent encoder has none of, and bench.py would
# hold them to a Transformer's speed; they join once both know about them.
RECURRENT_SYSTEMS = {
    "rnn_birnn2": ["--arch", "rnn_birnn2_multi30k"],  # "Bi-RNN (2 layers encoder)", no syntax
    "rnn_gcn": ["--arch", "rnn_gcn_multi30k"],  # Bi-RNN + GCN (Bastings et al.)
    "rnn_rgse": ["--arch", "rnn_rgse_multi30k"],  # Bi-RNN + bi-total RGSE, gated integration and residual
    "rnn_rgse_forward": ["--arch", "rnn_rgse_multi30k", "--rgse-variant", "forward"],
    "rnn_rgse_bi_past": ["--arch", "rnn_rgse_multi30k", "--rgse-variant", "bi-past"],
    "rnn_rgse_bi_future": ["--arch", "rnn_rgse_multi30k", "--rgse-variant", "bi-future"],
}


# The encoder layer whose head 0 the comparison plots: 0 (PASCAL's syntax layer), but the top layer (-1) for systems
# whose mechanism replaces self-attention in the lower layers (no attention weights there)
ATTENTION_LAYER = {"birnn_gcn": -1, "birnn": -1, "rgse": -1}


@dataclass(frozen=True)
class OwnDataBin:
    """A data-bin a system needs beside the shared one, made from the same lines with the shared sentencepiece
    model (so hypotheses decode and score alike): `name` (systems with the same name share it), the
    fairseq-syntax-preprocess options that make it, and whether its source parser must be SuPar (LDD's
    distributions are a SuPar biaffine parser's scores)."""

    name: str
    options: Tuple[str, ...]
    supar_source: bool = False
    target_parser: bool = False  # parses the target side (`target_parser` of own_data_bin_command)
    writes_trees: bool = True  # with target_parser: the system generates trees (fairseq-generate --trees-out)
    # its trees can be read on the references too (a graph predicted beside the words it is given, not a transition
    # sequence that would be the reference's tree itself): Li et al.'s consistency measure (appendix B.3)
    trees_on_references: bool = False


# Systems whose method lives in the data (or reads the target parse).
OWN_DATA_BINS = {
    "multitask": OwnDataBin("multitask", ("--multitask-parse",)),
    "multitask_pairs": OwnDataBin("multitask", ("--multitask-parse",)),
    "ldd": OwnDataBin("ldd", ("--source-ldd",), supar_source=True),
    "udp": OwnDataBin("ldd", ("--source-ldd",), supar_source=True),  # the same parser's 1-best, as in the paper
    # target tokens = transitions of the target parse; non-projective trees lifted, so no test line is dropped
    **{system: OwnDataBin("transitions", ("--target-transitions", "--projectivize"), target_parser=True)
       for system in TRANSITION_SYSTEMS},
    # the target parse as channels (the gold graph of the graph loss); without spatial convolution no graph
    **{system: OwnDataBin("target-parse", (), target_parser=True, writes_trees=system not in DYN_STGCD_WITHOUT_GRAPH,
                          trees_on_references=system not in DYN_STGCD_WITHOUT_GRAPH)
       for system in DYN_STGCD_SYSTEMS},
}


def own_data_bin_command(system: str, shared: Path, destdir: Path, raw: Path, src: str, tgt: str, src_parser: str,
                         splits=("train", "valid", "test"), supar_parser: Optional[str] = None,
                         target_parser: Optional[str] = None) -> Optional[List]:
    """The fairseq-syntax-preprocess arguments of `system`'s own data-bin (written to `destdir`, see
    `own_data_bin_name`), or None if it trains on the shared one. A system that needs a SuPar source parser gets
    the shared data-bin's parser when that is SuPar, else `supar_parser` (spec `supar:PATH`); ValueError without.
    A system that parses the target side needs `target_parser` (a parser spec of the target language)."""
    own = OWN_DATA_BINS.get(system)
    if own is None:
        return None
    target = []
    if own.target_parser:
        if not target_parser:
            raise ValueError(f"system {system} needs a parser of the target language {tgt} (target_parser)")
        target = ["--target-parser", target_parser]
    if needs_other_supar_parser(system, src_parser):
        if not supar_parser:
            raise ValueError(f"system {system} needs a SuPar source parser; the shared data-bin's is {src_parser}")
        src_parser = supar_parser
    prefixes = {"train": "--trainpref", "valid": "--validpref", "test": "--testpref"}
    return ["-s", src, "-t", tgt, *[arg for split in splits for arg in (prefixes[split], raw / split)],
            "--source-parser", src_parser, "--spm-model", shared / "spm.model", "--destdir", destdir,
            "--workers", "2", *target, *own.options]


def needs_other_supar_parser(system: str, src_parser: str) -> bool:
    """Whether `system`'s own data-bin needs a SuPar source parser that the shared data-bin's parser is not."""
    own = OWN_DATA_BINS.get(system)
    return bool(own and own.supar_source and not src_parser.startswith("supar:"))


def own_data_bin_name(system: str) -> Optional[str]:
    own = OWN_DATA_BINS.get(system)
    return own.name if own else None


def sampled_prefixes(system: str) -> int:
    """The k of `system`'s --bitran-prefixes k (sampled prefixes per sentence); 0: none given (every position)."""
    args = MULTI30K_SYSTEMS[system]
    return int(args[args.index("--bitran-prefixes") + 1]) if "--bitran-prefixes" in args else 0
