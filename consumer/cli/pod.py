"""`unchained pod ...`: interactive pods, a container with the renter's SSH key in its sshd,
reached through the provider's gateway and paid per second from a payment channel.

`pod start` routes the pod as `endpoint deploy` routes a service (`consumer.sdk.deploy_route`: the
best online offer with a gateway that takes the bundle, at that offer's price per second; an
open channel to that provider with enough left, or a new one of --deposit), signs the deploy
to the gateway, records it (`consumer.sdk.rental_store`) and starts the channel's pod agent
(`consumer.cli.pod_agent`: it pays the seconds run, every few seconds, until the channel's pods
stop). `pod ssh NAME` runs Debian's `ssh` to the gateway's port for the pod (key only; each
pod's host key is trusted on first use under the pod's own name), `pod stop NAME` stops it and
waits for the agent's last IOU, `pod list` shows your pods as their gateways do. (No
`from __future__ import annotations`: typer reads these annotations.)"""

import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

from consumer.cli.main import Env, Json, command, emit
from consumer.sdk.errors import ConsumerError
from offchain.protocol.ledger.amounts import ada

if TYPE_CHECKING:
    from consumer.sdk.rental_store import RentalRecord

app = typer.Typer(help="Interactive GPU pods over SSH, paid per second from a payment channel.",
                  no_args_is_help=True)  # fmt: skip

Name = Annotated[str, typer.Argument(help="The pod's name, as `pod list` shows it.")]
SSH_KEYS = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")  # ssh's own order of preference
KNOWN_HOSTS = "pod_known_hosts"
AGENT_WAIT_S = 30.0


def default_ssh_key() -> Path:
    """The first public key ssh itself would offer (~/.ssh)."""
    for name in SSH_KEYS:
        path = Path.home() / ".ssh" / name
        if path.exists():
            return path
    raise ConsumerError("no SSH public key in ~/.ssh (id_ed25519.pub, id_ecdsa.pub, "
                        "id_rsa.pub): make one with `ssh-keygen -t ed25519` or pass "
                        "--ssh-key", field="--ssh-key")  # fmt: skip


def private_beside(public: Path) -> Path | None:
    """The private key `ssh-keygen` wrote beside `public` (`id_ed25519` of `id_ed25519.pub`),
    if it is there: `pod ssh` logs in with the key the pod was started with."""
    private = public.with_suffix("") if public.suffix == ".pub" else None
    return private.resolve() if private is not None and private.is_file() else None


def pod_spec(ssh_key: Path, gpus: int, image: str | None, price: int, **bundle: int) -> Any:
    """The pod spec the renter signs (JobSpecError naming a bad field)."""
    from offchain.protocol.job.jobspec import parse_podspec

    try:
        key = ssh_key.read_text()
    except OSError as exc:
        raise ConsumerError(f"cannot read {ssh_key}: {exc.strerror}", field="--ssh-key") from exc
    fields: dict[str, Any] = {"kind": "pod", "ssh_key": key, "price_per_second": price,
                              "resources": {"gpus": gpus, **bundle}}  # fmt: skip
    if image is not None:
        fields["image"] = image
    return parse_podspec(fields)


def agent_arguments(env: Env) -> list[str]:
    """The connection options the pod agent needs, as absolute paths."""
    return ["--state-dir", str(env.state_dir.absolute()), "--key", str(env.key.absolute()),
            "--deployment", str(env.deployment.absolute()), "--network", env.network]  # fmt: skip


@command(app, "start")
def start(
    env: Env,
    gpus: Annotated[int, typer.Option(help="GPUs in the pod.")] = 0,
    image: Annotated[str | None, typer.Option(
        help="Its image (default: the pod image, Debian with python3; yours must be built "
        "from it).")] = None,
    ssh_key: Annotated[Path | None, typer.Option(
        help="The public key that may log in (default: ~/.ssh/id_ed25519.pub, or ecdsa, or "
        "rsa).")] = None,
    deposit: Annotated[str, typer.Option(help="ADA to lock in a new channel if no open one to "
                                         "the chosen provider has that much left.")] = "10",
    cpu_cores: Annotated[int, typer.Option(help="CPU cores.")] = 1,
    memory_mib: Annotated[int, typer.Option(help="Memory, MiB.")] = 1024,
    max_price_per_second: Annotated[int | None, typer.Option(
        help="The most lovelace per second you pay (default: the cheapest offer's).")] = None,
    name: Annotated[str | None, typer.Option(help="Its name (default: pod-HEX).")] = None,
    wait: Annotated[int, typer.Option(help="Seconds to wait for it to run (0: do not).")] = 120,
    as_json: Json = False,
) -> None:  # fmt: skip
    """Start a pod: the best online offer with a gateway that takes it, at that offer's price
    per second, paid from an open channel to that provider or a new one of --deposit; a
    background agent pays the seconds it runs until you stop it."""
    import secrets

    from consumer.cli.channel import channel_sdk, lovelace_of
    from consumer.cli.endpoint import until_settled
    from consumer.cli.main import market_reader, run_sync
    from consumer.cli.pod_agent import spawn
    from consumer.sdk.deploy_route import channel_for, choose_offer
    from consumer.sdk.endpoint_client import GatewayControl
    from consumer.sdk.rental_store import RentalRecord, RentalStore
    from offchain.protocol.job.jobspec import MAX_SUPPLY_LOVELACE

    key_path = ssh_key or default_ssh_key()
    bundle = {"cpu_cores": cpu_cores, "memory_mib": memory_mib}
    most = max_price_per_second or MAX_SUPPLY_LOVELACE  # any: the offer's own price is paid
    asked = pod_spec(key_path, gpus, image, most, **bundle)
    lovelace = lovelace_of("--deposit", deposit)
    sdk = channel_sdk(env)
    market = market_reader(env)
    offer = choose_offer(market, asked, env.market_identity)
    spec = pod_spec(key_path, gpus, image, int(offer.terms["price_per_unit"]), **bundle)
    name = name or f"pod-{secrets.token_hex(3)}"
    with GatewayControl(offer.gateway_url, sdk.key, sdk.deployment.network_id) as control:
        control.check(name, spec.model_dump(mode="json"))  # refused before money moves
    channel = run_sync(channel_for(sdk, offer, lovelace, market, env.market_identity))
    utxo = sdk.status(channel.channel_id).utxo
    record = RentalRecord(
        name=name, kind="pod", gateway_url=offer.gateway_url, provider_id=offer.provider_id,
        channel_id=channel.channel_id, spec=spec.model_dump(mode="json"), price_per_request=0,
        price_per_second=spec.price_per_second, created_ms=time.time_ns() // 1_000_000,
        ssh_identity=str(private_beside(key_path) or ""),
    )  # fmt: skip
    with GatewayControl(offer.gateway_url, sdk.key, sdk.deployment.network_id) as control:
        admission = (utxo, channel.terms_cbor) if utxo else None
        RentalStore(env.state_dir).save(record)  # first: the agent pays for what it finds
        try:
            control.deploy(name, bytes.fromhex(channel.channel_id), record.spec, admission)
        except ConsumerError:
            RentalStore(env.state_dir).forget(name)
            raise
        spawn(agent_arguments(env), env.state_dir, channel.channel_id)
        status = until_settled(control, name, bytes.fromhex(channel.channel_id), wait)
    emit(as_json, {**status, "gateway_url": offer.gateway_url, "provider_id": offer.provider_id},
         f"{name}: {status['state']}{': ' + status['reason'] if status['reason'] else ''} on "
         f"{offer.gateway_url} (provider {offer.provider_id[:16]}) at "
         f"{ada(spec.price_per_second)} per second, paid on channel {channel.channel_id[:16]}; "
         f"log in: `unchained pod ssh {name}`")  # fmt: skip
    if status["state"] == "failed":
        raise typer.Exit(1)


def ssh_command(
    env: Env, record: "RentalRecord", port: int, identity: Path | None, options: list[str],
    command_line: list[str],
) -> list[str]:  # fmt: skip
    """Debian's ssh to the pod at the gateway's host and `port`: its host key trusted on first
    use under the pod's name in the state directory's own known_hosts; logged in with
    `identity`, else the private key beside the public key it was started with."""
    host = urlsplit(record.gateway_url).hostname or "127.0.0.1"
    if identity is None and record.ssh_identity:
        identity = Path(record.ssh_identity)
    known = env.state_dir / KNOWN_HOSTS
    argv = ["ssh", "-p", str(port), "-o", f"HostKeyAlias=unchained-pod-{record.name}", "-o",
            f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=accept-new"]  # fmt: skip
    if identity is not None:
        argv += ["-i", str(identity), "-o", "IdentitiesOnly=yes"]
    for option in options:
        argv += ["-o", option]
    return [*argv, f"pod@{host}", *command_line]


@command(app, "ssh")
def ssh(
    env: Env,
    name: Name,
    command_line: Annotated[list[str] | None, typer.Argument(
        help="A command to run instead of a shell (after --).")] = None,
    identity: Annotated[Path | None, typer.Option(
        "--identity", "-i", help="The private key (default: the one beside the public key "
        "the pod was started with, else ssh's own choice).")] = None,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-o", help="An ssh option (KEY=VALUE), repeatable.")] = None,
    as_json: Json = False,
) -> None:  # fmt: skip
    """Log in to your pod with ssh (through its provider's gateway), or run a command in it."""
    from consumer.cli.endpoint import control_of, local_record

    del as_json  # ssh's own output is the output
    record = local_record(env, name)
    with control_of(env, record) as control:  # its port is shown to its renter alone
        status = control.status(name, bytes.fromhex(record.channel_id))
    if status["state"] != "running" or not status.get("public_port"):
        raise ConsumerError(f"pod {name} is {status['state']}"
                            f"{': ' + status['reason'] if status.get('reason') else ''}"
                            f"{'' if status.get('public_port') else ' (no port yet)'}",
                            pod=name, state=status["state"])  # fmt: skip
    if shutil.which("ssh") is None:
        raise ConsumerError("no ssh client here: install Debian's openssh-client")
    env.state_dir.mkdir(parents=True, exist_ok=True)
    argv = ssh_command(env, record, int(status["public_port"]), identity, option or [],
                       command_line or [])  # fmt: skip
    sys.stdout.flush()
    os.execvp("ssh", argv)


@command(app, "stop")
def stop(env: Env, name: Name, as_json: Json = False) -> None:
    """Stop your pod (billing ends now; its /workspace is kept a while) and wait for the last
    IOU for the seconds it ran (the pod agent's, or this command's if no agent runs)."""
    from consumer.cli.endpoint import control_of, local_record, pay_channel, signer_of
    from consumer.cli.pod_agent import wait_done
    from consumer.sdk.channel_store import ChannelStore

    record = local_record(env, name)
    with control_of(env, record) as control:
        control.stop(name, bytes.fromhex(record.channel_id))
        last = wait_done(env.state_dir, record.channel_id, AGENT_WAIT_S)
        if last:  # no agent left (it paid the last IOU, or died): pay what is still owed
            pay_channel(env, control, signer_of(env, record.channel_id), 0)
        status = control.status(name, bytes.fromhex(record.channel_id))
    signed = ChannelStore(env.state_dir).signed(record.channel_id)
    seconds = (status["stopped_ms"] - status["started_ms"]) // 1000 if status["started_ms"] else 0
    paying = "" if last else " (its agent still pays for the channel's other pods)"
    emit(as_json, {**status, "seconds": seconds, "signed": signed},
         f"{name}: {status['state']} after {seconds} s at {ada(record.price_per_second)} per "
         f"second; {ada(signed)} signed in all on channel {record.channel_id[:16]}{paying}; its "
         f"/workspace is kept {record.spec.get('workspace_keep_s', 0)} s")  # fmt: skip


@command(app, "list")
def list_pods(env: Env, as_json: Json = False) -> None:
    """Your pods here, each as its gateway shows it now."""
    from consumer.cli.endpoint import deployment_statuses
    from consumer.cli.table import render

    shown = [status for status in deployment_statuses(env) if status["kind"] == "pod"]
    rows = [[p["name"], p["state"], str(p.get("public_port") or ""),
             ada(p["price_per_second"]) if "price_per_second" in p else "",
             ada(p["due"]) if "due" in p else "", p["gateway_url"]] for p in shown]  # fmt: skip
    emit(as_json, shown, render(("pod", "state", "port", "per second", "channel due",
                                 "gateway"), rows))  # fmt: skip
