"""Attacks on the escrow, each a concrete transaction the ledger must refuse, next to its
honest twin that it accepts (contracts.md: double satisfaction, stake hijack, receipt replay,
arbitrary datums, token dust, value that could get locked). The batch settle's own surface is
test_settle_attacks.py's."""

from __future__ import annotations

import dataclasses

from cbor2 import CBORTag
from pycardano import (
    Address,
    IndefiniteList,
    Network,
    PaymentSigningKey,
    RawPlutusData,
    TransactionOutput,
)
from pycardano.serialization import ByteString

from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.claim import Claim
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.ledger.types import PayoutKind, SettleReceipt
from offchain.protocol.tx.batch import settle
from offchain.protocol.tx.escrow import escrow_datum, refund
from offchain.protocol.tx.txbuild import Clock, Wallet
from tests.protocol import onchain
from tests.protocol.onchain import (
    ADA,
    ALLOWANCE,
    EVIDENCE,
    LOCKED,
    MAX_UNITS,
    PRICE,
    REFUND_WINDOW_MS,
    RESULT,
    SCRIPT_FAILED,
    Plan,
    claim,
    confirm,
    confirm_gains,
    lock_by_hand,
    plan,
    refund_by_hand,
    rejected,
    settle_by_hand,
    tagged,
    to_settle,
    travel_to,
    wallet,
)

UNITS = 1_234
SPLIT = settle_split(LOCKED, PRICE, UNITS, MAX_UNITS, ALLOWANCE)


async def parties(devnet, count: int = 3):
    return [await wallet(devnet) for _ in range(count)]


def receipt_entry(receipt: Receipt) -> SettleReceipt:
    """A receipt as the settle redeemer carries it (its claim on its one escrow)."""
    made = Claim.of_receipt(receipt)
    return SettleReceipt(made.note, made.signature)


async def test_two_receipts_of_one_provider_share_one_payout_holding_both(devnet, deployment):
    """Same provider, same amount: one output pays both receipts' escrows, holding the sum;
    an output holding one share cannot pay both (a second output beside it counts for
    nothing: each escrow names the output that pays it)."""
    consumer, provider, market = await parties(devnet)
    a, b = await onchain.lock_together(devnet, deployment, consumer, [provider, provider])
    honest = plan(deployment, [], [(provider, a, UNITS), (provider, b, UNITS)])
    assert honest.outputs[0].amount.coin == 2 * SPLIT.provider and honest.first_refund == 1
    assert honest.items[2::3] == [0, 0]
    one = TransactionOutput(provider.address, SPLIT.provider)
    shared = dataclasses.replace(
        honest, outputs=[one, one, *honest.outputs[1:]], first_refund=2
    )  # fmt: skip
    attack = shared.settle(devnet, deployment, market)
    await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: provider payout")
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_two_refunds_cannot_share_one_output(devnet, deployment):
    """One output tagged for escrow a cannot be b's refund too: b finds a's tag."""
    consumer, provider, anyone = await parties(devnet)
    a = await onchain.lock(devnet, deployment, consumer, provider)
    b = await onchain.lock(devnet, deployment, consumer, provider)
    await travel_to(devnet, escrow_datum(deployment, b).close + REFUND_WINDOW_MS + 1)
    owed = LOCKED - ALLOWANCE
    one = [tagged(consumer.address, owed, PayoutKind.REFUND, a)]
    attack = refund_by_hand(devnet, deployment, anyone, [(a, 0), (b, 0)], one)
    await rejected(devnet, attack, SCRIPT_FAILED, "traces: tag")

    two = [*one, tagged(consumer.address, owed, PayoutKind.REFUND, b)]
    await confirm(devnet, refund_by_hand(devnet, deployment, anyone, [(a, 0), (b, 1)], two))


async def test_payouts_go_to_full_addresses_not_a_hijacked_stake_part(devnet, deployment):
    """The provider's payment key with the attacker's stake key is not the provider."""
    consumer, provider, attacker = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    hijack = lambda a: Address(a.payment_part, attacker.key_hash, network=a.network)  # noqa: E731
    honest = plan(deployment, [(provider, [(escrow, UNITS)])])
    to_provider, to_consumer = honest.outputs
    for outputs, reason in (
        (
            [TransactionOutput(hijack(provider.address), SPLIT.provider), to_consumer],
            "one provider per payout",
        ),
        (
            [to_provider, TransactionOutput(hijack(consumer.address), SPLIT.consumer)],
            "consumer refund",
        ),
    ):
        attack = dataclasses.replace(honest, outputs=outputs).settle(devnet, deployment, attacker)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", f"traces: {reason}")
    honest_receipt = to_settle(deployment, provider.key, escrow, UNITS, RESULT, EVIDENCE)
    settled = settle(devnet.context(), deployment, [honest_receipt], attacker.address)
    await confirm(devnet, attacker.sign(settled))


async def test_a_receipt_is_good_for_one_escrow_network_and_settle_script_only(devnet, deployment):
    consumer, provider, market = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    job_b = await onchain.lock(devnet, deployment, consumer, provider)
    honest = plan(deployment, [], [(provider, escrow, UNITS)])
    key = provider.key

    def signed(
        signer=key, network_id=0, settle_hash=deployment.settle_hash, on=escrow, units=UNITS
    ) -> Plan:
        receipt = Receipt.sign(signer, network_id, settle_hash, on.input, units, RESULT, EVIDENCE)
        made = receipt_entry(dataclasses.replace(receipt, escrow=escrow.input, units=UNITS))
        return dataclasses.replace(honest, receipts=[made])

    for replayed in (
        signed(on=job_b),  # signed for job B
        signed(network_id=1),  # for mainnet
        signed(settle_hash=deployment.escrow_hash),  # for the escrow script, as receipts were
        signed(units=UNITS - 1),  # for fewer units
        signed(signer=PaymentSigningKey.generate()),  # by someone else
    ):
        attack = replayed.settle(devnet, deployment, market)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: receipt signature")
    await confirm_gains(devnet, signed().settle(devnet, deployment, market), honest.gains)


async def test_escrows_with_nonsense_datums_cannot_settle_but_still_refund(devnet, deployment):
    """A key hash where the key belongs, a negative price, no units: settle fails, no money
    is stuck."""
    consumer, provider, market = await parties(devnet)
    made = [
        (dict(provider_vkey=provider.key_hash.payload), "VerifyEd25519Signature"),
        (dict(price_per_unit=-PRICE), "traces: units"),
        (dict(max_units=0), "traces: units"),
    ]
    escrows = [await lock_by_hand(devnet, deployment, consumer, provider, **d) for d, _ in made]
    for escrow, (_, reason) in zip(escrows, made, strict=True):
        datum = escrow_datum(deployment, escrow)  # the claim names the datum's key, as it must
        signed = claim(deployment, provider.key, [(escrow, UNITS)], vkey=datum.provider_vkey)
        outputs = [
            TransactionOutput(provider.address, max(datum.price_per_unit * UNITS, 2 * ADA)),
            TransactionOutput(consumer.address, LOCKED - ALLOWANCE),
        ]
        attack = settle_by_hand(
            devnet, deployment, market, [escrow], [UNITS, 0, 0], outputs, 1, claims=[signed]
        )
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", reason)
    await travel_to(devnet, escrow_datum(deployment, escrows[-1]).close + REFUND_WINDOW_MS + 1)
    for escrow in escrows:
        refunded = refund(devnet.context(), deployment, escrow, market.address)
        await confirm(devnet, market.sign(refunded))


async def test_a_10_kb_job_id_cannot_stop_a_refund(devnet, deployment):
    """An unbounded datum hurts only its maker: the escrow still refunds within limits."""
    consumer, provider, anyone = await parties(devnet)
    datum = onchain.escrow_terms(consumer, provider, Clock.now(devnet.context()).tip_ms)
    fields = datum.to_shallow_primitive().value
    fields[7] = ByteString(b"j" * 10_000)  # job_id
    huge = RawPlutusData(CBORTag(121, IndefiniteList(list(fields))))
    locked = 50 * ADA  # 10 KB of inline datum needs about 45 ADA of min-UTxO
    escrow = await lock_by_hand(devnet, deployment, consumer, provider, locked, datum=huge)
    await travel_to(devnet, datum.close + REFUND_WINDOW_MS + 1)
    owed = tagged(consumer.address, locked - ALLOWANCE, PayoutKind.REFUND, escrow)
    await confirm(devnet, refund_by_hand(devnet, deployment, anyone, [(escrow, 0)], [owed]))


async def test_200_junk_tokens_cannot_stop_a_settle_or_a_refund(devnet, deployment):
    consumer, provider, market = await parties(devnet)
    settled = await lock_by_hand(devnet, deployment, consumer, provider, dust=True)
    refunded = await lock_by_hand(devnet, deployment, consumer, provider, dust=True)
    receipt = to_settle(deployment, provider.key, settled, UNITS, RESULT, EVIDENCE)
    settled = settle(devnet.context(), deployment, [receipt], market.address)
    tx = await confirm(devnet, market.sign(settled))
    assert len(tx.to_cbor()) < 16_384
    await travel_to(devnet, escrow_datum(deployment, refunded).close + REFUND_WINDOW_MS + 1)
    await confirm(
        devnet, market.sign(refund(devnet.context(), deployment, refunded, market.address))
    )


async def test_a_refund_below_min_utxo_and_a_lost_provider_key_lock_nothing(devnet, deployment):
    """Owed less than an output can hold, and a provider that vanished: the consumer still
    gets its money back (the output is topped up from the allowance)."""
    consumer, anyone = await parties(devnet, 2)
    vanished = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET)  # never funded
    small = await lock_by_hand(  # the lock builder would add a return deposit
        devnet, deployment, consumer, vanished, 3_000_000,
        price_per_unit=1, max_units=10, fee_allowance=2_900_000,
    )  # fmt: skip
    await travel_to(devnet, escrow_datum(deployment, small).close + REFUND_WINDOW_MS + 1)
    before = onchain.balance(devnet, consumer.address)
    tx = await confirm(
        devnet, anyone.sign(refund(devnet.context(), deployment, small, anyone.address))
    )
    paid = tx.transaction_body.outputs[0].amount.coin
    assert paid > 3_000_000 - 2_900_000
    assert onchain.balance(devnet, consumer.address) - before == paid
