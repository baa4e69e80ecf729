"""Decoding that only makes valid trees: fairseq's SequenceGenerator whose model gives invalid transitions no
probability at every step (data/transitions.py, "Budget" and the validity function), for a data-bin whose target
tokens are transition sequences (`--target-transitions`).

The hook is the EnsembleModel's forward_decoder, which receives every hypothesis's whole prefix (BOS + the tokens
so far, rows already in the beam's current order). The state of every row is the batched transition function's
(data/transition_function.py), kept in the ensemble's incremental state: each step extends it by the newest
column, and reorder_incremental_state reorders it with the beam (and drops finished sentences with it); when what
is kept does not fit the prefix (a new batch, a forced prefix), it is made again from the whole prefix. The mask
is the scan's validity function with the remaining budget of fairseq's max_len: fairseq forces EOS at step
max_len, so at step s a hypothesis may still produce max_len - s + 1 tokens (EOS included); a hypothesis that has
followed the mask can always finish within it (it never runs into the length limit with no valid move).
"""
import math
from typing import Optional

import torch
from torch import Tensor

from fairseq.search import DiverseBeamSearch
from fairseq.sequence_generator import EnsembleModel, SequenceGenerator

from ..data.transition_function import TransitionScan
from ..data.transitions import EOS

SCAN_KEY = "transition_scan"  # the ensemble's entry in the first model's incremental state


def _remaining(prefix: Tensor, max_len: Optional[int]) -> Optional[int]:
    """Tokens (EOS included) a row of `prefix` may still produce under fairseq's max_len (None: no limit)."""
    return None if max_len is None else max_len - (prefix.size(1) - 1) + 1


def transition_mask(prefix: Tensor, token_class: Tensor, max_len: Optional[int] = None) -> Tensor:
    """(B, V) bool, True where the next token is allowed after each row of `prefix` (B, 1 + n: fairseq's BOS, then
    the tokens so far), with the budget of fairseq's max_len (None: no length limit)."""
    return TransitionScan.of(prefix[:, 1:], token_class).mask(token_class, _remaining(prefix, max_len))


def transition_penalty(scan: TransitionScan, token_class: Tensor, remaining: Optional[int] = None,
                       dtype: torch.dtype = torch.float32) -> Tensor:
    """(B, V): 0 where the scan's validity function allows the token, -inf elsewhere, to be added to
    log-probabilities. Built per class (B, NUM_CLASSES) and spread over the vocabulary with one index_select
    (bench/timed_generate.py measures the masks' share of generation time)."""
    # A finished row may only repeat EOS: fairseq keeps a hypothesis that ended as a padding row of the beam
    # (marked to ignore, never finalised: sampling draws only `beam` candidates, so EOS draws become such rows), and
    # sampling needs some token with probability there ("invalid multinomial distribution" otherwise).
    allowed = scan.allowed_classes(remaining)
    allowed[:, EOS] |= scan.finished
    per_class = torch.zeros(allowed.shape, dtype=dtype, device=token_class.device).masked_fill_(~allowed, -math.inf)
    return per_class.index_select(1, token_class)


class TransitionMaskedEnsemble(EnsembleModel):
    """fairseq's EnsembleModel whose next-token log-probabilities are -inf on invalid transitions."""

    def __init__(self, models, token_class: Tensor):
        super().__init__(models)
        self.token_class = token_class
        self.max_len: Optional[int] = None  # set by TransitionSequenceGenerator for every batch

    def prefix_scan(self, tokens: Tensor, incremental_states) -> TransitionScan:
        """The transition state of every row of `tokens` (B, 1 + n), extended from the one kept for its first n - 1
        tokens when that fits, else made from the whole prefix."""
        generated = tokens[:, 1:]
        store = incremental_states[0] if incremental_states else {}
        kept = store.get(SCAN_KEY)
        if kept is not None and kept.length == generated.size(1) - 1 and kept.depth.size(0) == tokens.size(0):
            scan = kept.extend(generated[:, -1:], self.token_class)
        else:
            scan = TransitionScan.of(generated, self.token_class)
        store[SCAN_KEY] = scan
        return scan

    def forward_decoder(self, tokens, encoder_outs, incremental_states, temperature: float = 1.0):
        lprobs, attn = super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)
        if self.token_class.device != tokens.device:
            self.token_class = self.token_class.to(tokens.device)
        scan = self.prefix_scan(tokens, incremental_states)
        # added into the fresh penalty tensor: one (B, V) allocation per step (the bool-mask masked_fill took four
        # times as long, mostly allocating: 18 vs 4.7 ms for 320 rows x 8,104 symbols on one CPU thread)
        penalty = transition_penalty(scan, self.token_class[:lprobs.size(-1)], _remaining(tokens, self.max_len),
                                     lprobs.dtype)
        return penalty.add_(lprobs), attn

    def reorder_incremental_state(self, incremental_states, new_order):
        super().reorder_incremental_state(incremental_states, new_order)
        if incremental_states and incremental_states[0].get(SCAN_KEY) is not None:
            incremental_states[0][SCAN_KEY] = incremental_states[0][SCAN_KEY].index_select(new_order)


class TransitionSequenceGenerator(SequenceGenerator):
    """SequenceGenerator over TransitionMaskedEnsemble; `token_class` (V,) of the target dictionary."""

    def __init__(self, models, tgt_dict, token_class: Tensor = None, **kwargs):
        if token_class is None or len(token_class) != len(tgt_dict):
            raise ValueError("TransitionSequenceGenerator needs the class of every target symbol (token_class)")
        if kwargs.get("match_source_len"):
            raise ValueError("--match-source-len: a transition target holds arcs and attached-word marks besides its "
                             "pieces, so its length cannot follow the source's; bound it with --max-len-a/--max-len-b")
        super().__init__(TransitionMaskedEnsemble(models, token_class), tgt_dict, **kwargs)

    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        net_input = sample["net_input"]
        source = net_input["src_tokens"] if "src_tokens" in net_input else net_input["source"]
        # fairseq's own max_len of this batch (SequenceGenerator._generate; --match-source-len is refused)
        self.model.max_len = min(int(self.max_len_a * source.size(1) + self.max_len_b), self.max_len - 1)
        if prefix_tokens is not None:
            self.check_prefixes(prefix_tokens, sample.get("id"))
        if isinstance(self.search, DiverseBeamSearch) and "id" in sample:
            # fairseq's DiverseBeamSearch indexes its table of the batch's sentences (bsz rows) by the ids that
            # _generate takes from sample["id"], the dataset's: out of range after the first batch (IndexError, with
            # a stock transformer too). Without "id", _generate numbers the batch's sentences from 0, as it should.
            sample = {key: value for key, value in sample.items() if key != "id"}
        return super()._generate(sample, prefix_tokens=prefix_tokens, constraints=constraints, bos_token=bos_token)

    def check_prefixes(self, prefix_tokens: Tensor, ids: Optional[Tensor]) -> None:
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
        over = (needed > self.model.max_len + 1).nonzero().flatten()
        if len(over):
            row = int(over[0])
            raise ValueError(f"--prefix-size: the forced prefix of sentence {sentence(row)} ({int(real[row].sum())} "
                             f"tokens) needs {int(needed[row])} tokens to end as a tree, more than the "
                             f"{self.model.max_len + 1} that fairseq's maximum length allows (--max-len-a/--max-len-b)")
