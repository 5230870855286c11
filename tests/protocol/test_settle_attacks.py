"""Attacks on the batch settle (PROTOCOL.md), each a hand-made transaction the ledger must
refuse by the trace of the check that stops it, beside its honest twin, which confirms with
every party paid to the lovelace: each provider address price x units summed over its escrows
(whatever signed them: claims and receipts mixed), each consumer locked - due - fee_allowance
summed over its run of adjacent escrows. Every test runs against both settle scripts: the
deployed hand-written one and its OpShin reference.

What the settle script sees of a transaction is all that stands between the escrows and the
submitter: its outputs (payouts and refunds carry no datum, so no other script may run beside
it), its inputs (every script input an escrow of one script), its one withdrawal and its upper
bound, each escrow's item (units, signer, payee), each signed claim and each receipt."""

from __future__ import annotations

import dataclasses

from pycardano import (
    Address,
    Asset,
    AssetName,
    MultiAsset,
    Network,
    PlutusV3Script,
    ScriptHash,
    StakeCredential,
    StakeRegistration,
    TransactionBuilder,
    TransactionOutput,
    plutus_script_hash,
)
from uplc import parse
from uplc.tools import flatten

from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.types import BondDatum, Nothing, Settle, TopUp
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.escrow import escrow_datum, escrow_output
from offchain.protocol.tx.txbuild import Clock, Wallet
from tests.protocol.onchain import (
    ADA,
    BOND,
    LOCKED,
    SCRIPT_FAILED,
    UNBOUNDED,
    Plan,
    Spend,
    claim,
    confirm,
    confirm_gains,
    escrow_terms,
    handmade,
    lock_together,
    output,
    plain_fee,
    plan,
    receipt,
    rejected,
    wallet,
)

UNITS = 1_234  # 2.468 ADA at PRICE: every payout above the ledger's minimum
SETTLE_RUN = "withdraw#0"  # the settle script's run, as the ledger names it in its reason
ALWAYS = PlutusV3Script(flatten(parse("(program 1.1.0 (lam context (con unit ())))")))
ITEMS = "one item per escrow input, one receipt per escrow signed alone"


def short(made: TransactionOutput) -> TransactionOutput:
    """The output one lovelace short."""
    return TransactionOutput(made.address, made.amount.coin - 1)


def tagged(made: TransactionOutput) -> TransactionOutput:
    """The output carrying a datum (say, a tag claiming it for something else)."""
    return TransactionOutput(made.address, made.amount.coin, datum=b"mine")


def reclaim(made: Plan, c: int, **changes) -> Plan:
    """`made` with claim c's redeemer entry changed (SettleClaim's field names)."""
    claims = list(made.claims)
    claims[c] = dataclasses.replace(claims[c], **changes)
    return dataclasses.replace(made, claims=claims)


def rereceipt(made: Plan, r: int, **changes) -> Plan:
    """`made` with receipt r's redeemer entry changed (SettleReceipt's field names)."""
    receipts = list(made.receipts)
    receipts[r] = dataclasses.replace(receipts[r], **changes)
    return dataclasses.replace(made, receipts=receipts)


def reoutput(made: Plan, index: int, changed: TransactionOutput) -> Plan:
    outputs = list(made.outputs)
    outputs[index] = changed
    return dataclasses.replace(made, outputs=outputs)


async def refused(devnet, deployment, market, attack: Plan, reason: str | None) -> None:
    """The settle script refuses `attack` with `reason` traced (None: untraced or not, as
    long as it is refused: an index out of range fails in a builtin)."""
    tx = attack.settle(devnet, deployment, market)
    expected = (SETTLE_RUN,) if reason is None else (SETTLE_RUN, f"traces: {reason}")
    await rejected(devnet, tx, SCRIPT_FAILED, *expected)


async def two_providers(devnet, deployment: Deployment):
    """Alice's two escrows with provider p (locked together: adjacent in ledger order, one
    refund), p claiming the first and its own receipt settling the second (one payout for
    both), bob's with provider q, claimed; and the honest plan that settles all three."""
    alice, bob, p, q, market = [await wallet(devnet) for _ in range(5)]
    a1, a2 = await lock_together(devnet, deployment, alice, [p, p])
    (b1,) = await lock_together(devnet, deployment, bob, [q])
    honest = plan(deployment, [(p, [(a1, UNITS)]), (q, [(b1, UNITS + 1)])], [(p, a2, 2 * UNITS)])
    return market, honest, alice, (a1, a2, b1)


async def test_payouts_are_checked_per_provider_and_refunds_per_run(devnet, either_settle):
    deployment = either_settle
    market, honest, alice, (a1, a2, b1) = await two_providers(devnet, deployment)
    assert len(honest.outputs) == 4  # p, q, alice's one refund for two escrows, bob's
    assert honest.first_refund == 2 and len(honest.receipts) == 1
    p_out, q_out = honest.outputs[:2]
    assert p_out.amount.coin == 3 * UNITS * escrow_datum(deployment, a1).price_per_unit
    alice_refund = next(i for i, o in enumerate(honest.outputs) if o.address == alice.address)
    swapped = dataclasses.replace(honest, outputs=[q_out, p_out, *honest.outputs[2:]])
    for attack, reason in (
        (reoutput(honest, 0, short(p_out)), "provider payout"),  # p's two, a lovelace short
        (reoutput(honest, 0, tagged(p_out)), "provider payout"),
        (swapped, "one provider per payout"),  # p's escrows paid at q's address
        (honest.changed(a2, payee=1), "one provider per payout"),  # p's receipt at q's output
        (honest.changed(b1, payee=0), "one provider per payout"),  # q's claim at p's output
        (reoutput(honest, alice_refund, short(honest.outputs[alice_refund])), "consumer refund"),
        (reoutput(honest, alice_refund, tagged(honest.outputs[alice_refund])), "consumer refund"),
        (honest.changed(b1, payee=honest.first_refund), None),  # a payee among the refunds
        (honest.changed(b1, payee=len(honest.outputs) + 5), None),  # no such output
    ):
        await refused(devnet, deployment, market, attack, reason)
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_a_claim_signs_exactly_its_escrows_units_network_and_settle_script(
    devnet, either_settle
):
    deployment = either_settle
    consumer, provider, other, market = [await wallet(devnet) for _ in range(4)]
    a, b, c = await lock_together(devnet, deployment, consumer, [provider] * 3)
    honest = plan(deployment, [(provider, [(a, UNITS), (b, UNITS)]), (provider, [(c, 0)])])
    claimed = honest.claimed[0]
    key = provider.key

    def signed(**changes) -> Plan:
        """Claim 0 covering what it does, signed over something else."""
        return reclaim(honest, 0, signature=claim(deployment, key, claimed, **changes).signature)

    stranger = claim(deployment, other.key, claimed)
    nothing = claim(deployment, key, [])
    for attack, reason in (
        (signed(claims=[(a.input, UNITS)]), "claim signature"),  # b left out
        (signed(claims=[(e.input, UNITS) for e in (a, b, c)]), "claim signature"),  # c added
        (signed(claims=[(a.input, UNITS), (b.input, UNITS - 1)]), "claim signature"),
        (signed(network_id=1), "claim signature"),
        (signed(settle_hash=deployment.escrow_hash), "claim signature"),  # a receipt of old
        (signed(note=b"another job's result"), "claim signature"),
        (reclaim(honest, 0, signature=stranger.signature), "claim signature"),
        (reclaim(honest, 0, signature=stranger.signature, vkey=stranger.vkey), "one key per"),
        (honest.changed(b, signer=1), "claim signature"),  # b moved to c's claim
        (honest.changed(c, signer=0), "claim signature"),  # c added to claim 0, 1 left empty
        (dataclasses.replace(honest, claims=[*honest.claims, nothing]), "claim signature"),
        (honest.changed(c, signer=2), None),  # no such claim
    ):
        await refused(devnet, deployment, market, attack, reason)
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_a_receipt_signs_its_escrow_units_network_and_settle_script(devnet, either_settle):
    """Escrows with signer -1 take the receipts in ledger order, each verified against its
    own escrow's provider key; every receipt must be used."""
    deployment = either_settle
    consumer, provider, other, market = [await wallet(devnet) for _ in range(4)]
    a, b = await lock_together(devnet, deployment, consumer, [provider] * 2)
    honest = plan(deployment, [], [(provider, a, UNITS), (provider, b, 2 * UNITS)])
    assert honest.items[1::3] == [-1, -1] and len(honest.outputs) == 2  # one payout, one refund
    key = provider.key

    def signed(**changes) -> Plan:
        """Receipt 0 (a's) signed over something else."""
        return rereceipt(
            honest, 0, signature=receipt(deployment, key, a, UNITS, **changes).signature
        )

    first, second = honest.receipts
    for attack, reason in (
        (signed(claims=[(a.input, UNITS + 1)]), "receipt signature"),
        (signed(claims=[(b.input, UNITS)]), "receipt signature"),  # another escrow's
        (signed(network_id=1), "receipt signature"),
        (signed(settle_hash=deployment.escrow_hash), "receipt signature"),
        (rereceipt(honest, 0, note=b"another job's result"), "receipt signature"),
        (
            rereceipt(honest, 0, signature=receipt(deployment, other.key, a, UNITS).signature),
            "receipt signature",
        ),
        (dataclasses.replace(honest, receipts=[second, first]), "receipt signature"),
        (dataclasses.replace(honest, receipts=[*honest.receipts, first]), ITEMS),  # unused
        (dataclasses.replace(honest, receipts=[first]), None),  # b has none
    ):
        await refused(devnet, deployment, market, attack, reason)
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_an_escrow_paid_nothing_earns_nothing(devnet, either_settle):
    """A zero-unit escrow needs no output (payee -1); an escrow earning anything with payee
    -1 has no payout to be paid in."""
    deployment = either_settle
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    (escrow,) = await lock_together(devnet, deployment, consumer, [provider])
    honest = plan(deployment, [(provider, [(escrow, 0)])])
    assert honest.items == [0, 0, -1] and str(provider.address) not in honest.gains
    earning = plan(deployment, [(provider, [(escrow, UNITS)])])
    unpaid = dataclasses.replace(
        earning.changed(escrow, payee=-1), outputs=earning.outputs[1:], first_refund=0
    )
    await refused(devnet, deployment, market, unpaid, "provider payout")
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def lock_beside_others(devnet, deployment: Deployment, consumer: Wallet, provider: Wallet):
    """An escrow (output 0), and in the same transaction, after it in ledger order, the
    provider's bond (1) and a UTxO holding the escrow's own datum at a script that accepts
    anything (2), published at output 3."""
    context = devnet.context()
    datum = escrow_terms(consumer, provider, Clock.now(context).tip_ms)
    bond = BondDatum(to_plutus(provider.address), provider.vkey, Nothing())
    builder = TransactionBuilder(context)
    builder.add_input_address(consumer.address)
    anywhere = Address(plutus_script_hash(ALWAYS), network=Network.TESTNET)
    for made in (
        escrow_output(context, deployment, datum, LOCKED),
        TransactionOutput(deployment.bond_address(provider.address), BOND, datum=bond),
        TransactionOutput(anywhere, 20 * ADA, datum=datum),
        TransactionOutput(anywhere, 20 * ADA, script=ALWAYS),
    ):
        builder.add_output(made)
    tx = builder.build_and_sign([consumer.key], change_address=consumer.address)
    await confirm(devnet, tx)
    return [output(tx, n) for n in range(4)]


async def registered(devnet, owner: Wallet, script_hash: ScriptHash) -> Address:
    """The reward account of a script, registered (anyone may; no witness)."""
    if devnet.context().script_reward_balance(script_hash) is None:
        builder = TransactionBuilder(devnet.context())
        builder.add_input_address(owner.address)
        builder.certificates = [StakeRegistration(StakeCredential(script_hash))]
        await confirm(devnet, builder.build_and_sign([owner.key], change_address=owner.address))
    return Address(staking_part=script_hash, network=Network.TESTNET)


async def test_no_script_but_escrows_and_one_withdrawal_runs_beside_a_settle(devnet, either_settle):
    """Payouts carry no datum: another script in the transaction could count them for
    itself, so none may run (no other script input, no other redeemer, no second
    withdrawal); an escrow spent with Settle without the settle script's run is refused by
    the escrow itself. (The first script input names the escrow script: the others come
    after the escrow here; one before it would be read as one, and the escrow refused.)"""
    deployment = either_settle
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    escrow, bond, held, script = await lock_beside_others(devnet, deployment, consumer, provider)
    account = await registered(devnet, market, plutus_script_hash(ALWAYS))
    honest = plan(deployment, [(provider, [(escrow, UNITS)])])
    token = MultiAsset({plutus_script_hash(ALWAYS): Asset({AssetName(b"x"): 1})})
    for extra, reason in (
        (dict(also_withdraw=[(script, account, Settle())]), "one withdrawal, and an upper bound"),
        (dict(spends=[Spend(held, script, Settle())]), "one escrow script"),
        (dict(spends=[Spend(bond, deployment.bond_ref, TopUp(0))]), "one escrow script"),
        (dict(mint=(script, token, Settle())), ITEMS),
    ):
        tx = honest.settle(devnet, deployment, market, **extra)
        await rejected(devnet, tx, SCRIPT_FAILED, "withdraw#", f"traces: {reason}")
    alone = handmade(
        devnet, market, plain_fee(devnet, market), outputs=honest.outputs,
        spends=[Spend(escrow, deployment.escrow_ref, Settle())],
    )  # fmt: skip
    await rejected(
        devnet, alone, SCRIPT_FAILED, "spend#", "traces: settle needs the batch withdrawal"
    )
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_one_item_per_escrow_and_an_upper_bound_by_the_close(devnet, either_settle):
    deployment = either_settle
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    a, b = await lock_together(devnet, deployment, consumer, [provider, provider])
    honest = plan(deployment, [(provider, [(a, UNITS), (b, 0)])])
    items = honest.items
    assert items == [UNITS, 0, 0, 0, 0, -1]
    clock = Clock.now(devnet.context())
    close = escrow_datum(deployment, a).close
    close_slot = clock.time.posix_ms_to_slot(close)
    assert clock.time.slot_to_posix_ms(close_slot) == close
    for extra, reason in (
        (dict(items=[]), "traces: empty batch"),
        (dict(items=items[:3]), None),  # b has no item
        (dict(items=items[:5]), None),  # b has its units and signer, not its payee
        (dict(items=[*items, 0, 0, -1]), f"traces: {ITEMS}"),
        (dict(ttl=close_slot + 1), "traces: units or time"),  # a slot after the close
        (dict(ttl=UNBOUNDED), "traces: one withdrawal, and an upper bound"),
    ):
        tx = honest.settle(devnet, deployment, market, **extra)
        await rejected(devnet, tx, SCRIPT_FAILED, SETTLE_RUN, *([reason] if reason else []))
    tx = honest.settle(devnet, deployment, market, ttl=close_slot)  # the close itself
    await confirm_gains(devnet, tx, honest.gains)
