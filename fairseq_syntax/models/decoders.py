"""The decoders of the syntax transformer family, chosen by name (--decoder-type; registry DECODERS):

  transformer  fairseq's causal decoder: column c attends to columns <= c, computed once and cached in beam search
               (the syntax decoder below, or fairseq's own when no decoder mechanism is chosen)
  bitran       Choshen & Abend's bidirectional decoder (§2, mask M_bi): at every step the whole prefix is
               re-encoded and every generated token attends to every token of the prefix. Training computes every
               prefix of every sentence as its own view (exact), or k sampled prefixes per sentence
               (--bitran-prefixes k); generation re-encodes the prefix at each step of fairseq's beam search.
               --reencode-every B: the prefix re-encoded every B columns and decoded causally in between, in
               training (one view per block start) and in generation (fairseq's cache between re-encodings).
               --reencode-at-arcs: re-encoded at BOS and at every arc token (where the graph changes) and
               causal in between, in training (one group of views per block-start column) and in generation (each
               row re-encoded at its own block starts, the others extending the cache). --reencode-after-arcs:
               the same, the blocks starting at the first token after each run of arc tokens instead.
  dyn_stgcd    Li et al.'s dynamic graph convolutional decoder, registered in models/dyn_stgcd.py (no layers of
               this file: its blocks, state and graph are its own).
Why the first two share a file of ~400 lines: BiTran is the causal decoder run over re-encoded views, subclassing
it and reusing its layer loop, mechanisms and decoder context.

Decoder syntax mechanisms (--decoder-syntax, a comma-separated list; modules/syntax_mechanism.py) are built where their
layer is built, and reach their inputs as forward arguments: the batch's target features, and, for a mechanism that
reads the generated graph (needs_target_transitions: PARENT, the decoder GCN), the decoder context
(modules/decoder_context.py) of the rows being run: the prefix tokens, the prefix graph from the batched transition
function, and the policy that says which edges each column may use ("causal" for the transformer decoder, "prefix"
for BiTran's re-encoded views, "block" for BiTran re-encoding every B columns). The same mechanism code runs in
both decoders.
"""
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Type

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.distributed import fsdp_wrap
from fairseq.models.transformer import TransformerDecoderBase
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from torch import Tensor

from ..data.features import FEATURES
from ..data.vocabulary import is_word_level
from ..modules import MechanismChoices, SyntaxDecoderLayer
from ..modules.syntax_layers import build_mechanism
from ..modules.decoder_context import DecoderContext, PrefixScanner, TargetTransitions
from ..modules.syntax_mechanism import DECODER_CONTEXT, SyntaxInputs, add_declared_options, declared_option

SYNTAX_PREFIX = "syntax_"  # encoder_out keys carrying source features on to decoder mechanisms
# name -> decoder class. Chosen by --decoder-type NAME of the syntax_transformer family (or a preset giving
# decoder_type a default), whose choices are read when the parser is built: the registering module is imported
# before (a module of this package, or a --user-dir). Built as cls(cfg, dictionary, embed_tokens, no_encoder_attn=),
# cfg fairseq's TransformerConfig with every option of the command line as an attribute.
DECODERS: Dict[str, type] = {}
# keys a decoder may add to its forward's `extra`, beside fairseq's "attn" and "inner_states"
PREDICTED = "predicted"  # (B, T) bool: the positions a decoder predicting only some of them output (sampled prefixes)
PACKED = "packed"  # True: the output holds those positions only, packed as (1, N, V)
# (B, n, n) a graph-generating decoder's graph over its columns (row = dependent, column 0 = BOS, the root): the
# newest step's in incremental decoding. For analyses and tests only: --trees-out reads hypothesis_trees
ADJACENCY = "adjacency"
# what hypothesis_trees gives per hypothesis: the pieces (dictionary symbols) of each word, and the words' 1-based
# heads (0 = the root)
WordHeads = Tuple[List[List[str]], List[int]]


class SyntaxDecoder:
    """The decoder contract: every attribute the model, the task and its generator may read of a decoder, with its
    default. A decoder of DECODERS derives from it (beside its fairseq base) and overrides what it has; fairseq's
    own decoder, which the model keeps for a plain vanilla row, is read through `contract_of`, so no caller asks a
    decoder whether it has an attribute. Beside these, the model calls its fairseq forward with fairseq's
    decoder keywords (encoder_out, incremental_state, features_only, alignment_layer, alignment_heads,
    src_lengths, return_all_hiddens), and the batch features where takes_batch_features."""

    # the model hands it the batch's features as keyword arguments of its forward (fairseq's own decoder takes none)
    takes_batch_features: bool = False
    # batch features it needs: a data-bin without their channels is refused
    syntax_features: Tuple[str, ...] = ()
    # batch features it uses where the data-bin has them (training losses)
    optional_syntax_features: Tuple[str, ...] = ()
    # source features the encoder passes on in its output, so that they reach the decoder in beam search too
    source_features: Tuple[str, ...] = ()
    # {auxiliary loss: weight} of the losses its forward returns in extra["auxiliary_losses"]
    auxiliary_loss_weights: Mapping[str, float] = MappingProxyType({})
    @property
    def token_constraint(self) -> Optional[torch.nn.Module]:
        """A module giving the tokens forbidden at the next step of generation, applied by the task's generator, or
        None. A submodule of the decoder (nn.Module keeps it in _modules: a plain class attribute would hide it)."""
        return vars(self).get("_modules", {}).get("token_constraint")

    @token_constraint.setter
    def token_constraint(self, module: Optional[torch.nn.Module]):
        # reached for None only: nn.Module.__setattr__ registers a module value itself
        self._modules["token_constraint"] = module
    # it outputs some target positions only (extra[PREDICTED], packed where extra[PACKED]); the loss counts those
    predicts_some_positions: bool = False
    # it generates a graph with the translation, whose trees --trees-out writes (hypothesis_trees)
    predicts_graph: bool = False
    # the owner of the prefix's transition scan, which it keeps (and reorders) in its incremental state; the
    # constrained generator's validity masks read the same entry (None: it keeps no scan)
    prefix_scanner: Optional[PrefixScanner] = None

    # its command-line options, declared as a mechanism's are: a FairseqDataclass whose fields carry each option's
    # one default and help; read with `option`. Those of every registered decoder are on the parser, whichever
    # --decoder-type is chosen, so their names carry the decoder's; one set away from its default with another
    # decoder type is refused
    options: Optional[Type[FairseqDataclass]] = None

    @classmethod
    def add_decoder_args(cls, parser) -> None:
        """Its command-line options on the syntax transformer's parser (`options`, none by default)."""
        add_declared_options(parser, cls.options)

    @classmethod
    def option(cls, cfg, name: str):
        """The option's value in the model config, else the default `options` declares."""
        return declared_option(cls.options, cfg, name)

    @classmethod
    def check_args(cls, cfg) -> None:
        """Raise ValueError for option values it cannot use (called before the model is built)."""

    def hypothesis_trees(self, encoder_out, hypotheses: Sequence[Tensor], tree: bool = True) -> List[WordHeads]:
        """The words and heads of each hypothesis (token ids ending with EOS; row i of `encoder_out` is its source),
        from the graph generated with it (a decoder that predicts_graph; --trees-out on a data-bin without target
        transitions). With `tree` a well-formed tree (HEAD), without it each word's raw argmax (`# argmax_heads`).
        Called after beam search, under torch.no_grad. modules/dyn_stgcd/target_graph.predicted_tree gives from a
        score matrix over BOS and the pieces; the task spells each word's pieces with the data-bin's segmenter."""
        raise NotImplementedError(f"{type(self).__name__} generates no graph (predicts_graph is False)")


FAIRSEQ_DECODER = SyntaxDecoder()  # what fairseq's own decoder has of the contract: every default


def contract_of(decoder) -> SyntaxDecoder:
    """The contract attributes of a model's decoder: the decoder itself, or the defaults for fairseq's own (or
    for a model without a decoder)."""
    return decoder if isinstance(decoder, SyntaxDecoder) else FAIRSEQ_DECODER


def register_decoder(name: str):
    def register(cls):
        if name in DECODERS:
            raise ValueError(f"decoder {name!r} registered twice")
        cls.decoder_name = name
        DECODERS[name] = cls
        return cls

    return register


def wrap_layer(layer, cfg):
    # as fairseq's build_encoder_layer / build_decoder_layer do
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0)


def split_layer_output(output, num_usual: int, loss_names, totals: Dict[str, Tensor]):
    """A syntax layer returns its usual outputs followed by its auxiliary losses: add those to `totals`."""
    if not isinstance(output, tuple):
        return output
    for name, value in zip(loss_names, output[num_usual:]):
        totals[name] = totals[name] + value if name in totals else value
    return output[0] if num_usual == 1 else output[:num_usual]


def select_encoder_out(encoder_out: Optional[Dict[str, List[Tensor]]], rows: Tensor):
    """The encoder output of some sentences (rows, repeated as needed): what reorder_encoder_out gives, for the
    keys a decoder reads."""
    if encoder_out is None:
        return None
    out = {}
    for key, values in encoder_out.items():
        if key == "encoder_out":
            out[key] = [v.index_select(1, rows) for v in values]  # (T, B, C)
        elif key in ("encoder_padding_mask", "src_lengths") or key.startswith(SYNTAX_PREFIX):
            out[key] = [v.index_select(0, rows) for v in values]
        else:
            out[key] = values
    return out


@register_decoder("transformer")
class SyntaxTransformerDecoder(TransformerDecoderBase, SyntaxDecoder):
    """fairseq's causal Transformer decoder whose layers carry the decoder syntax mechanisms, with an optional
    mechanism on the decoder's input vectors, and the mechanisms' token constraint (if any): a module that gives
    the tokens forbidden at the next step of generation, kept as `token_constraint` and applied by the task's
    generator with every other constraint (tasks/constrained_generation.py)."""

    takes_batch_features = True  # the model hands it the batch's features (fairseq's own decoder takes none)

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.syntax_choice = MechanismChoices.from_args(cfg, "decoder", cfg.decoder.layers)
        mechanisms = self.syntax_choice.mechanisms
        self.target_transitions = None  # handed to the constructors of the mechanisms that read the prefix graph
        if any(m.needs_target_transitions for m in mechanisms):
            self.target_transitions = TargetTransitions(dictionary.symbols, is_word_level(dictionary))
            if self.target_transitions.num_labels == 0:
                raise ValueError("the target dictionary has no arc tokens (LEFT-ARC:l / RIGHT-ARC:l): decoder syntax "
                                 "mechanisms need a data-bin made with fairseq-syntax-preprocess "
                                 "--target-transitions")
            self.prefix_scanner = PrefixScanner(self.target_transitions)
        self._layers_built = 0
        self.layer_loss_names: List[tuple] = []
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.syntax_features = tuple(dict.fromkeys(f for m in mechanisms for f in m.features_for(cfg)))
        self.optional_syntax_features = tuple(dict.fromkeys(f for m in mechanisms for f in m.training_features))
        self.auxiliary_loss_names = tuple(dict.fromkeys(name for m in mechanisms for name in m.auxiliary_losses))
        self.auxiliary_loss_weights = {loss: w for m in mechanisms for loss, w in m.loss_weights(cfg).items()}
        input_mechanism = self.syntax_choice.whole("input")
        self.input_module = (build_mechanism(input_mechanism, cfg, embed_tokens.embedding_dim,
                                             cfg.decoder.attention_heads, -1,
                                             target_transitions=self.target_transitions)
                             if input_mechanism is not None else None)
        constraints = [c for c in (m.build_token_constraint(cfg, dictionary) for m in mechanisms) if c is not None]
        if len(constraints) > 1:
            raise ValueError("two decoder syntax mechanisms each constrain the next token: choose one of them")
        self.token_constraint = constraints[0] if constraints else None

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        mechanism = self.syntax_choice.at(index)
        self.layer_loss_names.append(tuple(mechanism.auxiliary_losses) if mechanism else ())
        return wrap_layer(SyntaxDecoderLayer(cfg, no_encoder_attn, cfg, mechanism, index,
                                             target_transitions=self.target_transitions),
                          cfg)

    # ---- syntax inputs ------------------------------------------------------------------------------------------

    @property
    def source_features(self) -> tuple:
        """The source-side features the decoder's mechanisms read: the encoder passes them on in its output, so
        they reach the decoder in beam search too (where the decoder gets no batch features)."""
        return tuple(name for name in self.syntax_features if FEATURES[name].side == "source")

    def batch_syntax(self, encoder_out, features) -> Dict[str, Tensor]:
        """The target features of the batch (training; none in beam search, where a mechanism derives what it
        needs from the prefix) and the source features the encoder passed on (always; a missing one raises)."""
        syntax = {name: features[name] for name in self.syntax_features + self.optional_syntax_features
                  if name in features}
        if encoder_out is not None:
            syntax.update({key[len(SYNTAX_PREFIX):]: value[0] for key, value in encoder_out.items()
                           if key.startswith(SYNTAX_PREFIX)})
        missing = [name for name in self.source_features if name not in syntax]
        if missing:
            raise ValueError(f"the decoder's syntax mechanisms read the source features {missing}, which the encoder "
                             f"output does not carry (the encoder passes on what the model declares: build the "
                             f"model with the syntax_transformer family)")
        return syntax

    def reorder_incremental_state(self, incremental_state, new_order):
        super().reorder_incremental_state(incremental_state, new_order)
        if self.prefix_scanner is not None:
            PrefixScanner.reorder(incremental_state, new_order)

    def decoder_context(self, prev_output_tokens: Tensor, incremental_state) -> Optional[DecoderContext]:
        """The causal decoder's context: every column computed once, at its own step."""
        if self.prefix_scanner is None:
            return None
        return self.prefix_scanner.context(prev_output_tokens, "causal", incremental_state)

    # ---- forward --------------------------------------------------------------------------------------------------

    def forward(self, prev_output_tokens, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state=None, features_only: bool = False, full_context_alignment: bool = False,
                alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None, src_lengths=None,
                return_all_hiddens: bool = False, **features):
        # In training the target-side features come from the batch; in beam search there are none, and a mechanism
        # derives what it needs from the prefix (the decoder context, or its own state in the incremental state).
        syntax = self.batch_syntax(encoder_out, features)
        x, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                                         alignment_layer, alignment_heads, syntax=syntax)
        if not features_only:
            x = self.output_layer(x)
        return x, extra

    def embed(self, prev_output_tokens: Tensor, incremental_state=None, last_only: bool = False) -> Tensor:
        """fairseq's decoder input vectors (T, B, C): scaled embeddings plus positions, dropout; `last_only`: the
        last column only (fairseq's incremental decoding)."""
        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if last_only:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        x = self.embed_scale * self.embed_tokens(prev_output_tokens.contiguous())
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x += positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        return self.dropout_module(x).transpose(0, 1)  # B x T x C -> T x B x C

    def decoder_input(self, prev_output_tokens: Tensor, incremental_state, syntax) -> Tensor:
        """The input vectors of the columns the layers run, after the input mechanism (if any), which sees the
        whole prefix also in incremental decoding (a column's input depends on its neighbours in the graph)."""
        if self.input_module is None:
            return self.embed(prev_output_tokens, incremental_state, last_only=incremental_state is not None)
        # positions of the whole prefix (fairseq's positional embedding takes the last one under incremental state)
        x = self.embed(prev_output_tokens, None)
        padding = prev_output_tokens.eq(self.padding_idx)
        return self.input_module(x, syntax, padding if bool(padding.any()) else None,
                                 incremental_state=incremental_state, newest_only=incremental_state is not None)

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None, syntax: Optional[SyntaxInputs] = None):
        syntax = dict(syntax or {})
        context = self.decoder_context(prev_output_tokens, incremental_state)
        if context is not None:
            syntax[DECODER_CONTEXT] = context
        x = self.decoder_input(prev_output_tokens, incremental_state, syntax)
        # fairseq's TransformerDecoderBase.extract_features_scriptable, with syntax passed to every layer
        query_tokens = prev_output_tokens[:, -1:] if incremental_state is not None else prev_output_tokens
        self_attn_padding_mask = (query_tokens.eq(self.padding_idx) if query_tokens.eq(self.padding_idx).any()
                                  else None)
        self_attn_mask = (self.buffered_future_mask(x)
                          if incremental_state is None and not full_context_alignment else None)
        return self.run_layers(x, encoder_out, incremental_state, self_attn_mask, self_attn_padding_mask, syntax,
                               alignment_layer, alignment_heads)

    def run_layers(self, x: Tensor, encoder_out, incremental_state, self_attn_mask, self_attn_padding_mask, syntax,
                   alignment_layer: Optional[int] = None, alignment_heads: Optional[int] = None, query_start: int = 0,
                   encoder_attn_states: Optional[List[Dict]] = None):
        """The decoder layers over x (T, B, C): (features (B, T, C), extra). `query_start`: the top layer computes
        the columns from it on only (features (B, T - query_start, C)); `encoder_attn_states`: per layer, the
        encoder-attention keys and values already projected (SyntaxDecoderLayer)."""
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        enc = encoder_out["encoder_out"][0] if encoder_out is not None and encoder_out["encoder_out"] else None
        padding_mask = (encoder_out["encoder_padding_mask"][0]
                        if encoder_out is not None and encoder_out["encoder_padding_mask"] else None)
        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        auxiliary_losses: Dict[str, Tensor] = {}
        top = len(self.layers) - 1
        for idx, layer in enumerate(self.layers):
            extra_args = {}
            if query_start and idx == top:
                extra_args["query_start"] = query_start
            if encoder_attn_states is not None:
                extra_args["encoder_attn_state"] = encoder_attn_states[idx]
            output = layer(x, enc, padding_mask, incremental_state, self_attn_mask=self_attn_mask,
                           self_attn_padding_mask=self_attn_padding_mask, need_attn=idx == alignment_layer,
                           need_head_weights=idx == alignment_layer, syntax=syntax, **extra_args)
            x, layer_attn, _ = split_layer_output(output, 3, self.layer_loss_names[idx], auxiliary_losses)
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)
        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)  # T x B x C -> B x T x C
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        extra = {"attn": [attn], "inner_states": inner_states}
        if auxiliary_losses:
            extra["auxiliary_losses"] = auxiliary_losses
        return x, extra


@dataclass
class BiTranOptions(FairseqDataclass):
    bitran_prefixes: int = field(default=0, metadata={
        "help": "bitran training: K prefixes per sentence sampled per update, the others not trained (0: every "
                "position, every update)"})
    reencode_every: int = field(default=1, metadata={
        "help": "bitran: re-encode the prefix bidirectionally every B target columns and decode causally in "
                "between, in training and generation alike (1: every step, the paper's BiTran; B >= the target "
                "length: the causal decoder)"})
    reencode_at_arcs: bool = field(default=False, metadata={
        "help": "bitran: re-encode the prefix bidirectionally at BOS and at every arc token, where the generated "
                "graph changes, and decode causally in between, in training and generation alike (no view's graph "
                "is ever stale; in generation each row re-encodes at its own steps, the others extend the cache)"})
    reencode_after_arcs: bool = field(default=False, metadata={
        "help": "bitran: re-encode the prefix bidirectionally at BOS and at the first token after each run of arc "
                "tokens (the graph is whole again there: a word's view never holds a stale graph, an arc's may), "
                "causal in between, in training and generation alike (fewer re-encodings than --reencode-at-arcs)"})


@register_decoder("bitran")
class BiTranDecoder(SyntaxTransformerDecoder):
    """Choshen & Abend's bidirectional decoder (§2): the prediction after the prefix o_1..o_n comes from the
    prefix re-encoded with the mask M_bi (every token attends to every token of the prefix), decoder mechanisms
    seeing that prefix's whole graph.

    Re-encoding every B steps (--reencode-every B; B = 1, the default, is the paper's BiTran): the target's columns
    fall into blocks of B starting at m = 0, B, 2B, ...; the prediction at column c of the block starting at m comes
    from a view in which the columns <= m attend to each other bidirectionally (the prefix re-encoded at m, so the
    prediction at m is exactly BiTran's) and the columns m+1..c attend causally, each mechanism seeing, in each
    column, the edges that column's view knows (decoder context policy "block"). B >= the longest target is the
    causal decoder. Generation re-encodes the prefix at the block starts and decodes causally with fairseq's
    incremental cache in between, so that it scores exactly what training's views score.

    Training, every position (--bitran-prefixes 0): one view per block start m over the sentences longer than m, of
    width min(m + B, longest), sentences right-padded; the view outputs its columns m..m+B-1. With B = 1 every
    prefix is a view of its own and views of one width are one batch with no padding: the re-encoding's sum over
    prefixes of n columns (about T^2/2 per sentence instead of T); with B, about T^2/2B + T/2. Cheaper without
    changing what is computed: the input vectors are made once per sentence, the encoder states projected for the
    cross-attention once per sentence (not per view), and the top layer runs only the columns a view predicts.
    Sampled (--bitran-prefixes k, B = 1 only): k prefixes per sentence chosen uniformly without replacement per
    update (4 of ~30 positions of a Multi30k sentence: a cheaper, different training, which starves the decoder;
    not the paper's); only their positions are output, packed (extra["predicted"] says which; the model's
    get_targets packs the targets alike)."""

    options = BiTranOptions

    @classmethod
    def check_args(cls, cfg):
        prefixes, every = int(cls.option(cfg, "bitran_prefixes")), int(cls.option(cfg, "reencode_every"))
        at_arcs, after_arcs = bool(cls.option(cfg, "reencode_at_arcs")), bool(cls.option(cfg, "reencode_after_arcs"))
        if at_arcs and after_arcs:
            raise ValueError("--reencode-at-arcs and --reencode-after-arcs each choose the block starts: choose one")
        if (at_arcs or after_arcs) and (prefixes > 0 or every > 1):
            option = "--reencode-at-arcs" if at_arcs else "--reencode-after-arcs"
            raise ValueError(f"{option} chooses the block starts itself and trains every position: it does "
                             f"not combine with --reencode-every B > 1 or --bitran-prefixes")
        if prefixes < 0:
            raise ValueError(f"--bitran-prefixes must be >= 0 (0: every prefix), got {prefixes}")
        if every < 1:
            raise ValueError(f"--reencode-every must be >= 1 (1: every step, the paper's BiTran), got {every}")
        if every > 1 and prefixes > 0:
            raise ValueError("--reencode-every B > 1 trains every position of every sentence: it does not combine "
                             "with --bitran-prefixes")

    def __init__(self, cfg, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        self.reencode_every = int(self.option(cfg, "reencode_every"))
        self.sampled_prefixes = int(self.option(cfg, "bitran_prefixes"))
        # --reencode-at-arcs / --reencode-after-arcs: (V,) bool, the arc tokens of the target dictionary, whose
        # columns (or the first columns after whose runs) are the block starts besides BOS
        arc_tokens = None
        self.starts_after_arcs = bool(self.option(cfg, "reencode_after_arcs"))
        if self.option(cfg, "reencode_at_arcs") or self.starts_after_arcs:
            transitions = self.target_transitions or TargetTransitions(dictionary.symbols, is_word_level(dictionary))
            arc_tokens = transitions.label_of >= 0
            if not bool(arc_tokens.any()):
                raise ValueError("--reencode-at-arcs and --reencode-after-arcs need arc tokens (LEFT-ARC:l / "
                                 "RIGHT-ARC:l) in the target dictionary: a data-bin made with "
                                 "fairseq-syntax-preprocess --target-transitions")
        self.register_buffer("arc_tokens", arc_tokens, persistent=False)
        shapes = {mechanism.shape for mechanism in self.syntax_choice.mechanisms}
        if self.blockwise and "self_attention" in shapes:
            raise ValueError("--reencode-every B > 1, --reencode-at-arcs and --reencode-after-arcs decode causally "
                             "between re-encodings: a decoder mechanism that replaces self-attention is not supported "
                             "with them")
        top = self.syntax_choice.at(cfg.decoder.layers - 1)
        # the top layer computes only the columns a view predicts (it needs the other columns as keys only)
        self.top_layer_predicted_only = top is None or top.shape == "score_modifier"

    @property
    def predicts_some_positions(self) -> bool:
        return self.sampled_prefixes > 0

    @property
    def blockwise(self) -> bool:
        """Whether a view has causal columns after its re-encoded prefix (B > 1, or re-encoding at or after arcs)."""
        return self.reencode_every > 1 or self.arc_tokens is not None

    def arc_block_starts(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        """(B, T) bool, the columns at which each row's prefix is re-encoded, real columns only: BOS and
        --reencode-at-arcs: every column whose input token is an arc (the graph of the prefix changes there and
        nowhere else); --reencode-after-arcs: every column whose input token is not an arc and follows one (the
        first after a run of arcs, whose whole graph is then in the view)."""
        columns = torch.arange(tokens.size(1), device=tokens.device)
        arcs = self.arc_tokens.to(tokens.device)[tokens]
        if self.starts_after_arcs:
            follows_arc = torch.zeros_like(arcs)
            follows_arc[:, 1:] = arcs[:, :-1]
            arcs = follows_arc & ~arcs
        starts = arcs | (columns == 0).unsqueeze(0)
        return starts & (columns.unsqueeze(0) < lengths.unsqueeze(1))

    def block_start(self, column: int) -> int:
        """The column m at which the prefix was last re-encoded when column `column` is computed."""
        return column - column % self.reencode_every

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None, syntax: Optional[SyntaxInputs] = None):
        syntax = dict(syntax or {})
        if incremental_state is not None:
            return self.generation_step(prev_output_tokens, encoder_out, syntax, incremental_state)
        # the whole target's graph, which each view cuts to its prefix (DecoderContext.view)
        context = (self.prefix_scanner.context(prev_output_tokens, "prefix") if self.prefix_scanner is not None
                   else None)
        return self.run_all_views(prev_output_tokens, encoder_out, syntax, context)

    # ---- generation -----------------------------------------------------------------------------------------------

    def generation_step(self, prev_output_tokens: Tensor, encoder_out, syntax, incremental_state):
        """One step of beam search (rows: whole prefixes, no padding inside them): the prediction at the newest
        column c. A row whose prefix is re-encoded at c (a block start: c = m) runs its whole prefix bidirectionally;
        with B > 1 or re-encoding at (after) arcs its keys and values (and the input mechanism's kept inputs) fill
        fairseq's self-attention cache, which the causal steps until its next block start extend. B = 1 re-encodes
        every row at every step and keeps no cache. With B the rows re-encode at the same steps; at (after) arcs
        each row at its own (arc_block_starts): the rows that do not re-encode take a causal step, the others
        replace their rows of the cache (rows_reencoded)."""
        column = prev_output_tokens.size(1) - 1
        if self.arc_tokens is not None:  # each row's last block start
            lengths = prev_output_tokens.ne(self.padding_idx).sum(dim=1)
            columns = torch.arange(prev_output_tokens.size(1), device=prev_output_tokens.device)
            until = torch.where(self.arc_block_starts(prev_output_tokens, lengths), columns, 0).amax(dim=1)
        else:
            until = prev_output_tokens.new_full((prev_output_tokens.size(0),), self.block_start(column))
        if self.prefix_scanner is not None:
            syntax[DECODER_CONTEXT] = self.prefix_scanner.context(prev_output_tokens, "block", incremental_state,
                                                                  reencoded_until=until)
        reencoded = until == column
        if bool(reencoded.all()):  # every row re-encodes (B = 1: at every step, nothing cached)
            cache = incremental_state if self.blockwise else None
            if cache is not None:
                self.forget_self_attention(cache)
            return self.reencode_newest(prev_output_tokens, encoder_out, syntax, cache)
        x = self.decoder_input(prev_output_tokens, incremental_state, syntax)
        newest = prev_output_tokens[:, -1:].eq(self.padding_idx)
        x, extra = self.run_layers(x, encoder_out, incremental_state, None, newest if bool(newest.any()) else None,
                                   syntax)
        if bool(reencoded.any()):
            x, extra["attn"][0] = self.rows_reencoded(reencoded.nonzero(as_tuple=True)[0], prev_output_tokens,
                                                      encoder_out, syntax, incremental_state, x, extra["attn"][0])
        return x, extra

    def reencode_newest(self, prev_output_tokens: Tensor, encoder_out, syntax, cache, encoder_attn_states=None):
        """The newest column's features, (B, 1, C), and extra, of the rows' prefixes re-encoded bidirectionally;
        with `cache` (an incremental state) their keys and values, and the input mechanism's inputs, kept there."""
        padding = prev_output_tokens.eq(self.padding_idx)
        padding = padding if bool(padding.any()) else None
        x = self.embed(prev_output_tokens)
        if self.input_module is not None:  # its kept inputs serve the causal steps until the next block start
            x = self.input_module(x, syntax, padding, incremental_state=cache)
        # the top layer computes the newest column only (the others' keys and values fill the cache)
        column = prev_output_tokens.size(1) - 1
        x, extra = self.run_layers(x, encoder_out, cache, None, padding, syntax,
                                   query_start=column if self.top_layer_predicted_only else 0,
                                   encoder_attn_states=encoder_attn_states)
        if extra["attn"][0] is not None:
            extra["attn"][0] = extra["attn"][0][:, -1:]
        return x[:, -1:], extra

    def rows_reencoded(self, rows: Tensor, prev_output_tokens: Tensor, encoder_out, syntax, incremental_state,
                       x: Tensor, attn: Optional[Tensor]):
        """Re-encoding at (after) arcs, a step at which only `rows` re-encode (the others took a causal step, and so did
        these, in vain): their prefixes re-encoded in a cache of their own, which then replaces their rows of every
        layer's self-attention cache and of the input mechanism's kept inputs; their newest features replace
        theirs in x (B, 1, C) and in the alignment attention (B, 1, S), if any."""
        tokens = prev_output_tokens.index_select(0, rows)
        view_syntax = {name: value.index_select(0, rows) for name, value in syntax.items() if name != DECODER_CONTEXT}
        if DECODER_CONTEXT in syntax:
            view_syntax[DECODER_CONTEXT] = syntax[DECODER_CONTEXT].view(
                rows, tokens, tokens.new_full((rows.size(0),), tokens.size(1) - 1))
        # the encoder-attention keys and values the causal step projected (or found) serve these rows as they are
        projected = [layer.encoder_attn._get_input_buffer(incremental_state) if layer.encoder_attn is not None else {}
                     for layer in self.layers]
        encoder_states = (self.view_encoder_states(projected, rows)
                          if all(state.get("prev_key") is not None for state in projected) else None)
        own: Dict = {}
        reencoded_x, extra = self.reencode_newest(tokens, select_encoder_out(encoder_out, rows), view_syntax, own,
                                                  encoder_attn_states=encoder_states)
        for layer in self.layers:
            kept, replacement = (layer.self_attn._get_input_buffer(state) for state in (incremental_state, own))
            for name in ("prev_key", "prev_value"):
                kept[name] = kept[name].index_copy(0, rows, replacement[name])
            kept["prev_key_padding_mask"] = replace_mask_rows(kept.get("prev_key_padding_mask"), rows,
                                                              replacement.get("prev_key_padding_mask"),
                                                              kept["prev_key"].shape[0], kept["prev_key"].shape[2])
            layer.self_attn._set_input_buffer(incremental_state, kept)
        if self.input_module is not None:
            self.input_module.replace_incremental_rows(incremental_state, rows, own)
        if attn is not None and extra["attn"][0] is not None:
            attn = attn.index_copy(0, rows, extra["attn"][0].to(attn))
        return x.index_copy(0, rows, reencoded_x.to(x)), attn

    def forget_self_attention(self, incremental_state):
        """Empty every layer's self-attention cache: the re-encoded prefix's keys and values replace it."""
        for layer in self.layers:
            layer.self_attn._set_input_buffer(incremental_state, {})

    # ---- training -------------------------------------------------------------------------------------------------

    def view_rows(self, lengths: Tensor, width: int) -> Tensor:
        """(B, width) bool: the positions predicted this update (sampled prefixes: k per sentence)."""
        columns = torch.arange(width, device=lengths.device)
        real = columns.unsqueeze(0) < lengths.unsqueeze(1)
        k = self.sampled_prefixes
        if k <= 0 or not self.training:
            return real
        # k distinct real columns per sentence, uniformly: the k smallest of random keys among its real columns
        keys = torch.rand(real.shape, device=lengths.device).masked_fill(~real, 2.0)
        rank = keys.argsort(dim=1).argsort(dim=1)
        return real & (rank < k)

    def views(self, lengths: Tensor, chosen: Tensor, tokens: Tensor):
        """The views to run, as (rows, widths, until), per row: its view's width and the column m up to which it
        is re-encoded (bidirectional), causal after it; a row predicts its columns m..width-1. Every position: one
        view per block start m, rows right-padded to the widest. Sampled prefixes: right-padded groups of
        one-prefix views of several widths (view_buckets), each row's whole prefix bidirectional."""
        if self.predicts_some_positions and self.training:
            view_sentence, view_column = chosen.nonzero(as_tuple=True)
            for rows, widths in view_buckets(view_sentence, view_column + 1, PADDING_ALLOWED):
                yield rows, widths, widths - 1
            return
        longest = int(lengths.max()) if lengths.numel() else 0
        if self.arc_tokens is not None:  # one view per block start column, of the rows that re-encode there
            starts = self.arc_block_starts(tokens, lengths)
            for start in range(longest):
                rows = starts[:, start].nonzero(as_tuple=True)[0]
                if rows.numel():  # each row's block runs to its next start (or its end)
                    later = starts.index_select(0, rows)[:, start + 1:]
                    widths = lengths.index_select(0, rows)
                    if later.size(1):
                        widths = torch.where(later.any(dim=1), later.long().argmax(dim=1) + start + 1, widths)
                    yield rows, widths, torch.full_like(widths, start)
            return
        for start in range(0, longest, self.reencode_every):
            rows = (lengths > start).nonzero(as_tuple=True)[0]
            widths = lengths.index_select(0, rows).clamp(max=start + self.reencode_every)
            yield rows, widths, torch.full_like(widths, start)

    def encoder_attention_states(self, encoder_out) -> Optional[List[Dict[str, Optional[Tensor]]]]:
        """Per layer, the encoder-attention keys and values of every sentence, projected once for all its views
        (fairseq's saved-state layout, (B, heads, S, head_dim)); None where a view must project its own (no
        encoder attention, or activation checkpointing, which recomputes a layer from its tensor arguments only)."""
        if (encoder_out is None or not encoder_out.get("encoder_out") or self.cfg.checkpoint_activations
                or any(layer.encoder_attn is None for layer in self.layers)):
            return None
        encoder = encoder_out["encoder_out"][0]  # (S, B, C)
        padding = encoder_out["encoder_padding_mask"][0] if encoder_out.get("encoder_padding_mask") else None
        states = []
        for layer in self.layers:
            attention = layer.encoder_attn
            split = (encoder.size(0), encoder.size(1), attention.num_heads, attention.head_dim)
            states.append({"prev_key": attention.k_proj(encoder).view(split).permute(1, 2, 0, 3),
                           "prev_value": attention.v_proj(encoder).view(split).permute(1, 2, 0, 3),
                           "prev_key_padding_mask": padding})
        return states

    def view_encoder_states(self, states, rows: Tensor):
        if states is None:
            return None
        selected = []
        for layer, state in zip(self.layers, states):
            view_state: Dict = {}
            layer.encoder_attn._set_input_buffer(view_state, {
                name: value.index_select(0, rows) if value is not None else None for name, value in state.items()})
            selected.append(view_state)
        return selected

    def run_all_views(self, prev_output_tokens: Tensor, encoder_out, syntax, context: Optional[DecoderContext]):
        """Every view of the rows (training), each row's predicted columns gathered into (B, T, C)."""
        batch, width = prev_output_tokens.shape
        lengths = prev_output_tokens.ne(self.padding_idx).sum(dim=1)
        chosen = self.view_rows(lengths, width)
        features = None
        auxiliary_losses: Dict[str, Tensor] = {}
        # features (one row per sentence) follow their sentence into each view; those aligned with the target's
        # columns are cut to it. The decoder context, the one other entry, is cut per view (DecoderContext.view)
        per_sentence = {name: value for name, value in syntax.items() if name in FEATURES}
        unknown = set(syntax) - set(per_sentence) - {DECODER_CONTEXT}
        if unknown:
            raise ValueError(f"BiTran's views cannot cut the syntax entries {sorted(unknown)}: not batch features "
                             f"(data/features.py FEATURES) nor the decoder context")
        column_aligned = {name for name in per_sentence if
                          FEATURES[name].alignment in ("target", "prev_output") and
                          FEATURES[name].kind not in ("word_value", "edge_value")}
        embedded = self.embed(prev_output_tokens)  # (T, B, C), once per sentence for all its views
        encoder_states = self.encoder_attention_states(encoder_out)
        for rows, widths, until in self.views(lengths, chosen, prev_output_tokens):
            wide, start = int(widths.max()), int(until.min())
            columns = torch.arange(wide, device=prev_output_tokens.device)
            outside = columns.unsqueeze(0) >= widths.unsqueeze(1)  # a shorter view's columns, padded on the right
            tokens = prev_output_tokens.index_select(0, rows)[:, :wide].masked_fill(outside, self.padding_idx)
            view_syntax = {name: value.index_select(0, rows)[:, :wide] if name in column_aligned
                           else value.index_select(0, rows) for name, value in per_sentence.items()}
            if context is not None:
                view_syntax[DECODER_CONTEXT] = context.view(rows, tokens, until)
            padding = tokens.eq(self.padding_idx)
            padding = padding if bool(padding.any()) else None
            x = embedded[:wide].index_select(1, rows)
            if self.input_module is not None:
                x = self.input_module(x, view_syntax, padding)
            mask = None
            if self.blockwise:  # one m for every row: the columns after it attend causally
                causal = columns.view(1, -1) > torch.maximum(columns, columns.new_tensor(start)).view(-1, 1)
                if bool(causal.any()):
                    mask = torch.zeros(wide, wide, device=x.device, dtype=x.dtype).masked_fill(causal, float("-inf"))
            query_start = start if self.top_layer_predicted_only else 0
            x, extra = self.run_layers(x, select_encoder_out(encoder_out, rows), None, mask, padding, view_syntax,
                                       query_start=query_start,
                                       encoder_attn_states=self.view_encoder_states(encoder_states, rows))
            for name, value in extra.get("auxiliary_losses", {}).items():
                auxiliary_losses[name] = auxiliary_losses[name] + value if name in auxiliary_losses else value
            if features is None:
                features = x.new_zeros(batch, width, x.size(-1))
            # each row's predicted columns, until..width-1
            predicted = (columns.unsqueeze(0) >= until.unsqueeze(1)) & (columns.unsqueeze(0) < widths.unsqueeze(1))
            row_index, column = predicted.nonzero(as_tuple=True)
            features = features.index_put((rows[row_index], column), x[row_index, column - query_start])
        if features is None:
            features = prev_output_tokens.new_zeros(batch, width, self.output_embed_dim, dtype=torch.float)
        extra = {"attn": [None], "inner_states": [features.transpose(0, 1)], PREDICTED: chosen}
        if self.predicts_some_positions and self.training:
            # only the sampled positions are predicted: packed as (1, N, C) in the order of chosen.nonzero(), so the
            # output projection and the loss run on those N alone (the model's get_targets packs the targets alike)
            features = features[chosen].unsqueeze(0)
            extra[PACKED] = True
        if auxiliary_losses:
            extra["auxiliary_losses"] = auxiliary_losses
        return features, extra


def replace_mask_rows(mask: Optional[Tensor], rows: Tensor, replacement: Optional[Tensor], batch: int,
                      length: int) -> Optional[Tensor]:
    """A cached key padding mask (batch, length) with `rows` replaced, either side possibly None (no padding)."""
    if mask is None and replacement is None:
        return None
    if mask is None:
        mask = torch.zeros(batch, length, dtype=torch.bool, device=rows.device)
    if replacement is None:
        replacement = torch.zeros(rows.size(0), length, dtype=mask.dtype, device=mask.device)
    return mask.index_copy(0, rows, replacement.to(mask.dtype))


# with sampled prefixes a bucket of views may run up to 25% more columns than its views have (view_buckets): measured
# on 1 CPU thread at the _multi30k size, k = 4 trains at 0.48x Linearized's speed with one call per width and 0.53x
# with these buckets, while exact training (many views per width) was 14% slower with them than without padding
PADDING_ALLOWED = 1.25


def view_buckets(sentences: Tensor, widths: Tensor, allowed: float = PADDING_ALLOWED):
    """Groups of BiTran views (sentence, prefix width) run as one right-padded batch: widest first, a group takes
    the next view while its padded columns (rows x its widest) stay within `allowed` x the views' own columns.
    Views of one width never pad; with `allowed` 1 every group is one width. Fewer, larger groups save per-call
    overhead where views are few per width (sampled prefixes). Yields (sentences, widths) per group."""
    order = torch.argsort(widths, descending=True, stable=True)
    sentences, widths = sentences[order], widths[order]
    counts = widths.tolist()
    start = 0
    while start < len(counts):
        wide, own, stop = counts[start], 0, start
        while stop < len(counts) and (stop - start + 1) * wide <= allowed * (own + counts[stop]):
            own += counts[stop]
            stop += 1
        yield sentences[start:stop], widths[start:stop]
        start = stop
