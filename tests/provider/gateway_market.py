"""A devnet market with a provider whose daemon and gateway run as processes (`unchained
provider run`, `unchained provider gateway`) and a funded renter whose `unchained` commands
reach them: what the channel jobs' end-to-end test and bench share (no tests here)."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from devnet.process import DevnetProcess, free_port
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from tests.consumer.cli import cli_env, funded_key
from tests.consumer.test_endpoint_deploy import gateway_process
from tests.provider.daemon_harness import IDENTITY, ProviderProcess, daemon_on_market, quiet_market


@dataclasses.dataclass(frozen=True)
class GatewayMarket:
    daemon: ProviderProcess
    provider: Wallet  # the provider's wallet (its key signs claims)
    deployment: Deployment
    gateway_url: str
    key: Path  # the renter's key file
    state: Path  # the renter's state directory
    env: dict[str, str]  # the renter's `unchained` environment


@contextlib.asynccontextmanager
async def gateway_market(
    devnet: DevnetProcess, workdir: Path, renter_lovelace: int, **provider: Any
) -> AsyncIterator[GatewayMarket]:
    """The market, the provider (`provider`: its daemon settings) with its gateway, and a
    renter holding `renter_lovelace`; all stopped at the end."""
    deployment_file, deployment, settings = await quiet_market(devnet, workdir)
    gateway_url = f"http://127.0.0.1:{free_port()}"
    async with daemon_on_market(
        devnet, workdir, deployment_file, settings, gateway_url=gateway_url, **provider
    ) as (daemon, wallet, market_url):
        _, key = await funded_key(devnet, workdir, renter_lovelace)
        market = types.SimpleNamespace(url=market_url, deployment_path=deployment_file)
        state = workdir / "renter"
        env = cli_env(market, devnet, key, state, identity=IDENTITY)
        port = int(gateway_url.rsplit(":", 1)[1])
        gateway = gateway_process(daemon, deployment_file, devnet.url, port, workdir / "gw.log")
        try:
            yield GatewayMarket(daemon, wallet, deployment, gateway_url, key, state, env)
        finally:
            gateway.terminate()
            gateway.wait(timeout=30)
