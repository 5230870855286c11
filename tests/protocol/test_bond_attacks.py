"""Attacks on the bond, each a transaction the ledger must refuse next to its honest twin:
forged escrows, slash without a refund, shared outputs, two bonds at once, taking more
than the share, stake hijack, and actions without the provider's signature."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest
from pycardano import Address, ScriptPubkey, TransactionOutput, UTxO, Value

from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.split import slash_share
from offchain.protocol.ledger.types import (
    BeginUnbond,
    BondDatum,
    Just,
    Nothing,
    PayoutKind,
    Slash,
    TopUp,
    Withdraw,
)
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import BuildError, Clock, Wallet, ledger_inputs
from tests.protocol import onchain
from tests.protocol.conftest import V2_SLASH_SHARE_BPS
from tests.protocol.onchain import (
    ADA,
    BOND,
    OWED,
    REFUND_WINDOW_MS,
    SCRIPT_FAILED,
    SHARE,
    Spend,
    accept,
    bond_by_hand,
    bond_with_tokens,
    confirm,
    confirm_gains,
    continuing,
    handmade,
    junk_tokens,
    lock_by_hand,
    output,
    plain_fee,
    plan,
    post_bond,
    refund_to,
    rejected,
    slash_by_hand,
    slash_tagged,
    tagged,
    travel_to,
    wallet,
)


def layout(to: Address, escrow, bond, share: int = SHARE) -> list[TransactionOutput]:
    """The honest slash: refund (0), the consumer's share (1), the continuing bond (2)."""
    return [
        tagged(to, OWED, PayoutKind.REFUND, escrow),
        slash_tagged(to, share, escrow, bond),
        continuing(bond),
    ]


def slash(devnet, deployment, payer: Wallet, escrow, bonds_, signature, outputs, at=(1, 2), **kw):
    """Refund `escrow` and slash `bonds_` with `signature`, payouts named at `at`."""
    make = lambda escrow_input: Slash(escrow_input, signature, *at)  # noqa: E731
    return slash_by_hand(devnet, deployment, payer, escrow, bonds_, make, outputs, **kw)


async def accepted_job(devnet, deployment):
    """A provider with a bond, a consumer, and an escrow of theirs."""
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    bond = await post_bond(devnet, deployment, provider, BOND)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    return consumer, provider, bond, escrow


async def past_close(devnet, deployment, escrow) -> None:
    """Past the close and its refund window: the attacks here are anyone's, not only the
    consumer's (test_refund_window.py covers the window)."""
    await travel_to(devnet, escrow_datum(deployment, escrow).close + REFUND_WINDOW_MS + 1)


async def test_a_forged_escrow_cannot_slash_a_victims_bond(devnet, deployment):
    """Anyone can lock an 'escrow' naming a victim; without the victim's acceptance of that
    very out-ref (a replayed one, or one the attacker signed) it slashes nothing."""
    consumer, victim, bond, real = await accepted_job(devnet, deployment)
    attacker = await wallet(devnet)
    forged = await lock_by_hand(devnet, deployment, attacker, victim)
    await past_close(devnet, deployment, forged)
    outputs = layout(attacker.address, forged, bond)
    for signature in (
        accept(deployment, victim.key, real),
        accept(deployment, attacker.key, forged),
    ):
        attack = slash(devnet, deployment, attacker, forged, [bond], signature, outputs)
        await rejected(devnet, attack, SCRIPT_FAILED, "traces: acceptance signature")
    signature = accept(deployment, victim.key, real)
    honest = layout(consumer.address, real, bond)
    await confirm(devnet, slash(devnet, deployment, consumer, real, [bond], signature, honest))


async def test_a_slash_needs_the_escrow_refunded_not_settled(devnet, deployment):
    """Settle (another redeemer) and slash in one transaction: the bond refuses (and so does
    the settle script, which lets no other script run beside it)."""
    consumer, provider, bond, escrow = await accepted_job(devnet, deployment)
    signature = accept(deployment, provider.key, escrow)
    honest = plan(deployment, [(provider, [(escrow, 1_000)])])
    outputs = [
        *honest.outputs,
        slash_tagged(consumer.address, SHARE, escrow, bond),
        continuing(bond),
    ]
    escrow_input = ledger_inputs([escrow, bond], plain_fee(devnet, consumer)).index(escrow.input)
    slash_it = Spend(bond, deployment.bond_ref, Slash(escrow_input, signature, 2, 3))
    attack = dataclasses.replace(honest, outputs=outputs).settle(
        devnet, deployment, consumer, spends=[slash_it]
    )
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: the escrow must be refunded")
    market = await wallet(devnet)  # not a party: the gains are the parties' alone
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_the_refund_and_the_slash_cannot_share_one_output(devnet, deployment):
    """One output big enough for either, tagged as the refund, named by both."""
    consumer, provider, bond, escrow = await accepted_job(devnet, deployment)
    await past_close(devnet, deployment, escrow)
    signature = accept(deployment, provider.key, escrow)
    both = tagged(consumer.address, max(OWED, SHARE), PayoutKind.REFUND, escrow)
    shared = [both, continuing(bond)]
    attack = slash(devnet, deployment, consumer, escrow, [bond], signature, shared, at=(0, 1))
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: victim tag")
    honest = layout(consumer.address, escrow, bond)
    await confirm(devnet, slash(devnet, deployment, consumer, escrow, [bond], signature, honest))


async def test_one_transaction_slashes_at_most_one_bond(devnet, deployment):
    """Two bonds of one provider pointing at the same payout and continuing output would
    each be satisfied while the second bond's money walks away."""
    consumer, provider, bond, escrow = await accepted_job(devnet, deployment)
    second = await post_bond(devnet, deployment, provider, BOND)
    await past_close(devnet, deployment, escrow)
    signature = accept(deployment, provider.key, escrow)
    outputs = layout(consumer.address, escrow, bond)
    attack = slash(devnet, deployment, consumer, escrow, [bond, second], signature, outputs)
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: one bond per transaction")
    await confirm(devnet, slash(devnet, deployment, consumer, escrow, [bond], signature, outputs))


async def test_a_slash_takes_no_more_than_the_share(devnet, deployment):
    consumer, provider, bond, escrow = await accepted_job(devnet, deployment)
    await past_close(devnet, deployment, escrow)
    signature = accept(deployment, provider.key, escrow)
    greedy = layout(consumer.address, escrow, bond, SHARE + 1)
    greedy[2] = continuing(bond, BOND - SHARE - 1)
    reset = layout(consumer.address, escrow, bond)  # and restart the provider's notice
    datum = dataclasses.replace(bonds.bond_datum(deployment, bond), unbonding_since=Just(0))
    reset[2] = continuing(bond, datum=datum)
    scripted = layout(consumer.address, escrow, bond)  # the provider's later fees rise
    scripted[2].script = ScriptPubkey(consumer.key_hash)
    for outputs, reason in (
        (greedy, "traces: slash takes at most the share"),
        (reset, "traces: continuing output datum"),
        (scripted, "traces: continuing reference script"),
    ):
        attack = slash(devnet, deployment, consumer, escrow, [bond], signature, outputs)
        await rejected(devnet, attack, SCRIPT_FAILED, reason)
    honest = layout(consumer.address, escrow, bond)
    await confirm(devnet, slash(devnet, deployment, consumer, escrow, [bond], signature, honest))


async def test_the_bond_keeps_its_stake_part_and_only_grows_on_top_up(devnet, deployment):
    """Re-locking the bond under the attacker's stake key would steal its staking rewards. A
    top-up needs the provider's signature (test_bond_churn.py): even its own may not."""
    provider, attacker = [await wallet(devnet) for _ in range(2)]
    bond = await post_bond(devnet, deployment, provider, BOND)
    datum = bonds.bond_datum(deployment, bond)
    address = bond.output.address
    hijacked = Address(address.payment_part, attacker.key_hash, network=address.network)
    signed = {"signers": [provider.key]}
    stolen = BondDatum(to_plutus(attacker.address), attacker.vkey, datum.unbonding_since)
    for made, reason in (
        (TransactionOutput(hijacked, BOND + ADA, datum=datum), "continuing output address"),
        (TransactionOutput(address, BOND - ADA, datum=datum), "top up adds"),
        (TransactionOutput(address, BOND + ADA, datum=stolen), "continuing output datum"),
    ):
        attack = bond_by_hand(devnet, deployment, provider, bond, TopUp(0), [made], **signed)
        await rejected(devnet, attack, SCRIPT_FAILED, f"traces: {reason}")
    honest = TransactionOutput(address, BOND + ADA, datum=datum)
    await confirm(
        devnet, bond_by_hand(devnet, deployment, provider, bond, TopUp(0), [honest], **signed)
    )


async def test_only_the_provider_unbonds_keeping_the_bond_then_withdraws(devnet, deployment):
    """Only the provider's signature unbonds and withdraws (it owns the bond: its datum names
    its key's address; test_bond_owner.py has a cold owner); its unbond may not take lovelace
    out of the bond on the way, and a bond that never gave notice does not withdraw."""
    provider, attacker = [await wallet(devnet) for _ in range(2)]
    bond = await post_bond(devnet, deployment, provider, BOND)
    clock = Clock.now(devnet.context())
    ttl = clock.ttl_until(clock.tip_ms + 60_000)
    since = clock.time.slot_to_posix_ms(ttl)
    unbonding = dataclasses.replace(bonds.bond_datum(deployment, bond), unbonding_since=Just(since))

    def unbond(signer: Wallet, kept: int = BOND):
        made = [TransactionOutput(bond.output.address, kept, datum=unbonding)]
        return bond_by_hand(
            devnet, deployment, signer, bond, BeginUnbond(0), made, ttl=ttl, signers=[signer.key]
        )

    def withdraw(signer: Wallet, spent: UTxO):
        start = Clock.now(devnet.context()).tip_slot
        return bond_by_hand(
            devnet, deployment, signer, spent, Withdraw(), start=start, signers=[signer.key]
        )

    await rejected(devnet, withdraw(provider, bond), SCRIPT_FAILED, "traces: not unbonding")
    await rejected(devnet, unbond(attacker), SCRIPT_FAILED, "traces: owner must sign")
    taken = unbond(provider, BOND - 1)
    await rejected(devnet, taken, SCRIPT_FAILED, "traces: unbonding keeps the bond")
    bond = output(await confirm(devnet, unbond(provider)), 0)
    await travel_to(devnet, since + deployment.notice_ms)
    await rejected(devnet, withdraw(attacker, bond), SCRIPT_FAILED, "traces: owner must sign")
    await confirm(devnet, withdraw(provider, bond))


async def test_bonds_of_two_versions_cannot_both_slash_one_escrow(
    devnet, deployment, deployment_v2
):
    """The audit's attack: one Refund, a v1 and a v2 bond of the same provider (one escrow
    script), both Slash redeemers naming one consumer output, the difference kept by the
    submitter. An acceptance names its bond script and a slash tag names its bond, so neither
    a signature nor an output serves two bonds."""
    consumer, provider, bond, escrow = await accepted_job(devnet, deployment)
    second = await post_bond(devnet, deployment_v2, provider, BOND)
    await past_close(devnet, deployment, escrow)
    attacker = await wallet(devnet)
    v1 = accept(deployment, provider.key, escrow)
    v2 = accept(deployment_v2, provider.key, escrow)  # even were the provider to sign both
    share_v2 = slash_share(BOND, V2_SLASH_SHARE_BPS)
    outputs = [
        tagged(consumer.address, OWED, PayoutKind.REFUND, escrow),
        slash_tagged(consumer.address, max(SHARE, share_v2), escrow, bond),
        continuing(bond),
        continuing(second, BOND - share_v2),
    ]

    def both(signature_v2: bytes):
        fee = plain_fee(devnet, attacker)
        own = ledger_inputs([escrow, bond, second], fee).index(escrow.input)
        spends = [
            Spend(escrow, deployment.escrow_ref, partial(refund_to, 0)),
            Spend(bond, deployment.bond_ref, Slash(own, v1, 1, 2)),
            Spend(second, deployment_v2.bond_ref, Slash(own, signature_v2, 1, 3)),
        ]
        start = Clock.now(devnet.context()).tip_slot
        return handmade(devnet, attacker, fee, spends=spends, outputs=outputs, start=start)

    await rejected(devnet, both(v1), SCRIPT_FAILED, "traces: acceptance signature")
    await rejected(devnet, both(v2), SCRIPT_FAILED, "traces: victim tag")

    await confirm(devnet, slash(devnet, deployment, consumer, escrow, [bond], v1, outputs[:3]))
    other = await onchain.lock(devnet, deployment_v2, consumer, provider)
    await past_close(devnet, deployment_v2, other)
    signature = accept(deployment_v2, provider.key, other)
    honest = bonds.slash(
        devnet.context(), deployment_v2, other, second, signature, consumer.address
    )
    await confirm(devnet, consumer.sign(honest))
    with pytest.raises(BuildError, match="no acceptance of"):  # v1's acceptance is not v2's
        bonds.slash(devnet.context(), deployment_v2, other, second, v1, consumer.address)


async def test_a_top_up_keeps_the_bonds_tokens_and_adds_none(devnet, deployment):
    """A top-up (the provider's: it signs them) may not carry a bond's tokens away, nor dust a
    bond with another's tokens."""
    provider, stranger = [await wallet(devnet) for _ in range(2)]
    signed = {"signers": [provider.key]}
    bond = await bond_with_tokens(devnet, deployment, provider)
    address, datum, held = bond.output.address, bond.output.datum, bond.output.amount.multi_asset
    taken = TransactionOutput(address, BOND + ADA, datum=datum)
    attack = bond_by_hand(devnet, deployment, provider, bond, TopUp(0), [taken], **signed)
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: continuing tokens")
    kept = TransactionOutput(address, Value(BOND + ADA, held), datum=datum)
    bond = output(await confirm(devnet, bond_by_hand(
        devnet, deployment, provider, bond, TopUp(0), [kept], **signed
    )), 0)  # fmt: skip

    clean = await post_bond(devnet, deployment, provider, BOND)
    policy, dust = junk_tokens(stranger, 20)
    dusted = TransactionOutput(clean.output.address, Value(BOND + ADA, dust), datum=datum)
    attack = bond_by_hand(
        devnet, deployment, stranger, clean, TopUp(0), [dusted], native=(dust, policy),
        signers=[stranger.key, provider.key],
    )  # fmt: skip
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: continuing tokens")


async def test_a_top_up_cannot_rewrite_an_unbonding_bonds_datum(devnet, deployment):
    """A top-up resetting `unbonding_since` would cancel (or restart) the provider's notice;
    even the provider's own (it signs top-ups) may not."""
    provider = await wallet(devnet)
    signed = {"signers": [provider.key]}
    bond = await post_bond(devnet, deployment, provider, BOND)
    unbond = provider.sign(bonds.begin_unbond(devnet.context(), deployment, bond, provider.address))
    bond = output(await confirm(devnet, unbond), bonds.BOND_OUTPUT)
    datum = bonds.bond_datum(deployment, bond)
    for since in (Nothing(), Just(datum.unbonding_since.value + 1)):
        rewritten = dataclasses.replace(datum, unbonding_since=since)
        made = TransactionOutput(bond.output.address, BOND + ADA, datum=rewritten)
        attack = bond_by_hand(devnet, deployment, provider, bond, TopUp(0), [made], **signed)
        await rejected(devnet, attack, SCRIPT_FAILED, "traces: continuing output datum")
    honest = TransactionOutput(bond.output.address, BOND + ADA, datum=datum)
    await confirm(
        devnet, bond_by_hand(devnet, deployment, provider, bond, TopUp(0), [honest], **signed)
    )
