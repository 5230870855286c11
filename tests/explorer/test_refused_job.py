"""A refused job through the explorer in Chromium: the provider refuses a funded job with a
zero-unit receipt, the market fails it with the reason and settles it in its next batch,
and the job page says why it never ran and links the settlement that gave the renter its
lock back (the reason is public: the provider's words about its own machine)."""

from __future__ import annotations

import httpx

from offchain.protocol.job.receipt import EMPTY_HASH, Receipt
from tests.explorer.viewer import Viewer
from tests.market.client import serve
from tests.market.flow import leader_settings, lock, provider_with_offer, quote, wait_for

REFUSAL = "refused by the provider: the job asks 16 MiB disk for /out, the offer has 8 MiB"


async def test_a_refused_jobs_page_shows_why_and_its_refund(
    devnet, market_deployment, settings, tmp_path, browser, artifacts
):
    made, _market = await leader_settings(settings, devnet, tmp_path)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider = await provider_with_offer(devnet, http, made.identity)
            consumer, job = await quote(devnet, http, made.identity)
            locked = await lock(devnet, market_deployment, consumer, job)
            await wait_for(consumer, job, "funded")
            zero = Receipt.sign(
                provider.wallet.key, market_deployment.network_id,
                market_deployment.settle_hash, locked.escrow.input, 0, EMPTY_HASH, EMPTY_HASH,
            ).body()  # fmt: skip
            failed = await provider.send(
                "POST", f"/jobs/{job}/failure", {"reason": REFUSAL, "receipt": zero}
            )
            assert failed.status_code == 200, failed.text
            assert failed.json()["failure_reason"] == REFUSAL
            status = await wait_for(consumer, job, "settled", timeout_s=60)
            assert status["failure_reason"] == REFUSAL and status["receipt_units"] == 0

            view = await Viewer.open_in(browser, url, artifacts)
            await view.visit(f"/explorer/jobs/{job[:8]}")
            never_ran = await view.text("[data-testid=never-ran]")
            assert never_ran.startswith(f"Never ran: {REFUSAL}. "), never_ran
            link = view.page.locator("[data-testid=never-ran] a")
            assert await link.get_attribute("href") == f"/explorer/txs/{status['settle_tx']}"
            states = await view.page.locator("#timeline .event-state").all_inner_texts()
            assert [s.split("→")[-1].strip() for s in states][-3:] == [
                "failed", "settling", "settled"
            ]  # fmt: skip
            shown = (await http.get(f"/api/explorer/jobs/{job}")).json()["job"]
            assert (shown["state"], shown["never_ran"]) == ("settled", REFUSAL)
            # a zero-unit receipt counts against the provider's record as failed, from the chain
            page = (await http.get(f"/api/explorer/providers/{status['provider_id']}")).json()
            record = page["provider"]["record"]
            assert (record["failed"], record["delivered"], record["delivered_percent"]) == (1, 0, 0)
            await view.shoot("job-refused")
            await link.click()
            await view.page.wait_for_url(f"**/explorer/txs/{status['settle_tx']}")
            # the settlement lists the refused job, as it ended
            listed = view.page.locator(f'#main a[href="/explorer/jobs/{job}"]')
            assert await listed.count() == 1
            assert view.errors == []
