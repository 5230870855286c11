"""The start-up checks where each app opens the chain: the provider's commands (the daemon
checks the CBOR flag too) and the renter's. A node or a file of another network, a network
setting that names none, and an Ogmios without `--include-cbor` (served by the labelled
stand-in of tests/chain/ogmios_standin.py) are refused with what to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from consumer.cli.main import Env, on_chain
from offchain.chain.network import NetworkMismatch, NetworkSettingError
from offchain.protocol.tx.deployment_file import DeploymentFile
from provider.cli.options import open_deployment
from tests.chain.ogmios_standin import BEFORE, Running, StandIn
from unchained.cli import app

REF, HASH = "00" * 32 + "#0", "00" * 28


def deployment_at(path: Path, magic: int | None = 42) -> Path:
    """A deployment file as `unchained deploy` writes it (its references need not exist: the
    checks under test refuse before any is read)."""
    refs = {name: REF for name in ("escrow_ref", "bond_ref", "settle_ref", "channel_ref",
                                   "claim_ref")}  # fmt: skip
    hashes = {name: HASH for name in ("escrow_hash", "bond_hash", "settle_hash", "channel_hash",
                                      "claim_hash")}  # fmt: skip
    record = DeploymentFile(network_id=0, notice_ms=2, slash_share_bps=1, refund_window_ms=1,
                            network_magic=magic, published_after=BEFORE,
                            **refs, **hashes)  # fmt: skip
    path.write_text(record.model_dump_json())
    return path


def test_the_daemon_refuses_an_ogmios_without_include_cbor(tmp_path, capsys):
    """`provider run` opens the chain with follows=True: the flag is read on the first
    transaction after the deployment's chain point, before any job is taken."""
    path = deployment_at(tmp_path / "deployment.json")
    stand_in = Running(StandIn("v6.14.0", include_cbor=False))
    with stand_in as ogmios, pytest.raises(typer.Exit) as exited:
        open_deployment(ogmios.url, path, "devnet", follows=True)
    assert exited.value.exit_code == 1
    stderr = capsys.readouterr().err
    assert "without its CBOR: restart Ogmios with --include-cbor" in stderr


def test_a_provider_command_refuses_another_networks_deployment_file(devnet, tmp_path, capsys):
    """Read before the chain is asked anything."""
    path = deployment_at(tmp_path / "deployment.json", magic=2)
    with pytest.raises(typer.Exit) as exited:
        open_deployment(devnet.url, path, "preprod")
    assert exited.value.exit_code == 1
    assert "was deployed on preview (magic 2), but the network setting is preprod" in (
        capsys.readouterr().err
    )


def test_provider_status_refuses_a_setting_that_names_no_network(tmp_path):
    result = CliRunner().invoke(app, ["provider", "status", "--network", "testnet",
                                      "--config", str(tmp_path / "provider.toml")])  # fmt: skip
    assert result.exit_code == 2 and "testnet names no single network" in result.stderr


def test_the_renter_refuses_a_node_of_another_network_before_signing(devnet, tmp_path):
    path = deployment_at(tmp_path / "deployment.json")
    env = Env(ogmios_url=devnet.url, deployment=path, network="preview")
    with pytest.raises(NetworkMismatch, match=r"deployed on devnet \(magic 42\), but the network"):
        on_chain(env)
    path = deployment_at(tmp_path / "old.json", magic=None)  # a file without its magic
    with pytest.raises(NetworkMismatch, match=r"runs devnet \(magic 42\), but the network setting"):
        on_chain(Env(ogmios_url=devnet.url, deployment=path, network="preview"))
    with pytest.raises(NetworkSettingError, match="testnet names no single network"):
        on_chain(Env(ogmios_url=devnet.url, deployment=path, network="testnet"))


def test_the_renters_cli_says_the_mismatch_and_exits_1(devnet, tmp_path):
    path = deployment_at(tmp_path / "deployment.json")
    result = CliRunner().invoke(app, ["channel", "status", "00" * 32 + "#0", "--ogmios-url",
                                      devnet.url, "--deployment", str(path), "--network",
                                      "mainnet", "--state-dir", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "but the network setting is mainnet (magic 764824073)" in result.stderr


@pytest.mark.parametrize(
    ("stand_in", "said"),
    [
        (StandIn("v6.14.0", include_cbor=False), "restart Ogmios with --include-cbor"),
        (StandIn("v7.0.0"), "Ogmios 7.0.0 is newer than Unchained supports"),
        (StandIn("v6.14.0", magic=2), "was deployed on devnet (magic 42), but the node runs "
         "preview (magic 2): pass the deployment made on preview"),
    ],
)  # fmt: skip
def test_the_market_refuses_to_serve_on_a_chain_it_cannot_follow(stand_in, said, tmp_path):
    path = deployment_at(tmp_path / "deployment.json")
    with Running(stand_in) as ogmios:
        result = CliRunner().invoke(app, ["market", "serve", "--ogmios-url", ogmios.url,
                                          "--deployment", str(path), "--data-dir",
                                          str(tmp_path / "market")])  # fmt: skip
    assert result.exit_code == 1 and said in result.stderr, result.output
    assert not (tmp_path / "market").exists()  # refused before any database was made


def test_the_renters_wallet_is_made_for_the_network_set_and_a_bad_setting_is_refused(tmp_path):
    def wallet(*args: str) -> Result:
        return CliRunner().invoke(app, ["wallet", *args, "--json"])

    made = wallet("new", "--key", str(tmp_path / "main.skey"), "--network", "mainnet")
    assert made.exit_code == 0 and json.loads(made.stdout)["address"].startswith("addr1")
    made = wallet("address", "--key", str(tmp_path / "main.skey"), "--network", "preprod")
    assert json.loads(made.stdout)["address"].startswith("addr_test1")
    refused = wallet("new", "--key", str(tmp_path / "other.skey"), "--network", "prepod")
    assert refused.exit_code == 1 and not (tmp_path / "other.skey").exists()
    error = json.loads(refused.stdout)
    assert error["error"] == "NetworkSettingError" and "'prepod' is not one of" in error["message"]
