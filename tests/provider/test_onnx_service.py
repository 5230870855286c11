"""The ONNX sample: the network `onnx` builds here (deterministic, checked), served by
onnxruntime in the image built locally (the wheel unpacked into it, nothing fetched inside),
started as a hardened service and called through the gateway, each request paid by an IOU:
its outputs are NumPy's forward pass of the same weights, the gateway charged each request
its price, to the lovelace, and the service logged only the requests (the runtime's telemetry
is off in the image: no device id written, nothing sent).

The image is built once per machine (about 5 s over the python image when pip has the wheel
at hand); then the service starts in about a second."""

from __future__ import annotations

from collections.abc import Iterator

import docker
import httpx
import numpy as np
import onnx
import pytest

from offchain.protocol.ledger.iou import IOU_HEADER
from provider.gateway.app import gateway_app
from provider.rentals.book import RentalBook
from provider.rentals.services import Services, service_container_name
from samples import images as sample_images
from samples import onnx_model
from tests.provider import test_services
from tests.provider.test_gateway_support import book_with_channels, iou, running, serving, stored
from tests.provider.test_services import spec_of

services = test_services.services  # its fixture, used here too

PRICE = 2_500  # lovelace a request
BATCH = [[0.5, -1.0, 2.0, 0.25], [0.0, 0.0, 0.0, 0.0], [-3.0, 1.5, 0.75, 4.0]]


def forward(inputs: list[list[float]]) -> np.ndarray:
    """The model's forward pass in NumPy (float64 over the float32 weights)."""
    w = {name: array.astype(np.float64) for name, array in onnx_model.weights().items()}
    hidden = np.maximum(np.asarray(inputs) @ w["W1"] + w["b1"], 0)
    return hidden @ w["W2"] + w["b2"]


def test_the_model_is_a_checked_deterministic_mlp():
    model = onnx_model.mlp()
    onnx.checker.check_model(model, full_check=True)  # shapes inferred through every node
    assert onnx_model.model_bytes() == model.SerializeToString()  # same seed, same bytes
    assert onnx_model.model_bytes(seed=1) != onnx_model.model_bytes()
    (x,), (y,) = model.graph.input, model.graph.output
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in (x, y)]
    assert dims == [["batch", onnx_model.INPUTS], ["batch", onnx_model.OUTPUTS]]


@pytest.fixture(scope="module")
def onnx_image(client: docker.DockerClient) -> str:
    return sample_images.onnx_service_image(client)


@pytest.fixture
def book(tmp_path) -> Iterator[RentalBook]:
    made = RentalBook(tmp_path / "endpoints.sqlite")
    yield made
    made.close()


@pytest.fixture
def gateway(tmp_path, book: RentalBook) -> Iterator[httpx.Client]:
    channels = book_with_channels(tmp_path / "channels.sqlite")
    with serving(gateway_app(channels, book)) as url, httpx.Client(base_url=url) as client:
        yield client
    channels.close()


def test_the_onnx_service_answers_numpys_forward_pass_through_the_gateway(
    client, services: Services, book: RentalBook, gateway: httpx.Client, onnx_image: str
) -> None:
    image = client.images.get(onnx_image)
    assert image.attrs["Config"]["Cmd"][:3] == ["python3", "-m", "samples.onnx_service"]
    started = services.start("mlp", spec_of(onnx_image, price_per_request=PRICE))
    assert started.image_digest == image.id
    book.add(running("mlp", started.upstream, PRICE))  # as the daemon records it, started
    assert gateway.get("/endpoints/mlp/health").status_code == 402  # nothing is free

    def paid(n: int, body: object) -> httpx.Response:
        return gateway.post("/endpoints/mlp/predict", json=body,
                            headers={IOU_HEADER: iou(n * PRICE).to_header()})  # fmt: skip

    answer = paid(1, {"inputs": BATCH})
    assert answer.status_code == 200, answer.text
    outputs = np.asarray(answer.json()["outputs"])
    assert outputs.shape == (len(BATCH), onnx_model.OUTPUTS)
    np.testing.assert_allclose(outputs, forward(BATCH), rtol=1e-5, atol=1e-5)
    single = paid(2, {"inputs": BATCH[2:]}).json()["outputs"]
    np.testing.assert_allclose(single, forward(BATCH[2:]), rtol=1e-5, atol=1e-5)

    bad = paid(3, {"inputs": [[1, 2, 3]]})  # a row too narrow: the service says so
    assert bad.status_code == 400
    assert bad.json() == {"error": f"each row must be a list of {onnx_model.INPUTS} numbers"}
    assert paid(4, {"values": [1]}).json()["error"].startswith('send {"inputs"')
    for n, row in enumerate(([1, 2, 3, True], [10**400, 0, 0, 0], [1, 2, 3, 4e38]), start=5):
        refused = paid(n, {"inputs": [row]})
        assert refused.json() == {"error": "inputs must all be numbers within float32's range"}
    overflow = paid(8, {"inputs": [[3e38] * onnx_model.INPUTS]})
    assert overflow.json() == {"error": "the model's outputs overflow float32 for these inputs"}
    served = book.get(stored("mlp"))
    assert served is not None and (served.requests, served.served) == (8, 8 * PRICE)
    container = client.containers.get(service_container_name(services.runner_id, "mlp", 0))
    logged = services.logs("mlp", 100).splitlines()
    assert "GET /health 200" in logged  # Services' health wait
    requests = [line for line in logged if line != "GET /health 200"]
    assert requests == ["POST /predict 200"] * 2 + ["POST /predict 400"] * 6
    # the runtime's telemetry is off: no device id or event cache in its only writable place
    assert container.exec_run(["find", "/tmp", "-mindepth", "1"]).output == b""
