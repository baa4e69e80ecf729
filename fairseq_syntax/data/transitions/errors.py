"""The errors of the transition system: trees the oracle cannot derive, and tokens that may not follow a prefix."""
from typing import Tuple


class TransitionError(ValueError):
    """Base of this module's errors."""


class InvalidTreeError(TransitionError):
    """The heads/labels/pieces given to the oracle are not one tree over the pieces' words; `reason` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class NonProjectiveError(InvalidTreeError):
    """A tree arc-standard cannot derive; `crossing` holds two crossing arcs (head, dependent), 1-based words,
    head 0 = the root arc."""

    def __init__(self, crossing: Tuple[Tuple[int, int], Tuple[int, int]]):
        self.crossing = crossing
        (h1, d1), (h2, d2) = crossing
        super().__init__(f"non-projective tree: arc {h1}->{d1} crosses arc {h2}->{d2} (1-based words, 0 = root); "
                         "arc-standard transitions derive projective trees only")


class InvalidTransitionError(TransitionError):
    """A token that may not follow the prefix it was given after."""
