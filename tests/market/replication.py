"""A PostgreSQL primary and its synchronous streaming standby, both throwaway clusters
(`tests.market.postgres`), for the failover test: the primary stopped as its host would die,
the standby promoted, the market reaching whichever one is the primary through one libpq
multi-host URL (`docs/market.md`, "Failover").

Replication needs no setting of its own past the defaults (wal_level=replica, ten WAL senders,
hot standby on, and initdb's pg_hba lines that trust replication from the local host); the pair
makes a replication role for the base backup, as an operator would, and the base backup a
replication slot, so the primary keeps the WAL its standby has not yet had.

Durability: fsync and full_page_writes stay off (the test kills server processes, never the
machine, so the operating system's cache keeps every write a process made). synchronous_commit
is on and the primary names its standby synchronous: a commit returns only once the standby
has the WAL on disk, so every write the market was told is committed survives the primary's
death. With asynchronous replication the last acknowledged commits may never reach the standby:
a quote answered 201 could vanish, or a settle transaction recorded and submitted could be
forgotten and built again for the same escrows."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.market.postgres import Cluster

REPLICATION = {"wal_level": "replica", "synchronous_commit": "on"}
ROLE = "replicator"
WAIT_S = 60


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll `check` until it holds (the evidence, not a clock); fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)


class ReplicatedPair:
    """A primary and a standby on ports of their own; `fail_over` kills the one and promotes
    the other."""

    def __init__(self, bin_dir: Path) -> None:
        self.primary = Cluster(bin_dir, REPLICATION)
        self.standby = Cluster(bin_dir, REPLICATION)

    def start(self) -> ReplicatedPair:
        """The primary, a role for replication, the standby from its base backup; returns
        once the standby streams and the primary waits for it at every commit."""
        self.primary.start()
        self.primary.query(f"CREATE ROLE {ROLE} WITH REPLICATION LOGIN")
        self.standby.start(source=self.primary, role=ROLE)
        wait_until(lambda: self.standby.query("SELECT pg_is_in_recovery()") is True,
                   "the standby in recovery")  # fmt: skip
        # set after the base backup: the standby's copy of the settings must not name a
        # synchronous standby, or once promoted (alone) each of its commits would wait forever
        self.primary.query("ALTER SYSTEM SET synchronous_standby_names = '*'")
        self.primary.query("SELECT pg_reload_conf()")
        wait_until(self.synchronous, "the standby streaming, synchronous")
        return self

    def synchronous(self) -> bool:
        """Whether the primary streams to its standby and waits for it at each commit."""
        sync = ("SELECT count(*) FROM pg_stat_replication "
                "WHERE state = 'streaming' AND sync_state = 'sync'")  # fmt: skip
        return self.primary.query(sync) == 1

    def new_database(self) -> str:
        """A new empty database on the primary (the standby replays it): its multi-host URL."""
        return self.url(self.primary.create_database())

    def url(self, database: str) -> str:
        """The libpq URL an operator gives the market: both hosts, and only a read-write
        session will do, so a connection goes to whichever of them is the primary now."""
        hosts = ",".join(f"127.0.0.1:{cluster.port}" for cluster in (self.primary, self.standby))
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def stop_primary(self) -> None:
        """The primary gone at once (`pg_ctl stop -m immediate`), as when its host dies."""
        self.primary.halt()

    def promote(self) -> None:
        """The standby becomes the primary; returns once it has left recovery."""
        self.standby.promote()
        wait_until(lambda: self.standby.query("SELECT pg_is_in_recovery()") is False,
                   "the standby promoted")  # fmt: skip

    def stop(self) -> None:
        for cluster in (self.standby, self.primary):
            cluster.stop()
