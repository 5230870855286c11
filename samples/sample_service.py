"""The sample inference service (standard library only): what `images.sample_service_image`
runs, for the provider's tests, benchmark and demo of services.

- `GET /health` answers `{"status": "ok"}` once the server listens;
- `POST /predict` with `{"values": [numbers]}` answers a small linear "model"'s output:
  `{"n", "sum", "mean", "score"}` (score = 2 * sum + 1), or 400 with `{"error": ...}`;
- bodies over 1 MiB get 413: the service bounds what it reads, as the gateway does.

Run as `python3 sample_service.py [PORT]` (8000 by default); it listens on every address of
its container, which the provider publishes on the host's 127.0.0.1 only.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_PORT = 8000
MAX_BODY = 1 << 20


def predict(payload: Any) -> dict[str, float | int]:
    """The "model": ValueError naming what is wrong with the input."""
    if not isinstance(payload, dict) or not isinstance(payload.get("values"), list):
        raise ValueError('send {"values": [numbers]}')
    values = payload["values"]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise ValueError("values must all be numbers")
    total = sum(values)
    return {"n": len(values), "sum": total, "mean": total / len(values) if values else 0,
            "score": 2 * total + 1}  # fmt: skip


class Handler(BaseHTTPRequestHandler):
    """/health and /predict; a subclass serves another model by giving its own `predict`
    (samples/onnx_service.py)."""

    protocol_version = "HTTP/1.1"  # keep-alive: the gateway reuses its connections

    def predict(self, payload: Any) -> dict[str, Any]:
        """The model's answer to `payload`; ValueError naming what is wrong with it."""
        return predict(payload)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, {"status": "ok"})
        else:
            self._answer(404, {"error": f"no such path {self.path}"})

    def do_POST(self) -> None:
        if self.path != "/predict":
            self._answer(404, {"error": f"no such path {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._answer(411, {"error": "Content-Length is required"}, close=True)
            return
        if not 0 <= length <= MAX_BODY:
            self._answer(413, {"error": f"body over {MAX_BODY} bytes"}, close=True)
            return
        try:
            self._answer(200, self.predict(json.loads(self.rfile.read(length))))
        except ValueError as exc:  # json.JSONDecodeError is one
            self._answer(400, {"error": str(exc)})

    def _answer(self, status: int, body: dict[str, Any], close: bool = False) -> None:
        """`close` when the request's body was not read: what is left of it is no request."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """One line per request on stderr: the container's log."""
        sys.stderr.write(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}\n")


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PORT
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
