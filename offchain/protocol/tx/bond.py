"""Bond transactions: create, top up, begin unbonding, withdraw, and slash (with a refund).

The bond's continuing output keeps the bond's full address, so its stake part (and the
staking rewards) cannot be redirected. Each builder returns an unsigned transaction. A bond
has an owner, the key of the address its datum names (`provider`: the provider's payout
address), and a provider key (`provider_vkey`, which signs acceptances): the owner signs
begin-unbond and withdraw, the provider key a top-up, whoever pays a create, a payer a slash
(the consumer, within the escrow's refund window). The owner is the provider key itself when
the provider is paid at its key's own address, or a cold key kept off the daemon's machine.
"""

from __future__ import annotations

import copy

from pycardano import (
    Address,
    ChainContext,
    PaymentVerificationKey,
    PlutusData,
    Redeemer,
    Transaction,
    TransactionBuilder,
    TransactionOutput,
    UTxO,
    Value,
    VerificationKeyHash,
)

from offchain.chain.context import queries
from offchain.chain.time import iso
from offchain.chain.utxo import utxo_at
from offchain.protocol.ledger.addresses import from_plutus, to_plutus
from offchain.protocol.ledger.payloads import acceptance_payload, verify
from offchain.protocol.ledger.split import slash_share
from offchain.protocol.ledger.types import (
    BeginUnbond,
    BondDatum,
    Just,
    Nothing,
    Slash,
    SlashPayout,
    TopUp,
    TxOutRef,
    Withdraw,
)
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.escrow import add_refund
from offchain.protocol.tx.txbuild import (
    TTL_MS,
    BuildError,
    Clock,
    add_inputs,
    add_output,
    build,
    fee_inputs,
    ledger_inputs,
    new_builder,
    out_ref,
    read_datum,
    script_source,
    tagged_output,
)

BOND_OUTPUT = 0  # the bond output of create, top-up and begin-unbond
SLASHED_BOND_OUTPUT = 2  # a slash's continuing bond, after the refund and the consumer's share


def create(
    context: ChainContext,
    deployment: Deployment,
    provider: Address,
    provider_vkey: bytes,
    lovelace: int,
    payer: Address | None = None,
) -> Transaction:
    """Post a bond owned by `provider` (its payout address, a key's) backing the acceptances
    of `provider_vkey`, staked like `provider`, paid from `payer`'s address (None: the
    provider's own), whose key signs."""
    if not isinstance(provider.payment_part, VerificationKeyHash):
        raise BuildError(f"a bond's owner must be a key, and {provider} is not a key's address")
    datum = BondDatum(to_plutus(provider), provider_vkey, Nothing())
    source = payer or provider
    builder = new_builder(context)
    builder.add_input_address(source)
    builder.add_output(TransactionOutput(deployment.bond_address(provider), lovelace, datum=datum))
    return build(builder, source)


def bond_datum(deployment: Deployment, bond: UTxO) -> BondDatum:
    """The datum of a bond UTxO; raises BuildError for anything else."""
    return read_datum(bond, BondDatum, deployment.bond_hash, "bond")


def bonds_of(
    context: ChainContext, deployment: Deployment, provider: Address, provider_vkey: bytes
) -> list[tuple[UTxO, BondDatum]]:
    """The bonds naming `provider_vkey` at the provider's bond address. Every provider without
    a stake key shares that address, and anyone can send anything there: the datum decides."""
    found = []
    for utxo in context.utxos(deployment.bond_address(provider)):
        try:
            datum = bond_datum(deployment, utxo)
        except BuildError:
            continue
        if datum.provider_vkey == provider_vkey:
            found.append((utxo, datum))
    return found


def top_up(
    context: ChainContext,
    deployment: Deployment,
    bond: UTxO,
    provider: Address,
    lovelace: int,
) -> Transaction:
    """Add `lovelace` from the provider key's address `provider` to its bond; the provider
    key signs (the daemon's hot key may: a top-up only adds, while a stranger's would spend
    the bond UTxO a consumer's slash names)."""
    if lovelace <= 0:
        raise BuildError("a top-up must add lovelace")
    datum = bond_datum(deployment, bond)
    _check_signer(provider, PaymentVerificationKey(datum.provider_vkey).hash(), "provider key")
    builder = _spend_bond(deployment, bond, TopUp(BOND_OUTPUT), context)
    _continue(builder, bond, datum, bond.output.amount.coin + lovelace)
    return _signed_by(builder, provider)


def begin_unbond(
    context: ChainContext, deployment: Deployment, bond: UTxO, owner: Address
) -> Transaction:
    """Start the notice period; withdraw after it (`Deployment.notice_ms`). The owner signs
    and pays the fee from `owner` (an address of its key). The notice runs from the
    transaction's validity upper bound (at most `TTL_MS` from now): the validator takes no
    earlier time, as the submitter could backdate a lower bound."""
    datum = _owned_bond(deployment, bond, owner)
    if isinstance(datum.unbonding_since, Just):
        raise BuildError(f"the bond is unbonding since {iso(datum.unbonding_since.value)}")
    clock = Clock.now(context)
    builder = _spend_bond(deployment, bond, BeginUnbond(BOND_OUTPUT), context)
    builder.ttl = clock.ttl_until(clock.tip_ms + TTL_MS)
    since = clock.time.slot_to_posix_ms(builder.ttl)  # what the validator sees as the upper bound
    unbonding = BondDatum(datum.provider, datum.provider_vkey, Just(since))
    _continue(builder, bond, unbonding, bond.output.amount.coin)
    return _signed_by(builder, owner)


def withdraw(
    context: ChainContext, deployment: Deployment, bond: UTxO, owner: Address
) -> Transaction:
    """Take the bond back to `owner` (an address of the owner's key, which signs) once the
    notice has run out."""
    datum = _owned_bond(deployment, bond, owner)
    if not isinstance(datum.unbonding_since, Just):
        raise BuildError("the bond is not unbonding: begin unbonding first")
    clock = Clock.now(context)
    first = clock.first_slot_at(datum.unbonding_since.value + deployment.notice_ms)
    if clock.tip_slot < first:
        raise BuildError(f"the unbonding notice runs until {clock.iso_slot(first)}")
    builder = _spend_bond(deployment, bond, Withdraw(), context)
    builder.validity_start = clock.tip_slot
    return _signed_by(builder, owner)


def slash(
    context: ChainContext,
    deployment: Deployment,
    escrow: UTxO,
    bond: UTxO,
    acceptance_signature: bytes,
    submitter: Address,
) -> Transaction:
    """Refund an accepted but unsettled escrow and pay its consumer a share of the bond.

    Needs the provider's signed Acceptance of that escrow; the refund and the slash are one
    transaction, so an escrow slashes at most once. Within the refund window only the
    consumer may submit it. `bond` may be one the provider has spent since (topped up): the
    bond's current UTxO is slashed (`current_bond`).
    """
    clock = Clock.now(context)
    bond = current_bond(context, deployment, bond)
    bond_data = bond_datum(deployment, bond)
    builder = new_builder(context)
    fee = fee_inputs(context, submitter)
    inputs = ledger_inputs([escrow, bond], fee)
    escrow_data = add_refund(context, builder, deployment, escrow, clock, inputs, submitter)
    if escrow_data.provider_vkey != bond_data.provider_vkey:
        raise BuildError("the escrow's provider is not the bond's provider")
    payload = acceptance_payload(
        deployment.network_id,
        deployment.escrow_hash,
        escrow.input,
        escrow_data.job_id,
        deployment.bond_hash,
    )
    if not verify(bond_data.provider_vkey, payload, acceptance_signature):
        raise BuildError(f"no acceptance of {out_ref(escrow)} signed by the bond's provider")
    share = slash_share(bond.output.amount.coin, deployment.slash_share_bps)
    consumer = from_plutus(escrow_data.consumer, deployment.network)
    tag = SlashPayout(TxOutRef.of(escrow.input), TxOutRef.of(bond.input))
    consumer_output = add_output(builder, tagged_output(context, consumer, share, tag))
    redeemer = Slash(
        inputs.index(escrow.input), acceptance_signature, consumer_output, len(builder.outputs)
    )
    builder.add_script_input(
        bond, script=script_source(builder, deployment.bond_ref), redeemer=Redeemer(redeemer)
    )
    _continue(builder, bond, bond_data, bond.output.amount.coin - share)
    add_inputs(builder, fee)
    return build(builder, submitter)


def current_bond(context: ChainContext, deployment: Deployment, bond: UTxO) -> UTxO:
    """`bond` if it is unspent, else the largest bond its provider holds at its address now:
    a provider that tops up (or begins unbonding) spends the bond a slash was built for, and
    its acceptance backs the job with any bond of this script, so the slash takes the current
    one. BuildError when the provider holds none there (withdrawn)."""
    unspent = utxo_at(queries(context), bond.input)
    if unspent is not None:
        return unspent
    datum = bond_datum(deployment, bond)
    provider = from_plutus(datum.provider, deployment.network)
    found = bonds_of(context, deployment, provider, datum.provider_vkey)
    if not found:
        raise BuildError(f"bond {out_ref(bond)} is spent and its provider holds no other bond")
    return max(found, key=lambda pair: pair[0].output.amount.coin)[0]


def bond_owner(deployment: Deployment, datum: BondDatum) -> Address:
    """The address that owns a bond (its datum's `provider`), whose key alone may unbond and
    withdraw it."""
    return from_plutus(datum.provider, deployment.network)


def _owned_bond(deployment: Deployment, bond: UTxO, owner: Address) -> BondDatum:
    datum = bond_datum(deployment, bond)
    wanted = bond_owner(deployment, datum).payment_part
    if not isinstance(wanted, VerificationKeyHash):
        raise BuildError("the bond's owner is a script: no key can unbond or withdraw it")
    _check_signer(owner, wanted, "owner's key")
    return datum


def _check_signer(address: Address, key_hash: VerificationKeyHash, whose: str) -> None:
    if address.payment_part != key_hash:
        raise BuildError(f"{address} is not an address of the bond's {whose} ({key_hash})")


def _signed_by(builder: TransactionBuilder, signer: Address) -> Transaction:
    """A spend of the bond by the key of `signer` (the validator wants its signature), which
    pays the fee from that address."""
    builder.required_signers = [signer.payment_part]
    builder.add_input_address(signer)
    return build(builder, signer)


def _spend_bond(
    deployment: Deployment, bond: UTxO, redeemer: PlutusData, context: ChainContext
) -> TransactionBuilder:
    builder = new_builder(context)
    builder.add_script_input(
        bond, script=script_source(builder, deployment.bond_ref), redeemer=Redeemer(redeemer)
    )
    return builder


def _continue(builder: TransactionBuilder, bond: UTxO, datum: BondDatum, lovelace: int) -> int:
    """The bond's continuing output: same full address and native tokens (the validator wants
    exactly the bond's tokens to go on, so none can be taken out or dusted in), the given
    datum and lovelace."""
    value = Value(lovelace, copy.deepcopy(bond.output.amount.multi_asset))
    return add_output(builder, TransactionOutput(bond.output.address, value, datum=datum))
