"""Which code runs each kind of deployment: `kind -> factory(client, settings) -> Starter`.

The daemon starts and stops deployments through it and the gateway reads their logs through
it, so a new kind is one module with a `Starter` (`provider.rentals.book.Starter`) and one line
here."""

from __future__ import annotations

from collections.abc import Callable

import docker

from provider.config import RunnerSettings
from provider.rentals.book import Rental, Starter
from provider.rentals.jobs import ChannelJobs
from provider.rentals.pods import Pods
from provider.rentals.services import Services

StarterFactory = Callable[[docker.DockerClient, RunnerSettings], Starter]

STARTERS: dict[str, StarterFactory] = {
    "endpoint": Services,
    "pod": Pods,
    "job": ChannelJobs,
}


def starter_of(kind: str, client: docker.DockerClient, settings: RunnerSettings) -> Starter:
    """The Starter for `kind`; KeyError naming the kinds this provider runs."""
    try:
        factory = STARTERS[kind]
    except KeyError:
        raise KeyError(f"this provider runs no {kind!r} deployments") from None
    return factory(client, settings)


def engine_logs(
    client: docker.DockerClient, settings: RunnerSettings
) -> Callable[[Rental, int], str]:
    """How the gateway reads a deployment's last lines of output: through its kind's Starter."""

    def logs(deployment: Rental, lines: int) -> str:
        return starter_of(deployment.kind, client, settings).logs(deployment.name, lines)

    return logs
