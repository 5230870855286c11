"""A job whose spec names a registry's tag, on the devnet market with a real provider daemon:
the quote pins the tag to the registry's digest, the escrow locks that spec's digest, the
provider (which pulled the image by digest: its offer lists it) runs exactly that image, and
the receipt's metering record and the explorer's job page name the digest. A tag the registry
does not have, or a digest it does not hold, is refused at quote time: nothing is locked."""

from __future__ import annotations

import asyncio

import httpx

from offchain.protocol.job.jobspec import parse_jobspec
from provider.images.recipes import BUSYBOX_REPOSITORY, pull
from tests.provider.daemon_harness import (
    consumer_of,
    daemon_on_market,
    quiet_market,
    request_and_lock,
    spec,
    wait_state,
)


async def test_a_tag_is_quoted_as_its_digest_and_the_job_runs_that_image(
    devnet, tmp_path, client, registry, registry_busybox, busybox
):
    pull(client, registry_busybox)  # the provider's cache: its offer lists the digest
    tag = f"{registry.host}/{BUSYBOX_REPOSITORY}:{busybox.rsplit(':', 1)[1]}"
    deployment_file, deployment, settings = await quiet_market(
        devnet, tmp_path, local_registries=True
    )
    async with (
        daemon_on_market(devnet, tmp_path, deployment_file, settings) as (_daemon, _, url),
        consumer_of(devnet, url) as consumer,
    ):
        offer = (await consumer.send("GET", "/offers")).json()["offers"][0]
        assert registry_busybox in {image["reference"] for image in offer["terms"]["images"]}

        address = str(consumer.wallet.address)
        for image, why in ((f"{tag}-gone", "has no tag"),
                           (registry_busybox[:-8] + "00000000", "has no digest")):  # fmt: skip
            request = {"spec": spec(image, "true"), "consumer_address": address}
            refused = await consumer.send("POST", "/jobs", request)
            assert refused.status_code == 409 and why in refused.text, refused.text
        assert (await consumer.send("GET", "/jobs")).json() == []  # nothing quoted, nothing locked

        locked = await request_and_lock(devnet, deployment, consumer, spec(tag, "echo ran"))
        pinned = parse_jobspec(spec(registry_busybox, "echo ran"))
        assert locked.params["job_id"] == pinned.job_id().hex()  # the escrow locks the digest
        status = await wait_state(consumer, locked.job, {"completed"})
        assert status["exit_code"] == 0, status

        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            page = await job_page_with_metering(http, locked.job)
    ran = page.split('data-testid="image-ran"', 1)[1].split("</p>", 1)[0]
    assert registry_busybox in ran, ran  # the metering record the receipt commits to
    assert page.count(registry_busybox) == 2, page  # and what the spec runs


async def job_page_with_metering(http: httpx.AsyncClient, job: str) -> str:
    """The explorer's job page once the provider uploaded the job's metering record (polled:
    it follows the receipt)."""
    for _ in range(150):
        page = (await http.get(f"/explorer/jobs/{job}")).text
        if 'data-testid="image-ran"' in page:
            return page
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job}: no metering record on its page")
