"""`unchained deploy`: the deployment file it writes is one the chain commands accept."""

from __future__ import annotations

from typer.testing import CliRunner

from offchain.protocol import deployment_file
from unchained.cli import app


def deploy(*args: str):
    return CliRunner().invoke(app, ["deploy", *args])


def test_deploy_writes_a_deployment_that_reads_back_from_the_chain(devnet, tmp_path):
    path = tmp_path.resolve() / "deployment.json"
    wallet = devnet.data_dir / "wallets" / "market.skey"
    result = deploy("--wallet", str(wallet), "--ogmios-url", devnet.url,
                    "--deployment", str(path), "--notice-ms", "30000")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"wrote {path}" in result.stdout
    deployment = deployment_file.load(path, devnet.context())
    assert deployment.notice_ms == 30_000 and deployment.slash_share_bps == 2_500


def test_deploy_says_which_key_it_cannot_read(tmp_path):
    absent = tmp_path.resolve() / "absent.skey"
    result = deploy("--wallet", str(absent))
    assert result.exit_code == 2 and f"no signing key at {absent}" in result.stderr
