"""`unchained endpoint ...`: call an inference endpoint on a provider's gateway, each request paid
from a payment channel by a cumulative IOU (`consumer.endpoint_client` is the SDK), and list a
gateway's endpoints. The channel is one `unchained channel open` recorded in the state
directory; the IOUs are signed for the deployment file's network and channel script, read from
the file alone (no chain: a call needs only the gateway). The options and `--json` are the job
commands' (`consumer.cli`). (No `from __future__ import annotations`: typer reads these
annotations through `consumer.cli.command`'s signature.)"""

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from consumer.cli import Env, Json, command, emit
from consumer.errors import ConsumerError
from offchain.protocol.amounts import ada

if TYPE_CHECKING:
    from consumer.iou_signer import IouSigner

app = typer.Typer(help="Inference endpoints on a provider's gateway, paid per request from a "
                  "payment channel.", no_args_is_help=True)  # fmt: skip

Gateway = Annotated[str, typer.Option(help="The provider's gateway, e.g. http://host:8700.")]


def listed(gateway: str) -> list[dict[str, Any]]:
    """The gateway's endpoints (`GET /endpoints`): name and prices, nothing secret."""
    import httpx

    url = f"{gateway.rstrip('/')}/endpoints"
    try:
        response = httpx.get(url, timeout=30)
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


def signer_of(env: Env, channel: str) -> "IouSigner":
    """The IOU signer of the channel recorded here, for the deployment file's script."""
    from pycardano import ScriptHash

    from consumer.channel_store import ChannelStore
    from consumer.iou_signer import IouSigner
    from consumer.keys import load_key
    from offchain.protocol.deployment_file import DeploymentFile, DeploymentFileError

    try:
        deployment = DeploymentFile.model_validate_json(env.deployment.read_text())
    except FileNotFoundError as exc:
        raise DeploymentFileError(f"no deployment file at {env.deployment}: pass the one the "
                                  "channel was opened with (--deployment)") from exc  # fmt: skip
    except ValueError as exc:  # pydantic's ValidationError
        raise DeploymentFileError(f"{env.deployment} is not a deployment file: {exc}") from exc
    store = ChannelStore(env.state_dir)
    key = load_key(env.key, env.pycardano_network)
    channel_hash = ScriptHash(bytes.fromhex(deployment.channel_hash))
    return IouSigner(key, deployment.network_id, channel_hash, store.get(channel), store)


@command(app, "call")
def call(
    env: Env,
    name: Annotated[str, typer.Argument(help="The endpoint's name, as `endpoint list` shows it.")],
    gateway: Gateway,
    channel: Annotated[str, typer.Option(help="The channel that pays (its id or a unique prefix, "
                                         "as `channel list` shows it).")],
    data: Annotated[str, typer.Option(help="The request's body: JSON.")],
    path: Annotated[str, typer.Option(help="The path on the endpoint.")] = "/predict",
    method: Annotated[str, typer.Option(help="The HTTP method.")] = "POST",
    as_json: Json = False,
) -> None:  # fmt: skip
    """Send one request to an endpoint, paid by an IOU on your channel to its provider: print
    the answer and what it cost (the price the gateway lists for the endpoint)."""
    import httpx

    from consumer.endpoint_client import EndpointClient

    try:
        body = json.loads(data)
    except ValueError as exc:
        raise ConsumerError(f"--data is not JSON: {exc}", field="--data") from exc
    prices = {e["name"]: e["price_per_request"] for e in listed(gateway)}
    if name not in prices:
        raise ConsumerError(f"the gateway at {gateway} has no endpoint {name!r}: it has "
                            f"{', '.join(sorted(prices)) or 'none'}", endpoint=name)  # fmt: skip
    signer = signer_of(env, channel)
    before = signer.signed
    with EndpointClient(gateway, name, signer, prices[name]) as client:
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
                   "paid": paid, "total": signer.signed, "price": prices[name],
                   "channel": signer.channel.hex()},
         f"{shown}\nHTTP {response.status_code}; paid {ada(paid)} ({ada(signer.signed)} in all "
         f"on channel {signer.channel.hex()[:16]})")  # fmt: skip
    if response.is_error:
        raise typer.Exit(1)


@command(app, "list")
def list_endpoints(env: Env, gateway: Gateway, as_json: Json = False) -> None:
    """The endpoints a gateway serves, with their prices."""
    from consumer.table import render

    endpoints = listed(gateway)
    rows = [[e["name"], ada(e["price_per_request"]), ada(e.get("price_per_second", 0))]
            for e in endpoints]  # fmt: skip
    emit(as_json, endpoints, render(("endpoint", "per request", "per second"), rows))
