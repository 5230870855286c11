"""One endpoint on several providers (`providers: N` in its spec): the renter's client sends
each request to the first provider in its order that is not resting, each paid over that
provider's own channel by its own `EndpointClient`. A provider whose gateway gives no answer
(connection refused, reset, timed out) or answers that it cannot reach the service (502, 503:
the gateway's own, never charged) rests for `rest_ms` and the request goes to the next one; a
rested provider is tried again first once its rest is over, so the renter returns to its
preferred (cheapest) provider when it recovers. A request no provider answers raises the last
error. Nothing is paid twice: each client pays only for what its own gateway served."""

from __future__ import annotations

import time
from typing import Any

import httpx

from consumer.sdk.endpoint_client import EndpointClient

UNREACHABLE = (502, 503)  # the gateway's answer when its service is gone or not ready
REST_MS = 30_000


class RoutedEndpoint:
    """Requests to one endpoint on the providers of `clients` (best first)."""

    def __init__(self, clients: list[EndpointClient], rest_ms: int = REST_MS) -> None:
        if not clients:
            raise ValueError("an endpoint runs on at least one provider")
        self.clients, self.rest_ms = clients, rest_ms
        self.resting_until = [0] * len(clients)  # monotonic ms
        self.served_by: EndpointClient | None = None  # the client of the last answer

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """`method path` on the first provider not resting (all of them, in order, when every
        one rests); the answer of the first that serves it."""
        now = time.monotonic_ns() // 1_000_000
        order = [i for i, until in enumerate(self.resting_until) if until <= now]
        order += [i for i in range(len(self.clients)) if i not in order]
        failure: httpx.HTTPError | None = None
        response = None
        for index in order:
            client = self.clients[index]
            try:
                response = client.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                failure = exc
            else:
                if response.status_code not in UNREACHABLE:
                    self.served_by = client
                    return response
            self.resting_until[index] = time.monotonic_ns() // 1_000_000 + self.rest_ms
        if response is not None:
            return response  # every provider answered that it cannot reach the service
        assert failure is not None
        raise failure

    def close(self) -> None:
        for client in self.clients:
            client.close()
