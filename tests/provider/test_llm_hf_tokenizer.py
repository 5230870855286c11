"""The sample model's Hugging Face folder (`samples/llm_hf.py`, what vLLM serves on a GPU
provider) tokenizes exactly as the renter counts (`samples/llm_tokens.py`): Hugging Face's own
`tokenizers` reads it here, no GPU needed."""

from __future__ import annotations

import json

import tokenizers

import samples.llm_tokens as tokenizer
from samples.llm_hf import tokenizer_json


def test_the_model_folder_tokenizes_as_the_renter_counts():
    made = tokenizers.Tokenizer.from_str(json.dumps(tokenizer_json()))
    for text in ("Hello, world!", "héllo\n<|user|>\n", ""):
        assert made.encode(text).ids == tokenizer.encode(text)
