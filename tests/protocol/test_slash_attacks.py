"""Attacks on the slash, each a hand-made transaction the ledger must refuse by the trace
of the bond's check, next to the honest twin it accepts: the consumer's share paid elsewhere or
short, another provider's escrow, an "escrow" that is a wallet UTxO or another script version's,
and an escrow locked under a datum hash."""

from __future__ import annotations

from pycardano import Address, datum_hash

from offchain.protocol.ledger.types import PayoutKind, Slash
from offchain.protocol.tx.txbuild import Clock, ledger_inputs
from tests.protocol.evidence import place
from tests.protocol.onchain import (
    LOCKED,
    OWED,
    REFUND_WINDOW_MS,
    SCRIPT_FAILED,
    SHARE,
    Spend,
    accept,
    confirm,
    continuing,
    escrow_terms,
    handmade,
    lock_by_hand,
    plain_fee,
    post_bond,
    refund_by_hand,
    rejected,
    slash_tagged,
    tagged,
    travel_to,
    wallet,
)
from tests.protocol.test_bond_attacks import accepted_job, layout, past_close, slash
from tests.protocol.test_escrow_attacks_scope import other_version


async def test_the_slash_share_goes_whole_to_the_consumers_full_address(devnet, deployment):
    """The share paid to the submitter, to the consumer's payment key under the attacker's
    stake credential (the attacker would earn its staking rewards), or one lovelace short."""
    consumer, provider, bond, escrow = await accepted_job(devnet, deployment)
    attacker = await wallet(devnet)
    await past_close(devnet, deployment, escrow)
    signature = accept(deployment, provider.key, escrow)
    own = consumer.address
    hijacked = Address(own.payment_part, attacker.key_hash, network=own.network)
    for to, share, reason in (
        (attacker.address, SHARE, "victim address"),
        (hijacked, SHARE, "victim address"),
        (own, SHARE - 1, "victim share"),
    ):
        outputs = layout(own, escrow, bond)
        outputs[1] = slash_tagged(to, share, escrow, bond)
        attack = slash(devnet, deployment, attacker, escrow, [bond], signature, outputs)
        await rejected(devnet, attack, SCRIPT_FAILED, f"traces: {reason}")
    honest = layout(own, escrow, bond)
    await confirm(devnet, slash(devnet, deployment, attacker, escrow, [bond], signature, honest))


async def test_a_bond_is_not_slashed_for_another_providers_escrow(devnet, deployment):
    """The escrow's own provider really accepted it, and that acceptance is valid, but it
    backs that provider's bond: a victim's bond beside it is refused, the right one is not."""
    consumer, provider, their_bond, escrow = await accepted_job(devnet, deployment)
    victim = await wallet(devnet)
    bond = await post_bond(devnet, deployment, victim)
    await past_close(devnet, deployment, escrow)
    signature = accept(deployment, provider.key, escrow)
    outputs = layout(consumer.address, escrow, bond)
    attack = slash(devnet, deployment, consumer, escrow, [bond], signature, outputs)
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: another provider's escrow")
    honest = layout(consumer.address, escrow, their_bond)
    await confirm(
        devnet, slash(devnet, deployment, consumer, escrow, [their_bond], signature, honest)
    )


async def test_a_slash_needs_an_escrow_of_its_own_escrow_script(devnet, deployment):
    """The Slash's escrow input a wallet UTxO of the submitter's, or an escrow of another
    escrow script version (refunded under that script): neither is an escrow to this bond.
    The foreign escrow refunds alone, and the bond slashes for its own escrow."""
    consumer, provider, bond, escrow = await accepted_job(devnet, deployment)
    attacker = await wallet(devnet)
    foreign = await other_version(devnet, deployment, attacker)
    theirs = await lock_by_hand(devnet, foreign, consumer, provider)
    await past_close(devnet, foreign, theirs)  # locked last: it closes last
    signature = accept(deployment, provider.key, escrow)

    fee = plain_fee(devnet, attacker)
    mine = ledger_inputs([bond], fee).index(fee[0].input)
    taken = [slash_tagged(attacker.address, SHARE, fee[0], bond), continuing(bond)]
    spends = [Spend(bond, deployment.bond_ref, Slash(mine, signature, 0, 1))]
    attack = handmade(devnet, attacker, fee, spends=spends, outputs=taken)
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: not an escrow")
    outputs = layout(consumer.address, theirs, bond)
    signed = accept(foreign, provider.key, theirs)
    attack = slash(devnet, foreign, attacker, theirs, [bond], signed, outputs)
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: not an escrow")

    back = [tagged(consumer.address, OWED, PayoutKind.REFUND, theirs)]
    await confirm(devnet, refund_by_hand(devnet, foreign, attacker, [(theirs, 0)], back))
    honest = layout(consumer.address, escrow, bond)
    await confirm(devnet, slash(devnet, deployment, attacker, escrow, [bond], signature, honest))


async def test_an_escrow_locked_under_a_datum_hash_slashes_no_bond(devnet, deployment):
    """The bond reads the escrow's datum from its output, where a datum hash leaves only the
    hash: with the datum in the witness set and the provider's acceptance, the slash still
    fails on reading it. The same refund without the slash goes through."""
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    bond = await post_bond(devnet, deployment, provider)
    terms = escrow_terms(consumer, provider, Clock.now(devnet.context()).tip_ms)
    at = deployment.escrow_address()
    escrow = await place(devnet, consumer, at, LOCKED, terms, hashed=True)
    await travel_to(devnet, terms.close + REFUND_WINDOW_MS + 1)
    signature = accept(deployment, provider.key, escrow, job=terms.job_id)
    outputs = layout(consumer.address, escrow, bond)
    attack = slash(devnet, deployment, consumer, escrow, [bond], signature, outputs, witness=terms)
    hash_read = f"UnConstrData on arguments [PlutusByteString(value={datum_hash(terms).payload!r})]"
    await rejected(devnet, attack, SCRIPT_FAILED, "spend#", hash_read)
    back = outputs[:1]
    await confirm(
        devnet, refund_by_hand(devnet, deployment, consumer, [(escrow, 0)], back, witness=terms)
    )
