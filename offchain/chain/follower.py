"""An async chain-sync follower: roll-forward and roll-backward events from a stored point."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

from offchain.chain.ogmios import Ogmios, OgmiosError

INTERSECTION_NOT_FOUND = 1000  # Ogmios's findIntersection error: no point is on the chain

Point = dict[str, Any] | str  # {"slot", "id"} or "origin"


@dataclasses.dataclass(frozen=True)
class RollForward:
    block: dict[str, Any]  # the Ogmios block, transactions with their CBOR
    tip: dict[str, Any]

    @property
    def point(self) -> Point:
        return {"slot": self.block["slot"], "id": self.block["id"]}


@dataclasses.dataclass(frozen=True)
class RollBackward:
    point: Point  # everything after this point is no longer on the chain
    tip: dict[str, Any]


ChainEvent = RollForward | RollBackward


async def follow(url: str, points: list[Point] | None = None) -> AsyncGenerator[ChainEvent, None]:
    """Yield chain events forever, starting after the newest of `points` found on chain.

    Pass the points you stored (newest first, ending with "origin" to fall back to the
    start). The first event is a RollBackward to the intersection, so a consumer can drop
    anything it recorded after it.
    """
    async with Ogmios(url) as ogmios:
        await ogmios.request("findIntersection", {"points": points or ["origin"]})
        async for event in _events(ogmios):
            yield event


async def follow_from_tip(url: str) -> AsyncGenerator[ChainEvent, None]:
    """`follow` from the tip as it is now. A tip read first and followed later may be gone by
    then (a fork orphaned it: no intersection); here the intersection is found on the same
    connection, again with a fresh tip if a fork came in between, and later forks come as
    RollBackward events. The first event, a RollBackward to the tip, says it is in place."""
    async with Ogmios(url) as ogmios:
        while True:
            tip = await ogmios.request("queryNetwork/tip")
            try:
                await ogmios.request("findIntersection", {"points": [tip]})
            except OgmiosError as exc:
                if exc.code != INTERSECTION_NOT_FOUND:
                    raise
                continue
            break
        async for event in _events(ogmios):
            yield event


async def _events(ogmios: Ogmios) -> AsyncGenerator[ChainEvent, None]:
    while True:
        result = await ogmios.request("nextBlock")
        if result["direction"] == "forward":
            yield RollForward(result["block"], result["tip"])
        else:
            yield RollBackward(result["point"], result["tip"])


async def tip_point(url: str) -> Point:
    async with Ogmios(url) as ogmios:
        point: Point = await ogmios.request("queryNetwork/tip")
    return point
