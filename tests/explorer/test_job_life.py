"""A real job's life on the devnet, watched through the explorer in Chromium: a scripted
provider and consumer drive the market over HTTP (as tests/market do), the market's own
follower and batcher fund and settle it, and the job page's timeline grows without a reload;
the settlement link opens that transaction, whose decoded datum is the escrow's on chain.
Text planted by the parties (script tags in the command, environment, logs and GPU model) is
shown, never run. Every page is photographed at phone and desktop sizes."""

from __future__ import annotations

import hashlib

import httpx
from sqlmodel import Session

from offchain.market.db import make_engine
from offchain.market.services import storage
from offchain.protocol import escrow as escrows
from offchain.protocol.metering import MeteringRecord, Sample
from offchain.protocol.payloads import receipt_payload, sign
from offchain.protocol.split import settle_split
from tests.explorer.viewer import Viewer
from tests.market.client import Party, serve
from tests.market.flow import Locked, accept, leader_settings, lock, wait_for
from tests.market.test_lifecycle import PRICE, SPEC, job_request, offer_terms
from tests.protocol.onchain import wallet

PLANTED = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
GPU = "<script>window.pwned=3</script> H100"
UNITS = 42


def metering(job: str) -> MeteringRecord:
    """A record as the provider's runner writes one: a second of CPU-heavy samples."""
    samples = [Sample(t_ms=t * 100, cpu_ns=t * 150_000_000, memory_bytes=(t + 1) << 26, pids=3)
               for t in range(11)]  # fmt: skip
    return MeteringRecord(
        job_id=job, image_id="sha256:" + "ab" * 32, gpu_uuids=[], cpu_cores=2, memory_mib=4096,
        disk_mib=1024, started_at_ms=0, finished_at_ms=1000, wall_ms=1000, billable_units=UNITS,
        exit_code=0, oom_killed=False, timed_out=False, cpu_ns=1_500_000_000,
        memory_peak_bytes=11 << 26, pids_peak=3, pids_limit=256, gpu_usage=[],
        sample_interval_ms=100, samples=samples, gpu_samples=[], gap=False,
    )  # fmt: skip


def keep_record(settings, record: MeteringRecord) -> None:
    """The market's API takes no metering upload yet: store the record where the explorer looks
    for it, content-addressed by the receipt's evidence hash, as an upload would."""
    body = record.canonical_json()
    path = storage.blob_path(settings.blob_dir, record.digest())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    engine = make_engine(settings)
    with Session(engine) as session:
        storage.record_blob(session, record.digest(), len(body))
        session.commit()
    engine.dispose()


async def run_and_receipt(provider: Party, deployment, locked: Locked, settings) -> str:
    """The scripted provider's work: logs, result, metering record and the signed receipt."""
    await accept(provider, deployment, locked)
    path = f"/jobs/{locked.job}"
    assert (await provider.send("POST", f"{path}/logs", {"lines": ["start", PLANTED]})).is_success
    archive = b"the result archive"
    assert (await provider.send("PUT", f"{path}/result", raw=archive)).is_success
    record = metering(locked.job)
    keep_record(settings, record)
    result, evidence = hashlib.sha256(archive).digest(), bytes.fromhex(record.digest())
    signed = sign(provider.wallet.key, receipt_payload(
        deployment.network_id, deployment.escrow_hash, locked.escrow.input, UNITS, result,
        evidence,
    ))  # fmt: skip
    body = {"units": UNITS, "result_hash": result.hex(), "evidence_hash": evidence.hex(),
            "signature": signed.hex()}  # fmt: skip
    answer = await provider.send("POST", f"{path}/receipt", body)
    assert answer.status_code == 200, answer.text
    return result.hex()


async def test_a_jobs_life_through_the_explorer(
    devnet, market_deployment, settings, tmp_path, browser, artifacts
):
    made, _market = await leader_settings(settings, devnet, tmp_path)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = Party.new(http, made.identity, await wallet(devnet))
            offered = await provider.send("POST", "/offers", offer_terms(provider, gpu_model=GPU))
            assert offered.status_code == 201, offered.text
            consumer = Party.new(http, made.identity, await wallet(devnet))
            request = job_request(consumer, command=["echo", PLANTED], env={"NOTE": PLANTED})
            quoted = await consumer.send("POST", "/jobs", request)
            assert quoted.status_code == 201, quoted.text
            job = quoted.json()["job_id"]

            view = await Viewer.open_in(browser, url, artifacts)
            page = view.page
            await view.visit(f"/explorer/jobs/{job}")
            await page.evaluate("window.sameDocument = true")
            assert await page.locator("#timeline .event").count() == 2  # requested, quoted
            # keyboard: the first Tab reaches the skip link, which moves focus to the content
            await page.keyboard.press("Tab")
            assert await page.evaluate("document.activeElement.textContent") == "Skip to content"

            locked = await lock(devnet, market_deployment, consumer, job)
            await page.locator("#timeline .state-funded").first.wait_for(timeout=60_000)
            result = await run_and_receipt(provider, market_deployment, locked, made)
            status = await wait_for(consumer, job, "settled", timeout_s=90)
            settled = page.locator("#timeline .event", has=page.locator(".state-settled"))
            await settled.last.wait_for(timeout=30_000)
            assert await page.evaluate("window.sameDocument") is True  # grew live, no reload
            states = await page.locator("#timeline .event-state").all_inner_texts()
            assert [s.split("→")[-1].strip() for s in states] == [
                "requested", "quoted", "funded", "accepted", "running", "completed",
                "settling", "settled",
            ]  # fmt: skip

            # the planted text is shown as text, and nothing planted ran
            await view.visit(f"/explorer/jobs/{job}")
            assert PLANTED in await view.text(".logs")
            assert PLANTED in await view.text(".command")
            assert await page.evaluate("window.pwned") is None
            assert "Signature verifies" in await view.text("[data-testid=receipt-verdict]")
            assert await page.locator(".chart polyline.series-cpu").count() == 1
            assert result in await view.text("#main")
            await view.shoot("job")

            # the settlement link opens the settlement, whose decoded datum is the escrow's
            link = page.locator("#timeline .event", has=page.locator(".state-settled"))
            await link.last.locator("a.hash").click()
            await page.wait_for_url(f"**/explorer/txs/{status['settle_tx']}")
            assert await view.text("#tx-id") == status["settle_tx"]
            datum = escrows.escrow_datum(market_deployment, locked.escrow)
            escrow_input = page.locator(".utxo.script-escrow").first
            shown = await escrow_input.inner_text()
            assert "EscrowDatum" in shown and "Settle" in shown
            assert await escrow_input.locator(f'[title="{datum.job_id.hex()}"]').count() == 1
            assert "BatchSettle" in await view.text("#main")
            await view.shoot("transaction")
            answer = (await http.get(f"/api/explorer/txs/{status['settle_tx']}")).json()
            spent = next(i for i in answer["tx"]["inputs"] if i["ref"] == locked.ref)
            decoded = spent["from"]["datum"]
            assert decoded["type"] == "EscrowDatum" and decoded["job_id"] == datum.job_id.hex()
            assert (decoded["price_per_unit"], decoded["max_units"], decoded["deadline"]) == (
                datum.price_per_unit, datum.max_units, datum.deadline,
            )  # fmt: skip
            assert decoded["consumer"] == str(consumer.wallet.address)
            assert spent["redeemer"]["type"] == "Settle"
            split = settle_split(locked.escrow.output.amount.coin, PRICE, UNITS,
                                 SPEC["max_duration_s"], made.fee_allowance)  # fmt: skip
            paid = [o for o in answer["tx"]["outputs"]
                    if (o["datum"] or {}).get("type") == "Payout"]  # fmt: skip
            assert {"address": str(provider.wallet.address), "lovelace": split.provider,
                    "kind": "settle", "escrow": locked.ref} in [
                {"address": o["address"], "lovelace": o["lovelace"],
                 "kind": o["datum"]["kind"], "escrow": o["datum"]["escrow"]} for o in paid
            ]  # fmt: skip

            # every other page, as a person opens it
            await view.visit("/explorer")
            assert await page.evaluate("window.pwned") is None
            assert GPU in await view.text("#live")
            await view.shoot("home")
            await view.visit(f"/explorer/jobs?state=settled&provider={status['provider_id']}")
            assert await page.locator("tbody tr").count() == 1
            await view.shoot("jobs")
            await view.visit("/explorer/providers")
            assert GPU in await view.text("tbody")
            assert await page.evaluate("window.pwned") is None
            await view.shoot("providers")
            await view.visit(f"/explorer/providers/{status['provider_id']}")
            assert "1 done" in await view.text("#main")
            await view.shoot("provider")
            await view.visit(f"/explorer/addresses/{provider.wallet.address}")
            assert status["settle_tx"][:10] in await view.text("tbody")
            await view.shoot("address")
            await page.fill("#q", status["settle_tx"])
            await page.press("#q", "Enter")
            await page.wait_for_url(f"**/explorer/txs/{status['settle_tx']}")
            await page.locator("a[href^='/explorer/blocks/']").first.click()
            await page.wait_for_url("**/explorer/blocks/*")
            assert status["settle_tx"][:10] in await view.text("#main")
            await view.shoot("block")
            await view.visit("/explorer/search?q=nothing-like-this")
            await view.shoot("search-miss")
            assert view.errors == []
            await page.close()
