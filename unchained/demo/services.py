"""`unchained demo --services`: inference endpoints and a pod paid over payment channels, step
by step on a fresh devnet. Three renters each open a channel to the provider and deploy the
sample ONNX model with `unchained endpoint deploy`; they call it a few hundred times through the
SDK (`consumer.sdk.endpoint_client`), each request paid by a cumulative IOU; one renter also starts
a pod, runs a command in it over SSH and stops it. The provider's daemon claims the IOUs on its
claim schedule: every channel in one transaction. The renters stop their endpoints and close
their channels; every amount is checked to the lovelace against the chain."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
import httpx
import numpy as np
import yaml
from pycardano import Address, ScriptHash

from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.endpoint_client import EndpointClient
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.keys import ConsumerKey
from consumer.sdk.rental_store import RentalStore
from devnet.process import DevnetProcess, free_port
from offchain.chain.context import chain_context
from offchain.chain.ogmios import request
from offchain.protocol.ledger.amounts import ADA, ada
from offchain.protocol.tx.deployment_file import DeploymentFile
from offchain.protocol.tx.txbuild import Clock
from provider.config import RunnerSettings
from provider.images.pod import pod_image
from provider.rentals.pods import Pods
from provider.rentals.services import Services
from samples import images as sample_images
from samples.onnx_model import INPUTS, weights
from unchained.demo import children
from unchained.demo.children import Child, DemoFailed
from unchained.demo.consumers import explorer, party, run_cli
from unchained.demo.stage import (
    Stage,
    balance,
    fresh,
    guarded,
    introduced,
    say,
    show_balances,
    staged,
    stay_up,
    step,
    took,
)

RENTERS = 3
CALLS = 100  # each renter's requests: a few hundred in all
TOKEN_PRICES = (2, 8)  # lovelace an input and an output token: llm endpoints' least
REQUEST_PRICE = 10_000  # lovelace a request (the provider's least): 300 pay its claims' fees
DEPOSIT_ADA = 10  # each renter's channel
POD_DEPOSIT_ADA = 5  # `pod start` reuses the channel: it has that much left
CLAIM_INTERVAL_S = 15  # the provider claims every channel's latest IOU this often
POD_SECONDS = 1  # the pod runs a paid second more after the command
SLOTS = RENTERS + 1  # the endpoints and the pod run at once, a bundle each
SERVICES_TIMEOUT_S = 400


@dataclasses.dataclass
class Renter:
    """One renter: its key, its CLI's settings, its channel and its endpoint, as its CLI
    reported them."""

    name: str
    key: ConsumerKey
    env: dict[str, str]
    state_dir: Path
    channel: str = ""
    locked: int = 0
    fees: dict[str, int] = dataclasses.field(default_factory=dict)  # tx fees it paid, by step
    returned: int = 0  # what the drain gave back
    endpoint: str = ""
    served: int = 0  # lovelace its deployments charged, as the gateway counted them
    signed: int = 0  # its channel's last IOU

    async def cli(self, *args: str, as_json: bool = True) -> Any:
        return await run_cli(self.name, self.env, *args, as_json=as_json)


def run(data_dir: Path, chain: DevnetProcess, stay: bool) -> None:
    """The whole services demo: its devnet, market, provider daemon and gateway stop when it
    returns or fails."""
    started = time.monotonic()
    provider_state = data_dir / "provider"
    fresh(data_dir, provider_state)
    say(
        f"Unchained demo --services: {RENTERS} renters deploy the sample ONNX model, call it "
        f"{RENTERS * CALLS} times and run a pod, all paid by IOUs over payment channels"
    )

    step("1. The images: the sample ONNX model served by onnxruntime, and the pod image "
         "(Debian's sshd); built once, then cached")  # fmt: skip
    client = docker.from_env()
    model = sample_images.onnx_service_image(client)
    pod = pod_image(client)
    llm = sample_images.llm_service_image(client)  # for `endpoint init --example llm` after
    say(f"   model image {model}")
    say(f"   pod image   {pod}")
    say(f"   llm image   {llm} ({sample_images.LLM_EXAMPLE}: a chat endpoint's, per token)")

    gateway_port = free_port()
    gateway_url = f"http://127.0.0.1:{gateway_port}"
    gateways: list[Child] = []

    def provider(ogmios_url: str, deployment: Path, market_url: str) -> Child:
        """The daemon, and its gateway started at once (it reads the daemon's config)."""
        daemon = children.provider(
            data_dir, provider_state, ogmios_url, deployment, market_url, SLOTS,
            request_price=REQUEST_PRICE, token_prices=list(TOKEN_PRICES), gateway_url=gateway_url,
            channel_claim_interval_s=CLAIM_INTERVAL_S,
        )  # fmt: skip
        gateways.append(children.gateway(data_dir, ogmios_url, deployment, gateway_port).start())
        return daemon

    offered = (f"{SLOTS} bundle(s) of 1 core, 512 MiB; endpoints at {ada(REQUEST_PRICE)} a "
               f"request, llm endpoints at {TOKEN_PRICES[0]} and {TOKEN_PRICES[1]} lovelace an "
               f"input and an output token, its gateway {gateway_url}")  # fmt: skip
    try:
        with staged(data_dir, chain, provider_state, 1, provider, offered) as stage:
            (gateway,) = gateways
            gateway.wait_for(lambda: children.gateway_up(gateway_url), "answer")
            say(f"   provider gateway {gateway_url} (log {gateway.log}): renters reach its "
                "endpoints and pods there, each request paid by an IOU")  # fmt: skip
            renters = [renter(data_dir, n, stage) for n in range(1, RENTERS + 1)]
            alive = [stage.market, stage.provider, gateway]
            story = services(stage, renters, data_dir, model)
            asyncio.run(guarded(story, alive, data_dir, SERVICES_TIMEOUT_S))
            took(started, stay)
            if stay:
                first = renters[0]
                stay_up(stage.market_url, first.name, first.env, ".venv/bin/unchained channel "
                        "list; .venv/bin/unchained endpoint list", alive)  # fmt: skip
    finally:
        for gateway in gateways:
            gateway.stop()
        cleared(provider_state)


def cleared(provider_state: Path) -> None:
    """Remove what the demo's provider left in the docker engine: a daemon leaves its
    deployments running when it stops (the next one carries on with them) and a stopped pod's
    /workspace volume for a while (its renter may come back); the demo's chain and renters
    are gone, so are they."""
    settings = RunnerSettings(state_dir=provider_state)
    client = docker.from_env()
    pods = Pods(client, settings)
    for runner in (Services(client, settings), pods):
        left = runner.leftovers()
        for name in {*left["containers"], *left["networks"]}:
            runner.stop(name)
    for name in pods.leftovers()["workspaces"]:
        pods.remove_workspace(name)


def renter(data_dir: Path, n: int, stage: Stage) -> Renter:
    name = f"renter-{n}"
    state_dir = data_dir / "consumers" / name
    key, env = party(data_dir, name, state_dir, stage.devnet.url, stage.deployment,
                     stage.market_url)  # fmt: skip
    return Renter(name, key, env, state_dir)


async def services(stage: Stage, renters: list[Renter], data_dir: Path, model: str) -> None:
    devnet, market_url = stage.devnet, stage.market_url
    parties: dict[str, Address] = {"provider": stage.provider_address,
                                   **{r.name: r.key.address for r in renters},
                                   "market": devnet.address("market")}  # fmt: skip
    before = await introduced(devnet.url, parties, "(it pays the fees of its claims)")

    async with httpx.AsyncClient(base_url=market_url, timeout=30) as http:
        await deploy(http, market_url, renters, data_dir, model)
        shown = {await first_call(http, market_url, renters[0])}
        await sessions(http, market_url, renters, stage.deployment, data_dir)
        shown.add(await batch_claim(http, market_url, renters))
        claims = await close(http, devnet, renters, shown)

    after = {name: balance(devnet.url, address) for name, address in parties.items()}
    show_balances(before, after)
    check_balances(before, after, renters, claims)


async def deploy(http: httpx.AsyncClient, market_url: str, renters: list[Renter],
                 data_dir: Path, model: str) -> None:  # fmt: skip
    step("6. Each renter deploys the sample model with `unchained endpoint deploy`: the CLI "
         "chooses the offer with a gateway, opens a payment channel of "
         f"{ada(DEPOSIT_ADA * ADA)} to its provider (what its IOUs may give it) and signs the "
         "deploy to the gateway; the provider's daemon admits the channel on chain and starts "
         "the container")  # fmt: skip
    spec = {"kind": "service", "image": model, "port": sample_images.SAMPLE_SERVICE_PORT,
            "price_per_request": REQUEST_PRICE,
            "resources": {"cpu_cores": 1, "memory_mib": 256}}  # fmt: skip
    path = data_dir / "consumers" / "model.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    for r in renters:
        r.endpoint = f"model-{r.name.rsplit('-', 1)[1]}"
    say(f"   renter-N$ unchained endpoint deploy {path} --deposit {DEPOSIT_ADA} --name model-N "
        "--json")  # fmt: skip
    deployed = await asyncio.gather(*(
        r.cli("endpoint", "deploy", str(path), "--deposit", str(DEPOSIT_ADA), "--name",
              r.endpoint) for r in renters))  # fmt: skip
    for r, status in zip(renters, deployed, strict=True):
        if status["state"] != "running":
            raise DemoFailed(f"{r.name}: {r.endpoint} is {status}")
        r.channel = status["channel"]
        opened = ChannelStore(r.state_dir).get(r.channel).open_tx_id
        tx = await explorer(http, f"txs/{opened}")
        page = await explorer(http, f"channels/{r.channel}")
        r.fees["open"], r.locked = tx["tx"]["fee"], page["events"][0]["remaining"]
        say(f"   {r.name}: {r.endpoint} {status['state']} on {status['gateway_url']}, image "
            f"{status['image_digest'][:19]}...")  # fmt: skip
        say(f"   {r.name}: channel {r.channel}: open tx {opened} (fee {ada(r.fees['open'])}) "
            f"locks {ada(r.locked)} ({ada(r.locked - DEPOSIT_ADA * ADA)} of it the output's "
            "minimum, back at the close)")  # fmt: skip
        say(f"   explorer {market_url}/explorer/channels/{r.channel}")


def forward(rows: np.ndarray) -> np.ndarray:
    """The sample model's forward pass in NumPy, from the same seeded weights."""
    w = weights()
    hidden = np.maximum(rows @ w["W1"] + w["b1"], 0)
    return np.asarray(hidden @ w["W2"] + w["b2"])


async def first_call(http: httpx.AsyncClient, market_url: str, first: Renter) -> str:
    """renter-1's first request with the CLI, and the claim round it starts (its tx id)."""
    step("7. The first request, with the CLI, and the provider's first claim")
    data = json.dumps({"inputs": [[0.5, -1.0, 2.0, 0.25]]})
    say(f"   {first.name}$ unchained endpoint call {first.endpoint} --data '{data}' --json")
    called = await first.cli("endpoint", "call", first.endpoint, "--data", data)
    expected = forward(np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32))
    if not np.allclose(called["answer"]["outputs"], expected, rtol=1e-5, atol=1e-5):
        raise DemoFailed(f"the model answered {called['answer']}, NumPy says {expected}")
    say(
        f"   {first.name}: outputs {called['answer']['outputs'][0]} (NumPy's forward pass of "
        f"the same weights), paid {ada(called['paid'])} by an IOU for {ada(called['total'])}"
    )
    say("   the provider's daemon claims the first IOU after a quiet spell at its next round "
        f"(every {CLAIM_INTERVAL_S} s from then on, all channels at once):")  # fmt: skip
    page = await until_claimed(http, first.channel, called["total"])
    (tx_id,) = {e["tx_id"] for e in page["events"] if e["move"] == "claim"}
    tx = await explorer(http, f"txs/{tx_id}")
    say(f"   claim: tx {tx_id} (block {tx['tx']['height']}, fee {ada(tx['tx']['fee'])}) "
        f"claims {len(tx['channels'])} channel(s)")  # fmt: skip
    say(f"   explorer {market_url}/explorer/txs/{tx_id}")
    return str(tx_id)


async def until_claimed(http: httpx.AsyncClient, channel: str, lovelace: int) -> dict[str, Any]:
    """The channel's explorer page once the index shows `lovelace` claimed on it."""
    while True:
        page = await explorer(http, f"channels/{channel}")
        if page["channel"]["claimed"] >= lovelace:
            return page
        await asyncio.sleep(0.5)


def calls(r: Renter, deployment: Path, count: int) -> int:
    """`count` requests to `r`'s endpoint through the SDK, each paid by an IOU, each answer
    checked against NumPy; what they paid."""
    made = DeploymentFile.model_validate_json(deployment.read_text())
    store = ChannelStore(r.state_dir)
    signer = IouSigner(r.key, made.network_id, ScriptHash(bytes.fromhex(made.channel_hash)),
                       store.get(r.channel), store)  # fmt: skip
    rows = np.random.default_rng(int(r.name.rsplit("-", 1)[1])).normal(size=(count, INPUTS))
    rows = rows.astype(np.float32)
    before = signer.signed
    gateway_url = RentalStore(r.state_dir).get(r.endpoint).gateway_url
    with EndpointClient(gateway_url, r.endpoint, signer, REQUEST_PRICE) as client:
        for row, expected in zip(rows, forward(rows), strict=True):
            answer = client.post("/predict", json={"inputs": [row.tolist()]})
            if answer.status_code != httpx.codes.OK:
                raise DemoFailed(f"{r.name}: {answer.status_code} {answer.text[:200]}")
            if not np.allclose(answer.json()["outputs"][0], expected, rtol=1e-5, atol=1e-5):
                raise DemoFailed(f"{r.name}: {answer.json()} is not NumPy's {expected}")
    return signer.signed - before


async def sessions(http: httpx.AsyncClient, market_url: str, renters: list[Renter],
                   deployment: Path, data_dir: Path) -> None:  # fmt: skip
    """The renters at once: each calls its endpoint through the SDK, the last one also runs a
    pod; then each stops its endpoint. Told step by step once all are done."""
    counts = [CALLS - (1 if n == 0 else 0) for n in range(len(renters))]
    started = time.monotonic()

    async def session(r: Renter, count: int) -> tuple[int, float, list[str], dict[str, Any]]:
        paid = await asyncio.to_thread(calls, r, deployment, count)
        took_s = time.monotonic() - started
        told = await pod(r, data_dir) if r is renters[-1] else []
        return paid, took_s, told, await r.cli("endpoint", "stop", r.endpoint)

    done = await asyncio.gather(*(session(r, n) for r, n in zip(renters, counts, strict=True)))
    step(f"8. The renters call their endpoints {sum(counts)} more times at once through the "
         "SDK (consumer/sdk/endpoint_client.py), each request with a cumulative IOU in its "
         "Unchained-Iou header, checked by the gateway before the model sees it (steps 8 to 10 "
         "run at once, told once all are done)")  # fmt: skip
    for r, count, (paid, _, _, _) in zip(renters, counts, done, strict=True):
        say(f"   {r.name}: {count} requests to {r.endpoint}, every answer NumPy's forward pass; "
            f"paid {ada(paid)} ({count} x {REQUEST_PRICE:,} lovelace)")  # fmt: skip
        if paid != count * REQUEST_PRICE:
            raise DemoFailed(f"{r.name} paid {paid} for {count} requests")
    say(f"   {sum(counts)} requests in {max(d[1] for d in done):.1f} s")
    for line in done[-1][2]:
        say(line)
    step("10. The renters stop their endpoints (`unchained endpoint stop`): the gateway's count "
         "of each one's requests, and its channel's last IOU")  # fmt: skip
    say("   renter-N$ unchained endpoint stop model-N --json")
    for r, (_, _, _, status) in zip(renters, done, strict=True):
        r.served += status["served"]
        r.signed = status["paid"]
        say(f"   {r.name}: {r.endpoint} {status['state']}, {status['requests']} requests x "
            f"{REQUEST_PRICE:,} lovelace = {ada(status['served'])}; channel {r.channel[:16]} "
            f"signed {ada(r.signed)} in all")  # fmt: skip
        if r.signed != r.served:
            raise DemoFailed(f"{r.name} signed {r.signed}, its deployments charged {r.served}")
    listed = await explorer(http, "deployments")
    for row in sorted(listed["deployments"], key=lambda row: row["id"]):
        say(f"   explorer {market_url}/explorer/deployments/{row['id']} ({row['kind']} "
            f"{row['name']})")  # fmt: skip


async def pod(r: Renter, data_dir: Path) -> list[str]:
    """`r` starts a pod, runs a command in it over SSH, stops it: what to tell."""
    told = [f"\n9. {r.name} starts a pod (sshd, its key only) on the same channel, runs a "
            "command in it over SSH through the provider's gateway and stops it: paid per "
            "second by the IOUs its pod agent signs every few seconds"]  # fmt: skip
    key = data_dir / "keys" / f"{r.name}_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)  # fmt: skip
    start = ["pod", "start", "--ssh-key", f"{key}.pub", "--name", "lab", "--cpu-cores", "1",
             "--memory-mib", "256", "--deposit", str(POD_DEPOSIT_ADA)]  # fmt: skip
    told.append(f"   {r.name}$ unchained {' '.join(start)} --json")
    started = await r.cli(*start)
    if started["state"] != "running" or started["channel"] != r.channel:
        raise DemoFailed(f"{r.name}: the pod is {started}")
    told.append(f"   lab: {started['state']} at {ada(started['price_per_second'])} a second, "
                "its sshd reached through a TCP port of the gateway")  # fmt: skip
    command = "echo hello from $(hostname) as $(id -un); nproc; python3 --version"
    ssh = ["pod", "ssh", "lab", "-i", str(key), "-o", "BatchMode=yes", "--", command]
    told.append(f"   {r.name}$ unchained pod ssh lab -i {key} -o BatchMode=yes -- '{command}'")
    output = await ssh_when_open(r, ssh)
    told += [f"      {line}" for line in output.strip().splitlines()]
    await asyncio.sleep(POD_SECONDS)
    told.append(f"   {r.name}$ unchained pod stop lab --json")
    stopped = await r.cli("pod", "stop", "lab")
    r.served += stopped["seconds"] * stopped["price_per_second"]
    told.append(f"   lab: {stopped['state']} after {stopped['seconds']} s x "
                f"{stopped['price_per_second']:,} lovelace = "
                f"{ada(stopped['seconds'] * stopped['price_per_second'])}; "
                f"{ada(stopped['signed'])} signed in all on channel {r.channel[:16]}")  # fmt: skip
    return told


async def ssh_when_open(r: Renter, ssh: list[str]) -> str:
    """`pod ssh ...`'s output, once the gateway's port for the pod is open (a few tries)."""
    for _ in range(20):
        try:
            return str(await r.cli(*ssh, as_json=False))
        except DemoFailed as exc:
            if "no port yet" not in str(exc):
                raise
        await asyncio.sleep(0.5)
    return str(await r.cli(*ssh, as_json=False))


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim transaction as the explorer indexed it: how many channels it moved."""

    tx_id: str
    height: int
    fee: int
    channels: int


async def claims_of(http: httpx.AsyncClient, renters: list[Renter]) -> list[Claim]:
    """Every claim of the renters' channels the explorer has indexed, oldest first."""
    pages = await asyncio.gather(*(explorer(http, f"channels/{r.channel}") for r in renters))
    ids = {e["tx_id"] for page in pages for e in page["events"] if e["move"] == "claim"}
    txs = await asyncio.gather(*(explorer(http, f"txs/{tx_id}") for tx_id in ids))
    claims = [Claim(tx["tx"]["id"], tx["tx"]["height"], tx["tx"]["fee"], len(tx["channels"]))
              for tx in txs]  # fmt: skip
    return sorted(claims, key=lambda claim: claim.height)


async def batch_claim(http: httpx.AsyncClient, market_url: str, renters: list[Renter]) -> str:
    step(f"11. The provider's claim schedule: {CLAIM_INTERVAL_S} s after its first claim, one "
         "transaction claims every channel's latest IOU")  # fmt: skip
    deadline = time.monotonic() + 2 * CLAIM_INTERVAL_S + 30
    while not (batch := [c for c in await claims_of(http, renters)
                         if c.channels == len(renters)]):  # fmt: skip
        if time.monotonic() > deadline:
            raise DemoFailed(f"no claim took all {len(renters)} channels: "
                             f"{await claims_of(http, renters)}")  # fmt: skip
        await asyncio.sleep(0.5)
    claim = batch[0]
    say(f"   claim: tx {claim.tx_id} (block {claim.height}, fee {ada(claim.fee)}) settles "
        f"{claim.channels} channel(s) in one transaction")  # fmt: skip
    say(f"   explorer {market_url}/explorer/txs/{claim.tx_id}")
    return claim.tx_id


async def show_claims(http: httpx.AsyncClient, renters: list[Renter], shown: set[str],
                      label: str, why: str) -> list[Claim]:  # fmt: skip
    """Every claim of the channels; those not in `shown` printed (and added to it)."""
    claims = await claims_of(http, renters)
    for claim in claims:
        if claim.tx_id not in shown:
            shown.add(claim.tx_id)
            say(f"   {label}: tx {claim.tx_id} (block {claim.height}, fee {ada(claim.fee)}) "
                f"claims {claim.channels} channel(s): {why}")  # fmt: skip
    return claims


async def close(
    http: httpx.AsyncClient, devnet: DevnetProcess, renters: list[Renter], shown: set[str]
) -> list[Claim]:
    """The closes, the claims they call for, the drains; every claim of the channels (those
    not in `shown` printed as they are found)."""
    step("12. The renters close their channels: `unchained channel close` starts the close; "
         "the provider's daemon claims at once any IOU its schedule has not claimed yet; once "
         "the close period is over, `channel close` again takes the rest back")  # fmt: skip
    await show_claims(http, renters, shown, "round claim", "a later round of the schedule (IOUs "
                      "signed after the batch's round, the pod's last seconds)")  # fmt: skip
    say("   renter-N$ unchained channel close CHANNEL --json")
    closing = await asyncio.gather(*(r.cli("channel", "close", r.channel) for r in renters))
    for r, done in zip(renters, closing, strict=True):
        r.fees["close"] = done["fee"]
        say(f"   {r.name}: closing: tx {done['tx_id']} (fee {ada(done['fee'])})")
    pages = await asyncio.gather(*(until_claimed(http, r.channel, r.signed) for r in renters))
    claims = await show_claims(http, renters, shown, "close claim", "IOUs signed after the "
                               "schedule's round")  # fmt: skip
    for r, page in zip(renters, pages, strict=True):
        takes = [e["amount"] for e in page["events"] if e["move"] == "claim"]
        if page["channel"]["claimed"] != r.signed:
            raise DemoFailed(f"{r.name}'s channel claimed {page['channel']['claimed']}, "
                             f"its IOUs {r.signed}")  # fmt: skip
        say(f"   {r.name}'s channel: claimed {ada(r.signed)} (its last IOU) in "
            f"{len(takes)} claim(s): {' + '.join(ada(t) for t in takes)}")  # fmt: skip
    last = max(done["closing_at"] for done in closing)
    clock = Clock.now(chain_context(devnet.url))
    slots = clock.time.posix_ms_to_slot(last) + 1 - clock.tip_slot
    if slots > 0:
        await request(devnet.url, "devnet/advanceTime", {"slots": slots})
    moved_s = slots * devnet.slot_length_ms // 1000
    say(f"   the devnet's clock moves {moved_s} s ahead, past the close "
        "periods (`endpoint deploy` opened each channel with the providers' default hour; a "
        "real chain waits it out, and 2 minutes more: the close transaction's validity "
        "window)")  # fmt: skip
    drained = await asyncio.gather(*(r.cli("channel", "close", r.channel) for r in renters))
    for r, done in zip(renters, drained, strict=True):
        r.fees["drain"], r.returned = done["fee"], done["returned"]
        say(f"   {r.name}: drained: tx {done['tx_id']} (fee {ada(done['fee'])}) returns "
            f"{ada(r.returned)} = {ada(r.locked)} locked - {ada(r.signed)} claimed")  # fmt: skip
        if r.returned != r.locked - r.signed:
            raise DemoFailed(f"{r.name} got {r.returned} back of {r.locked}, {r.signed} claimed")
    return claims


def check_balances(before: dict[str, int], after: dict[str, int], renters: list[Renter],
                   claims: list[Claim]) -> None:  # fmt: skip
    """The changes are exactly the IOUs claimed, the claims' fees and each renter's fees: else
    fail."""
    expected = {"provider": sum(r.signed for r in renters) - sum(c.fee for c in claims),
                "market": 0}  # fmt: skip
    for r in renters:
        expected[r.name] = -r.signed - sum(r.fees.values())
    changes = {name: after[name] - before[name] for name in before}
    if changes != expected:
        raise DemoFailed(f"the balances do not add up: changed {changes}, expected {expected}")
    say("\nChecked: the provider earned exactly the renters' last IOUs less its claims' fees; "
        "each renter paid its requests and pod seconds and its open, close and drain fees, "
        "and got the rest of its deposit back.")  # fmt: skip
