"""ModelInfo objects built from published model shapes, without a file (for planner tests).

Tensor bytes come from ggml's block sizes (gguf.GGML_QUANT_SIZES) and the tensor types llama.cpp's Q4_K_M recipe
picks (src/llama-quant.cpp): Q4_K for most weights, Q6_K for attn_v and ffn_down(_exps) in the "more bits" layers
and for output.weight, F32 for norms and the MoE router.
"""
from __future__ import annotations

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from app.engine.gguf.model_info import LayerWeights, ModelInfo, TensorInfo, classify_tensor

GiB = 1024 ** 3


def tensor_bytes(ggml_type: str, shape: tuple[int, ...]) -> int:
    blck, size = GGML_QUANT_SIZES[GGMLQuantizationType[ggml_type]]
    n = 1
    for x in shape:
        n *= x
    assert shape[0] % blck == 0, (ggml_type, shape)
    return n // blck * size


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def build_info(*, arch: str, name: str, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int,
               n_ff: int, n_vocab: int, n_expert: int = 0, n_expert_used: int = 0, expert_ff: int = 0,
               wtype: str = "Q4_K", more_bits_type: str = "Q6_K", out_type: str = "Q6_K", embd_type: str = "Q4_K",
               tied: bool = False, qk_norm: bool = False, context_length: int = 32768,
               sliding_window: int = 0, swa_layers: tuple[bool, ...] | None = None) -> ModelInfo:
    specs: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (n_embd, n_vocab), embd_type)]
    if not tied:
        specs.append(("output.weight", (n_embd, n_vocab), out_type))
    specs.append(("output_norm.weight", (n_embd,), "F32"))
    q, kv = n_head * head_dim, n_head_kv * head_dim
    for i in range(n_layer):
        more = more_bits_type if use_more_bits(i, n_layer) else wtype
        b = f"blk.{i}."
        specs += [(b + "attn_norm.weight", (n_embd,), "F32"),
                  (b + "attn_q.weight", (n_embd, q), wtype),
                  (b + "attn_k.weight", (n_embd, kv), wtype),
                  (b + "attn_v.weight", (n_embd, kv), more),
                  (b + "attn_output.weight", (q, n_embd), wtype),
                  (b + "ffn_norm.weight", (n_embd,), "F32")]
        if qk_norm:
            specs += [(b + "attn_q_norm.weight", (head_dim,), "F32"), (b + "attn_k_norm.weight", (head_dim,), "F32")]
        if n_expert:
            specs += [(b + "ffn_gate_inp.weight", (n_embd, n_expert), "F32"),
                      (b + "ffn_gate_exps.weight", (n_embd, expert_ff, n_expert), wtype),
                      (b + "ffn_up_exps.weight", (n_embd, expert_ff, n_expert), wtype),
                      (b + "ffn_down_exps.weight", (expert_ff, n_embd, n_expert), more)]
        else:
            specs += [(b + "ffn_gate.weight", (n_embd, n_ff), wtype),
                      (b + "ffn_up.weight", (n_embd, n_ff), wtype),
                      (b + "ffn_down.weight", (n_ff, n_embd), more)]
    tensors = []
    off = 0
    for nm, shape, t in specs:
        nb = tensor_bytes(t, shape)
        layer, cls = classify_tensor(nm)
        tensors.append(TensorInfo(nm, shape, t, nb, off, layer, cls))
        off += (nb + 31) // 32 * 32
    layers = []
    for i in range(n_layer):
        by: dict[str, int] = {c: 0 for c in ("attention", "ffn", "experts", "norm", "other")}
        for t in tensors:
            if t.layer == i:
                by[t.weight_class] += t.n_bytes
        layers.append(LayerWeights(i, by))
    tb = {t.name: t.n_bytes for t in tensors}
    return ModelInfo(
        path=f"/nonexistent/{name}.gguf", architecture=arch, name=name, file_size=off, data_offset=0,
        n_params=0, quantization="Q4_K_M", context_length=context_length, n_layer=n_layer, n_embd=n_embd,
        n_head=n_head, n_head_kv=(n_head_kv,) * n_layer, head_dim_k=head_dim, head_dim_v=head_dim, n_vocab=n_vocab,
        sliding_window=sliding_window, swa_layers=swa_layers or (False,) * n_layer, n_expert=n_expert,
        n_expert_used=n_expert_used, chat_template=None, tokenizer_model="gpt2", pooling_type=None,
        is_embedding=False, tensors=tuple(tensors), layers=tuple(layers), token_embd_bytes=tb["token_embd.weight"],
        output_bytes=tb.get("output.weight", 0), other_bytes=tb["output_norm.weight"])


def qwen3_30b_a3b() -> ModelInfo:
    """Qwen3-30B-A3B (qwen3moe), Q4_K_M: 48 layers, n_embd 2048, 32 heads / 4 KV heads of 128, 128 experts
    (8 used) with expert FFN 768, vocab 151936. The published Q4_K_M file is 18.6 GB."""
    return build_info(arch="qwen3moe", name="Qwen3-30B-A3B-Q4_K_M", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4,
                      head_dim=128, n_ff=6144, n_vocab=151936, n_expert=128, n_expert_used=8, expert_ff=768,
                      qk_norm=True, context_length=40960)


def dense_8b() -> ModelInfo:
    """Llama-3.1-8B shape, Q4_K_M: 32 layers, n_embd 4096, 32 heads / 8 KV heads of 128, n_ff 14336,
    vocab 128256 (the published Q4_K_M file is 4.9 GB)."""
    return build_info(arch="llama", name="Llama-3.1-8B-Q4_K_M", n_layer=32, n_embd=4096, n_head=32, n_head_kv=8,
                      head_dim=128, n_ff=14336, n_vocab=128256, context_length=131072)


def huge_dense() -> ModelInfo:
    """A 70B-class dense shape (Llama-3.1-70B, Q4_K_M ~40 GB): too big for a small box."""
    return build_info(arch="llama", name="Llama-3.1-70B-Q4_K_M", n_layer=80, n_embd=8192, n_head=64, n_head_kv=8,
                      head_dim=128, n_ff=28672, n_vocab=128256, context_length=131072)


def tiny(n_layer: int = 5, moe: bool = False, tied: bool = False) -> ModelInfo:
    """Small shapes for brute-force comparisons (few layers, F32/Q8_0 weights)."""
    return build_info(arch="qwen3moe" if moe else "llama", name=f"tiny-{'moe' if moe else 'dense'}-{n_layer}",
                      n_layer=n_layer, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_vocab=4096,
                      n_expert=8 if moe else 0, n_expert_used=2 if moe else 0, expert_ff=256, wtype="Q8_0",
                      more_bits_type="F16", out_type="Q8_0", embd_type="Q8_0", tied=tied, qk_norm=moe)
