"""Synthetic GGUFs whose tokenizer metadata differs from SmolLM2's: no chat template, another template,
fill-in-the-middle token ids, the publisher's sampling defaults (general.sampling.*). Built with gguf_factory's writers; only the tokenizer.* keys change."""
from __future__ import annotations

from gguf import GGUFValueType

import gguf_factory

# SmolLM2 tokens used as stand-in FIM markers (real vocabulary entries, so llama.cpp accepts the ids)
FIM_IDS = {"pre": 3, "suf": 4, "mid": 5}


def write_llama(path, *, template: str | None = "keep", fim: bool = False, sampling: dict | None = None, **kw):
    """A dense llama GGUF (gguf_factory) with its chat template replaced (None = removed), optional FIM ids and
    optional publisher's sampling defaults (`sampling`: {"top_k": 7, "temp": 0.3}: general.sampling.* keys, an int
    written as INT32 and a float as FLOAT32, as llama.cpp's convert script writes them)."""
    drop, extra = [], []
    for k, v in (sampling or {}).items():
        vtype = GGUFValueType.INT32 if isinstance(v, int) else GGUFValueType.FLOAT32
        extra.append((f"general.sampling.{k}", v, vtype, None))
    if template != "keep":
        drop.append("tokenizer.chat_template")
        if template is not None:
            extra.append(("tokenizer.chat_template", template, GGUFValueType.STRING, None))
    if fim:
        extra += [(f"tokenizer.ggml.fim_{k}_token_id", v, GGUFValueType.UINT32, None) for k, v in FIM_IDS.items()]
    with gguf_factory.tokenizer_keys(drop, extra):
        return gguf_factory.write_dense_llama(path, **kw)
