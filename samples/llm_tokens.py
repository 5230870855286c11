"""The sample language model's tokenizer and chat template, shared by its server
(`samples/llm_service.py`, in the image) and the renter's client (`consumer.sdk.llm_meter`),
so the renter counts every request's tokens exactly as the server does and signs for no more.

Byte-level: a token is one byte of UTF-8 (ids 0-255), plus BOS (256, opening every prompt)
and EOS (257, ending a generation; never emitted as text, never counted). The model only
samples printable ASCII and newline (`SAMPLED`), so its text decodes back to exactly the
tokens it sampled: a completion of n characters is n tokens. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

BOS, EOS = 256, 257
VOCAB = 258
SAMPLED = (10, *range(32, 127))  # newline and printable ASCII: what the model may generate
ROLES = ("system", "user", "assistant")


def encode(text: str) -> list[int]:
    """The prompt's tokens: BOS, then its UTF-8 bytes."""
    return [BOS, *text.encode()]


def decode(tokens: Sequence[int]) -> str:
    """The text of generated tokens (EOS and BOS dropped)."""
    return bytes(t for t in tokens if t < BOS).decode(errors="replace")


def chat_prompt(messages: Any) -> str:
    """The text the model continues for a chat: each message as `<|role|>` and its content on
    lines of their own, then the assistant's turn. ValueError naming what is malformed."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: a non-empty list of {role, content}")
    lines = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{index}]: an object with role and content")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"messages[{index}].role: one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{index}].content: a string (no content parts here)")
        lines.append(f"<|{role}|>\n{content}\n")
    return "".join(lines) + "<|assistant|>\n"


def prompt_text(path: str, body: dict[str, Any]) -> str:
    """The text a request to `path` (/v1/completions, /v1/chat/completions, /v1/embeddings)
    feeds the model; ValueError naming what is malformed."""
    if path.endswith("/chat/completions"):
        return chat_prompt(body.get("messages"))
    field = "input" if path.endswith("/embeddings") else "prompt"
    text = body.get(field)
    if not isinstance(text, str):
        raise ValueError(f"{field}: one string (no batches or token lists here)")
    return text


def prompt_tokens(path: str, body: dict[str, Any]) -> int:
    """How many tokens the request's prompt is."""
    return len(encode(prompt_text(path, body)))


def completion_tokens(text: str) -> int:
    """How many tokens generated `text` is (one a byte: the model samples ASCII only)."""
    return len(text.encode())
