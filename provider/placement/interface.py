"""The one interface the daemon runs jobs through, and the backend its settings choose.

`Runner` (provider/sandbox/runner.py) is the single-host placement: the job runs in the
hardened container on this machine's engine. `RayPlacement` is the fleet: Ray picks a node with
room and that node's actor runs the same runner there. A Kubernetes backend would be a third
implementation of this protocol (docs/provider-guide.md, "A fleet on Ray")."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import docker

from offchain.protocol.job.gpu_slices import GpuSlice
from offchain.protocol.job.jobspec import JobSpec
from offchain.protocol.job.offer import OfferedImage
from provider.config import ProviderConfig, RunnerSettings
from provider.gpu.inventory import HostInventory
from provider.rentals.book import Starter
from provider.rentals.starters import starter_of
from provider.sandbox.runner import LogSink, Runner, RunResult, Stop


class Placement(Protocol):
    """Runs jobs to their end and keeps their results (out.tar, log.txt, result.json) under
    `results_dir/<job>` on the daemon's machine, wherever they ran."""

    settings: RunnerSettings
    results_dir: Path

    def run(
        self,
        job_id: str,
        spec: JobSpec,
        gpu_uuids: list[str] | None = None,
        on_log: LogSink | None = None,
        escrow: str | None = None,
        gpu_slice: GpuSlice | None = None,
        on_start: Callable[[], None] | None = None,
        pull_auth: dict[str, str] | None = None,
    ) -> RunResult:
        """Run the job where there is room and return what happened (a result without a
        metering record: nothing ran, nothing is billed)."""
        ...

    def stop(self, job_id: str, why: Stop = "cancelled") -> None:
        """Stop the job at its renter's request or because the provider stops (its run ends
        with the status `why`, metered, its /out packed as its results)."""
        ...

    def stop_all(self) -> list[str]:
        """Stop every running job because the provider stops; their ids."""
        ...

    def recover(self, on_log: LogSink | None = None) -> list[RunResult]:
        """After the daemon's restart: finish or reap the jobs its predecessor left running."""
        ...

    def images(self) -> list[OfferedImage]:
        """The images every job may name without a pull."""
        ...


def placement_of(
    config: ProviderConfig, inventory: HostInventory
) -> tuple[Placement, HostInventory]:
    """The backend `[daemon] placement` names and what it offers: this machine's inventory, or
    the Ray cluster's nodes added up (ray is imported only then: an optional extra)."""
    if config.daemon.placement == "ray":
        from provider.placement.ray_fleet import RayPlacement

        fleet = RayPlacement.connect(config.daemon, config.runner)
        return fleet, fleet.inventory()
    return Runner(docker.from_env(), config.runner), inventory


def rental_starters(
    placement: Placement, client: docker.DockerClient, settings: RunnerSettings
) -> Callable[[str], Starter]:
    """The Starter of each kind of deployment where `placement` runs jobs: this machine's
    engine (`provider.rentals.starters`), or the fleet's nodes (`fleet_rentals`)."""
    if isinstance(placement, Runner):
        return functools.partial(starter_of, client=client, settings=settings)
    from provider.placement.fleet_rentals import fleet_starters
    from provider.placement.ray_fleet import RayPlacement

    assert isinstance(placement, RayPlacement)  # the only other placement
    return fleet_starters(placement, client, settings)
