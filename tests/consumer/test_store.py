"""The consumer's job store resolves what a renter types: a prefix of at least MIN_PREFIX
characters or an escrow ref names a local job; anything shorter is left for the market."""

from __future__ import annotations

from consumer.sdk.job_record import JobRecord
from consumer.sdk.store import MIN_PREFIX, JobStore

JOB = "342b896c" + "0" * 24
ESCROW = "ab" * 32 + "#0"


def test_a_prefix_shorter_than_the_minimum_names_no_local_job(tmp_path):
    store = JobStore(tmp_path)
    record = JobRecord(job_id=JOB, market_url="http://market", provider_id="p", gpu_model="g",
                       spec={}, datum_cbor="", lovelace=1, created_ms=0, escrow=ESCROW)  # fmt: skip
    store.save(record)
    assert store.resolve(JOB[:MIN_PREFIX]) == JOB
    assert store.resolve(ESCROW) == JOB
    assert store.resolve(JOB[: MIN_PREFIX - 1]) == JOB[: MIN_PREFIX - 1]  # the market's to answer
    assert store.resolve("") == ""
