"""The chain the tests run on: `UNCHAINED_TEST_CHAIN=realistic` makes the fixtures' devnets
make blocks as Praos does (one in 20 slots on average, on scaled time) and fork now and then,
so that the end-to-end tests run on a chain that behaves like mainnet's; the default,
`instant`, makes a block as soon as a transaction waits."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devnet.process import SCALED_SLOT_LENGTH_MS, DevnetProcess

TEST_CHAIN = os.environ.get("UNCHAINED_TEST_CHAIN", "instant")
if TEST_CHAIN not in ("instant", "realistic"):
    raise pytest.UsageError(f"UNCHAINED_TEST_CHAIN is instant or realistic, not {TEST_CHAIN!r}")
# The forks of a realistic test chain: one block in 10 taken back, up to 2 deep. Every
# chain starts at the same slot, so a seed gives each the same leader slots and forks:
# UNCHAINED_TEST_CHAIN_SEED picks another schedule.
FORK_DEPTH_MAX = 2
SEED = os.environ.get("UNCHAINED_TEST_CHAIN_SEED", "0")
REALISTIC_FORKS = ("--fork-rate", "1/10", "--fork-depth-max", str(FORK_DEPTH_MAX), "--seed", SEED)


def realistic_chain(data_dir: Path) -> DevnetProcess:
    """A realistic devnet on scaled time, forking as `REALISTIC_FORKS` says (not started)."""
    return DevnetProcess.realistic(data_dir, *REALISTIC_FORKS)


def chain_under_test(data_dir: Path) -> DevnetProcess:
    """A devnet of the profile UNCHAINED_TEST_CHAIN names (not started)."""
    return realistic_chain(data_dir) if TEST_CHAIN == "realistic" else DevnetProcess(data_dir)


def confirmations(devnet: DevnetProcess) -> int:
    """The blocks the market waits on `devnet` before it funds a job: one on an instant
    chain; on a realistic one more than its deepest fork, as an operator on mainnet chooses
    them. (The daemons keep `confirm_blocks` 1 in the tests: the fake markets hand an
    assignment out once, and the daemon counts depth from its first sight.)"""
    return FORK_DEPTH_MAX + 1 if devnet.profile == "realistic" else 1


def blocks_during(devnet: DevnetProcess, wall_ms: int) -> int:
    """The blocks `devnet` makes on average in `wall_ms` of wall time: none on an instant
    chain (a block comes only for a transaction); on a realistic one, whose time runs 40
    times fast, a wall-clock poll spans blocks it would not on mainnet (2 s: 4 blocks here,
    a tenth of one there)."""
    if devnet.profile != "realistic":
        return 0
    mean_block_ms = SCALED_SLOT_LENGTH_MS * 20  # one leader slot in 20 (f = 1/20)
    return -(-wall_ms // mean_block_ms)


def running(process: DevnetProcess) -> Iterator[DevnetProcess]:
    """A fixture's body: the devnet started, then stopped."""
    yield process.start()
    process.stop()


@pytest.fixture(scope="module", name="devnet")
def realistic_devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevnetProcess]:
    """A module's own realistic devnet, whatever UNCHAINED_TEST_CHAIN says: a module that
    imports it runs its tests (its own, or key flows imported from elsewhere) on a forking
    chain in the normal suite. Fixtures of a wider scope that use `devnet` (a session's
    deployment) must then be given in the module too."""
    yield from running(realistic_chain(tmp_path_factory.mktemp("realistic") / "data"))
