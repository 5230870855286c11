"""The sample service's HTTP answers, served from a thread here (the same script its image
runs): health, the "model", and bad input refused with a JSON error."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest

from samples.sample_service import MAX_BODY, Handler


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_health_and_predict(url):
    assert httpx.get(f"{url}/health").json() == {"status": "ok"}
    answer = httpx.post(f"{url}/predict", json={"values": [1.5, 2.5]})
    assert answer.json() == {"n": 2, "sum": 4.0, "mean": 2.0, "score": 9.0}
    assert httpx.post(f"{url}/predict", json={"values": []}).json()["mean"] == 0


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{", "Expecting property name"),
        (b"[1]", 'send {"values": [numbers]}'),
        (b'{"values": [true]}', "values must all be numbers"),
    ],
)
def test_bad_input_gets_400_naming_the_problem(url, body, error):
    answer = httpx.post(f"{url}/predict", content=body)
    assert answer.status_code == 400 and error in answer.json()["error"]


def test_unknown_paths_oversized_and_unsized_bodies_are_refused(url):
    assert httpx.get(f"{url}/predict").status_code == 404
    assert httpx.post(f"{url}/health", json={}).status_code == 404
    big = httpx.post(f"{url}/predict", content=b"x" * (MAX_BODY + 1))
    assert big.status_code == 413 and big.json() == {"error": f"body over {MAX_BODY} bytes"}

    def chunks() -> Iterator[bytes]:
        yield b'{"values": []}'

    assert httpx.post(f"{url}/predict", content=chunks()).status_code == 411  # chunked: no length
