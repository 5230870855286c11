"""Receipts and acceptances from the provider key. A real container run's metering record,
signed as a receipt, settles a real escrow on the devnet (balances to the lovelace); the same
receipt tampered with is refused by the escrow validator itself; an acceptance backs a slash.
Neither is signed for an escrow that fails the escrow check: a receipt up to the close, an
acceptance only while there is room to run the job and settle."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json

import pytest
from pycardano import Network, PaymentSigningKey, TransactionOutput
from typer.testing import CliRunner

from devnet.genesis import ADA
from offchain.protocol.checks.escrow_check import EscrowRefused
from offchain.protocol.checks.refusal import Refusal
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.metering import MeteringRecord
from offchain.protocol.job.receipt import EMPTY_HASH, Receipt
from offchain.protocol.ledger.claim import Claim
from offchain.protocol.ledger.payloads import acceptance_payload, verify
from offchain.protocol.ledger.split import refund_amount, settle_split, slash_share
from offchain.protocol.ledger.types import SettleReceipt
from offchain.protocol.tx import bond as bonds
from offchain.protocol.tx.batch import settle
from offchain.protocol.tx.escrow import escrow_datum
from offchain.protocol.tx.txbuild import BuildError, Clock, Wallet, out_ref
from provider.config import RunnerSettings
from provider.keys import ensure_key, load_key
from provider.money.receipts import (
    EscrowJob,
    ReceiptError,
    accept,
    receipt_fields,
    receipt_for,
)
from provider.sandbox.runner import Runner, RunResult
from provider.selftest.checks import job
from tests.protocol import onchain
from tests.protocol.evidence import SigningSpy
from tests.protocol.onchain import (
    SCRIPT_FAILED,
    balance,
    confirm,
    fund,
    rejected,
    settle_by_hand,
    travel_to,
    wallet,
)
from tests.provider.chain import SLASH_SHARE_BPS
from tests.provider.conftest import assert_no_leftovers
from unchained.cli import app

PRICE = ADA  # lovelace per unit: every payout is above the min-UTxO, so balances are exact
MAX_UNITS = 60
ALLOWANCE = 2 * ADA
LOCKED = PRICE * MAX_UNITS + ALLOWANCE + 3 * ADA
DEADLINE_MS, WINDOW_MS = 10 * 60_000, 5 * 60_000  # room to start, run and settle a job

cli = CliRunner()


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> PaymentSigningKey:
    """The provider's key, made as `provider init` makes it."""
    return ensure_key(tmp_path_factory.mktemp("provider"))[0]


@pytest.fixture(scope="module")
def spec(busybox) -> JobSpec:
    # 2 s: the engine stamps StartedAt once its start call returns, so on a loaded machine a
    # job's measured wall time is short by that lag (in the renter's favour), and 1 s of sleep
    # was once metered as 1 unit
    return job(busybox, ["sh", "-c", "echo weights > /out/model; sleep 2"], seconds=MAX_UNITS)


@pytest.fixture(scope="module")
def run(client, spec, tmp_path_factory) -> RunResult:
    """One job run by the provider's runner: its record and archive are what receipts claim."""
    runner = Runner(client, RunnerSettings(state_dir=tmp_path_factory.mktemp("state")))
    result = runner.run("receipt_job", spec)
    assert_no_leftovers(runner)
    assert result.status == "succeeded" and result.record.billable_units >= 2  # slept 2 s
    return result


async def lock(devnet, deployment, consumer: Wallet, key: PaymentSigningKey, spec, **changes):
    """An escrow for `spec` at PRICE, paying its whole max duration, with room to run it."""
    now = Clock.now(devnet.context()).tip_ms
    terms = dict(
        price_per_unit=PRICE, max_units=MAX_UNITS, fee_allowance=ALLOWANCE,
        deadline=now + DEADLINE_MS, settle_window=WINDOW_MS, job_id=spec.job_id(),
    )  # fmt: skip
    return await onchain.lock(
        devnet,
        deployment,
        consumer,
        Wallet.of(key, Network.TESTNET),
        LOCKED,
        **{**terms, **changes},
    )


def escrow_job(devnet, deployment, escrow, spec, key: PaymentSigningKey) -> EscrowJob:
    payout = Wallet.of(key, deployment.network).address
    return EscrowJob(devnet.context(), deployment, escrow, spec, PRICE, key, payout)


async def test_a_receipt_of_a_real_run_settles_a_real_escrow_to_the_lovelace(
    devnet, deployment, key, spec, run
):
    consumer, market = await wallet(devnet), await wallet(devnet)
    provider = Wallet.of(key, Network.TESTNET)
    escrow = await lock(devnet, deployment, consumer, key, spec)

    receipt = receipt_for(escrow_job(devnet, deployment, escrow, spec, key), run)

    assert receipt.escrow == escrow.input and receipt.units == run.record.billable_units
    archive = run.output.path.read_bytes()
    assert receipt.result_hash == hashlib.sha256(archive).digest()
    assert receipt.evidence_hash == hashlib.sha256(run.record.canonical_json()).digest()
    parties = (consumer.address, provider.address, market.address)
    before = [balance(devnet, a) for a in parties]
    settled = settle(devnet.context(), deployment, [(escrow, receipt)], market.address)
    tx = await confirm(devnet, market.sign(settled))
    split = settle_split(LOCKED, PRICE, receipt.units, MAX_UNITS, ALLOWANCE)
    after = [balance(devnet, a) for a in parties]
    fee = tx.transaction_body.fee
    assert before[1] == 0 and after[1] == split.provider == receipt.units * PRICE
    assert [a - b for a, b in zip(after, before, strict=True)] == [
        split.consumer,
        split.provider,
        split.fee - fee,
    ]


async def test_a_tampered_receipt_is_refused_by_the_validator(devnet, deployment, key, spec, run):
    consumer, market = await wallet(devnet), await wallet(devnet)
    provider = Wallet.of(key, Network.TESTNET)
    escrow = await lock(devnet, deployment, consumer, key, spec)
    receipt = receipt_for(escrow_job(devnet, deployment, escrow, spec, key), run)
    other = hashlib.sha256(b"another result").digest()
    for tampered in (
        dataclasses.replace(receipt, units=receipt.units + 1),
        dataclasses.replace(receipt, result_hash=other),
        dataclasses.replace(receipt, evidence_hash=other),
    ):
        signed = "is not signed by its provider key"  # checked first
        with pytest.raises(BuildError, match=signed):
            settle(devnet.context(), deployment, [(escrow, tampered)], market.address)
        # built by hand past that check, paying exactly what the tampered claim is worth
        split = settle_split(LOCKED, PRICE, tampered.units, MAX_UNITS, ALLOWANCE)
        outputs = [
            TransactionOutput(provider.address, split.provider),
            TransactionOutput(consumer.address, split.consumer),
        ]
        claim = Claim.of_receipt(tampered)
        alone = SettleReceipt(claim.note, claim.signature)  # signed by its own receipt: -1
        items = [tampered.units, -1, 0]
        attack = settle_by_hand(
            devnet, deployment, market, [escrow], items, outputs, 1, receipts=[alone]
        )
        await rejected(devnet, attack, SCRIPT_FAILED, "withdraw#0", "traces: receipt signature")
    settled = settle(devnet.context(), deployment, [(escrow, receipt)], market.address)
    await confirm(devnet, market.sign(settled))


def refused(job: EscrowJob, reason: Refusal, sign) -> None:
    """`sign` (accept or receipt_for, given the job) refuses `job`'s escrow for `reason`,
    and its key signs nothing."""
    spy = SigningSpy(job.key)
    with pytest.raises(EscrowRefused) as refusal:
        sign(dataclasses.replace(job, key=spy.key))
    assert refusal.value.reason is reason, refusal.value
    assert spy.signed == []


async def test_a_receipt_claims_no_more_than_the_escrow_pays_and_only_for_its_provider(
    devnet, deployment, key, spec, run
):
    consumer = await wallet(devnet)
    escrow = await lock(devnet, deployment, consumer, key, spec)
    job = escrow_job(devnet, deployment, escrow, spec, key)
    overlong = run.record.model_copy(update={"billable_units": MAX_UNITS + 5})
    assert receipt_for(job, run.model_copy(update={"record": overlong})).units == MAX_UNITS
    short = await lock(devnet, deployment, consumer, key, spec, max_units=MAX_UNITS - 1)
    stranger = PaymentSigningKey.generate()
    cases = [
        (escrow_job(devnet, deployment, short, spec, key), Refusal.UNITS),
        (dataclasses.replace(job, key=stranger), Refusal.OTHER_KEY),
        (dataclasses.replace(job, escrow=deployment.bond_ref), Refusal.NOT_AT_SCRIPT),
        (dataclasses.replace(job, price_per_unit=PRICE - 1), Refusal.OTHER_PRICE),
    ]
    for refused_job, reason in cases:
        refused(refused_job, reason, lambda job: receipt_for(job, run))
        refused(refused_job, reason, lambda job: accept(job, None))


async def test_a_receipt_is_signed_until_the_close_an_acceptance_only_while_there_is_room(
    devnet, deployment, key, spec, run
):
    escrow = await lock(devnet, deployment, await wallet(devnet), key, spec)
    close = escrow_datum(deployment, escrow).close
    await travel_to(devnet, close - 60_000)  # the chain's clock: no room left to run the job
    job = escrow_job(devnet, deployment, escrow, spec, key)  # a fresh context: pycardano
    refused(job, Refusal.NO_TIME, lambda job: accept(job, None))  # caches the tip for 1 s
    assert receipt_for(job, run).units == run.record.billable_units
    await travel_to(devnet, close)
    job = escrow_job(devnet, deployment, escrow, spec, key)
    refused(job, Refusal.CLOSED, lambda job: receipt_for(job, run))


def test_receipt_fields_of_runs_without_an_archive_or_that_never_started(run):
    fields = receipt_fields(run.model_copy(update={"output": None}))
    assert fields.result_hash == EMPTY_HASH == hashlib.sha256(b"").digest()
    assert fields.units == run.record.billable_units
    never = RunResult(job_id="never", status="error", error="image missing")
    with pytest.raises(ReceiptError, match="never started \\(image missing\\): nothing to bill"):
        receipt_fields(never)


async def test_an_acceptance_backs_a_slash_of_the_providers_bond(devnet, deployment, key, spec):
    consumer, anyone = await wallet(devnet), await wallet(devnet)
    provider = Wallet.of(key, Network.TESTNET)
    await fund(devnet, provider.address, 200 * ADA)
    bond = await onchain.post_bond(devnet, deployment, provider, 100 * ADA)
    escrow = await lock(devnet, deployment, consumer, key, spec)

    signature = accept(escrow_job(devnet, deployment, escrow, spec, key), bond)

    payload = acceptance_payload(
        0, deployment.escrow_hash, escrow.input, spec.job_id(), deployment.bond_hash
    )
    assert verify(provider.vkey, payload, signature)
    # after the refund window anyone slashes for the consumer (within it, only the consumer)
    close = escrow_datum(deployment, escrow).close
    await travel_to(devnet, close + deployment.refund_window_ms + 1)
    before = balance(devnet, consumer.address)
    await confirm(
        devnet,
        anyone.sign(
            bonds.slash(devnet.context(), deployment, escrow, bond, signature, anyone.address)
        ),
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
    prices = ["--price-cpu-core", str(PRICE), "--price-memory-gib", "0", "--price-disk-gib", "0"]
    assert cli.invoke(app, ["provider", "init", "--config", str(config),
                            "--state-dir", str(state), *prices]).exit_code == 0  # fmt: skip
    key = load_key(state)
    consumer, market = await wallet(devnet), await wallet(devnet)
    spec = tmp_path / "job.yaml"
    command = ["sh", "-c", "echo 42 > /out/a; sleep 2"]  # >1 unit even when StartedAt lags
    fields = {"max_duration_s": MAX_UNITS, "max_price_lovelace": PRICE * MAX_UNITS}
    written = {"image": busybox, "command": command, **fields}
    spec.write_text(json.dumps(written))
    job_spec = JobSpec.model_validate(written)  # one core: PRICE per second of the bundle

    async def exec_job(*args: str):
        command = ["provider", "exec", str(spec), "--config", str(config), *args,
                   "--ogmios-url", devnet.url, "--deployment", str(deployment_path)]  # fmt: skip
        return await asyncio.to_thread(cli.invoke, app, command)

    unsigned = await exec_job()
    assert unsigned.exit_code == 0, unsigned.output
    assert "receipt (unsigned: a receipt is signed for one escrow; pass --escrow" in (
        unsigned.stderr
    )
    short = await lock(devnet, deployment, consumer, key, job_spec, max_units=MAX_UNITS - 1)
    too_long = await exec_job("--escrow", out_ref(short), "--job-id", "too_long")
    assert too_long.exit_code == 1
    assert f"escrow {out_ref(short)} refused: {Refusal.UNITS}: it pays at most " in (
        too_long.stderr
    )
    assert not (state / "results" / "too_long").exists()  # refused before it ran

    escrow = await lock(devnet, deployment, consumer, key, job_spec)
    result = await exec_job("--escrow", out_ref(escrow))
    assert result.exit_code == 0, result.output
    record = MeteringRecord.model_validate_json(result.stdout)
    printed = printed_receipt(result.stderr)
    assert printed["escrow"] == out_ref(escrow) and printed["units"] == record.billable_units
    assert printed["evidence_hash"] == record.digest()
    assert printed["settle_hash"] == deployment.settle_hash.payload.hex()
    receipt = Receipt.from_record(printed)
    assert receipt.escrow == escrow.input
    settled = settle(devnet.context(), deployment, [(escrow, receipt)], market.address)
    await confirm(devnet, market.sign(settled))
    assert balance(devnet, Wallet.of(key, Network.TESTNET).address) == record.billable_units * PRICE
