"""Transactions over the real socket, checked on the ledger afterwards (not just "no error")."""

from __future__ import annotations

import pytest
from pycardano import (
    Asset,
    AssetName,
    MultiAsset,
    PaymentSigningKey,
    ScriptPubkey,
    Transaction,
    TransactionBody,
    TransactionBuilder,
    TransactionOutput,
    TransactionWitnessSet,
    Value,
    VerificationKeyWitness,
)

from devnet.genesis import ADA, wallet_address
from devnet.process import DevnetProcess
from offchain.chain.ogmios import OgmiosError, request
from offchain.chain.submit import submit
from tests.devnet.payments import confirm, lovelace_at, payment
from tests.devnet.rpc import rpc_raw
from tests.ogmios_schema import validate


def fresh_wallet() -> tuple[PaymentSigningKey, object]:
    key = PaymentSigningKey.generate()
    return key, wallet_address(key)


async def funded_wallet(devnet, lovelace: int = 100 * ADA):
    key, address = fresh_wallet()
    await confirm(devnet, payment(devnet, "alice", address, lovelace))
    return key, address


async def test_payment_moves_exactly_the_amount_and_the_fee(devnet):
    key, sender = await funded_wallet(devnet)
    _, receiver = fresh_wallet()
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(sender)
    builder.add_output(TransactionOutput(receiver, 12_345_678))
    tx = builder.build_and_sign([key], change_address=sender)
    block = await confirm(devnet, tx)
    assert str(tx.id) in [t["id"] for t in block["transactions"]]
    assert lovelace_at(devnet, receiver) == 12_345_678
    assert lovelace_at(devnet, sender) == 100 * ADA - 12_345_678 - tx.transaction_body.fee


async def test_mint_and_burn_with_a_native_script_policy(devnet):
    key, owner = await funded_wallet(devnet)
    policy = ScriptPubkey(key.to_verification_key().hash())
    name = AssetName(b"GPU-HOUR")
    minted = MultiAsset({policy.hash(): Asset({name: 1_000})})
    builder = TransactionBuilder(devnet.context())
    builder.add_input_address(owner)
    builder.mint = minted
    builder.native_scripts = [policy]
    builder.add_output(TransactionOutput(owner, Value(2 * ADA, minted)))
    await confirm(devnet, builder.build_and_sign([key], change_address=owner))
    held = [u.output.amount.multi_asset for u in devnet.context().utxos(owner)]
    assert sum(m.get(policy.hash(), {}).get(name, 0) for m in held) == 1_000

    burn = TransactionBuilder(devnet.context())
    burn.add_input_address(owner)
    burn.mint = MultiAsset({policy.hash(): Asset({name: -400})})
    burn.native_scripts = [policy]
    await confirm(devnet, burn.build_and_sign([key], change_address=owner))
    held = [u.output.amount.multi_asset for u in devnet.context().utxos(owner)]
    assert sum(m.get(policy.hash(), {}).get(name, 0) for m in held) == 600

    thief_key, thief = await funded_wallet(devnet)
    steal = TransactionBuilder(devnet.context())
    steal.add_input_address(thief)
    steal.mint = minted
    steal.native_scripts = [policy]
    steal.add_output(TransactionOutput(thief, Value(2 * ADA, minted)))
    with pytest.raises(OgmiosError) as refused:
        await submit(devnet.url, steal.build_and_sign([thief_key], change_address=thief))
    assert refused.value.code == 3103  # the policy (a native script) is not satisfied


async def test_double_spend_is_refused(devnet):
    key, sender = await funded_wallet(devnet, 50 * ADA)
    (
        _,
        first,
    ) = fresh_wallet()
    _, second = fresh_wallet()
    utxo = devnet.context().utxos(sender)[0]

    def spend_to(address) -> Transaction:
        body = TransactionBody(
            inputs=[utxo.input],
            outputs=[TransactionOutput(address, 50 * ADA - 200_000)],
            fee=200_000,
        )
        witness = VerificationKeyWitness(key.to_verification_key(), key.sign(body.hash()))
        return Transaction(body, TransactionWitnessSet(vkey_witnesses=[witness]))

    await submit(devnet.url, spend_to(first))  # in the mempool
    with pytest.raises(OgmiosError) as in_mempool:
        await submit(devnet.url, spend_to(second))
    assert in_mempool.value.code == 3117
    await confirm(devnet, payment(devnet, "bob", first, 2 * ADA))  # let a block pass
    with pytest.raises(OgmiosError) as on_chain:
        await submit(devnet.url, spend_to(second))
    assert on_chain.value.code == 3117
    assert lovelace_at(devnet, second) == 0
    assert lovelace_at(devnet, first) == 50 * ADA - 200_000 + 2 * ADA


def mutated_payment(devnet, key, sender, receiver, **changes) -> Transaction:
    """A payment from `sender` signed by `key`, its body with `changes` (validly signed)."""
    utxo = max(devnet.context().utxos(sender), key=lambda u: u.output.amount.coin)
    fee = changes.pop("fee", 200_000)
    amount = changes.pop("amount", 5 * ADA)
    change = utxo.output.amount.coin - amount - fee + changes.pop("extra_change", 0)
    body = TransactionBody(
        inputs=[utxo.input],
        outputs=[TransactionOutput(receiver, amount), TransactionOutput(sender, change)],
        fee=fee,
        **changes,
    )
    witness = VerificationKeyWitness(key.to_verification_key(), key.sign(body.hash()))
    return Transaction(body, TransactionWitnessSet(vkey_witnesses=[witness]))


async def test_phase_one_rejections_over_the_socket(devnet):
    """A valid payment, then the same payment broken one way at a time: each its own code."""
    key, sender = await funded_wallet(devnet)
    _, receiver = fresh_wallet()
    tip = (await rpc_raw(devnet.url, "queryNetwork/tip"))["result"]["slot"]
    cases = {
        3122: {"fee": 1_000},  # fee too small
        3123: {"extra_change": 1},  # value not conserved: one lovelace from nowhere
        3125: {"amount": 100_000},  # output below the minimum ADA
        3118: {"ttl": tip},  # validity interval already over
    }
    for code, changes in cases.items():
        tx = mutated_payment(devnet, key, sender, receiver, **changes)
        response = await rpc_raw(
            devnet.url, "submitTransaction", {"transaction": {"cbor": tx.to_cbor().hex()}}
        )
        validate("submitTransaction", response)
        assert response["error"]["code"] == code, (changes, response["error"])
    stranger = PaymentSigningKey.generate()
    unsigned = mutated_payment(devnet, stranger, sender, receiver)
    response = await rpc_raw(
        devnet.url, "submitTransaction", {"transaction": {"cbor": unsigned.to_cbor().hex()}}
    )
    validate("submitTransaction", response)
    assert response["error"]["code"] == 3101  # MissingSignatories: the owner never signed
    assert lovelace_at(devnet, receiver) == 0

    honest = mutated_payment(devnet, key, sender, receiver, ttl=tip + 10_000)
    await confirm(devnet, honest)
    assert lovelace_at(devnet, receiver) == 5 * ADA


@pytest.mark.devnet  # a devnet of its own
async def test_time_travel_opens_a_validity_interval_exactly_at_its_edge(tmp_path):
    """A payment valid only in slot S is refused before S and accepted in the block at S
    (the lower bound is inclusive, the upper exclusive). Slow slots keep the clock still."""
    devnet = DevnetProcess(tmp_path / "slow", slot_length_ms=2_000).start()
    try:
        await _valid_only_in_one_slot(devnet)
    finally:
        devnet.stop()


async def _valid_only_in_one_slot(devnet: DevnetProcess) -> None:
    key, sender = await funded_wallet(devnet)
    _, receiver = fresh_wallet()
    tip = (await request(devnet.url, "queryNetwork/tip"))["slot"]
    opens = tip + 5_000
    early = mutated_payment(devnet, key, sender, receiver, validity_start=opens, ttl=opens + 1)
    response = await rpc_raw(
        devnet.url, "submitTransaction", {"transaction": {"cbor": early.to_cbor().hex()}}
    )
    validate("submitTransaction", response)
    assert response["error"]["code"] == 3118
    assert response["error"]["data"]["validityInterval"] == {
        "invalidBefore": opens,
        "invalidAfter": opens + 1,
    }

    # Travel so that the next block lands exactly on `opens`.
    travelled = await request(devnet.url, "devnet/advanceTime", {"slots": opens - 1 - tip})
    assert travelled["tip"]["slot"] == opens - 1
    block = await confirm(devnet, early)
    assert block["slot"] == opens
    assert lovelace_at(devnet, receiver) == 5 * ADA
