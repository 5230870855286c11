"""`unchained demo`: the core loop without a market, every step a real transaction on a fresh
devnet or a real container on this machine.

The validators are deployed; a consumer locks ADA in an escrow for a sample job (a small
neural network trained with NumPy in a container); the provider checks the escrow on chain,
signs its acceptance, runs the job with its hardened runner, meters it and signs the receipt;
the receipt settles the escrow. Balances before and after, and every transaction id.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import docker
import typer
from pycardano import Address, PaymentSigningKey, Transaction, TransactionInput, UTxO

from offchain.chain.context import chain_context, quiet_chain_clients
from offchain.chain.ogmios import request
from offchain.chain.submit import submit_confirmed, tip_point, wait_for_confirmations
from offchain.chain.time import iso
from offchain.chain.utxo import utxo_at
from offchain.devnet.genesis import ADA
from offchain.devnet.process import DevnetProcess
from offchain.protocol import deployment_file
from offchain.protocol import escrow as escrows
from offchain.protocol.amounts import ada
from offchain.protocol.deployment import Deployment, deploy
from offchain.protocol.jobspec import JobSpec, Resources
from offchain.protocol.split import lock_amount
from offchain.protocol.txbuild import Clock, Wallet, out_ref
from provider.config import Prices, RunnerSettings, default_offer
from provider.images import WORKLOADS_IN_IMAGE, workloads_image
from provider.inventory import host_inventory
from provider.keys import ensure_key, key_path
from provider.options import fail
from provider.receipts import EscrowJob, accept, receipt_for
from provider.runner import Runner, RunResult
from unchained.deploy import NOTICE_MS, SLASH_SHARE_BPS

app = typer.Typer()

CONSUMER_FUNDS = 100 * ADA
# The demo provider's prices, lovelace per second: one core, 1 GiB memory and 1 GiB of /out
# cost 0.46 ADA a second, so the payout is well above the smallest output the ledger allows.
PRICES = Prices(gpu=2 * ADA, cpu_core=400_000, memory_gib=50_000, disk_gib=10_000)
EPOCHS = 200
MAX_DURATION_S = 120
FEE_ALLOWANCE = 2 * ADA  # what the settle transaction's fee may take from the escrow
DEADLINE_MARGIN_MS = 5 * 60 * 1000  # after the job's max duration, for the settle to land
SETTLE_WINDOW_MS = 10 * 60 * 1000


def say(text: str = "") -> None:
    typer.echo(text)


@app.callback(invoke_without_command=True)
def demo(
    data_dir: Annotated[
        Path,
        typer.Option(
            resolve_path=True,  # absolute from here on: docker mounts it, the devnet keeps it
            help="Where the demo keeps its chain, keys and job results.",
        ),
    ] = Path("data/demo"),
    port: Annotated[
        int | None,
        typer.Option(help="Port for the demo's devnet [default: a free one, beside any other]."),
    ] = None,
) -> None:
    """Start a fresh devnet and take one job from escrow to payout."""
    quiet_chain_clients()
    devnet = DevnetProcess(data_dir / "devnet", slot_length_ms=200, port=port).start(reset=True)
    try:
        walkthrough(devnet, data_dir)
    finally:
        devnet.stop()


def walkthrough(devnet: DevnetProcess, data_dir: Path) -> None:
    url = devnet.url
    say(f"Unchained demo: one job from escrow to payout on a fresh devnet at {url}")

    say("\n1. The market deploys the validators")
    market = Wallet.of(devnet.key("market"))
    deploy_tx, deployment = deploy(
        chain_context(url), market.address, 0, NOTICE_MS, SLASH_SHARE_BPS
    )
    confirm(url, market.sign(deploy_tx), "deploy")
    say(f"   escrow script {deployment.escrow_hash.payload.hex()}")
    say(f"   bond script   {deployment.bond_hash.payload.hex()}")
    deployment_file.save(deployment, data_dir / "deployment.json")
    say(f"   deployment file {data_dir / 'deployment.json'}")

    say("\n2. The parties")
    provider_dir = data_dir / "provider"
    provider_key, _ = ensure_key(provider_dir)  # what `unchained provider init` makes
    provider = Wallet.of(provider_key)
    consumer = Wallet.of(PaymentSigningKey.generate())
    say(f"   provider {provider.address} (key {key_path(provider_dir)})")
    say(f"   consumer {consumer.address}")
    say(f"   market   {market.address} (deploys, and submits the settlement)")
    say(f"   consumer funded with {ada(CONSUMER_FUNDS)}: tx {fund(url, consumer.address)}")
    parties = {"provider": provider.address, "consumer": consumer.address, "market": market.address}
    before = {name: balance(url, address) for name, address in parties.items()}

    say("\n3. The job: a 2-64-64-2 network learns two spirals with NumPy, in a container")
    client = docker.from_env()
    spec = sample_job(workloads_image(client))
    settings = RunnerSettings(state_dir=provider_dir)
    inventory = host_inventory(settings.state_dir)
    offer = default_offer(inventory).model_copy(update={"prices": PRICES})
    refusal = offer.refusal(spec, inventory)
    if refusal:
        raise fail(f"this machine cannot take the sample job: {refusal}", code=1)
    price = offer.price_per_unit(spec)
    bundle = f"{spec.resources.cpu_cores} core, {spec.resources.memory_mib} MiB, no network"
    say(f"   image {spec.image}, {bundle}, at most {spec.max_duration_s} s")
    say(f"   the provider asks {price:,} lovelace per second of that bundle")

    say("\n4. The consumer locks the most the job can cost, plus the settle fee allowance")
    escrow = lock(url, deployment, consumer, provider, spec, price)
    say(f"   escrow {out_ref(escrow)} holds {ada(escrow.output.amount.coin)}")

    say("\n5. The provider reads the escrow on chain and signs its acceptance")
    checked = utxo_at(chain_context(url), escrow.input)
    if checked is None:
        raise fail(f"escrow {out_ref(escrow)} is not on the chain", code=1)
    job = EscrowJob(chain_context(url), deployment, checked, spec, price, provider_key)
    acceptance = accept(job, None)  # the demo provider posts no bond
    say("   escrow checked: this provider's key, address and price, the job's digest, the")
    say(f"   lovelace and the time left; acceptance signature {acceptance.hex()[:32]}...")

    say("\n6. The provider runs the job in a hardened container and meters it")
    job_id = f"demo_{escrow.input.transaction_id.payload.hex()[:16]}"
    result = Runner(client, settings).run(job_id, spec, on_log=show_log)
    show_run(result)

    say("\n7. The provider signs the receipt: units, result hash, evidence hash")
    receipt = receipt_for(job, result)
    say(f"   {receipt.units} units x {price:,} lovelace = {ada(receipt.units * price)}")
    say(f"   result   {receipt.result_hash.hex()} (sha256 of the output archive)")
    say(f"   evidence {receipt.evidence_hash.hex()} (sha256 of the metering record)")
    say(f"   signature {receipt.signature.hex()[:32]}...")

    say("\n8. The market settles the escrow with the receipt")
    settle_tx = market.sign(
        escrows.settle(chain_context(url), deployment, [receipt], market.address)
    )
    confirm(url, settle_tx, f"settled escrow {out_ref(escrow)}")

    after = {name: balance(url, address) for name, address in parties.items()}
    say("\nBalances")
    say(f"   {'':<9}{'before':>22}{'after':>22}{'change':>22}")
    for name in parties:
        change = after[name] - before[name]
        say(f"   {name:<9}{ada(before[name]):>22}{ada(after[name]):>22}"
            f"{('+' if change > 0 else '') + ada(change):>22}")  # fmt: skip
    say(f"\nThe provider earned {ada(after['provider'] - before['provider'])} for "
        f"{receipt.units} s of the bundle; the consumer paid that, the lock fee and the fee "
        f"allowance; the market kept what the allowance left after the settle fee.")  # fmt: skip
    say(f"Every transaction above is on the devnet's chain in {devnet.data_dir}.")


def sample_job(image: str) -> JobSpec:
    command = ["python3", f"{WORKLOADS_IN_IMAGE}/train_mlp.py", "--epochs", str(EPOCHS)]
    return JobSpec(
        image=image,
        command=command,
        resources=Resources(cpu_cores=1, memory_mib=512, disk_mib=64),
        max_duration_s=MAX_DURATION_S,
        max_price_lovelace=100 * ADA,
    )


def lock(
    url: str,
    deployment: Deployment,
    consumer: Wallet,
    provider: Wallet,
    spec: JobSpec,
    price: int,
) -> UTxO:
    """The consumer's escrow for `spec` at `price`: units for its whole max duration."""
    context = chain_context(url)
    deadline = Clock.now(context).tip_ms + spec.max_duration_s * 1000 + DEADLINE_MARGIN_MS
    datum = escrows.new_escrow(
        consumer.address, provider.address, provider.vkey, price, spec.max_duration_s,
        deadline, SETTLE_WINDOW_MS, spec.job_id(), FEE_ALLOWANCE,
    )  # fmt: skip
    locked = lock_amount(price, spec.max_duration_s, FEE_ALLOWANCE)
    tx = consumer.sign(escrows.lock(context, deployment, consumer.address, datum, locked))
    confirm(url, tx, "lock")
    say(f"   deadline {iso(deadline)}, settle window {SETTLE_WINDOW_MS // 60_000} min after it")
    index = escrows.ESCROW_OUTPUT
    return UTxO(TransactionInput(tx.id, index), tx.transaction_body.outputs[index])


def show_log(text: str) -> None:
    for line in text.splitlines():
        say(f"   | {line}")


def show_run(result: RunResult) -> None:
    record = result.record
    if result.status != "succeeded" or record is None or result.output is None:
        raise fail(f"the job did not succeed: {result.status} {result.error or ''}", code=1)
    say(f"   {result.status} in {record.wall_ms} ms: {record.billable_units} billable units, "
        f"CPU {record.cpu_ns // 1_000_000} ms, peak memory {record.memory_peak_bytes >> 20} MiB, "
        f"{len(record.samples)} samples")  # fmt: skip
    say(f"   output {result.output.path} ({result.output.size_bytes} bytes)")


def confirm(url: str, tx: Transaction, what: str) -> None:
    height = asyncio.run(submit_confirmed(url, tx))
    say(f"   {what}: tx {tx.id} (block {height}, fee {ada(tx.transaction_body.fee)})")


def fund(url: str, address: Address) -> str:
    """Send CONSUMER_FUNDS from the devnet's faucet; returns the transaction id."""

    async def funded() -> str:
        since = await tip_point(url)
        answer = await request(
            url, "devnet/fund", {"address": str(address), "lovelace": CONSUMER_FUNDS}
        )
        tx_id = answer["transaction"]["id"]
        await wait_for_confirmations(url, tx_id, since, timeout_s=30)
        return tx_id

    return asyncio.run(funded())


def balance(url: str, address: Address) -> int:
    return sum(u.output.amount.coin for u in chain_context(url).utxos(address))
