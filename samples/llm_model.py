"""The sample language model: a decoder-only transformer of GPT-2's shape (token and position
embeddings, pre-norm blocks of causal multi-head self-attention and a GELU MLP, a final layer
norm, the output head tied to the token embedding) whose weights are drawn from a seed in
code, as GPT-2 initialises them: no model hub is reachable, and any two machines given the
same seed hold the same model. Its text is noise, but every token costs what a real one does.

Runs on PyTorch (the image's python3-torch on the CPU here); `samples/llm_service.py` serves it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import torch
from torch import nn
from torch.nn import functional

from samples.llm_tokens import EOS, SAMPLED, VOCAB


@dataclasses.dataclass(frozen=True)
class Shape:
    layers: int = 2
    heads: int = 4
    width: int = 128
    context: int = 1024  # positions: prompt and completion together


class Attention(nn.Module):
    """Causal multi-head self-attention."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.heads = shape.heads
        self.qkv = nn.Linear(shape.width, 3 * shape.width)
        self.out = nn.Linear(shape.width, shape.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
                   for t in (q, k, v))  # fmt: skip
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        mask = torch.ones(length, length, dtype=torch.bool).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        mixed = functional.softmax(scores, dim=-1) @ v
        return self.out(mixed.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(shape.width), nn.LayerNorm(shape.width)
        self.attention = Attention(shape)
        self.mlp = nn.Sequential(nn.Linear(shape.width, 4 * shape.width), nn.GELU(),
                                 nn.Linear(4 * shape.width, shape.width))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Gpt(nn.Module):
    def __init__(self, shape: Shape, seed: int) -> None:
        super().__init__()
        self.shape = shape
        self.tokens = nn.Embedding(VOCAB, shape.width)
        self.positions = nn.Embedding(shape.context, shape.width)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        generator = torch.Generator().manual_seed(seed)
        for name, weight in self.named_parameters():  # GPT-2's initialisation, from the seed
            if name.endswith("bias"):
                nn.init.zeros_(weight)
            elif "norm" in name:
                nn.init.ones_(weight)
            else:
                weight.data.normal_(0.0, 0.02, generator=generator)
        allowed = torch.full((VOCAB,), float("-inf"))
        allowed[list(SAMPLED)] = 0.0
        allowed[EOS] = 0.0
        self.register_buffer("allowed", allowed)

    def hidden(self, tokens: list[int]) -> torch.Tensor:
        """The last layer's states of `tokens` (at most the context's last positions)."""
        ids = torch.tensor([tokens[-self.shape.context :]])
        x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.norm(x)[0]

    def next_logits(self, tokens: list[int]) -> torch.Tensor:
        last = self.hidden(tokens)[-1]
        return last @ self.tokens.weight.T + self.allowed

    def embed(self, tokens: list[int]) -> list[float]:
        """The mean of the last states, unit length: the text's embedding."""
        with torch.no_grad():
            mean = self.hidden(tokens).mean(dim=0)
        return (mean / mean.norm()).tolist()


def generate(
    model: Gpt, prompt: list[int], max_tokens: int, temperature: float, seed: int
) -> Iterator[int]:
    """Sample up to `max_tokens` tokens after `prompt`, one at a time (the caller streams
    them): greedy at temperature 0, else drawn with a generator seeded by `seed`; EOS ends."""
    generator = torch.Generator().manual_seed(seed)
    tokens = list(prompt)
    for _ in range(max_tokens):
        with torch.no_grad():
            logits = model.next_logits(tokens)
        if temperature <= 0:
            token = int(logits.argmax())
        else:
            probabilities = functional.softmax(logits / temperature, dim=-1)
            token = int(torch.multinomial(probabilities, 1, generator=generator))
        if token == EOS:
            return
        tokens.append(token)
        yield token


def model_of(seed: int, shape: Shape | None = None) -> Gpt:
    torch.manual_seed(seed)
    model = Gpt(shape or Shape(), seed)
    model.eval()
    return model
