"""Payment channels driven on the devnet with the protocol's builders while a market follows
the chain, for the follower's and the explorer's channel tests: each move confirmed, then
awaited in the market's index as its explorer JSON shows it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from pycardano import Transaction

from devnet.process import DevnetProcess
from offchain.protocol.ledger.types import ChannelTerms
from offchain.protocol.tx import channel as channels
from offchain.protocol.tx.channel import Channel
from offchain.protocol.tx.deployment import Deployment
from offchain.protocol.tx.txbuild import Wallet
from tests.protocol.channels import iou, left
from tests.protocol.onchain import confirm


async def claim(
    devnet: DevnetProcess,
    deployment: Deployment,
    renter: Wallet,
    provider: Wallet,
    channel: Channel,
    amount: int,
) -> tuple[Transaction, Channel]:
    """The provider claims the renter's IOU for `amount` in all; the claim and the channel it
    leaves (the provider's payout is output 0, the channel output 1)."""
    claims = [(channel, iou(deployment, renter, channel, amount))]
    built = channels.claim_channels(devnet.context(), deployment, claims, provider.address)
    tx = await confirm(devnet, provider.sign(built))
    return tx, left(deployment, tx, 1)


async def top_up(
    devnet: DevnetProcess,
    deployment: Deployment,
    renter: Wallet,
    channel: Channel,
    terms: ChannelTerms,
    lovelace: int,
) -> tuple[Transaction, Channel]:
    """The renter's top-up (its key signs) of `lovelace`."""
    built = channels.top_up(devnet.context(), deployment, channel, terms, lovelace, renter.address)
    tx = await confirm(devnet, renter.sign(built))
    return tx, left(deployment, tx)


async def answered(
    http: httpx.AsyncClient,
    path: str,
    ready: Callable[[dict[str, Any]], bool],
    timeout_s: float,
    status: int = 200,
) -> dict[str, Any]:
    """The explorer's JSON at `path` once it answers `status` and `ready` holds for it
    (polled: the follower applies each block as it comes; a 404 until it indexed what `path`
    names, and again once a rollback took it back)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while True:
        answer = await http.get(path)
        if answer.status_code == status and ready(answer.json()):
            return answer.json()
        assert answer.status_code in (200, 404), answer.text
        assert loop.time() < until, f"{path}: {answer.text}"
        await asyncio.sleep(0.2)


async def indexed(
    http: httpx.AsyncClient, channel: Channel, moves: int, timeout_s: float = 60
) -> dict[str, Any]:
    """The channel's explorer JSON once the market indexed `moves` moves of it."""
    path = f"/api/explorer/channels/{channel.id.hex()}"
    return await answered(http, path, lambda page: len(page["events"]) == moves, timeout_s)


async def seen(http: httpx.AsyncClient, tx: Transaction, timeout_s: float = 60) -> None:
    """Once the market's chain index holds `tx` (the follower applied its block)."""
    await answered(http, f"/api/explorer/txs/{tx.id.payload.hex()}", bool, timeout_s)


async def forgotten(http: httpx.AsyncClient, channel: Channel, timeout_s: float = 60) -> None:
    """Once the market's index no longer holds the channel (a rollback took its open back)."""
    path = f"/api/explorer/channels/{channel.id.hex()}"
    await answered(http, path, bool, timeout_s, status=404)


def moves(page: dict[str, Any]) -> list[tuple[str, int, str]]:
    """Each move of a channel page's JSON: its name, its amount and its transaction."""
    return [(e["move"], e["amount"], e["tx_id"]) for e in page["events"]]
