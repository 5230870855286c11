"""A GPU shared with the operator's own work, against the FAKE NVML (tests/provider/
test_nvml_fakes.py: an H100 with MIG off, an A100 in MIG mode): `[[offer.shared_gpus]]` with
its fit checks and clear errors, a slot per slice priced pro rata, the smallest fitting slice
taken by a job asking a fraction (whole jobs never take one), and the offer's `gpu_slices`."""

from __future__ import annotations

import pytest

from offchain.protocol.job.gpu_slices import FAULT_NOTES, SliceSelfTest, SliceTerms
from offchain.protocol.job.jobspec import JobSpec, Resources
from provider.capacity import Capacity, mps_where_installed, slots_of
from provider.config import (
    ConfigError,
    Offer,
    Prices,
    ProviderConfig,
    RunnerSettings,
    load_config,
    to_toml,
)
from provider.daemon.bond import BondView
from provider.daemon.offers import describe_offer, offer_terms, slice_key
from provider.daemon.status import slot_resources
from provider.gpu.inventory import GpuInfo, HostInventory, gpu_inventory
from tests.provider.fake_nvml import A100, H100, FakeNvml

GIB = 1 << 30
H100_MIB = 85_520_809_984 >> 20  # 81559
PRICES = Prices(gpu=2000, cpu_core=20, memory_gib=5, disk_gib=1)


def machine() -> HostInventory:
    return HostInventory(cpu_cores=32, memory_bytes=256 * GIB, disk_total_bytes=2000 * GIB,
                         disk_free_bytes=1000 * GIB, gpu=gpu_inventory())  # fmt: skip


def offer(*shared: dict, **changes: object) -> Offer:
    data = {"cpu_cores": 8, "memory_mib": 16384, "disk_mib": 8192, "prices": PRICES,
            "shared_gpus": list(shared)}  # fmt: skip
    return Offer.model_validate(data | changes)


def isolate(gpu: GpuInfo):
    """MIG on the A100 (two instances listed), MPS on the H100."""
    return ("mig", ("MIG-a", "MIG-b")) if gpu.mig_mode == "enabled" else ("mps", ())


@pytest.fixture(autouse=True)
def fake_nvml(monkeypatch) -> FakeNvml:
    fake = FakeNvml()
    fake.install(monkeypatch)
    return fake


KEPT = {"uuid": H100, "keep_memory_mib": 16384, "keep_sm_percent": 40, "slices": 3}


def test_slices_are_derived_from_what_is_kept_and_priced_pro_rata():
    bundle, slots = slots_of(offer(KEPT), machine(), isolate)
    (cpu,) = [slot for slot in slots if slot.gpu_slice is None]  # CPU bundles stay offered
    pieces = [slot for slot in slots if slot.gpu_slice is not None]
    assert len(pieces) == 3 and bundle.slots == 1
    assert bundle.gpu_model == "NVIDIA H100 80GB HBM3"  # no whole GPU: the slices' model
    piece = pieces[0].gpu_slice
    assert piece is not None and piece.sm_percent == 20
    assert piece.memory_mib == (H100_MIB - 16384) // 3
    assert (piece.isolation, piece.device, piece.gpu_index) == ("mps", H100, 0)
    # 8 cores, 16 GiB, 8 GiB shared by 4 slots; the GPU's 2000 lovelace/s x 20% = 400
    assert pieces[0].bundle == Resources(gpu_memory_mib=piece.memory_mib, gpu_sm_percent=20,
                                         cpu_cores=2, memory_mib=4096, disk_mib=2048)  # fmt: skip
    assert pieces[0].price_per_unit == 400 + 2 * 20 + 4 * 5 + 2 * 1
    assert cpu.bundle.cpu_cores == 2 and bundle.price_per_unit == 2 * 20 + 4 * 5 + 2 * 1
    (entry,) = bundle.gpu_slices
    assert (entry.count, entry.isolation, entry.gpu_model) == (3, "mps", "NVIDIA H100 80GB HBM3")
    assert entry.fault_note == FAULT_NOTES["mps"] and bundle.slice_prices == (462,)


def test_a_pro_rata_price_rounds_up():
    odd = offer(KEPT, prices=Prices(gpu=1001, cpu_core=0, memory_gib=0, disk_gib=0))
    assert odd.bundle_price(Resources(gpu_memory_mib=1, gpu_sm_percent=20)) == 201  # 200.2


def test_mig_slices_are_the_instances_and_a_gpu_without_isolation_is_not_sliced():
    a100 = {"uuid": A100, "slices": 3, "slice_memory_mib": 10240, "slice_sm_percent": 28}
    bundle, slots = slots_of(offer(a100, KEPT), machine(), isolate)
    mig = [slot.gpu_slice for slot in slots if slot.gpu_slice and slot.gpu_slice.isolation == "mig"]
    assert [piece.device for piece in mig if piece] == ["MIG-a", "MIG-b"]  # two instances listed
    assert {entry.isolation for entry in bundle.gpu_slices} == {"mig", "mps"}
    refused, slots = slots_of(offer(a100), machine(), lambda gpu: "no MPS here")
    assert [slot.gpu_slice for slot in slots] == [None] and not refused.gpu_slices
    assert refused.no_slices == f"{A100}: no MPS here"
    default = slots_of(offer(a100), machine(), mps_where_installed)[0]
    assert "MIG is enabled" in default.no_slices


@pytest.mark.parametrize(
    ("shared", "message"),
    [
        ({"uuid": H100, "slices": 4, "keep_sm_percent": 40, "slice_sm_percent": 20},
         "4 slices x 20% SMs + 40% kept is more than 100% of the GPU's SMs"),
        ({"uuid": H100, "slices": 64, "keep_sm_percent": 99}, "leave less than 1% each"),
        ({"uuid": H100, "slices": 0}, "slices: Input should be greater than or equal to 1"),
        ({"uuid": H100, "slices": 2, "keep_sm_percent": 100}, "keep_sm_percent: Input should"),
        ({"uuid": H100, "slices": 2, "slice_sm_percent": 2.5}, "should be a valid integer"),
    ],
)  # fmt: skip
def test_slices_that_do_not_fit_the_sms_are_config_errors(tmp_path, shared, message):
    lines = "\n".join(f"{key} = {value!r}".replace("'", '"') for key, value in shared.items())
    path = tmp_path / "provider.toml"
    path.write_text("[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\n"
                    f"[[offer.shared_gpus]]\n{lines}\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"provider\.toml") as caught:
        load_config(path)
    assert message in str(caught.value)


def test_a_gpu_is_whole_or_shared_and_named_once():
    with pytest.raises(ValueError, match=r"offered whole \(gpus\) or shared"):
        offer(KEPT, gpus=[H100])
    with pytest.raises(ValueError, match=r"names .* twice"):
        offer(KEPT, KEPT)


def test_slices_that_do_not_fit_the_memory_are_config_errors():
    big = KEPT | {"slice_memory_mib": 30_000}  # 3 x 30000 + 16384 > 81559
    with pytest.raises(ConfigError, match=rf"3 slices x 30000 MiB \+ 16384 MiB kept do not fit the "
                       f"GPU's {H100_MIB} MiB"):  # fmt: skip
        slots_of(offer(big), machine(), isolate)
    with pytest.raises(ConfigError, match="do not fit"):
        slots_of(offer(KEPT | {"keep_memory_mib": H100_MIB}), machine(), isolate)


def test_a_fraction_takes_the_smallest_free_slice_and_a_whole_job_none():
    a100 = {"uuid": A100, "slices": 2, "slice_memory_mib": 10240, "slice_sm_percent": 28}
    _, slots = slots_of(offer(a100, KEPT), machine(), isolate)
    capacity = Capacity(slots)
    small = Resources(gpu_memory_mib=4096, gpu_sm_percent=15)
    assert capacity.free_for(small) == 5 and capacity.free_for(Resources()) == 1
    first = capacity.take("a", asks=small)
    assert first is not None and first.gpu_slice is not None and first.gpu_slice.sm_percent == 20
    assert capacity.price_for(small, 7) == first.price_per_unit
    large = Resources(gpu_memory_mib=20_000, gpu_sm_percent=20)  # only the H100's MPS slices
    taken = [capacity.take(name, asks=large) for name in "bc"]
    assert all(slot and slot.gpu_slice and slot.gpu_slice.isolation == "mps" for slot in taken)
    assert capacity.take("d", asks=large) is None  # the A100's slices are too small
    whole = capacity.take("e")
    assert whole is not None and whole.gpu_slice is None and capacity.take("f") is None
    assert slot_resources(first).startswith(f"{first.gpu_slice.memory_mib} MiB / 20% SMs of GPU-")
    capacity.release("b")
    assert capacity.take("g", asks=large) is not None


def test_the_offer_carries_its_slices_signed_and_the_log_says_them():
    bundle, _ = slots_of(offer(KEPT), machine(), isolate)
    terms = offer_terms(bundle, "addr_test1", BondView(None, 0, None))
    (entry,) = terms["gpu_slices"]
    assert SliceTerms.model_validate(entry).price_per_unit == 462
    assert entry["fault_note"] == FAULT_NOTES["mps"] and entry["selftest"] is None
    said = "3 slice(s) of 21725 MiB / 20% SMs of NVIDIA H100 80GB HBM3 (mps) at 462 lovelace/s"
    assert said in describe_offer(terms)
    measured = SliceSelfTest(matmul_gflops=51_000, alloc_ok_mib=21725, past_limit_refused=True)
    tested = offer_terms(bundle, "addr_test1", BondView(None, 0, None),
                         slice_tests={slice_key(bundle.gpu_slices[0]): measured})  # fmt: skip
    assert tested["gpu_slices"][0]["selftest"] == measured.model_dump()
    whole, _ = slots_of(offer(), machine(), isolate)
    assert "gpu_slices" not in offer_terms(whole, "addr_test1", BondView(None, 0, None))


def test_shared_gpus_round_trip_through_toml(tmp_path):
    runner = RunnerSettings(state_dir=tmp_path / "state")
    config = ProviderConfig(offer=offer(KEPT, {"uuid": A100, "slices": 2}), runner=runner)
    path = tmp_path / "provider.toml"
    path.write_text(to_toml(config))
    assert "[[offer.shared_gpus]]" in path.read_text()
    assert load_config(path).offer == config.offer


def test_a_fraction_no_shared_gpu_holds_is_refused_naming_it():
    def asking(sm: int) -> JobSpec:
        return JobSpec(image="busybox", command=["true"], max_duration_s=1,
                       max_price_lovelace=10**9, resources=Resources(gpu_memory_mib=8192,
                       gpu_sm_percent=sm))  # fmt: skip

    assert offer(KEPT).refusal(asking(20), machine()) is None  # the H100's 20% slices hold it
    assert offer(KEPT).refusal(asking(30), machine()) == (
        "a GPU slice of 8192 MiB and 30% of the SMs wanted, no shared GPU offers one that large"
    )
