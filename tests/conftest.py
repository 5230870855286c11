"""Shared fixtures: a real devnet process reached over its WebSocket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from offchain.devnet.process import DevnetProcess


@pytest.fixture(scope="session")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevnetProcess]:
    """One devnet shared by the tests that only add transactions (no rollback, no reset)."""
    process = DevnetProcess(tmp_path_factory.mktemp("devnet") / "data").start()
    yield process
    process.stop()


@pytest.fixture
def own_devnet(tmp_path) -> Iterator[DevnetProcess]:
    """A devnet of the test's own, for rollbacks, resets and restarts."""
    process = DevnetProcess(tmp_path / "data").start()
    yield process
    process.stop()
