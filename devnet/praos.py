"""Block production as Ouroboros Praos does it, for the `realistic` devnet profile.

Each slot has a leader with probability f (the active slot coefficient: mainnet's 1/20, a
block every 20 slots on average, and now and then a minute without one), and a produced block
is orphaned now and then: a fork of depth 1..k whose competing chain the node switches to.
Every draw is a function of (seed, slot), like a VRF output: the same seed gives the same
leader slots and forks whenever the loop happens to wake up, and integers only (no floats).
"""

from __future__ import annotations

import dataclasses
import random
from fractions import Fraction


@dataclasses.dataclass(frozen=True)
class Praos:
    """Who leads which slot, and which produced blocks a fork takes back (and how deep)."""

    active_slot_coeff: Fraction  # probability that a slot has a block
    fork_rate: Fraction  # probability that a produced block is rolled back before the next
    fork_depth_max: int  # a fork's depth is uniform in 1..fork_depth_max (k)
    seed: int

    def __post_init__(self) -> None:
        if not 0 < self.active_slot_coeff <= 1:
            raise ValueError(f"active_slot_coeff must be in (0, 1], not {self.active_slot_coeff}")
        if not 0 <= self.fork_rate <= 1:
            raise ValueError(f"fork_rate must be in [0, 1], not {self.fork_rate}")
        if self.fork_depth_max < 1:
            raise ValueError(f"fork_depth_max must be at least 1, not {self.fork_depth_max}")

    def leads(self, slot: int) -> bool:
        """Whether slot `slot` has a block (the leader's VRF output below f)."""
        return _chance(self._draw("leader", slot), self.active_slot_coeff)

    def fork_depth(self, slot: int, chain_length: int) -> int:
        """How many blocks a fork takes back after the block forged in `slot` (0: none). At
        most `chain_length - 1`: the first block is the devnet's origin and stays."""
        draw = self._draw("fork", slot)
        if chain_length < 2 or not _chance(draw, self.fork_rate):
            return 0
        return 1 + draw.randrange(min(self.fork_depth_max, chain_length - 1))

    def _draw(self, purpose: str, slot: int) -> random.Random:
        return random.Random(f"{self.seed}/{purpose}/{slot}")  # seeded by a string: sha512


def _chance(draw: random.Random, probability: Fraction) -> bool:
    """True with exactly `probability`, drawn with integers."""
    return draw.randrange(probability.denominator) < probability.numerator
