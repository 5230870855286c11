"""The shared slice type: a slice's bounds, the offer's entry and the pro rata price."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from offchain.protocol.job.gpu_slices import FAULT_NOTES, GpuSlice, SliceOffer, slice_price


def entry(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "gpu_model": "NVIDIA GeForce GTX 1080", "memory_mib": 2048, "sm_percent": 25, "count": 3,
        "isolation": "mps", "fault_note": FAULT_NOTES["mps"], "selftest": None,
    }  # fmt: skip
    return data | changes


def test_an_entry_reads_and_fits_what_it_gives() -> None:
    offer = SliceOffer.model_validate(entry())
    assert offer.fits(2048, 25) and not offer.fits(2049, 25) and not offer.fits(1, 26)
    assert offer.describe() == "3 x 2048 MiB / 25% SMs of NVIDIA GeForce GTX 1080 (mps)"


@pytest.mark.parametrize(
    "bad",
    [{"sm_percent": 0}, {"sm_percent": 101}, {"memory_mib": 0}, {"count": 0},
     {"isolation": "none"}, {"fault_note": ""}, {"fault_note": "x" * 301}, {"sm_percent": 2.5},
     {"gpu_model": "a\nb"}, {"selftest": {"matmul_gflops": 1.5, "alloc_ok_mib": 1,
                                          "past_limit_refused": True}}, {"extra": 1}],
)  # fmt: skip
def test_an_entry_out_of_bounds_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SliceOffer.model_validate(entry(**bad))


def test_a_slice_names_its_device_by_isolation() -> None:
    mps = GpuSlice("GPU-a", 0, "X", 0, 1024, 50, "mps")
    mig = GpuSlice("GPU-a", 0, "X", 1, 1024, 50, "mig", mig_uuid="MIG-b")
    assert (mps.device, mig.device) == ("GPU-a", "MIG-b")
    assert "every client" in mps.fault_note and "isolated" in mig.fault_note
    with pytest.raises(ValueError):
        GpuSlice("GPU-a", 0, "X", 0, 1024, 50, "mig")
    with pytest.raises(ValueError):
        GpuSlice("GPU-a", 0, "X", 0, 1024, 0, "mps")


def test_a_slice_is_priced_pro_rata_rounded_up() -> None:
    assert slice_price(100, 25) == 25
    assert slice_price(101, 25) == 26  # 25.25 rounds up
    assert slice_price(0, 50) == 0 and slice_price(7, 100) == 7
    assert isinstance(slice_price(10**18, 33), int)
