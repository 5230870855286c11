"""Attacks on the batch settle (PROTOCOL.md), each a hand-made transaction the ledger must
refuse by the trace of the check that stops it, beside its honest twin, which confirms with
every party paid to the lovelace: each provider price x units summed over its group, each
consumer locked - due - fee_allowance summed over its run of adjacent escrows. Every test runs
against both settle scripts: the deployed hand-written one and its OpShin reference.

What the settle script sees of a transaction is all that stands between the escrows and the
submitter: its outputs (payouts and refunds carry no datum, so no other script may run beside
it), its inputs (every script input an escrow of one script), its one withdrawal and its upper
bound, and each group's signed claim."""

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

from offchain.protocol.addresses import to_plutus
from offchain.protocol.deployment import Deployment
from offchain.protocol.escrow import escrow_datum, escrow_output
from offchain.protocol.txbuild import Clock, Wallet
from offchain.protocol.types import BondDatum, Nothing, Settle, TopUp
from tests.protocol.onchain import (
    ADA,
    BOND,
    LOCKED,
    SCRIPT_FAILED,
    UNBOUNDED,
    Plan,
    Spend,
    confirm,
    confirm_gains,
    escrow_terms,
    group,
    handmade,
    lock_together,
    output,
    plain_fee,
    plan,
    rejected,
    wallet,
)

UNITS = 1_234  # 2.468 ADA at PRICE: every payout above the ledger's minimum
SETTLE_RUN = "withdraw#0"  # the settle script's run, as the ledger names it in its reason
# a settle run refused by a builtin that fails (a shape the script never expects): no trace
NO_TRACE = "BuiltInFun.HeadList on arguments [BuiltinList(values=[]"
ALWAYS = PlutusV3Script(flatten(parse("(program 1.1.0 (lam context (con unit ())))")))


def short(made: TransactionOutput) -> TransactionOutput:
    """The output one lovelace short."""
    return TransactionOutput(made.address, made.amount.coin - 1)


def tagged(made: TransactionOutput) -> TransactionOutput:
    """The output carrying a datum (say, a tag claiming it for something else)."""
    return TransactionOutput(made.address, made.amount.coin, datum=b"mine")


def regroup(made: Plan, g: int, **changes) -> Plan:
    """`made` with group g's redeemer entry changed (SettleGroup's field names)."""
    groups = list(made.groups)
    spec = dataclasses.replace(groups[g].spec, **changes)
    groups[g] = dataclasses.replace(groups[g], spec=spec)
    return dataclasses.replace(made, groups=groups)


async def two_providers(devnet, deployment: Deployment):
    """Alice's two escrows with provider p (locked together: adjacent in ledger order, one
    refund), bob's with provider q; and the honest plan that settles all three."""
    alice, bob, p, q, market = [await wallet(devnet) for _ in range(5)]
    a1, a2 = await lock_together(devnet, deployment, alice, [p, p])
    (b1,) = await lock_together(devnet, deployment, bob, [q])
    honest = plan(deployment, [(p, [(a1, UNITS), (a2, 2 * UNITS)]), (q, [(b1, UNITS + 1)])])
    return market, honest, alice


async def test_payouts_are_checked_per_provider_and_refunds_per_run(devnet, either_settle):
    deployment = either_settle
    market, honest, alice = await two_providers(devnet, deployment)
    assert len(honest.outputs) == 4  # p, q, alice's one refund for two escrows, bob's
    p_out, q_out = honest.outputs[:2]
    alice_refund = next(i for i, o in enumerate(honest.outputs) if o.address == alice.address)

    def changed(index: int, made: TransactionOutput) -> Plan:
        outputs = list(honest.outputs)
        outputs[index] = made
        return dataclasses.replace(honest, outputs=outputs)

    swapped = dataclasses.replace(honest, outputs=[q_out, p_out, *honest.outputs[2:]])
    out_of_order = regroup(regroup(swapped, 0, output=1), 1, output=0)
    refunds_first = [*honest.outputs[2:], q_out]  # q paid among the refunds, from output 1 on
    among_refunds = regroup(
        dataclasses.replace(honest, outputs=[p_out, *refunds_first], first_refund=1),
        1,
        output=len(refunds_first),
    )
    for attack, reason in (
        (changed(0, short(p_out)), "provider payout"),  # p's two escrows, a lovelace short
        (changed(0, tagged(p_out)), "provider payout"),
        (swapped, "one provider per group"),  # p's group paid at q's address
        (out_of_order, "provider output order"),
        (among_refunds, "provider output order"),
        (changed(alice_refund, short(honest.outputs[alice_refund])), "consumer refund"),
        (changed(alice_refund, tagged(honest.outputs[alice_refund])), "consumer refund"),
    ):
        tx = attack.settle(devnet, deployment, market)
        await rejected(devnet, tx, SCRIPT_FAILED, SETTLE_RUN, f"traces: {reason}")
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_a_claim_signs_exactly_its_escrows_units_network_and_settle_script(
    devnet, either_settle
):
    deployment = either_settle
    consumer, provider, other, market = [await wallet(devnet) for _ in range(4)]
    a, b, c = await lock_together(devnet, deployment, consumer, [provider] * 3)
    honest = plan(deployment, [(provider, [(a, UNITS), (b, UNITS)]), (provider, [(c, 0)])])
    claimed = honest.groups[0].claimed
    key = provider.key

    def signed(**changes) -> Plan:
        """Group 0 claiming what it does, its claim signed over something else."""
        made = group(deployment, key, claimed, 0, **changes)
        return regroup(honest, 0, signature=made.spec.signature)

    stranger = group(deployment, other.key, claimed, 0).spec
    for attack, reason in (
        (signed(claims=[(a.input, UNITS)]), "claim signature"),  # b left out
        (signed(claims=[(e.input, UNITS) for e in (a, b, c)]), "claim signature"),  # c added
        (signed(claims=[(a.input, UNITS), (b.input, UNITS - 1)]), "claim signature"),
        (signed(network_id=1), "claim signature"),
        (signed(settle_hash=deployment.escrow_hash), "claim signature"),  # a receipt of old
        (signed(note=b"another job's result"), "claim signature"),
        (regroup(honest, 0, signature=stranger.signature), "claim signature"),
        (regroup(honest, 0, signature=stranger.signature, vkey=stranger.vkey), "one provider"),
    ):
        tx = attack.settle(devnet, deployment, market)
        await rejected(devnet, tx, SCRIPT_FAILED, SETTLE_RUN, f"traces: {reason}")
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_a_group_paid_nothing_earns_nothing(devnet, either_settle):
    """A zero-unit claim needs no output (output -1); an escrow earning anything in it has no
    payout address to be paid at."""
    deployment = either_settle
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    (escrow,) = await lock_together(devnet, deployment, consumer, [provider])
    honest = plan(deployment, [(provider, [(escrow, 0)])])
    assert honest.groups[0].spec.output == -1 and str(provider.address) not in honest.gains
    earning = plan(deployment, [(provider, [(escrow, UNITS)])])
    unpaid = dataclasses.replace(
        earning, groups=[group(deployment, provider.key, [(escrow, UNITS)], -1)]
    )
    unpaid.outputs.pop(0)
    unpaid.first_refund = 0
    tx = unpaid.settle(devnet, deployment, market)
    await rejected(devnet, tx, SCRIPT_FAILED, SETTLE_RUN, "traces: one provider per group")
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
        (dict(mint=(script, token, Settle())), "one item per escrow input, and no script"),
    ):
        tx = honest.settle(devnet, deployment, market, **extra)
        await rejected(devnet, tx, SCRIPT_FAILED, "withdraw#", f"traces: {reason}")
    alone = handmade(
        devnet, market, plain_fee(devnet, market), outputs=honest.outputs,
        spends=[Spend(escrow, deployment.escrow_ref, Settle())],
    )  # fmt: skip
    await rejected(devnet, alone, SCRIPT_FAILED, "spend#", NO_TRACE)
    await confirm_gains(devnet, honest.settle(devnet, deployment, market), honest.gains)


async def test_one_item_per_escrow_and_an_upper_bound_by_the_close(devnet, either_settle):
    deployment = either_settle
    consumer, provider, market = [await wallet(devnet) for _ in range(3)]
    a, b = await lock_together(devnet, deployment, consumer, [provider, provider])
    honest = plan(deployment, [(provider, [(a, UNITS), (b, 0)])])
    items = [UNITS, 0, 0, 0]
    clock = Clock.now(devnet.context())
    close = escrow_datum(deployment, a).close
    close_slot = clock.time.posix_ms_to_slot(close)
    assert clock.time.slot_to_posix_ms(close_slot) == close
    for extra, reason in (
        (dict(items=[]), "traces: empty batch"),
        (dict(items=items[:2]), NO_TRACE),  # b has no item
        (dict(items=items[:3]), NO_TRACE),  # b has its units, not its group
        (dict(items=[*items, 0, 0]), "traces: one item per escrow input"),
        (dict(ttl=close_slot + 1), "traces: units or time"),  # a slot after the close
        (dict(ttl=UNBOUNDED), "traces: one withdrawal, and an upper bound"),
    ):
        tx = honest.settle(devnet, deployment, market, **extra)
        await rejected(devnet, tx, SCRIPT_FAILED, SETTLE_RUN, reason)
    tx = honest.settle(devnet, deployment, market, ttl=close_slot)  # the close itself
    await confirm_gains(devnet, tx, honest.gains)
