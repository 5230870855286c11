"""Pods on the devnet market, end to end: the real market, the provider's daemon
(`unchained provider run`) and gateway (`unchained provider gateway`) as processes, the renter's
`unchained pod ...` commands as a user runs them. `pod start` chooses the offer and opens a
channel on chain, the daemon admits it and starts the pod, the renter logs in with Debian's
ssh through the gateway's TCP port (its key only: a password login fails), runs a command and
writes /workspace; `pod stop` ends it and the agent's last IOU, which the provider claims on
chain, is the price per second times the whole seconds the provider's book says it ran, to
the lovelace. A second pod whose agent is killed is stopped by the provider (its IOUs lag)
and its port closed."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import types
from pathlib import Path

import docker
import pytest

from consumer.cli.pod_agent import pid_path, running
from consumer.sdk.channel_store import ChannelStore
from devnet.process import free_port
from offchain.protocol.ledger.amounts import ADA
from provider.config import RunnerSettings
from provider.images.pod import pod_image
from provider.money.channel_book import ChannelBook
from provider.rentals.book import Rental, RentalBook, qualified
from provider.rentals.pods import Pods
from tests.consumer.cli import cli_env, funded_key, run
from tests.consumer.test_endpoint_deploy import gateway_process
from tests.provider.daemon_harness import CORE_PRICE, IDENTITY, daemon_on_market, quiet_market
from tests.provider.test_channels_daemon import claimed

PRICE = CORE_PRICE  # per second: the offer's one-core bundle
CREDIT = 6 * PRICE  # the IOUs may lag 6 s: the agent pays every 2 s
PROVIDER = {"bundles": 2, "channel_credit_lovelace": CREDIT, "channel_claim_interval_s": 2}


@pytest.fixture(scope="module")
def pod_base() -> str:
    return pod_image(docker.from_env())  # built once per machine, before any clock runs


@pytest.fixture
def ssh_key(tmp_path: Path) -> Path:
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


async def until(condition, timeout_s: float = 60, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.2)


async def test_a_pod_on_the_devnet_market_from_start_to_claim(devnet, tmp_path, pod_base, ssh_key):
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path)
    port = free_port()
    async with daemon_on_market(
        devnet, tmp_path, deployment_file, settings, gateway_url=f"http://127.0.0.1:{port}",
        **PROVIDER,
    ) as (daemon, _, market_url):  # fmt: skip
        renter, key = await funded_key(devnet, tmp_path, 200 * ADA)
        market = types.SimpleNamespace(url=market_url, deployment_path=deployment_file)
        state = tmp_path / "renter"
        env = cli_env(market, devnet, key, state, identity=IDENTITY)
        book = RentalBook.in_state_dir(daemon.state_dir)
        pods = Pods(docker.from_env(), RunnerSettings(state_dir=daemon.state_dir))
        gateway = gateway_process(daemon, deployment_file, devnet.url, port, tmp_path / "gw.log")
        try:
            rows = RenterRows(book, renter.vkey)
            await run_the_story(env, state, rows, daemon, deployment, ssh_key, tmp_path)
        finally:
            gateway.terminate()
            gateway.wait(timeout=30)
            for name in pods.leftovers()["networks"] + pods.leftovers()["containers"]:
                pods.stop(name)
            for name in pods.leftovers()["workspaces"]:
                pods.remove_workspace(name)
            assert pods.leftovers() == {"containers": [], "networks": [], "workspaces": []}


@dataclasses.dataclass(frozen=True)
class RenterRows:
    """The provider's book rows of one renter, by the names it chose (names are per renter)."""

    book: RentalBook
    vkey: bytes

    def get(self, name: str) -> Rental | None:
        return self.book.get(qualified(self.vkey, name))


async def run_the_story(env, state: Path, book: RenterRows, daemon, deployment, ssh_key, cwd):
    def renter_cli(env: dict[str, str], *args: str):
        return run(env, *args, cwd=cwd)

    started = await asyncio.to_thread(
        renter_cli, env, "pod", "start", "--ssh-key", f"{ssh_key}.pub", "--name", "lab",
        "--cpu-cores", "1", "--memory-mib", "256", "--deposit", "100", "--json",
    )  # fmt: skip
    assert started.returncode == 0, started.stdout + started.stderr
    status = json.loads(started.stdout)
    assert (status["state"], status["kind"], status["price_per_second"]) == (
        "running",
        "pod",
        PRICE,
    )
    channel = status["channel"]
    await until(lambda: book.get("lab").public_port, what="no TCP port for the pod")

    ssh = ["pod", "ssh", "lab", "-i", str(ssh_key), "-o", "BatchMode=yes", "--"]
    done = await asyncio.to_thread(renter_cli, env, *ssh, "id -un; echo kept > /workspace/f; "
                                   "cat /workspace/f; hostname >/dev/null && echo ok")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["pod", "kept", "ok"]
    password = await asyncio.to_thread(
        renter_cli, env, "pod", "ssh", "lab", "-o", "BatchMode=yes", "-o",
        "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password", "--", "true",
    )  # fmt: skip
    assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr

    listed = await asyncio.to_thread(renter_cli, env, "pod", "list", "--json")
    assert [(p["name"], p["state"]) for p in json.loads(listed.stdout)] == [("lab", "running")]
    # stopped once its agent has paid two seconds (the CLI's commands may take less than that)
    await until(lambda: ChannelStore(state).signed(channel) >= 2 * PRICE, what="no 2 s paid")
    stopped = await asyncio.to_thread(renter_cli, env, "pod", "stop", "lab", "--json")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    row = book.get("lab")
    seconds = (row.stopped_ms - row.started_ms) // 1000
    assert row.state == "stopped" and seconds >= 2  # each second paid
    owed = PRICE * seconds
    assert json.loads(stopped.stdout)["signed"] == owed == ChannelStore(state).signed(channel)
    channels = ChannelBook.in_state_dir(daemon.state_dir, deployment.network_id,
                                        deployment.channel_hash, CREDIT)  # fmt: skip
    await claimed(channels, bytes.fromhex(channel), owed)  # on chain, to the lovelace
    assert not running(state, channel)  # the agent paid the last IOU and exited

    # a second pod on the same channel, whose agent dies: the provider stops it
    first_agent = pid_path(state, channel).read_text()
    again = await asyncio.to_thread(
        renter_cli, env, "pod", "start", "--ssh-key", f"{ssh_key}.pub", "--name", "lag",
        "--cpu-cores", "1", "--memory-mib", "256", "--json",
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["channel"] == channel  # reused: it has enough left

    def second_agent() -> bool:
        return running(state, channel) and pid_path(state, channel).read_text() != first_agent

    await until(second_agent, what="no agent for the second pod")
    os.kill(int(pid_path(state, channel).read_text()), signal.SIGKILL)
    await until(lambda: book.get("lag").state == "stopped", timeout_s=30,
                what="the provider did not stop the unpaid pod")  # fmt: skip
    assert book.get("lag").reason.startswith("IOUs lag: "), book.get("lag")
    await until(lambda: book.get("lag").public_port == 0, timeout_s=5, what="its port stays")
    refused = await asyncio.to_thread(renter_cli, env, *ssh[:2], "lag", *ssh[3:], "true")
    assert refused.returncode == 1 and "pod lag is stopped: IOUs lag" in refused.stderr
    pods = Pods(docker.from_env(), RunnerSettings(state_dir=daemon.state_dir))
    await until(lambda: pods.leftovers()["containers"] == [], timeout_s=10,
                what="the daemon left a stopped pod's container")  # fmt: skip
    kept = [qualified(book.vkey, name) for name in ("lab", "lag")]  # the book's names
    assert pods.leftovers()["workspaces"] == kept  # kept: workspace_keep_s is an hour
