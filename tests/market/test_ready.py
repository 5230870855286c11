"""/health and /ready of a market served over real HTTP: each dependency broken for real (the
chain link cut at a relay, PostgreSQL stopped, the leader's lock held by a process that does
not follow, the settler's wallet empty) and /ready seen to fail naming it, then to recover."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import httpx
import pytest
from pycardano import Network, PaymentSigningKey

from offchain.market.ops.probes import Observed
from offchain.market.ops.readiness import checks
from offchain.market.services.leadership import FileLock
from offchain.protocol.tx.txbuild import Wallet
from tests.market.client import serve
from tests.market.database import served_at_head
from tests.market.flow import FAST
from tests.market.postgres import Cluster, server_bin
from tests.market.relay import Relay
from tests.protocol.onchain import fund

WAIT_S = 60
# the SQLite file: the chain, the wallet and the follower are the same on every database, and
# the PostgreSQL test stops a server of its own
ONE_DATABASE = pytest.mark.parametrize("database_url", [""], ids=["sqlite"])


async def ready_until(http: httpx.AsyncClient, wanted: Callable[[dict], bool], what: str) -> dict:
    """/ready's answer once `wanted` holds for it (polled: the evidence, not a clock)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        answer = await http.get("/ready")
        body = answer.json()
        assert body["ready"] == (answer.status_code == 200), body
        if wanted(body):
            return body
        assert loop.time() < deadline, f"/ready never showed {what}: {body}"
        await asyncio.sleep(0.2)


def failing(body: dict) -> set[str]:
    return {name for name, check in body["checks"].items() if not check["ok"]}


def only(*names: str) -> Callable[[dict], bool]:
    return lambda body: failing(body) == set(names)


@ONE_DATABASE
async def test_ready_names_the_chain_and_the_settlers_funds(devnet, settings, tmp_path):
    """SQLite. An empty settler's wallet fails settler_funds until it is funded; a cut chain
    link fails chain (and follower: unknown) until it is mended. /health stays 200."""
    relay = Relay(devnet.port).start()
    key = PaymentSigningKey.generate()
    key.save(str(tmp_path / "settler.skey"))
    settler = Wallet.of(key, Network.TESTNET)
    settings = settings.model_copy(update={
        "ogmios_url": relay.url, "wallet_key": tmp_path / "settler.skey", **FAST,
        "ready_wallet_min_lovelace": 20_000_000,
    })  # fmt: skip
    with serve(served_at_head(settings)) as url, contextlib.closing(relay):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            body = await ready_until(http, only("settler_funds"), "the empty wallet alone")
            assert "holds 0 lovelace, below 20000000" in body["checks"]["settler_funds"]["detail"]
            assert body["checks"]["leader"]["detail"] == "this process leads"
            await fund(devnet, settler.address, 25_000_000)
            await ready_until(http, lambda body: body["ready"], "the funded wallet")

            relay.cut()
            body = await ready_until(http, lambda body: "chain" in failing(body), "no chain")
            assert f"Ogmios at {relay.url} does not answer" in body["checks"]["chain"]["detail"]
            assert (await http.get("/health")).json()["status"] == "alive"
            relay.start()
            await ready_until(http, lambda body: body["ready"], "the chain back")


@ONE_DATABASE
async def test_ready_fails_while_the_follower_stalls(devnet, settings):
    """A process that holds the leader's lock but does not follow (here: the test itself)
    leaves the follower behind: /ready fails once the chain is more than
    ready_follower_lag_blocks ahead of the block the market followed last, and recovers
    once the lock is let go and this market leads and catches up."""
    settings = served_at_head(settings.model_copy(update={**FAST, "ready_follower_lag_blocks": 2}))
    address = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET).address
    with serve(settings) as url:  # it leads and follows, then stops
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            await ready_until(http, lambda body: body["ready"], "a market that followed")
    lock = FileLock(settings)
    assert lock.acquire()
    try:
        with serve(settings) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                body = (await http.get("/ready")).json()
                assert body["checks"]["leader"]["detail"] == "another process leads"
                for _ in range(4):  # blocks the follower does not see
                    await fund(devnet, address, 2_000_000)
                body = await ready_until(http, only("follower"), "the lag alone")
                assert "blocks behind the tip (at most 2)" in body["checks"]["follower"]["detail"]
                lock.release()
                body = await ready_until(http, lambda body: body["ready"], "the catch-up")
                assert body["checks"]["leader"]["detail"] == "this process leads"
    finally:
        lock.release()


@pytest.mark.parametrize("database_url", [""], ids=["own-postgresql"])  # replaced below
@pytest.mark.postgres
async def test_ready_fails_while_postgresql_is_down(devnet, settings, caplog):
    """PostgreSQL stopped under a serving market: database fails (and the follower, whose
    height it holds, is unknown; leadership is lost), a request that reads it is answered 503
    to be tried again; started again, the market is ready again by itself, its bids for
    leadership made while the database was down no obstacle."""
    bin_dir = server_bin()
    assert bin_dir is not None
    cluster = Cluster(bin_dir).start()  # its own: the session's stays up for the others
    try:
        settings = settings.model_copy(update={"database_url": cluster.new_database(), **FAST})
        with serve(settings) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                await ready_until(http, lambda body: body["ready"], "a ready market")
                cluster.halt()
                body = await ready_until(
                    http, lambda b: {"database", "follower"} <= failing(b), "no database"
                )
                assert "the database does not answer" in body["checks"]["database"]["detail"]
                assert (await http.get("/health")).status_code == 200
                offers = await http.get("/offers")  # a route that reads it: 503, not 500
                assert offers.status_code == 503 and offers.headers["retry-after"], offers.text

                def failed_bid(body: dict) -> bool:  # leadership lost, a bid made meanwhile
                    return "no bid for leadership" in caplog.text and "leader" in failing(body)

                await ready_until(http, failed_bid, "a bid for leadership made while down")
                cluster.resume()
                await ready_until(http, lambda body: body["ready"], "the database back")
    finally:
        cluster.stop()


def test_no_leader_fails_leader():
    """Nobody holding the lock (the moment between two leaders, or every process stuck)."""
    seen = Observed(None, 10, None, 10, False, False, None, None)
    found = checks(seen, _settings())
    assert not found["leader"].ok
    assert found["leader"].detail == "no process leads: nobody follows the chain or settles"


def _settings():
    from offchain.market.settings import MarketSettings

    return MarketSettings()
