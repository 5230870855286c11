"""Execution units remembered from evaluated transactions, so that the next transaction of the
same shape declares them itself instead of asking the chain to evaluate it first.

Why: pycardano's builder, when no redeemer declares units, builds the whole transaction twice
and sends the draft to `evaluateTransaction`; the node then runs every script again on
`submitTransaction`. For a 41-escrow settle that was most of the time a batch took (see
bench/market.py). With units declared, the scripts run once, on submit, and pycardano builds
once.

It is safe to be wrong: a transaction whose declared units are too small fails phase 2 in the
node's mempool check and is refused before it reaches a block (no collateral is taken). Whoever
submits then calls `forget` and builds again with evaluation.

A key names what a redeemer's cost depends on (for a settle: nothing for a spend, which costs
the same at any index; for the batch withdrawal its shape: the numbers of inputs and outputs,
each escrow's signer and payee, the escrows' places among the inputs): the caller chooses it.
The units kept are the most seen for the key, which already carry the builder's execution
margin.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

from pycardano import ExecutionUnits, PlutusData, Redeemer


@dataclasses.dataclass
class ExecutionBudgets:
    """Per key, the execution units an evaluation gave a redeemer (the most seen)."""

    units: dict[Hashable, ExecutionUnits] = dataclasses.field(default_factory=dict)
    declared: bool = False  # whether the last `redeemers` declared units (no evaluation)

    def redeemers(self, keyed: Sequence[tuple[Hashable, PlutusData]]) -> list[Redeemer]:
        """A redeemer for each (key, data): all declaring the units remembered if every key is
        known, else none (pycardano will evaluate: it takes all or none)."""
        self.declared = all(key in self.units for key, _ in keyed)
        if not self.declared:
            return [Redeemer(data) for _, data in keyed]
        return [Redeemer(data, dataclasses.replace(self.units[key])) for key, data in keyed]

    def learn(self, keys: Sequence[Hashable], redeemers: Sequence[Redeemer]) -> None:
        """Remember the units of `redeemers` (as built: evaluated, or declared by us)."""
        for key, redeemer in zip(keys, redeemers, strict=True):
            if redeemer.ex_units is None:
                continue
            seen = self.units.get(key, ExecutionUnits(0, 0))
            self.units[key] = ExecutionUnits(
                max(seen.mem, redeemer.ex_units.mem), max(seen.steps, redeemer.ex_units.steps)
            )

    def forget(self) -> None:
        """The ledger refused a transaction built from these: evaluate again from now on."""
        self.units.clear()
        self.declared = False
