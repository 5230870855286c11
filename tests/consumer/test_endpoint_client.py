"""The renter's endpoint client over real HTTP, against a test double of the provider's gateway
(tests/consumer/endpoint_double.py, uvicorn) that checks each IOU's signature and the design's
402 rule: each request pays one price more, an acceptable 402 is paid and retried, a greedy
one is refused unsigned, a restart goes on from the persisted IOU, and the header the client
sends is the design's."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pycardano import PaymentSigningKey

from consumer.sdk.channel_store import ChannelStore
from consumer.sdk.endpoint_client import EndpointClient, EndpointRefused
from consumer.sdk.iou_signer import IouSigner
from consumer.sdk.keys import ConsumerKey
from offchain.protocol.ledger.iou import SignedIou
from tests.consumer.endpoint_double import GatewayDouble, serving
from tests.consumer.test_channels import CHANNEL_HASH, NETWORK_ID, record

PRICE = 2_000
CHANNEL = "ab" * 28


@pytest.fixture
def key() -> ConsumerKey:
    return ConsumerKey(PaymentSigningKey.generate())


@pytest.fixture
def store(tmp_path: Path, key: ConsumerKey) -> ChannelStore:
    made = ChannelStore(tmp_path / "state")
    made.save(record(key, CHANNEL))
    return made


def new_signer(key: ConsumerKey, store: ChannelStore) -> IouSigner:
    return IouSigner(key, NETWORK_ID, CHANNEL_HASH, store.get(CHANNEL), store)


@pytest.fixture
def double(key: ConsumerKey) -> GatewayDouble:
    vkey = key.key.to_verification_key().payload[:32]
    return GatewayDouble(vkey, NETWORK_ID, CHANNEL_HASH, bytes.fromhex(CHANNEL), PRICE)


@pytest.fixture
def gateway(double: GatewayDouble) -> Iterator[str]:
    with serving(double) as url:
        yield url


def iou_lines(store: ChannelStore) -> int:
    return len(store.iou_path(CHANNEL).read_text().strip().splitlines())  # one JSON line each


def test_each_request_pays_one_price_more(key, store, double, gateway):
    with EndpointClient(gateway, "echo", new_signer(key, store), PRICE) as client:
        first = client.post("/predict", json={"x": [1, 2]})
        assert first.status_code == 200, first.text
        assert first.json() == {"method": "POST", "path": "predict", "body": '{"x":[1,2]}'}
        assert client.get("predict").status_code == 200
        assert client.request("PUT", "/v1/x", content=b"abc").json()["body"] == "abc"
        assert (client.received, client.paid) == (3 * PRICE, 3 * PRICE)
    assert [iou.amount for iou in double.ious] == [PRICE, 2 * PRICE, 3 * PRICE]
    assert double.refusals == [] and double.served == 3 * PRICE
    assert store.signed(CHANNEL) == 3 * PRICE


def test_a_402_with_an_acceptable_due_is_paid_and_retried(key, store, double, gateway):
    """Two requests in flight on one channel both pay one price: the gateway serves the first
    (held until the second is refused) and asks the second for two. The second waits for the
    first's answer, which makes that due acceptable, signs it and is served."""
    client = EndpointClient(gateway, "echo", new_signer(key, store), PRICE)
    held: list[int] = []
    first = threading.Thread(target=lambda: held.append(client.get("/hold").status_code))
    first.start()
    assert double.holding.wait(timeout=60)
    second = client.post("/predict", json={"n": 2})
    first.join(timeout=60)
    assert (held, second.status_code) == ([200], 200)
    assert [r["due"] for r in double.refusals] == [2 * PRICE]
    assert [iou.amount for iou in double.ious] == [PRICE, 2 * PRICE]
    assert client.received == client.paid == 2 * PRICE


def test_a_402_asking_too_much_is_refused_unsigned(key, store, double, gateway):
    client = EndpointClient(gateway, "echo", new_signer(key, store), PRICE)
    assert client.post("/predict").status_code == 200
    double.served += 5 * PRICE  # a gateway claiming requests the renter never received
    with pytest.raises(EndpointRefused, match=r"asks for 0\.014000 ADA in all") as refused:
        client.post("/predict")
    assert refused.value.details | {"reason": ""} == {
        "endpoint": "echo", "due": 7 * PRICE, "sent": 2 * PRICE, "received": PRICE,
        "unsure": 0, "price": PRICE, "reason": "",
    }  # fmt: skip
    assert "0.002000 ADA received plus this request's 0.002000 ADA" in str(refused.value)
    assert client.received == PRICE and client.paid == 2 * PRICE  # the one increment at risk
    assert iou_lines(store) == 2  # nothing signed for the due


@pytest.mark.parametrize("failing", ["/fail", "/missing"])
def test_an_error_answer_is_paid_only_when_the_gateway_charged_it(
    key, store, double, gateway, failing
):
    """The service's 500 or 404 is charged by the gateway: the next request's 402 asks for it
    and is paid. The gateway's own 502 (no upstream answer) is not: the next request pays
    nothing for it (the same IOU goes again)."""
    client = EndpointClient(gateway, "echo", new_signer(key, store), PRICE)
    assert client.post(failing).status_code in (404, 500)
    assert (client.received, client.unsure, client.paid) == (0, PRICE, PRICE)
    assert client.post("/predict").status_code == 200  # 402 for 2 prices, paid, retried
    assert [r["due"] for r in double.refusals] == [2 * PRICE]
    assert (client.received, client.unsure, client.paid) == (2 * PRICE, 0, 2 * PRICE)

    assert client.post("/down").status_code == 502
    assert client.post("/predict").status_code == 200
    assert [iou.amount for iou in double.ious] == [PRICE, 2 * PRICE, 3 * PRICE, 3 * PRICE]
    assert (client.received, client.unsure, client.paid) == (3 * PRICE, PRICE, 3 * PRICE)
    assert len(double.refusals) == 1 and double.served == 3 * PRICE


def test_another_channels_key_is_refused_with_the_gateways_reason(store, double, gateway):
    stranger = ConsumerKey(PaymentSigningKey.generate())  # not the channel's renter key
    client = EndpointClient(gateway, "echo", new_signer(stranger, store), PRICE)
    with pytest.raises(EndpointRefused, match="not signed by the channel's renter key"):
        client.post("/predict")
    assert double.served == 0 and len(double.refusals) == 1  # not retried with the same IOU


def test_a_restart_continues_from_the_persisted_total(key, store, double, gateway):
    with EndpointClient(gateway, "echo", new_signer(key, store), PRICE) as client:
        for _ in range(3):
            assert client.post("/predict").status_code == 200
    with EndpointClient(gateway, "echo", new_signer(key, store), PRICE) as again:
        assert again.received == 3 * PRICE  # from the stored IOU, not from zero
        assert again.post("/predict").status_code == 200
    assert [iou.amount for iou in double.ious] == [PRICE, 2 * PRICE, 3 * PRICE, 4 * PRICE]
    assert double.refusals == []


def test_the_header_is_the_designs_and_reads_back(key, store):
    iou = new_signer(key, store).pay(12_345, 12_345)
    text = iou.to_header()
    assert text == f"{CHANNEL}:12345:{iou.signature.hex()}"
    assert SignedIou.from_header(text) == iou
