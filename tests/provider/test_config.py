"""The operator's offer: TOML in and out, flags on top, prices, and which jobs it can take."""

from __future__ import annotations

import pytest
from pycardano import Address, Network, PaymentSigningKey, ScriptHash

from provider.config import (
    ConfigError,
    Offer,
    Prices,
    ProviderConfig,
    RunnerSettings,
    default_offer,
    load_config,
    load_settings,
    to_toml,
)
from provider.gpu.inventory import GpuInfo, GpuInventory, HostInventory
from provider.keys import payout_address
from provider.selftest.checks import job

GIB = 1 << 30
TESTNET = Network.TESTNET
MINIMAL = "[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\n"
BIG, SMALL = "GPU-0000000b-0000-4000-8000-000000000080", "GPU-0000000s-0000-4000-8000-000000000016"
MACHINE = HostInventory(
    cpu_cores=32,
    memory_bytes=256 * GIB,
    disk_total_bytes=2000 * GIB,
    disk_free_bytes=1000 * GIB,
    gpu=GpuInventory(
        gpus=(
            GpuInfo(0, BIG, "NVIDIA H100", 80 * GIB, "9.0", "disabled"),
            GpuInfo(1, SMALL, "NVIDIA T4", 16 * GIB, "7.5", "unsupported"),
        ),
        driver_version="550.54.15",
        cuda_version="12.4",
    ),
)
OFFER = Offer(
    gpus=[SMALL, BIG],
    cpu_cores=16,
    memory_mib=65536,
    disk_mib=102400,
    prices=Prices(gpu=2000, cpu_core=20, memory_gib=5, disk_gib=1),
)


def test_the_default_offer_is_the_machine_less_a_share_for_the_host():
    offer = default_offer(MACHINE)
    assert offer.gpus == [BIG, SMALL] and offer.cpu_cores == 32
    assert offer.memory_mib == 192 * 1024 and offer.disk_mib == 500 * 1024


def test_a_bundle_costs_the_sum_of_its_resources_per_second():
    spec = job("busybox", ["true"], gpus=2, cpu_cores=4, memory_mib=1536, disk_mib=100)
    # 2 GPUs, 4 cores, 1536 MiB -> 2 GiB (rounded up), 100 MiB -> 1 GiB
    assert OFFER.price_per_unit(spec) == 2 * 2000 + 4 * 20 + 2 * 5 + 1 * 1


def test_gpus_are_chosen_among_those_offered_with_enough_memory():
    assert OFFER.fitting_gpus(job("b", ["x"], gpus=1, min_vram_mib=20_000), MACHINE) == [BIG]
    assert OFFER.fitting_gpus(job("b", ["x"], gpus=1), MACHINE) == [SMALL, BIG]
    elsewhere = Offer(gpus=["GPU-not-here"], cpu_cores=1, memory_mib=64, disk_mib=1)
    assert elsewhere.fitting_gpus(job("b", ["x"], gpus=1), MACHINE) == []


def test_a_job_that_fits_is_taken():
    spec = job("busybox", ["true"], gpus=1, min_vram_mib=40_000, cpu_cores=8)
    spec = spec.model_copy(update={"max_price_lovelace": 10**9})
    assert OFFER.refusal(spec, MACHINE) is None


def test_every_reason_to_refuse_is_named():
    spec = job("b", ["x"], seconds=3600, gpus=2, min_vram_mib=40_000, cpu_cores=17,
               memory_mib=70_000, disk_mib=200_000)  # fmt: skip
    reasons = OFFER.refusal(spec, MACHINE).split("; ")
    # per second: 2 x 2000 + 17 x 20 + 69 GiB x 5 + 196 GiB x 1 = 4881
    assert reasons == [
        "2 GPU(s) with >= 40000 MiB wanted, 1 offered",
        "17 cores wanted, 16 offered",
        "70000 MiB memory wanted, 65536 offered",
        "200000 MiB disk wanted, 102400 offered",
        "3600 s at 4881 lovelace/s costs up to 17571600 lovelace, more than max_price_lovelace 0",
    ]


def test_toml_round_trip_and_flags_override_the_file(tmp_path):
    runner = RunnerSettings(state_dir=tmp_path / "state", pids_limit=256)
    config = ProviderConfig(offer=OFFER, runner=runner)
    path = tmp_path / "provider.toml"
    path.write_text(to_toml(config))
    assert load_config(path) == config
    assert "[offer.prices]" in path.read_text()
    moved = load_config(path, {"runner": {"state_dir": str(tmp_path / "elsewhere")}})
    assert moved.runner.state_dir == tmp_path / "elsewhere" and moved.offer == OFFER


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[offer]\ncpu_cores = 1\nmemory_mib = 64\n", "offer.disk_mib: required field is missing"),
        ("[offer]\ncpu_cores = 0\nmemory_mib = 64\ndisk_mib = 1\n", "offer.cpu_cores: Input"),
        ("[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\ngpu = 2\n", "offer.gpu: unknown"),
        ("[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\n[runner]\nuid = 0\n",
         "runner.uid: Input should be greater than or equal to 1"),
        ("[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\n[offer.prices]\ngpu = 1.5\n",
         "offer.prices.gpu: Input should be a valid integer"),
        ("[offer\n", "not valid TOML"),
        ("[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\n[daemon]\nplacement = \"ray\"\n",
         'placement = "ray" needs ray_address'),
        ("[offer]\ncpu_cores = 1\nmemory_mib = 64\ndisk_mib = 1\n[[offer.shared_gpus]]\n"
         "uuid = \"GPU-1\"\nkeep_memory_mib = 1\nkeep_sm_percent = 1\nslices = 1\n[daemon]\n"
         "placement = \"ray\"\nray_address = \"head:6379\"\n", "whole GPUs only"),
    ],
)  # fmt: skip
def test_bad_configs_name_the_file_and_the_field(tmp_path, text, message):
    path = tmp_path / "provider.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"provider\.toml") as caught:
        load_config(path)
    assert message in str(caught.value)


def test_a_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.toml")


def test_unlimited_pids_are_not_an_option():
    with pytest.raises(ValueError, match="pids_limit"):
        RunnerSettings(pids_limit=0)


def test_the_payout_address_is_a_keys_address_on_the_deployments_network(tmp_path):
    """`daemon.payout_address` (a cold wallet's): a bond's owner must sign, so a script's or a
    reward address is refused as the file is read, and another network's once the
    deployment's network is known; unset, the provider key's own address."""
    key = PaymentSigningKey.generate()
    cold = Address(PaymentSigningKey.generate().to_verification_key().hash(), network=TESTNET)
    path = tmp_path / "provider.toml"
    script = Address(ScriptHash(bytes(28)), network=TESTNET)
    reward = Address(staking_part=cold.payment_part, network=TESTNET)
    for bad, message in (
        ("addr_test1xyz", "is not a Cardano address (bech32)"),
        (str(script), "is not paid to a key"),
        (str(reward), "is not paid to a key"),
    ):
        path.write_text(f'{MINIMAL}[daemon]\npayout_address = "{bad}"\n')
        with pytest.raises(ConfigError, match="payout_address") as refused:
            load_config(path)
        assert message in str(refused.value)
    environ = {"UNCHAINED_PROVIDER_PAYOUT_ADDRESS": str(cold)}
    assert load_settings(tmp_path / "none.toml", environ=environ).daemon.payout_address == str(cold)
    assert payout_address(str(cold), key, TESTNET) == cold
    own = Address(key.to_verification_key().hash(), network=TESTNET)
    assert payout_address(None, key, TESTNET) == own
    with pytest.raises(ConfigError, match="is an address of testnet, not of mainnet"):
        payout_address(str(cold), key, Network.MAINNET)
