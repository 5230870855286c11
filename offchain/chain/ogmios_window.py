"""The Ogmios versions and flags Unchained works with, checked at start with a message that
says what to change, and the answer shapes that differ inside the window.

Supported: Ogmios 6.x (6.0 up to, not including, 7.0). Inside it, 6.13 turned the reward
account summaries from a map keyed by credential into a list (`reward_balances` reads both).
Ogmios 7.0 renamed `maxReferenceScriptsSize` (to `maxReferenceScriptsSizePerTransaction`),
which the `ogmios` client pycardano uses refuses in its strict protocol-parameter model, and
leaves out a transaction's empty `outputs`: 7.x is refused until the clients follow.

The chain followers read each transaction's CBOR, which Ogmios sends only when it runs with
`--include-cbor` (or `--include-transaction-cbor`); without it every search for a spending
transaction would fail for ever, so it is checked at start too (`check_cbor`)."""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlparse

from offchain.core.errors import UnchainedError

OLDEST = (6, 0)  # the first Ogmios speaking the v6 JSON-RPC protocol pycardano's client reads
NEWEST_EXCLUDED = (7, 0)
LIST_SUMMARIES = (6, 13)  # from here the reward account summaries are a list
SUPPORTED = "Ogmios 6.x (6.0 up to, not including, 7.0; 6.13 or later recommended)"
HEALTH_TIMEOUT_S = 10.0
CBOR_FLAG_FIX = (
    "restart Ogmios with --include-cbor (or --include-transaction-cbor): Unchained reads "
    "every transaction it follows from its CBOR"
)
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


class OgmiosSetupError(UnchainedError):
    """Ogmios runs a version or with flags Unchained cannot work with; the message says what
    to change."""


@dataclasses.dataclass(frozen=True, order=True)
class OgmiosVersion:
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse_version(text: str) -> OgmiosVersion:
    """The version in `/health`'s `version` (`v6.14.0`, `v6.14.0 (build)`)."""
    found = _VERSION.match(text.strip())
    if not found:
        raise OgmiosSetupError(f"Ogmios reports version {text!r}, which names no version: "
                               f"run {SUPPORTED}")  # fmt: skip
    major, minor, patch = found.groups()
    return OgmiosVersion(int(major), int(minor), int(patch or 0))


def check_version(version: OgmiosVersion) -> OgmiosVersion:
    """`version` when it is in the window; OgmiosSetupError saying what to run otherwise."""
    if (version.major, version.minor) < OLDEST:
        raise OgmiosSetupError(
            f"Ogmios {version} is older than the v6 protocol Unchained speaks: upgrade to "
            f"{SUPPORTED}"
        )
    if (version.major, version.minor) >= NEWEST_EXCLUDED:
        raise OgmiosSetupError(
            f"Ogmios {version} is newer than Unchained supports (7.0 renamed "
            f"maxReferenceScriptsSize, which pycardano's Ogmios client reads, and leaves out "
            f"empty transaction outputs): run {SUPPORTED}"
        )
    return version


def health_url(url: str) -> str:
    """Where Ogmios at `ws://host:port[/path]` serves `/health` (the same port, over HTTP)."""
    parsed = urlparse(url)
    scheme = "https" if parsed.scheme == "wss" else "http"
    return f"{scheme}://{parsed.netloc}{parsed.path.rstrip('/')}/health"


def read_health(url: str) -> dict[str, Any]:
    """Ogmios's `/health` document; ConnectionError when nothing answers there."""
    try:
        with urllib.request.urlopen(health_url(url), timeout=HEALTH_TIMEOUT_S) as response:
            document: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise OgmiosSetupError(f"{health_url(url)} answered HTTP {exc.code}: is this Ogmios "
                               "(its /health is on the WebSocket's port)?") from exc  # fmt: skip
    except urllib.error.URLError as exc:  # refused, no such host: what a socket would raise
        raise ConnectionError(f"{health_url(url)}: {exc.reason}") from exc
    except ValueError as exc:
        raise OgmiosSetupError(f"{health_url(url)} did not answer JSON: is this Ogmios?") from exc
    return document


def ogmios_version(health: dict[str, Any]) -> OgmiosVersion:
    """The version `/health` reports, checked against the window."""
    return check_version(parse_version(str(health.get("version", ""))))


def reward_balances(summaries: list[dict[str, Any]] | dict[str, dict[str, Any]]) -> dict[str, int]:
    """`queryLedgerState/rewardAccountSummaries` as credential (hex) -> lovelace: the list of
    6.13 and later (each names its `credential`), or the map by credential before."""
    if isinstance(summaries, dict):
        return {key: int(s["rewards"]["ada"]["lovelace"]) for key, s in summaries.items()}
    return {s["credential"]: int(s["rewards"]["ada"]["lovelace"]) for s in summaries}


def transaction_cbor(tx: dict[str, Any]) -> bytes:
    """A followed transaction's CBOR; OgmiosSetupError saying which flag is missing."""
    if "cbor" not in tx:
        raise OgmiosSetupError(f"Ogmios sent transaction {tx.get('id', '?')} without its CBOR: "
                               f"{CBOR_FLAG_FIX}")  # fmt: skip
    return bytes.fromhex(tx["cbor"])


async def check_cbor(url: str, since: dict[str, Any]) -> bool:
    """Whether Ogmios sends transactions' CBOR, read on the first transaction chain-sync
    meets after `since` (a point before a known transaction: a deployment's), up to the tip.
    True when it does; OgmiosSetupError when it does not; False when no transaction lies
    between `since` and the tip, or `since` is no longer on the chain (nothing to tell by)."""
    from offchain.chain.follower import RollForward, follow, tip_point
    from offchain.chain.ogmios import OgmiosError

    tip = await tip_point(url)
    if not isinstance(tip, dict):
        return False
    try:
        async for event in follow(url, [since]):
            if not isinstance(event, RollForward):
                continue
            for tx in event.block.get("transactions", []):
                transaction_cbor(tx)
                return True
            if event.block["slot"] >= tip["slot"]:
                return False
    except OgmiosError:  # no intersection: `since` was rolled back, or is another chain's
        return False
    return False
