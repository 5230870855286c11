"""A job's logs and the provider's failure reason are its consumer's (and provider's) only, on
every surface: a stranger reading the explorer's job page, its JSON or its live stream sees the
job's states and causes but neither, and `GET /jobs/{id}/logs` refuses a stranger's key; the
consumer reads both. On the session's devnet, over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import httpx

from tests.market.client import Party, serve
from tests.market.flow import accept, funded_deal, leader_settings

LOG = "LOG-LINE-ONLY-FOR-THE-CONSUMER"
REASON = "REASON-ONLY-FOR-THE-CONSUMER"


async def live_events(http: httpx.AsyncClient, job: str, until_state: str) -> list[dict]:
    """The explorer's live stream of the job, read as a stranger until `until_state` arrives."""
    found: list[dict] = []
    async with http.stream("GET", f"/explorer/jobs/{job}/live") as stream:
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                found.append(json.loads(line.removeprefix("data: ")))
                if found[-1]["state"] == until_state:
                    return found
    raise AssertionError(f"the stream ended before {until_state}")


async def test_a_stranger_sees_neither_logs_nor_the_providers_reason(
    devnet, market_deployment, settings, tmp_path
):
    made, _ = await leader_settings(settings, devnet, tmp_path)
    with serve(made) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            provider, deal = await funded_deal(devnet, market_deployment, http, made.identity)
            await accept(provider, market_deployment, deal)
            path = f"/jobs/{deal.job}"
            logged = await provider.send("POST", f"{path}/logs", {"lines": ["start", LOG]})
            assert logged.status_code == 200, logged.text
            failed = await provider.send("POST", f"{path}/failure",
                                         {"exit_code": 3, "reason": REASON})  # fmt: skip
            assert failed.status_code == 200, failed.text

            # the stranger: no signature on the explorer, a key of its own on the API
            shown = [
                (await http.get(f"/api/explorer{path}")).text,
                (await http.get(f"/explorer{path}")).text,
                json.dumps(await live_events(http, deal.job, "failed")),
            ]
            for text in shown:
                assert LOG not in text and REASON not in text
            page = (await http.get(f"/api/explorer{path}")).json()
            assert [e["to_state"] for e in page["events"]][-1] == "failed"
            assert page["job"]["exit_code"] == 3 and "logs" not in page
            assert "unchained job logs" in shown[1]  # the page says where the logs are
            stranger = Party.new(http, made.identity)
            assert (await stranger.send("GET", f"{path}/logs")).status_code == 403
            assert (await stranger.send("GET", path)).status_code == 403

            # the consumer reads both
            lines = (await deal.consumer.send("GET", f"{path}/logs")).json()
            assert [line["text"] for line in lines] == ["start", LOG]
            status = (await deal.consumer.send("GET", path)).json()
            assert status["failure_reason"] == REASON
