"""Decoding that only makes valid trees: fairseq's SequenceGenerator whose model gives invalid transitions no
probability at every step (data/transitions.py, "Budget" and the validity function), for a data-bin whose target
tokens are transition sequences (`--target-transitions`).

The hook is the EnsembleModel's forward_decoder: it receives every hypothesis's whole prefix (BOS + the tokens so
far, rows already in the beam's current order), so the validity state of every row is recomputed from its prefix
with a few vectorised reductions over (rows, prefix length) (`prefix_state`): nothing is carried between steps, so
nothing has to follow fairseq's reordering of the beam (reorder_incremental_state) or its removal of finished
sentences. The mask is BatchTransitionState.mask with the remaining budget of fairseq's max_len: fairseq forces EOS
at step max_len, so at step s a hypothesis may still produce max_len - s + 1 tokens (EOS included); a hypothesis
that has followed the mask can always finish within it (it never runs into the length limit with no valid move).
"""
import math
from typing import Optional

import torch
from torch import Tensor

from fairseq.sequence_generator import EnsembleModel, SequenceGenerator

from ..data.transitions import (
    EOS, LEFT_ARC, RIGHT_ARC, WORD_ATTACHED, WORD_CONTINUE, WORD_START, BatchTransitionState,
)


def prefix_state(prefix: Tensor, token_class: Tensor) -> BatchTransitionState:
    """The validity state of each row of `prefix` (B, 1 + n): column 0 is fairseq's BOS, the others the tokens
    generated so far. `token_class` (V,) from transitions.vocabulary_classes."""
    classes = token_class[prefix[:, 1:]]
    starts = classes.eq(WORD_START) | classes.eq(WORD_ATTACHED)
    arcs = classes.eq(LEFT_ARC) | classes.eq(RIGHT_ARC)
    num_words = starts.sum(1)
    stack = num_words - arcs.sum(1)
    if classes.size(1):
        last = classes[:, -1]
        bare = last.eq(WORD_ATTACHED)
        is_open = last.eq(WORD_START) | last.eq(WORD_CONTINUE) | bare
    else:
        bare = is_open = torch.zeros(prefix.size(0), dtype=torch.bool, device=prefix.device)
    finished = classes.eq(EOS).any(1)
    return BatchTransitionState(stack, is_open, finished, num_words, bare)


def _remaining(prefix: Tensor, max_len: Optional[int]) -> Optional[int]:
    """Tokens (EOS included) a row of `prefix` may still produce under fairseq's max_len (None: no limit)."""
    return None if max_len is None else max_len - (prefix.size(1) - 1) + 1


def transition_mask(prefix: Tensor, token_class: Tensor, max_len: Optional[int] = None) -> Tensor:
    """(B, V) bool, True where the next token is allowed after each row of `prefix` (see prefix_state), with the
    budget of fairseq's max_len (None: no length limit)."""
    return prefix_state(prefix, token_class).mask(token_class, _remaining(prefix, max_len))


def transition_penalty(prefix: Tensor, token_class: Tensor, max_len: Optional[int] = None,
                       dtype: torch.dtype = torch.float32) -> Tensor:
    """(B, V): 0 where transition_mask allows the token, -inf elsewhere, to be added to log-probabilities. Built per
    class (B, NUM_CLASSES) and spread over the vocabulary with one index_select (bench/timed_generate.py measures
    the masks' share of generation time)."""
    allowed = prefix_state(prefix, token_class).allowed_classes(_remaining(prefix, max_len))
    per_class = torch.zeros(allowed.shape, dtype=dtype, device=prefix.device).masked_fill_(~allowed, -math.inf)
    return per_class.index_select(1, token_class)


class TransitionMaskedEnsemble(EnsembleModel):
    """fairseq's EnsembleModel whose next-token log-probabilities are -inf on invalid transitions."""

    def __init__(self, models, token_class: Tensor):
        super().__init__(models)
        self.token_class = token_class
        self.max_len: Optional[int] = None  # set by TransitionSequenceGenerator for every batch

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        lprobs, attn = super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)
        if self.token_class.device != tokens.device:
            self.token_class = self.token_class.to(tokens.device)
        # added into the fresh penalty tensor: one (B, V) allocation per step (the bool-mask masked_fill took four
        # times as long, mostly allocating: 18 vs 4.7 ms for 320 rows x 8,104 symbols on one CPU thread)
        penalty = transition_penalty(tokens, self.token_class[:lprobs.size(-1)], self.max_len, lprobs.dtype)
        return penalty.add_(lprobs), attn


class TransitionSequenceGenerator(SequenceGenerator):
    """SequenceGenerator over TransitionMaskedEnsemble; `token_class` (V,) of the target dictionary."""

    def __init__(self, models, tgt_dict, token_class: Tensor = None, **kwargs):
        if token_class is None or len(token_class) != len(tgt_dict):
            raise ValueError("TransitionSequenceGenerator needs the class of every target symbol (token_class)")
        super().__init__(TransitionMaskedEnsemble(models, token_class), tgt_dict, **kwargs)

    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        net_input = sample["net_input"]
        source = net_input["src_tokens"] if "src_tokens" in net_input else net_input["source"]
        # fairseq's own max_len of this batch (SequenceGenerator._generate)
        if self.match_source_len:
            lengths = net_input.get("src_lengths")
            if lengths is None:
                lengths = (source.ne(self.eos) & source.ne(self.pad)).long().sum(dim=1)
            max_len = int(lengths.max())
        else:
            max_len = min(int(self.max_len_a * source.size(1) + self.max_len_b), self.max_len - 1)
        self.model.max_len = max_len
        return super()._generate(sample, prefix_tokens=prefix_tokens, constraints=constraints, bos_token=bos_token)
