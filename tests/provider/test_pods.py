"""Pods on the real engine: the pod image (built here from Debian packages) runs sshd hardened as
a job is; Debian's ssh client logs in with the spec's key only (a password, or another key,
is refused), as the provider's uid, home /workspace; /workspace outlives a stop and a second
pod of the same name sees it; each pod has a host key of its own; the port is on 127.0.0.1
only; what cannot start is removed with the reason."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from offchain.protocol.job.jobspec import DEFAULT_POD_IMAGE, PodSpec, ServiceSpec
from provider.config import RunnerSettings
from provider.images.pod import POD_SSH_PORT, pod_image
from provider.rentals.book import Rental
from provider.rentals.pods import Pods, PodStartError, pod_options, pod_resource_name
from provider.rentals.services import service_options
from tests.provider.test_services import HARDENED_HOST

NOTHING = {"containers": [], "networks": [], "workspaces": []}
T0 = 1_700_000_000_000


@pytest.fixture(scope="session")
def pod_base(client: docker.DockerClient) -> str:
    return pod_image(client)


@pytest.fixture(scope="module")
def ssh_keys(tmp_path_factory) -> dict[str, Path]:
    """Two ed25519 key pairs (private key paths): the renter's and a stranger's."""
    folder = tmp_path_factory.mktemp("ssh")
    for who in ("renter", "stranger"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / who)],
                       check=True)  # fmt: skip
    return {who: folder / who for who in ("renter", "stranger")}


def pod_spec(key: Path, **changes: object) -> PodSpec:
    fields = {"kind": "pod", "ssh_key": Path(f"{key}.pub").read_text(), "price_per_second": 1,
              "resources": {"cpu_cores": 1, "memory_mib": 256}}  # fmt: skip
    return PodSpec.model_validate({**fields, **changes})


def ssh(key: Path, upstream: str, *command: str, known_hosts: Path | None = None,
        options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:  # fmt: skip
    """Debian's ssh client, non-interactive, to the pod at `upstream` (http://HOST:PORT)."""
    host, port = upstream.removeprefix("http://").split(":")
    hosts = ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=accept-new"]
    if known_hosts is None:
        hosts = ["-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no"]
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", port, "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
         "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", *hosts, *options, f"pod@{host}",
         *command],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


@pytest.fixture
def pods(client, settings: RunnerSettings, pod_base) -> Iterator[Pods]:
    """Pods of the test's own; afterwards nothing of them may remain."""
    made = Pods(client, settings, ready_timeout_s=20)
    yield made
    for name in made.leftovers()["containers"]:
        made.stop(name)
    for name in made.leftovers()["workspaces"]:
        made.remove_workspace(name)
    assert made.leftovers() == NOTHING


def test_the_renter_logs_in_with_its_key_only_as_the_provider_uid(pods, ssh_keys):
    started = pods.start("lab", pod_spec(ssh_keys["renter"]))
    assert started.upstream.startswith("http://127.0.0.1:") and started.image_digest
    numpy = "python3 -c 'import numpy; print(numpy.arange(4).sum())'"
    script = f"id -u; id -un; pwd; echo $HOME; {numpy}"
    done = ssh(ssh_keys["renter"], started.upstream, f"{script}; echo $OMP_NUM_THREADS")
    assert done.returncode == 0, done.stderr
    # the provider's thread variables reach a session as they reach a job (the bundle's cores)
    assert done.stdout.split() == ["65534", "pod", "/workspace", "/workspace", "6", "1"]
    stranger = ssh(ssh_keys["stranger"], started.upstream, "true")
    assert stranger.returncode == 255 and "Permission denied (publickey)" in stranger.stderr
    password = ssh(ssh_keys["renter"], started.upstream, "true", options=(
        "-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password,"
        "keyboard-interactive"))  # fmt: skip
    assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr
    root = ssh(ssh_keys["renter"], started.upstream.replace("//", "//root@"), "true")
    assert root.returncode == 255


def test_workspace_outlives_a_stop_and_is_gone_once_removed(pods, ssh_keys):
    spec = pod_spec(ssh_keys["renter"])
    first = pods.start("keep", spec)
    wrote = ssh(ssh_keys["renter"], first.upstream, "echo kept > /workspace/note; "
                "touch /etc/x 2>&1 || echo read-only; touch /tmp/t && echo tmp")  # fmt: skip
    assert wrote.returncode == 0 and wrote.stdout.split()[-2:] == ["read-only", "tmp"], wrote
    pods.stop("keep")
    assert pods.leftovers() == {**NOTHING, "workspaces": ["keep"]}
    assert ssh(ssh_keys["renter"], first.upstream, "true").returncode == 255
    pods.stop("keep")  # again: nothing to do
    second = pods.start("keep", spec)
    read = ssh(ssh_keys["renter"], second.upstream, "cat /workspace/note")
    assert read.stdout == "kept\n", read.stderr
    pods.stop("keep")
    stopped = Rental("keep", "pod", b"\1" * 28, b"\2" * 32, spec.canonical_json().decode(),
                       "stopped", "asked", "", "", 0, 0, 1, 1, 2, stopped_ms=T0)  # fmt: skip
    assert not pods.forget(stopped, T0 + 3_599_999)  # kept an hour, as the spec says
    assert pods.leftovers()["workspaces"] == ["keep"]
    assert pods.forget(stopped, T0 + 3_600_000)
    assert pods.leftovers() == NOTHING
    third = pods.start("keep", spec)
    assert ssh(ssh_keys["renter"], third.upstream, "ls -A /workspace").stdout == ""


def test_each_pod_has_a_host_key_of_its_own(pods, ssh_keys, tmp_path):
    keys = []
    for name in ("one", "two"):
        started = pods.start(name, pod_spec(ssh_keys["renter"]))
        scan = subprocess.run(["ssh-keyscan", "-t", "ed25519", "-p",
                               started.upstream.rsplit(":", 1)[1], "127.0.0.1"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        keys.append(scan.stdout.split()[-1])
    assert keys[0] != keys[1] and all(key.startswith("AAAA") for key in keys)


def test_hardened_as_a_service_with_its_port_on_loopback_only(client, pods, ssh_keys, pod_base):
    started = pods.start("hard", pod_spec(ssh_keys["renter"]))
    container = client.containers.get(pod_resource_name(pods.runner_id, "hard"))
    twin_spec = ServiceSpec(kind="service", image=pod_base, port=1, price_per_request=1,
                            resources={"cpu_cores": 1, "memory_mib": 256})  # fmt: skip
    twin = client.containers.create(**service_options("r1", "twin", twin_spec, [], pods.settings))
    try:
        for key in set(HARDENED_HOST) - {"Tmpfs"}:
            assert container.attrs["HostConfig"][key] == twin.attrs["HostConfig"][key], key
        assert container.attrs["Config"]["User"] == "65534:65534"
        tmpfs = container.attrs["HostConfig"]["Tmpfs"]
        assert set(tmpfs) == {"/tmp", "/run/pod"} and tmpfs["/tmp"] == twin.attrs[
            "HostConfig"]["Tmpfs"]["/tmp"]  # fmt: skip
    finally:
        twin.remove(force=True)
    assert container.attrs["HostConfig"]["PortBindings"] == {
        f"{POD_SSH_PORT}/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}  # fmt: skip
    assert list(container.attrs["NetworkSettings"]["Networks"]) == [container.name]
    processes = ssh(ssh_keys["renter"], started.upstream, "ps -eo user,comm --no-headers")
    assert {line.split()[0] for line in processes.stdout.splitlines()} == {"pod"}, processes


def test_pod_options_add_to_the_shared_hardening(settings, ssh_keys):
    spec = pod_spec(ssh_keys["renter"])
    options = pod_options("r1", "opts", spec, "img", [], settings)
    assert options["image"] == "img" and options["user"] == "65534:65534"
    assert options["read_only"] and options["cap_drop"] == ["ALL"]
    assert options["environment"]["UNCHAINED_SSH_KEY"] == spec.ssh_key
    assert options["ports"] == {"2222/tcp": ("127.0.0.1",)}
    assert "uid=65534,gid=65534,mode=0700" in options["tmpfs"]["/run/pod"]
    assert spec.image == DEFAULT_POD_IMAGE


def test_what_cannot_start_is_removed_with_the_reason(pods, ssh_keys, busybox):
    # exited before its port was published (then the message names the pod image) or after
    with pytest.raises(PodStartError, match=r"pod nosshd: the pod exited (at once )?\(code \d+"):
        pods.start("nosshd", pod_spec(ssh_keys["renter"], image=busybox))
    assert pods.leftovers() == NOTHING
    pods.start("twice", pod_spec(ssh_keys["renter"]))
    with pytest.raises(PodStartError, match="a pod named twice is running here"):
        pods.start("twice", pod_spec(ssh_keys["renter"]))
    assert pods.leftovers()["containers"] == ["twice"]
    with pytest.raises(ValueError, match="asks for 1 GPUs, 0 given"):
        pods.start("gpu", pod_spec(ssh_keys["renter"], resources={"gpus": 1}))
