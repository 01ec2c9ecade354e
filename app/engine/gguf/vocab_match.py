"""Whether one GGUF can draft for another (speculative decoding's draft model): the same vocabulary, read from the
two files' tokenizer metadata, no model load. The rule is llama.cpp's (`common_speculative_are_compatible` in
common/speculative.cpp): the same tokenizer type, the same BOS/EOS handling, vocabulary sizes within 128 of each
other (the embedding tables of one family's sizes are padded differently), and the same text for every token id
from 5 up to the smaller size.
"""
from __future__ import annotations

import os

from app.engine.gguf.parser import parse_gguf

MAX_SIZE_DIFFERENCE = 128            # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
CHECK_START_TOKEN_ID = 5             # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID
_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id",
         "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id")


def _vocab(path: str | os.PathLike) -> tuple[dict, list]:
    gf = parse_gguf(path, keep_arrays=1 << 30)
    tokens = gf.get("tokenizer.ggml.tokens")
    return {k: gf.get(k) for k in _KEYS}, tokens if isinstance(tokens, list) else []


def vocab_mismatch(target: str | os.PathLike, draft: str | os.PathLike) -> str | None:
    """None when `draft` can draft for `target`; else what differs, in words (for the user's error)."""
    (kt, tt), (kd, td) = _vocab(target), _vocab(draft)
    if not tt or not td:
        return "a vocabulary is missing from the GGUF (no tokenizer.ggml.tokens)"
    for name in ("model", "add_bos_token", "add_eos_token", "bos_token_id", "eos_token_id"):
        key = f"tokenizer.ggml.{name}"
        if name.endswith("_id") and not kt.get(f"tokenizer.ggml.add_{name[:3]}_token"):
            continue                 # a BOS/EOS id matters only where the tokenizer adds that token
        if kt.get(key) != kd.get(key):
            return f"{key} differs ({kt.get(key)!r} vs {kd.get(key)!r})"
    if abs(len(tt) - len(td)) > MAX_SIZE_DIFFERENCE:
        return f"the vocabularies have {len(tt)} and {len(td)} tokens"
    for i in range(CHECK_START_TOKEN_ID, min(len(tt), len(td))):
        if tt[i] != td[i]:
            return f"token {i} is {tt[i]!r} in one and {td[i]!r} in the other"
    return None
