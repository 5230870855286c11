"""Devnet settings from a TOML file: protocol parameters and the clock, flags winning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from devnet.process import DevnetProcess, free_port
from offchain.chain.ogmios import request

pytestmark = pytest.mark.devnet  # each test starts a devnet of its own


async def test_toml_overrides_protocol_parameters_and_flags_win(tmp_path):
    config = tmp_path / "devnet.toml"
    config.write_text(
        "slot_length = 5000\n[protocol_parameters]\nmax_block_memory = 72_000_000\n"
        'price_memory = "1/100"\n'
    )
    devnet = DevnetProcess(
        tmp_path / "data", slot_length_ms=250, extra_args=("--config", str(config))
    )
    devnet.start()
    try:
        params = await request(devnet.url, "queryLedgerState/protocolParameters")
        shelley = await request(devnet.url, "queryNetwork/genesisConfiguration", {"era": "shelley"})
    finally:
        devnet.stop()
    assert params["maxExecutionUnitsPerBlock"]["memory"] == 72_000_000
    assert params["scriptExecutionPrices"]["memory"] == "1/100"
    assert shelley["slotLength"] == {"milliseconds": 250}  # the flag beats the file


def test_unknown_settings_are_refused(tmp_path):
    config = tmp_path / "devnet.toml"
    config.write_text("slot_lenght = 5\n")
    devnet = DevnetProcess(tmp_path / "data", extra_args=("--config", str(config)))
    with pytest.raises(RuntimeError, match="devnet exited"):
        devnet.start()
    log = (tmp_path / "data" / "devnet.log").read_text()
    assert "slot_lenght" in log


def test_a_relative_data_dir_in_the_file_is_read_from_its_folder(tmp_path):
    folder = tmp_path.resolve()
    (folder / "devnet.toml").write_text('data_dir = "chain"\n')
    (folder / "elsewhere").mkdir()
    command = [sys.executable, "-m", "unchained.cli", "devnet", "--config", "../devnet.toml",
               "--port", str(free_port())]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        command, cwd=folder / "elsewhere", env=env, stdout=subprocess.PIPE, text=True
    ) as devnet:
        try:
            first_wallet = devnet.stdout.readline()
        finally:
            devnet.terminate()
    assert f"({folder / 'chain' / 'wallets'}/" in first_wallet
