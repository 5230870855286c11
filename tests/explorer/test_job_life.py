"""A real job's life on the devnet, watched through the explorer in Chromium: a scripted
provider and consumer drive the market over HTTP (as tests/market do), the market's own
follower and batcher fund and settle it, and the job page's timeline grows without a reload;
the settlement link opens that transaction, whose decoded datum is the escrow's on chain.
Text planted by the parties (script tags in the command, environment and GPU model) is shown,
never run; the job's log lines are its consumer's only and a stranger's browser shows none.
The run timed out (as the provider reports with its receipt): settled all the same, and shown
as timed out with its exit code on its page and in the job lists, never as a plain success.
Every page is photographed at phone and desktop sizes."""

from __future__ import annotations

import hashlib

import httpx

from offchain.market.explorer.format import ada, per_hour, when
from offchain.market.explorer.queries import DAY_MS
from offchain.protocol.ledger.split import settle_split
from offchain.protocol.tx import escrow as escrows
from tests.explorer.viewer import Viewer
from tests.market.client import Party, serve
from tests.market.flow import Locked, accept, leader_settings, lock, wait_for
from tests.market.records import metering, receipt_body
from tests.market.test_lifecycle import PRICE, SPEC, job_request, offer_terms
from tests.protocol.onchain import wallet

PLANTED = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
GPU = "<script>window.pwned=3</script> H100"
LOGGED = "a log line for the consumer only"
UNITS = 42
TIMED_OUT = {"outcome": "timeout", "exit_code": 137}  # killed at its time limit


async def run_and_receipt(provider: Party, deployment, locked: Locked) -> str:
    """The scripted provider's work: logs, result, the signed receipt, then the metering record
    the receipt commits to (the explorer charts it)."""
    await accept(provider, deployment, locked)
    path = f"/jobs/{locked.job}"
    assert (await provider.send("POST", f"{path}/logs", {"lines": ["start", LOGGED]})).is_success
    archive = b"the result archive"
    assert (await provider.send("PUT", f"{path}/result", raw=archive)).is_success
    record = metering(locked.job, UNITS)
    result = hashlib.sha256(archive).digest()
    body = receipt_body(provider, deployment, locked, result, record) | TIMED_OUT
    answer = await provider.send("POST", f"{path}/receipt", body)
    assert answer.status_code == 200, answer.text
    uploaded = await provider.send("PUT", f"{path}/metering", raw=record.canonical_json())
    assert uploaded.status_code == 200, uploaded.text
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
            result = await run_and_receipt(provider, market_deployment, locked)
            status = await wait_for(consumer, job, "settled", timeout_s=90)
            settled = page.locator("#timeline .event", has=page.locator(".state-settled"))
            await settled.last.wait_for(timeout=30_000)
            assert await page.evaluate("window.sameDocument") is True  # grew live, no reload
            states = await page.locator("#timeline .event-state").all_inner_texts()
            assert [s.split("→")[-1].strip() for s in states] == [
                "requested", "quoted", "funded", "accepted", "running", "completed",
                "settling", "settled",
            ]  # fmt: skip

            # the home figures and the provider's earnings count this settlement
            at = {
                e["to_state"]: e["at_ms"]
                for e in (await http.get(f"/api/explorer/jobs/{job}")).json()["events"]
            }
            home = (await http.get("/api/explorer")).json()
            assert home["median_settle_ms"] == at["settled"] - at["completed"]
            assert home["settled_24h_lovelace"] == PRICE * UNITS
            earned = (await http.get(f"/api/explorer/providers/{status['provider_id']}")).json()
            assert earned["earnings"] == [
                {"day_ms": at["settled"] // DAY_MS * DAY_MS, "lovelace": PRICE * UNITS}
            ]
            # its record is the chain's: recounted here from the settle transaction's view
            settle = (await http.get(f"/api/explorer/txs/{status['settle_tx']}")).json()["tx"]
            recount = [row["units"] > 0 for row in settle["settled"]
                       if row["provider"] == str(provider.wallet.address)]  # fmt: skip
            record = earned["provider"]["record"]
            assert recount == [True] and (record["delivered"], record["failed"]) == (1, 0)
            assert (record["refunded"], record["delivered_percent"]) == (0, 100)
            assert earned["settle_delay_ms"] >= 0  # block time less the market's receipt time

            # the planted text is shown as text, and nothing planted ran
            await view.visit(f"/explorer/jobs/{job}")
            assert LOGGED not in await view.text("#main")
            assert "unchained job logs" in await view.text("[data-testid=logs-private]")
            assert PLANTED in await view.text(".command")
            assert await page.evaluate("window.pwned") is None
            assert "Signature verifies" in await view.text("[data-testid=receipt-verdict]")
            assert await page.locator(".chart polyline.series-cpu").count() == 1
            assert result in await view.text("#main")
            assert await view.text("[data-testid=outcome]") == "timed out (exit 137)"
            shown = (await http.get(f"/api/explorer/jobs/{job}")).json()["job"]
            assert (shown["state"], shown["outcome"], shown["exit_code"]) == (
                "settled", "timeout", 137)  # fmt: skip
            await view.shoot("job")

            # issue 19: found by the first 8 characters of its id and by its escrow; its two ids
            # labelled; its deadline and close as dates with the time left; the price per hour
            datum = escrows.escrow_datum(market_deployment, locked.escrow)
            for named in (job[:8], locked.ref):
                await page.fill("#q", named)
                await page.press("#q", "Enter")
                await page.wait_for_url(f"**/explorer/jobs/{job}")
            ids = " ".join((await view.text("[data-testid=job-ids]")).split())
            assert f"Market job id {job}" in ids and f"On-chain job_id {datum.job_id.hex()}" in ids
            deadline = await view.text("[data-testid=deadline]")
            assert deadline.startswith(f"{when(datum.deadline)} (in ")
            assert str(datum.deadline) not in deadline  # never the raw ms
            assert (await view.text("[data-testid=close]")).startswith(f"{when(datum.close)} (in ")
            assert per_hour(PRICE) in await view.text("#main")

            # the settlement link opens the settlement, whose decoded datum is the escrow's
            link = page.locator("#timeline .event", has=page.locator(".state-settled"))
            await link.last.locator("a.hash").click()
            await page.wait_for_url(f"**/explorer/txs/{status['settle_tx']}")
            assert await view.text("#tx-id") == status["settle_tx"]
            escrow_input = page.locator(".utxo.script-escrow").first
            shown = await escrow_input.inner_text()
            assert "EscrowDatum" in shown and "Settle" in shown
            assert when(datum.deadline) in shown and str(datum.deadline) not in shown
            assert per_hour(PRICE) in shown
            # one settlement, one line for the job (it moved to settling, then settled)
            assert await page.locator(f'#main dd a[href="/explorer/jobs/{job}"]').count() == 1
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
            # its payouts carry no tag: what each party got of this escrow is its split, from
            # the units the batch claimed and the datum, and the outputs hold it
            split = settle_split(locked.escrow.output.amount.coin, PRICE, UNITS,
                                 SPEC["max_duration_s"], datum.fee_allowance)  # fmt: skip
            assert answer["tx"]["settled"] == [{
                "escrow": locked.ref, "units": UNITS,
                "provider": str(provider.wallet.address), "provider_lovelace": split.provider,
                "consumer": str(consumer.wallet.address), "consumer_lovelace": split.consumer,
                "fee_lovelace": split.fee,
            }]  # fmt: skip
            outputs = [(o["address"], o["lovelace"], o["datum"]) for o in answer["tx"]["outputs"]]
            assert (str(provider.wallet.address), split.provider, None) in outputs
            assert (str(consumer.wallet.address), split.consumer, None) in outputs
            settled_rows = page.locator("[data-testid=settled] tbody tr")
            assert await settled_rows.count() == 1
            row = await settled_rows.inner_text()
            assert str(UNITS) in row and ada(split.provider) in row and ada(split.consumer) in row

            # every other page, as a person opens it
            await view.visit("/explorer")
            assert await page.evaluate("window.pwned") is None
            assert GPU in await view.text("#live")
            await view.shoot("home")
            await view.visit(f"/explorer/jobs?state=settled&provider={status['provider_id']}")
            assert await page.locator("tbody tr").count() == 1
            assert "settled timed out (exit 137)" in await view.text("tbody")
            await view.shoot("jobs")
            await view.visit("/explorer/providers")
            assert GPU in await view.text("tbody")
            assert await page.evaluate("window.pwned") is None
            await view.shoot("providers")
            await view.visit(f"/explorer/providers/{status['provider_id']}")
            assert "1 done" in await view.text("#main")
            assert (await view.text("[data-testid=record]")).startswith("100% of 1: 1 delivered")
            assert "not reported" in await view.text("#main")  # this offer carried no self-test
            await view.shoot("provider")
            await view.visit(f"/explorer/addresses/{provider.wallet.address}")
            assert status["settle_tx"][:10] in await view.text("tbody")
            assert "Amount (ADA)" in await view.text("thead")
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
