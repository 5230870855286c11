"""`unchained provider`: set a machine up as a provider, check it, and run job specs on it.

Settings come from flags, then `UNCHAINED_PROVIDER_*` environment variables, then the TOML
config (`--config`, written by `init`), then defaults.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import docker
import typer
from pydantic import ValidationError

from offchain.protocol.jobspec import JobSpecError, describe, load_jobspec
from provider.config import (
    ConfigError,
    Offer,
    Prices,
    ProviderConfig,
    RunnerSettings,
    default_offer,
    load_config,
    to_toml,
)
from provider.inventory import HostInventory, host_inventory
from provider.runner import Runner
from provider.selftest import GPU_BENCH_IMAGE, SelfTest

app = typer.Typer(
    help="The provider node: its offer, self-test and job runner.", no_args_is_help=True
)

DEFAULT_CONFIG = Path("data/provider/provider.toml")
ConfigOption = Annotated[
    Path,
    typer.Option(
        "--config", envvar="UNCHAINED_PROVIDER_CONFIG", help="The provider's TOML config."
    ),
]
StateDirOption = Annotated[
    Path | None,
    typer.Option(envvar="UNCHAINED_PROVIDER_STATE_DIR", help="Where jobs and results live."),
]


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def runner_settings(state_dir: Path | None) -> RunnerSettings:
    return RunnerSettings(state_dir=state_dir) if state_dir else RunnerSettings()


def provider_config(path: Path, state_dir: Path | None) -> tuple[ProviderConfig, HostInventory]:
    """The config at `path` (or, without one, an offer of everything here), flags on top."""
    if path.exists():
        overrides = {"runner": {"state_dir": str(state_dir)}} if state_dir else {}
        try:
            config = load_config(path, overrides)
        except ConfigError as exc:
            raise fail(str(exc)) from exc
        return config, host_inventory(config.runner.state_dir)
    settings = runner_settings(state_dir)
    inventory = host_inventory(settings.state_dir)
    typer.echo(f"no config at {path}: offering this whole machine (see `init`)", err=True)
    return ProviderConfig(offer=default_offer(inventory), runner=settings), inventory


@app.command("exec")
def exec_job(
    spec_file: Annotated[Path, typer.Argument(help="A job spec (YAML).")],
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
    job_id: Annotated[str | None, typer.Option(help="Defaults to a fresh random id.")] = None,
) -> None:
    """Run one job spec here exactly as a market job runs; print its metering record (JSON)."""
    try:
        spec = load_jobspec(spec_file)
    except JobSpecError as exc:
        raise fail(str(exc)) from exc
    settings, inventory = provider_config(config, state_dir)
    refusal = settings.offer.refusal(spec, inventory)
    if refusal:
        raise fail(f"this provider's offer cannot take the job: {refusal}")
    gpus = settings.offer.fitting_gpus(spec, inventory)[: spec.resources.gpus]
    runner = Runner(docker.from_env(), settings.runner)
    job = job_id or f"exec_{secrets.token_hex(6)}"
    result = runner.run(job, spec, gpus, on_log=lambda text: typer.echo(text, err=True, nl=False))
    if result.record is None:
        raise fail(f"job {job}: {result.status}: {result.error}", code=1)
    # Receipts join here: sign (units, output sha256, record digest) for the escrow's out-ref.
    typer.echo(result.record.model_dump_json(indent=2))
    price = settings.offer.price_per_unit(spec)
    summary = [
        f"job {job}: {result.status} (exit code {result.exit_code})",
        f"billable units {result.record.billable_units} x {price} lovelace = "
        f"{result.record.billable_units * price} lovelace",
        f"evidence sha256 {result.record.digest()}",
    ]
    if result.output is not None:
        summary.append(f"output {result.output.path} sha256 {result.output.sha256}")
    typer.echo("\n".join(summary), err=True)
    raise typer.Exit(0 if result.status == "succeeded" else 1)


@app.command()
def selftest(
    config: ConfigOption = DEFAULT_CONFIG,
    state_dir: StateDirOption = None,
    gpu_image: Annotated[str, typer.Option(help="Image for the GPU benchmark.")] = GPU_BENCH_IMAGE,
) -> None:
    """Check this machine before offering it: engine, hardening, limits, GPUs, a benchmark."""
    settings, inventory = provider_config(config, state_dir)
    try:
        client = docker.from_env()
    except docker.errors.DockerException as exc:
        raise fail(f"FAIL engine: no docker engine answers: {exc}", code=1) from exc
    failed = 0
    for check in SelfTest(client, settings.runner, inventory, gpu_image).run():
        failed += check.outcome == "fail"
        typer.echo(f"{check.outcome.upper():<4}  {check.name:<24}  {check.detail}")
    typer.echo(f"{'FAILED' if failed else 'PASSED'}: {failed} check(s) failed")
    raise typer.Exit(1 if failed else 0)


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
) -> None:
    """Write a provider config offering this machine (all of it unless flags say less)."""
    if config.exists() and not force:
        raise fail(f"{config} exists; use --force to overwrite it")
    settings = runner_settings(state_dir)
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
    except ValidationError as exc:
        raise fail(describe(exc)) from exc
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(to_toml(ProviderConfig(offer=offer, runner=settings)))
    # The provider's signing keys join here when receipts are signed (they need the contracts).
    typer.echo(f"wrote {config}")
    typer.echo(f"gpus: {', '.join(chosen) if chosen else inventory.gpu.note or 'none offered'}")
    typer.echo(f"cores {offer.cpu_cores}, memory {offer.memory_mib} MiB, disk {offer.disk_mib} MiB")
