"""A metering record as the provider's runner writes one, and the signed receipt committing to
it: for the metering upload test and the explorer's chart."""

from __future__ import annotations

from offchain.protocol.job.metering import MeteringRecord, Sample
from offchain.protocol.job.receipt import Receipt
from offchain.protocol.tx.deployment import Deployment
from tests.market.client import Party
from tests.market.flow import Locked


def metering(job: str, units: int) -> MeteringRecord:
    """A second of CPU-heavy samples, billing `units`."""
    samples = [Sample(t_ms=t * 100, cpu_ns=t * 150_000_000, memory_bytes=(t + 1) << 26, pids=3)
               for t in range(11)]  # fmt: skip
    return MeteringRecord(
        job_id=job, image_id="sha256:" + "ab" * 32, gpu_uuids=[], cpu_cores=2, memory_mib=4096,
        disk_mib=1024, started_at_ms=0, finished_at_ms=1000, wall_ms=1000, billable_units=units,
        exit_code=0, oom_killed=False, timed_out=False, cpu_ns=1_500_000_000,
        memory_peak_bytes=11 << 26, pids_peak=3, pids_limit=256, gpu_usage=[],
        sample_interval_ms=100, samples=samples, gpu_samples=[], gap=False,
    )  # fmt: skip


def receipt_body(
    provider: Party, deployment: Deployment, locked: Locked, result: bytes, record: MeteringRecord
) -> dict:
    """The provider's signed receipt for `record`'s units, its evidence hash the record's."""
    units, evidence = record.billable_units, bytes.fromhex(record.digest())
    return Receipt.sign(
        provider.wallet.key, deployment.network_id, deployment.settle_hash, locked.escrow.input,
        units, result, evidence,
    ).body()  # fmt: skip
