"""`unchained provider`: set a machine up as a provider, check it, and run job specs on it.

Settings come from flags, then `UNCHAINED_PROVIDER_*` environment variables, then the TOML
config (`--config`, written by `init`), then defaults (`provider.config`). Each command
imports what it uses (docker, the chain's clients, the daemon): `--help` imports none of them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from offchain.chain.network import DEFAULT_NETWORK
from offchain.core.logs import configure as configure_logs
from offchain.core.serving import KEEP_ALIVE_S
from offchain.protocol.job.jobspec import JobSpec, JobSpecError, describe, load_jobspec
from provider.capacity import slots_of
from provider.cli.bond import app as bond_app
from provider.cli.channel import app as channel_app
from provider.cli.options import (
    DEFAULT_CONFIG,
    ChainFlags,
    ConfigOption,
    NetworkOption,
    StateDirOption,
    chain_command,
    fail,
    given,
    network_setting,
    open_deployment,
    reported,
    settings_of,
    variable,
)
from provider.config import (
    DaemonSettings,
    Offer,
    Prices,
    ProviderConfig,
    ProviderSettings,
    default_offer,
    to_toml,
)
from provider.gpu.inventory import HostInventory, host_inventory

if TYPE_CHECKING:
    from provider.money.receipts import EscrowJob
    from provider.sandbox.runner import RunResult

app = typer.Typer(
    help="The provider node: its key, offer, self-test, job runner and bond.",
    no_args_is_help=True,
)
app.add_typer(bond_app, name="bond")
app.add_typer(channel_app, name="channel")


def provider_config(path: Path, flags: dict[str, Any]) -> tuple[ProviderConfig, HostInventory]:
    """The config at `path` (or, without one, an offer of everything here), flags on top."""
    settings = settings_of(path, flags)
    inventory = host_inventory(settings.runner.state_dir)
    if isinstance(settings, ProviderConfig):
        return settings, inventory
    typer.echo(f"no config at {path}: offering this whole machine (see `init`)", err=True)
    return ProviderConfig(offer=default_offer(inventory), **dict(settings)), inventory


def escrow_job(
    ref: str, flags: ChainFlags, settings: ProviderSettings, spec: JobSpec, price: int
) -> EscrowJob:
    """The escrow at `ref` as the chain has it, checked as an acceptance is before the job runs
    (`check_acceptable`: this deployment's, for this spec at this provider's price, key and
    payout address, paying the whole max duration, with room to run and settle before it
    closes)."""
    from offchain.chain.utxo import parse_out_ref, utxo_at
    from offchain.protocol.checks.escrow_check import check_acceptable
    from provider.keys import load_key, payout_address
    from provider.money.receipts import EscrowJob

    try:
        wanted = parse_out_ref(ref)
    except ValueError as exc:
        raise fail(str(exc)) from exc
    url = flags.ogmios_url
    context, deployment = open_deployment(url, flags.deployment, flags.network)
    with reported():
        key = load_key(settings.runner.state_dir)
        payout = payout_address(settings.daemon.payout_address, key, deployment.network)
        escrow = utxo_at(context, wanted)
        if escrow is None:
            raise fail(f"no unspent output {ref} on the chain at {url}", code=1)
        job = EscrowJob(context, deployment, escrow, spec, price, key, payout)
        check_acceptable(context, deployment, escrow, spec, job.offer, bond=None)
    return job


def receipt_lines(result: RunResult, job: EscrowJob | None) -> list[str]:
    """The run's receipt as people and scripts read it: signed for the escrow, or unsigned."""
    from offchain.protocol.tx.txbuild import out_ref
    from provider.money.receipts import receipt_fields, receipt_for

    if job is None:
        fields = receipt_fields(result).as_json()
        return [
            "receipt (unsigned: a receipt is signed for one escrow; pass --escrow TXID#IX):",
            json.dumps(fields, indent=2),
        ]
    with reported():
        receipt = receipt_for(job, result)
    due = receipt.units * job.price_per_unit
    return [
        f"receipt for escrow {out_ref(job.escrow)}, signed with this provider's key "
        f"(settling it pays {receipt.units} x {job.price_per_unit} = {due} lovelace):",
        json.dumps(receipt.record(job.deployment), indent=2),
    ]


@app.command("exec")
@chain_command
def exec_job(
    flags: ChainFlags,
    spec_file: Annotated[Path, typer.Argument(help="A job spec (YAML).")],
    job_id: Annotated[str | None, typer.Option(help="Defaults to a fresh random id.")] = None,
    escrow: Annotated[
        str | None,
        typer.Option(help="Sign the receipt for the escrow at TXID#IX (read from the chain)."),
    ] = None,
) -> None:
    """Run one job spec here exactly as a market job runs; print its metering record (JSON,
    on stdout) and its receipt (on stderr, with the job's log and the bill)."""
    import docker

    from provider.sandbox.runner import Runner

    try:
        spec = load_jobspec(spec_file)
    except JobSpecError as exc:
        raise fail(str(exc)) from exc
    settings, inventory = provider_config(flags.config, given(flags.state_dir))
    refusal = settings.offer.refusal(spec, inventory)
    if refusal:
        raise fail(f"this provider's offer cannot take the job: {refusal}")
    price = settings.offer.price_per_unit(spec)
    signed_for = None
    if escrow is not None:
        signed_for = escrow_job(escrow, flags, settings, spec, price)
    gpus = settings.offer.fitting_gpus(spec, inventory)[: spec.resources.gpus]
    runner = Runner(docker.from_env(), settings.runner)
    job = job_id or f"exec_{secrets.token_hex(6)}"
    result = runner.run(job, spec, gpus, on_log=lambda text: typer.echo(text, err=True, nl=False))
    if result.record is None:
        raise fail(f"job {job}: {result.status}: {result.error}", code=1)
    typer.echo(result.record.model_dump_json(indent=2))
    summary = [
        f"job {job}: {result.status} (exit code {result.exit_code})",
        f"billable units {result.record.billable_units} x {price} lovelace = "
        f"{result.record.billable_units * price} lovelace",
        f"evidence sha256 {result.record.digest()}",
    ]
    if result.output is not None:
        summary.append(f"output {result.output.path} sha256 {result.output.sha256}")
    summary.extend(receipt_lines(result, signed_for))
    typer.echo("\n".join(summary), err=True)
    raise typer.Exit(0 if result.status == "succeeded" else 1)


@app.command()
def selftest(
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
    gpu_image: Annotated[
        str | None,
        typer.Option(help="Image for the GPU benchmark [default: the pinned CUDA image]."),
    ] = None,
) -> None:
    """Check this machine before offering it: engine, hardening, limits, GPUs, a benchmark."""
    import docker

    from provider.gpu import share as gpu_share
    from provider.selftest.checks import (
        GPU_BENCH_IMAGE,
        Check,
        SelfTest,
        save_slice_results,
        save_summary,
    )  # fmt: skip

    settings, inventory = provider_config(config, given(state_dir))
    try:
        client = docker.from_env()
    except docker.errors.DockerException as exc:
        raise fail(f"FAIL engine: no docker engine answers: {exc}", code=1) from exc
    _, slots = slots_of(settings.offer, inventory, gpu_share.isolator)
    slices = [slot.gpu_slice for slot in slots if slot.gpu_slice is not None]
    test = SelfTest(client, settings.runner, inventory, gpu_image or GPU_BENCH_IMAGE, slices)
    checks: list[Check] = []
    for check in test.run():
        checks.append(check)
        typer.echo(f"{check.outcome.upper():<4}  {check.name:<24}  {check.detail}")
    failed = sum(check.outcome == "fail" for check in checks)
    save_summary(settings.runner.state_dir, checks, int(time.time() * 1000))  # offers carry it
    save_slice_results(settings.runner.state_dir, test.slice_results)  # in gpu_slices
    typer.echo(f"{'FAILED' if failed else 'PASSED'}: {failed} check(s) failed")
    raise typer.Exit(1 if failed else 0)


BUILDABLE = ("python", "pytorch")  # `build-image`: provider/images' recipes by name


@app.command("build-image")
def build_image(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(BUILDABLE)}.")],
) -> None:
    """Build one of the project's images into the docker engine from Debian packages (once:
    cached by its recipe), so this machine's offer lists it: python (unchained/python-numpy,
    the example job's) or pytorch (unchained/pytorch, the PyTorch example's: Debian's PyTorch
    for the CPU, a few minutes the first time)."""
    import docker

    from provider.images.recipes import python_image
    from provider.images.torch import torch_example_image

    builders = dict(zip(BUILDABLE, (python_image, torch_example_image), strict=True))
    if name not in builders:
        raise fail(f"no image {name!r} to build: one of {', '.join(BUILDABLE)}", code=1)
    try:
        client = docker.from_env()
    except docker.errors.DockerException as exc:
        raise fail(f"no docker engine answers: {exc}", code=1) from exc
    typer.echo(f"built {builders[name](client)}")


@app.command()
def init(
    config: ConfigOption = DEFAULT_CONFIG,
    force: Annotated[bool, typer.Option(help="Overwrite an existing config.")] = False,
    state_dir: StateDirOption = None,
    gpus: Annotated[str | None, typer.Option(help="GPU UUIDs to offer, comma-separated.")] = None,
    cpu_cores: Annotated[int | None, typer.Option(help="Cores to offer.")] = None,
    memory_mib: Annotated[int | None, typer.Option(help="Memory to offer, MiB.")] = None,
    disk_mib: Annotated[int | None, typer.Option(help="Disk for jobs' /out, MiB.")] = None,
    price_gpu: Annotated[int | None, typer.Option(help="Lovelace per GPU-second.")] = None,
    price_cpu_core: Annotated[int | None, typer.Option(help="Lovelace per core-second.")] = None,
    price_memory_gib: Annotated[int | None, typer.Option(help="Lovelace per GiB-second.")] = None,
    price_disk_gib: Annotated[
        int | None, typer.Option(help="Lovelace per disk GiB-second.")
    ] = None,
    network: NetworkOption = DEFAULT_NETWORK,
    payout_address: Annotated[
        str | None,
        typer.Option(
            help="Be paid at, and have the bond owned by, this address (a cold "
            "wallet's) [default: the provider key's address]."
        ),
    ] = None,
) -> None:
    """Write a provider config offering this machine (all of it unless flags say less) and
    make the provider's signing key (an existing key is kept, even with --force); print its
    address on the network `--network` names, and where it is paid."""
    from offchain.core.sealed_keys import KeyFileError
    from offchain.protocol.ledger.addresses import key_address
    from offchain.protocol.tx.txbuild import Wallet
    from provider.keys import ensure_key, key_path

    chain = network_setting(network)
    if config.exists() and not force:
        raise fail(f"{config} exists; use --force to overwrite it")
    settings = settings_of(config, given(state_dir), fresh=True).runner
    inventory = host_inventory(settings.state_dir)
    everything = default_offer(inventory)
    present = [gpu.uuid for gpu in inventory.gpu.gpus]
    chosen = [u.strip() for u in gpus.split(",") if u.strip()] if gpus is not None else present
    unknown = sorted(set(chosen) - set(present))
    if unknown:
        raise fail(
            f"no such GPU here: {', '.join(unknown)} (present: {', '.join(present) or 'none'})"
        )
    given_prices = {
        "gpu": price_gpu,
        "cpu_core": price_cpu_core,
        "memory_gib": price_memory_gib,
        "disk_gib": price_disk_gib,
    }
    try:
        offer = Offer(
            gpus=chosen,
            cpu_cores=everything.cpu_cores if cpu_cores is None else cpu_cores,
            memory_mib=everything.memory_mib if memory_mib is None else memory_mib,
            disk_mib=everything.disk_mib if disk_mib is None else disk_mib,
            prices=Prices(**{k: v for k, v in given_prices.items() if v is not None}),
        )
        daemon = DaemonSettings(payout_address=payout_address)
    except ValidationError as exc:
        raise fail(describe(exc)) from exc
    if payout_address is not None:
        try:
            key_address(payout_address, chain.pycardano)  # refused before anything is written
        except ValueError as exc:
            raise fail(f"--payout-address: {exc}") from exc
    try:
        key, made = ensure_key(settings.state_dir)
    except KeyFileError as exc:
        raise fail(str(exc)) from exc
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(to_toml(ProviderConfig(offer=offer, runner=settings, daemon=daemon)))
    typer.echo(f"wrote {config}")
    typer.echo(f"gpus: {', '.join(chosen) if chosen else inventory.gpu.note or 'none offered'}")
    typer.echo(f"cores {offer.cpu_cores}, memory {offer.memory_mib} MiB, disk {offer.disk_mib} MiB")
    typer.echo(f"{'made' if made else 'kept'} the provider key {key_path(settings.state_dir)}")
    typer.echo(f"provider address ({chain}): {Wallet.of(key, chain.pycardano).address}")
    typer.echo(f"provider vkey: {key.to_verification_key().payload.hex()}")
    if payout_address is not None:
        typer.echo(f"paid at, and the bond owned by: {payout_address} (a cold wallet: its key "
                   "stays off this machine)")  # fmt: skip


MarketUrlOption = Annotated[
    str | None,
    typer.Option(help=f"The market [env var: {variable('daemon.market_url')}; default: config's]."),
]
MarketIdentityOption = Annotated[
    str | None,
    typer.Option(
        help="The market's identity, signed into each request [env var: "
        f"{variable('daemon.market_identity')}; default: config's].",
    ),
]


@app.command()
@chain_command
def run(
    flags: ChainFlags,
    market_url: MarketUrlOption = None,
    market_identity: MarketIdentityOption = None,
) -> None:
    """Run the provider daemon: offer this machine on the market, take and run jobs, deliver
    results and receipts, settle unsettled receipts itself; SIGTERM stops it gracefully."""
    from offchain.core.sealed_keys import plain_key_warning
    from provider.daemon.chain import Chain
    from provider.daemon.main import Daemon
    from provider.keys import key_path

    given_flags = given(flags.state_dir, market_url=market_url, market_identity=market_identity)
    settings, inventory = provider_config(flags.config, given_flags)
    configure_logs("provider")
    plain_key_warning(key_path(settings.runner.state_dir))
    context, made = open_deployment(flags.ogmios_url, flags.deployment, flags.network, follows=True)
    with reported():
        chain = Chain.of(flags.ogmios_url, context, made, settings)
        asyncio.run(Daemon(settings, inventory, chain).run())


@app.command()
@chain_command
def status(
    flags: ChainFlags,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document (lovelace, chain-time ms).")
    ] = False,
) -> None:
    """Slots free and busy, running jobs, earnings settled and pending, channels, the bond (in
    chain time), and the GPUs' compute processes: jobs' and the operator's own (not billed)."""
    from provider.daemon.bond import BondManager
    from provider.daemon.chain import Chain
    from provider.daemon.journal import Journal  # its receipts import pycardano
    from provider.daemon.status import (
        host_gpu_processes,
        provider_status,
        renter_containers,
        status_lines,
    )  # fmt: skip
    from provider.gpu import share as gpu_share
    from provider.money.channel_book import ChannelBook
    from provider.money.own_transactions import OwnTransactions

    settings, inventory = provider_config(flags.config, given(flags.state_dir))
    _, slots = slots_of(settings.offer, inventory, gpu_share.isolator)
    context, made = open_deployment(flags.ogmios_url, flags.deployment, flags.network)
    state = settings.runner.state_dir
    book = ChannelBook.in_state_dir(
        state, made.network_id, made.channel_hash, settings.daemon.channel_credit_lovelace
    )
    with reported():
        chain = Chain.of(flags.ogmios_url, context, made, settings)
        bond = BondManager(chain, settings.daemon.bond_minimum_lovelace).refresh()
        gpus = host_gpu_processes(inventory, renter_containers())  # the operator's too
        own = OwnTransactions.in_state_dir(state)
        now = provider_status(Journal(state), slots, chain.now_ms(), bond, book, own, gpus)
    typer.echo(json.dumps(now, indent=2) if as_json else "\n".join(status_lines(now)))


@app.command()
@chain_command
def gateway(
    flags: ChainFlags,
    listen: Annotated[
        str, typer.Option(help="HOST:PORT to serve renters on (all interfaces: 0.0.0.0:PORT).")
    ] = "127.0.0.1:8480",
) -> None:
    """Serve this provider's endpoints at /endpoints/<name>/<path>, each request paid by the
    IOU in its Unchained-Iou header (402 says what is due), stored in the channel book before
    the request goes on to the endpoint's service; and renters' signed deployments at
    /deployments (deploy, status, stop, logs, pay), which the daemon starts."""
    import docker
    import uvicorn

    from offchain.core.metrics import RequestMetrics
    from provider import metrics
    from provider.capacity import slots_of
    from provider.gateway.app import gateway_app
    from provider.gateway.control import DeployTerms
    from provider.gateway.guard import ConnectionLimits, guarded_protocol
    from provider.gateway.scaler import Scaler, Scaling
    from provider.money.channel_book import ChannelBook
    from provider.rentals.book import RentalBook
    from provider.rentals.jobs import JobFiles
    from provider.rentals.services import Services
    from provider.rentals.starters import engine_logs

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise fail(f"--listen {listen}: not HOST:PORT")
    configure_logs("gateway")
    settings, inventory = provider_config(flags.config, given(flags.state_dir))
    _, made = open_deployment(flags.ogmios_url, flags.deployment, flags.network)
    state = settings.runner.state_dir
    book = ChannelBook.in_state_dir(
        state, made.network_id, made.channel_hash, settings.daemon.channel_credit_lovelace
    )
    bundle, _ = slots_of(settings.offer, inventory)
    terms = DeployTerms.of(bundle, settings.offer.request_price, settings.offer.llm_prices)
    engine = docker.from_env()
    endpoints = RentalBook.in_state_dir(state)
    logs = engine_logs(engine, settings.runner)
    scaling: Services | Scaling = Services(engine, settings.runner)
    if settings.daemon.placement == "ray":  # the fleet's rentals run on its nodes
        from provider.placement.fleet_gateway import fleet_gateway

        logs, scaling = fleet_gateway(settings, endpoints, engine)
    scaler = Scaler(endpoints, scaling)  # min_replicas below replicas
    app = gateway_app(book, endpoints, terms=terms, logs=logs,
                      job_files=JobFiles.of(settings.runner), scaler=scaler)  # fmt: skip
    typer.echo(f"gateway on http://{listen}/endpoints and /deployments", err=True)
    from provider.gateway.tcp import with_tcp_forwarder  # pods: SSH through the gateway's host

    forwarding = with_tcp_forwarder(app, host.strip("[]"))
    metered = RequestMetrics(forwarding, metrics.GATEWAY_HTTP, metrics.gateway_route)
    metrics.serving(settings.daemon.gateway_metrics_listen, metrics.channel_book(book))
    http = guarded_protocol(ConnectionLimits())  # slowloris, connections per address
    uvicorn.run(metered, host=host.strip("[]"), port=int(port), log_level="warning", http=http,
                loop="uvloop", access_log=False, timeout_keep_alive=KEEP_ALIVE_S,
                log_config=None)  # fmt: skip
