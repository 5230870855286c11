"""Attacks on the escrow, each a concrete transaction the ledger must refuse, next to its
honest twin that it accepts (contracts.md: double satisfaction, other redeemer, stake
hijack, receipt replay, arbitrary datums, token dust, value that could get locked)."""

from __future__ import annotations

from cbor2 import CBORTag
from pycardano import (
    Address,
    IndefiniteList,
    Network,
    PaymentSigningKey,
    RawPlutusData,
    ScriptHash,
    TransactionOutput,
)
from pycardano.serialization import ByteString

from offchain.protocol.escrow import escrow_datum, refund, settle
from offchain.protocol.split import settle_split
from offchain.protocol.txbuild import Clock, Wallet, ledger_key
from offchain.protocol.types import BatchSettle, PayoutKind, Settle
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
    Spend,
    confirm,
    handmade,
    item,
    lock_by_hand,
    plain_fee,
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


async def test_two_escrows_cannot_share_one_payout(devnet, deployment):
    """Same provider, same amount: one output paid once must not count for both escrows."""
    consumer, provider, market = await parties(devnet)
    locked = [await onchain.lock(devnet, deployment, consumer, provider) for _ in range(2)]
    a, b = sorted(locked, key=ledger_key)  # items go in ledger order, outputs ascending

    def pay(escrow):
        return [
            tagged(provider.address, SPLIT.provider, PayoutKind.SETTLE, escrow),
            tagged(consumer.address, SPLIT.consumer, PayoutKind.SETTLE, escrow),
        ]

    shared = [*pay(a), pay(b)[1]]  # b's provider is pointed at a's provider payout
    pairs = [
        (a, item(deployment, provider.key, a, UNITS, 0, 1)),
        (b, item(deployment, provider.key, b, UNITS, 0, 2)),
    ]
    attack = settle_by_hand(devnet, deployment, market, pairs, shared)
    await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: provider payout")

    pairs[1] = (b, item(deployment, provider.key, b, UNITS, 2, 3))
    await confirm(devnet, settle_by_hand(devnet, deployment, market, pairs, [*pay(a), *pay(b)]))


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


async def test_a_payout_must_carry_its_escrows_tag(devnet, deployment):
    """Right address and amount, but tagged as a refund, or for another escrow, or untagged."""
    consumer, provider, market = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    other = await onchain.lock(devnet, deployment, consumer, provider)
    pairs = [(escrow, item(deployment, provider.key, escrow, UNITS, 0, 1))]
    to_consumer = tagged(consumer.address, SPLIT.consumer, PayoutKind.SETTLE, escrow)
    for wrong in (
        tagged(provider.address, SPLIT.provider, PayoutKind.REFUND, escrow),
        tagged(provider.address, SPLIT.provider, PayoutKind.SETTLE, other),
        tagged(provider.address, SPLIT.provider - 1, PayoutKind.SETTLE, escrow),
        TransactionOutput(provider.address, SPLIT.provider),
    ):
        attack = settle_by_hand(devnet, deployment, market, pairs, [wrong, to_consumer])
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: provider payout")
    right = tagged(provider.address, SPLIT.provider, PayoutKind.SETTLE, escrow)
    await confirm(devnet, settle_by_hand(devnet, deployment, market, pairs, [right, to_consumer]))


async def test_settle_needs_the_withdraw_zero_and_one_item_per_escrow(devnet, deployment):
    """A Settle spend alone would let anyone take the escrow: the withdrawal must run."""
    consumer, provider, market = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    outputs = [
        tagged(provider.address, SPLIT.provider, PayoutKind.SETTLE, escrow),
        tagged(consumer.address, SPLIT.consumer, PayoutKind.SETTLE, escrow),
    ]
    alone = handmade(
        devnet, market, plain_fee(devnet, market),
        spends=[Spend(escrow, deployment.escrow_ref, Settle)], outputs=outputs,
    )  # fmt: skip
    await rejected(devnet, alone, SCRIPT_FAILED, "traces: settle needs the batch withdrawal")

    good = item(deployment, provider.key, escrow, UNITS, 0, 1)
    close = escrow_datum(deployment, escrow).close
    for items, reason in (([], "empty batch"), ([good, good], "one item per escrow input")):
        attack = handmade(
            devnet, market, plain_fee(devnet, market),
            spends=[Spend(escrow, deployment.escrow_ref, Settle)], outputs=outputs,
            withdraw=(deployment.escrow_ref, deployment.reward_address, BatchSettle(items)),
            ttl=Clock.now(devnet.context()).ttl_until(close),
        )  # fmt: skip
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", reason)
    await confirm(devnet, settle_by_hand(devnet, deployment, market, [(escrow, good)], outputs))


async def test_payouts_go_to_full_addresses_not_a_hijacked_stake_part(devnet, deployment):
    """The provider's payment key with the attacker's stake key is not the provider."""
    consumer, provider, attacker = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    hijack = lambda a: Address(a.payment_part, attacker.key_hash, network=a.network)  # noqa: E731
    pairs = [(escrow, item(deployment, provider.key, escrow, UNITS, 0, 1))]
    for provider_to, consumer_to, reason in (
        (hijack(provider.address), consumer.address, "provider payout"),
        (provider.address, hijack(consumer.address), "consumer payout"),
    ):
        outputs = [
            tagged(provider_to, SPLIT.provider, PayoutKind.SETTLE, escrow),
            tagged(consumer_to, SPLIT.consumer, PayoutKind.SETTLE, escrow),
        ]
        attack = settle_by_hand(devnet, deployment, attacker, pairs, outputs)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", f"traces: {reason}")
    honest = to_settle(deployment, provider.key, escrow, UNITS, RESULT, EVIDENCE)
    settled = settle(devnet.context(), deployment, [honest], attacker.address)
    await confirm(devnet, attacker.sign(settled))


async def test_a_receipt_is_good_for_one_escrow_network_and_script_only(devnet, deployment):
    consumer, provider, market = await parties(devnet)
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    job_b = await onchain.lock(devnet, deployment, consumer, provider)
    outputs = [
        tagged(provider.address, SPLIT.provider, PayoutKind.SETTLE, escrow),
        tagged(consumer.address, SPLIT.consumer, PayoutKind.SETTLE, escrow),
    ]
    key = provider.key
    for replayed in (
        item(deployment, key, escrow, UNITS, 0, 1, escrow=job_b.input),  # signed for job B
        item(deployment, key, escrow, UNITS, 0, 1, network_id=1),  # for mainnet
        item(deployment, key, escrow, UNITS, 0, 1, escrow_hash=ScriptHash(bytes(28))),
        item(deployment, key, escrow, UNITS, 0, 1, units=UNITS - 1),  # for fewer units
        item(deployment, PaymentSigningKey.generate(), escrow, UNITS, 0, 1),  # someone else
    ):
        attack = settle_by_hand(devnet, deployment, market, [(escrow, replayed)], outputs)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: receipt signature")
    honest = item(deployment, key, escrow, UNITS, 0, 1)
    await confirm(devnet, settle_by_hand(devnet, deployment, market, [(escrow, honest)], outputs))


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
        due = max(0, escrow_datum(deployment, escrow).price_per_unit * UNITS)
        outputs = [
            tagged(provider.address, max(due, 2_000_000), PayoutKind.SETTLE, escrow),
            tagged(consumer.address, LOCKED - ALLOWANCE, PayoutKind.SETTLE, escrow),
        ]
        pairs = [(escrow, item(deployment, provider.key, escrow, UNITS, 0, 1))]
        attack = settle_by_hand(devnet, deployment, market, pairs, outputs)
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
    small = await onchain.lock(
        devnet, deployment, consumer, vanished, lovelace=3_000_000,
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
