"""The ONNX inference service: what `images.onnx_service_image` runs. An onnxruntime session
over one model file (`samples/onnx_model.py`'s network in the image), behind the sample
service's HTTP handler (samples/sample_service.py: the same /health, limits and errors):

- `GET /health` answers `{"status": "ok"}` once the model is loaded and the server listens;
- `POST /predict` with `{"inputs": [[numbers], ...]}` (a batch of rows as wide as the model's
  input) answers `{"outputs": [[numbers], ...]}`, the model's float32 outputs, or 400 with
  `{"error": ...}` naming what is wrong with the input.

Run as `python3 -m samples.onnx_service MODEL [PORT]` (8000 by default). It needs numpy and
onnxruntime, which its image has and the provider's own environment need not.
"""

from __future__ import annotations

import os
import sys
from http.server import ThreadingHTTPServer
from typing import Any

import numpy as np
import onnxruntime as ort

from samples.sample_service import DEFAULT_PORT, Handler

MAX_ROWS = 1024  # a request's batch: bounded, so one request cannot hold the CPU for long
FLOAT32_MAX = float(np.finfo(np.float32).max)


def session_of(model: str) -> ort.InferenceSession:
    """A CPU session over `model`, logging errors only (not the runtime's start-up notes), with
    as many threads as the provider's CPU quota (OMP_NUM_THREADS, which onnxruntime itself
    does not read: it would start one a visible CPU)."""
    ort.set_default_logger_severity(3)
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", "0"))  # 0: its own
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _float32(value: Any) -> bool:
    """A JSON number float32 holds without overflowing (no bool, NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return abs(float(value)) <= FLOAT32_MAX  # False for NaN
    except OverflowError:  # an int beyond any float
        return False


def rows_of(payload: Any, width: int) -> np.ndarray:
    """The batch in `payload` as float32 rows; ValueError naming what is wrong."""
    if not isinstance(payload, dict) or not isinstance(payload.get("inputs"), list):
        raise ValueError(f'send {{"inputs": [[{width} numbers], ...]}}')
    rows = payload["inputs"]
    if not 1 <= len(rows) <= MAX_ROWS:
        raise ValueError(f"inputs: 1 to {MAX_ROWS} rows, {len(rows)} sent")
    for row in rows:
        if not isinstance(row, list) or len(row) != width:
            raise ValueError(f"each row must be a list of {width} numbers")
        if not all(_float32(v) for v in row):
            raise ValueError("inputs must all be numbers within float32's range")
    return np.asarray(rows, dtype=np.float32)


class OnnxHandler(Handler):
    """The sample service's handler with the session's model as its `predict`."""

    session: ort.InferenceSession  # set by `main` before the server starts

    def predict(self, payload: Any) -> dict[str, Any]:
        (model_input,) = self.session.get_inputs()
        rows = rows_of(payload, int(model_input.shape[1]))
        (outputs,) = self.session.run(None, {model_input.name: rows})
        if not np.isfinite(outputs).all():  # JSON has no infinity: say so rather than send one
            raise ValueError("the model's outputs overflow float32 for these inputs")
        return {"outputs": outputs.tolist()}


def main() -> None:
    if not 2 <= len(sys.argv) <= 3:
        sys.exit("usage: python3 -m samples.onnx_service MODEL [PORT]")
    OnnxHandler.session = session_of(sys.argv[1])
    port = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_PORT
    ThreadingHTTPServer(("0.0.0.0", port), OnnxHandler).serve_forever()


if __name__ == "__main__":
    main()
