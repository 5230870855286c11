"""`unchained doctor`: check a set-up against the chain it points at and say what to fix.

Each check reads the real thing: Ogmios's `/health` (reachable, version, node connected and
synced), the node's genesis (the network), the deployment file read back from the chain, the
CBOR flag on the first transaction after the deployment's chain point, the wallet's UTxOs,
and this machine's clock against the chain tip's time. A check that needs an earlier one that
failed is skipped. Exit status 1 when any check fails."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from offchain.chain.network import DEFAULT_NETWORK, ChainNetwork
from offchain.chain.ogmios import DEFAULT_OGMIOS_URL
from offchain.core.errors import UnchainedError
from offchain.protocol.ledger.amounts import ADA, ada
from provider.cli.options import (
    DEFAULT_DEPLOYMENT,
    DeploymentOption,
    NetworkOption,
    OgmiosOption,
    network_setting,
)

app = typer.Typer()

# Ogmios reports its node in sync at 1 (five decimals); below 99.99% the node is catching up.
SYNCED_BPS = 9_999
# The chain's tip may run ahead of this clock by no more than Ogmios's own sync tolerance...
CLOCK_AHEAD_MS = 60_000
# ...nor lag it by more than 10 minutes: Praos makes a block every 20 s on average, and a
# 10-minute gap has a probability of about e^-30.
TIP_AGE_MS = 600_000
MIN_WALLET_LOVELACE = 5 * ADA  # a few transactions' fees and collateral

Status = Literal["ok", "FAIL", "skip"]


class Problem(UnchainedError):
    """A check found something to fix; the message says what."""


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str


@dataclasses.dataclass
class Setup:
    """What the checks are about, and what earlier checks learnt for later ones."""

    url: str
    network: ChainNetwork
    deployment: Path
    wallet: Path | None
    min_lovelace: int
    health: dict[str, Any] = dataclasses.field(default_factory=dict)
    published_after: dict[str, Any] | None = None


def ogmios(setup: Setup) -> str:
    from offchain.chain.ogmios_window import read_health

    setup.health = read_health(setup.url)
    return f"Ogmios answers at {setup.url} ({setup.health.get('version', 'no version given')})"


def version(setup: Setup) -> str:
    from offchain.chain.ogmios_window import SUPPORTED, ogmios_version

    return f"Ogmios {ogmios_version(setup.health)}, within {SUPPORTED}"


def node(setup: Setup) -> str:
    status = setup.health.get("connectionStatus")
    synced_bps = int(float(setup.health.get("networkSynchronization", 0)) * 10_000)
    if status != "connected":
        raise Problem(f"Ogmios is {status} to its node: start cardano-node, and give Ogmios "
                      "its socket (--node-socket) and config (--node-config)")  # fmt: skip
    if synced_bps < SYNCED_BPS:
        raise Problem(f"the node is {synced_bps / 100:.2f}% synced: wait until it "
                             "reaches the tip before deploying or serving")  # fmt: skip
    return "the node is connected and synced"


def network(setup: Setup) -> str:
    from offchain.chain.network import connect

    return f"the node runs {connect(setup.url, setup.network)}"


def deployment(setup: Setup) -> str:
    from offchain.chain.context import quiet_chain_clients
    from offchain.protocol.tx.deployment_file import read_record
    from offchain.protocol.tx.deployment_start import open_checked

    quiet_chain_clients()
    open_checked(setup.url, setup.deployment, setup.network)
    setup.published_after = read_record(setup.deployment).published_after
    return f"{setup.deployment}'s scripts are on this chain"


def cbor(setup: Setup) -> str | None:
    from offchain.chain.ogmios_window import check_cbor

    if setup.published_after is None:
        return None
    if not asyncio.run(check_cbor(setup.url, setup.published_after)):
        return None
    return "Ogmios sends transactions' CBOR (--include-cbor)"


def wallet(setup: Setup) -> str | None:
    from cbor2 import CBORError
    from pycardano import PaymentSigningKey
    from pycardano.exception import PyCardanoException

    from offchain.chain.ogmios import utxo_lovelace
    from offchain.core.sealed_keys import read_key_text
    from offchain.protocol.tx.txbuild import Wallet

    if setup.wallet is None:
        return None
    try:
        key = PaymentSigningKey.from_json(read_key_text(setup.wallet))  # sealed or plain
    except (OSError, ValueError, KeyError, CBORError, PyCardanoException) as exc:
        raise Problem(f"no signing key at {setup.wallet} ({exc})") from exc
    address = str(Wallet.of(key, setup.network.pycardano).address)
    lovelace = utxo_lovelace(setup.url, {"addresses": [address]})
    if lovelace < setup.min_lovelace:
        raise Problem(f"{address} holds {ada(lovelace)}, less than "
                             f"{ada(setup.min_lovelace)}: fund it (on the devnet: `unchained "
                             "wallet fund`; on a test network: its faucet)")  # fmt: skip
    return f"{address} holds {ada(lovelace)}"


def clock(setup: Setup) -> str:
    from offchain.chain.ogmios import request_sync
    from offchain.chain.time import read_chain_time

    tip = request_sync(setup.url, "queryNetwork/tip")
    tip_ms = read_chain_time(setup.url).slot_to_posix_ms(tip["slot"])
    age_ms = time.time_ns() // 1_000_000 - tip_ms
    if -age_ms > CLOCK_AHEAD_MS:
        raise Problem(f"the chain's tip is {-age_ms // 1000} s ahead of this machine's "
                             "clock: set the clock right (NTP: timedatectl, chrony)")  # fmt: skip
    if age_ms > TIP_AGE_MS:
        raise Problem(f"the chain's tip is {age_ms // 1000} s old by this machine's "
                             "clock: the node has stopped following the chain, or this clock "
                             "is ahead (NTP: timedatectl, chrony)")  # fmt: skip
    return f"this clock and the chain's tip agree ({age_ms // 1000} s since the tip's slot)"


Check = Callable[[Setup], str | None]
# Each check and the ones it needs to have passed.
CHECKS: tuple[tuple[str, Check, tuple[str, ...]], ...] = (
    ("ogmios", ogmios, ()),
    ("version", version, ("ogmios",)),
    ("node", node, ("ogmios",)),
    ("network", network, ("ogmios",)),
    ("deployment", deployment, ("version", "network")),
    ("cbor", cbor, ("deployment",)),
    ("wallet", wallet, ("network",)),
    ("clock", clock, ("node",)),
)
SKIPPED = {
    "cbor": "no transaction after the deployment's chain point to tell by (a deployment "
    "file from `unchained deploy` records one)",
    "wallet": "no --wallet given",
}


def diagnose(setup: Setup) -> Iterator[Finding]:
    """Each check's finding, in order."""
    from offchain.chain.ogmios import UNREACHABLE

    passed: set[str] = set()
    for name, check, needs in CHECKS:
        if missing := [need for need in needs if need not in passed]:
            yield Finding(name, "skip", f"needs {', '.join(missing)}")
            continue
        try:
            detail = check(setup)
        except UnchainedError as exc:
            yield Finding(name, "FAIL", str(exc))
            continue
        except UNREACHABLE as exc:
            yield Finding(name, "FAIL", f"nothing answers at {setup.url} ({exc}): start "
                          "Ogmios, or point --ogmios-url (UNCHAINED_OGMIOS_URL) at it")  # fmt: skip
            continue
        if detail is None:
            yield Finding(name, "skip", SKIPPED[name])
        else:
            passed.add(name)
            yield Finding(name, "ok", detail)


@app.callback(invoke_without_command=True)
def doctor_command(
    ogmios_url: OgmiosOption = DEFAULT_OGMIOS_URL,
    network_name: NetworkOption = DEFAULT_NETWORK,
    deployment_path: DeploymentOption = DEFAULT_DEPLOYMENT,
    wallet_path: Annotated[
        Path | None,
        typer.Option("--wallet", resolve_path=True, help="A signing key whose funds to check."),
    ] = None,
    min_lovelace: Annotated[
        int, typer.Option(min=0, help="The least the wallet should hold.")
    ] = MIN_WALLET_LOVELACE,
) -> None:
    """Check this set-up (Ogmios, node, network, deployment, wallet, clock); say what to fix."""
    setup = Setup(ogmios_url, network_setting(network_name), deployment_path, wallet_path,
                  min_lovelace)  # fmt: skip
    failed = 0
    for finding in diagnose(setup):
        failed += finding.status == "FAIL"
        typer.echo(f"{finding.status:<4}  {finding.check:<10}  {finding.detail}")
    typer.echo(f"{failed} problem(s) found" if failed else "all checks passed")
    raise typer.Exit(1 if failed else 0)
