"""The real daemon (`unchained provider run`, a child process) claims channels from the book
it shares with the process that takes IOUs (here the test, as the gateway will): the first IOU
is claimed at the next round, and when the renter starts a close the next one is claimed at
once, an hour before the next round that claims all; the provider gains the IOUs less the
claims' fees, to the lovelace, and `provider status` counts them: its net income is that gain."""

from __future__ import annotations

import asyncio
import json
import re

from typer.testing import CliRunner

from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.protocol.ledger.amounts import ada
from offchain.protocol.tx import channel as channels
from provider.config import DaemonSettings
from provider.daemon.chain import Chain
from provider.daemon.channel_claims import admit
from provider.money.channel_book import ChannelBook
from tests.protocol.channels import CLOSE_MS, DEPOSIT, iou, open_on
from tests.protocol.onchain import balance, confirm, wallet
from tests.provider.daemon_harness import daemon_on_market, quiet_market
from unchained.cli import app

CHANNEL_SETTINGS = {
    "channel_claim_interval_s": 3600,  # after the first claim, only a close is claimed
    "channel_min_deposit_lovelace": DEPOSIT,
    "channel_min_close_period_ms": CLOSE_MS,
}


async def claimed(book: ChannelBook, channel: bytes, lovelace: int, timeout_s: float = 60) -> None:
    """Until the book shows `lovelace` claimed on chain for `channel`."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while (entry := book.get(channel)) is None or entry.view.claimed < lovelace:
        assert loop.time() < until, f"channel {channel.hex()}: {entry}"
        await asyncio.sleep(0.2)
    assert entry.view.claimed == lovelace


async def test_the_daemon_claims_the_latest_iou_and_a_closing_channel_at_once(devnet, tmp_path):
    deployment_file, deployment, settings = await quiet_market(devnet, tmp_path)
    async with daemon_on_market(
        devnet, tmp_path, deployment_file, settings, bundles=1, **CHANNEL_SETTINGS
    ) as (daemon, provider, _):
        book = ChannelBook.in_state_dir(
            daemon.state_dir, deployment.network_id, deployment.channel_hash, credit=0
        )
        renter = await wallet(devnet)
        channel, terms, _ = await open_on(devnet, deployment, renter, provider)
        before = balance(devnet, provider.address)
        rules = DaemonSettings(**CHANNEL_SETTINGS)
        chain = Chain(devnet.url, devnet.context(), deployment, provider)
        admit(chain, book, channel.utxo.input, terms, rules)
        book.accept(iou(deployment, renter, channel, 1_000_000))
        await claimed(book, channel.id, 1_000_000)

        book.accept(iou(deployment, renter, channel, 1_700_000))
        now_at = parse_out_ref(book.get(channel.id).view.utxo)  # moved by the claim
        moved = channels.read_channel(deployment, utxo_at(devnet.context(), now_at))
        close = channels.start_close(devnet.context(), deployment, moved, terms, renter.address)
        await confirm(devnet, renter.sign(close))
        await claimed(book, channel.id, 1_700_000)

        fees = [
            int(fee) for fee in re.findall(r"claiming 1 channel\(s\).* fee (\d+)", daemon.log())
        ]
        assert len(fees) == 2
        assert balance(devnet, provider.address) - before == 1_700_000 - sum(fees)

        command = ["provider", "status", "--config", str(daemon.config), "--ogmios-url",
                   devnet.url, "--deployment", str(daemon.deployment_file)]  # fmt: skip
        shown, read = (CliRunner().invoke(app, command + flag) for flag in (["--json"], []))
        assert shown.exit_code == read.exit_code == 0, shown.output + read.output
        status = json.loads(shown.output)
        assert status["channels"] == {
            "open": 0, "closing": 1, "claimed_lovelace": 1_700_000, "unclaimed_lovelace": 0,
        }  # fmt: skip
        assert status["income"] == {
            "payouts": 0, "claimed": 1_700_000, "allowances": 0, "fees": sum(fees),
            "net": balance(devnet, provider.address) - before,
        }  # fmt: skip
        net = ada(status["income"]["net"])
        assert f"net income: {net} = settled 0.000000 ADA + claimed 1.700000 ADA" in read.output
