"""The provider's book of deployments: each a container it runs for one renter, paid by IOUs
on one of that renter's channels, reached only through its gateway. Three kinds: an `endpoint`
(a `kind: service` spec, HTTP at `/endpoints/<name>/...`, per request and/or per second), a
`pod` (a `kind: pod` spec, SSH through the gateway's TCP forwarder, per second) and a `job` (a
batch job, `provider.rentals.jobs`: per second until it exits, then its receipt and results).

One channel may pay for several deployments and its IOUs are cumulative, so what a channel
owes is summed over every deployment on it (`channel_due`): each due check is channel-wide.

SQLite in WAL mode beside the channel book (`<state_dir>/daemon/endpoints.sqlite`), so the
daemon starting containers and the gateway serving them share it across processes. Its commits
are `synchronous=NORMAL` (no fsync each): the money is the channel book's acknowledged IOU,
stored with `synchronous=FULL`, and every next IOU must reach it whatever `served` says, so a
`served` total that lags after a machine crash costs the provider nothing. A handle keeps the
rows it read (`get`, `due_on`: the gateway's lookups at each request) until another connection
commits (`PRAGMA data_version` moves), its own writes applied to them: what it reads is always
what is on disk.
"""

from __future__ import annotations

import builtins
import dataclasses
import re
import sqlite3
import threading
from pathlib import Path
from typing import Protocol

SCHEMA = """
CREATE TABLE IF NOT EXISTS deployment (
    name TEXT PRIMARY KEY,          -- unique: the path segment after /endpoints/
    kind TEXT NOT NULL,             -- endpoint | pod | job
    channel BLOB NOT NULL,          -- the renter's channel that pays for it
    renter_vkey BLOB NOT NULL,      -- the channel's renter key: signs its control requests
    spec_json TEXT NOT NULL,        -- the spec's canonical JSON, as the renter signed it
    state TEXT NOT NULL,            -- pending | running | stopped | failed
    reason TEXT NOT NULL,           -- why it failed or stopped ("" otherwise)
    image_digest TEXT NOT NULL,     -- the image that runs (sha256:...), once running
    upstream TEXT NOT NULL,         -- http://127.0.0.1:PORT[,http://...] once running
    public_port INTEGER NOT NULL,   -- a pod's port on the gateway's host (0 otherwise)
    price_per_request INTEGER NOT NULL,  -- lovelace
    price_per_second INTEGER NOT NULL,   -- lovelace
    created_ms INTEGER NOT NULL,    -- POSIX ms
    started_ms INTEGER NOT NULL,    -- POSIX ms; 0 until running
    stopped_ms INTEGER NOT NULL,    -- POSIX ms; 0 while not stopped
    requests INTEGER NOT NULL,      -- requests served so far
    served INTEGER NOT NULL,        -- lovelace of requests charged so far
    cold_ms INTEGER NOT NULL DEFAULT 0,       -- ms it spent scaled to zero (ended spells)
    cold_since_ms INTEGER NOT NULL DEFAULT 0  -- POSIX ms it scaled to zero; 0 while warm
)
"""
# Columns added since the first schema: a book made before gets them (ALTER TABLE, in order).
ADDED = (("cold_ms", "INTEGER NOT NULL DEFAULT 0"), ("cold_since_ms", "INTEGER NOT NULL DEFAULT 0"))
# How to admit a channel the channel book does not serve yet (the renter's first deploy on it
# names them): the daemon reads its output on chain and checks it as `channel admit` does.
ADMISSION = """
CREATE TABLE IF NOT EXISTS admission (
    channel BLOB PRIMARY KEY,
    utxo TEXT NOT NULL,             -- TXID#IX
    terms TEXT NOT NULL             -- its ChannelTerms, CBOR hex
)
"""
# A name is one URL path segment, readable in logs: no slash, no percent-encoding needed.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Names are per renter: the book stores `qualified` ones, the renter's key's first bytes before
# the name it chose (a docker name too). Two renters' "llm" never meet; a key sharing those 8
# bytes with another's (2^64 tries) could only take a name, never act on a deployment: every
# control request is checked against the row's whole key.
RENTER_TAG_BYTES = 8
ONE_UPSTREAM = r"https?://[^/?#\s,]+"
# "" until running; a replicated endpoint lists one upstream per replica, comma-separated
UPSTREAM = re.compile(rf"(?:{ONE_UPSTREAM}(?:,{ONE_UPSTREAM})*)?")
ENDPOINT, POD, JOB = "endpoint", "pod", "job"
KINDS = (ENDPOINT, POD, JOB)
PENDING, RUNNING, STOPPED, FAILED = "pending", "running", "stopped", "failed"
STATES = (PENDING, RUNNING, STOPPED, FAILED)
ENDED = (STOPPED, FAILED)
CHANNEL_BYTES = 28
VKEY_BYTES = 32


@dataclasses.dataclass(frozen=True)
class Rental:
    """One deployment (an endpoint or a pod): the book's row, field for column."""

    name: str
    kind: str  # "endpoint" | "pod" | "job"
    channel: bytes  # the renter's channel id: blake2b_224 of its terms
    renter_vkey: bytes  # 32 bytes: signs the control requests for it
    spec_json: str  # the ServiceSpec/PodSpec canonical JSON the renter signed
    state: str  # pending -> running -> stopped | failed
    reason: str  # why it failed or stopped ("" otherwise)
    image_digest: str  # "sha256:..." (the docker image id) once running
    upstream: str  # "http://127.0.0.1:PORT"[, one per replica]: "" until running
    public_port: int  # pods: the gateway's TCP port forwarding to its sshd (0 otherwise)
    price_per_request: int  # lovelace
    price_per_second: int  # lovelace
    created_ms: int  # POSIX ms
    started_ms: int = 0  # 0 until running; per-second billing counts from here
    stopped_ms: int = 0  # 0 while not stopped
    requests: int = 0
    served: int = 0  # lovelace charged for requests (the per-second part is `due_of`'s)
    cold_ms: int = 0  # ms spent scaled to zero, spells ended (not billed per second)
    cold_since_ms: int = 0  # when it scaled to zero (0 while a replica is warm)

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.public_name):
            raise ValueError(f"deployment name {self.name!r}: letters, digits, '.', '_', '-' "
                             "(a letter or digit first), at most 64")  # fmt: skip
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: one of {', '.join(KINDS)}")
        if self.state not in STATES:
            raise ValueError(f"state {self.state!r}: one of {', '.join(STATES)}")
        if len(self.channel) != CHANNEL_BYTES or len(self.renter_vkey) != VKEY_BYTES:
            raise ValueError(f"a channel id is {CHANNEL_BYTES} bytes, a renter key {VKEY_BYTES}")
        if not UPSTREAM.fullmatch(self.upstream):
            raise ValueError(f"upstream {self.upstream!r} is not http(s)://HOST[:PORT][,...]")
        numbers = (self.public_port, self.price_per_request, self.price_per_second,
                   self.created_ms, self.started_ms, self.stopped_ms, self.requests,
                   self.served, self.cold_ms, self.cold_since_ms)  # fmt: skip
        if min(numbers) < 0:
            raise ValueError("ports, prices, times, requests and served lovelace are never "
                             "negative")  # fmt: skip

    @property
    def public_name(self) -> str:
        """The name its renter chose (the book's `name` is `qualified` by the renter's key)."""
        return self.name.removeprefix(renter_tag(self.renter_vkey))

    @property
    def scaled_to_zero(self) -> bool:
        """Running with no replica warm: nothing billed per second until a request wakes it."""
        return self.cold_since_ms != 0

    @property
    def upstreams(self) -> list[str]:
        """One upstream URL per replica (none until running)."""
        return self.upstream.split(",") if self.upstream else []


def renter_tag(renter_vkey: bytes) -> str:
    return renter_vkey[:RENTER_TAG_BYTES].hex() + "."


def qualified(renter_vkey: bytes, name: str) -> str:
    """The book's name of the renter's deployment `name`."""
    return renter_tag(renter_vkey) + name


def due_of(endpoint: Rental, now_ms: int) -> int:
    """Lovelace `endpoint` has earned by `now_ms`: its requests charged plus its price per
    second for each whole second it ran warm (from started_ms to stopped_ms, or to now, less
    the time it spent scaled to zero)."""
    if not endpoint.started_ms:
        return endpoint.served
    until = endpoint.stopped_ms or now_ms
    cold = endpoint.cold_ms
    if endpoint.cold_since_ms:
        cold += max(0, until - endpoint.cold_since_ms)
    seconds = max(0, until - endpoint.started_ms - cold) // 1000
    return endpoint.served + endpoint.price_per_second * seconds


def channel_due(book: RentalBook, channel: bytes, now_ms: int) -> int:
    """Lovelace owed on `channel` by `now_ms`: `due_of` summed over every deployment it pays
    for (in one query: the gateway asks at each request)."""
    return book.due_on(channel, now_ms)


@dataclasses.dataclass(frozen=True)
class Started:
    """A deployment's containers answer: where (`upstream`, as the book stores it) and which
    image runs ("sha256:..." image id)."""

    upstream: str
    image_digest: str


class Starter(Protocol):
    """What runs one kind of deployment (`provider.rentals.starters.STARTERS` maps a kind to its
    factory): the daemon starts and stops through it, the gateway reads logs through it."""

    def start_deployment(self, deployment: Rental, gpu_uuids: list[str]) -> Started:
        """Run `deployment` (its spec_json), answering once healthy; an UnchainedError saying
        why not, nothing of it left."""
        ...

    def stop(self, name: str) -> None:
        """Remove what runs `name` (a pod keeps its workspace); a repeated stop does nothing."""
        ...

    def logs(self, name: str, lines: int) -> str:
        """The last `lines` lines of `name`'s output ("" when nothing runs under that name)."""
        ...


class RentalBook:
    def __init__(self, path: Path) -> None:
        """The book stored at `path` (made if missing)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=10000")  # another process's commit in progress
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # see the module's docstring
        self._db.execute(SCHEMA)
        have = {row[1] for row in self._db.execute("PRAGMA table_info(deployment)")}
        for column, kind in ADDED:
            if column not in have:
                self._db.execute(f"ALTER TABLE deployment ADD COLUMN {column} {kind}")
        self._db.execute(ADMISSION)
        self._db.execute("CREATE INDEX IF NOT EXISTS deployment_channel ON deployment (channel)")
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        # Rows read, kept while no other connection commits (PRAGMA data_version unchanged)
        # and updated by this one's own writes: the gateway reads a deployment and its
        # channel's due at each request, for which a query each is most of its cost.
        self._version = -1
        self._by_name: dict[str, Rental | None] = {}
        self._by_channel: dict[bytes, builtins.list[Rental]] = {}

    @classmethod
    def in_state_dir(cls, state_dir: Path) -> RentalBook:
        """The daemon's book: `<state_dir>/daemon/endpoints.sqlite`."""
        return cls(state_dir / "daemon" / "endpoints.sqlite")

    def close(self) -> None:
        self._db.close()

    def add(self, endpoint: Rental) -> None:
        """Record `endpoint`; ValueError if its name is taken (by a deployment in any state)."""
        columns = dataclasses.astuple(endpoint)
        try:
            with self._lock:
                self._db.execute(f"INSERT INTO deployment VALUES ({', '.join('?' * len(columns))})",
                                 columns)  # fmt: skip
                self._forget()
        except sqlite3.IntegrityError as error:
            raise ValueError(f"a deployment named {endpoint.name} exists already") from error

    def revive(self, endpoint: Rental, ended: Rental) -> bool:
        """Put `endpoint` in the place of `ended`, a pod that stopped and kept its workspace,
        with what `ended` earned carried in its `served` (so its channel's due never drops);
        whether it was done (False: the row changed since `ended` was read, e.g. forgotten)."""
        carried = dataclasses.replace(endpoint, served=due_of(ended, ended.stopped_ms))
        names = [field.name for field in dataclasses.fields(Rental)]
        return self._update(
            ended.name, ", ".join(f"{name} = ?" for name in names), dataclasses.astuple(carried),
            f"state IN ('{STOPPED}', '{FAILED}') AND stopped_ms = {int(ended.stopped_ms)}",
        )  # fmt: skip

    def get(self, name: str) -> Rental | None:
        with self._lock:
            self._fresh()
            if name not in self._by_name:
                rows = self._db.execute("SELECT * FROM deployment WHERE name = ?", (name,))
                self._by_name[name] = next((Rental(*row) for row in rows), None)
            return self._by_name[name]

    def list(self) -> list[Rental]:
        """Every deployment, by name."""
        return self._select("ORDER BY name")

    def on_channel(self, channel: bytes) -> builtins.list[Rental]:
        """The deployments `channel` pays for (every state: the stopped ones' money counts)."""
        return self._select("WHERE channel = ? ORDER BY name", (channel,))

    def due_on(self, channel: bytes, now_ms: int) -> int:
        """`channel_due`: `due_of` of each deployment on `channel`, summed."""
        return sum(due_of(endpoint, now_ms) for endpoint in self._kept_on(channel))

    def named_on(self, channel: bytes, public_name: str) -> Rental | None:
        """The deployment its renter named `public_name` on `channel` (a paid request names
        its channel in its IOU: whose endpoint it calls)."""
        found = (e for e in self._kept_on(channel) if e.public_name == public_name)
        return next(found, None)

    def _kept_on(self, channel: bytes) -> builtins.list[Rental]:
        """The rows on `channel`, read once while no other connection commits."""
        with self._lock:
            self._fresh()
            on_channel = self._by_channel.get(channel)
            if on_channel is None:
                rows = self._db.execute("SELECT * FROM deployment WHERE channel = ?", (channel,))
                on_channel = self._by_channel[channel] = [Rental(*row) for row in rows]
            return on_channel

    def set_running(self, name: str, upstream: str, image_digest: str, started_ms: int) -> None:
        """A pending deployment answers now at `upstream`: billed per second from `started_ms`.
        KeyError if no pending deployment is named so (stopped while it started)."""
        if not UPSTREAM.fullmatch(upstream):
            raise ValueError(f"upstream {upstream!r} is not http(s)://HOST[:PORT][,...]")
        updated = self._update(name, "state = ?, upstream = ?, image_digest = ?, started_ms = ?",
                               (RUNNING, upstream, image_digest, started_ms),
                               f"state = '{PENDING}'")  # fmt: skip
        if not updated:
            raise KeyError(f"no pending deployment named {name}")

    def set_warm(self, name: str, upstream: str, now_ms: int) -> None:
        """The running deployment `name`'s warm replicas answer at `upstream` ("" for none: it
        scaled to zero at `now_ms`, its per-second billing pauses until one is warm again).
        KeyError if no running deployment is named so."""
        if not UPSTREAM.fullmatch(upstream):
            raise ValueError(f"upstream {upstream!r} is not http(s)://HOST[:PORT][,...]")
        if upstream:  # warm again: the spell at zero ends, counted
            assignments = ("upstream = ?, cold_ms = cold_ms + CASE WHEN cold_since_ms = 0 "
                           "THEN 0 ELSE ? - cold_since_ms END, cold_since_ms = 0")  # fmt: skip
        else:  # a second scale-down keeps the first one's time
            assignments = ("upstream = ?, cold_since_ms = CASE WHEN cold_since_ms = 0 THEN ? "
                           "ELSE cold_since_ms END")  # fmt: skip
        values = (upstream, now_ms)
        if not self._update(name, assignments, values, f"state = '{RUNNING}'"):
            raise KeyError(f"no running deployment named {name}")

    def set_public_port(self, name: str, port: int) -> None:
        """The gateway's TCP port that forwards to the pod `name` (0: none any more)."""
        if not self._update(name, "public_port = ?", (port,)):
            raise KeyError(f"no deployment named {name}")

    def finish(self, name: str, state: str, reason: str, stopped_ms: int) -> None:
        """`name` is stopped or failed, for `reason`; its per-second billing ends at
        `stopped_ms`. A second finish keeps the first's state, reason and time; finishing a
        deployment no longer in the book does nothing (a stop may be retried)."""
        if state not in ENDED:
            raise ValueError(f"a deployment finishes {' or '.join(ENDED)}, not {state}")
        self._update(name, "state = ?, reason = ?, stopped_ms = ?", (state, reason, stopped_ms),
                     f"state NOT IN ('{STOPPED}', '{FAILED}')")  # fmt: skip

    def charge(self, name: str, lovelace: int, requests: int = 1) -> int:
        """Count `requests` served on `name` at `lovelace` (0 requests: the tokens of one
        counted already); the lovelace served in all since. KeyError if there is no such
        deployment (removed while the request was served)."""
        if lovelace < 0 or requests < 0:
            raise ValueError("a charge is never negative")
        with self._lock:
            row = self._db.execute(
                "UPDATE deployment SET requests = requests + ?, served = served + ? "
                "WHERE name = ? RETURNING channel, requests, served",
                (requests, lovelace, name),
            ).fetchone()
            if row is None:
                raise KeyError(f"no deployment named {name}")
            self._charged(name, *row)
        return int(row[2])

    def remove(self, name: str) -> None:
        """Forget `name` (a stopped pod's workspace gone, or the operator's choice); nothing
        happens if it is not here (a removal may be retried)."""
        with self._lock:
            self._db.execute("DELETE FROM deployment WHERE name = ?", (name,))
            self._forget()

    def note_admission(self, channel: bytes, utxo: str, terms_cbor_hex: str) -> None:
        """Where `channel` is and its terms, for the daemon's admission (the latest kept)."""
        with self._lock:
            self._db.execute("INSERT INTO admission VALUES (?, ?, ?) ON CONFLICT (channel) "
                             "DO UPDATE SET utxo = excluded.utxo, terms = excluded.terms",
                             (channel, utxo, terms_cbor_hex))  # fmt: skip

    def admission(self, channel: bytes) -> tuple[str, str] | None:
        """`note_admission`'s TXID#IX and terms CBOR hex for `channel`, if any."""
        with self._lock:
            row = self._db.execute("SELECT utxo, terms FROM admission WHERE channel = ?",
                                   (channel,)).fetchone()  # fmt: skip
        return None if row is None else (row[0], row[1])

    def _update(
        self, name: str, assignments: str, values: tuple[object, ...], guard: str = "1"
    ) -> bool:
        """Whether a row named `name` that meets `guard` was updated."""
        with self._lock:
            row = self._db.execute(
                f"UPDATE deployment SET {assignments} WHERE name = ? AND {guard} RETURNING name",
                (*values, name),
            ).fetchone()
            self._forget()
        return row is not None

    def _fresh(self) -> None:
        """Forget the rows read if another connection committed since (under the lock)."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self._version = version
            self._forget()

    def _forget(self) -> None:
        self._by_name.clear()
        self._by_channel.clear()

    def _charged(self, name: str, channel: bytes, requests: int, served: int) -> None:
        """The rows kept of `name` count this connection's charge (under the lock)."""
        if (kept := self._by_name.get(name)) is not None:
            self._by_name[name] = dataclasses.replace(kept, requests=requests, served=served)
        on_channel = self._by_channel.get(channel, [])
        for index, endpoint in enumerate(on_channel):
            if endpoint.name == name:
                on_channel[index] = dataclasses.replace(endpoint, requests=requests, served=served)

    def _select(self, where: str, values: tuple[object, ...] = ()) -> builtins.list[Rental]:
        with self._lock:
            rows = self._db.execute(f"SELECT * FROM deployment {where}", values).fetchall()
        return [Rental(*row) for row in rows]
