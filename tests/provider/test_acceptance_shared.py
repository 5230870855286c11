"""The market's quote and the provider daemon's acceptance run one check and say it in the
same words. An escrow is locked by hand (past any market) for a job the daemon's offer cannot
take three ways (more memory than its slot, an image it does not have, a max price below its
price); the real daemon, handed it by a market that misbehaves on purpose, refuses it with
exactly the reasons the market's quote check gives for that offer and those escrow terms."""

from __future__ import annotations

import json

import docker

from offchain.market.errors import Conflict
from offchain.market.models import Job, Offer, Provider
from offchain.market.services import acceptance
from offchain.market.services.chain import Chain, quoted_escrow
from offchain.market.settings import MarketSettings
from offchain.protocol.job.jobspec import JobSpec, Resources
from offchain.protocol.tx import escrow as escrows
from offchain.protocol.tx.txbuild import Clock
from provider.capacity import Bundle
from provider.daemon.bond import BondView
from provider.daemon.journal import Journal
from provider.daemon.offers import offer_terms
from provider.images.recipes import local_images
from tests.protocol.onchain import wallet
from tests.provider.chain import deployed
from tests.provider.daemon_harness import (
    CORE_PRICE,
    fake_market_server,
    lock_escrow,
    new_provider,
    refusal,
    safe_terms,
    spec,
)

ALLOWANCE = 5_000_000  # ample: no payout reason, whatever the market's settle fee share


async def test_the_daemon_refuses_in_the_words_of_the_markets_quote(devnet, tmp_path):
    deployment_file = tmp_path / "deployment.json"
    deployment = await deployed(devnet, deployment_file)
    job = {**spec("nope/not-here:1", "echo never", memory_mib=1024),
           "max_price_lovelace": CORE_PRICE * 60 - 1}  # fmt: skip
    with fake_market_server() as (url, pending, seen):
        daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url, bundles=1)
        consumer = await wallet(devnet)
        now = Clock.now(devnet.context()).tip_ms
        terms = {**safe_terms(consumer, provider, job, now), "fee_allowance": ALLOWANCE}
        escrow = await lock_escrow(devnet, deployment, consumer, terms)
        said = await refusal(daemon, pending, "job_s", job, escrow, terms)
    quoted = market_refusal(devnet, deployment_file, tmp_path, provider, consumer, terms, job)
    reasons = quoted.removeprefix("the provider would refuse this job: ")
    assert said.endswith(f"job job_s refused: {reasons}"), (said, quoted)
    assert reasons.startswith("the job asks 1024 MiB memory, the offer has 512 MiB; the provider "
                              "has no image nope/not-here:1 and pulls none; it has: ")  # fmt: skip
    assert "is below 3,600.000000 ADA/h, the price of the offer" in reasons
    # the escrow itself is sound (this provider's, this job's): the refusal releases it with a
    # zero-unit receipt, kept in the journal with the reason and handed to the market
    (entry,) = Journal(daemon.state_dir).entries()
    assert (entry.job_id, entry.receipt.units) == ("job_s", 0)
    assert entry.reason == f"refused by the provider: {reasons}"
    assert any(line.startswith("POST /jobs/job_s/failure") for line in seen), seen


def market_refusal(devnet, deployment_file, tmp_path, provider, consumer, terms, job) -> str:
    """What the market's quote check says for the daemon's offer (its terms as the daemon
    publishes them) and the escrow `terms` (the quote's job)."""
    chain = Chain.connect(devnet.url, deployment_file)
    settings = MarketSettings(data_dir=tmp_path / "market", ogmios_url=devnet.url,
                              deployment=deployment_file)  # fmt: skip
    wanted = JobSpec.model_validate(job)
    slot = Resources(cpu_cores=1, memory_mib=512, disk_mib=32)  # the daemon's one CPU slot
    body = offer_terms(Bundle(slot, "", CORE_PRICE, 1), str(provider.address),
                       BondView(None, 0, None), None, local_images(docker.from_env()))  # fmt: skip
    offer = Offer(
        body=json.dumps(body),
        gpu_count=0,
        vram_mib=0,
        cpu_cores=slot.cpu_cores,
        memory_mib=slot.memory_mib,
        disk_mib=slot.disk_mib,
        price_per_unit=CORE_PRICE,
    )
    quoted = Job(
        consumer_address=str(consumer.address), provider_address=str(provider.address),
        provider_vkey=provider.vkey.hex(), price_per_unit=CORE_PRICE,
        max_units=terms["max_units"], deadline_ms=terms["deadline"],
        settle_window_ms=terms["settle_window"], spec_digest=wanted.job_id().hex(),
        fee_allowance=ALLOWANCE,
    )  # fmt: skip
    quoted.lock_lovelace = escrows.lock_lovelace(chain.context, chain.deployment,
                                                 quoted_escrow(quoted))  # fmt: skip
    now = Clock.now(devnet.context()).tip_ms
    try:
        acceptance.refuse(chain, settings, quoted, offer, Provider(), wanted, now)
    except Conflict as exc:
        return exc.message
    raise AssertionError("the market's check took the job")
