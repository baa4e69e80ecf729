"""Registry of the per-method parts of syntax-biased attention (see syntax_attention.py).

A score modifier is an nn.Module built from the model args; called with the layer input (T, B, C), the batch's
syntax features (net_input keys listed in `features`) and the key padding mask, it returns a ScoreModification.
"""
from typing import Dict, Tuple, Type

import torch.nn as nn

SCORE_MODIFIERS: Dict[str, Type["ScoreModifier"]] = {}


def register_score_modifier(name: str):
    def register(cls):
        if name in SCORE_MODIFIERS:
            raise ValueError(f"score modifier {name!r} registered twice")
        cls.name = name
        SCORE_MODIFIERS[name] = cls
        return cls

    return register


class ScoreModifier(nn.Module):
    name = "base"
    features: Tuple[str, ...] = ()  # net_input keys (see fairseq_syntax.data.subword.SOURCE_FEATURES)

    @staticmethod
    def add_args(parser):
        pass

    def __init__(self, args, num_heads: int, embed_dim: int):
        super().__init__()
