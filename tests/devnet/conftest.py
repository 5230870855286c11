"""A devnet whose slots last a minute: blocks come only when a test forges one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devnet.process import DevnetProcess
from offchain.chain.ogmios import request

SLOW_SLOT_MS = 60_000  # an empty block only every 20 minutes


@pytest.fixture(scope="module")
def slow_devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevnetProcess]:
    """For tests that need the tip to stay put (a parked nextBlock) or the mempool to keep
    what was submitted; `forge` makes the next block."""
    process = DevnetProcess(tmp_path_factory.mktemp("slow") / "data", SLOW_SLOT_MS).start()
    yield process
    process.stop()


async def forge(devnet: DevnetProcess) -> dict:
    """Travel one slot ahead: the devnet forges a block there with what its mempool holds."""
    return (await request(devnet.url, "devnet/advanceTime", {"slots": 1}))["tip"]
