"""The PyTorch example job: a small convolutional network learns to tell four kinds of 12x12
pattern apart (synthetic images made here, seeded per step, so a resumed run sees exactly the
batches an uninterrupted one would). It trains on CUDA when the container has a GPU, else on
the CPU. Every `--checkpoint-every` steps it saves model, optimizer and step to
/out/checkpoint.pt (written beside it, then renamed: a stop at any moment leaves the previous
checkpoint or the new one, never half of one); at the end /out/model.pt and /out/metrics.json.
When /in/checkpoint.pt exists (`unchained job submit --resume JOB` puts the last checkpoint of
an earlier job there) training continues from its step."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

SIZE = 12
CLASSES = 4
RESUME = Path("/in/checkpoint.pt")


def batch(step: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy images of one of four patterns (horizontal, vertical, diagonal bars, a blob),
    the same for the same step and seed whenever they are made."""
    rng = torch.Generator().manual_seed(seed * 1_000_003 + step)
    labels = torch.randint(0, CLASSES, (size,), generator=rng)
    rows = torch.arange(SIZE).view(SIZE, 1).expand(SIZE, SIZE)
    cols = rows.t()
    patterns = torch.stack(
        [
            (rows % 4 < 2).float(),
            (cols % 4 < 2).float(),
            ((rows + cols) % 4 < 2).float(),
            (((rows - SIZE / 2) ** 2 + (cols - SIZE / 2) ** 2) < 12).float(),
        ]
    )
    images = patterns[labels] + 1.5 * torch.randn(size, SIZE, SIZE, generator=rng)
    return images.unsqueeze(1), labels


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 3 * 3, CLASSES),
    )


def save(state: dict[str, Any], target: Path) -> None:
    """`state` to `target` atomically: a stop mid-write leaves the old file whole."""
    partial = target.with_name(f".{target.name}.part")
    torch.save(state, partial)
    with open(partial, "rb") as written:
        os.fsync(written.fileno())
    partial.replace(target)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("/out"))
    parser.add_argument("--resume", type=Path, default=RESUME)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(args.seed)
    net = model().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    step = 0
    if args.resume.exists():
        saved = torch.load(args.resume, map_location=device)
        net.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step = int(saved["step"])
        print(f"resumed from step {step}", flush=True)
    started = step
    print(f"training on {device} from step {step} to {args.steps}", flush=True)
    loss = torch.zeros(())
    while step < args.steps:
        images, labels = batch(step, args.batch, args.seed)
        loss = nn.functional.cross_entropy(net(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % args.checkpoint_every == 0 or step == args.steps:
            state = {"model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            save(state, args.out / "checkpoint.pt")
            print(f"checkpoint step {step} loss {loss.item():.4f}", flush=True)
    images, labels = batch(-1, 512, args.seed)  # held out: no training step is -1
    with torch.no_grad():
        accuracy = (net(images.to(device)).argmax(1).cpu() == labels).float().mean().item()
    save({"model": net.state_dict(), "step": step}, args.out / "model.pt")
    metrics = {
        "started_at_step": started,
        "steps": step,
        "device": device.type,
        "loss": round(loss.item(), 4),
        "accuracy": round(accuracy, 4),
    }
    (args.out / "metrics.json").write_text(json.dumps(metrics))
    print(f"done: step {step} accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
