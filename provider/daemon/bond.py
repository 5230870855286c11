"""The daemon's bond: read from the chain at start and with each heartbeat, a warning when it
is under the market's minimum or unbonding, and the bond that backs each acceptance. A job
whose close would outlast a running unbonding notice is refused (`check_bond` says why):
accepting it would promise a bond that may be gone when the consumer needs it."""

from __future__ import annotations

import dataclasses
import logging

from pycardano import UTxO

from offchain.chain.time import iso
from offchain.protocol.checks.bond_check import BondRefused, check_bond, covers_before
from offchain.protocol.ledger.types import BondDatum, Just
from offchain.protocol.tx.bond import bonds_of
from offchain.protocol.tx.txbuild import Clock, out_ref
from provider.daemon.chain import Chain

log = logging.getLogger("unchained.provider")


@dataclasses.dataclass(frozen=True)
class BondView:
    """The provider's bond as the chain has it (ref None: no bond)."""

    ref: str | None
    lovelace: int
    unbonding_ends_ms: int | None  # None: not unbonding

    def describe(self) -> str:
        if self.ref is None:
            return "no bond"
        state = (
            "active" if self.unbonding_ends_ms is None
            else f"unbonding, withdrawable from {iso(self.unbonding_ends_ms)}"
        )  # fmt: skip
        return f"bond {self.ref}: {self.lovelace} lovelace, {state}"


def _view(chain: Chain, bond: UTxO, datum: BondDatum) -> BondView:
    since = datum.unbonding_since
    ends = since.value + chain.deployment.notice_ms if isinstance(since, Just) else None
    return BondView(out_ref(bond), bond.output.amount.coin, ends)


class BondManager:
    def __init__(self, chain: Chain, minimum_lovelace: int) -> None:
        self.chain = chain
        self.minimum = minimum_lovelace
        self.view = BondView(None, 0, None)

    def _bonds(self) -> list[tuple[UTxO, BondDatum]]:
        chain = self.chain
        found = bonds_of(chain.context, chain.deployment, chain.payout, chain.wallet.vkey)
        # the active bonds first, then those unbonding longest; the largest first among equals
        return sorted(found, key=lambda item: (
            isinstance(item[1].unbonding_since, Just),
            -(item[1].unbonding_since.value if isinstance(item[1].unbonding_since, Just) else 0),
            -item[0].output.amount.coin,
        ))  # fmt: skip

    def refresh(self) -> BondView:
        """Read the bond again and warn about what the operator should fix (worker thread)."""
        bonds = self._bonds()
        self.view = _view(self.chain, *bonds[0]) if bonds else BondView(None, 0, None)
        if self.view.lovelace < self.minimum:
            log.warning(
                "%s: under the market's minimum of %d lovelace (`provider bond create/top-up`)",
                self.view.describe(), self.minimum,
            )  # fmt: skip
        elif self.view.unbonding_ends_ms is not None:
            covers = self.view.unbonding_ends_ms - self.chain.deployment.refund_window_ms
            log.warning("%s: jobs closing from %s on are refused (the consumer's refund window "
                        "must end before it)", self.view.describe(), iso(covers))  # fmt: skip
        return self.view

    def covers_before(self, now_ms: int) -> int | None:
        """Jobs closing before this time (POSIX ms) are covered by one of the provider's bonds,
        seen at `now_ms` (`bond_check.covers_before`); None without any bond (worker thread)."""
        deployment = self.chain.deployment
        covers = [
            covers_before(deployment.notice_ms, deployment.refund_window_ms,
                          since.value if isinstance(since, Just) else None, now_ms)
            for _, datum in self._bonds()
            for since in [datum.unbonding_since]
        ]  # fmt: skip
        return max(covers, default=None)

    def backing(self, close_ms: int) -> UTxO | None:
        """The bond that backs an acceptance of a job closing at `close_ms` (worker thread);
        None without any bond; BondRefused when every bond could leave before the close."""
        bonds = self._bonds()
        if not bonds:
            return None
        chain = self.chain
        vkey, payout = chain.wallet.vkey, chain.payout
        refusal: BondRefused | None = None
        now = Clock.now(chain.context).tip_ms
        for bond, _ in bonds:
            try:
                check_bond(chain.deployment, bond, vkey, payout, 0, close_ms, now)
                return bond
            except BondRefused as exc:
                refusal = refusal or exc
        assert refusal is not None
        raise refusal
