"""The one acceptance check (the market's at quote time, the daemon's before it signs): each
refusal alone, on both sides of its boundary, worded in the renter's units and naming the
field to change; a job that fits gets no refusal."""

from __future__ import annotations

import dataclasses

import pytest

from offchain.chain.time import iso
from offchain.protocol.checks.acceptance import (
    MARGINS,
    AcceptanceRefusal,
    EscrowTerms,
    Offered,
    describe,
    refusals,
    settled_by,
)
from offchain.protocol.job.jobspec import JobSpec, Resources
from offchain.protocol.job.offer import ImageSupply, OfferedImage
from offchain.protocol.ledger.split import lock_amount

ADA = 1_000_000
DIGEST = "sha256:" + "ab" * 32
BUNDLE = Resources(gpus=1, min_vram_mib=8192, cpu_cores=4, memory_mib=2048, disk_mib=1024)
IMAGES = ImageSupply.of([OfferedImage(reference="unchained/python-numpy:latest", digest=DIGEST),
                         OfferedImage(reference="python:3.11", digest=DIGEST)])  # fmt: skip
PRICE = 170  # lovelace per second: 0.612 ADA/h
SPEC = JobSpec(image="unchained/python-numpy:latest", command=["true"], resources=BUNDLE,
               max_duration_s=600, max_price_lovelace=PRICE * 600)  # fmt: skip
OFFER = Offered(BUNDLE, PRICE, IMAGES)
NOW = 1_800_000_000_000
DEPOSIT = 1_000_000  # the refund output's minimum, which the lock adds
ALLOWANCE = 3 * ADA
DEADLINE = NOW + 10 * 60_000 + SPEC.max_duration_s * 1000
CLOSE = DEADLINE + 3_600_000
TERMS = EscrowTerms(
    price_per_unit=PRICE, max_units=600, deadline_ms=DEADLINE, close_ms=CLOSE,
    fee_allowance=ALLOWANCE, locked=lock_amount(PRICE, 600, ALLOWANCE, DEPOSIT), now_ms=NOW,
    refund_deposit=DEPOSIT, refund_window_ms=86_400_000, bond_covers_before=CLOSE + 1,
    settle_fee_share=200_000,
)  # fmt: skip


def check(spec: JobSpec = SPEC, offer: Offered = OFFER, **terms: int | None) -> list:
    return refusals(offer, spec, dataclasses.replace(TERMS, **terms))


def only(found: list[AcceptanceRefusal]) -> AcceptanceRefusal:
    assert len(found) == 1, describe(found)
    return found[0]


def test_a_job_that_fits_is_taken():
    assert check() == []


@pytest.mark.parametrize(("name", "words"), [
    ("gpus", "the job asks 2 GPU(s), the offer has 1"),
    ("min_vram_mib", "the job asks 8193 MiB GPU memory per GPU, the offer has 8192 MiB"),
    ("cpu_cores", "the job asks 5 CPU core(s), the offer has 4"),
    ("memory_mib", "the job asks 2049 MiB memory, the offer has 2048 MiB"),
    ("disk_mib", "the job asks 1025 MiB disk for /out, the offer has 1024 MiB"),
])  # fmt: skip
def test_each_resource_beyond_the_bundle_is_refused_in_mib(name, words):
    more = BUNDLE.model_copy(update={name: getattr(BUNDLE, name) + 1})
    refused = only(check(SPEC.model_copy(update={"resources": more})))
    assert (refused.field, refused.message) == (f"spec.resources.{name}", words)


def test_the_image_must_be_on_the_machine_unless_the_provider_pulls():
    for same in ("python:3.11", "docker.io/library/python:3.11", "unchained/python-numpy"):
        assert check(SPEC.model_copy(update={"image": same})) == []
    missing = SPEC.model_copy(update={"image": "python:3.11-slim"})
    refused = only(check(missing))
    assert refused.field == "spec.image"
    assert refused.message == (
        "the provider has no image python:3.11-slim and pulls none; it has: python:3.11, "
        "unchained/python-numpy:latest"
    )
    pulling = dataclasses.replace(OFFER, images=ImageSupply(IMAGES.references, pulls=True))
    assert check(missing, pulling) == []
    unknown = only(check(offer=dataclasses.replace(OFFER, images=ImageSupply.of(None))))
    assert unknown.message == (
        "the offer lists no images, so it runs no unchained/python-numpy:latest"
    )


def test_the_price_is_refused_per_hour_when_the_whole_run_costs_more_than_the_max():
    assert check(SPEC.model_copy(update={"max_price_lovelace": PRICE * 600})) == []
    cheap = SPEC.model_copy(update={"max_price_lovelace": PRICE * 600 - 1})
    refused = only(check(cheap))
    assert refused.field == "spec.max_price_lovelace"
    assert refused.message == (
        "your max price 0.611994 ADA/h (0.101999 ADA for up to 600 s) is below "
        "0.612000 ADA/h, the price of the offer"
    )
    assert "lovelace" not in refused.message


def test_an_allowance_below_the_settle_fee_share_is_refused():
    assert check(settle_fee_share=ALLOWANCE) == []
    refused = only(check(settle_fee_share=ALLOWANCE + 1))
    assert refused.field == "fee_allowance"
    assert refused.message == (
        "the fee allowance of 3.000000 ADA is below the settle fee share of 3.000001 ADA"
    )


def test_a_lock_without_the_run_the_fee_and_the_return_deposit_is_refused():
    """No settlement needs anyone's own lovelace (no top-ups): the lock holds the longest
    run, the allowance and the refund output's minimum."""
    assert check(locked=TERMS.locked + 1) == []
    refused = only(check(locked=TERMS.locked - 1))
    assert refused.field == "lovelace"
    assert refused.message == (
        "4.101999 ADA locked cannot pay 600 s at 0.612000 ADA/h, the fee allowance and the "
        "return deposit of 1.000000 ADA (4.102000 ADA)"
    )


def test_time_to_close_the_deadline_and_the_bond():
    refused = only(check(deadline_ms=NOW))
    assert refused.field == "deadline" and refused.message == (
        f"its deadline {iso(NOW)} has passed (the chain is at {iso(NOW)})"
    )
    assert check(deadline_ms=NOW + 1, close_ms=settled_by(NOW, 600)) == []
    late = only(check(close_ms=settled_by(NOW, 600) - 1, bond_covers_before=None))
    assert late.field == "spec.max_duration_s"
    assert late.message.startswith(
        f"starting, running 600 s and settling needs until "
        f"{iso(NOW + MARGINS.start_ms + 600_000 + MARGINS.settle_ms)}"
    )
    assert check(bond_covers_before=CLOSE + 1) == [] and check(bond_covers_before=None) == []
    unbonding = only(check(bond_covers_before=CLOSE))
    assert unbonding.field == "spec.max_duration_s"
    assert unbonding.message == (
        f"the provider's bond is withdrawable from {iso(CLOSE + 86_400_000)}, so it covers jobs "
        f"closing before {iso(CLOSE)}; this job runs up to 600 s and closes at {iso(CLOSE)}, "
        "and the renter may slash for 86400 s after that: lower max_duration_s"
    )


def test_every_reason_is_given_at_once():
    bad = SPEC.model_copy(update={"image": "nope:1", "max_price_lovelace": 1})
    found = check(bad, deadline_ms=NOW - 1)
    assert [refusal.field for refusal in found] == [
        "spec.image", "spec.max_price_lovelace", "deadline"
    ]  # fmt: skip
    assert describe(found) == "; ".join(refusal.message for refusal in found)
