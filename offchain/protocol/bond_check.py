"""Whether a bond UTxO counts as a bond: read as evidence (the market ranking offers, the
explorer, a consumer choosing a provider, a provider backing an acceptance) it must be one the
provider cannot pull before a job closes, or it backs nothing.

A bond locked with `unbonding_since = Just 0` is withdrawable at once; one with a key that is
not 32 bytes can never be slashed: neither counts.
"""

from __future__ import annotations

from pycardano import Address, UTxO

from offchain.chain.time import iso
from offchain.protocol.addresses import to_plutus
from offchain.protocol.deployment import Deployment
from offchain.protocol.refusal import Refusal, Refused, check_address, check_vkey, script_datum
from offchain.protocol.types import BondDatum, Just


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
) -> BondDatum:
    """The bond's datum if `bond` backs the provider of `provider_vkey` and `provider` with at
    least `min_lovelace` until `close_ms` (POSIX ms: the close of the jobs it backs); raises
    BondRefused naming the first reason it does not."""
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
    if isinstance(datum.unbonding_since, Just):
        ends = datum.unbonding_since.value + deployment.notice_ms
        if ends <= close_ms:
            raise BondRefused(
                bond,
                Refusal.NOTICE_ENDS,
                f"withdrawable from {iso(ends)}, the jobs it backs close at {iso(close_ms)}",
            )
    return datum
