"""Issue 36: an escrow with a start deadline. Its provider Starts it before the deadline (the
escrow goes on unchanged but for the deadline, dropped), or its consumer alone refunds it
after the deadline, long before the close. Each refusal is the chain's, by its trace, beside
its honest twin; a started escrow settles, cancels, refunds and slashes as one that never had
a start deadline."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from pycardano import (
    Address,
    Network,
    PaymentSigningKey,
    TransactionBuilder,
    TransactionOutput,
    UTxO,
    Value,
)

from devnet.rules import OUTSIDE_VALIDITY_INTERVAL
from offchain.protocol.ledger.addresses import from_plutus
from offchain.protocol.ledger.types import EscrowDatum, PayoutKind, Refund, Start
from offchain.protocol.tx import batch as batches
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import BuildError, Clock, Wallet
from tests.protocol.onchain import (
    EVIDENCE,
    LOCKED,
    OWED,
    RESULT,
    SCRIPT_FAILED,
    SHARE,
    Spend,
    accept,
    balance,
    confirm,
    escrow_terms,
    handmade,
    lock,
    output,
    plain_fee,
    post_bond,
    rejected,
    tagged,
    terms,
    to_settle,
    travel_to,
    wallet,
)

START_MS = 10_000  # the start deadline, from the lock (the job's deadline is 40 s out)
CONTINUING = "continuing escrow"


async def locked(devnet, deployment: Deployment, consumer: Wallet, provider: Wallet) -> UTxO:
    """An escrow its provider must Start within START_MS."""
    now = Clock.now(devnet.context()).tip_ms
    return await lock(devnet, deployment, consumer, provider, start_deadline=now + START_MS)


async def start(devnet, deployment: Deployment, escrow: UTxO, provider: Wallet) -> UTxO:
    """The escrow `provider` Started (by the builder), confirmed."""
    made = escrows.start(devnet.context(), deployment, escrow, provider.address)
    tx = await confirm(devnet, provider.sign(made))
    return output(tx, escrows.ESCROW_OUTPUT)


def start_by_hand(
    devnet,
    deployment: Deployment,
    payer: Wallet,
    escrow: UTxO,
    continuing: TransactionOutput | None = None,
    ttl: int | None = None,
    signers: tuple = (),
    also: tuple[Spend, ...] = (),
    more_outputs: tuple[TransactionOutput, ...] = (),
):
    """A Start of `escrow` into output 0 (by default the honest one), valid until the start
    deadline (or `ttl`), with `signers` as required signers."""
    datum = terms(escrow)
    if continuing is None:
        continuing = TransactionOutput(
            escrow.output.address, escrow.output.amount, datum=datum.started
        )
    clock = Clock.now(devnet.context())
    return handmade(
        devnet, payer, plain_fee(devnet, payer),
        spends=[Spend(escrow, deployment.escrow_ref, lambda own: Start(own, 0)), *also],
        outputs=[continuing, *more_outputs],
        ttl=clock.ttl_until(datum.start_deadline) if ttl is None else ttl,
        signers=[s.key for s in signers],
    )  # fmt: skip


def early_refund(devnet, deployment, payer: Wallet, escrow: UTxO, *signers: Wallet):
    """A refund of `escrow` to its consumer from the tip, paid by `payer`."""
    consumer = from_plutus(escrows.escrow_datum(deployment, escrow).consumer, deployment.network)
    return handmade(
        devnet, payer, plain_fee(devnet, payer),
        spends=[Spend(escrow, deployment.escrow_ref, lambda own: Refund(own, 0))],
        outputs=[tagged(consumer, OWED, PayoutKind.REFUND, escrow)],
        start=Clock.now(devnet.context()).tip_slot, signers=[s.key for s in signers],
    )  # fmt: skip


def test_the_datum_keeps_nine_fields_without_a_start_deadline():
    """A deadline-less escrow's datum is byte for byte what it was before issue 36; one with
    a deadline carries it as a tenth field, which its started datum drops."""
    consumer, provider = [Wallet.of(PaymentSigningKey.generate(), Network.TESTNET) for _ in "cp"]
    plain = escrow_terms(consumer, provider, 1_000)
    assert len(plain.to_primitive().value) == 9
    timed = dataclasses.replace(plain, start_deadline=5_000)
    assert timed.to_primitive().value[:9] == plain.to_primitive().value
    assert timed.to_primitive().value[9] == 5_000
    assert timed.started == plain and EscrowDatum.from_cbor(timed.to_cbor()) == timed


async def test_a_start_before_the_deadline_keeps_the_escrow_and_ends_early_refunds(
    devnet, deployment
):
    """The provider starts (paying the fee itself); after the start deadline the consumer's
    early refund is refused (the escrow has none now) and the job settles by its receipt on
    the started escrow."""
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow = await locked(devnet, deployment, consumer, provider)
    context = devnet.context()
    before = balance(devnet, provider.address)
    tx = await confirm(
        devnet, provider.sign(escrows.start(context, deployment, escrow, provider.address))
    )
    started = output(tx, escrows.ESCROW_OUTPUT)
    assert started.input == escrows.started_escrow(tx.id)
    assert started.output.address == escrow.output.address
    assert started.output.amount == escrow.output.amount
    assert terms(started) == dataclasses.replace(terms(escrow), start_deadline=0)
    assert balance(devnet, provider.address) == before - tx.transaction_body.fee

    await travel_to(devnet, terms(escrow).start_deadline + 1)
    await rejected(devnet, early_refund(devnet, deployment, consumer, started, consumer),
                   SCRIPT_FAILED, "refund before close")  # fmt: skip
    with pytest.raises(BuildError, match="not yet past deadline"):
        escrows.refund(devnet.context(), deployment, started, consumer.address)
    receipt = to_settle(deployment, provider.key, started, 1_000, RESULT, EVIDENCE)
    settled = batches.settle(devnet.context(), deployment, [receipt], market.address)
    await confirm(devnet, market.sign(settled))


async def test_an_early_refund_waits_for_the_start_deadline_and_the_consumers_signature(
    devnet, deployment
):
    """Before the start deadline the consumer cannot refund; after it a stranger cannot (nor
    can the consumer without signing); the consumer can, and gets all but the allowance, the
    allowance's rest as its change."""
    consumer, provider, stranger = [await wallet(devnet) for _ in range(3)]
    escrow = await locked(devnet, deployment, consumer, provider)
    await rejected(devnet, early_refund(devnet, deployment, consumer, escrow, consumer),
                   SCRIPT_FAILED, "refund before the start deadline")  # fmt: skip
    with pytest.raises(BuildError, match="not yet past its start deadline"):
        escrows.refund(devnet.context(), deployment, escrow, consumer.address)

    await travel_to(devnet, terms(escrow).start_deadline + 1)
    alone = "only the consumer refunds an escrow not started"
    await rejected(devnet, early_refund(devnet, deployment, stranger, escrow), SCRIPT_FAILED, alone)
    await rejected(devnet, early_refund(devnet, deployment, consumer, escrow), SCRIPT_FAILED, alone)
    with pytest.raises(BuildError, match=r"only the consumer .* may refund"):
        escrows.refund(devnet.context(), deployment, escrow, stranger.address)
    before = balance(devnet, consumer.address)
    tx = await confirm(devnet, consumer.sign(
        escrows.refund(devnet.context(), deployment, escrow, consumer.address)))  # fmt: skip
    assert balance(devnet, consumer.address) - before == LOCKED - tx.transaction_body.fee


async def test_an_early_refund_built_ahead_is_valid_from_the_first_slot_past_the_deadline(
    devnet, deployment
):
    """The SDK's refund, built and signed before the start deadline (`valid_from`): its lower
    bound is the first slot whose time the script sees past the deadline (the slot before is
    not), so the ledger refuses it until then and takes it as soon as the tip reaches it."""
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    escrow = await locked(devnet, deployment, consumer, provider)
    deadline = terms(escrow).start_deadline
    clock = Clock.now(devnet.context())
    first = clock.first_slot_after(deadline)
    assert clock.time.slot_to_posix_ms(first - 1) <= deadline < clock.time.slot_to_posix_ms(first)
    with pytest.raises(BuildError, match="not yet past its start deadline"):
        escrows.refund(devnet.context(), deployment, escrow, consumer.address, first - 1)
    ahead = consumer.sign(
        escrows.refund(devnet.context(), deployment, escrow, consumer.address, first)
    )
    assert ahead.transaction_body.validity_start == first
    await rejected(devnet, ahead, OUTSIDE_VALIDITY_INTERVAL, "outside its validity interval")
    await travel_to(devnet, deadline)  # the tip at or past `first`
    before = balance(devnet, consumer.address)
    await confirm(devnet, ahead)
    assert balance(devnet, consumer.address) - before == LOCKED - ahead.transaction_body.fee


async def test_a_start_needs_the_provider_in_time_and_an_unchanged_escrow(devnet, deployment):
    """Each Start the chain refuses beside the honest one it takes: a stranger's, one without
    a start deadline to drop, one that moves lovelace, keeps the deadline, changes a field or
    the stake part, one after the deadline."""
    consumer, provider, stranger = [await wallet(devnet) for _ in range(3)]
    escrow = await locked(devnet, deployment, consumer, provider)
    datum = terms(escrow)
    address, amount = escrow.output.address, escrow.output.amount
    await rejected(devnet, start_by_hand(devnet, deployment, stranger, escrow, signers=(stranger,)),
                   SCRIPT_FAILED, "provider must sign")  # fmt: skip
    moved = Address(address.payment_part, stranger.key_hash, network=address.network)
    for continuing in (
        TransactionOutput(address, Value(amount.coin - 1), datum=datum.started),
        TransactionOutput(address, amount, datum=datum),  # keeps its start deadline
        TransactionOutput(address, amount, datum=dataclasses.replace(datum.started, max_units=1)),
        TransactionOutput(moved, amount, datum=datum.started),
    ):
        attack = start_by_hand(
            devnet, deployment, provider, escrow, continuing, signers=(provider,)
        )
        await rejected(devnet, attack, SCRIPT_FAILED, CONTINUING)

    plain = await lock(devnet, deployment, consumer, provider)
    no_deadline = TransactionOutput(plain.output.address, plain.output.amount, datum=terms(plain))
    soon = Clock.now(devnet.context()).tip_slot + 30
    attack = start_by_hand(
        devnet, deployment, provider, plain, no_deadline, ttl=soon, signers=(provider,)
    )
    await rejected(devnet, attack, SCRIPT_FAILED, "no start deadline")
    with pytest.raises(BuildError, match="has no start deadline"):
        escrows.start(devnet.context(), deployment, plain, provider.address)

    honest = start_by_hand(devnet, deployment, provider, escrow, signers=(provider,))
    late = await locked(devnet, deployment, consumer, provider)
    await confirm(devnet, honest)
    await travel_to(devnet, terms(late).start_deadline + 1)
    after = start_by_hand(devnet, deployment, provider, late, signers=(provider,),
                          ttl=Clock.now(devnet.context()).tip_slot + 30)  # fmt: skip
    await rejected(devnet, after, SCRIPT_FAILED, "start after the start deadline")
    with pytest.raises(BuildError, match="has passed"):
        escrows.start(devnet.context(), deployment, late, provider.address)


async def test_two_twin_escrows_cannot_start_into_one_output(devnet, deployment):
    """Two escrows with one datum and one value would both see one continuing output: the
    provider would keep the second's lovelace. A Start runs alone."""
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    context = devnet.context()
    now = Clock.now(context).tip_ms
    datum = escrow_terms(consumer, provider, now, start_deadline=now + START_MS)
    builder = TransactionBuilder(context)
    builder.add_input_address(consumer.address)
    for _ in range(2):
        builder.add_output(escrows.escrow_output(context, deployment, datum, LOCKED))
    tx = await confirm(
        devnet, builder.build_and_sign([consumer.key], change_address=consumer.address)
    )
    a, b = output(tx, 0), output(tx, 1)
    both = Spend(b, deployment.escrow_ref, lambda own: Start(own, 0))
    attack = start_by_hand(devnet, deployment, provider, a, signers=(provider,), also=(both,))
    await rejected(devnet, attack, SCRIPT_FAILED, "start runs alone")
    await confirm(devnet, start_by_hand(devnet, deployment, provider, a, signers=(provider,)))


async def test_an_early_refund_slashes_only_with_an_acceptance_of_the_unstarted_escrow(
    devnet, deployment
):
    """The choice PROTOCOL.md states: an early refund is a Refund, so it slashes the bond of
    a provider that signed an Acceptance of the escrow and did not start it. The daemon signs
    its acceptance of a timed escrow only after its Start, naming the started out-ref, so an
    honest provider the chain was too slow for loses the job, never its bond."""
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    bond = await post_bond(devnet, deployment, provider)
    escrow = await locked(devnet, deployment, consumer, provider)
    acceptance = accept(deployment, provider.key, escrow)
    await travel_to(devnet, terms(escrow).start_deadline + 1)
    before = balance(devnet, consumer.address)
    slash = bonds.slash(devnet.context(), deployment, escrow, bond, acceptance, consumer.address)
    tx = await confirm(devnet, consumer.sign(slash))
    assert balance(devnet, consumer.address) - before == LOCKED + SHARE - tx.transaction_body.fee


async def test_a_started_escrow_cancels_refunds_after_its_close_and_slashes_as_any(
    devnet, deployment
):
    """Started, an escrow is one without a start deadline: a cancel both sign, and after the
    close the consumer's refund with the slash of the acceptance of the started escrow."""
    consumer, provider = [await wallet(devnet) for _ in range(2)]
    bond = await post_bond(devnet, deployment, provider)
    started = []
    for _ in range(2):
        escrow = await locked(devnet, deployment, consumer, provider)
        started.append(await start(devnet, deployment, escrow, provider))
    cancel = escrows.cancel(devnet.context(), deployment, started[0], consumer.address)
    before = balance(devnet, consumer.address)
    tx = await confirm(devnet, provider.sign(consumer.sign(cancel)))
    assert balance(devnet, consumer.address) - before == LOCKED - tx.transaction_body.fee

    acceptance = accept(deployment, provider.key, started[1])
    await travel_to(devnet, terms(started[1]).close + 1)
    before = balance(devnet, consumer.address)
    slash = bonds.slash(
        devnet.context(), deployment, started[1], bond, acceptance, consumer.address
    )
    tx = await confirm(devnet, consumer.sign(slash))
    assert balance(devnet, consumer.address) - before == LOCKED + SHARE - tx.transaction_body.fee


async def test_an_unstarted_timed_escrow_still_settles_by_a_zero_unit_receipt(devnet, deployment):
    """A provider that refuses a timed job returns it at once by its zero-unit receipt, as
    for any escrow: the settle script reads the nine fields and never the tenth."""
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow = await locked(devnet, deployment, consumer, provider)
    before = balance(devnet, consumer.address)
    empty = hashlib.sha256(b"").digest()  # nothing ran: no archive, no metering record
    receipt = to_settle(deployment, provider.key, escrow, 0, empty, empty)
    settled = batches.settle(devnet.context(), deployment, [receipt], market.address)
    await confirm(devnet, market.sign(settled))
    assert balance(devnet, consumer.address) - before == OWED
