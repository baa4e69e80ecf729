"""The Dyn-STGCD decoder (Li et al., "Neural Machine Translation with Dynamic Graph Convolutional Decoder", §3 and
appendix A), `--decoder-type dyn_stgcd` in the syntax transformer family: the target translation and its
syntactic graph generated together, one node per step.

Nodes are decoder columns (0 = BOS, which stands for the root; c = the token at column c) plus <sog>, the
mean-pooled encoder output, linked to every node and kept constant. Each of the L blocks (--decoder-layers, 4 in
the paper) runs, at step t over the nodes 0..t:
  spatial   the dynamic GCN (dyn_stgcd/dynamic_gcn.py: A_t refined from graph attention, W_t evolved by a GRU) on the
            block's input (Y^0 = 0), then eq. 8's MLP: of [Y || emb(token)] in the first block, of Y in the middle
            ones, of [Y || R^e || R_t] in the last, R_t the random-walk kernel of the step's graph (A^L_t, the
            convolved nodes) and R^e that of the source graph (encoder outputs, the source parse as undirected
            piece arcs), each against its own trainable hidden graphs (dyn_stgcd/random_walk_kernel.py; groups of
            --dyn-stgcd-hidden-graphs, walks of 0..--dyn-stgcd-walk-steps), each normalised by a LayerNorm;
            eq. 8 as a residual update by default (Y^l = X^l + MLP(...), X^l the block's input, the token
            embeddings in the first block; --dyn-stgcd-no-residual: the paper's Y^l = MLP(...), under which the
            nodes collapse into one vector and the graph learns its heads far slower, if at all);
  encoder   attention of the nodes to the encoder output (ours, --dyn-stgcd-encoder-attention, on by default: the
            paper's §2 decoder "generates the target tokens by attending the source context" but §3 names no
            attention; without one the source reaches the decoder only as <sog> and R^e);
  temporal  modules/dyn_stgcd/temporal_convolution.py (width-1 convolution, dilated causal convolution of dilation 2^l,
            basic GCN over A_t), as a residual block.
The prediction at column t is the last block's vector of node t. Graph loss (eq. 9's term, the `target_graph`
auxiliary loss of syntax_label_smoothed_cross_entropy, weight --dyn-stgcd-graph-loss-weight), at every step
against the gold graph of the nodes 0..t (row = dependent, 1 at its head's column and on the diagonal; pieces of a
word link to its first piece, appendix B.1; the root's first piece links to BOS), one value per step summed over
the target tokens like the translation loss: head_ce (default, ours) the mean over the rows whose gold head is
among the step's nodes of -log p(head) under the row's distribution (the last block's graph attention, or A_t's
row normalised off the diagonal: --dyn-stgcd-heads-from); smooth_l1 (the paper's) between A^L_t and the gold
graph, summed over each row's entries and averaged over the rows. The heads of a generated graph (--trees-out) are
read from the same rows at the hypothesis's last step, decoded into a maximum spanning tree. The options' defaults
are DynStgcdOptions' below; docs/methods.md names each deviation from the paper.

Where the equations allow no cache: every step re-encodes every node (W_t and A_t change every entry at every
step, so no node's vector from an earlier step can be reused); what is carried from step to step, in training and
in fairseq's beam search alike (one `step` function), is each block's W_{t-1}, A_{t-1}, outputs Y^l_{t-1} and the
entry value of new nodes. Training therefore runs the T steps in turn (about T^2/2 node-columns per sentence per
block; a sentence leaves the loop after its last real column), as beam search does.
"""
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import FairseqIncrementalDecoder
from fairseq.modules import PositionalEmbedding
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..modules.dyn_stgcd.dynamic_gcn import GRAPH_ATTENTION_SCORES, NEW_NODE_EDGES, DynamicGCNState, masked_log_softmax
from ..modules.dyn_stgcd.spatial_temporal_block import ABLATIONS, FIRST_EDGE_SCORES, Block, WalkFeatures
from ..modules.dyn_stgcd.target_graph import (
    gold_heads, gold_target_graph, graph_loss, head_loss, piece_graph, predicted_tree,
)
from .decoders import ADJACENCY, SyntaxDecoder, register_decoder

GRAPH_LOSS = "target_graph"
GRAPH_LOSSES = ("head_ce", "smooth_l1")
HEADS_FROM = ("attention", "adjacency")
# 2: residual, own-step edges, per-row scores, the head cross-entropy as defaults (a state dict without it is older)
GRAPH_VERSION = 2
BLOCK_STACKED = ("source_keys", "source_values")  # context entries (blocks, B, ...)
STATE_KEY = "dyn_stgcd"


def parse_hidden_graphs(spec: str) -> List[Tuple[int, int]]:
    """"6x6,6x4" -> [(6 graphs, 6 nodes), (6 graphs, 4 nodes)]."""
    groups = []
    for part in str(spec).split(","):
        try:
            count, nodes = (int(v) for v in part.strip().lower().split("x"))
        except ValueError:
            raise ValueError(f"--dyn-stgcd-hidden-graphs {spec!r}: expected groups as COUNTxNODES, e.g. 6x6,6x4")
        if count < 1 or nodes < 1:
            raise ValueError(f"--dyn-stgcd-hidden-graphs {spec!r}: every group needs at least one graph of one node")
        groups.append((count, nodes))
    return groups


def select_rows(context: Dict[str, Tensor], rows: Tensor) -> Dict[str, Tensor]:
    """The source context of the given batch rows (beam reordering; rows leaving the training loop)."""
    return {name: value.index_select(1 if name in BLOCK_STACKED else 0, rows) for name, value in context.items()}


@dataclass
class DynStgcdOptions(FairseqDataclass):
    """The decoder's options (--dyn-stgcd-*), each default in this one place; docs/methods.md names each
    deviation from the paper."""
    dyn_stgcd_graph_dim: Optional[int] = field(default=None, metadata={"help": (
            'width of the graph nodes and evolving weights (default: --decoder-embed-dim; the weight GRU costs '
            '6 G^3 per sentence, step and block)')})
    dyn_stgcd_node_dim: Optional[int] = field(default=None, metadata={"help": (
            'width of the node vectors (the blocks\' MLP, source attention and temporal convolution; default: '
            '--dyn-stgcd-graph-dim, the paper\'s single width). Wider than the graph: the graph convolution runs on '
            'a projection of the nodes to the graph width and the graph attention reads the nodes whole, so the '
            'nodes widen without the evolving weights\' G^3 (not in the paper: a cheaper form, docs/methods.md)')})
    dyn_stgcd_kernel_size: int = field(default=3, metadata={"help": (
            'kernel size of the dilated causal convolution')})
    dyn_stgcd_walk_steps: int = field(default=1, metadata={"help": (
            "random walks of 0..P steps (the paper's P = {0, 1})")})
    dyn_stgcd_hidden_graphs: str = field(default='6x6,6x4', metadata={"help": (
            "groups of trainable hidden graphs, COUNTxNODES (the paper's)")})
    dyn_stgcd_graph_loss: ChoiceEnum(GRAPH_LOSSES) = field(default='head_ce', metadata={"help": (
            "the graph loss of every step: head_ce (ours: the cross-entropy of each row's gold head under the"
            " row's distribution over the step's nodes, see --dyn-stgcd-heads-from) or smooth_l1 (the paper's"
            " eq. 9 on A_t, summed over a row's entries, averaged over the rows; heads then read from A)")})
    dyn_stgcd_graph_loss_weight: float = field(default=1.0, metadata={"help": (
            'weight of the graph loss')})
    dyn_stgcd_heads_from: ChoiceEnum(HEADS_FROM) = field(default='attention', metadata={"help": (
            "the rows that the head_ce loss trains and --trees-out reads: attention (the last block's graph-"
            'attention coefficients of the step, every row of which is computed at that step with own_step '
            "edges) or adjacency (A_t's rows normalised off the diagonal); adjacency wherever there is no "
            'attention over every node of a step (smooth_l1, next_step, static_adjacency)')})
    dyn_stgcd_teacher_forced_adjacency: bool = field(default=False, metadata={"help": (
            "eq. 7 refines the gold graph of the previous step instead of the model's own (training; "
            'generation has no gold graph and uses its own)')})
    dyn_stgcd_no_source_walks: bool = field(default=False, metadata={"help": (
            "leave R^e out of eq. 8 (the paper's 'w/o source of P' ablation; the source parse is then not "
            'needed)')})
    dyn_stgcd_no_target_walks: bool = field(default=False, metadata={"help": (
            "leave R_t out of eq. 8 (with --dyn-stgcd-no-source-walks: the paper's 'w/o P')")})
    dyn_stgcd_ablations: Optional[str] = field(default=None, metadata={"help": (
            "the paper's Figure 5 ablations, comma-separated: no_spatial (no graph convolution, so no graph "
            'and no graph loss), no_temporal, static_weight (no GRU over W), static_adjacency (no refinement '
            'of A from the nodes)')})
    dyn_stgcd_graph_attention: ChoiceEnum(GRAPH_ATTENTION_SCORES) = field(default='gatv2', metadata={"help": (
            "scores of eq. 7's graph-attention coefficients: gat (the paper's, Velickovic et al.; every row "
            'ranks the candidate nodes alike, so the graph gives every word the same head), gatv2 (Brody et '
            "al.'s a . LeakyReLU(W_i y_i + W_j y_j), each row its own ranking) or biaffine (Dozat & "
            "Manning's, SuPar's arc scorer); gatv2 and biaffine are not in the paper")})
    dyn_stgcd_new_node_edges: ChoiceEnum(NEW_NODE_EDGES) = field(default='own_step', metadata={"help": (
            "own_step (the paper's inference section: the node that joins at step t gets its edges at step t,"
            " Ã_t computed from the block's inputs of step t) or next_step (eq. 7 as printed: Ã_{t-1} from "
            "the block's outputs of step t-1, so the newest node's row is content-free and the last word is "
            'read as the root)')})
    dyn_stgcd_no_residual: bool = field(default=False, metadata={"help": (
            "eq. 8 as printed, Y^l = MLP(...): without the residual Y^l = X^l + MLP(...) (X^l the block's "
            'input, the token embeddings in the first block) every node gets the same vector, and with 3 '
            'blocks or more the graph learns its heads far slower, if at all')})
    dyn_stgcd_no_encoder_attention: bool = field(default=False, metadata={"help": (
            'no attention to the encoder output in the blocks (the source reaches the decoder as <sog> and '
            'R^e only)')})


@register_decoder("dyn_stgcd")
class DynStgcdDecoder(FairseqIncrementalDecoder, SyntaxDecoder):
    takes_batch_features = True

    options = DynStgcdOptions

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(dictionary)
        self.cfg = cfg
        embed_dim = embed_tokens.embedding_dim
        graph_dim = int(self.option(cfg, "dyn_stgcd_graph_dim") or embed_dim)
        dim = int(self.option(cfg, "dyn_stgcd_node_dim") or graph_dim)  # the nodes' width
        if dim < graph_dim:
            raise ValueError(f"--dyn-stgcd-node-dim {dim} is narrower than the graph (--dyn-stgcd-graph-dim "
                             f"{graph_dim}): the nodes are projected down to the graph's width, never up")
        self.dim, self.graph_dim = dim, graph_dim
        self.padding_idx = embed_tokens.padding_idx
        self.max_target_positions = cfg.max_target_positions
        self.embed_tokens = embed_tokens
        self.embed_scale = 1.0 if cfg.no_scale_embedding else embed_dim ** 0.5
        self.embed_positions = (PositionalEmbedding(cfg.max_target_positions, embed_dim, self.padding_idx,
                                                    learned=cfg.decoder.learned_pos)
                                if not cfg.no_token_positional_embeddings else None)
        self.dropout = nn.Dropout(cfg.dropout)
        self.embed_to_graph = nn.Linear(embed_dim, dim) if dim != embed_dim else None
        encoder_dim = cfg.encoder.embed_dim
        ablations = [a.strip() for a in (self.option(cfg, "dyn_stgcd_ablations") or "").split(",") if a.strip()]
        unknown = sorted(set(ablations) - set(ABLATIONS))
        if unknown:
            raise ValueError(f"--dyn-stgcd-ablations: {unknown} not among {list(ABLATIONS)}")
        self.predicts_graph = "no_spatial" not in ablations
        # <sog> enters the graph convolutions only (none without the spatial layer)
        self.sog = nn.Linear(encoder_dim, graph_dim) if self.predicts_graph else None
        walk_steps = int(self.option(cfg, "dyn_stgcd_walk_steps"))
        groups = parse_hidden_graphs(self.option(cfg, "dyn_stgcd_hidden_graphs"))
        self.source_walks = (None if self.option(cfg, "dyn_stgcd_no_source_walks")
                             else WalkFeatures(encoder_dim, groups, walk_steps))
        # the target walks read the last block's convolved nodes: graph-wide, or the nodes themselves (no graph)
        target_walks = (None if self.option(cfg, "dyn_stgcd_no_target_walks") else
                        WalkFeatures(graph_dim if self.predicts_graph else dim, groups, walk_steps))
        walk_dims = sum(w.dim for w in (self.source_walks, target_walks) if w is not None)
        layers = cfg.decoder.layers
        kernel_size = int(self.option(cfg, "dyn_stgcd_kernel_size"))
        encoder_attention = not (no_encoder_attn or self.option(cfg, "dyn_stgcd_no_encoder_attention"))
        new_node_edges = self.option(cfg, "dyn_stgcd_new_node_edges")
        self.residual = not self.option(cfg, "dyn_stgcd_no_residual")
        self.graph_attention = self.option(cfg, "dyn_stgcd_graph_attention")
        self.new_node_edges = new_node_edges
        self.blocks = nn.ModuleList(
            Block(i, layers, dim, encoder_dim, cfg.decoder.attention_heads, kernel_size, cfg.dropout,
                  cfg.attention_dropout, encoder_attention, walk_dims, target_walks if i == layers - 1 else None,
                  ablations, self.graph_attention, new_node_edges, self.residual, graph_dim=graph_dim)
            for i in range(layers))
        self.graph_loss = self.option(cfg, "dyn_stgcd_graph_loss")
        if self.graph_loss not in GRAPH_LOSSES:
            raise ValueError(f"--dyn-stgcd-graph-loss {self.graph_loss!r}: not among {list(GRAPH_LOSSES)}")
        # the rows heads are learnt in and read from: the attention only where it covers every node of a step
        attention_everywhere = new_node_edges == "own_step" and "static_adjacency" not in ablations
        self.heads_from = ("attention" if self.graph_loss == "head_ce" and attention_everywhere
                           and self.option(cfg, "dyn_stgcd_heads_from") == "attention" else "adjacency")
        self.teacher_forced = bool(self.option(cfg, "dyn_stgcd_teacher_forced_adjacency"))
        self.offload_activations = bool(getattr(cfg, "offload_activations", False))
        self.checkpoint_blocks = bool(getattr(cfg, "checkpoint_activations", False)) or self.offload_activations
        self.graph_to_output = nn.Linear(dim, embed_dim) if dim != embed_dim else None
        if output_projection is None:
            output_projection = nn.Linear(embed_dim, len(dictionary), bias=False)
            if cfg.share_decoder_input_output_embed:
                output_projection.weight = embed_tokens.weight
            else:
                nn.init.normal_(output_projection.weight, mean=0, std=embed_dim ** -0.5)
        self.output_projection = output_projection
        # what the model asks the dataset for: the source parse (R^e), and in training the gold target graph
        self.syntax_features = ("src_parent_first", "src_word_ids") if self.source_walks is not None else ()
        self.source_features = self.syntax_features
        self.optional_syntax_features = ("prev_parent_first", "prev_word_ids") if self.predicts_graph else ()
        self.auxiliary_loss_names = (GRAPH_LOSS,)
        self.auxiliary_loss_weights = {GRAPH_LOSS: float(self.option(cfg, "dyn_stgcd_graph_loss_weight"))}
        # marks a checkpoint of this version (upgrade_state_dict_named): those before it lack it
        self.register_buffer("graph_version", torch.tensor(GRAPH_VERSION), persistent=True)

    def upgrade_state_dict_named(self, state_dict, name):
        """A checkpoint from before the residual, the own-step edges and GATv2 became the defaults (no
        graph_version) was trained with the paper's equations: it loads only into a decoder built with them, which
        the options passed at load time (fairseq's --model-overrides) must ask for; otherwise it would load into
        another computation, or fail on the attention's parameters."""
        prefix = f"{name}." if name else ""
        key = prefix + "graph_version"
        if key not in state_dict:
            papers_attention = any(k.startswith(prefix + "blocks.") and k.endswith(".attention.psi")
                                   for k in state_dict)
            if (self.residual or self.new_node_edges != "next_step"
                    or (papers_attention and self.graph_attention != "gat")):
                raise ValueError(
                    "a Dyn-STGCD checkpoint from before graph version 2 was trained with the paper's equations: load "
                    "it with --model-overrides \"{'dyn_stgcd_no_residual': True, 'dyn_stgcd_new_node_edges': "
                    "'next_step', 'dyn_stgcd_graph_attention': 'gat', 'dyn_stgcd_graph_loss': 'smooth_l1'}\" "
                    "(gatv2 if it was trained with --dyn-stgcd-graph-attention gatv2)")
            state_dict[key] = self.graph_version.detach().clone()
        return super().upgrade_state_dict_named(state_dict, name)

    def max_positions(self):
        return self.max_target_positions

    # ---- inputs ---------------------------------------------------------------------------------------------------

    def node_inputs(self, tokens: Tensor, last_only: bool = False) -> Tensor:
        """emb(token) of every node (B, n, G), or of the last one only (B, 1, G; beam search keeps the others):
        scaled embedding plus positions, dropout, projected to G."""
        x = self.embed_scale * self.embed_tokens(tokens[:, -1:] if last_only else tokens)
        if self.embed_positions is not None:
            positions = self.embed_positions(tokens)
            x = x + (positions[:, -1:] if last_only else positions)
        x = self.dropout(x)
        return self.embed_to_graph(x) if self.embed_to_graph is not None else x

    def source_context(self, encoder_out) -> Dict[str, Tensor]:
        """<sog>, R^e and the encoder output for the attention; computed once per sentence."""
        encoder = encoder_out["encoder_out"][0]  # (S, B, C)
        padding = encoder_out["encoder_padding_mask"][0] if encoder_out.get("encoder_padding_mask") else None
        real = (~padding).to(encoder) if padding is not None else encoder.new_ones(encoder.shape[1], encoder.shape[0])
        pooled = (encoder * real.t().unsqueeze(-1)).sum(dim=0) / real.sum(dim=1, keepdim=True).clamp(min=1)
        context = {"sog": self.sog(pooled)} if self.sog is not None else {}
        attending = [block.encoder_attention for block in self.blocks if block.encoder_attention is not None]
        if attending:
            projected = [attention.project(encoder) for attention in attending]
            # (blocks, B, heads, S, G / heads): batch second, as reorder_incremental_state expects
            context["source_keys"] = torch.stack([k for k, _ in projected])
            context["source_values"] = torch.stack([v for _, v in projected])
        if padding is not None and bool(padding.any()):
            context["encoder_padding_mask"] = padding
        if self.source_walks is not None:
            key = "syntax_src_parent_first"
            if key not in encoder_out or "syntax_src_word_ids" not in encoder_out:
                raise ValueError("the Dyn-STGCD decoder reads the source parse (src_parent_first, src_word_ids) for "
                                 "R^e, which the encoder output does not carry: train on a data-bin with a source "
                                 "parse, or pass --dyn-stgcd-no-source-walks")
            word_ids = encoder_out["syntax_src_word_ids"][0]
            graph = piece_graph(encoder_out[key][0], word_ids)
            undirected = torch.maximum(graph, graph.transpose(1, 2))
            context["source_walks"] = self.source_walks(encoder.transpose(0, 1), undirected, word_ids >= 0)
        return context

    # ---- steps ----------------------------------------------------------------------------------------------------

    def initial_states(self, tokens: Tensor) -> List[DynamicGCNState]:
        probe = tokens.new_zeros(tokens.size(0), 0, self.dim, dtype=self.embed_tokens.weight.dtype)
        return [block.initial_state(probe) for block in self.blocks]

    def step(self, tokens: Tensor, states: List[DynamicGCNState], context: Dict[str, Tensor],
             gold_previous: Optional[Tensor] = None, embeddings: Optional[Tensor] = None):
        """Step t = tokens.size(1) - 1: every block over the nodes 0..t. Gives node t's last vector (B, G), the
        last block's A_t (B, n, n), the raw scores of its graph attention (DynamicGCN.step; None without one) and
        the new states."""
        node_mask = tokens.ne(self.padding_idx)
        # the steps of training (rows leave the loop at their last real column, targets are right-padded) and of
        # beam search see no padding: None spares every mask operation of the blocks
        node_mask = None if bool(node_mask.all()) else node_mask
        context = dict(context, embeddings=self.node_inputs(tokens) if embeddings is None else embeddings)
        y, new_states, adjacency, scores = None, [], None, None  # Y^0 = 0: the first block computes nothing of it
        for block, state in zip(self.blocks, states):
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                # --checkpoint-activations: the block runs again in the backward pass (dropout replayed); its
                # inputs, state and context all arrive as arguments, so nothing it reads can change in between
                with torch.autograd.graph.save_on_cpu() if self.offload_activations else nullcontext():
                    y, adjacency, state, scores = checkpoint(block, y, node_mask, state, context, gold_previous,
                                                             use_reentrant=False)
            else:
                y, adjacency, state, scores = block(y, node_mask, state, context, gold_previous)
            new_states.append(state)
        return y[:, -1], adjacency, scores, new_states

    def head_log_probs(self, adjacency: Tensor, scores: Optional[Tensor], node_mask: Optional[Tensor]) -> Tensor:
        """The rows heads are learnt in and read from, as log-distributions over the step's nodes (B, n, n)
        float32 (node_mask (B, n) or None: all real; 0 in padded rows and columns): the last block's graph
        attention of own-step edges (its coefficients' logarithms, the node itself among the candidates as in Ã),
        or A_t's rows normalised over the other real nodes (the diagonal is the node's self-connection, not a
        head)."""
        if self.heads_from == "attention":
            allowed = None if node_mask is None else node_mask.unsqueeze(2) & node_mask.unsqueeze(1)
            return masked_log_softmax(scores, allowed, dim=2)
        n = adjacency.size(1)
        allowed = ~torch.eye(n, dtype=torch.bool, device=adjacency.device).unsqueeze(0)
        if node_mask is not None:
            allowed = allowed & node_mask.unsqueeze(2) & node_mask.unsqueeze(1)
        return masked_log_softmax(adjacency.float().clamp(min=torch.finfo(torch.float32).tiny).log(), allowed, dim=2)

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only: bool = False,
                full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, src_lengths=None, return_all_hiddens: bool = False,
                **features):
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state, features)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                         features: Optional[Dict[str, Tensor]] = None, **unused):
        features = features or {}
        if incremental_state is not None:
            return self.extract_step(prev_output_tokens, encoder_out, incremental_state)
        context = self.source_context(encoder_out)
        node_mask = prev_output_tokens.ne(self.padding_idx)
        gold = heads = None
        if self.predicts_graph and "prev_parent_first" in features and "prev_word_ids" in features:
            gold = gold_target_graph(features["prev_parent_first"], features["prev_word_ids"], node_mask)
            heads = gold_heads(gold)
        states = self.initial_states(prev_output_tokens)
        # a column's input does not depend on later columns (positions count from the left): embedded once
        embeddings = self.node_inputs(prev_output_tokens)
        first_edge_scores = self.blocks[0].sequence_edge_scores(embeddings)
        if first_edge_scores is not None:
            context[FIRST_EDGE_SCORES] = first_edge_scores
        outputs, losses = [], []
        batch, width = prev_output_tokens.shape
        last_step = node_mask.sum(dim=1) - 1  # each row's graph is complete at the step of its last column
        final = torch.zeros(batch, width, width, device=prev_output_tokens.device)
        final_heads = torch.zeros(batch, width, width, device=prev_output_tokens.device)
        # the rows still stepped: a row whose remaining columns are all padding leaves the loop (its later outputs
        # are padding, which no loss reads; rows are independent, so the others' values do not change)
        rows = torch.arange(batch, device=prev_output_tokens.device)
        for t in range(width):
            going_on = node_mask[rows, t:].any(dim=1)
            if not bool(going_on.all()):
                kept = going_on.nonzero().squeeze(1)
                rows, context = rows.index_select(0, kept), select_rows(context, kept)
                states = [state.index_select(kept) for state in states]
            gold_previous = (gold[rows, :t, :t] if gold is not None and self.teacher_forced and self.training
                             else None)
            out, adjacency, scores, states = self.step(prev_output_tokens[rows, :t + 1], states, context,
                                                       gold_previous, embeddings[rows, :t + 1])
            outputs.append(out.new_zeros(batch, out.size(1)).index_copy(0, rows, out))
            ending = last_step[rows] == t  # (of the rows stepped) graphs complete at this step
            any_ending = bool(ending.any())
            final[rows[ending], :t + 1, :t + 1] = adjacency.detach()[ending]
            if not self.predicts_graph:
                continue
            step_mask = node_mask[rows, :t + 1]
            log_probs = None
            if any_ending or (gold is not None and self.graph_loss == "head_ce"):
                log_probs = self.head_log_probs(adjacency, scores, step_mask)
            if any_ending:
                final_heads[rows[ending], :t + 1, :t + 1] = log_probs.detach()[ending]
            if gold is not None:
                value = (graph_loss(adjacency, gold[rows, :t + 1, :t + 1], step_mask)
                         if self.graph_loss == "smooth_l1" else head_loss(log_probs, heads[rows]))
                losses.append((value * node_mask[rows, t]).sum())
        x = torch.stack(outputs, dim=1)
        if self.graph_to_output is not None:
            x = self.graph_to_output(x)
        extra = {"attn": [None], "inner_states": [x.transpose(0, 1)], ADJACENCY: final}
        if self.predicts_graph:
            extra["head_scores"] = final_heads
        if losses:
            extra["auxiliary_losses"] = {GRAPH_LOSS: torch.stack(losses).sum()}
        return x, extra

    def extract_step(self, prev_output_tokens, encoder_out, incremental_state):
        """fairseq's beam search: one step, the states of the previous one kept in the incremental state."""
        kept = self.get_incremental_state(incremental_state, STATE_KEY)
        if kept is None or kept["length"] != prev_output_tokens.size(1) - 1:
            # a new search (or a prefix given whole): run the earlier steps first
            context = self.source_context(encoder_out)
            states = self.initial_states(prev_output_tokens)
            for t in range(prev_output_tokens.size(1) - 1):
                *_, states = self.step(prev_output_tokens[:, :t + 1], states, context)
            embeddings = self.node_inputs(prev_output_tokens)
            edge_scores = self.blocks[0].sequence_edge_scores(embeddings)
        else:
            # the earlier columns' inputs and the first block's scores of their pairs do not change from step to
            # step (the step loop of training computes them once too): only the new column's are computed
            context, states = kept["context"], kept["states"]
            embeddings = torch.cat([kept["embeddings"], self.node_inputs(prev_output_tokens, last_only=True)], dim=1)
            edge_scores = (None if kept["edge_scores"] is None
                           else self.blocks[0].sequence_edge_scores(embeddings, previous=kept["edge_scores"]))
        step_context = context if edge_scores is None else dict(context, **{FIRST_EDGE_SCORES: edge_scores})
        out, adjacency, _, states = self.step(prev_output_tokens, states, step_context, embeddings=embeddings)
        self.set_incremental_state(incremental_state, STATE_KEY, {
            "length": prev_output_tokens.size(1), "context": context, "states": states, "adjacency": adjacency,
            "embeddings": embeddings, "edge_scores": edge_scores})
        x = out.unsqueeze(1)
        if self.graph_to_output is not None:
            x = self.graph_to_output(x)
        return x, {"attn": [None], "inner_states": [x.transpose(0, 1)], ADJACENCY: adjacency}

    def hypothesis_trees(self, encoder_out, hypotheses: Sequence[Tensor],
                         tree: bool = True) -> List[Tuple[List[List[str]], List[int]]]:
        """The tree of each generated hypothesis (token ids ending with EOS; row i of `encoder_out` is its source):
        the head rows of its last step's graph (head_log_probs: the attention or A) decoded into the maximum
        spanning tree (predicted_tree), or, without `tree`, each word's argmax (not checked to be a tree)."""
        eos, pad = self.dictionary.eos(), self.dictionary.pad()
        pieces = [tokens[:-1] if len(tokens) and int(tokens[-1]) == eos else tokens for tokens in hypotheses]
        prev = torch.full((len(pieces), 1 + max(len(p) for p in pieces)), pad, dtype=torch.long,
                          device=encoder_out["encoder_out"][0].device)
        prev[:, 0] = eos
        for row, tokens in enumerate(pieces):
            prev[row, 1:1 + len(tokens)] = tokens
        with torch.no_grad():  # (in the mode generation put the model in: no state switched around the call)
            _, extra = self.extract_features(prev, encoder_out)
        return [predicted_tree(extra["head_scores"][row, :len(tokens) + 1, :len(tokens) + 1],
                               [self.dictionary[i] for i in tokens.tolist()], tree=tree)
                for row, tokens in enumerate(pieces)]

    def output_layer(self, features):
        return self.output_projection(features)

    def reorder_incremental_state(self, incremental_state, new_order):
        kept = self.get_incremental_state(incremental_state, STATE_KEY)
        if kept is None:
            return
        context = select_rows(kept["context"], new_order)
        self.set_incremental_state(incremental_state, STATE_KEY, {
            "length": kept["length"], "context": context,
            "states": [state.index_select(new_order) for state in kept["states"]],
            "adjacency": kept["adjacency"].index_select(0, new_order),
            "embeddings": kept["embeddings"].index_select(0, new_order),
            "edge_scores": None if kept["edge_scores"] is None else kept["edge_scores"].index_select(0, new_order)})
