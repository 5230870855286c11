"""One job from signed request to completed, over real HTTP, on the devnet: the consumer signs
the lock the market built with its own key and the market submits it (or the consumer does), a
scripted provider (test code holding a provider key) takes the assignment, accepts, logs,
uploads its result and hands in its receipt; the stored receipt then settles on chain exactly
as signed."""

from __future__ import annotations

import asyncio
import hashlib
import json

from pycardano import Transaction
from pycardano.cip import cip8

from offchain.chain.submit import submit_and_wait
from offchain.chain.utxo import format_out_ref
from offchain.protocol.api.wire import EscrowParameters
from offchain.protocol.job.receipt import Receipt
from offchain.protocol.ledger.addresses import to_plutus
from offchain.protocol.ledger.payloads import acceptance_payload, sign
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx import batch
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import Clock
from tests.market.client import Party
from tests.protocol.onchain import balance, confirm, output, wallet

GPU = "NVIDIA H100 80GB HBM3"
PRICE = 50_000  # lovelace per second of the bundle: 42 s pay more than a min-UTxO
UNITS = 42
SPEC = {
    "image": "python:3.11",
    "command": ["python", "-c", "print('hello')"],
    "resources": {"gpus": 1, "min_vram_mib": 40_000, "cpu_cores": 2, "memory_mib": 4096,
                  "disk_mib": 1024},
    "max_duration_s": 600,
    "max_price_lovelace": 40_000_000,
}  # fmt: skip


# the images the offers say their machines have: the specs' (an offer without them runs none)
IMAGES = [{"reference": SPEC["image"], "digest": "sha256:" + "5e" * 32}]


def offer_terms(provider: Party, **changes) -> dict:
    return {
        "payout_address": str(provider.wallet.address), "gpu_model": GPU, "gpu_count": 1,
        "vram_mib": 81_559, "cpu_cores": 16, "memory_mib": 131_072, "disk_mib": 512_000,
        "price_per_unit": PRICE, "images": IMAGES, **changes,
    }  # fmt: skip


def job_request(consumer: Party, **spec_changes) -> dict:
    return {"spec": {**SPEC, **spec_changes}, "consumer_address": str(consumer.wallet.address)}


async def test_a_job_from_request_to_completed_receipt(devnet, market_deployment, http, settings):
    deployment = market_deployment
    provider = Party.new(http, settings.identity, await wallet(devnet))
    consumer = Party.new(http, settings.identity, await wallet(devnet))

    offered = await provider.send("POST", "/offers", offer_terms(provider))
    assert offered.status_code == 201, offered.text
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    quote = quoted.json()
    job = quote["job_id"]
    assert quote["state"] == "quoted" and quote["gpu_model"] == GPU
    assert quote["price_per_unit"] == PRICE and quote["max_units"] == SPEC["max_duration_s"]
    # the provider's own signed words, which the consumer checks without trusting the market
    signed = quote["offer"]
    checked = cip8.verify({"signature": signed["signature"], "key": signed["key"]})
    assert checked["verified"] and checked["signing_address"].payment_part == (
        provider.wallet.key_hash
    )
    fields = json.loads(checked["message"])
    assert fields["body_sha256"] == hashlib.sha256(signed["body"].encode()).hexdigest()
    assert json.loads(signed["body"])["price_per_unit"] == PRICE

    params = (await consumer.send("GET", f"/jobs/{job}/escrow")).json()
    # the lock: the whole job, the settle fee's share and the return deposit of the refund
    renter = to_plutus(consumer.wallet.address)
    deposit = escrows.refund_deposit(devnet.context(), deployment, renter)
    assert quote["fee_allowance"] == settings.settle_fee_share
    assert quote["refund_deposit"] == deposit and params["lovelace"] == quote["lock_lovelace"]
    assert params["lovelace"] == PRICE * 600 + quote["fee_allowance"] + deposit
    datum = EscrowParameters.model_validate(params).to_datum()
    # the market builds the lock, the consumer's own wallet signs it, the market submits it
    context = devnet.context()
    built = (await consumer.send("GET", f"/jobs/{job}/lock")).json()
    unsigned = Transaction.from_cbor(bytes.fromhex(built["transaction"]))
    assert not unsigned.transaction_witness_set.vkey_witnesses  # the market holds no key
    assert built["lovelace"] == params["lovelace"] and built["tx_id"] == unsigned.id.payload.hex()
    lock = consumer.wallet.sign(unsigned)
    ref = format_out_ref(escrows.lock_escrow(lock.id))
    submitted = await consumer.send(
        "POST", f"/jobs/{job}/lock", {"transaction": lock.to_cbor_hex()}
    )
    assert submitted.json() == {"tx_id": lock.id.payload.hex(), "escrow": ref}, submitted.text
    escrow = output(lock, escrows.ESCROW_OUTPUT)
    assert (await report_escrow(consumer, job, ref))["state"] == "funded"

    # the scripted provider
    assigned = await provider.send("GET", "/providers/assignments?timeout_s=5")
    assert [a["job_id"] for a in assigned.json()] == [job]
    assert (
        assigned.json()[0]["escrow"] == ref and assigned.json()[0]["spec"]["image"] == "python:3.11"
    )
    payload = acceptance_payload(
        deployment.network_id, deployment.escrow_hash, escrow.input,
        bytes.fromhex(params["job_id"]), deployment.bond_hash,
    )  # fmt: skip
    body = {"signature": sign(provider.wallet.key, payload).hex()}
    accepted = await provider.send("POST", f"/jobs/{job}/acceptance", body)
    assert accepted.json()["state"] == "accepted", accepted.text
    assert (await provider.send("POST", f"/jobs/{job}/start")).json()["state"] == "running"
    logged = await provider.send("POST", f"/jobs/{job}/logs", {"lines": ["hello", "done"]})
    assert logged.json() == {"next_seq": 2}
    too_big = await provider.send("PUT", f"/jobs/{job}/result", raw=b"x" * (1 + (1 << 20)))
    assert too_big.status_code == 413, too_big.text
    archive = b"result archive bytes " * 1000
    result_hash = hashlib.sha256(archive).hexdigest()
    uploaded = await provider.send("PUT", f"/jobs/{job}/result", raw=archive)
    assert uploaded.json()["result_sha256"] == result_hash, uploaded.text
    evidence = hashlib.sha256(b"metering").digest()
    receipt = Receipt.sign(
        provider.wallet.key, deployment.network_id, deployment.settle_hash, escrow.input, UNITS,
        bytes.fromhex(result_hash), evidence,
    ).body()  # fmt: skip
    forged = {**receipt, "signature": sign(consumer.wallet.key, b"not it").hex()}
    refused = await provider.send("POST", f"/jobs/{job}/receipt", forged)
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["signature"]
    # how the run ended rides beside the signed fields (the provider's word): a value it does
    # not know is a 422 naming the field, and the job stays running
    for bad, field in [({"outcome": "crashed"}, "outcome"), ({"outcome": 3}, "outcome"),
                       ({"exit_code": 1 << 40}, "exit_code")]:  # fmt: skip
        bad_answer = await provider.send("POST", f"/jobs/{job}/receipt", receipt | bad)
        assert bad_answer.status_code == 422, bad_answer.text
        assert [p["loc"] for p in bad_answer.json()["detail"]] == [["body", field]], bad_answer.text
    assert (await consumer.send("GET", f"/jobs/{job}")).json()["state"] == "running"
    timed_out = receipt | {"outcome": "timeout", "exit_code": 137}
    completed = await provider.send("POST", f"/jobs/{job}/receipt", timed_out)
    assert completed.json()["state"] == "completed", completed.text

    # what the consumer sees: completed (it is billed), and how the run ended beside it
    status = (await consumer.send("GET", f"/jobs/{job}")).json()
    assert status["receipt_units"] == UNITS and status["escrow"] == ref
    assert (status["outcome"], status["exit_code"]) == ("timeout", 137)
    assert (await consumer.send("GET", "/jobs")).json()[0]["outcome"] == "timeout"
    lines = (await consumer.send("GET", f"/jobs/{job}/logs")).json()
    assert [line["text"] for line in lines] == ["hello", "done"]
    tail = (await consumer.send("GET", f"/jobs/{job}/logs?tail=1")).json()
    assert [(line["seq"], line["text"]) for line in tail] == [(1, "done")]
    no_tail = await consumer.send("GET", f"/jobs/{job}/logs?tail=0")
    assert no_tail.status_code == 422 and no_tail.json()["detail"][0]["loc"] == ["query", "tail"]
    downloaded = await consumer.send("GET", f"/jobs/{job}/result")
    assert hashlib.sha256(downloaded.content).hexdigest() == result_hash
    events = await events_until(consumer, job, "completed")
    assert events == ["requested", "quoted", "funded", "accepted", "running", "completed"]

    # the escrow on chain holds exactly the quote, and the stored receipt settles it
    on_chain = context.utxo_by_tx_id(lock.id.payload.hex(), escrows.ESCROW_OUTPUT)
    assert escrows.escrow_datum(deployment, on_chain) == datum
    assert on_chain.output.amount.coin == params["lovelace"]
    assert datum.deadline > Clock.now(context).tip_ms
    submitter = await wallet(devnet)
    stored = Receipt(
        escrow.input, status["receipt_units"], bytes.fromhex(result_hash), evidence,
        bytes.fromhex(receipt["signature"]),
    )  # fmt: skip
    before = balance(devnet, provider.wallet.address)
    settled = batch.settle(context, deployment, [(escrow, stored)], submitter.address)
    await confirm(devnet, submitter.sign(settled))
    split = settle_split(params["lovelace"], PRICE, UNITS, 600, params["fee_allowance"])
    assert balance(devnet, provider.wallet.address) == before + split.provider


async def report_escrow(consumer: Party, job: str, ref: str, timeout_s: float = 60) -> dict:
    """The job once the market has checked its escrow on chain (409 until it lands)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while True:
        reported = await consumer.send("POST", f"/jobs/{job}/escrow", {"escrow": ref})
        if reported.status_code != 409 or loop.time() > until:
            assert reported.status_code == 200, reported.text
            return reported.json()
        await asyncio.sleep(0.2)


async def test_the_market_takes_back_only_the_lock_it_built_signed_by_the_consumer(
    devnet, market_deployment, http, settings
):
    provider = Party.new(http, settings.identity)
    assert (await provider.send("POST", "/offers", offer_terms(provider))).status_code == 201
    consumer = Party.new(http, settings.identity, await wallet(devnet))
    stranger = Party.new(http, settings.identity, await wallet(devnet))
    job = (await consumer.send("POST", "/jobs", job_request(consumer))).json()["job_id"]
    path = f"/jobs/{job}/lock"

    def refused(answer, status: int, says: str) -> None:
        assert answer.status_code == status, answer.text
        (problem,) = answer.json()["detail"]
        assert problem["loc"] == ["transaction"] and says in problem["msg"], problem

    refused(await consumer.send("POST", path, {"transaction": "00"}), 409, "no lock was built")
    assert (await stranger.send("GET", path)).status_code == 403
    built = (await consumer.send("GET", path)).json()
    unsigned = Transaction.from_cbor(bytes.fromhex(built["transaction"]))
    datum = escrows.escrow_datum(market_deployment, output(unsigned, escrows.ESCROW_OUTPUT))
    more = built["lovelace"] + 1
    other = escrows.lock(devnet.context(), market_deployment, consumer.wallet.address, datum, more)
    for tx, status, says in [
        (consumer.wallet.sign(other), 422, "not the lock built"),
        (unsigned, 422, "not signed by the consumer's payment key"),
        (stranger.wallet.sign(unsigned), 422, "not signed by the consumer's payment key"),
    ]:
        refused(await consumer.send("POST", path, {"transaction": tx.to_cbor_hex()}), status, says)
    refused(await consumer.send("POST", path, {"transaction": "00ff"}), 422, "not a transaction")
    assert (await stranger.send("POST", path, {"transaction": "00"})).status_code == 403

    # the consumer may submit the lock itself, and report the escrow
    lock = consumer.wallet.sign(unsigned)
    await submit_and_wait(devnet.url, lock, timeout_s=30)
    ref = format_out_ref(escrows.lock_escrow(lock.id))
    assert (await report_escrow(consumer, job, ref))["state"] == "funded"
    again = await consumer.send("POST", path, {"transaction": lock.to_cbor_hex()})
    assert again.status_code == 409 and again.json()["detail"][0]["loc"] == ["state"]


async def events_until(party: Party, job: str, last: str) -> list[str]:
    """The states the job's SSE stream names, read until `last` (the stream stays open)."""
    path = f"/jobs/{job}/events"
    states: list[str] = []
    headers = party.headers("GET", path)
    async with party.http.stream("GET", path, headers=headers) as stream:
        assert stream.status_code == 200
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                states.append(json.loads(line.removeprefix("data: "))["to_state"])
                if states[-1] == last:
                    break
    return states
