"""Writes tiny GGUF models that llama.cpp loads and decodes (random weights: the text is noise, but the
engine, memory and placement paths are real). Tokenizer metadata is copied from the built-in SmolLM2 GGUF,
so prompts tokenize exactly as with the real model.

The public API for tests:
  - write_dense_llama / write_moe_qwen3 / write_dense_qwen3 / write_minimal: the shapes the planner tests use;
  - FAMILIES: {name: Family} for every architecture family whose memory or template behaviour differs (sliding
    window, chunked attention, MLA, recurrent, hybrid, per-layer KV heads, attention sinks, shared experts...),
    each with the family's real chat template as a fixture (tests/support/fixtures/templates/):
        fam = FAMILIES["gemma3"]; path = fam.write(tmp / "g3.gguf"); fam.template_text()
    write_family(name, directory) writes one (file name = name.gguf) and returns its path;
  - tokenizer_keys(drop, extra): a context in which written GGUFs get SmolLM2's tokenizer keys edited.

Numpy shapes are ggml's `ne` reversed: `token_embd`/`output` are (n_vocab, n_embd), `ffn_down` (n_embd, n_ff).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter

from gguf_families import FAMILY_LIST
from gguf_writer import (QTYPES, Family, ModelWriter, attention, common_keys, embeddings,  # noqa: F401
                         n_vocab_of_tokenizer, smollm2_gguf_path, smollm2_tokenizer_kv, template_text,
                         tokenizer_keys)


def write_dense_llama(path, n_layer: int = 3, n_embd: int = 64, n_head: int = 4, n_head_kv: int = 2,
                      n_ff: int = 128, qtype: str | None = None, n_ctx: int = 2048, tie_output: bool = False,
                      seed: int = 0, chat_template: str | None = None) -> Path:
    """A dense `llama` model. n_embd and n_ff must be multiples of 32 for Q4_0/Q8_0."""
    head_dim = n_embd // n_head
    m = ModelWriter(path, "llama", f"synthetic-llama-{n_layer}L", qtype, seed, chat_template)
    common_keys(m, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim)
    embeddings(m, n_embd, tie_output)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        m.weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    return m.finish()


def write_other_vocab_llama(path, token_id: int = 1000, seed: int = 3) -> Path:
    """A dense llama (write_dense_llama's shapes) whose vocabulary is SmolLM2's with token `token_id`'s text
    changed: the same size, another vocabulary (speculative decoding's draft check must refuse it)."""
    key, tokens, vtype, item = next(k for k in smollm2_tokenizer_kv() if k[0] == "tokenizer.ggml.tokens")
    edited = list(tokens)
    edited[token_id] += "x"
    with tokenizer_keys(extra=[(key, edited, vtype, item)]):
        return write_dense_llama(path, seed=seed)


def write_split_dense_llama(path, n_parts: int = 3, n_layer: int = 3, n_embd: int = 64, qtype: str | None = None,
                            seed: int = 3) -> list[Path]:
    """The dense llama model of write_dense_llama split into `n_parts` files named PATH_STEM-0000i-of-0000n.gguf
    (the first part carries the metadata and the embeddings). Returns the parts in order."""
    n_head, n_head_kv, n_ff = 4, 2, 128
    head_dim = n_embd // n_head
    n_tensors = 3 + n_layer * 9                # token_embd, output_norm, output; 9 per layer
    m = ModelWriter(path, "llama", f"synthetic-llama-{n_layer}L-split", qtype, seed,
                    split_max_tensors=-(-n_tensors // n_parts))
    common_keys(m, n_layer, 2048, n_embd, n_ff, n_head, n_head_kv, head_dim)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        m.weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    return m.finish_split()


def write_lora_llama(path, n_layer: int = 3, n_embd: int = 64, n_ff: int = 128, rank: int = 8, alpha: float = 16.0,
                     arch: str = "llama", seed: int = 4) -> Path:
    """A LoRA adapter GGUF (as convert_lora_to_gguf.py writes one) for write_dense_llama's shapes: attn_q and
    ffn_up of every layer, large enough to change what the model says."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for i in range(n_layer):
        for name, n_out in (("attn_q", n_embd), ("ffn_up", n_ff)):
            a = rng.standard_normal((rank, n_embd)) * 0.5          # numpy shapes are ggml's ne reversed
            b = rng.standard_normal((n_out, rank)) * 0.5
            w.add_tensor(f"blk.{i}.{name}.weight.lora_a", a.astype(np.float32))
            w.add_tensor(f"blk.{i}.{name}.weight.lora_b", b.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_moe_qwen3(path, n_layer: int = 3, n_expert: int = 4, n_expert_used: int = 2, n_embd: int = 64,
                    n_head: int = 4, n_head_kv: int = 2, head_dim: int = 32, n_ff_exp: int = 64,
                    qtype: str | None = None, n_ctx: int = 2048, seed: int = 1,
                    chat_template: str | None = None) -> Path:
    """A `qwen3moe` model: every layer has n_expert experts (ffn_*_exps) and a router (ffn_gate_inp)."""
    m = ModelWriter(path, "qwen3moe", f"synthetic-qwen3moe-{n_layer}L-{n_expert}E", qtype, seed, chat_template)
    common_keys(m, n_layer, n_ctx, n_embd, n_ff_exp, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    m.key("expert_count", n_expert)
    m.key("expert_used_count", n_expert_used)
    m.key("expert_feed_forward_length", n_ff_exp)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
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
                      pooling_type: int | None = None, seed: int = 2, chat_template: str | None = None) -> Path:
    """A dense `qwen3` model (q/k norms). With pooling_type (3 = LAST) it is an embedding model the way
    Qwen3-Embedding GGUFs are."""
    m = ModelWriter(path, "qwen3", f"synthetic-qwen3-{n_layer}L", qtype, seed, chat_template)
    common_keys(m, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    if pooling_type is not None:
        m.key("pooling_type", pooling_type)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.attn_q_norm.weight", head_dim)
        m.norm(f"blk.{i}.attn_k_norm.weight", head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        m.weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    return m.finish()


def write_minimal(path, arch: str = "llama", n_layer: int = 1, n_embd: int = 32, name: str | None = None,
                  seed: int = 0, rows: int = 4) -> Path:
    """A tiny GGUF that read_model_info accepts (header, a few keys, two small tensors) but that is not a
    complete model: for store and discovery tests that never load weights. `seed` changes the bytes; `rows`
    makes token_embd (and the file) bigger: rows * n_embd * 4 bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(path), arch)
    if name:
        w.add_name(name)
    for k, v in (("block_count", n_layer), ("embedding_length", n_embd), ("attention.head_count", 4),
                 ("context_length", 512)):
        w.add_key_value(f"{arch}.{k}", v, GGUFValueType.UINT32)
    w.add_tensor("token_embd.weight", np.full((rows, n_embd), seed, dtype=np.float32))
    w.add_tensor("blk.0.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _with_template(writer, template: str, **shape):
    """A Family writer: `writer` with the family's template (and default shape), overridable per call."""
    def write(path, **overrides):
        return writer(path, **{"chat_template": template_text(template), **shape, **overrides})
    return write


_BASE = (
    Family("llama", "llama", _with_template(write_dense_llama, "meta-llama-Llama-3.1-8B-Instruct.jinja", n_embd=128,
                                            n_ff=256), "meta-llama-Llama-3.1-8B-Instruct.jinja", "full",
           "Llama 3.1 8B Instruct (dense, GQA)"),
    Family("qwen3", "qwen3", _with_template(write_dense_qwen3, "Qwen-Qwen3-0.6B.jinja", n_layer=3),
           "Qwen-Qwen3-0.6B.jinja", "full", "Qwen3 0.6B (q/k norms)"),
    Family("qwen3moe", "qwen3moe", _with_template(write_moe_qwen3, "Qwen-Qwen3-0.6B.jinja"), "Qwen-Qwen3-0.6B.jinja",
           "full", "Qwen3-30B-A3B (MoE; the Qwen3 template)"),
)
FAMILIES: dict[str, Family] = {f.name: f for f in _BASE + FAMILY_LIST}


def write_family(name: str, directory, **overrides) -> Path:
    """Write FAMILIES[name] as `directory/name.gguf` (with its template) and return the path."""
    fam = FAMILIES[name]
    return fam.write(Path(directory) / f"{name}.gguf", **overrides)


QWEN3_RERANK_TEMPLATE = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query. "
                         "Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
                         "<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n")


def write_qwen3_reranker(path, n_layer: int = 2, n_embd: int = 64, n_ctx: int = 2048, seed: int = 5,
                         head_scale: float = 3.0) -> Path:
    """A `qwen3` reranker the way Qwen3-Reranker GGUFs are converted: pooling type RANK (4), a classification head
    `cls.output.weight` with the labels "yes" and "no" (llama.cpp applies a softmax; the score is P(yes)), and a
    `tokenizer.chat_template.rerank` with {query} and {document}. Random weights; the head is scaled up
    (`head_scale`) so the documents' scores spread over (0, 1)."""
    m = ModelWriter(path, "qwen3", f"synthetic-qwen3-reranker-{n_layer}L", None, seed)
    n_head, n_head_kv, head_dim, n_ff = 4, 2, 32, 128
    common_keys(m, n_layer, n_ctx, n_embd, n_ff, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    m.key("pooling_type", 4)
    m.key_array("classifier.output_labels", ["yes", "no"], GGUFValueType.STRING)
    m.w.add_key_value("tokenizer.chat_template.rerank", QWEN3_RERANK_TEMPLATE, GGUFValueType.STRING)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.attn_q_norm.weight", head_dim)
        m.norm(f"blk.{i}.attn_k_norm.weight", head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        m.weight(f"blk.{i}.ffn_gate.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_up.weight", n_ff, n_embd)
        m.weight(f"blk.{i}.ffn_down.weight", n_embd, n_ff)
    head = m.rng.standard_normal((2, n_embd)) * head_scale / np.sqrt(n_embd)    # rows: "yes", "no"
    m.w.add_tensor("cls.output.weight", head.astype(np.float32))
    return m.finish()
