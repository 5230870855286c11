"""Shared fixtures: a real devnet process reached over its WebSocket. And the markers that
say what a test needs (`devnet`, `docker`, `postgres`, `browser`; `gpu` is set by hand),
given here from the fixtures it uses, so scripts/test-fast.sh runs the unit tests alone (and
leaves out `slow`, set by hand where a test takes seconds of its own: the compiler, a CLI in
a child process). A test module that starts such a thing itself (a CLI or the demo in a
child process) sets its `pytestmark`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devnet.process import DevnetProcess
from tests.chains import chain_under_test, running
from tests.registry import LocalRegistry, local_registry
from tests.token_service import GuardedRegistry, guarded_registry

# marker: the fixtures that start it (a fixture used through another counts)
NEEDS = {
    "devnet": {"devnet", "own_devnet", "slow_devnet"},
    "docker": {"busybox", "python", "runner", "registry", "guarded"},
    "postgres": {"postgresql_cluster", "postgresql_url"},
    "browser": {"browser"},
}
DOCKER_CLIENT = "tests/provider"  # where `client` is the engine's (the explorer's is HTTP)
# Modules of a minute or more each (the demos in fresh clones, the compiler's rebuild, the Ray
# fleet, the daemons killed and the markets crashed), run first: pytest-xdist hands whole
# modules to its workers in collection order (--dist loadfile), and the longest started last
# would decide when the suite ends. scripts/test.sh prints the slowest modules of each run.
LONGEST_FIRST = (
    "tests/test_demo.py",
    "tests/test_demo_services.py",
    "tests/contracts/test_build.py",
    "tests/provider/test_fleet.py",
    "tests/market/test_crash.py",
    "tests/provider/test_daemon_recovery.py",
    "tests/contracts/test_validators_devnet.py",
    "tests/consumer/test_external_tx.py",
    "tests/protocol/test_escrow_attacks.py",
    "tests/provider/test_failover_daemon.py",
    "tests/market/test_leadership.py",
    "tests/consumer/test_endpoint_deploy.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {module: rank for rank, module in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], len(first)))  # stable
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in NEEDS.items():
            if used & fixtures:
                item.add_marker(marker)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("database_url") == "postgresql":
            item.add_marker("postgres")
        definitions = item._fixtureinfo.name2fixturedefs.get("client", ())  # type: ignore[attr-defined]
        if any(d.baseid.startswith(DOCKER_CLIENT) for d in definitions):
            item.add_marker("docker")


@pytest.fixture(scope="session")
def devnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevnetProcess]:
    """One devnet shared by the tests that only add transactions (no rollback, no reset)."""
    yield from running(chain_under_test(tmp_path_factory.mktemp("devnet") / "data"))


@pytest.fixture
def own_devnet(tmp_path) -> Iterator[DevnetProcess]:
    """A devnet of the test's own, for rollbacks, resets and restarts."""
    yield from running(chain_under_test(tmp_path / "data"))


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """A real registry (Debian's docker-registry) on a free local port, empty; stopped at the
    end. `LocalRegistry.push` puts a locally built image in it."""
    with local_registry(tmp_path_factory.mktemp("registry")) as started:
        yield started


@pytest.fixture(scope="session")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuardedRegistry]:
    """A real registry behind a token service the test runs (`tests.token_service`): anyone
    pulls outside `private/`, only its account inside."""
    with guarded_registry(tmp_path_factory.mktemp("guarded")) as started:
        yield started
