"""What a decoder syntax mechanism gets about the target prefix, as a forward argument: the decoder context; and the
one owner of the prefix graph, the PrefixScanner, which makes it.

Target-side syntax is generated with the translation as transitions (data/transitions/tokens.py), so a decoder mechanism
reads the graph the prefix has built so far (data/transitions/function.py) rather than a parse from the data. The
PrefixScanner runs the batched transition function over the prefix (training: the whole target at once; beam search:
extended by the newest column at each step, kept in the incremental state and reordered with the beam, the one entry
that the decoder and the constrained generator's validity masks both read) and views it as a decoder context.
The context holds, for the rows the decoder runs (B rows of T columns, column 0 = BOS, column c = generated token c-1):
  tokens        (B, T) the decoder's input tokens
  edge_columns  (B, T, T) long: [b, target, source] = the column of the arc token that added the edge
                source -> target (the §3 graph: head -> dependent pieces, arc -> dependent pieces, head -> arc), -1
                where there is none
  edge_labels   (B, T, T) long: that arc's label id (TargetTransitions.label_of), -1 where there is no edge
  policy        which edges a column may use (`visible`):
                  "causal"  fairseq's decoder, each column computed once with what its step knew: column c uses
                            the edges whose arc column is <= c (the graph of the prefix it was computed from)
                  "prefix"  every row is one prefix re-encoded (BiTran): all of its edges, at every column
                  "block"   BiTran re-encoding every B steps (--reencode-every B): the columns <= m of a row
                            (m = `reencoded_until`, its last re-encoded column) were re-encoded together and use
                            the edges of that prefix (arc column <= m); a later column c was computed causally at
                            its own step and uses the edges whose arc column is <= c. "causal" is "block" with
                            m = 0, "prefix" is "block" with m = the row's last column.
  reencoded_until  (B,) long, "block" only: each row's m
Mechanisms take edges through `visible()` and never look past it, so the policy decides what a column can know.
"""
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor

from ..data.transitions.function import TransitionScan
from ..data.transitions.channels import target_token_classes
from ..data.transitions.tokens import parse_arc

POLICIES = ("causal", "prefix", "block")


class TargetTransitions:
    """The transition system over a target dictionary: the class of every symbol (pieces by the data-bin's word
    rule: sentencepiece's U+2581, or every token a word for a word vocabulary) and the label id of every arc
    symbol, labels numbered in the dictionary's order (`num_labels` of them). Made once per dictionary by its user
    (the task for its validity masks, a decoder for its mechanisms)."""

    def __init__(self, symbols: Sequence[str], word_level: bool = False):
        self.token_class = target_token_classes(symbols, word_level)
        labels, label_of = {}, []
        for symbol in symbols:
            arc = parse_arc(symbol)
            label_of.append(-1 if arc is None else labels.setdefault(arc[1], len(labels)))
        self.label_of = torch.tensor(label_of, dtype=torch.long)
        self.num_labels = len(labels)

    def to(self, device) -> "TargetTransitions":
        if self.token_class.device != torch.device(device):
            self.token_class, self.label_of = self.token_class.to(device), self.label_of.to(device)
        return self


class PrefixScanner:
    """The one owner of the prefix graph: the batched transition function of the decoder's rows (BOS, then the
    generated tokens), made whole in training, and in beam search kept in the incremental state under `KEY`,
    extended by the newest column at each step and reordered with the beam; viewed as a DecoderContext.

    The decoder that has one keeps the entry of its incremental state and reorders it; the constrained generator
    reads the same entry for its validity masks (a scan made earlier in the step is reused as it is), and keeps and
    reorders one itself only for a model whose decoder has no scanner."""

    KEY = "prefix_scan"  # its entry in an incremental state (a plain key, shared by the decoder and the generator)

    def __init__(self, transitions: TargetTransitions):
        self.transitions = transitions

    def scan(self, prev_output_tokens: Tensor, incremental_state: Optional[dict] = None) -> TransitionScan:
        """f of the generated tokens of each row (the columns after BOS). With an incremental state: the scan kept
        there when it covers these rows (made earlier in this step), else it extended by the newest column when it
        covers all but that one, else made from the whole prefix (a new batch, a forced prefix); kept again."""
        transitions = self.transitions.to(prev_output_tokens.device)
        generated = prev_output_tokens[:, 1:]
        kept = incremental_state.get(self.KEY) if incremental_state is not None else None
        kept_columns = kept.length if kept is not None and kept.depth.size(0) == generated.size(0) else None
        if kept_columns == generated.size(1):
            return kept
        if kept_columns == generated.size(1) - 1:
            scan = kept.extend(generated[:, -1:], transitions.token_class, transitions.label_of)
        else:
            scan = TransitionScan.of(generated, transitions.token_class, transitions.label_of)
        if incremental_state is not None:
            incremental_state[self.KEY] = scan
        return scan

    @classmethod
    def reorder(cls, incremental_state: dict, new_order: Tensor) -> None:
        """The kept scan's rows in the beam's new order (called by its one keeper)."""
        kept = incremental_state.get(cls.KEY)
        if kept is not None:
            incremental_state[cls.KEY] = kept.index_select(new_order)

    def context(self, prev_output_tokens: Tensor, policy: str, incremental_state: Optional[dict] = None,
                reencoded_until: Optional[Tensor] = None) -> "DecoderContext":
        """The decoder context of the rows of `prev_output_tokens` (B, T) under `policy`."""
        scan = self.scan(prev_output_tokens, incremental_state)
        columns = edge_columns_of(scan)
        return DecoderContext(prev_output_tokens, columns, edge_labels_of(scan, columns), policy, reencoded_until)


def edge_columns_of(scan: TransitionScan) -> Tensor:
    """(B, 1 + n, 1 + n) arc columns of the graph of `scan` (n generated tokens) in decoder columns (BOS first)."""
    steps = scan.parent_steps()
    batch, n, _ = steps.shape
    out = torch.full((batch, n + 1, n + 1), -1, dtype=torch.long, device=steps.device)
    out[:, 1:, 1:] = torch.where(steps >= 0, steps + 1, steps)
    return out


def edge_labels_of(scan: TransitionScan, edge_columns: Tensor) -> Tensor:
    """(B, T, T) the label of each edge's arc (-1 where none), from the scan's arc labels in decoder columns."""
    batch = edge_columns.size(0)
    arc_labels = torch.cat([scan.label.new_full((batch, 1), -1), scan.label], dim=1)  # (B, T), BOS first
    gathered = arc_labels.gather(1, edge_columns.clamp(min=0).view(batch, -1)).view_as(edge_columns)
    return torch.where(edge_columns >= 0, gathered, torch.full_like(gathered, -1))


@dataclass
class DecoderContext:
    tokens: Tensor
    edge_columns: Tensor
    edge_labels: Tensor
    policy: str = "causal"
    reencoded_until: Optional[Tensor] = None

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"decoder context policy {self.policy!r} is not one of {POLICIES}")
        if (self.policy == "block") != (self.reencoded_until is not None):
            raise ValueError("the decoder context policy 'block', and only it, takes reencoded_until (B,)")

    def visible(self, query_columns: Optional[Tensor] = None, receiver: str = "target") -> Tensor:
        """(B, Tq, T) bool, [b, target, source]: whether the column that receives along the edge source -> target
        may use it: the target (attention to parents, messages from parents) or, for a message sent back along
        the edge, the source (`receiver`). `query_columns` (Tq,) picks target columns (default: all). Under
        "causal" an edge is visible to a column from its arc's column on; under "prefix" every edge is; under
        "block" to a column from max(its arc's column, m) on."""
        columns = self.edge_columns if query_columns is None else self.edge_columns[:, query_columns]
        present = columns >= 0
        if self.policy == "prefix":
            return present
        if receiver == "source":
            receivers = torch.arange(self.edge_columns.size(2), device=columns.device).view(1, 1, -1)
        else:
            receivers = (torch.arange(self.edge_columns.size(1), device=columns.device) if query_columns is None
                         else query_columns).view(1, -1, 1)
        if self.policy == "block":
            receivers = torch.maximum(receivers, self.reencoded_until.view(-1, 1, 1))
        return present & (columns <= receivers)

    def view(self, rows: Tensor, tokens: Tensor, reencoded_until: Tensor) -> "DecoderContext":
        """The context of one of BiTran's training views: the sentences `rows` (repeated as needed) cut to the
        view's columns (`tokens`, (R, W): their prefixes, right-padded), re-encoded up to `reencoded_until` (R,)
        and causal after it (policy "block"). The whole target's graph cut to W columns may keep an edge whose arc
        lies beyond the view; `visible` never shows it to the view's columns (arc column <= max(column, m) < W)."""
        width = tokens.size(1)
        return DecoderContext(tokens, self.edge_columns.index_select(0, rows)[:, :width, :width],
                              self.edge_labels.index_select(0, rows)[:, :width, :width], "block", reencoded_until)
