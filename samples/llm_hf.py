"""The sample model's tokenizer and shape as a Hugging Face model folder, for vLLM on a GPU
provider (no model hub is reachable: the folder is written here, the weights drawn by vLLM's
`--load-format dummy`): `config.json` (GPT-2 of `llm_model.Shape`), `tokenizer.json`
(`llm_tokens`' byte-level tokens: GPT-2's byte-to-character map, no merges, BOS added to every
prompt) and `tokenizer_config.json` (`llm_tokens.chat_prompt` as its chat template). A renter
counting with `samples.llm_tokens` then counts what vLLM counts, provided the model samples
only `llm_tokens.SAMPLED` (`allowed_token_ids`) and never stops on EOS (`ignore_eos`): what
`VLLM_SAMPLING` asks of each request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from samples.llm_tokens import BOS, EOS, SAMPLED, VOCAB

BOS_TEXT, EOS_TEXT = "<|bos|>", "<|eos|>"
CHAT_TEMPLATE = (BOS_TEXT + "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
                 "{% endfor %}<|assistant|>\n")  # fmt: skip
VLLM_SAMPLING = {"allowed_token_ids": list(SAMPLED), "ignore_eos": True}


def byte_characters() -> dict[int, str]:
    """GPT-2's map of each byte to a printable character (byte-level BPE's alphabet)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    chars = list(kept)
    extra = 0
    for byte in range(256):
        if byte not in kept:
            kept.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {byte: chr(char) for byte, char in zip(kept, chars, strict=True)}


def tokenizer_json() -> dict[str, Any]:
    vocab = {char: byte for byte, char in byte_characters().items()}
    special = [{"id": BOS, "content": BOS_TEXT}, {"id": EOS, "content": EOS_TEXT}]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{**token, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for token in special],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS_TEXT, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}],
            "special_tokens": {BOS_TEXT: {"id": BOS_TEXT, "ids": [BOS], "tokens": [BOS_TEXT]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }  # fmt: skip


def write_model(folder: Path, layers: int = 2, heads: int = 4, width: int = 128) -> Path:
    """The model folder vLLM serves with `--load-format dummy`."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": VOCAB,
              "n_positions": 1024, "n_embd": width, "n_layer": layers, "n_head": heads,
              "bos_token_id": BOS, "eos_token_id": EOS, "torch_dtype": "float32"}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json()))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS_TEXT,
        "eos_token": EOS_TEXT, "add_bos_token": False, "chat_template": CHAT_TEMPLATE,
        "model_max_length": 1024}))  # fmt: skip
    return folder
