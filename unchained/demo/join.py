"""What a second renter or a second provider needs to join the demo's market while it runs:
the market's URL and identity, the chain's Ogmios, the deployment file, and the commands, as
lines to paste into another terminal (a key of their own, funded by the devnet's faucet with
`unchained wallet fund`)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from unchained.demo.children import IDENTITY, PRICES, SLOT


def exports(values: dict[str, str]) -> str:
    return "export " + " ".join(f"{name}={shlex.quote(value)}" for name, value in values.items())


def join_lines(market_url: str, ogmios_url: str, deployment: Path, data_dir: Path) -> list[str]:
    """The settings and commands, one line each, indented for the demo's narration."""
    unchained = shlex.quote(str(Path(sys.executable).with_name("unchained")))
    chain = {"UNCHAINED_OGMIOS_URL": ogmios_url, "UNCHAINED_DEPLOYMENT": str(deployment)}
    renter = exports({
        "UNCHAINED_CONSUMER_MARKET_URL": market_url, **chain,
        "UNCHAINED_CONSUMER_KEY": str(data_dir / "keys" / "renter.skey"),
        "UNCHAINED_CONSUMER_STATE_DIR": str(data_dir / "renter"),
    })  # fmt: skip
    provider = exports({
        "UNCHAINED_PROVIDER_MARKET_URL": market_url,
        "UNCHAINED_PROVIDER_MARKET_IDENTITY": IDENTITY, **chain,
        "UNCHAINED_PROVIDER_CONFIG": str(data_dir / "provider-2" / "provider.toml"),
    })  # fmt: skip
    bundle = " ".join([
        *(f"--{name.replace('_', '-')} {size}" for name, size in SLOT.items()),
        *(f"--price-{name.replace('_', '-')} {price}"
          for name, price in PRICES.model_dump().items() if name != "gpu"),
    ])  # fmt: skip
    return [
        "To join this market while it runs, from another terminal:",
        "   a second renter:",
        f"      {renter}",
        f"      {unchained} wallet new",
        f'      {unchained} wallet fund "$({unchained} wallet address)" --ada 100',
        f"      {unchained} job init job.yaml && {unchained} job submit job.yaml",
        "   a second provider (as root, beside the docker engine):",
        f"      {provider}",
        f"      {unchained} provider init {bundle}",
        f"      {unchained} wallet fund ADDRESS --ada 100   # the address provider init printed",
        f"      {unchained} provider run",
    ]
