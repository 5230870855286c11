"""`unchained pod ...` before any network: the spec it would sign is checked first (a missing or
malformed key is named, nothing is asked of the market), `pod ssh` of a pod not recorded here
says so, and the ssh command trusts each pod's host key under the pod's own name (ports are
reused by other pods; a pod's fresh host key must not collide with an earlier one's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from typer.testing import CliRunner

from consumer.cli.main import Env
from consumer.cli.pod import private_beside, ssh_command
from consumer.sdk.rental_store import RentalRecord
from tests.test_cli_imports import heavy, imported
from unchained.cli import app

NOWHERE = ["--market-url", "http://127.0.0.1:9", "--ogmios-url", "ws://127.0.0.1:9"]


def test_a_missing_or_malformed_key_is_named_before_any_network(tmp_path: Path):
    state = ["--state-dir", str(tmp_path / "state"), *NOWHERE]
    missing = CliRunner().invoke(app, ["pod", "start", "--ssh-key", str(tmp_path / "no.pub"),
                                       *state])  # fmt: skip
    assert missing.exit_code == 1 and f"cannot read {tmp_path / 'no.pub'}" in missing.output
    (tmp_path / "bad.pub").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    bad = CliRunner().invoke(app, ["pod", "start", "--ssh-key", str(tmp_path / "bad.pub"),
                                   *state])  # fmt: skip
    assert bad.exit_code == 1 and "ssh_key: must start with the key's type" in bad.output
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")],
                   check=True)  # fmt: skip
    too_big = CliRunner().invoke(app, ["pod", "start", "--ssh-key", str(tmp_path / "k.pub"),
                                       "--cpu-cores", "0", *state])  # fmt: skip
    assert too_big.exit_code == 1 and "resources.cpu_cores: Input should be greater" in (
        too_big.output)  # fmt: skip


def test_ssh_of_a_pod_not_recorded_here_says_so_without_loading_the_key_libraries(tmp_path):
    done, modules = imported("pod", "ssh", "nope", "--state-dir", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 1 and "no deployment named nope" in done.stdout + done.stderr
    assert heavy(modules) == []  # refused before the key's libraries load


def test_each_pod_host_key_is_trusted_under_its_own_name(tmp_path: Path):
    record = RentalRecord("lab", "pod", "http://gw.example:8480", "ab" * 28, "cd" * 28, {},
                              0, 5, 0)  # fmt: skip
    argv = ssh_command(Env(state_dir=tmp_path), record, 40022, tmp_path / "k",
                       ["BatchMode=yes"], ["echo", "hi"])  # fmt: skip
    assert argv == [
        "ssh", "-p", "40022", "-o", "HostKeyAlias=unchained-pod-lab", "-o",
        f"UserKnownHostsFile={tmp_path / 'pod_known_hosts'}", "-o",
        "StrictHostKeyChecking=accept-new", "-i", str(tmp_path / "k"), "-o", "IdentitiesOnly=yes",
        "-o", "BatchMode=yes", "pod@gw.example", "echo", "hi",
    ]  # fmt: skip


def test_ssh_logs_in_with_the_private_key_beside_the_public_one_the_pod_was_started_with(
    tmp_path: Path,
):
    public = tmp_path / "id_ed25519.pub"
    public.write_text("ssh-ed25519 AAAA renter@host\n")
    assert private_beside(public) is None  # no private key there: ssh's own choice
    (tmp_path / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    assert private_beside(public) == tmp_path / "id_ed25519"
    assert private_beside(tmp_path / "id_ed25519") is None  # not a .pub: nothing beside it
    record = RentalRecord("lab", "pod", "http://gw.example:8480", "ab" * 28, "cd" * 28, {}, 0, 5,
                          0, ssh_identity=str(private_beside(public)))  # fmt: skip
    argv = ssh_command(Env(state_dir=tmp_path), record, 40022, None, [], [])
    assert argv[argv.index("-i") + 1] == str(tmp_path / "id_ed25519")
    chosen = ssh_command(Env(state_dir=tmp_path), record, 40022, tmp_path / "other", [], [])
    assert chosen[chosen.index("-i") + 1] == str(tmp_path / "other")  # --identity wins
