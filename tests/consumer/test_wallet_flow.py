"""An external wallet signs the escrow lock: `unchained job submit --unsigned-tx FILE` writes it
unsigned, the wallet signs it outside the CLI (pycardano with the consumer's own key, as a
wallet would), `unchained job lock JOB SIGNED` submits it. What a wallet can hand back (the
signed transaction as hex, a cardano-cli TextEnvelope, a CIP-30 witness set) is taken; an
unsigned, tampered or wrongly signed lock is refused with nothing locked."""

from __future__ import annotations

import json
from pathlib import Path

from pycardano import (
    Address,
    Network,
    NonEmptyOrderedSet,
    PaymentSigningKey,
    Transaction,
    TransactionBody,
    TransactionInput,
    TransactionOutput,
    TransactionWitnessSet,
    VerificationKeyWitness,
)

from consumer.sdk.external import signed_cbor, signed_tx
from offchain.chain.follower import tip_point
from offchain.chain.utxo import parse_out_ref, utxo_at
from tests.consumer.cli import ready_to_submit, run_json, tx_fee
from tests.consumer.scripted import PRICE
from tests.consumer.test_sdk import SPEC
from tests.protocol.onchain import balance

LOCKED = PRICE * SPEC["max_duration_s"]


def witness_set(tx: Transaction, key: PaymentSigningKey) -> TransactionWitnessSet:
    """What CIP-30 `signTx` returns: only the key's witness of the transaction's id."""
    witness = VerificationKeyWitness(key.to_verification_key(), key.sign(tx.id.payload))
    return TransactionWitnessSet(vkey_witnesses=NonEmptyOrderedSet([witness]))


def signed(tx: Transaction, key: PaymentSigningKey) -> Transaction:
    return Transaction(tx.transaction_body, witness_set(tx, key), tx.valid, tx.auxiliary_data)


def text_envelope(tx: Transaction) -> str:
    """A signed transaction as `cardano-cli transaction sign` writes it."""
    return json.dumps({"type": "Witnessed Tx ConwayEra", "description": "Ledger Cddl Format",
                       "cborHex": tx.to_cbor_hex()})  # fmt: skip


async def test_an_external_wallet_signs_the_lock(market, provider, devnet, tmp_path: Path):
    funded, key, env = await ready_to_submit(market, provider, devnet, tmp_path)
    start = balance(devnet, funded.address)
    since = await tip_point(devnet.url)

    code, quote = run_json(
        env, "job", "submit", "job.yaml", "--unsigned-tx", "lock.unsigned", cwd=tmp_path
    )
    assert code == 0, quote
    job = quote["job_id"]
    assert quote["unsigned_tx"] == "lock.unsigned" and "escrow" not in quote
    unsigned = Transaction.from_cbor(bytes.fromhex((tmp_path / "lock.unsigned").read_text()))
    assert not unsigned.transaction_witness_set.vkey_witnesses

    wallet_key = PaymentSigningKey.load(str(key))  # the wallet's own copy of the key
    stranger = PaymentSigningKey.generate()
    tampered = Transaction.from_cbor(unsigned.to_cbor())
    tampered.transaction_body.fee += 1  # one lovelace more to the fee: another transaction
    assert tampered.id != unsigned.id
    refusals = {
        "unsigned.hex": (unsigned.to_cbor_hex(), "carries no valid signature"),
        "tampered.json": (text_envelope(signed(tampered, wallet_key)), "not the pending"),
        "stranger.witness": (witness_set(unsigned, stranger).to_cbor_hex(),
                             "carries no valid signature"),
        "junk.hex": ("d90102", "not a signed transaction"),
        "junk.json": ('{"type": "Tx"}', "TextEnvelope with cborHex"),
    }  # fmt: skip
    for name, (text, said) in refusals.items():
        (tmp_path / name).write_text(text)
        code, error = run_json(env, "job", "lock", job, name, cwd=tmp_path)
        assert code == 1 and said in error["message"], (name, error)
    assert balance(devnet, funded.address) == start
    code, status = run_json(env, "job", "status", job, cwd=tmp_path)
    assert code == 0 and status["state"] == "quoted" and status["escrow"] is None

    (tmp_path / "lock.signed").write_text(signed(unsigned, wallet_key).to_cbor_hex())
    code, locked = run_json(env, "job", "lock", job, "lock.signed", cwd=tmp_path)
    assert code == 0, locked
    assert locked["escrow"] == f"{unsigned.id.payload.hex()}#0"
    escrow = utxo_at(devnet.context(), parse_out_ref(locked["escrow"]))
    assert escrow is not None
    allowance, deposit = quote["fee_allowance"], quote["refund_deposit"]
    assert escrow.output.amount.coin == LOCKED + allowance + deposit == quote["lock_lovelace"]
    fee = await tx_fee(devnet, unsigned.id.payload.hex(), since)
    assert fee == unsigned.transaction_body.fee
    assert balance(devnet, funded.address) == start - fee - LOCKED - allowance - deposit
    code, status = run_json(env, "job", "status", job, cwd=tmp_path)
    assert code == 0 and status["escrow"] == locked["escrow"]
    assert status["state"] not in ("requested", "quoted"), status


def unsigned_payment(key: PaymentSigningKey) -> Transaction:
    """A payment from `key`'s address, as a builder leaves it before signing."""
    address = Address(key.to_verification_key().hash(), network=Network.TESTNET)
    body = TransactionBody(
        inputs=[TransactionInput.from_primitive([bytes(32).hex(), 0])],
        outputs=[TransactionOutput(address, 5_000_000)], fee=170_000,
    )  # fmt: skip
    return Transaction(body, TransactionWitnessSet())


def test_every_form_a_wallet_hands_back_is_the_same_signed_lock():
    """Hex, TextEnvelope and a bare witness set merged into the unsigned lock: one transaction,
    byte for byte, with the unsigned lock's body (so its id) unchanged."""
    key = PaymentSigningKey.generate()
    unsigned = unsigned_payment(key)
    whole = signed(unsigned, key)
    forms = [whole.to_cbor_hex(), text_envelope(whole), witness_set(unsigned, key).to_cbor_hex()]
    for text in forms:
        tx = signed_tx(signed_cbor(text + "\n"), unsigned.to_cbor_hex())
        assert tx.to_cbor() == whole.to_cbor() and tx.id == unsigned.id
