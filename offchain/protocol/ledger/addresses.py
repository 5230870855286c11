"""pycardano Address <-> the Plutus Address data the validators compare whole.

Validators compare full addresses (payment and stake part), so a payout to the right payment
key with someone else's stake key is a different address: convert exactly, never drop a part.
"""

from __future__ import annotations

from pycardano import Address, Network, PointerAddress, ScriptHash, VerificationKeyHash

from offchain.protocol.ledger.types import (
    Credential,
    NoStakingCredential,
    PlutusAddress,
    PubKeyCredential,
    ScriptCredential,
    SomeStakingCredential,
    StakingHash,
    StakingPtr,
)


def to_plutus(address: Address) -> PlutusAddress:
    """The Data a script sees for an output at `address` (Byron addresses have none)."""
    if address.payment_part is None:
        raise ValueError(f"{address} has no payment credential (a reward address?)")
    staking = address.staking_part
    if staking is None:
        stake: SomeStakingCredential | NoStakingCredential = NoStakingCredential()
    elif isinstance(staking, PointerAddress):
        stake = SomeStakingCredential(
            StakingPtr(staking.slot, staking.tx_index, staking.cert_index)
        )
    else:
        stake = SomeStakingCredential(StakingHash(_credential(staking)))
    return PlutusAddress(_credential(address.payment_part), stake)


def from_plutus(data: PlutusAddress, network: Network) -> Address:
    """The pycardano Address for Plutus address data, on `network` (the data has no network)."""
    staking: VerificationKeyHash | ScriptHash | PointerAddress | None = None
    if isinstance(data.stake, SomeStakingCredential):
        inner = data.stake.staking
        if isinstance(inner, StakingPtr):
            staking = PointerAddress(inner.slot, inner.tx_index, inner.cert_index)
        else:
            staking = _hash(inner.credential)
    return Address(_hash(data.payment), staking, network=network)


def key_address(text: str, network: Network | None = None) -> Address:
    """The bech32 address `text`, paid to a key (a verification key hash, not a script), on
    `network` if one is named; ValueError saying what it is not."""
    try:
        address = Address.from_primitive(text)
    except Exception as exc:  # pycardano raises several kinds for a bad address
        raise ValueError(f"{text!r} is not a Cardano address (bech32)") from exc
    if not isinstance(address.payment_part, VerificationKeyHash):
        raise ValueError(f"{text} is not paid to a key (a script's or a reward address)")
    if network is not None and address.network != network:
        raise ValueError(f"{text} is an address of {address.network.name.lower()}, not of "
                         f"{network.name.lower()}")  # fmt: skip
    return address


def _credential(part: VerificationKeyHash | ScriptHash) -> Credential:
    if isinstance(part, ScriptHash):
        return ScriptCredential(part.payload)
    return PubKeyCredential(part.payload)


def _hash(credential: Credential) -> VerificationKeyHash | ScriptHash:
    if isinstance(credential, ScriptCredential):
        return ScriptHash(credential.hash)
    return VerificationKeyHash(credential.hash)
