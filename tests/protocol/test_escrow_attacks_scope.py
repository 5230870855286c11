"""Attacks on the scope of what an escrow's signatures and payouts authorise, each tried as a
hand-made transaction the ledger must refuse by the trace of its check, next to the honest twin
it accepts: one-signature cancels, units out of range, a settle and a slash sharing a payout,
an acceptance for another network, other escrow script versions under the settle withdrawal,
and escrows locked with a datum hash."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial

from pycardano import (
    ExecutionUnits,
    PlutusData,
    Redeemer,
    Transaction,
    TransactionBuilder,
    TransactionOutput,
    UTxO,
    Withdrawals,
    datum_hash,
)

from contracts.artifacts import escrow_script
from offchain.protocol.ledger.types import BatchSettle, Cancel, PayoutKind, Settle, Slash
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import Clock, Wallet, ledger_inputs, script_source
from tests.protocol import onchain
from tests.protocol.onchain import (
    ADA,
    BOND,
    LOCKED,
    MAX_UNITS,
    OWED,
    REFUND_WINDOW_MS,
    SCRIPT_FAILED,
    SHARE,
    Spend,
    accept,
    claim,
    confirm,
    confirm_gains,
    continuing,
    escrow_terms,
    handmade,
    lock_by_hand,
    output,
    plain_fee,
    plan,
    post_bond,
    refund_by_hand,
    refund_to,
    rejected,
    settle_by_hand,
    slash_by_hand,
    slash_tagged,
    tagged,
    travel_to,
)
from tests.protocol.test_escrow_attacks import SPLIT, UNITS, parties


async def test_cancel_needs_the_consumer_and_the_provider(devnet, deployment):
    """The consumer alone would take back a job being worked on; the provider alone could
    end a job it was paid to do (the money goes to the consumer, but the job is gone)."""
    consumer, provider, anyone = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    owed = [tagged(consumer.address, OWED, PayoutKind.CANCEL, escrow)]

    def cancel(*signers: Wallet) -> Transaction:
        return handmade(
            devnet, anyone, plain_fee(devnet, anyone), outputs=owed,
            spends=[Spend(escrow, deployment.escrow_ref, lambda own: Cancel(own, 0))],
            signers=[s.key for s in signers],
        )  # fmt: skip

    await rejected(devnet, cancel(consumer), SCRIPT_FAILED, "spend#", "traces: provider must sign")
    await rejected(devnet, cancel(provider), SCRIPT_FAILED, "spend#", "traces: consumer signs")
    await confirm(devnet, cancel(consumer, provider))


async def test_units_above_max_units_or_negative_are_refused(devnet, deployment):
    """A claim the provider really signed, for more units than the consumer locked for, or
    for -1 (a negative due that pays the provider nothing and the consumer more)."""
    consumer, provider, market = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    honest = plan(deployment, [(provider, [(escrow, MAX_UNITS)])])
    for units in (MAX_UNITS + 1, -1):
        signed = claim(deployment, provider.key, [(escrow, units)])
        forged = dataclasses.replace(honest.changed(escrow, units=units), claims=[signed])
        attack = forged.settle(devnet, deployment, market)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: units or time")
    tx = honest.settle(devnet, deployment, market)  # the edge itself is honest
    await confirm_gains(devnet, tx, honest.gains)


def settle_and_slash(
    devnet, deployment: Deployment, provider: Wallet, payer: Wallet, settled: UTxO,
    refunded: UTxO | None, bond: UTxO, outputs: Sequence[TransactionOutput], slashed: UTxO,
    at: tuple[int, int],
) -> Transaction:  # fmt: skip
    """Settle `settled` (its payout at output 0, its consumer's refund from output 1 on),
    refund `refunded` to output 2 if given, and slash `bond` for `slashed` (its payout and the
    bond going on at outputs `at`)."""
    spent = [settled, bond] if refunded is None else [settled, refunded, bond]
    escrow_input = ledger_inputs(spent, plain_fee(devnet, payer)).index(slashed.input)
    slash = Slash(escrow_input, accept(deployment, provider.key, slashed), *at)
    spends = [Spend(bond, deployment.bond_ref, slash)]
    if refunded is not None:
        spends.append(Spend(refunded, deployment.escrow_ref, partial(refund_to, 2)))
    signed = claim(deployment, provider.key, [(settled, UNITS)])
    return settle_by_hand(
        devnet, deployment, payer, [settled], [UNITS, 0, 0], outputs, 1, [signed], spends=spends,
        start=Clock.now(devnet.context()).tip_slot,
    )  # fmt: skip


async def test_a_settle_and_a_slash_cannot_share_the_consumer_payout(devnet, deployment):
    """Escrow a settles while escrow b, which the provider accepted, is refunded and slashed
    in the same transaction, one output to the consumer (as large as either debt) counted as
    a's refund and as the slash's payout. The slash finds no SlashPayout (`victim tag`), and
    the settle script lets no script but escrows' run beside it (the bond is refused by `one
    escrow script`, or b, past its close, by `units or time`, whichever it meets first): a
    settle never shares a transaction with a refund or a slash. Slashing the settled escrow a
    itself is no way round: a slash needs its escrow spent with Refund (`the escrow must be
    refunded`). Apart, the settle and the slash go through."""
    consumer, provider, market = await parties(devnet)
    bond = await post_bond(devnet, deployment, provider, BOND)
    refunded = await onchain.lock(devnet, deployment, consumer, provider)
    await travel_to(devnet, escrow_datum(deployment, refunded).close + REFUND_WINDOW_MS + 1)
    settled = await onchain.lock(devnet, deployment, consumer, provider)
    to_provider = TransactionOutput(provider.address, SPLIT.provider)
    shared = TransactionOutput(consumer.address, SHARE)  # more than a's refund: both debts
    assert SPLIT.consumer <= SHARE
    refund = tagged(consumer.address, OWED, PayoutKind.REFUND, refunded)
    both = [to_provider, shared, refund, continuing(bond)]
    attack = settle_and_slash(
        devnet, deployment, provider, market, settled, refunded, bond, both, refunded, (1, 3)
    )
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: victim tag", "withdraw#0")
    alone = [to_provider, shared, continuing(bond)]
    attack = settle_and_slash(
        devnet, deployment, provider, market, settled, None, bond, alone, settled, (1, 2)
    )
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: the escrow must be refunded")

    honest = plan(deployment, [(provider, [(settled, UNITS)])])
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)
    signature = accept(deployment, provider.key, refunded)
    slash = lambda own: Slash(own, signature, 1, 2)  # noqa: E731
    outputs = [refund, slash_tagged(consumer.address, SHARE, refunded, bond), continuing(bond)]
    await confirm(
        devnet, slash_by_hand(devnet, deployment, market, refunded, [bond], slash, outputs)
    )


async def test_an_acceptance_signed_for_another_network_slashes_nothing(devnet, deployment):
    """The provider's acceptance of this very escrow, but for network 1 (mainnet)."""
    consumer, provider, anyone = await parties(devnet)
    bond = await post_bond(devnet, deployment, provider, BOND)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    await travel_to(devnet, escrow_datum(deployment, escrow).close + REFUND_WINDOW_MS + 1)
    outputs = [
        tagged(consumer.address, OWED, PayoutKind.REFUND, escrow),
        slash_tagged(consumer.address, SHARE, escrow, bond),
        continuing(bond),
    ]

    def slash(network_id: int) -> Transaction:
        signature = accept(deployment, provider.key, escrow, network_id)
        make = lambda own: Slash(own, signature, 1, 2)  # noqa: E731
        return slash_by_hand(devnet, deployment, anyone, escrow, [bond], make, outputs)

    await rejected(devnet, slash(1), SCRIPT_FAILED, "spend#", "traces: acceptance signature")
    await confirm(devnet, slash(deployment.network_id))


async def other_version(
    devnet,
    deployment: Deployment,
    payer: Wallet,
    settle_hash: bytes = bytes(28),
    refund_window_ms: int | None = None,
) -> Deployment:
    """`deployment` with another escrow script, published on this devnet: by default one
    settled by another settle script (28 zero bytes: none), or with `refund_window_ms`."""
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(payer.address)
    window = deployment.refund_window_ms if refund_window_ms is None else refund_window_ms
    script = escrow_script(settle_hash, window)
    builder.add_output(TransactionOutput(payer.address, 50 * ADA, script=script))
    tx = builder.build_and_sign([payer.key], change_address=payer.address)
    made = output(await confirm(devnet, tx), 0)
    return dataclasses.replace(deployment, escrow_ref=made, refund_window_ms=window)


async def test_an_escrow_of_another_settle_script_is_not_settled_by_this_one(devnet, deployment):
    """An escrow asks for its own settle script's withdrawal (its head): one of another
    version rides along with a Settle spend and is refused by its own validator. It still
    refunds under its own script."""
    consumer, provider, market = await parties(devnet)
    foreign = await other_version(devnet, deployment, market)
    assert foreign.escrow_hash != deployment.escrow_hash
    ours = await onchain.lock(devnet, deployment, consumer, provider)
    theirs = await lock_by_hand(devnet, foreign, consumer, provider)
    both = plan(deployment, [(provider, [(ours, UNITS)]), (provider, [(theirs, UNITS)])])
    attack = both.settle(devnet, deployment, market, scripts=[foreign.escrow_ref])
    await rejected(
        devnet, attack, SCRIPT_FAILED, "spend#", "traces: settle needs the batch withdrawal"
    )
    honest = plan(deployment, [(provider, [(ours, UNITS)])])
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)
    await travel_to(devnet, escrow_datum(foreign, theirs).close + REFUND_WINDOW_MS + 1)
    back = [tagged(consumer.address, OWED, PayoutKind.REFUND, theirs)]
    await confirm(devnet, refund_by_hand(devnet, foreign, market, [(theirs, 0)], back))


async def test_escrows_of_two_versions_under_one_settle_script_settle_apart(devnet, deployment):
    """Two escrow scripts (another refund window) settled by the same settle script: a batch
    holds the escrows of one only (`one escrow script`); each settles in its own."""
    consumer, provider, market = await parties(devnet)
    window = deployment.refund_window_ms + 1
    sibling = await other_version(
        devnet, deployment, market, deployment.settle_hash.payload, window
    )
    ours = await onchain.lock(devnet, deployment, consumer, provider)
    theirs = await lock_by_hand(devnet, sibling, consumer, provider)
    both = plan(deployment, [(provider, [(ours, UNITS)]), (provider, [(theirs, UNITS)])])
    attack = both.settle(devnet, deployment, market, scripts=[sibling.escrow_ref])
    await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: one escrow script")
    for version, escrow in ((deployment, ours), (sibling, theirs)):
        alone = plan(version, [(provider, [(escrow, UNITS)])])
        await confirm_gains(devnet, alone.settle(devnet, version, market), alone.gains)


FIXED = ExecutionUnits(7_000_000, 5_000_000_000)  # half a transaction's budget, no estimate
MISSING_DATUMS = 3111  # Ogmios: a spent script input's datum is not in the witnesses


def spend_hashed(
    devnet, deployment: Deployment, payer: Wallet, escrow: UTxO, datum: PlutusData | None,
    redeemer: Callable[[int], PlutusData], outputs: Sequence[TransactionOutput],
    batch: BatchSettle | None = None, **bounds: int,
) -> Transaction:  # fmt: skip
    """Spend an escrow locked under a datum hash, `datum` in the witness set (None: left out),
    with `redeemer` of its input index, and the settle script's withdrawal when `batch` is
    given; `bounds` are the builder's validity_start / ttl. `handmade` cannot add a datum."""
    builder = TransactionBuilder(devnet.context())
    fee = plain_fee(devnet, payer)
    own = ledger_inputs([escrow], fee).index(escrow.input)
    script = script_source(builder, deployment.escrow_ref)
    builder.add_script_input(escrow, script, datum, Redeemer(redeemer(own), FIXED))
    if batch is not None:
        builder.withdrawals = Withdrawals({bytes(deployment.reward_address): 0})
        settle = script_source(builder, deployment.settle_ref)
        builder.add_withdrawal_script(settle, Redeemer(batch, FIXED))
    for made in outputs:
        builder.add_output(made)
    for utxo in fee:
        builder.add_input(utxo)
    for bound, value in bounds.items():
        setattr(builder, bound, value)
    return builder.build_and_sign([payer.key], change_address=payer.address)


async def test_an_escrow_locked_under_a_datum_hash_cannot_settle_but_refunds(devnet, deployment):
    """The settle script reads each escrow's datum from its output, where a datum hash
    leaves only the hash (the datum is not there to read); the spend redeemers read the
    datum the ledger resolves from the witness set, so whoever holds the datum (the locker,
    or anyone it told) can refund it after its close; without it the ledger refuses the
    spend (3111). Nothing is stuck for the consumer; the builders read inline datums only."""
    consumer, provider, anyone = await parties(devnet)
    terms = escrow_terms(consumer, provider, Clock.now(devnet.context()).tip_ms)
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(consumer.address)
    at = deployment.escrow_address()
    builder.add_output(TransactionOutput(at, LOCKED, datum_hash=datum_hash(terms)))
    tx = builder.build_and_sign([consumer.key], change_address=consumer.address)
    escrow = output(await confirm(devnet, tx), 0)
    outputs = [
        TransactionOutput(provider.address, SPLIT.provider),
        TransactionOutput(consumer.address, SPLIT.consumer),
    ]
    signed = claim(deployment, provider.key, [(escrow, UNITS)])
    batch = BatchSettle([UNITS, 0, 0], [signed], [], 1)
    ttl = Clock.now(devnet.context()).ttl_until(terms.close)
    settle = spend_hashed(
        devnet, deployment, anyone, escrow, terms, lambda _: Settle(), outputs, batch, ttl=ttl
    )
    hash_read = f"UnConstrData on arguments [PlutusByteString(value={datum_hash(terms).payload!r})]"
    await rejected(devnet, settle, SCRIPT_FAILED, "withdraw#0", hash_read)

    await travel_to(devnet, terms.close + REFUND_WINDOW_MS + 1)
    back = [tagged(consumer.address, OWED, PayoutKind.REFUND, escrow)]
    start = Clock.now(devnet.context()).tip_slot

    def refund(datum: PlutusData | None) -> Transaction:
        return spend_hashed(
            devnet, deployment, anyone, escrow, datum, partial(refund_to, 0), back,
            validity_start=start,
        )  # fmt: skip

    await rejected(devnet, refund(None), MISSING_DATUMS, "datums of spent script inputs")
    await confirm(devnet, refund(terms))
