"""`unchained provider channel admit | list` against the devnet: a channel opened for this
provider is admitted and listed; one opened for another provider is refused with the reason,
and the book stays empty."""

from __future__ import annotations

import asyncio
import json

from pycardano import Network
from typer.testing import CliRunner

from devnet.genesis import ADA
from offchain.protocol.tx.txbuild import Wallet
from provider.config import DaemonSettings
from provider.keys import load_key
from tests.protocol.channels import open_on
from tests.protocol.onchain import fund, wallet
from unchained.cli import app

cli = CliRunner()


async def test_a_channel_is_admitted_and_listed_and_another_providers_is_refused(
    devnet, deployment, deployment_path, tmp_path
) -> None:
    state, config = tmp_path / "state", tmp_path / "provider.toml"
    made = cli.invoke(app, ["provider", "init", "--config", str(config), "--state-dir", str(state)])
    assert made.exit_code == 0, made.output
    provider = Wallet.of(load_key(state), Network.TESTNET)
    await fund(devnet, provider.address, 10 * ADA)
    renter = await wallet(devnet)
    hour = DaemonSettings().channel_min_close_period_ms  # the default a new config has
    ours, terms, _ = await open_on(devnet, deployment, renter, provider, close_period_ms=hour)
    other = await wallet(devnet)
    theirs, their_terms, _ = await open_on(devnet, deployment, renter, other, close_period_ms=hour)

    async def channel(*args: str, code: int = 0) -> str:
        command = ["provider", "channel", *args, "--ogmios-url", devnet.url, "--deployment",
                   str(deployment_path), "--config", str(config)]  # fmt: skip
        result = await asyncio.to_thread(cli.invoke, app, command)  # it runs an event loop
        assert result.exit_code == code, result.output
        return result.output

    refused = await channel(
        "admit", f"{theirs.utxo.input.transaction_id}#0", their_terms.to_cbor().hex(), code=1
    )
    assert "another payout address" in refused
    assert "no channels" in await channel("list")

    admitted = await channel("admit", f"{ours.utxo.input.transaction_id}#0", terms.to_cbor().hex())
    assert f"serving channel {ours.id.hex()}" in admitted
    (row,) = json.loads(await channel("list", "--json"))
    assert row["channel"] == ours.id.hex() and row["state"] == "open"
    assert row["claimed"] == row["latest_iou"] == 0 and row["capacity"] > 0
