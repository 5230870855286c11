"""Whether a bond UTxO counts as a bond: read as evidence (the market ranking offers, the
explorer, a consumer choosing a provider, a provider backing an acceptance) it must be one the
provider cannot pull before a job closes, or it backs nothing.

A bond locked with `unbonding_since = Just 0` is withdrawable at once; one with a key that is
not 32 bytes can never be slashed: neither counts. A consumer slashes an undelivered job up
to its close + the deployment's refund window (only the consumer refunds before that); a bond
covers the job only if the provider cannot take it back by then: not before its running
notice ends or, not unbonding yet, before a notice begun now would.
"""

from __future__ import annotations

from pycardano import Address, UTxO

from offchain.chain.time import iso
from offchain.protocol.checks.refusal import (
    Refusal,
    Refused,
    check_address,
    check_vkey,
    script_datum,
)
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.types import BondDatum, Just
from offchain.protocol.tx.deployment import Deployment


class BondRefused(Refused):
    """The UTxO does not count as a bond backing the provider; `reason` says why."""

    what = "bond"


def check_bond(
    deployment: Deployment,
    bond: UTxO,
    provider_vkey: bytes,
    provider: Address,
    min_lovelace: int,
    close_ms: int,
    now_ms: int,
) -> BondDatum:
    """The bond's datum if `bond` backs the provider of `provider_vkey` and `provider` with at
    least `min_lovelace` for jobs closing at `close_ms` (POSIX ms), seen at chain time
    `now_ms`; raises BondRefused naming the first reason it does not."""
    datum = script_datum(bond, BondDatum, deployment.bond_hash, BondRefused)
    check_vkey(bond, datum.provider_vkey, BondRefused)
    check_address(bond, "provider", datum.provider, BondRefused)
    if datum.provider_vkey != provider_vkey:
        raise BondRefused(bond, Refusal.OTHER_KEY, f"it names {datum.provider_vkey.hex()}")
    if datum.provider != to_plutus(provider):
        raise BondRefused(bond, Refusal.OTHER_ADDRESS, f"it names another address than {provider}")
    lovelace = bond.output.amount.coin
    if lovelace < min_lovelace:
        raise BondRefused(bond, Refusal.TOO_SMALL, f"{lovelace} < {min_lovelace} lovelace")
    since = datum.unbonding_since
    covered = covers_before(
        deployment.notice_ms,
        deployment.refund_window_ms,
        since.value if isinstance(since, Just) else None,
        now_ms,
    )
    if close_ms >= covered:
        ends = covered + deployment.refund_window_ms
        raise BondRefused(
            bond,
            Refusal.NOTICE_ENDS,
            f"withdrawable from {iso(ends)}, so it covers jobs closing before {iso(covered)}; "
            f"this one closes at {iso(close_ms)} and may be slashed "
            f"{deployment.refund_window_ms} ms after that",
        )
    return datum


def covers_before(
    notice_ms: int, refund_window_ms: int, unbonding_since: int | None, now_ms: int
) -> int:
    """A bond (of a deployment with these terms) unbonding since `unbonding_since` (None: not
    unbonding) covers the jobs closing before this time (POSIX ms), seen at `now_ms`: its
    earliest withdrawal (the notice's end; not unbonding, a notice begun now) less the refund
    window, within which the consumer still slashes. Only a close strictly before counts: at
    the notice's very end a withdrawal and the consumer's slash are both valid."""
    starts = now_ms if unbonding_since is None else unbonding_since
    return starts + notice_ms - refund_window_ms
