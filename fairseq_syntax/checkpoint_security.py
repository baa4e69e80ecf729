"""Checkpoints load with torch's weights-only unpickler. fairseq checkpoints hold an argparse.Namespace of the
training args (and plain containers); these are the only non-tensor globals we allow, added to torch's
allowlist at plugin import. Nothing here turns weights-only loading off."""
import argparse

import torch

CHECKPOINT_SAFE_GLOBALS = [argparse.Namespace]


def allow_fairseq_checkpoint_globals():
    torch.serialization.add_safe_globals(CHECKPOINT_SAFE_GLOBALS)
