"""GPU slices on the market over real HTTP, on SQLite and PostgreSQL: an offer's `gpu_slices`
(signed, bounded), a job asking a fraction quoted on the cheapest slice that holds it at the
slice's price (the quote names the slice), whole-GPU and CPU jobs never on a slice, a query
naming gpu_sm or gpu_memory searching the slices, why none names the fraction's terms, and a
provider's slices held by its running jobs that ask fractions (its whole slots are not)."""

from __future__ import annotations

from sqlalchemy import update
from sqlmodel import Session, col

from offchain.market.db import make_engine
from offchain.market.models import Job, JobState
from offchain.protocol.job.gpu_slices import FAULT_NOTES
from tests.market.client import Party
from tests.market.test_lifecycle import PRICE, job_request, offer_terms
from tests.market.test_offers import offer, refused, search

GTX = "NVIDIA GeForce GTX 1080"
A100 = "NVIDIA A100-SXM4-40GB"
SELFTEST = {"matmul_gflops": 7400, "alloc_ok_mib": 2048, "past_limit_refused": True}


def slices(model: str, memory: int, sm: int, count: int, price: int, isolation: str = "mps",
           selftest: dict | None = None) -> list[dict]:  # fmt: skip
    return [{"gpu_model": model, "memory_mib": memory, "sm_percent": sm, "count": count,
             "isolation": isolation, "fault_note": FAULT_NOTES[isolation],  # type: ignore[index]
             "selftest": selftest, "price_per_unit": price}]  # fmt: skip


FRACTION = {"gpus": 0, "gpu_memory_mib": 2000, "gpu_sm_percent": 20, "cpu_cores": 1,
            "memory_mib": 1024, "disk_mib": 256}  # fmt: skip


async def test_a_fraction_is_quoted_on_the_cheapest_slice_that_holds_it(http, settings):
    market = settings.identity
    await offer(http, market)  # a whole H100 at PRICE
    miner = await offer(http, market, gpu_model=GTX, gpu_count=0, vram_mib=0, price_per_unit=300,
                        gpu_slices=slices(GTX, 2048, 25, 3, 800, selftest=SELFTEST))  # fmt: skip
    await offer(http, market, gpu_model=A100, gpu_count=0, vram_mib=0, price_per_unit=400,
                gpu_slices=slices(A100, 10240, 28, 2, 1000, "mig"))  # fmt: skip
    consumer = Party.new(http, market)

    quoted = await consumer.send("POST", "/jobs", job_request(consumer, resources=FRACTION))
    assert quoted.status_code == 201, quoted.text
    quote = quoted.json()
    assert quote["price_per_unit"] == 800 and quote["gpu_model"] == GTX
    assert quote["offer"]["provider_id"] == miner.wallet.key_hash.payload.hex()
    piece = quote["gpu_slice"]
    assert (piece["memory_mib"], piece["sm_percent"], piece["isolation"]) == (2048, 25, "mps")
    assert piece["selftest"] == SELFTEST and "every client" in piece["fault_note"]
    assert quote["offer"]["terms"]["gpu_slices"][0]["price_per_unit"] == 800  # as signed

    larger = FRACTION | {"gpu_memory_mib": 8192}  # only the A100's MIG slices hold 8 GiB
    quoted = await consumer.send("POST", "/jobs", job_request(consumer, resources=larger))
    assert quoted.json()["price_per_unit"] == 1000, quoted.text
    assert quoted.json()["gpu_slice"]["isolation"] == "mig"

    whole = await consumer.send("POST", "/jobs", job_request(consumer))  # gpus: 1
    assert whole.json()["price_per_unit"] == PRICE and whole.json()["gpu_slice"] is None
    cpu = {"gpus": 0, "cpu_cores": 1, "memory_mib": 1024, "disk_mib": 256}
    quoted = await consumer.send("POST", "/jobs", job_request(consumer, resources=cpu))
    assert quoted.json()["price_per_unit"] == 300, quoted.text  # a CPU bundle, not a slice

    too_much = FRACTION | {"gpu_sm_percent": 50}
    message = refused(await consumer.send("POST", "/jobs", job_request(consumer,
                      resources=too_much)), 409, "spec")  # fmt: skip
    assert message == (
        "no offer can take the job: 5 of the 5 online offers have cpu>=1, 5 of those have "
        "memory>=1024MiB, 5 of those have disk>=256MiB, 2 of those have gpu_memory>=2000MiB, "
        "the job asks 50% of a GPU's SMs in a GPU slice, the largest of those has 28%"
    )

    found = await search(http, "gpu_sm>=25 sort=price")
    assert [o["terms"]["gpu_model"] for o in found["offers"]] == [GTX, A100]
    assert (await search(http, "gpu_memory>=4GiB"))["matched"] == 1
    assert (await search(http, ""))["matched"] == 3  # whole bundles only: one each
    none = await search(http, "gpu_sm>=90%")
    # each slice entry is searched as an offer of its own: 3 bundles and 2 slices
    assert none["why_none"] == "none of the 5 online offers has gpu_sm>=90% (the closest: 28%)"


async def test_a_providers_slices_are_held_by_its_jobs_that_ask_fractions(http, settings):
    market = settings.identity
    await offer(http, market, gpu_model=GTX, gpu_count=0, vram_mib=0, price_per_unit=300,
                gpu_slices=slices(GTX, 2048, 25, 2, 800))  # fmt: skip
    consumer = Party.new(http, market)
    quoted = []
    for _ in range(2):
        answer = await consumer.send("POST", "/jobs", job_request(consumer, resources=FRACTION))
        assert answer.status_code == 201, answer.text
        quoted.append(answer.json()["job_id"])
    running(settings, quoted)  # both slices held (as an accepted or running job holds one)
    message = refused(await consumer.send("POST", "/jobs", job_request(consumer,
                      resources=FRACTION)), 409, "spec")  # fmt: skip
    assert message.endswith("1 busy"), message  # the slice record; the CPU bundle is free
    cpu = {"gpus": 0, "cpu_cores": 1, "memory_mib": 1024, "disk_mib": 256}
    answer = await consumer.send("POST", "/jobs", job_request(consumer, resources=cpu))
    assert answer.status_code == 201, answer.text  # the whole slot is not a slice's


def running(settings, jobs: list[str]) -> None:
    engine = make_engine(settings)
    try:
        with Session(engine) as session:
            held = update(Job).where(col(Job.id).in_(jobs)).values(state=JobState.RUNNING)
            session.exec(held)  # type: ignore[call-overload]
            session.commit()
    finally:
        engine.dispose()


async def test_an_offers_slices_are_bounded_and_checked(http, settings):
    provider = Party.new(http, settings.identity)
    (good,) = slices(GTX, 2048, 25, 1, 800)
    for bad, field in [
        ([good | {"sm_percent": 101}], "sm_percent"),
        ([good | {"isolation": "none"}], "isolation"),
        ([good | {"price_per_unit": 1.5}], "price_per_unit"),
        ([good | {"fault_note": "x" * 301}], "fault_note"),
        ([good] * 65, "gpu_slices"),
    ]:
        answer = await provider.send("POST", "/offers", offer_terms(provider, gpu_slices=bad))
        assert answer.status_code == 422 and field in answer.text, (field, answer.text)
