"""Synthetic GGUFs whose tokenizer metadata differs from SmolLM2's: no chat template, another template,
fill-in-the-middle token ids. Built with gguf_factory's writers; only the tokenizer.* keys change."""
from __future__ import annotations

from gguf import GGUFValueType

import gguf_factory

# SmolLM2 tokens used as stand-in FIM markers (real vocabulary entries, so llama.cpp accepts the ids)
FIM_IDS = {"pre": 3, "suf": 4, "mid": 5}


def write_llama(path, *, template: str | None = "keep", fim: bool = False, **kw):
    """A dense llama GGUF (gguf_factory) with its chat template replaced (None = removed) and optional FIM ids."""
    drop, extra = [], []
    if template != "keep":
        drop.append("tokenizer.chat_template")
        if template is not None:
            extra.append(("tokenizer.chat_template", template, GGUFValueType.STRING, None))
    if fim:
        extra += [(f"tokenizer.ggml.fim_{k}_token_id", v, GGUFValueType.UINT32, None) for k, v in FIM_IDS.items()]
    with gguf_factory.tokenizer_keys(drop, extra):
        return gguf_factory.write_dense_llama(path, **kw)
