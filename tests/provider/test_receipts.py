"""Receipts and acceptances from the provider key. A real container run's metering record,
signed as a receipt, settles a real escrow on the devnet (balances to the lovelace); the same
receipt tampered with is refused by the escrow validator itself; an acceptance backs a slash."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json

import pytest
from pycardano import PaymentSigningKey
from typer.testing import CliRunner

from offchain.devnet.genesis import ADA
from offchain.protocol import bond as bonds
from offchain.protocol.escrow import SignedReceipt, escrow_datum, settle
from offchain.protocol.metering import MeteringRecord
from offchain.protocol.payloads import acceptance_payload, verify
from offchain.protocol.split import refund_amount, settle_split, slash_share
from offchain.protocol.txbuild import BuildError, Wallet, out_ref
from offchain.protocol.types import PayoutKind, SettleItem
from provider.config import RunnerSettings
from provider.keys import ensure_key, load_key
from provider.receipts import NO_OUTPUT_HASH, ReceiptError, accept, receipt_fields, receipt_for
from provider.runner import Runner, RunResult
from provider.selftest import job
from tests.protocol import onchain
from tests.protocol.onchain import (
    SCRIPT_FAILED,
    balance,
    confirm,
    rejected,
    settle_by_hand,
    tagged,
    travel_to,
    wallet,
)
from tests.provider.chain import SLASH_SHARE_BPS, deployed, fund
from tests.provider.conftest import assert_no_leftovers
from unchained.cli import app

PRICE = ADA  # lovelace per unit: every payout is above the min-UTxO, so balances are exact
MAX_UNITS = 60
ALLOWANCE = 2 * ADA
LOCKED = PRICE * MAX_UNITS + ALLOWANCE + 3 * ADA

cli = CliRunner()


@pytest.fixture(scope="module")
def deployment_path(tmp_path_factory):
    return tmp_path_factory.mktemp("deployment") / "deployment.json"


@pytest.fixture(scope="module")
async def deployment(devnet, deployment_path):
    return await deployed(devnet, deployment_path)


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> PaymentSigningKey:
    """The provider's key, made as `provider init` makes it."""
    return ensure_key(tmp_path_factory.mktemp("provider"))[0]


@pytest.fixture(scope="module")
def run(client, busybox, tmp_path_factory) -> RunResult:
    """One job run by the provider's runner: its record and archive are what receipts claim."""
    runner = Runner(client, RunnerSettings(state_dir=tmp_path_factory.mktemp("state")))
    spec = job(busybox, ["sh", "-c", "echo weights > /out/model; sleep 1"], seconds=MAX_UNITS)
    result = runner.run("receipt_job", spec)
    assert_no_leftovers(runner)
    assert result.status == "succeeded" and result.record.billable_units >= 2  # slept 1 s
    return result


async def lock(devnet, deployment, consumer: Wallet, key: PaymentSigningKey, **changes):
    terms = {"price_per_unit": PRICE, "max_units": MAX_UNITS, "fee_allowance": ALLOWANCE}
    return await onchain.lock(
        devnet, deployment, consumer, Wallet.of(key), LOCKED, **{**terms, **changes}
    )


async def test_a_receipt_of_a_real_run_settles_a_real_escrow_to_the_lovelace(
    devnet, deployment, key, run
):
    consumer, market = await wallet(devnet), await wallet(devnet)
    provider = Wallet.of(key)
    escrow = await lock(devnet, deployment, consumer, key)

    receipt = receipt_for(run, escrow, deployment, key)

    assert receipt.escrow == escrow and receipt.units == run.record.billable_units
    archive = run.output.path.read_bytes()
    assert receipt.result_hash == hashlib.sha256(archive).digest()
    assert receipt.evidence_hash == hashlib.sha256(run.record.canonical_json()).digest()
    parties = (consumer.address, provider.address, market.address)
    before = [balance(devnet, a) for a in parties]
    tx = await confirm(devnet, settle(devnet.context(), deployment, [receipt], market))
    split = settle_split(LOCKED, PRICE, receipt.units, MAX_UNITS, ALLOWANCE)
    after = [balance(devnet, a) for a in parties]
    fee = tx.transaction_body.fee
    assert before[1] == 0 and after[1] == split.provider == receipt.units * PRICE
    assert [a - b for a, b in zip(after, before, strict=True)] == [
        split.consumer,
        split.provider,
        split.fee - fee,
    ]


async def test_a_tampered_receipt_is_refused_by_the_validator(devnet, deployment, key, run):
    consumer, market = await wallet(devnet), await wallet(devnet)
    provider = Wallet.of(key)
    escrow = await lock(devnet, deployment, consumer, key)
    receipt = receipt_for(run, escrow, deployment, key)
    other = hashlib.sha256(b"another result").digest()
    for tampered in (
        dataclasses.replace(receipt, units=receipt.units + 1),
        dataclasses.replace(receipt, result_hash=other),
        dataclasses.replace(receipt, evidence_hash=other),
    ):
        with pytest.raises(BuildError, match="not signed by the escrow's provider key"):
            settle(devnet.context(), deployment, [tampered], market)  # the builder checks first
        # built by hand past that check, paying exactly what the tampered claim is worth
        split = settle_split(LOCKED, PRICE, tampered.units, MAX_UNITS, ALLOWANCE)
        outputs = [
            tagged(provider.address, split.provider, PayoutKind.SETTLE, escrow),
            tagged(consumer.address, split.consumer, PayoutKind.SETTLE, escrow),
        ]
        item = SettleItem(
            tampered.units, tampered.result_hash, tampered.evidence_hash, tampered.signature, 0, 1
        )
        attack = settle_by_hand(devnet, deployment, market, [(escrow, item)], outputs)
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: receipt signature")
    await confirm(devnet, settle(devnet.context(), deployment, [receipt], market))


async def test_a_receipt_claims_no_more_than_the_escrow_pays_and_only_for_its_provider(
    devnet, deployment, key, run
):
    consumer = await wallet(devnet)
    short = await lock(devnet, deployment, consumer, key, max_units=1)
    assert receipt_for(run, short, deployment, key).units == 1  # the run billed more
    stranger = PaymentSigningKey.generate()
    with pytest.raises(ReceiptError, match="not this provider's"):
        receipt_for(run, short, deployment, stranger)
    with pytest.raises(ReceiptError, match="not this provider's"):
        accept(deployment, short, stranger)
    with pytest.raises(ReceiptError, match="is not at this deployment's escrow script"):
        accept(deployment, deployment.bond_ref, key)


def test_receipt_fields_of_runs_without_an_archive_or_that_never_started(run):
    fields = receipt_fields(run.model_copy(update={"output": None}))
    assert fields.result_hash == NO_OUTPUT_HASH == hashlib.sha256(b"").digest()
    assert fields.units == run.record.billable_units
    never = RunResult(job_id="never", status="error", error="image missing")
    with pytest.raises(ReceiptError, match="never started \\(image missing\\): nothing to bill"):
        receipt_fields(never)


async def test_an_acceptance_backs_a_slash_of_the_providers_bond(devnet, deployment, key):
    consumer, anyone = await wallet(devnet), await wallet(devnet)
    provider = Wallet.of(key)
    await fund(devnet, provider.address, 200 * ADA)
    bond = await onchain.post_bond(devnet, deployment, provider, 100 * ADA)
    escrow = await lock(devnet, deployment, consumer, key)

    signature = accept(deployment, escrow, key)

    job_id = escrow_datum(deployment, escrow).job_id
    payload = acceptance_payload(0, deployment.escrow_hash, escrow.input, job_id)
    assert verify(provider.vkey, payload, signature)
    await travel_to(devnet, escrow_datum(deployment, escrow).close + 1)
    before = balance(devnet, consumer.address)
    await confirm(
        devnet, bonds.slash(devnet.context(), deployment, escrow, bond, signature, anyone)
    )
    share = slash_share(100 * ADA, SLASH_SHARE_BPS)
    assert balance(devnet, consumer.address) - before == refund_amount(LOCKED, ALLOWANCE) + share


def printed_receipt(stderr: str) -> dict:
    """The signed receipt `exec` prints after the bill: the JSON after its heading."""
    heading = stderr.index("receipt for escrow")
    return json.loads(stderr[stderr.index("{", heading) :])


async def test_exec_prints_the_receipt_signed_for_the_escrow_given_and_it_settles(
    devnet, deployment, deployment_path, busybox, tmp_path
):
    config, state = tmp_path / "provider.toml", tmp_path / "state"
    assert cli.invoke(app, ["provider", "init", "--config", str(config),
                            "--state-dir", str(state)]).exit_code == 0  # fmt: skip
    key = load_key(state)
    consumer, market = await wallet(devnet), await wallet(devnet)
    spec = tmp_path / "job.yaml"
    command = ["sh", "-c", "echo 42 > /out/a; sleep 1"]  # >1 unit: pays above the min-UTxO
    fields = {"max_duration_s": MAX_UNITS, "max_price_lovelace": ADA}
    spec.write_text(json.dumps({"image": busybox, "command": command, **fields}))

    async def exec_job(*args: str):
        command = ["provider", "exec", str(spec), "--config", str(config), *args,
                   "--ogmios-url", devnet.url, "--deployment", str(deployment_path)]  # fmt: skip
        return await asyncio.to_thread(cli.invoke, app, command)

    unsigned = await exec_job()
    assert unsigned.exit_code == 0, unsigned.output
    assert "receipt (unsigned: a receipt is signed for one escrow; pass --escrow" in (
        unsigned.stderr
    )
    short = await lock(devnet, deployment, consumer, key, max_units=MAX_UNITS - 1)
    refused = await exec_job("--escrow", out_ref(short), "--job-id", "too_long")
    assert refused.exit_code == 2
    assert f"pays at most {MAX_UNITS - 1} units; the job may bill up to {MAX_UNITS}" in (
        refused.stderr
    )
    assert not (state / "results" / "too_long").exists()  # refused before it ran

    escrow = await lock(devnet, deployment, consumer, key)
    result = await exec_job("--escrow", out_ref(escrow))
    assert result.exit_code == 0, result.output
    record = MeteringRecord.model_validate_json(result.stdout)
    printed = printed_receipt(result.stderr)
    assert printed["escrow"] == out_ref(escrow) and printed["units"] == record.billable_units
    assert printed["evidence_hash"] == record.digest()
    assert printed["escrow_hash"] == deployment.escrow_hash.payload.hex()
    receipt = SignedReceipt(
        escrow,
        printed["units"],
        bytes.fromhex(printed["result_hash"]),
        bytes.fromhex(printed["evidence_hash"]),
        bytes.fromhex(printed["signature"]),
    )
    await confirm(devnet, settle(devnet.context(), deployment, [receipt], market))
    assert balance(devnet, Wallet.of(key).address) == record.billable_units * PRICE
