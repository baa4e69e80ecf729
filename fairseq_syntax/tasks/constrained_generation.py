"""Constrained decoding, the one path by which generation restricts the next token: fairseq's SequenceGenerator
whose ensemble gives forbidden tokens no probability at every step. Mainly, decoding that only makes valid trees:
invalid transitions are forbidden (data/transitions/state.py, "Budget" and the validity function) on a data-bin whose
target tokens are transition sequences (`--target-transitions`); also the token constraints of decoder mechanisms
(modules/syntax_mechanism.py), applied at the same place.

The hook is the EnsembleModel's forward_decoder, which receives every hypothesis's whole prefix (BOS + the tokens
so far, rows already in the beam's current order). The state of every row is the batched transition function's
(data/transitions/function.py), kept by the prefix scanner (modules/decoder_context.py) in the first model's
incremental state: each step extends it by the newest column, and it is reordered with the beam (and drops finished
sentences with it); when what is kept does not fit the prefix (a new batch, a forced prefix), it is made again from
the whole prefix. A decoder that reads the prefix graph (PARENT, the decoder GCN) keeps that same entry, which the
masks then read as it is: one scan per step. The mask
is the scan's validity function with the length window of fairseq's max_len and min_len: fairseq forces EOS at
step max_len and keeps it back before step min_len, so at step s a hypothesis may still produce max_len - s + 1
tokens and must produce at least min_len - s + 1 (EOS included). A hypothesis that has followed the mask can always
end as a tree inside the window (it never runs into a step with no valid move); when the window itself is empty
(--min-len beyond a batch's maximum length) ConstrainedSequenceGenerator refuses it with a message, where fairseq
would stop at a bare assertion. Every finished hypothesis is checked: one that is not a whole tree is kept with
score -inf and counted in the generation log, never dropped silently.
"""
import logging
import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from fairseq.search import DiverseBeamSearch
from fairseq.sequence_generator import EnsembleModel, SequenceGenerator

from ..data.transitions.function import TransitionScan
from ..data.transitions.tokens import EOS, WORD_CONTINUE
from ..models.decoders import contract_of
from ..modules.decoder_context import PrefixScanner, TargetTransitions

logger = logging.getLogger(__name__)


def _remaining(prefix: Tensor, max_len: Optional[int]) -> Optional[int]:
    """Tokens (EOS included) a row of `prefix` may still produce under fairseq's max_len (None: no limit)."""
    return None if max_len is None else max_len - (prefix.size(1) - 1) + 1


def _minimum(prefix: Tensor, min_len: int) -> Optional[int]:
    """Tokens (EOS included) a row of `prefix` must still produce under fairseq's min_len (EOS only at steps >=
    min_len); None where that is no constraint."""
    minimum = min_len - (prefix.size(1) - 1) + 1
    return minimum if minimum > 1 else None


def transition_mask(prefix: Tensor, token_class: Tensor, max_len: Optional[int] = None, min_len: int = 0) -> Tensor:
    """(B, V) bool, True where the next token is allowed after each row of `prefix` (B, 1 + n: fairseq's BOS, then
    the tokens so far), within the length window of fairseq's max_len (None: no length limit) and min_len."""
    scan = TransitionScan.of(prefix[:, 1:], token_class)
    return scan.allowed_classes(_remaining(prefix, max_len), _minimum(prefix, min_len),
                                has_continuations(token_class))[:, token_class]


def has_continuations(token_class: Tensor) -> bool:
    """Whether the vocabulary has continuation pieces (a word vocabulary has none)."""
    return bool((token_class == WORD_CONTINUE).any())


def transition_penalty(scan: TransitionScan, token_class: Tensor, remaining: Optional[int] = None,
                       dtype: torch.dtype = torch.float32, minimum: Optional[int] = None,
                       continuations: bool = True) -> Tensor:
    """(B, V): 0 where the scan's validity function allows the token, -inf elsewhere, to be added to
    log-probabilities. Built per class (B, NUM_CLASSES) and spread over the vocabulary with one index_select
    (bench/timed_generate.py measures the masks' share of generation time)."""
    # A finished row may only repeat EOS: fairseq keeps a hypothesis that ended as a padding row of the beam
    # (marked to ignore, never finalised: sampling draws only `beam` candidates, so EOS draws become such rows), and
    # sampling needs some token with probability there ("invalid multinomial distribution" otherwise).
    allowed = scan.allowed_classes(remaining, minimum, continuations)
    allowed[:, EOS] |= scan.finished
    per_class = torch.zeros(allowed.shape, dtype=dtype, device=token_class.device).masked_fill_(~allowed, -math.inf)
    return per_class.index_select(1, token_class)


@dataclass(frozen=True)
class LengthWindow:
    """fairseq's length options as SequenceGenerator._generate applies them: a batch whose sources have `T` columns
    may generate max_len(T) = min(int(a T + b), cap) tokens before EOS is forced, and EOS waits for min_len."""
    max_len_a: float = 0.0
    max_len_b: Optional[int] = None  # None: no limit
    cap: Optional[int] = None
    min_len: int = 0

    def max_len(self, source_length: int) -> Optional[int]:
        if self.max_len_b is None:
            return None
        limit = int(self.max_len_a * source_length + self.max_len_b)
        return limit if self.cap is None else min(limit, self.cap)


def source_length(encoder_out) -> int:
    """The source columns T of a batch from an encoder's output (fairseq's dict: encoder_out[0] is T x B x C), the
    src_tokens.size(1) that fairseq's max_len is computed from."""
    return encoder_out["encoder_out"][0].size(0)


class ConstrainedEnsemble(EnsembleModel):
    """fairseq's EnsembleModel whose next-token log-probabilities are -inf where a constraint forbids the token:
    the one path by which generation restricts the next token. Two kinds: the transition validity masks of a data-bin
    whose target has transitions (`token_class` given), and the token constraint a decoder mechanism may build
    (modules/syntax_mechanism.py, `build_token_constraint`: the decoder's `token_constraint`, called with the prefix and
    that model's incremental state; with an ensemble, a token any model forbids is forbidden)."""

    def __init__(self, models, transitions: Optional[TargetTransitions] = None,
                 window: Optional["LengthWindow"] = None):
        super().__init__(models)
        self.token_class = transitions.token_class if transitions is not None else None
        self.continuations = transitions is not None and has_continuations(self.token_class)
        self.model_constraints = [(index, contract_of(model.decoder).token_constraint)
                                  for index, model in enumerate(models)
                                  if contract_of(getattr(model, "decoder", None)).token_constraint is not None]
        # the generator's length options, fixed; each batch's window comes from its source length in forward_decoder
        self.window = window or LengthWindow()
        # the prefix's scan: the first model's decoder's where it keeps one (read here as it is, reordered by the
        # decoder), else the ensemble's own, kept in the same incremental state and reordered here
        decoder_scanner = contract_of(getattr(models[0], "decoder", None)).prefix_scanner
        self.keeps_scan = transitions is not None and decoder_scanner is None
        self.prefix_scanner = PrefixScanner(transitions) if self.keeps_scan else decoder_scanner

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        lprobs, attn = super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)
        for index, constraint in self.model_constraints:
            forbidden = constraint(tokens, incremental_state=incremental_states[index] if incremental_states else None)
            if forbidden is not None:  # (B, T, V) bool: the last column is this step's
                lprobs = lprobs.masked_fill(forbidden[:, -1, :lprobs.size(-1)], -math.inf)
        if self.token_class is None:
            return lprobs, attn
        if self.token_class.device != tokens.device:
            self.token_class = self.token_class.to(tokens.device)
        scan = self.prefix_scanner.scan(tokens, incremental_states[0] if incremental_states else None)
        max_len = self.window.max_len(source_length(encoder_outs[0]))
        # added into the fresh penalty tensor: one (B, V) allocation per step (the bool-mask masked_fill took four
        # times as long, mostly allocating: 18 vs 4.7 ms for 320 rows x 8,104 symbols on one CPU thread)
        penalty = transition_penalty(scan, self.token_class[:lprobs.size(-1)], _remaining(tokens, max_len),
                                     lprobs.dtype, _minimum(tokens, self.window.min_len), self.continuations)
        return penalty.add_(lprobs), attn

    def reorder_incremental_state(self, incremental_states, new_order):
        super().reorder_incremental_state(incremental_states, new_order)
        if self.keeps_scan and incremental_states:
            PrefixScanner.reorder(incremental_states[0], new_order)


class ConstrainedSequenceGenerator(SequenceGenerator):
    """SequenceGenerator over ConstrainedEnsemble; `transitions`: the transition system over the target dictionary,
    on a data-bin whose target has transitions (None: only the models' token constraints)."""

    def __init__(self, models, tgt_dict, transitions: Optional[TargetTransitions] = None, **kwargs):
        if transitions is None:
            super().__init__(ConstrainedEnsemble(models), tgt_dict, **kwargs)
            return
        if len(transitions.token_class) != len(tgt_dict):
            raise ValueError(f"the transition classes cover {len(transitions.token_class)} symbols, the target "
                             f"dictionary has {len(tgt_dict)}")
        if kwargs.get("match_source_len"):
            raise ValueError("--match-source-len: a transition target holds arcs and attached-word marks besides its "
                             "pieces, so its length cannot follow the source's; bound it with --max-len-a/--max-len-b")
        if kwargs.get("max_len_a", 0) == 0 and kwargs.get("min_len", 1) > kwargs.get("max_len_b", 200):
            raise ValueError(f"--min-len {kwargs['min_len']} is more than the maximum length --max-len-b "
                             f"{kwargs.get('max_len_b', 200)}: no hypothesis could end")
        super().__init__(ConstrainedEnsemble(models, transitions), tgt_dict, **kwargs)
        # the length options as fairseq's generator has resolved them (its defaults, max_decoder_positions), once
        self.model.window = LengthWindow(self.max_len_a, self.max_len_b, self.max_len - 1, self.min_len)
        self.incomplete_hypotheses = 0  # over every batch so far (logged)
        self.hypotheses = 0

    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        if self.model.token_class is None:
            return super()._generate(sample, prefix_tokens=prefix_tokens, constraints=constraints,
                                     bos_token=bos_token)
        net_input = sample["net_input"]
        source = net_input["src_tokens"] if "src_tokens" in net_input else net_input["source"]
        max_len = self.model.window.max_len(source.size(1))
        if self.min_len > max_len:  # fairseq would stop at a bare assertion
            raise ValueError(f"--min-len {self.min_len} is more than this batch's maximum length {max_len} "
                             f"(--max-len-a {self.max_len_a} x {source.size(1)} source tokens + --max-len-b "
                             f"{self.max_len_b}): no hypothesis could end")
        if prefix_tokens is not None:
            self.check_prefixes(prefix_tokens, sample.get("id"), max_len)
        if isinstance(self.search, DiverseBeamSearch) and "id" in sample:
            # fairseq's DiverseBeamSearch indexes its table of the batch's sentences (bsz rows) by the ids that
            # _generate takes from sample["id"], the dataset's: out of range after the first batch (IndexError, with
            # a stock transformer too). Without "id", _generate numbers the batch's sentences from 0, as it should.
            sample = {key: value for key, value in sample.items() if key != "id"}
        finalized = super()._generate(sample, prefix_tokens=prefix_tokens, constraints=constraints,
                                      bos_token=bos_token)
        self.report_incomplete(finalized, max_len)
        return finalized

    def report_incomplete(self, finalized, max_len: int) -> None:
        """Counts the hypotheses that are not whole trees and logs them with the running total; they are kept (score
        -inf), not dropped, so every sentence still has its output lines. The masks plan for the length window and
        an empty window is refused, so none is expected: this is the check that nothing is lost silently if one
        ever comes out."""
        hypos = [hypo for sentence in finalized for hypo in sentence]
        self.hypotheses += len(hypos)
        if not hypos:
            return
        token_class = self.model.token_class
        tokens = torch.nn.utils.rnn.pad_sequence([hypo["tokens"] for hypo in hypos], batch_first=True,
                                                 padding_value=self.pad)
        scan = TransitionScan.of(tokens, token_class.to(tokens.device))
        real = tokens.ne(self.pad)
        whole = scan.finished & (scan.applied | ~real).all(dim=1)
        incomplete = int((~whole).sum())
        if incomplete:
            self.incomplete_hypotheses += incomplete
            logger.warning(f"{incomplete} of {len(hypos)} hypotheses of this batch are not whole trees (--min-len "
                           f"{self.min_len}, maximum length {max_len}); kept with score -inf "
                           f"({self.incomplete_hypotheses} of {self.hypotheses} so far)")
            for hypo, ok in zip(hypos, whole.tolist()):
                if not ok:
                    hypo["score"] = hypo["score"].new_tensor(-math.inf)

    def check_prefixes(self, prefix_tokens: Tensor, ids: Optional[Tensor], max_len: int) -> None:
        """A forced prefix (--prefix-size) is the state the search starts from: it must be a valid transition
        sequence that can still end as a tree within fairseq's max_len (EOS forced at step max_len); ValueError
        naming the sentence otherwise (fairseq would fail with a bare assertion, or finish an invalid sequence)."""
        token_class = self.model.token_class.to(prefix_tokens.device)
        scan = TransitionScan.of(prefix_tokens, token_class)
        real = prefix_tokens.ne(self.pad)  # a target shorter than the prefix size is padded
        sentence = (lambda row: int(ids[row])) if ids is not None else (lambda row: row)
        invalid = (real & ~scan.applied).nonzero()
        if len(invalid):
            row, column = invalid[0].tolist()
            prefix = self.tgt_dict.string(prefix_tokens[row, :column])
            raise ValueError(f"--prefix-size: the forced prefix of sentence {sentence(row)} is not a valid transition "
                             f"sequence: {self.tgt_dict[int(prefix_tokens[row, column])]!r} cannot follow "
                             f"{prefix!r}")
        needed = real.sum(dim=1) + scan.tokens_to_finish()  # tokens with EOS; at most max_len + 1 fit
        over = (needed > max_len + 1).nonzero().flatten()
        if len(over):
            row = int(over[0])
            raise ValueError(f"--prefix-size: the forced prefix of sentence {sentence(row)} ({int(real[row].sum())} "
                             f"tokens) needs {int(needed[row])} tokens to end as a tree, more than the "
                             f"{max_len + 1} that fairseq's maximum length allows (--max-len-a/--max-len-b)")
