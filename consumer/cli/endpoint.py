"""`unchained endpoint ...`: deploy a service spec on a provider (`deploy`: the offer chosen
and the channel opened or reused client side, `consumer.sdk.deploy_route`; the deploy signed to the
provider's gateway directly), call an inference endpoint on a provider's gateway, each request
paid from a payment channel by a cumulative IOU (`consumer.sdk.endpoint_client` is the SDK), list
your deployments or a gateway's endpoints, read their logs and stop them. The channel is one
recorded in the state directory; the IOUs are signed for the deployment file's network and
channel script, read from the file alone (no chain: a call needs only the gateway). The options
and `--json` are the job commands' (`consumer.cli.main`). (No `from __future__ import annotations`:
typer reads these annotations through `consumer.cli.main.command`'s signature.)"""

import contextlib
import json
import re
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from consumer.cli.example import EXAMPLE_SERVICE_SPEC
from consumer.cli.main import Env, Json, command, emit, init_command
from consumer.sdk.errors import ConsumerError
from offchain.protocol.ledger.amounts import ada

if TYPE_CHECKING:
    import httpx

    from consumer.sdk.endpoint_client import GatewayControl
    from consumer.sdk.iou_signer import IouSigner
    from consumer.sdk.rental_store import RentalRecord

app = typer.Typer(help="Inference endpoints on a provider's gateway, paid per request from a "
                  "payment channel.", no_args_is_help=True)  # fmt: skip

Gateway = Annotated[str, typer.Option(help="The provider's gateway, e.g. http://host:8700.")]
MaybeGateway = Annotated[str | None, typer.Option(
    help="The provider's gateway, e.g. http://host:8700 (default: the one NAME was deployed "
    "on).")]  # fmt: skip
Name = Annotated[str, typer.Argument(help="The deployment's name, as `endpoint list` shows it.")]
AHEAD_S = 2  # per-second endpoints: seconds paid ahead before a call


def listed(client: "httpx.Client", gateway: str) -> list[dict[str, Any]]:
    """The gateway's endpoints (`GET /endpoints`): name and prices, nothing secret."""
    import httpx

    url = f"{gateway.rstrip('/')}/endpoints"
    try:
        response = client.get(url, timeout=30)
    except httpx.HTTPError as exc:
        raise ConsumerError(f"cannot reach the gateway at {gateway} ({exc or type(exc).__name__})",
                            gateway=gateway) from exc  # fmt: skip
    if response.status_code != 200:
        raise ConsumerError(f"{url} answered {response.status_code}: {response.text[:200]}",
                            gateway=gateway, status=response.status_code)  # fmt: skip
    try:
        endpoints: list[dict[str, Any]] = response.json()
        for endpoint in endpoints:
            if not (
                isinstance(endpoint["name"], str) and isinstance(endpoint["price_per_request"], int)
            ):
                raise TypeError(endpoint)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConsumerError(f"{url} is not a gateway's listing of endpoints: "
                            f"{response.text[:200]!r}", gateway=gateway) from exc  # fmt: skip
    return endpoints


def price_of(client: "httpx.Client", gateway: str, name: str) -> int:
    """The price per request the gateway lists for endpoint `name`; ConsumerError naming the
    endpoints it has when none is `name`."""
    prices = {e["name"]: e["price_per_request"] for e in listed(client, gateway)}
    if name not in prices:
        raise ConsumerError(f"the gateway at {gateway} has no endpoint {name!r}: it has "
                            f"{', '.join(sorted(prices)) or 'none'}", endpoint=name)  # fmt: skip
    return prices[name]


def signer_of(env: Env, channel: str) -> "IouSigner":
    """The IOU signer of the channel recorded here, for the deployment file's script (a plain
    key signs without pycardano: `consumer.cli.main.request_key`)."""
    from consumer.cli.main import request_key
    from consumer.sdk.channel_store import ChannelStore
    from consumer.sdk.iou_signer import IouSigner
    from offchain.protocol.tx.deployment_channel import channel_script

    network_id, channel_hash = channel_script(env.deployment)
    store = ChannelStore(env.state_dir)
    return IouSigner(request_key(env), network_id, channel_hash, store.get(channel), store)


@command(app, "call")
def call(
    env: Env,
    name: Annotated[str, typer.Argument(help="The endpoint's name, as `endpoint list` shows it.")],
    data: Annotated[str, typer.Option(help="The request's body: JSON.")],
    gateway: MaybeGateway = None,
    channel: Annotated[str | None, typer.Option(help="The channel that pays (its id or a unique "
                                                "prefix, as `channel list` shows it; default: "
                                                "the one NAME was deployed with).")] = None,
    path: Annotated[str, typer.Option(help="The path on the endpoint.")] = "/predict",
    method: Annotated[str, typer.Option(help="The HTTP method.")] = "POST",
    as_json: Json = False,
) -> None:  # fmt: skip
    """Send one request to an endpoint, paid by an IOU on your channel to its provider: print
    the answer and what it cost (the price the gateway lists for the endpoint)."""
    import httpx

    from consumer.sdk.endpoint_client import DEFAULT_TIMEOUT_S, EndpointClient

    try:
        body = json.loads(data)
    except ValueError as exc:
        raise ConsumerError(f"--data is not JSON: {exc}", field="--data") from exc
    record = None
    if gateway is None or channel is None:
        record = local_record(env, name)
        gateway, channel = gateway or record.gateway_url, channel or record.channel_id
    # one client for the listing and the request: one connection, one TLS set-up (its
    # certificates take longer to load than the request)
    with httpx.Client(timeout=DEFAULT_TIMEOUT_S) as http:
        price = price_of(http, gateway, name)
        signer = signer_of(env, channel)
        before = signer.signed
        if record is not None and record.price_per_second:  # seconds run: paid first, ahead
            with control_of(env, record) as control:
                pay_channel(env, control, signer, AHEAD_S)
        client = EndpointClient(gateway, name, signer, price, http)
        try:
            response = client.request(method.upper(), path, json=body)
        except httpx.HTTPError as exc:
            raise ConsumerError(f"{name} on {gateway}: no answer ({exc or type(exc).__name__})"
                                f"; paid {ada(signer.signed - before)}", gateway=gateway,
                                paid=signer.signed - before) from exc  # fmt: skip
    paid = signer.signed - before
    try:
        answer: Any = response.json()
    except ValueError:
        answer = response.text
    shown = answer if isinstance(answer, str) else json.dumps(answer, indent=2)
    emit(as_json, {"endpoint": name, "status": response.status_code, "answer": answer,
                   "paid": paid, "total": signer.signed, "price": price,
                   "channel": signer.channel.hex()},
         f"{shown}\nHTTP {response.status_code}; paid {ada(paid)} ({ada(signer.signed)} in all "
         f"on channel {signer.channel.hex()[:16]})")  # fmt: skip
    if response.is_error:
        raise typer.Exit(1)


@command(app, "list")
def list_endpoints(env: Env, gateway: MaybeGateway = None, as_json: Json = False) -> None:
    """Your deployments here, each as its gateway shows it now; with --gateway, the endpoints
    that gateway serves, with their prices."""
    from consumer.cli.table import render

    if gateway is not None:
        import httpx

        with httpx.Client() as http:
            endpoints = listed(http, gateway)
        rows = [[e["name"], ada(e["price_per_request"]), ada(e.get("price_per_second", 0))]
                for e in endpoints]  # fmt: skip
        emit(as_json, endpoints, render(("endpoint", "per request", "per second"), rows))
        return
    shown = deployment_statuses(env)
    rows = [[d["name"], d["kind"], d["state"], str(d.get("requests", "")),
             ada(d["due"]) if "due" in d else "", d["gateway_url"]] for d in shown]  # fmt: skip
    emit(as_json, shown, render(("name", "kind", "state", "requests", "channel due", "gateway"),
                                rows))  # fmt: skip


init_command(app, "service", "svc.yaml", EXAMPLE_SERVICE_SPEC, "endpoint deploy")


@command(app, "deploy")
def deploy(
    env: Env,
    spec_path: Annotated[Path, typer.Argument(help="The service spec (YAML, kind: service).")],
    deposit: Annotated[str, typer.Option(help="ADA to lock in a new channel if no open one to "
                                         "the chosen provider has that much left.")] = "10",
    name: Annotated[str | None, typer.Option(help="Its name (default: the image's and a random "
                                             "suffix).")] = None,
    wait: Annotated[int, typer.Option(help="Seconds to wait for it to run (0: do not).")] = 120,
    as_json: Json = False,
) -> None:  # fmt: skip
    """Deploy a service: the best online offer with a gateway that takes the spec (its image
    cached there first, then the cheapest), paid from an open channel to that provider or a
    new one of --deposit; the deploy is signed to its gateway, which runs it."""
    from consumer.cli.channel import channel_sdk, lovelace_of
    from consumer.cli.main import market_reader, run_sync
    from consumer.sdk.deploy_route import channel_for, choose_offer, pinned_spec
    from consumer.sdk.endpoint_client import GatewayControl
    from consumer.sdk.rental_store import RentalRecord, RentalStore
    from offchain.protocol.job.jobspec import load_servicespec

    spec = pinned_spec(load_servicespec(spec_path))
    lovelace = lovelace_of("--deposit", deposit)
    sdk = channel_sdk(env)
    market = market_reader(env)
    offer = choose_offer(market, spec, env.market_identity)
    name = name or default_name(spec.image)
    with GatewayControl(offer.gateway_url, sdk.key, sdk.deployment.network_id) as control:
        control.check(name, spec.model_dump(mode="json"))  # refused before money moves
    channel = run_sync(channel_for(sdk, offer, lovelace, market, env.market_identity))
    utxo = channel_utxo(sdk, channel.channel_id)
    record = RentalRecord(
        name=name, kind="endpoint", gateway_url=offer.gateway_url,
        provider_id=offer.provider_id, channel_id=channel.channel_id,
        spec=spec.model_dump(mode="json"), price_per_request=spec.price_per_request,
        price_per_second=spec.price_per_second, created_ms=time.time_ns() // 1_000_000,
    )  # fmt: skip
    with GatewayControl(offer.gateway_url, sdk.key, sdk.deployment.network_id) as control:
        admission = (utxo, channel.terms_cbor) if utxo else None
        control.deploy(name, bytes.fromhex(channel.channel_id), record.spec, admission)
        RentalStore(env.state_dir).save(record)
        status = until_settled(control, name, bytes.fromhex(channel.channel_id), wait)
    emit(as_json, {**status, "gateway_url": offer.gateway_url, "provider_id": offer.provider_id},
         f"{name}: {status['state']}{': ' + status['reason'] if status['reason'] else ''} on "
         f"{offer.gateway_url} (provider {offer.provider_id[:16]}), paid on channel "
         f"{channel.channel_id[:16]}: `unchained endpoint call {name} --data ...`")  # fmt: skip
    if status["state"] == "failed":
        raise typer.Exit(1)


@command(app, "proxy")
def proxy(
    env: Env,
    name: Name,
    port: Annotated[int, typer.Option(help="The local port (0: any free one).")] = 0,
    tokenizer: Annotated[str, typer.Option(help="The Python module that counts the model's "
                                           "tokens (`prompt_tokens`, `completion_tokens`).")]
    = "samples.llm_tokens",
    as_json: Json = False,
) -> None:  # fmt: skip
    """Serve your llm endpoint NAME here as an OpenAI base URL (any OpenAI client, any API
    key), each request paid on its channel by your own count of its tokens, until Ctrl-C;
    then pay what was received."""
    import importlib
    import signal
    import sys
    import threading

    from consumer.sdk.llm_meter import LlmPrices
    from consumer.sdk.llm_proxy import LlmProxy

    record = local_record(env, name)
    if record.spec.get("kind") != "llm":
        raise ConsumerError(f"{name} is a {record.spec.get('kind')} endpoint, not an llm one: "
                            "`unchained endpoint call` it", endpoint=name)  # fmt: skip
    counter = importlib.import_module(tokenizer)
    signer = signer_of(env, record.channel_id)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stop settles, as Ctrl-C does
    with LlmProxy(record.gateway_url, name, signer, LlmPrices.of_spec(record.spec), counter,
                  port=port) as served:  # fmt: skip
        emit(as_json, {"name": name, "base_url": served.url, "channel": record.channel_id},
             f"{name}: OpenAI base URL {served.url} (any API key); Ctrl-C to stop")  # fmt: skip
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
        refused = "".join(f"\nrefused: {d}" for d in served.disputes)
        try:
            paid = served.settle()
        except ConsumerError as exc:  # the gateway asks more than counted: said with why
            raise ConsumerError(f"{exc}{refused}", disputes=served.disputes) from exc
    emit(
        as_json,
        {"name": name, "paid": paid, "disputes": served.disputes},
        f"{name}: {ada(paid)} signed in all on channel {record.channel_id[:16]}{refused}",
    )


@command(app, "logs")
def logs(env: Env, name: Name, as_json: Json = False) -> None:
    """The last lines your deployment's containers wrote, as its gateway reads them."""
    record = local_record(env, name)
    with control_of(env, record) as control:
        text = control.logs(name, bytes.fromhex(record.channel_id))
    emit(as_json, {"name": name, "logs": text}, text.rstrip("\n"))


@command(app, "stop")
def stop(env: Env, name: Name, as_json: Json = False) -> None:
    """Stop your deployment (its per-second billing ends now) and pay what its channel owes
    for it: the last IOU."""
    record = local_record(env, name)
    with control_of(env, record) as control:
        status = control.stop(name, bytes.fromhex(record.channel_id))
        signer = signer_of(env, record.channel_id)
        pay_channel(env, control, signer, 0)
    emit(as_json, {**status, "paid": signer.signed},
         f"{name}: {status['state']}; {ada(signer.signed)} signed in all on channel "
         f"{record.channel_id[:16]}")  # fmt: skip


def deployment_statuses(env: Env) -> list[dict[str, Any]]:
    """Each deployment recorded here as its gateway shows it now (state "unknown" and the
    reason when the gateway does not answer), with its kind, gateway and channel."""
    from consumer.sdk.rental_store import RentalStore

    shown = []
    for record in RentalStore(env.state_dir).all():
        try:
            with control_of(env, record) as control:
                status = control.status(record.name, bytes.fromhex(record.channel_id))
        except ConsumerError as exc:
            status = {"state": "unknown", "reason": str(exc)}
        shown.append({**status, "name": record.name, "kind": record.kind,
                      "gateway_url": record.gateway_url, "channel": record.channel_id})  # fmt: skip
    return shown


def channel_utxo(sdk: Any, channel_id: str, wait_s: float = 30) -> str | None:
    """Where the channel is on chain (TXID#IX): a channel opened a moment ago may be missing
    from the chain context's answers for its tip (pycardano keeps them about a second), so it
    is asked again until it shows or `wait_s` passes (None: the first deploy is refused)."""
    deadline = time.monotonic() + wait_s
    while (utxo := sdk.status(channel_id).utxo) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    return utxo


def default_name(image: str) -> str:
    """The image's last path part, its tag or digest left out, and 6 random hex digits."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", image.split("@")[0].rsplit("/", 1)[-1].split(":")[0])
    return f"{base.strip('-._')[:50] or 'svc'}-{secrets.token_hex(3)}"


def local_record(env: Env, name: str) -> "RentalRecord":
    from consumer.sdk.rental_store import RentalStore

    return RentalStore(env.state_dir).get(name)


def control_of(env: Env, record: "RentalRecord") -> "GatewayControl":
    """The gateway's control client for `record`, signing with this renter's key."""
    from consumer.sdk.endpoint_client import GatewayControl
    from consumer.sdk.keys import load_key
    from offchain.protocol.tx.deployment_channel import channel_script

    key = load_key(env.key, env.pycardano_network)
    network_id = env.network_id
    if env.deployment.exists():
        network_id, _ = channel_script(env.deployment)
    return GatewayControl(record.gateway_url, key, network_id)


def pay_channel(env: Env, control: "GatewayControl", signer: "IouSigner", ahead_s: int) -> None:
    """Pay what the channel owes for every deployment of yours on it (`pay_due`)."""
    from consumer.sdk.endpoint_client import pay_due
    from consumer.sdk.rental_store import RentalStore

    records = RentalStore(env.state_dir).on_channel(signer.channel.hex())
    pay_due(control, signer, [(r.name, r.created_ms) for r in records], ahead_s)


def until_settled(
    control: "GatewayControl", name: str, channel: bytes, wait_s: int
) -> dict[str, Any]:
    """The deployment's status once it runs, failed or stopped, or after `wait_s` seconds."""
    deadline = time.monotonic() + wait_s
    while True:
        status = control.status(name, channel)
        if status["state"] != "pending" or time.monotonic() >= deadline:
            return status
        time.sleep(0.25)
