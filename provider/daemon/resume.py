"""Resume points: where a chain search for the spend of an output may start, and how deep a
block is. A search starts at the newest of its points still on chain (`findIntersection`),
so one point is not enough: a fork orphans the block it names, and the next one back is all
that is left. Points are kept newest first, the gaps between them growing geometrically
(1, 2, 4, ... blocks), so after a rollback of d blocks a surviving point lies within about 4d
blocks of the tip, a dozen points covering Cardano's k = 2160. Each carries its block's
height (Ogmios answers a point as `{slot, id}` only: the height travels beside it)."""

from __future__ import annotations

from typing import Any

from offchain.chain.follower import Point
from offchain.chain.ogmios import OgmiosError, request_sync

Block = dict[str, Any]  # {"slot", "id", "height"}: a point with its block's height
INTERSECTION_NOT_FOUND = 1000  # Ogmios: none of the points is on the chain


def tip_block(url: str) -> Block:
    """The tip with its height, in one answer (a chain-sync intersection at the origin tells
    the tip as {slot, id, height}; two queries could straddle a new block)."""
    tip: Block = request_sync(url, "findIntersection", {"points": ["origin"]})["tip"]
    return {"slot": tip["slot"], "id": tip["id"], "height": tip["height"]}


def point_of(block: Point) -> Point:
    """The point as Ogmios takes it: {slot, id} (or "origin"), no height."""
    return block if isinstance(block, str) else {"slot": block["slot"], "id": block["id"]}


def with_point(points: list[Block], newest: Block) -> list[Block]:
    """`points` (newest first) with `newest` in front, thinned to the oldest point of each
    span of 1, 2-3, 4-7, 8-15, ... blocks back from `newest` (the oldest point is always
    kept). Points at or above its height are dropped: the same block, or an orphaned fork's."""
    kept = {0: newest}
    for point in points:  # newest first: an older point of the same span replaces a newer
        back = newest["height"] - point["height"]
        if back > 0:
            kept[back.bit_length()] = point
    return [kept[span] for span in sorted(kept)]


def depth(url: str, block: Block) -> int | None:
    """How many blocks deep `block` is now (1: the tip), None once it is off the chain."""
    try:
        found = request_sync(url, "findIntersection", {"points": [point_of(block)]})
    except OgmiosError as exc:
        if exc.code == INTERSECTION_NOT_FOUND:
            return None
        raise
    return int(found["tip"]["height"]) - int(block["height"]) + 1
