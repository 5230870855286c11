"""A realistic small job: train a two-layer neural network on two interleaved spirals, with
NumPy alone, on the CPU. Prints progress, writes the model and its metrics to /out."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np


def spirals(points: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two spirals, one per class, with a little noise: not separable by a line."""
    t = np.sqrt(rng.uniform(0, 1, points)) * 3 * np.pi
    arm = np.stack([t * np.cos(t), t * np.sin(t)], axis=1) / (3 * np.pi)
    x = np.concatenate([arm, -arm]) + rng.normal(0, 0.02, (2 * points, 2))
    y = np.concatenate([np.zeros(points, int), np.ones(points, int)])
    return x, y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("/out"))
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    x, y = spirals(1000, rng)
    w1 = rng.normal(0, 1, (2, args.hidden))
    b1 = np.zeros(args.hidden)
    w2 = rng.normal(0, 1 / np.sqrt(args.hidden), (args.hidden, args.hidden))
    b2 = np.zeros(args.hidden)
    w3 = rng.normal(0, 1 / np.sqrt(args.hidden), (args.hidden, 2))
    b3 = np.zeros(2)
    params = [w1, b1, w2, b2, w3, b3]
    moments = [np.zeros_like(p) for p in params]
    squares = [np.zeros_like(p) for p in params]
    step = 0
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x))
        for batch in np.array_split(order, 16):
            xb, yb = x[batch], y[batch]
            h1 = np.tanh(xb @ w1 + b1)
            h2 = np.tanh(h1 @ w2 + b2)
            logits = h2 @ w3 + b3
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            d3 = p.copy()
            d3[np.arange(len(yb)), yb] -= 1
            d3 /= len(yb)
            d2 = (d3 @ w3.T) * (1 - h2**2)
            d1 = (d2 @ w2.T) * (1 - h1**2)
            grads = [xb.T @ d1, d1.sum(0), h1.T @ d2, d2.sum(0), h2.T @ d3, d3.sum(0)]
            step += 1
            for param, grad, m, v in zip(params, grads, moments, squares, strict=True):
                m[:] = 0.9 * m + 0.1 * grad
                v[:] = 0.999 * v + 0.001 * grad**2
                param -= 0.01 * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
        if epoch % 25 == 0 or epoch == args.epochs:
            logits = np.tanh(np.tanh(x @ w1 + b1) @ w2 + b2) @ w3 + b3
            shifted = logits - logits.max(axis=1, keepdims=True)
            loss = float(-(shifted[np.arange(len(y)), y] - np.log(np.exp(shifted).sum(1))).mean())
            accuracy = float((logits.argmax(axis=1) == y).mean())
            print(f"epoch {epoch} loss {loss:.4f} accuracy {accuracy:.3f}", flush=True)
    np.savez(args.out / "model.npz", w1=w1, b1=b1, w2=w2, b2=b2, w3=w3, b3=b3)
    times = os.times()
    metrics = {
        "epochs": args.epochs,
        "loss": loss,
        "accuracy": accuracy,
        "cpu_ns": int((times.user + times.system) * 1e9),
    }
    (args.out / "metrics.json").write_text(json.dumps(metrics))


if __name__ == "__main__":
    main()
