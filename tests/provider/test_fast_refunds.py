"""A job that never ran gives the renter its money back in the next settle batch (issue 19):
the real daemon signs a zero-unit receipt, the real market verifies it, fails the job with
the reason and settles it. Both paths share one market and daemon; balances to the lovelace,
and the blocks between the failure and the renter's refund output.

- failure before start: an image the provider does not have and cannot pull (its registry
  host does not resolve): the container never starts, nothing is metered;
- refusal after the lock: the daemon comes back with smaller slots than the offer the
  market quoted (the machine changed between the quote and the take), and refuses the job
  it finds assigned. The market cannot foresee that.
"""

from __future__ import annotations

import httpx

from offchain.chain.ogmios import request
from offchain.chain.utxo import parse_out_ref, utxo_at
from offchain.market.settings import MarketSettings
from offchain.protocol.job.receipt import EMPTY_HASH
from provider.daemon.journal import Journal
from tests.market.client import Party, serve
from tests.market.flow import timeline
from tests.protocol.onchain import balance, wallet
from tests.provider.daemon_harness import (
    IDENTITY,
    LockedJob,
    new_provider,
    provider_toml,
    request_and_lock,
    settling_market,
    spec,
    wait_state,
)

ABSENT_IMAGE = "unchained/absent@sha256:" + "0" * 64  # no host: nothing pinned; no such image
BLOCKS_MAX = 3  # the failure's block, the settle's, and one the market's poll may miss


async def tip_height(devnet) -> int:
    return await request(devnet.url, "queryNetwork/blockHeight")


async def refunded_at_once(
    devnet, settings: MarketSettings, job: LockedJob, provider_address, reason: str
) -> int:
    """Wait for the job to fail with `reason` and settle; check the money to the lovelace;
    return the blocks between its failure and the renter's refund output."""
    consumer = job.consumer.wallet.address
    locked = utxo_at(devnet.context(), parse_out_ref(job.escrow)).output.amount.coin
    renter, provider = balance(devnet, consumer), balance(devnet, provider_address)
    failed = await wait_state(job.consumer, job.job, {"failed", "settling", "settled"})
    failed_at = await tip_height(devnet)
    assert reason in failed["failure_reason"], failed
    assert failed["receipt_units"] == 0, failed
    settled = await wait_state(job.consumer, job.job, {"settled"}, timeout_s=60)
    assert settled["failure_reason"] == failed["failure_reason"]
    assert balance(devnet, consumer) - renter == locked - job.params["fee_allowance"]
    assert balance(devnet, provider_address) == provider  # owed nothing, no output
    events = timeline(settings, job.job)
    settle = next(e for e in events if e.to_state == "settled")
    assert settle.tx_id == settled["settle_tx"] and settle.block_height is not None
    print(f"job {job.job}: refunded {settle.block_height - failed_at} block(s) after failing")
    return settle.block_height - failed_at


async def test_a_job_that_never_ran_is_refunded_in_the_next_batch(devnet, tmp_path, busybox):
    deployment_file, deployment, settings = await settling_market(devnet, tmp_path)
    with serve(settings) as url:
        daemon, provider = await new_provider(devnet, tmp_path, deployment_file, url, bundles=1)
        pulling = daemon.config.read_text().replace("[runner]\n", "[runner]\npull_images = true\n")
        daemon.config.write_text(pulling)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                await daemon.start().logged("offer published")
                renter = Party.new(http, IDENTITY, await wallet(devnet))

                # failure before start: accepted, then the container could not be created
                absent = await request_and_lock(
                    devnet, deployment, renter, spec(ABSENT_IMAGE, "true")
                )
                blocks = await refunded_at_once(
                    devnet, settings, absent, provider.address, "is not on this machine"
                )
                assert 0 <= blocks <= BLOCKS_MAX, blocks
                entry = Journal(daemon.state_dir).get(absent.job)
                assert entry.receipt.units == 0 and entry.receipt.result_hash == EMPTY_HASH
                # the daemon reads the spend as a refund: it paid this provider nothing
                assert entry.stage in ("delivered", "refunded") and entry.slot == 0

                # refusal after the lock: quoted for a 32 MiB slot, taken by an 8 MiB one
                daemon.stop()
                refused = await request_and_lock(
                    devnet, deployment, renter, spec(busybox, "true", disk_mib=16)
                )
                daemon.config.write_text(provider_toml(daemon.state_dir, url, 1, disk_mib=8))
                await daemon.start().logged("offer published", times=2)
                blocks = await refunded_at_once(
                    devnet, settings, refused, provider.address, "refused by the provider"
                )
                assert 0 <= blocks <= BLOCKS_MAX, blocks
                await daemon.logged(f"job {refused.job} refused: ")
                entry = Journal(daemon.state_dir).get(refused.job)
                shown = (await renter.send("GET", f"/jobs/{refused.job}")).json()
                assert entry.receipt.units == 0 and entry.reason == shown["failure_reason"]
                assert "16 MiB" in entry.reason  # the bundle it was quoted against is gone
        finally:
            daemon.stop()
            daemon.reap()
