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
import dataclasses
import json
import re
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from consumer.cli.example import SERVICE_EXAMPLES
from consumer.cli.main import Env, Json, command, emit, init_command
from consumer.sdk.errors import ConsumerError
from offchain.protocol.ledger.amounts import ada

if TYPE_CHECKING:
    import httpx

    from consumer.sdk.endpoint_client import EndpointClient, GatewayControl
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
    the answer and what it cost (the price the gateway lists for the endpoint). An endpoint on
    several providers is called on the first whose gateway answers, paid on that one's
    channel."""
    import httpx

    from consumer.sdk.endpoint_client import DEFAULT_TIMEOUT_S
    from consumer.sdk.endpoint_routes import RoutedEndpoint

    try:
        body = json.loads(data)
    except ValueError as exc:
        raise ConsumerError(f"--data is not JSON: {exc}", field="--data") from exc
    places: list[RentalRecord | None] = [None]
    if gateway is None or channel is None:
        record = local_record(env, name)
        places = record.placements() if gateway is None and channel is None else [
            dataclasses.replace(record, gateway_url=gateway or record.gateway_url,
                                channel_id=channel or record.channel_id)]  # fmt: skip
    # one client for the listings and the request: one connection per gateway, one TLS
    # set-up (its certificates take longer to load than the request)
    with httpx.Client(timeout=DEFAULT_TIMEOUT_S) as http:
        clients, skipped = [], []
        for place in places:
            where = (gateway, channel) if place is None else (place.gateway_url, place.channel_id)
            try:
                clients.append(endpoint_client(env, http, name, *where, place))
            except ConsumerError as exc:
                if len(places) == 1:
                    raise
                skipped.append(str(exc))  # another provider of this endpoint may answer
        if not clients:
            raise ConsumerError(f"{name}: no provider's gateway answers: {'; '.join(skipped)}")
        before = {id(c): c.signer.signed for c in clients}
        routed = RoutedEndpoint(clients)
        try:
            response = routed.request(method.upper(), path, json=body)
        except httpx.HTTPError as exc:
            paid = sum(c.signer.signed - before[id(c)] for c in clients)
            why = exc or type(exc).__name__
            raise ConsumerError(f"{name}: no answer ({why}); paid {ada(paid)}",
                                gateway=clients[-1].gateway_url, paid=paid) from exc  # fmt: skip
    served = routed.served_by or clients[-1]
    signer, paid = served.signer, sum(c.signer.signed - before[id(c)] for c in clients)
    try:
        answer: Any = response.json()
    except ValueError:
        answer = response.text
    shown = answer if isinstance(answer, str) else json.dumps(answer, indent=2)
    emit(as_json, {"endpoint": name, "status": response.status_code, "answer": answer,
                   "paid": paid, "total": signer.signed, "price": served.price,
                   "channel": signer.channel.hex(), "gateway_url": served.gateway_url},
         f"{shown}\nHTTP {response.status_code}; paid {ada(paid)} ({ada(signer.signed)} in all "
         f"on channel {signer.channel.hex()[:16]})"
         + (f" from {served.gateway_url}" if len(places) > 1 else ""))  # fmt: skip
    if response.is_error:
        raise typer.Exit(1)


def endpoint_client(
    env: Env, http: "httpx.Client", name: str, gateway: str, channel: str,
    place: "RentalRecord | None",
) -> "EndpointClient":  # fmt: skip
    """A paying client of `name` on `gateway` over `channel` at the price the gateway lists;
    a deployment paid per second pays its channel's seconds first, ahead."""
    from consumer.sdk.endpoint_client import EndpointClient

    signer = signer_of(env, channel)
    client = EndpointClient(gateway, name, signer, price_of(http, gateway, name), http)
    if place is not None and place.price_per_second:
        with control_of(env, place) as control:
            pay_channel(env, control, signer, AHEAD_S)
    return client


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
    rows = [[d["name"], d["kind"], "idle (at zero)" if d.get("scaled_to_zero") else d["state"],
             str(d.get("requests", "")), ada(d["due"]) if "due" in d else "",
             d["gateway_url"]] for d in shown]  # fmt: skip
    emit(as_json, shown, render(("name", "kind", "state", "requests", "channel due", "gateway"),
                                rows))  # fmt: skip


init_command(app, "service", "svc.yaml", SERVICE_EXAMPLES, "endpoint deploy")


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
    new one of --deposit; the deploy is signed to its gateway, which runs it. A spec with
    `providers: N` runs on the best N providers, each paid over its own channel (each gateway
    checks the spec before any channel is funded)."""
    from consumer.cli.channel import channel_sdk, lovelace_of
    from consumer.cli.main import market_reader, run_sync
    from consumer.sdk.deploy_route import channel_for, choose_offers, pinned_spec
    from consumer.sdk.endpoint_client import GatewayControl
    from consumer.sdk.rental_store import RentalRecord, RentalStore
    from offchain.protocol.job.jobspec import load_servicespec

    spec = pinned_spec(load_servicespec(spec_path))
    lovelace = lovelace_of("--deposit", deposit)
    sdk = channel_sdk(env)
    market = market_reader(env)
    offers = choose_offers(market, spec, env.market_identity, spec.providers)
    name = name or default_name(spec.image)
    for offer in offers:
        with GatewayControl(offer.gateway_url, sdk.key, sdk.deployment.network_id) as control:
            control.check(name, spec.model_dump(mode="json"))  # refused before money moves
    channels = [run_sync(channel_for(sdk, offer, lovelace, market, env.market_identity))
                for offer in offers]  # fmt: skip
    record = RentalRecord(
        name=name, kind="endpoint", gateway_url=offers[0].gateway_url,
        provider_id=offers[0].provider_id, channel_id=channels[0].channel_id,
        spec=spec.model_dump(mode="json"), price_per_request=spec.price_per_request,
        price_per_second=spec.price_per_second, created_ms=time.time_ns() // 1_000_000,
        others=[{"gateway_url": offer.gateway_url, "provider_id": offer.provider_id,
                 "channel_id": channel.channel_id}
                for offer, channel in zip(offers[1:], channels[1:], strict=True)],
    )  # fmt: skip
    shown = []
    for place, channel in zip(record.placements(), channels, strict=True):
        utxo = channel_utxo(sdk, channel.channel_id)
        with GatewayControl(place.gateway_url, sdk.key, sdk.deployment.network_id) as control:
            admission = (utxo, channel.terms_cbor) if utxo else None
            control.deploy(name, bytes.fromhex(channel.channel_id), record.spec, admission)
            RentalStore(env.state_dir).save(record)
            status = until_settled(control, name, bytes.fromhex(channel.channel_id), wait)
        shown.append({**status, "gateway_url": place.gateway_url,
                      "provider_id": place.provider_id, "channel": channel.channel_id})  # fmt: skip
    text = "\n".join(
        f"{name}: {s['state']}{': ' + s['reason'] if s['reason'] else ''} on {s['gateway_url']} "
        f"(provider {s['provider_id'][:16]}), paid on channel {s['channel'][:16]}" for s in shown
    )  # fmt: skip
    emit(
        as_json,
        {**shown[0], "providers": shown},
        f"{text}\n`unchained endpoint call {name} --data ...`",
    )
    if any(s["state"] == "failed" for s in shown):
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
    places = local_record(env, name).placements()
    texts = []
    for place in places:
        with control_of(env, place) as control:
            text = control.logs(name, bytes.fromhex(place.channel_id))
        texts.append(text if len(places) == 1 else f"== {place.gateway_url}\n{text}")
    text = "\n".join(texts)
    emit(as_json, {"name": name, "logs": text}, text.rstrip("\n"))


@command(app, "stop")
def stop(env: Env, name: Name, as_json: Json = False) -> None:
    """Stop your deployment (its per-second billing ends now) and pay what its channel owes
    for it: the last IOU."""
    shown = []
    places = local_record(env, name).placements()
    for place in places:
        signer = signer_of(env, place.channel_id)
        try:
            with control_of(env, place) as control:
                status = control.stop(name, bytes.fromhex(place.channel_id))
                pay_channel(env, control, signer, 0)
        except ConsumerError as exc:
            if len(places) == 1:
                raise
            status = {"state": "unknown", "reason": f"not stopped: {exc}"}  # the others are
        shown.append({**status, "paid": signer.signed, "channel": place.channel_id})
    lines = [
        f"{name}: {s['state']}{' (' + s['reason'] + ')' if s.get('reason') else ''}; "
        f"{ada(s['paid'])} signed in all on channel {s['channel'][:16]}"
        for s in shown
    ]
    emit(as_json, {**shown[0], "providers": shown}, "\n".join(lines))
    if any(s["state"] == "unknown" for s in shown):
        raise typer.Exit(1)


def deployment_statuses(env: Env) -> list[dict[str, Any]]:
    """Each deployment recorded here as its gateway shows it now (state "unknown" and the
    reason when the gateway does not answer), with its kind, gateway and channel."""
    from consumer.sdk.rental_store import RentalStore

    shown = []
    for record in (p for r in RentalStore(env.state_dir).all() for p in r.placements()):
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
