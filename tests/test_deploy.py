"""`unchained deploy`: the deployment file it writes is one the chain commands accept, and its
CIP-57 blueprint beside it describes the very scripts on chain."""

from __future__ import annotations

import json
from pathlib import Path

from pycardano import PlutusV3Script, plutus_script_hash
from typer.testing import CliRunner

from offchain.market.settings import MarketSettings
from offchain.protocol.job.jobspec import MAX_DURATION_S
from offchain.protocol.tx import deployment_file
from offchain.protocol.tx.deployment import Deployment, validators
from unchained.cli import app
from unchained.deploy import NOTICE_MS, REFUND_WINDOW_MS, blueprint_path


def deploy(*args: str):
    return CliRunner().invoke(app, ["deploy", *args])


def test_deploy_writes_a_deployment_that_reads_back_from_the_chain(devnet, tmp_path):
    path = tmp_path.resolve() / "deployment.json"
    wallet = devnet.data_dir / "wallets" / "market.skey"
    result = deploy("--wallet", str(wallet), "--ogmios-url", devnet.url,
                    "--deployment", str(path), "--notice-ms", "30000",
                    "--refund-window-ms", "5000")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"wrote {path} and its CIP-57 blueprint {blueprint_path(path)}" in result.stdout
    deployment = deployment_file.load(path, devnet.context())
    assert deployment.notice_ms == 30_000 and deployment.slash_share_bps == 2_500
    assert deployment.refund_window_ms == 5_000
    published_as_a_blueprint(deployment, path)


def published_as_a_blueprint(deployment: Deployment, path: Path) -> None:
    """The CIP-57 blueprint beside the file: each validator's code is the script on chain,
    its hash that code's, its parameters the deployment's, and applying them to the committed
    artifacts (rebuilt from source by tests/contracts/test_build.py) gives that same code."""
    blueprint = json.loads(blueprint_path(path).read_text())
    by_title = {v["title"]: v for v in blueprint["validators"]}
    assert list(by_title) == ["escrow.spend", "bond.spend", "settle.withdraw", "channel.spend",
                              "claim.withdraw"]  # fmt: skip
    on_chain = {
        "escrow.spend": deployment.escrow_script, "bond.spend": deployment.bond_script,
        "settle.withdraw": deployment.settle_script, "channel.spend": deployment.channel_script,
        "claim.withdraw": deployment.claim_script,
    }  # fmt: skip
    for title, script in on_chain.items():
        entry = by_title[title]
        code = PlutusV3Script(bytes.fromhex(entry["compiledCode"]))
        assert code == script and entry["hash"] == plutus_script_hash(code).payload.hex()
        assert "parameters" not in entry and entry["redeemer"]["schema"]
    assert by_title["escrow.spend"]["datum"]["title"] == "EscrowDatum"
    rebuilt = validators(deployment.network_id, deployment.refund_window_ms,
                         deployment.notice_ms, deployment.slash_share_bps)  # fmt: skip
    settle, escrow, bond, claim, channel = rebuilt
    assert (settle, escrow, bond, claim, channel) == tuple(
        on_chain[t] for t in ("settle.withdraw", "escrow.spend", "bond.spend", "claim.withdraw",
                              "channel.spend")
    )  # fmt: skip
    assert "refund_window_ms = 5000" in by_title["escrow.spend"]["description"]


def test_the_default_notice_covers_the_longest_job_the_market_quotes():
    """A bond backs a job until its close + the refund window: the default notice must outlast
    the latest close a default market quotes (quote ttl + longest job + settle window)."""
    market = MarketSettings()
    latest_close = market.quote_ttl_ms + MAX_DURATION_S * 1000 + market.settle_window_ms
    assert latest_close + REFUND_WINDOW_MS < NOTICE_MS


def test_deploy_refuses_a_notice_no_longer_than_the_refund_window(tmp_path):
    """Such a bond would cover no job: refused before any key is read or script published."""
    path = tmp_path.resolve() / "deployment.json"
    result = deploy("--deployment", str(path), "--notice-ms", "5000", "--refund-window-ms", "5000")
    assert result.exit_code == 2 and "--notice-ms 5000 must be longer" in result.stderr
    assert not path.exists()


def test_deploy_says_which_key_it_cannot_read(tmp_path):
    absent = tmp_path.resolve() / "absent.skey"
    result = deploy("--wallet", str(absent))
    assert result.exit_code == 2 and f"no signing key at {absent}" in result.stderr
