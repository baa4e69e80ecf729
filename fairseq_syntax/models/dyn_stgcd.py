"""The Dyn-STGCD decoder (Li et al., "Neural Machine Translation with Dynamic Graph Convolutional Decoder", §3 and
appendix A), `--decoder-type dyn_stgcd` in the syntax transformer family: the target translation and its
syntactic graph generated together, one node per step.

Nodes are decoder columns (0 = BOS, which stands for the root; c = the token at column c) plus <sog>, the
mean-pooled encoder output, linked to every node and kept constant. Each of the L blocks (--decoder-layers, 4 in
the paper) runs, at step t over the nodes 0..t:
  spatial   the dynamic GCN (modules/dynamic_gcn.py: A_t refined from graph attention, W_t evolved by a GRU) on the
            block's input (Y^0 = 0), then eq. 8's MLP: of [Y || emb(token)] in the first block, of Y in the middle
            ones, of [Y || R^e || R_t] in the last, R_t the random-walk kernel of the step's graph (A^L_t, the
            convolved nodes) and R^e that of the source graph (encoder outputs, the source parse as undirected
            piece arcs), each against its own trainable hidden graphs (modules/random_walk_kernel.py; groups of
            --dyn-stgcd-hidden-graphs, walks of 0..--dyn-stgcd-walk-steps), each normalised by a LayerNorm;
  encoder   attention of the nodes to the encoder output (ours, --dyn-stgcd-encoder-attention, on by default: the
            paper's §2 decoder "generates the target tokens by attending the source context" but §3 names no
            attention; without one the source reaches the decoder only as <sog> and R^e);
  temporal  modules/temporal_convolution.py (width-1 convolution, dilated causal convolution of dilation 2^l,
            basic GCN over A_t), as a residual block.
The prediction at column t is the last block's vector of node t. Loss (eq. 9, the `target_graph` auxiliary loss of
syntax_label_smoothed_cross_entropy, weight --dyn-stgcd-graph-loss-weight): at every step, smooth-L1 between A^L_t
and the gold graph of the nodes 0..t (row = dependent, 1 at its head's column and on the diagonal; pieces of a word
link to its first piece, appendix B.1; the root's first piece links to BOS), averaged over the step's real
entries, summed over the target tokens like the translation loss.

Where the equations allow no cache: every step re-encodes every node (W_t and A_t change every entry at every
step, so no node's vector from an earlier step can be reused); what is carried from step to step, in training and
in fairseq's beam search alike (one `step` function), is each block's W_{t-1}, A_{t-1}, outputs Y^l_{t-1} and the
entry value of new nodes. Training therefore runs the T steps in turn (about T^2/2 node-columns per sentence per
block; a sentence leaves the loop after its last real column), as beam search does.
"""
from contextlib import nullcontext
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq.models import FairseqIncrementalDecoder
from fairseq.modules import PositionalEmbedding
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..modules.dynamic_gcn import GRAPH_ATTENTION_SCORES, DynamicGCNState
from ..modules.spatial_temporal_block import ABLATIONS, Block, WalkFeatures
from ..modules.target_graph import gold_target_graph, graph_loss, piece_graph, predicted_tree
from .decoders import register_decoder

GRAPH_LOSS = "target_graph"
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


@register_decoder("dyn_stgcd")
class DynStgcdDecoder(FairseqIncrementalDecoder):
    takes_batch_features = True
    token_constraint = None

    @staticmethod
    def add_decoder_args(parser):
        group = parser  # (the model's parser is an argument group already: groups do not nest)
        group.add_argument("--dyn-stgcd-graph-dim", type=int, metavar="G",
                           help="width of the graph nodes and evolving weights (default: --decoder-embed-dim; the "
                                "weight GRU costs 6 G^3 per sentence, step and block)")
        group.add_argument("--dyn-stgcd-kernel-size", type=int, metavar="H",
                           help="kernel size of the dilated causal convolution (default 3)")
        group.add_argument("--dyn-stgcd-walk-steps", type=int, metavar="P",
                           help="random walks of 0..P steps (default 1: the paper's P = {0, 1})")
        group.add_argument("--dyn-stgcd-hidden-graphs", type=str, metavar="KxN,...",
                           help="groups of trainable hidden graphs, COUNTxNODES (default 6x6,6x4 as in the paper)")
        group.add_argument("--dyn-stgcd-graph-loss-weight", type=float, metavar="W",
                           help="weight of the smooth-L1 graph loss of eq. 9 (default 1)")
        group.add_argument("--dyn-stgcd-teacher-forced-adjacency", action="store_true", default=None,
                           help="eq. 7 refines the gold graph of the previous step instead of the model's own "
                                "(training; generation has no gold graph and uses its own)")
        group.add_argument("--dyn-stgcd-no-source-walks", action="store_true", default=None,
                           help="leave R^e out of eq. 8 (the paper's 'w/o source of P' ablation; the source parse "
                                "is then not needed)")
        group.add_argument("--dyn-stgcd-no-target-walks", action="store_true", default=None,
                           help="leave R_t out of eq. 8 (with --dyn-stgcd-no-source-walks: the paper's 'w/o P')")
        group.add_argument("--dyn-stgcd-ablations", type=str, metavar="A1,A2",
                           help="the paper's Figure 5 ablations, comma-separated: no_spatial (no graph "
                                "convolution, so no graph and no graph loss), no_temporal, static_weight (no GRU "
                                "over W), static_adjacency (no refinement of A from the nodes)")
        group.add_argument("--dyn-stgcd-graph-attention", choices=GRAPH_ATTENTION_SCORES, metavar="SCORES",
                           help="scores of eq. 7's graph-attention coefficients: gat (the paper's, Velickovic et "
                                "al.; every row ranks the candidate nodes alike, so the graph gives every word the "
                                "same head) or gatv2 (Brody et al.'s a . LeakyReLU(W_i y_i + W_j y_j), each row "
                                "its own ranking; not in the paper). Default gat")
        group.add_argument("--dyn-stgcd-no-encoder-attention", action="store_true", default=None,
                           help="no attention to the encoder output in the blocks (the source reaches the decoder "
                                "as <sog> and R^e only)")

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(dictionary)
        self.cfg = cfg
        embed_dim = embed_tokens.embedding_dim
        dim = int(getattr(cfg, "dyn_stgcd_graph_dim", None) or embed_dim)
        self.dim = dim
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
        ablations = [a.strip() for a in (getattr(cfg, "dyn_stgcd_ablations", None) or "").split(",") if a.strip()]
        unknown = sorted(set(ablations) - set(ABLATIONS))
        if unknown:
            raise ValueError(f"--dyn-stgcd-ablations: {unknown} not among {list(ABLATIONS)}")
        self.predicts_graph = "no_spatial" not in ablations
        # <sog> enters the graph convolutions only (none without the spatial layer)
        self.sog = nn.Linear(encoder_dim, dim) if self.predicts_graph else None
        walk_steps = int(getattr(cfg, "dyn_stgcd_walk_steps", None) if getattr(cfg, "dyn_stgcd_walk_steps", None)
                         is not None else 1)
        groups = parse_hidden_graphs(getattr(cfg, "dyn_stgcd_hidden_graphs", None) or "6x6,6x4")
        self.source_walks = (None if getattr(cfg, "dyn_stgcd_no_source_walks", False)
                             else WalkFeatures(encoder_dim, groups, walk_steps))
        target_walks = None if getattr(cfg, "dyn_stgcd_no_target_walks", False) else WalkFeatures(dim, groups,
                                                                                                   walk_steps)
        walk_dims = sum(w.dim for w in (self.source_walks, target_walks) if w is not None)
        layers = cfg.decoder.layers
        kernel_size = int(getattr(cfg, "dyn_stgcd_kernel_size", None) or 3)
        encoder_attention = not (no_encoder_attn or getattr(cfg, "dyn_stgcd_no_encoder_attention", False))
        self.blocks = nn.ModuleList(
            Block(i, layers, dim, encoder_dim, cfg.decoder.attention_heads, kernel_size, cfg.dropout,
                  cfg.attention_dropout, encoder_attention, walk_dims, target_walks if i == layers - 1 else None,
                  ablations, getattr(cfg, "dyn_stgcd_graph_attention", None) or "gat")
            for i in range(layers))
        self.teacher_forced = bool(getattr(cfg, "dyn_stgcd_teacher_forced_adjacency", False))
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
        weight = getattr(cfg, "dyn_stgcd_graph_loss_weight", None)
        self.auxiliary_loss_weights = {GRAPH_LOSS: float(1.0 if weight is None else weight)}

    def max_positions(self):
        return self.max_target_positions

    # ---- inputs ---------------------------------------------------------------------------------------------------

    def node_inputs(self, tokens: Tensor) -> Tensor:
        """emb(token) of every node (B, n, G): scaled embedding plus positions, dropout, projected to G."""
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.embed_positions is not None:
            x = x + self.embed_positions(tokens)
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
        last block's A_t (B, n, n) and the new states."""
        node_mask = tokens.ne(self.padding_idx)
        # the steps of training (rows leave the loop at their last real column, targets are right-padded) and of
        # beam search see no padding: None spares every mask operation of the blocks
        node_mask = None if bool(node_mask.all()) else node_mask
        context = dict(context, embeddings=self.node_inputs(tokens) if embeddings is None else embeddings)
        y, new_states, adjacency = None, [], None  # Y^0 = 0: the first block computes nothing of it
        for block, state in zip(self.blocks, states):
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                # --checkpoint-activations: the block runs again in the backward pass (dropout replayed); its
                # inputs, state and context all arrive as arguments, so nothing it reads can change in between
                with torch.autograd.graph.save_on_cpu() if self.offload_activations else nullcontext():
                    y, adjacency, state = checkpoint(block, y, node_mask, state, context, gold_previous,
                                                     use_reentrant=False)
            else:
                y, adjacency, state = block(y, node_mask, state, context, gold_previous)
            new_states.append(state)
        return y[:, -1], adjacency, new_states

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
        gold = None
        if self.predicts_graph and "prev_parent_first" in features and "prev_word_ids" in features:
            gold = gold_target_graph(features["prev_parent_first"], features["prev_word_ids"], node_mask)
        states = self.initial_states(prev_output_tokens)
        # a column's input does not depend on later columns (positions count from the left): embedded once
        embeddings = self.node_inputs(prev_output_tokens)
        outputs, losses = [], []
        batch, width = prev_output_tokens.shape
        last_step = node_mask.sum(dim=1) - 1  # each row's graph is complete at the step of its last column
        final = torch.zeros(batch, width, width, device=prev_output_tokens.device)
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
            out, adjacency, states = self.step(prev_output_tokens[rows, :t + 1], states, context, gold_previous,
                                               embeddings[rows, :t + 1])
            outputs.append(out.new_zeros(batch, out.size(1)).index_copy(0, rows, out))
            ending = last_step[rows] == t  # (of the rows stepped) graphs complete at this step
            final[rows[ending], :t + 1, :t + 1] = adjacency.detach()[ending]
            if gold is not None:
                step_mask = node_mask[rows, :t + 1]
                losses.append((graph_loss(adjacency, gold[rows, :t + 1, :t + 1], step_mask)
                               * node_mask[rows, t]).sum())
        x = torch.stack(outputs, dim=1)
        if self.graph_to_output is not None:
            x = self.graph_to_output(x)
        extra = {"attn": [None], "inner_states": [x.transpose(0, 1)], "adjacency": final}
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
                _, _, states = self.step(prev_output_tokens[:, :t + 1], states, context)
        else:
            context, states = kept["context"], kept["states"]
        out, adjacency, states = self.step(prev_output_tokens, states, context)
        self.set_incremental_state(incremental_state, STATE_KEY, {
            "length": prev_output_tokens.size(1), "context": context, "states": states, "adjacency": adjacency})
        x = out.unsqueeze(1)
        if self.graph_to_output is not None:
            x = self.graph_to_output(x)
        return x, {"attn": [None], "inner_states": [x.transpose(0, 1)], "adjacency": adjacency}

    def hypothesis_trees(self, encoder_out, hypotheses: Sequence[Tensor]) -> List[Tuple[List[List[str]], List[int]]]:
        """The tree of each generated hypothesis (token ids ending with EOS; row i of `encoder_out` is its source):
        the graph of its last step, read as heads (predicted_tree)."""
        eos, pad = self.dictionary.eos(), self.dictionary.pad()
        pieces = [tokens[:-1] if len(tokens) and int(tokens[-1]) == eos else tokens for tokens in hypotheses]
        prev = torch.full((len(pieces), 1 + max(len(p) for p in pieces)), pad, dtype=torch.long,
                          device=encoder_out["encoder_out"][0].device)
        prev[:, 0] = eos
        for row, tokens in enumerate(pieces):
            prev[row, 1:1 + len(tokens)] = tokens
        with torch.no_grad():  # (in the mode generation put the model in: no state switched around the call)
            _, extra = self.extract_features(prev, encoder_out)
        return [predicted_tree(extra["adjacency"][row, :len(tokens) + 1, :len(tokens) + 1],
                               [self.dictionary[i] for i in tokens.tolist()]) for row, tokens in enumerate(pieces)]

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
            "adjacency": kept["adjacency"].index_select(0, new_order)})
