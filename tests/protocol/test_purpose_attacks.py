"""Purpose confusion: the escrow, bond and settle scripts invoked where they have no business
(mint, publish, the escrow or the bond as a withdraw script, nonsense redeemers) must fail,
while the same transactions without the confusion go through."""

from __future__ import annotations

from pycardano import (
    Address,
    Asset,
    AssetName,
    MultiAsset,
    StakeCredential,
    StakeDeregistration,
    StakeRegistration,
    TransactionBuilder,
    TransactionOutput,
    Value,
)

from offchain.protocol.ledger.types import (
    BatchSettle,
    BeginUnbond,
    PayoutKind,
    Refund,
    Settle,
    Slash,
    Withdraw,
)
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import Clock
from tests.protocol import onchain
from tests.protocol.onchain import (
    ADA,
    ALLOWANCE,
    LOCKED,
    REFUND_WINDOW_MS,
    SCRIPT_FAILED,
    Spend,
    confirm,
    handmade,
    junk_tokens,
    plain_fee,
    rejected,
    tagged,
    travel_to,
    wallet,
)

KEY_DEPOSIT = 2 * ADA


async def test_no_script_mints(devnet, deployment):
    minter = await wallet(devnet)
    for ref, script_hash in (
        (deployment.escrow_ref, deployment.escrow_hash),
        (deployment.bond_ref, deployment.bond_hash),
        (deployment.settle_ref, deployment.settle_hash),
    ):
        token = MultiAsset({script_hash: Asset({AssetName(b"job"): 1})})
        for redeemer in (Settle(), Withdraw(), BatchSettle([], [], [], 0)):
            attack = handmade(
                devnet, minter, plain_fee(devnet, minter), mint=(ref, token, redeemer),
                outputs=[TransactionOutput(minter.address, Value(2 * ADA, token))],
            )  # fmt: skip
            await rejected(devnet, attack, SCRIPT_FAILED, "mint#0", "traces: purpose")
    policy, junk = junk_tokens(minter, 1)  # the twin: a real policy mints
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(minter.address)
    builder.mint, builder.native_scripts = junk, [policy]
    builder.add_output(TransactionOutput(minter.address, Value(2 * ADA, junk)))
    await confirm(devnet, builder.build_and_sign([minter.key], change_address=minter.address))


async def test_the_settle_stake_credential_can_never_be_deregistered(devnet, deployment):
    """Deregistering it would stop every batch settle (and hand its deposit to the caller)."""
    anyone = await wallet(devnet)
    leave = StakeDeregistration(StakeCredential(deployment.settle_hash))
    for redeemer in (BatchSettle([], [], [], 0), Refund(0, 0)):
        attack = handmade(
            devnet, anyone, plain_fee(devnet, anyone), certificates=[leave],
            publish=(deployment.settle_ref, redeemer), refund=KEY_DEPOSIT,
        )  # fmt: skip
        await rejected(devnet, attack, SCRIPT_FAILED, "publish#0", "traces: purpose")


async def test_neither_the_escrow_nor_the_bond_is_a_withdraw_script(devnet, deployment):
    """Its stake credential registered (anyone can, no witness), a withdraw-zero must fail."""
    anyone = await wallet(devnet)
    for ref, script_hash in (
        (deployment.escrow_ref, deployment.escrow_hash),
        (deployment.bond_ref, deployment.bond_hash),
    ):
        builder = TransactionBuilder(devnet.context())
        builder.add_input_address(anyone.address)
        builder.certificates = [StakeRegistration(StakeCredential(script_hash))]
        signed = builder.build_and_sign([anyone.key], change_address=anyone.address)
        await confirm(devnet, signed)
        reward = Address(staking_part=script_hash, network=deployment.network)
        for redeemer in (Withdraw(), BeginUnbond(0), Settle(), BatchSettle([], [], [], 0)):
            attack = handmade(
                devnet, anyone, plain_fee(devnet, anyone), withdraw=(ref, reward, redeemer)
            )
            await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: purpose")


async def test_an_escrow_spent_with_a_bond_redeemer_or_junk_fails(devnet, deployment):
    """A field-less Withdraw has no `own_input` and 42 is no constructor (the builtins fail,
    there is no trace to give); a Slash (constructor 3) reads as a Start, which an escrow with
    no start deadline refuses before anything else."""
    consumer, provider, anyone = [await wallet(devnet) for _ in range(3)]
    escrow = await onchain.lock(devnet, deployment, consumer, provider)
    await travel_to(devnet, escrow_datum(deployment, escrow).close + REFUND_WINDOW_MS + 1)
    owed = [tagged(consumer.address, LOCKED - ALLOWANCE, PayoutKind.REFUND, escrow)]
    start = Clock.now(devnet.context()).tip_slot
    for redeemer, reason in (
        (Withdraw(), "BuiltInFun.HeadList on arguments [BuiltinList(values=[]"),
        (lambda own: Slash(own, bytes(64), 0, 0), "traces: no start deadline"),
        (42, "BuiltInFun.UnConstrData on arguments [PlutusInteger(value=42)]"),
    ):
        attack = handmade(
            devnet, anyone, plain_fee(devnet, anyone), outputs=owed, start=start,
            spends=[Spend(escrow, deployment.escrow_ref, redeemer)],
        )  # fmt: skip
        await rejected(devnet, attack, SCRIPT_FAILED, "spend#", reason)
    await confirm(devnet, onchain.refund_by_hand(devnet, deployment, anyone, [(escrow, 0)], owed))
