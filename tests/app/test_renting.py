"""Renting from the browser with a CIP-30 wallet (the test wallet, tests/wallet) on the devnet,
the real market and the real provider daemon (busybox jobs in docker): connect, a spec the
market refuses with the CLI's messages, a quote, the lock built from the wallet's UTxOs,
decoded and compared in the page, signed and submitted; the job watched live to its
settlement, its result downloaded and verified (sha256 against the signed receipt, whose
Ed25519 signature WebCrypto checks); the balance exact to the lovelace. Then what must be
refused: a wallet on the wrong network, a misbehaving market whose lock pays a stranger (the
page names it and never asks the wallet), a declined signature; a quoted job dropped, a
running one cancelled (the daemon stops it and bills what it ran), and with the daemon gone
a locked job refunded after its close. Each page photographed at phone width."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import docker
import httpx
import pytest
import yaml
from pycardano import Network, PaymentSigningKey, Transaction, TransactionOutput

from offchain.chain.follower import tip_point
from offchain.market.explorer.format import ada
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.ledger.types import EscrowDatum
from offchain.protocol.tx.txbuild import Wallet
from provider.images import recipes as images
from tests.app.renter import Renter, tampering
from tests.consumer.cli import tx_fee
from tests.consumer.test_sdk import travel_past
from tests.market.client import serve
from tests.protocol.onchain import balance, wallet
from tests.provider.daemon_harness import new_provider, settling_market, spec
from tests.wallet.wallet import BrowserWallet

pytestmark = pytest.mark.timeout(400)
FUNDS = 500_000_000
PLANTED = '<img src=x onerror="window.pwned=1">'


@pytest.fixture(scope="module")
def busybox() -> str:
    return images.busybox_image(docker.from_env())


@pytest.fixture(scope="module")
async def world(devnet, tmp_path_factory, busybox) -> AsyncIterator[dict[str, Any]]:
    """One market settling from its wallet and one started daemon for the module."""
    tmp_path = tmp_path_factory.mktemp("renting")
    deployment_file, _, settings = await settling_market(devnet, tmp_path)
    with serve(settings) as url:
        daemon, _ = await new_provider(devnet, tmp_path, deployment_file, url)
        try:
            await daemon.start().logged("offer published")
            # no kept-alive connection: the server closes one idle past 5 s as it is reused
            fresh = httpx.Limits(max_keepalive_connections=0)
            async with httpx.AsyncClient(base_url=url, timeout=60, limits=fresh) as http:
                yield {"url": url, "daemon": daemon, "http": http, "shots": tmp_path}
        finally:
            daemon.stop()
            daemon.reap()


async def renter_in(browser, devnet, world, funds: int = FUNDS, **knobs: Any) -> Renter:
    funded = await wallet(devnet, funds)
    test_wallet = BrowserWallet(funded, devnet.url, **knobs)
    return await Renter.open(browser, test_wallet, world["url"], world["shots"])


async def job_of(world, job_id: str) -> dict[str, Any]:
    return (await world["http"].get(f"/api/explorer/jobs/{job_id}")).json()


async def quoted(renter: Renter, job: dict[str, Any]) -> str:
    """The job typed into the form, checked and quoted; its id."""
    page = renter.page
    await renter.visit("/app/jobs/new")
    await page.fill("[name=image]", job["image"])
    await page.fill("[name=command]", "\n".join(job["command"]))
    for name in ("cpu_cores", "memory_mib", "disk_mib"):
        await page.fill(f"[name={name}]", str(job["resources"][name]))
    await page.fill("[name=max_duration_s]", str(job["max_duration_s"]))
    await page.fill("[name=max_price_ada]", str(job["max_price_lovelace"] / 1_000_000))
    await page.click("#quote")
    await page.locator("#quote-box").wait_for()
    return await renter.text("#job-link")


async def locked(renter: Renter, world, job: dict[str, Any]) -> str:
    """Quoted, the lock reviewed and signed; the page moves to the job's."""
    job_id = await quoted(renter, job)
    await renter.page.click("#build")
    await renter.page.locator("#sign").wait_for()
    await renter.page.click("#sign")
    await renter.page.wait_for_url(f"**/app/jobs/{job_id}")
    return job_id


async def state(renter: Renter, wanted: str, timeout_ms: float = 120_000) -> None:
    await renter.page.locator("#state", has_text=wanted).wait_for(timeout=timeout_ms)


async def lock_fee(devnet, world, job_id: str, since) -> tuple[int, dict[str, Any]]:
    shown = await job_of(world, job_id)
    return await tx_fee(devnet, shown["job"]["escrow_ref"].split("#")[0], since), shown


def settled_cost(shown: dict[str, Any]) -> int:
    """What a settled job cost its renter out of its lock: all but what the split returned."""
    quote = shown["job"]["quote"]
    split = settle_split(quote["lock_lovelace"], quote["price_per_unit"], shown["receipt"]["units"],
                         quote["max_units"], quote["fee_allowance"])  # fmt: skip
    return quote["lock_lovelace"] - split.consumer


async def test_rent_watch_and_verify(devnet, world, browser, busybox):
    renter = await renter_in(browser, devnet, world)
    page, http = renter.page, world["http"]
    start = balance(devnet, renter.wallet.wallet.address)
    since = await tip_point(devnet.url)
    await renter.connect()
    assert await renter.text("#balance") == ada(start)
    await renter.shoot("connect")

    # a pasted spec with no command: the CLI's own words, nothing signed
    job = spec(busybox, "echo started; sleep 2; echo 42 > /out/answer; echo done")
    planted = {k: v for k, v in job.items() if k != "command"} | {"env": {PLANTED: "x"}}
    broken = yaml.safe_dump(planted)
    await renter.visit("/app/jobs/new")
    await page.click("#yaml-box summary")
    await page.fill("#yaml", broken)
    await page.click("#quote")
    await page.locator("#problems").wait_for()
    cli = (await http.post("/api/app/spec/check", json={"text": broken})).json()["messages"]
    assert any("command: required field is missing" in line for line in cli)
    assert (await page.locator("#problems li").all_inner_texts()) == cli
    assert any(PLANTED in line for line in cli)  # shown as text, never run
    assert await page.evaluate("window.pwned") is None
    assert renter.wallet.signed == []
    await renter.shoot("new-job-refused")

    job_id = await quoted(renter, job)
    shown = (await job_of(world, job_id))["job"]
    quote = shown["quote"]
    assert await renter.text("#per-hour") == f"{ada(quote['price_per_unit'] * 3600)} per hour"
    assert await renter.text("#max-cost") == ada(quote["price_per_unit"] * quote["max_units"])
    assert await renter.text("#allowance") == ada(quote["fee_allowance"])
    assert await renter.text("#least-cost") == (
        f"{ada(quote['fee_allowance'])} + the lock's network fee, even if it never runs"
    )
    await renter.shoot("new-job-quote")
    await renter.sign_after_review("#build", "new-job-review")
    rows = await page.locator("#outputs li").all_inner_texts()
    assert "the job's escrow" in rows[0] and ada(quote["lock_lovelace"]) in rows[0]
    assert all("to you" in row for row in rows[1:])
    await page.wait_for_url(f"**/app/jobs/{job_id}")
    assert len(renter.wallet.signed) == 1

    await page.evaluate("window.sameDocument = true")
    await state(renter, "settled")
    assert await page.evaluate("window.sameDocument") is True  # live, no reload
    fee, shown = await lock_fee(devnet, world, job_id, since)
    await page.locator("#download").wait_for()
    await page.click("#download")
    verdict = page.locator("#verdict", has_text="Verified")
    await verdict.wait_for()
    assert shown["job"]["result_sha256"] in await verdict.inner_text()
    await renter.shoot("job-verified")
    await renter.visit("/app/jobs")
    row = page.locator(f"tr[data-job='{job_id}']")
    await row.wait_for()
    assert "settled" in await row.inner_text()
    await renter.shoot("jobs")

    spent = fee + settled_cost(shown)
    assert balance(devnet, renter.wallet.wallet.address) == start - spent
    assert renter.errors == []
    await page.close()


async def test_what_the_page_refuses(devnet, world, browser, busybox):
    # a wallet on mainnet is refused before anything is signed
    elsewhere = await renter_in(browser, devnet, world, network_id=1)
    await elsewhere.visit("/app")
    await elsewhere.page.click("button[data-wallet=testwallet]")
    await elsewhere.said("this market is on network id 0")
    await elsewhere.shoot("connect-wrong-network")
    await elsewhere.page.close()

    # a wallet too poor for the lock: said plainly before the market is asked
    poor = await renter_in(browser, devnet, world, funds=20_000_000)
    await poor.connect()
    await quoted(poor, spec(busybox, "echo never"))
    await poor.page.click("#build")
    await poor.said("Not enough ADA: your wallet holds 20.000000 ADA, the lock needs ")
    assert poor.wallet.signed == [] and await poor.page.locator("#review").is_hidden()
    await poor.shoot("new-job-too-poor")
    assert poor.errors == []
    await poor.page.close()

    renter = await renter_in(browser, devnet, world)
    page = renter.page
    await renter.connect()
    job_id = await quoted(renter, spec(busybox, "echo never"))
    stranger = Wallet.of(PaymentSigningKey.generate(), Network.TESTNET).address
    moved: list[int] = []

    def pay_a_stranger(outputs: list[TransactionOutput]) -> None:
        change = outputs[1]
        outputs[1] = TransactionOutput(stranger, change.amount)
        moved.append(change.amount.coin)

    await page.route("**/lock/build", tampering(pay_a_stranger))
    await page.click("#build")
    differs = page.locator("#differs li")
    await differs.first.wait_for()
    assert await differs.all_inner_texts() == [
        f"{ada(moved[0])} goes to {stranger}, not your wallet"
    ]
    assert "to someone else" in await page.locator("#outputs li").nth(1).inner_text()
    assert await page.locator("#sign").is_hidden()
    await renter.said("Not signed")
    await renter.shoot("new-job-tampered")
    await page.unroute("**/lock/build")

    # the escrow's lovelace as quoted, but its datum dearer than the quote
    def dearer(outputs: list[TransactionOutput]) -> None:
        escrow = outputs[0]
        datum = EscrowDatum.from_cbor(escrow.datum.to_cbor())
        datum.price_per_unit += 1
        outputs[0] = TransactionOutput(escrow.address, escrow.amount, datum=datum)

    await page.route("**/lock/build", tampering(dearer))
    await page.click("#build")
    price = (await job_of(world, job_id))["job"]["quote"]["price_per_unit"]
    await page.locator("#differs li", has_text="price_per_unit").wait_for()
    assert await differs.all_inner_texts() == [
        f"the escrow's price_per_unit is {price + 1}, the quote says {price}"
    ]
    assert await page.locator("#sign").is_hidden() and renter.wallet.signed == []
    await page.unroute("**/lock/build")

    # the honest lock, declined in the wallet: said plainly, nothing submitted
    renter.wallet.decline = True
    await page.click("#build")
    await page.locator("#sign").wait_for()
    await page.click("#sign")
    await renter.said("You declined to sign (user declined).")
    assert renter.wallet.signed == []
    assert (await job_of(world, job_id))["job"]["state"] == "quoted"

    # the quoted job dropped from its page
    await renter.visit(f"/app/jobs/{job_id}")
    await page.locator("#cancel").wait_for()
    await page.click("#cancel")
    await renter.said("Cancelled: nothing was locked.")
    await state(renter, "expired", 10_000)
    await renter.shoot("job-dropped")
    assert renter.errors == []

    # an id that is no job's: a page that says so, the id shown as text
    answer = await page.goto(f"{world['url']}/app/jobs/{PLANTED}")
    assert answer is not None and answer.status == 404
    assert PLANTED in await renter.text("[data-testid=missing]")
    assert await page.evaluate("window.pwned") is None
    await page.close()


async def test_cancel_then_refund(devnet, world, browser, busybox):
    renter = await renter_in(browser, devnet, world)
    page = renter.page
    start = balance(devnet, renter.wallet.wallet.address)
    since = await tip_point(devnet.url)
    await renter.connect()

    # running: the cancel asks the provider, whose daemon stops it and bills what it ran
    job_id = await locked(renter, world, spec(busybox, "echo started; sleep 50", seconds=60))
    await state(renter, "running")
    await page.locator("#cancel").wait_for()
    await renter.sign_after_review("#cancel", "job-cancel-review")
    await renter.said("the provider stopped it")
    await state(renter, "settled")
    fee, shown = await lock_fee(devnet, world, job_id, since)
    assert shown["job"]["outcome"] == "cancelled"
    spent = fee + settled_cost(shown)
    assert balance(devnet, renter.wallet.wallet.address) == start - spent

    # the daemon gone, a job locked on its still-listed offer: refunded after its close
    world["daemon"].stop()
    start, since = start - spent, await tip_point(devnet.url)
    job_id = await locked(renter, world, spec(busybox, "echo never", seconds=5))
    await state(renter, "funded")
    fee, shown = await lock_fee(devnet, world, job_id, since)
    quote = shown["job"]["quote"]
    await travel_past(devnet, quote["deadline_ms"] + quote["settle_window_ms"])
    await page.reload()
    await page.locator("#refund").wait_for()
    await renter.sign_after_review("#refund", "job-refund-review")
    await renter.said("Refund submitted")
    await state(renter, "refunded")
    refund = [tx for tx in renter.wallet.signed if tx != renter.wallet.signed[0]][-1]
    refund_fee = Transaction.from_cbor(refund).transaction_body.fee
    assert balance(devnet, renter.wallet.wallet.address) == start - fee - refund_fee
    await renter.shoot("job-refunded")
    assert renter.errors == []
    await page.close()
