"""Every value the probe found answered with a 500 is a 4xx naming its field, and stores nothing:
huge, 4,000-digit and non-ASCII-digit numbers, an exit code of 10**30, lone surrogates and NUL
in text, a self-test dated after the year 9999, a price whose longest job costs more than all
ADA there is. On the session's devnet, over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

from offchain.market.schemas import MAX_PRICE_PER_UNIT
from tests.market.client import Party
from tests.market.test_bad_input import refused, snapshot
from tests.market.test_lifecycle import job_request, offer_terms

HUGE = str(10**30)
SURROGATE = "\ud800"


async def test_out_of_bounds_values_are_4xx_naming_the_field(http, settings):
    provider, consumer = (Party.new(http, settings.identity) for _ in range(2))
    assert (await provider.send("POST", "/offers", offer_terms(provider))).status_code == 201
    quoted = await consumer.send("POST", "/jobs", job_request(consumer))
    assert quoted.status_code == 201, quoted.text
    job = f"/jobs/{quoted.json()['job_id']}"
    before = snapshot(settings)

    for after in (HUGE, "9" * 4000, "²", "-2"):  # a signed path is at most 4,095 characters
        refused(await consumer.send("GET", f"{job}/logs?after={after}"), 422, "after")
    for failure, field in [
        ({"exit_code": 10**30, "reason": "oom"}, "exit_code"),
        ({"exit_code": 1, "reason": f"killed {SURROGATE}"}, "reason"),
        ({"exit_code": 1, "reason": "killed \x00"}, "reason"),
    ]:
        refused(await provider.send("POST", f"{job}/failure", failure), 422, field)
    for line in (SURROGATE, "a\x00b"):
        refused(await provider.send("POST", f"{job}/logs", {"lines": ["ok", line]}), 422, "lines")
    receipt = {"units": 10**30, "result_hash": "00" * 32, "evidence_hash": "00" * 32,
               "signature": "00" * 64}  # fmt: skip
    refused(await provider.send("POST", f"{job}/receipt", receipt), 422, "units")
    for terms, field in [
        (offer_terms(provider, gpu_model=f"H100 {SURROGATE}"), "gpu_model"),
        (offer_terms(provider, price_per_unit=MAX_PRICE_PER_UNIT + 1), "price_per_unit"),
        (offer_terms(provider, selftest={"passed": True, "at_ms": 10**18, "checks": []}),
         "selftest"),
    ]:  # fmt: skip
        refused(await provider.send("POST", "/offers", terms), 422, field)
    for command in ([SURROGATE], ["echo", "a\x00b"]):
        refused(await consumer.send("POST", "/jobs", job_request(consumer, command=command)),
                422, "spec")  # fmt: skip
    refused(await consumer.send("GET", "/jobs/%00"), 422, "job_id")
    refused(await http.get(f"/api/explorer/blocks/{HUGE}"), 422, "height")
    refused(await http.get(f"/explorer/blocks/{HUGE}"), 422, "height")
    assert snapshot(settings) == before
