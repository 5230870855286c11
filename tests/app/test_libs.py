"""The pages' JavaScript modules in Chromium, against pycardano and the protocol library: the
CBOR decoder and the transaction view read what pycardano builds (inputs, outputs with their
addresses in bech32, lovelace past 2^53 as BigInt, datums, tokens, fee, and what a plain
payment never carries: mint, withdrawals, certificates); the comparison with a quote names
each difference; a receipt's payload built in JS is the protocol's bytes, and WebCrypto
verifies the provider's Ed25519 signature over it; CIP-30 errors read as plain words."""

from __future__ import annotations

import hashlib

from pycardano import (
    Address,
    Asset,
    AssetName,
    MultiAsset,
    Network,
    PaymentSigningKey,
    PlutusV3Script,
    ScriptHash,
    StakeCredential,
    StakeRegistration,
    StakeSigningKey,
    TransactionBody,
    TransactionId,
    TransactionInput,
    TransactionOutput,
    Value,
    Withdrawals,
)

from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.payloads import receipt_payload

SCRIPT = PlutusV3Script(b"\x01\x02\x03")
ESCROW = ScriptHash(bytes.fromhex("11" * 28))
HUGE = 2**60 + 1  # past Number.MAX_SAFE_INTEGER: only a BigInt holds it


def keys() -> tuple[Address, Address]:
    payment = PaymentSigningKey.generate().to_verification_key().hash()
    stake = StakeSigningKey.generate().to_verification_key().hash()
    return Address(payment, network=Network.TESTNET), Address(payment, stake, Network.TESTNET)


def body(**extra) -> TransactionBody:
    mine, staked = keys()
    escrow = Address(ESCROW, staked.staking_part, Network.TESTNET)
    policy = ScriptHash(bytes.fromhex("22" * 28))
    tokens = MultiAsset({policy: Asset({AssetName(b"tok"): 5})})
    outputs = [
        TransactionOutput(escrow, 7_000_000, datum=b"\x01"),
        TransactionOutput(staked, Value(HUGE, tokens)),
        TransactionOutput(mine, 2_000_000),
    ]
    inputs = [TransactionInput(TransactionId(bytes([i]) * 32), i) for i in range(2)]
    return TransactionBody(inputs=inputs, outputs=outputs, fee=171_717, **extra)


async def view(libs, cbor_hex: str) -> dict:
    return await libs.evaluate(
        """async (hex) => {
          const { view } = await import("/txview.js");
          const tx = view(hex);
          return { ...tx, fee: tx.fee.toString(),
                   outputs: tx.outputs.map((o) => ({ ...o, lovelace: o.lovelace.toString() })) };
        }""",
        cbor_hex,
    )


async def test_a_pycardano_transaction_read_in_the_browser(libs):
    made = body()
    tx = await view(libs, made.to_cbor_hex())
    assert tx["inputs"] == [f"{i.transaction_id.payload.hex()}#{i.index}" for i in made.inputs]
    assert tx["fee"] == "171717" and tx["extras"] == []
    assert [(o["address"], int(o["lovelace"]), o["assets"], o["datum"]) for o in tx["outputs"]] == [
        (str(made.outputs[0].address), 7_000_000, False, "inline"),
        (str(made.outputs[1].address), HUGE, True, None),
        (str(made.outputs[2].address), 2_000_000, False, None),
    ]
    assert tx["outputs"][0]["scriptHash"] == ESCROW.payload.hex()
    assert [o["scriptHash"] for o in tx["outputs"][1:]] == [None, None]

    # what a plain lock never carries is named
    credential = StakeCredential(StakeSigningKey.generate().to_verification_key().hash())
    reward = Address(staking_part=credential.credential, network=Network.TESTNET)
    policy = ScriptHash(bytes.fromhex("33" * 28))
    extra = body(
        mint=MultiAsset({policy: Asset({AssetName(b"x"): 1})}),
        withdraws=Withdrawals({bytes(reward): 5}),
        certificates=[StakeRegistration(credential)],
    )
    assert (await view(libs, extra.to_cbor_hex()))["extras"] == [
        "certificates", "withdrawals", "mint",
    ]  # fmt: skip
    assert str(reward).startswith("stake_test1")
    assert await libs.evaluate(
        """async (hex) => (await import("/bech32.js")).address(
             (await import("/cbor.js")).hexToBytes(hex))""",
        bytes(reward).hex(),
    ) == str(reward)


async def compare(
    libs, made: TransactionBody, lovelace: int | None, own: list[Address], name: str = "escrow"
) -> list[str]:
    return await libs.evaluate(
        """async ([hex, escrow, lovelace, own, name]) => {
          const { view, compare } = await import("/txview.js");
          return compare(view(hex), { escrowHash: escrow, lovelace, name }, own);
        }""",
        [made.to_cbor_hex(), ESCROW.payload.hex(), None if lovelace is None else str(lovelace),
         [bytes(a).hex() for a in own], name],
    )  # fmt: skip


async def test_the_lock_compared_with_its_quote(libs):
    made = body()
    own = [made.outputs[1].address, made.outputs[2].address]
    assert await compare(libs, made, 7_000_000, own) == ["an output to "
        f"{made.outputs[1].address} carries tokens"]  # fmt: skip
    made.outputs[1] = TransactionOutput(made.outputs[1].address, 3_000_000)
    assert await compare(libs, made, 7_000_000, own) == []
    assert await compare(libs, made, 7_500_000, [own[0]]) == [
        "the escrow gets 7.000000 ADA, the quote says 7.500000 ADA",
        f"2.000000 ADA goes to {made.outputs[2].address}, not your wallet",
    ]
    made.outputs.append(TransactionOutput(made.outputs[0].address, 1_000_000))
    assert await compare(libs, made, 7_000_000, own) == ["it pays the escrow 2 times, not once"]


async def test_a_channel_transaction_compared_with_what_the_page_asked(libs):
    made = body()
    own = [made.outputs[1].address, made.outputs[2].address]
    made.outputs[1] = TransactionOutput(made.outputs[1].address, 3_000_000)
    assert await compare(libs, made, 7_000_000, own, "channel") == []
    assert await compare(libs, made, 9_000_000, own, "channel") == [
        "the channel gets 7.000000 ADA, the quote says 9.000000 ADA"
    ]
    # a drain pays only the wallet: an output left in the channel script is named
    assert await compare(libs, made, None, own, "channel") == ["it pays into the channel"]


async def test_a_receipt_checked_with_webcrypto(libs):
    key = PaymentSigningKey.generate()
    escrow = TransactionInput(TransactionId(hashlib.sha256(b"lock").digest()), 1)
    result, evidence = hashlib.sha256(b"result").digest(), hashlib.sha256(b"metering").digest()
    settle = ScriptHash(bytes.fromhex("44" * 28))
    receipt = Receipt.sign(key, 0, settle, escrow, 4242, result, evidence)
    expected = receipt_payload(0, settle, escrow, 4242, result, evidence)
    body = receipt.body()
    checked = await libs.evaluate(
        """async ([settle, ref, receipt, vkey]) => {
          const { payload, verifies } = await import("/receipt.js");
          const { bytesToHex } = await import("/cbor.js");
          const signed = await payload(0, settle, ref, receipt);
          const forged = await payload(0, settle, ref, { ...receipt, units: receipt.units + 1 });
          return { hex: bytesToHex(signed), good: await verifies(vkey, receipt.signature, signed),
                   forged: await verifies(vkey, receipt.signature, forged) };
        }""",
        [settle.payload.hex(), f"{escrow.transaction_id.payload.hex()}#1", body,
         key.to_verification_key().payload.hex()],
    )  # fmt: skip
    assert checked == {"hex": expected.hex(), "good": True, "forged": False}


async def test_cip30_errors_in_plain_words(libs):
    said = await libs.evaluate(
        """async () => {
          const { plainly } = await import("/wallet.js");
          return [plainly({ code: 2, info: "user declined" }, "sign"),
                  plainly({ code: 3, info: "user declined" }, "data"),
                  plainly({ code: -3, info: "no" }, "api"),
                  plainly(new Error("boom"), "sign")];
        }"""
    )
    assert said == [
        "You declined to sign (user declined).",
        "You declined to sign (user declined).",
        "The wallet refused the connection (no).",
        "The wallet failed: boom",
    ]
