"""`unchained wallet fund ADDRESS --ada N`: the devnet's faucet from the CLI (a real
transaction on the devnet), in place of a hand-written `devnet/fund` JSON-RPC call; refused
on mainnet."""

from __future__ import annotations

import os
from pathlib import Path

from consumer.sdk.keys import new_wallet
from offchain.chain.follower import tip_point
from offchain.chain.submit import wait_for_confirmations
from tests.consumer.cli import run, run_json
from tests.protocol.onchain import balance


def fund_env(devnet) -> dict[str, str]:
    return {**os.environ, "UNCHAINED_OGMIOS_URL": devnet.url, "COLUMNS": "120"}


async def test_wallet_fund_pays_an_address_on_the_devnet_to_the_lovelace(devnet, tmp_path: Path):
    address = str(new_wallet(tmp_path / "new.skey", mnemonic=False).address)
    since = await tip_point(devnet.url)
    code, sent = run_json(fund_env(devnet), "wallet", "fund", address, "--ada", "12.5",
                          cwd=tmp_path)  # fmt: skip
    assert code == 0 and sent["lovelace"] == 12_500_000 and sent["address"] == address, sent
    await wait_for_confirmations(devnet.url, sent["tx"], since, timeout_s=30)
    assert balance(devnet, address) == 12_500_000
    done = run(fund_env(devnet), "wallet", "fund", address, "--ada", "1", cwd=tmp_path)
    assert done.returncode == 0 and "sent 1.000000 ADA to" in done.stdout, done.stderr


async def test_wallet_fund_refuses_mainnet_and_a_bad_amount(devnet, tmp_path: Path):
    address = str(new_wallet(tmp_path / "new.skey", mnemonic=False).address)
    env = fund_env(devnet)
    code, error = run_json(env, "wallet", "fund", address, "--network", "mainnet", cwd=tmp_path)
    assert code == 1 and error["error"] == "NotADevnet", error
    assert "devnet only" in error["message"]
    code, error = run_json(env, "wallet", "fund", address, "--ada", "0.0000001", cwd=tmp_path)
    assert code == 1 and error["error"] == "BadAmount" and error["field"] == "ada", error
    assert "6 decimals" in error["message"]
    assert balance(devnet, address) == 0
