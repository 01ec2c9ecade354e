"""Synthetic GGUFs of the architecture families whose memory or template behaviour differs, one writer each: tiny
widths, the tensors and keys llama.cpp 0.3.36 requires (its src/models/<arch>.cpp load_arch_hparams /
load_arch_tensors), SmolLM2's tokenizer, and the family's real chat template (tests/support/fixtures/templates/).
The registry is FAMILY_LIST; tests use gguf_factory.FAMILIES.

Every head size is a multiple of 32 so a q8_0 KV cache is allowed. Matrices are F16 by default (half the file of
F32: SmolLM2's 49152-token embedding dominates); the tensors llama.cpp's kernels read as F32 (norms, biases,
convolutions, SSM A/D, decay vectors) stay F32.
"""
from __future__ import annotations

from pathlib import Path

from gguf import GGUFValueType

from gguf_writer import (Family, ModelWriter, attention, common_keys, dense_ffn, embeddings, n_vocab_of_tokenizer,
                         template_text)

F32 = GGUFValueType.FLOAT32


def _writer(path, arch: str, template: str | None, qtype: str | None, seed: int, n_layer: int) -> ModelWriter:
    return ModelWriter(path, arch, f"synthetic-{arch}-{n_layer}L", qtype, seed,
                       chat_template=template_text(template) if template else "")


def _moe_experts(m: ModelWriter, i: int, n_embd: int, n_ff_exp: int, n_expert: int, bias: bool = False) -> None:
    m.weight(f"blk.{i}.ffn_gate_inp.weight", n_expert, n_embd, quantize=False)
    m.weight(f"blk.{i}.ffn_gate_exps.weight", n_expert, n_ff_exp, n_embd)
    m.weight(f"blk.{i}.ffn_up_exps.weight", n_expert, n_ff_exp, n_embd)
    m.weight(f"blk.{i}.ffn_down_exps.weight", n_expert, n_embd, n_ff_exp)
    if bias:
        m.small(f"blk.{i}.ffn_gate_inp.bias", n_expert)
        m.small(f"blk.{i}.ffn_gate_exps.bias", n_expert, n_ff_exp)
        m.small(f"blk.{i}.ffn_up_exps.bias", n_expert, n_ff_exp)
        m.small(f"blk.{i}.ffn_down_exps.bias", n_expert, n_embd)


def _shared_expert(m: ModelWriter, i: int, n_embd: int, n_ff_shexp: int) -> None:
    m.weight(f"blk.{i}.ffn_gate_shexp.weight", n_ff_shexp, n_embd)
    m.weight(f"blk.{i}.ffn_up_shexp.weight", n_ff_shexp, n_embd)
    m.weight(f"blk.{i}.ffn_down_shexp.weight", n_embd, n_ff_shexp)


# --- sliding window ----------------------------------------------------------------------------------------------

def write_gemma2(path, n_layer=4, n_embd=128, n_head=4, n_head_kv=2, head_dim=32, n_ff=256, window=4096,
                 qtype="F16", seed=10, template="google-gemma-2-2b-it.jinja") -> Path:
    """Gemma 2: sliding window (4096) on every other layer, soft-capped logits, tied output."""
    m = _writer(path, "gemma2", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 8192, n_embd, n_ff, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    m.key("attention.sliding_window", window)
    m.key("attn_logit_softcapping", 50.0, F32)
    m.key("final_logit_softcapping", 30.0, F32)
    embeddings(m, n_embd, tie_output=True)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.post_attention_norm.weight", n_embd)
        dense_ffn(m, i, n_embd, n_ff)
        m.norm(f"blk.{i}.post_ffw_norm.weight", n_embd)
    return m.finish()


def write_gemma3(path, n_layer=6, n_embd=128, n_head=4, n_head_kv=1, head_dim=64, n_ff=256, window=512,
                 qtype="F16", seed=11, template="google-gemma-3-it.jinja") -> Path:
    """Gemma 3 (270M/1B shape): sliding window 512 on 5 of every 6 layers, q/k norms, tied output."""
    m = _writer(path, "gemma3", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 32768, n_embd, n_ff, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    m.key("attention.sliding_window", window)
    m.key("rope.freq_base_swa", 10000.0, F32)
    embeddings(m, n_embd, tie_output=True)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.attn_q_norm.weight", head_dim)
        m.norm(f"blk.{i}.attn_k_norm.weight", head_dim)
        m.norm(f"blk.{i}.post_attention_norm.weight", n_embd)
        dense_ffn(m, i, n_embd, n_ff)
        m.norm(f"blk.{i}.post_ffw_norm.weight", n_embd)
    return m.finish()


def write_gpt_oss(path, n_layer=4, n_embd=128, n_head=4, n_head_kv=2, head_dim=32, n_expert=4, n_expert_used=2,
                  n_ff_exp=128, window=128, qtype="F16", seed=12, template="openai-gpt-oss-120b.jinja") -> Path:
    """gpt-oss: sliding window 128 on every other layer, attention sinks, biased MoE experts."""
    m = _writer(path, "gpt-oss", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 131072, n_embd, n_ff_exp, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    m.key("attention.sliding_window", window)
    m.key("expert_count", n_expert)
    m.key("expert_used_count", n_expert_used)
    m.key("expert_feed_forward_length", n_ff_exp)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.small(f"blk.{i}.attn_output.bias", n_embd)
        m.small(f"blk.{i}.attn_sinks.weight", n_head)
        m.norm(f"blk.{i}.post_attention_norm.weight", n_embd)
        _moe_experts(m, i, n_embd, n_ff_exp, n_expert, bias=True)
    return m.finish()


def write_cohere2(path, n_layer=4, n_embd=128, n_head=4, n_head_kv=2, n_ff=256, window=4096, qtype="F16",
                  seed=13, template="CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja") -> Path:
    """Command R7B (cohere2): sliding window 4096 on 3 of every 4 layers, layer norm, logit scale, tied output."""
    head_dim = n_embd // n_head
    m = _writer(path, "cohere2", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 8192, n_embd, n_ff, n_head, n_head_kv, head_dim)
    m.key("attention.sliding_window", window)
    m.key("attention.layer_norm_epsilon", 1e-5, F32)
    m.key("logit_scale", 0.25, F32)
    embeddings(m, n_embd, tie_output=True)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        dense_ffn(m, i, n_embd, n_ff, norm=False)
    return m.finish()


def write_llama4(path, n_layer=4, n_embd=128, n_head=4, n_head_kv=2, head_dim=32, n_ff=256, n_expert=4,
                 n_ff_exp=128, qtype="F16", seed=14,
                 template="meta-llama-Llama-4-Scout-17B-16E-Instruct.jinja") -> Path:
    """Llama 4: chunked attention (8192-token chunks) on 3 of every 4 layers; MoE with a shared expert on every
    other layer (interleave_moe_layer_step 2, as Maverick), dense FFN between."""
    m = _writer(path, "llama4", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 65536, n_embd, n_ff, n_head, n_head_kv, head_dim)
    m.key("expert_count", n_expert)
    m.key("expert_used_count", 1)
    m.key("expert_feed_forward_length", n_ff_exp)
    m.key("interleave_moe_layer_step", 2)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        attention(m, i, n_embd, n_head, n_head_kv, head_dim)
        m.norm(f"blk.{i}.ffn_norm.weight", n_embd)
        if (i + 1) % 2 == 0:
            _moe_experts(m, i, n_embd, n_ff_exp, n_expert)
            _shared_expert(m, i, n_embd, n_ff_exp)
        else:
            dense_ffn(m, i, n_embd, n_ff, norm=False)
    return m.finish()


# --- MLA and different K/V head sizes -----------------------------------------------------------------------------

def write_deepseek2(path, n_layer=3, n_embd=128, n_head=4, q_lora=32, kv_lora=64, rope=32, qk_nope=32, v_head=32,
                    n_ff=256, n_expert=4, n_expert_used=2, n_ff_exp=64, mla=True, qtype="F16", seed=15,
                    template="deepseek-ai-DeepSeek-V3.1.jinja") -> Path:
    """DeepSeek V2/V3 (deepseek2). mla=True: a current GGUF (key_length_mla set, attn_k_b/attn_v_b): llama.cpp
    caches one compressed K row of kv_lora + rope values per token and layer and no V. mla=False: an older GGUF
    (attn_kv_b): the cache holds full heads, K of qk_nope + rope and V of v_head values (different K and V head
    sizes). One leading dense layer, then MoE with a shared expert."""
    m = _writer(path, "deepseek2", template, qtype, seed, n_layer)
    k_head = qk_nope + rope
    m.key("block_count", n_layer)
    m.key("context_length", 163840)
    m.key("embedding_length", n_embd)
    m.key("feed_forward_length", n_ff)
    m.key("attention.head_count", n_head)
    m.key("attention.head_count_kv", 1 if mla else n_head)
    m.key("attention.key_length", kv_lora + rope if mla else k_head)
    m.key("attention.value_length", kv_lora if mla else v_head)
    if mla:
        m.key("attention.key_length_mla", k_head)
        m.key("attention.value_length_mla", v_head)
    m.key("attention.q_lora_rank", q_lora)
    m.key("attention.kv_lora_rank", kv_lora)
    m.key("rope.dimension_count", rope)
    m.key("rope.freq_base", 10000.0, F32)
    m.key("attention.layer_norm_rms_epsilon", 1e-6, F32)
    m.key("vocab_size", n_vocab_of_tokenizer())
    m.key("leading_dense_block_count", 1)
    m.key("expert_count", n_expert)
    m.key("expert_used_count", n_expert_used)
    m.key("expert_shared_count", 1)
    m.key("expert_feed_forward_length", n_ff_exp)
    m.key("expert_weights_scale", 1.0, F32)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.norm(b + "attn_norm.weight", n_embd)
        m.norm(b + "attn_q_a_norm.weight", q_lora)
        m.norm(b + "attn_kv_a_norm.weight", kv_lora)
        m.weight(b + "attn_q_a.weight", q_lora, n_embd)
        m.weight(b + "attn_q_b.weight", n_head * k_head, q_lora)
        m.weight(b + "attn_kv_a_mqa.weight", kv_lora + rope, n_embd)
        if mla:
            m.weight(b + "attn_k_b.weight", n_head, kv_lora, qk_nope)
            m.weight(b + "attn_v_b.weight", n_head, v_head, kv_lora)
        else:
            m.weight(b + "attn_kv_b.weight", n_head * (qk_nope + v_head), kv_lora)
        m.weight(b + "attn_output.weight", n_embd, n_head * v_head)
        if i == 0:
            dense_ffn(m, i, n_embd, n_ff)
        else:
            m.norm(b + "ffn_norm.weight", n_embd)
            _moe_experts(m, i, n_embd, n_ff_exp, n_expert)
            _shared_expert(m, i, n_embd, n_ff_exp)
    return m.finish()


# --- per-layer KV heads ---------------------------------------------------------------------------------------

def write_deci(path, n_embd=128, n_head=4, head_count_kv=(2, 1, 0, 4), n_ff=256, qtype="F16", seed=16,
               template="meta-llama-Llama-3.1-8B-Instruct.jinja") -> Path:
    """Nemotron-51B / Super-49B (deci): a KV-head count per layer (0 = a linear-attention layer with no cache rows).
    Nemotron's chat template is Llama 3.1's."""
    head_dim = n_embd // n_head
    n_layer = len(head_count_kv)
    m = _writer(path, "deci", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 131072, n_embd, n_ff, n_head, list(head_count_kv), head_dim)
    embeddings(m, n_embd, tie_output=False)
    for i, kv in enumerate(head_count_kv):
        if kv:
            attention(m, i, n_embd, n_head, kv, head_dim)
        else:
            m.norm(f"blk.{i}.attn_norm.weight", n_embd)
            m.weight(f"blk.{i}.attn_output.weight", n_embd, n_embd)
        dense_ffn(m, i, n_embd, n_ff)
    return m.finish()


# --- recurrent and hybrid state -----------------------------------------------------------------------------------

def _ssm_keys(m: ModelWriter, d_conv: int, d_inner: int, d_state: int, dt_rank: int, n_group: int = 0) -> None:
    m.key("ssm.conv_kernel", d_conv)
    m.key("ssm.inner_size", d_inner)
    m.key("ssm.state_size", d_state)
    m.key("ssm.time_step_rank", dt_rank)
    if n_group:
        m.key("ssm.group_count", n_group)


def write_mamba(path, n_layer=3, n_embd=128, d_state=64, d_conv=4, dt_rank=8, qtype="F16", seed=17) -> Path:
    """Mamba (1): every layer recurrent, a fixed conv + SSM state per sequence, no KV cache; no chat template
    (Mamba GGUFs ship none)."""
    d_inner = 2 * n_embd
    m = _writer(path, "mamba", None, qtype, seed, n_layer)
    m.key("block_count", n_layer)
    m.key("context_length", 1048576)
    m.key("embedding_length", n_embd)
    m.key("attention.layer_norm_rms_epsilon", 1e-5, F32)
    m.key("vocab_size", n_vocab_of_tokenizer())
    _ssm_keys(m, d_conv, d_inner, d_state, dt_rank)
    embeddings(m, n_embd, tie_output=True)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.norm(b + "attn_norm.weight", n_embd)
        m.weight(b + "ssm_in.weight", 2 * d_inner, n_embd)
        m.small(b + "ssm_conv1d.weight", d_inner, d_conv)
        m.small(b + "ssm_conv1d.bias", d_inner)
        m.weight(b + "ssm_x.weight", dt_rank + 2 * d_state, d_inner)
        m.weight(b + "ssm_dt.weight", d_inner, dt_rank)
        m.small(b + "ssm_dt.bias", d_inner)
        m.small(b + "ssm_a", d_inner, d_state, value=-1.0)
        m.small(b + "ssm_d", d_inner, value=1.0)
        m.weight(b + "ssm_out.weight", n_embd, d_inner)
    return m.finish()


def write_rwkv7(path, n_layer=4, n_embd=128, head_size=64, n_ff=256, lora=32, qtype="F16", seed=18,
                template="llama-cpp-rwkv-world.jinja") -> Path:
    """RWKV-7: every layer recurrent (token shift + WKV state per sequence), no KV cache; llama.cpp's own
    RWKV-World template."""
    m = _writer(path, "rwkv7", template, qtype, seed, n_layer)
    m.key("block_count", n_layer)
    m.key("context_length", 1048576)
    m.key("embedding_length", n_embd)
    m.key("feed_forward_length", n_ff)
    m.key("attention.layer_norm_epsilon", 1e-5, F32)
    m.key("vocab_size", n_vocab_of_tokenizer())
    m.key("wkv.head_size", head_size)
    for k in ("decay", "iclr", "value_residual_mix", "gate"):
        m.key(f"attention.{k}_lora_rank", lora)
    m.key("token_shift_count", 2)
    m.weight("token_embd.weight", n_vocab_of_tokenizer(), n_embd)
    m.norm("token_embd_norm.weight", n_embd)
    m.small("token_embd_norm.bias", n_embd)
    m.norm("output_norm.weight", n_embd)
    m.small("output_norm.bias", n_embd)
    m.weight("output.weight", n_vocab_of_tokenizer(), n_embd)
    for i in range(n_layer):
        b = f"blk.{i}."
        for n in ("attn_norm", "attn_norm_2", "time_mix_ln"):
            m.norm(b + n + ".weight", n_embd)
            m.small(b + n + ".bias", n_embd)
        for x in ("w", "a", "v", "g"):
            if x != "g":
                m.small(b + f"time_mix_{x}0.weight", n_embd)
            m.weight(b + f"time_mix_{x}1.weight", lora, n_embd)
            m.weight(b + f"time_mix_{x}2.weight", n_embd, lora)
        m.small(b + "time_mix_lerp_fused.weight", 6, 1, 1, n_embd)
        for n in ("k_k", "k_a", "r_k"):
            m.small(b + f"time_mix_{n}.weight", n_embd)
        for n in ("key", "value", "receptance", "output"):
            m.weight(b + f"time_mix_{n}.weight", n_embd, n_embd)
        m.small(b + "channel_mix_lerp_k.weight", 1, 1, n_embd)
        m.weight(b + "channel_mix_key.weight", n_ff, n_embd)
        m.weight(b + "channel_mix_value.weight", n_embd, n_ff)
    return m.finish()


def write_qwen3next(path, n_layer=4, n_embd=128, n_head=4, n_head_kv=2, head_dim=64, d_state=64, n_v_heads=4,
                    n_k_heads=2, n_expert=4, n_expert_used=2, n_ff_exp=64, qtype="F16", seed=19,
                    template="Qwen-Qwen3-0.6B.jinja") -> Path:
    """Qwen3-Next: hybrid, gated delta-net (recurrent) layers with full attention every 4th layer; MoE with a gated
    shared expert. Qwen3-Next's template is the Qwen3 one."""
    d_inner, key_dim = d_state * n_v_heads, d_state * n_k_heads
    m = _writer(path, "qwen3next", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 262144, n_embd, n_ff_exp, n_head, n_head_kv, head_dim)
    m.key("attention.key_length", head_dim)
    m.key("attention.value_length", head_dim)
    m.key("expert_count", n_expert)
    m.key("expert_used_count", n_expert_used)
    m.key("expert_feed_forward_length", n_ff_exp)
    m.key("expert_shared_feed_forward_length", n_ff_exp)
    m.key("full_attention_interval", 4)
    _ssm_keys(m, 4, d_inner, d_state, n_v_heads, n_k_heads)
    embeddings(m, n_embd, tie_output=False)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.norm(b + "attn_norm.weight", n_embd)
        m.norm(b + "post_attention_norm.weight", n_embd)
        if (i + 1) % 4 == 0:
            m.weight(b + "attn_q.weight", 2 * n_head * head_dim, n_embd)
            m.weight(b + "attn_k.weight", n_head_kv * head_dim, n_embd)
            m.weight(b + "attn_v.weight", n_head_kv * head_dim, n_embd)
            m.weight(b + "attn_output.weight", n_embd, n_head * head_dim)
            m.norm(b + "attn_q_norm.weight", head_dim)
            m.norm(b + "attn_k_norm.weight", head_dim)
        else:
            m.weight(b + "attn_qkv.weight", 2 * key_dim + d_inner, n_embd)
            m.weight(b + "attn_gate.weight", d_inner, n_embd)
            m.small(b + "ssm_conv1d.weight", 2 * key_dim + d_inner, 4)
            m.small(b + "ssm_dt.bias", n_v_heads)
            m.small(b + "ssm_a", n_v_heads, value=-1.0)
            m.weight(b + "ssm_ba.weight", 2 * n_v_heads, n_embd)
            m.norm(b + "ssm_norm.weight", d_state)
            m.weight(b + "ssm_out.weight", n_embd, d_inner)
        _moe_experts(m, i, n_embd, n_ff_exp, n_expert)
        m.small(b + "ffn_gate_inp_shexp.weight", n_embd)
        _shared_expert(m, i, n_embd, n_ff_exp)
    return m.finish()


def write_lfm2(path, n_embd=128, n_head=4, head_count_kv=(0, 0, 2, 0), n_ff=256, l_cache=3, qtype="F16", seed=20,
               template="LFM2.5-Instruct.jinja") -> Path:
    """LFM2: hybrid, short-convolution layers (0 KV heads: a conv state per sequence) and attention layers."""
    head_dim = n_embd // n_head
    n_layer = len(head_count_kv)
    m = _writer(path, "lfm2", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 128000, n_embd, n_ff, n_head, list(head_count_kv), head_dim)
    m.key("shortconv.l_cache", l_cache)
    m.weight("token_embd.weight", n_vocab_of_tokenizer(), n_embd)
    m.norm("token_embd_norm.weight", n_embd)            # LFM2's output norm (llama.cpp: OUTPUT_NORM_LFM2)
    for i, kv in enumerate(head_count_kv):
        b = f"blk.{i}."
        dense_ffn(m, i, n_embd, n_ff)
        m.norm(b + "attn_norm.weight", n_embd)
        if kv:
            m.norm(b + "attn_q_norm.weight", head_dim)
            m.norm(b + "attn_k_norm.weight", head_dim)
            m.weight(b + "attn_q.weight", n_embd, n_embd)
            m.weight(b + "attn_k.weight", kv * head_dim, n_embd)
            m.weight(b + "attn_v.weight", kv * head_dim, n_embd)
            m.weight(b + "attn_output.weight", n_embd, n_embd)
        else:
            m.small(b + "shortconv.conv.weight", n_embd, l_cache)
            m.weight(b + "shortconv.in_proj.weight", 3 * n_embd, n_embd)
            m.weight(b + "shortconv.out_proj.weight", n_embd, n_embd)
    return m.finish()


def write_granitehybrid(path, n_embd=128, n_head=4, head_count_kv=(0, 0, 2, 0), n_ff=256, d_state=64,
                        n_ssm_head=4, qtype="F16", seed=21, template="ibm-granite-granite-4.0.jinja") -> Path:
    """Granite 4.0-H (granitehybrid): Mamba-2 layers (0 KV heads) and attention layers, dense FFN (H-Micro)."""
    head_dim, d_inner, n_layer = n_embd // n_head, 2 * n_embd, len(head_count_kv)
    conv_dim = d_inner + 2 * d_state
    m = _writer(path, "granitehybrid", template, qtype, seed, n_layer)
    common_keys(m, n_layer, 131072, n_embd, n_ff, n_head, list(head_count_kv), head_dim)
    _ssm_keys(m, 4, d_inner, d_state, n_ssm_head, 1)
    embeddings(m, n_embd, tie_output=True)
    for i, kv in enumerate(head_count_kv):
        b = f"blk.{i}."
        m.norm(b + "attn_norm.weight", n_embd)
        if kv:
            attention(m, i, n_embd, n_head, kv, head_dim, norm=False)
        else:
            m.weight(b + "ssm_in.weight", 2 * d_inner + 2 * d_state + n_ssm_head, n_embd)
            m.small(b + "ssm_conv1d.weight", conv_dim, 4)
            m.small(b + "ssm_conv1d.bias", conv_dim)
            m.small(b + "ssm_dt.bias", n_ssm_head)
            m.small(b + "ssm_a", n_ssm_head, 1, value=-1.0)
            m.small(b + "ssm_d", n_ssm_head, 1, value=1.0)
            m.norm(b + "ssm_norm.weight", 1, d_inner)
            m.weight(b + "ssm_out.weight", n_embd, d_inner)
        dense_ffn(m, i, n_embd, n_ff)
    return m.finish()


FAMILY_LIST = (
    Family("gemma2", "gemma2", write_gemma2, "google-gemma-2-2b-it.jinja", "sliding", "Gemma 2 2B IT"),
    Family("gemma3", "gemma3", write_gemma3, "google-gemma-3-it.jinja", "sliding", "Gemma 3 270M/1B IT"),
    Family("gpt-oss", "gpt-oss", write_gpt_oss, "openai-gpt-oss-120b.jinja", "sliding",
           "gpt-oss 20B/120B (attention sinks, MoE)"),
    Family("cohere2", "cohere2", write_cohere2, "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "sliding",
           "Command R7B (its tool_use template)"),
    Family("llama4", "llama4", write_llama4, "meta-llama-Llama-4-Scout-17B-16E-Instruct.jinja", "chunked",
           "Llama 4 Scout/Maverick (chunked attention, MoE + shared expert)"),
    Family("deepseek2", "deepseek2", write_deepseek2, "deepseek-ai-DeepSeek-V3.1.jinja", "mla",
           "DeepSeek V3 / V2-Lite (MLA, MoE + shared expert)"),
    Family("deepseek2-mha", "deepseek2", lambda p, **kw: write_deepseek2(p, **{"mla": False, **kw}),
           "deepseek-ai-DeepSeek-V3.1.jinja", "full", "DeepSeek V2 in an older GGUF: K 64 / V 32 per head"),
    Family("deci", "deci", write_deci, "meta-llama-Llama-3.1-8B-Instruct.jinja", "full",
           "Llama-3.1-Nemotron-51B (per-layer KV heads)"),
    Family("mamba", "mamba", write_mamba, None, "recurrent", "Mamba 130M-2.8B (no template)"),
    Family("rwkv7", "rwkv7", write_rwkv7, "llama-cpp-rwkv-world.jinja", "recurrent", "RWKV-7 World"),
    Family("qwen3next", "qwen3next", write_qwen3next, "Qwen-Qwen3-0.6B.jinja", "hybrid", "Qwen3-Next 80B-A3B"),
    Family("lfm2", "lfm2", write_lfm2, "LFM2.5-Instruct.jinja", "hybrid", "LFM2 / LFM2.5 1.2B"),
    Family("granitehybrid", "granitehybrid", write_granitehybrid, "ibm-granite-granite-4.0.jinja", "hybrid",
           "Granite 4.0-H Micro"),
)
