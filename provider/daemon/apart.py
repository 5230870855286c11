"""A batch transaction that falls back to its parts: when a batch cannot be built or is refused,
each of its items is tried alone, so one bad item (an escrow or a channel that cannot be
settled or claimed now) never holds up the others; it is reported and tried again next round."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger("unchained.provider")


async def apart(
    items: list[T],
    attempt: Callable[[list[T]], Awaitable[None]],
    failed: Callable[[T, Exception], None],
    errors: tuple[type[Exception], ...],
) -> None:
    """`attempt(items)`, or on one of `errors` `attempt([item])` for each item; an item that
    fails alone goes to `failed` with its error."""
    try:
        await attempt(items)
    except errors as exc:
        if len(items) == 1:
            failed(items[0], exc)
            return
        log.warning("a batch of %d failed (%s): each alone", len(items), exc)
        for item in items:
            await apart([item], attempt, failed, errors)
