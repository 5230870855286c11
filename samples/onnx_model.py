"""The sample ONNX model: a small multilayer perceptron built in code with the `onnx` helper
API (no file to download or keep in the repository), served by `samples/onnx_service.py` in
the image `images.onnx_service_image` builds.

`y = relu(x @ W1 + b1) @ W2 + b2`, float32, a batch of INPUTS-wide rows in, OUTPUTS-wide rows
out. Its weights come from a seeded generator, so the same seed gives the same model bytes
(the image's content tag depends on them) and a test can run the same forward pass in NumPy.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUTS, HIDDEN, OUTPUTS = 4, 16, 3
SEED = 23  # issue 23
OPSET = 17  # old enough for any recent onnxruntime
IR_VERSION = 8  # the IR version of opset 17: a runtime may refuse a newer one
INPUT_NAME, OUTPUT_NAME = "x", "y"


def weights(seed: int = SEED) -> dict[str, np.ndarray]:
    """W1, b1, W2, b2 (float32), the same for the same seed."""
    rng = np.random.default_rng(seed)
    shapes = {"W1": (INPUTS, HIDDEN), "b1": (HIDDEN,), "W2": (HIDDEN, OUTPUTS), "b2": (OUTPUTS,)}
    return {name: rng.normal(0, 0.5, shape).astype(np.float32) for name, shape in shapes.items()}


def mlp(seed: int = SEED) -> onnx.ModelProto:
    """The model, checked by onnx's checker; any batch size (its first dimension is named)."""
    initializers = [numpy_helper.from_array(array, name) for name, array in weights(seed).items()]
    nodes = [
        helper.make_node("MatMul", [INPUT_NAME, "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], [OUTPUT_NAME]),
    ]
    graph = helper.make_graph(
        nodes, "unchained-sample-mlp",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", INPUTS])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", OUTPUTS])],
        initializer=initializers,
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
        producer_name="unchained",
    )  # fmt: skip
    onnx.checker.check_model(model)
    return model


def model_bytes(seed: int = SEED) -> bytes:
    """The serialized model: what the image carries."""
    return mlp(seed).SerializeToString()
