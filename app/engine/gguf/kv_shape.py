"""What llama.cpp's memory module keeps for a model, per layer and per sequence: the KV shape of a GGUF.

Mirrors llama.cpp 0.3.36's vendored sources (docs/architecture.md, "Memory layout"): `llama_model::create_memory`
(src/llama-model.cpp) picks the memory type per architecture, `llama_kv_cache` / `llama_kv_cache_iswa`
(src/llama-kv-cache*.cpp) size the attention caches, `llama_memory_recurrent` (src/llama-memory-recurrent.cpp) the
per-sequence state, and each architecture's `load_arch_hparams` (src/models/*.cpp) decides which layers slide,
what the window is, which layers are recurrent and which have no cache at all. Those per-architecture rules are the
tables below. An architecture whose rules are not mirrored here gets the plain-attention guess with `known=False`;
the planner's dry run then measures what llama.cpp really builds (app.engine.planner.dryrun) instead of guessing.

Per layer, `cache` is one of
  "full"   a cell per token of context (n_ctx_seq per sequence)
  "window" sliding-window / chunked attention: min(n_ctx_seq, window + n_ubatch) cells per sequence, padded to 256
           (with llama.cpp's `swa_full` off, as Strata runs it)
  "state"  recurrent state: one fixed-size row per sequence (r + s floats, f32 whatever the KV type)
  ""       no cache (a shared-KV layer, an MTP head, a layer without attention)
`k`/`v` are the K and V elements per cell (n_embd_k_gqa / n_embd_v_gqa); MLA keeps K only (v = 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# Architectures with no llama.cpp memory at all (create_memory returns nullptr): encoders and diffusion models.
NO_MEMORY = {"bert", "jina-bert-v2", "jina-bert-v3", "nomic-bert", "nomic-bert-moe", "neo-bert", "eurobert",
             "wavtokenizer-dec", "modern-bert", "gemma-embedding", "dream", "llada", "llada-moe", "rnd1",
             "t5encoder"}
# llm_arch_is_recurrent (src/llama-arch.cpp): every layer is a recurrent state layer
RECURRENT = {"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
RWKV = {"rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"}
# hybrids whose recurrent layers are the ones with 0 KV heads (their load_arch_hparams)
HYBRID_BY_KV_HEADS = {"jamba", "plamo2", "granitehybrid", "lfm2", "lfm2moe"}
# hybrids whose recurrent layers follow `full_attention_interval` (or an explicit `attention.recurrent_layers`)
HYBRID_BY_INTERVAL = {"qwen3next", "qwen35", "qwen35moe"}
# memory types this module does not mirror (indexer caches, compressed caches, shared contexts, KDA state, ...)
NOT_MIRRORED = {"minimax-m3", "glm-dsa", "deepseek32", "glm5-next", "hy_v4", "dots3note", "deepseek4", "dflash",
                "gemma4-assistant", "eagle3", "kimi-linear", "kimi-k3", "bailingmoe3", "qwen4exp", "minimax-01",
                "falcon-h1", "nanbeige", "nemotron_h", "nemotron_h_moe", "t5", "graniteswitch"}
# Sliding-window rules of each architecture's load_arch_hparams:
#   arch: (default pattern, dense_first, window used when the key is absent (0 = required/none), when SWA is on)
#   "always": SWA layers by the pattern; "if_window": only if attention.sliding_window > 0;
#   "chunked": llama4's chunked attention (window 8192 whatever the key says, off only if the key says 0);
#   "array": the per-layer bool array attention.sliding_window_pattern is required.
SWA_RULES = {
    "gemma2": (2, False, 4096, "always"), "gemma3": (6, False, 0, "if_window"), "gemma3n": (5, False, 0, "always"),
    "gemma4": (0, False, 0, "array"), "cohere2": (4, False, 0, "always"), "cohere2moe": (4, True, 0, "always"),
    "gpt-oss": (2, False, 0, "always"), "llama4": (4, False, 8192, "chunked"), "olmo2": (4, False, 0, "if_window"),
    "exaone-moe": (4, False, 128, "always"), "plamo3": (8, False, 0, "if_window"), "afmoe": (4, False, 0, "if_window"),
    "smallthinker": (4, True, 0, "if_window"), "mellum": (4, False, 0, "if_window"),
    "laguna": (4, True, 0, "if_window"), "muse-glimmer": (4, False, 0, "always"), "mimo2": (0, False, 0, "array"),
    "step35": (0, False, 0, "array"), "maple": (0, False, 0, "array"), "spark2_5": (0, False, 0, "array"),
    "granite_swa": (0, False, 0, "array"),
}
# window forced by the architecture when SWA is on (llama4's chunk, smallthinker's 4096)
SWA_FORCED_WINDOW = {"llama4": 8192, "smallthinker": 4096}


@dataclass(frozen=True)
class KVShape:
    attention: str                      # "full" | "sliding" | "chunked" | "mla" | "recurrent" | "hybrid" | "none"
    cache: tuple[str, ...]              # per layer: "full" | "window" | "state" | ""
    k: tuple[int, ...]                  # per layer: K elements per cell
    v: tuple[int, ...]                  # per layer: V elements per cell (0 with MLA)
    window: int = 0                     # sliding window / chunk size in tokens (0 = none)
    r: int = 0                          # recurrent: conv / token-shift state floats per sequence and state layer
    s: int = 0                          # recurrent: SSM / WKV state floats per sequence and state layer
    known: bool = True                  # False: llama.cpp's rules for this architecture are not mirrored here

    @property
    def n_window(self) -> int:
        return sum(c == "window" for c in self.cache)

    @property
    def n_state(self) -> int:
        return sum(c == "state" for c in self.cache)

    @property
    def v_max(self) -> int:
        """V width every layer gets when V is stored transposed (flash attention off): llama.cpp pads to the max."""
        return max(self.v, default=0)


def _swa_pattern(n_layer: int, n_pattern: int, dense_first: bool) -> list[bool]:
    # llama_hparams::set_swa_pattern
    if dense_first:
        return [n_pattern == 0 or il % n_pattern != 0 for il in range(n_layer)]
    return [n_pattern == 0 or il % n_pattern < n_pattern - 1 for il in range(n_layer)]


def _sliding(arch: str, hp: Callable, n_trunk: int) -> tuple[list[bool], int, str]:
    """(per trunk layer: slides?, window, "sliding"/"chunked"/"") by the architecture's rules."""
    rule = SWA_RULES.get(arch)
    none = ([False] * n_trunk, 0, "")
    if rule is None:
        return none
    n_pattern, dense_first, default_window, when = rule
    key = hp("attention.sliding_window")
    window = key if isinstance(key, int) else default_window
    if when == "if_window" and window <= 0:
        return none
    if when == "chunked" and key == 0:
        return none
    window = SWA_FORCED_WINDOW.get(arch, window)
    pattern = hp("attention.sliding_window_pattern")
    if isinstance(pattern, list):                       # load_swa_pattern: the array wins
        layers = [bool(x) for x in pattern[:n_trunk]] + [False] * max(0, n_trunk - len(pattern))
    elif when == "array":
        return none                                     # llama.cpp refuses such a file; nothing slides here
    else:
        layers = _swa_pattern(n_trunk, pattern if isinstance(pattern, int) else n_pattern, dense_first)
    return layers, window, "chunked" if when == "chunked" else "sliding"


def _recurrent_layers(arch: str, hp: Callable, n_trunk: int, n_head_kv: tuple[int, ...]) -> list[bool]:
    if arch in RECURRENT:
        return [True] * n_trunk
    if arch in HYBRID_BY_KV_HEADS:
        return [n_head_kv[il] == 0 for il in range(n_trunk)]
    if arch in HYBRID_BY_INTERVAL:
        explicit = hp("attention.recurrent_layers")
        if isinstance(explicit, list):
            return [bool(x) for x in explicit[:n_trunk]] + [False] * max(0, n_trunk - len(explicit))
        interval = hp("full_attention_interval")
        interval = interval if isinstance(interval, int) and interval > 0 else 4
        return [(il + 1) % interval != 0 for il in range(n_trunk)]
    return [False] * n_trunk


def _state_widths(arch: str, hp: Callable, n_embd: int) -> tuple[int, int]:
    """llama_hparams::n_embd_r / n_embd_s: floats of recurrent state per sequence and layer."""
    def i(key: str) -> int:
        v = hp(key)
        return v if isinstance(v, int) else 0

    if arch in RWKV:
        shift = hp("token_shift_count")
        return (shift if isinstance(shift, int) else 2) * n_embd, n_embd * i("wkv.head_size")
    l_cache = i("shortconv.l_cache")
    if l_cache:
        return n_embd * (l_cache - 1), i("ssm.state_size") * i("ssm.inner_size")
    d_conv, d_inner, d_state, n_group = i("ssm.conv_kernel"), i("ssm.inner_size"), i("ssm.state_size"), \
        i("ssm.group_count")
    return max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state), d_state * d_inner


def read_kv_shape(arch: str, hp: Callable, n_layer: int, n_embd: int, n_head: tuple[int, ...],
                  n_head_kv: tuple[int, ...]) -> KVShape:
    """The KV shape llama.cpp builds for this GGUF. `hp(suffix)` reads `{arch}.{suffix}` (None when absent);
    `n_head`/`n_head_kv` are per layer (block_count layers, MTP heads included)."""
    def i(key: str, default: int = 0) -> int:
        v = hp(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    if arch in NO_MEMORY:
        return KVShape("none", ("",) * n_layer, (0,) * n_layer, (0,) * n_layer)
    n_trunk = n_layer - min(i("nextn_predict_layers"), n_layer)   # MTP heads: no cache in the main context
    head0 = max(n_head, default=0)
    k_full = i("attention.key_length", n_embd // head0 if head0 else 0)
    v_full = i("attention.value_length", n_embd // head0 if head0 else 0)
    k_swa, v_swa = i("attention.key_length_swa", k_full), i("attention.value_length_swa", v_full)
    mla = arch in ("deepseek2", "bailingmoe3") and i("attention.key_length_mla") and i("attention.value_length_mla")

    slides, window, swa_kind = _sliding(arch, hp, n_trunk)
    if arch == "lfm2" and i("attention.sliding_window") > 0:
        slides, window, swa_kind = [n_head_kv[il] > 0 for il in range(n_trunk)], i("attention.sliding_window"), \
            "sliding"
    recurrent = _recurrent_layers(arch, hp, n_trunk, n_head_kv)
    r, s = _state_widths(arch, hp, n_embd) if any(recurrent) else (0, 0)

    kv_from_start = n_layer                                   # llama_hparams::has_kv (shared-KV layers)
    if arch == "gemma3n":
        kv_from_start = 20
    elif arch == "gemma4":
        kv_from_start = n_layer - i("attention.shared_kv_layers")

    cache: list[str] = []
    k: list[int] = []
    v: list[int] = []
    for il in range(n_layer):
        if il >= n_trunk or il >= kv_from_start or recurrent[il]:
            cache.append("" if il >= n_trunk or il >= kv_from_start else "state")
            k.append(0)
            v.append(0)
        else:
            sw = slides[il]
            cache.append("window" if sw else "full")
            k.append((k_swa if sw else k_full) * n_head_kv[il])
            v.append(0 if mla else (v_swa if sw else v_full) * n_head_kv[il])

    if not any(c for c in cache):
        attention = "none"
    elif any(recurrent) and not all(recurrent):
        attention = "hybrid"
    elif any(recurrent):
        attention = "recurrent"
    elif mla:
        attention = "mla"
    elif swa_kind and any(slides):
        attention = swa_kind
    else:
        attention = "full"
    return KVShape(attention, tuple(cache), tuple(k), tuple(v), window if any(slides) else 0, r, s,
                   known=arch not in NOT_MIRRORED)


def _n(count: int, what: str) -> str:
    return f"{count} {what}" + ("" if count == 1 else "s")


def describe(shape: KVShape, n_layer: int) -> str:
    """One line for `strata show`: the attention kind and what it means for memory."""
    a = shape.attention
    n_full = sum(c == "full" for c in shape.cache)
    rest = f"; the other {_n(n_full, 'layer')} {'keeps' if n_full == 1 else 'keep'} the whole context" if n_full else ""
    state = (f"{shape.n_state} of {n_layer} layers keep a fixed recurrent state per sequence "
             f"({(shape.r + shape.s) * 4 / 1024:.0f} KiB each, whatever the context length)")
    if a == "sliding":
        return (f"sliding window {shape.window} on {shape.n_window} of {n_layer} layers: KV for those layers is "
                f"sized by the window ({shape.window} + one batch per sequence), not the context{rest}")
    if a == "chunked":
        return (f"chunked attention ({shape.window}-token chunks) on {shape.n_window} of {n_layer} layers: KV for "
                f"those layers is sized by the chunk ({shape.window} + one batch per sequence){rest}")
    if a == "mla":
        return (f"multi-head latent attention: one compressed K row of {max(shape.k)} values per token and layer "
                f"(no V cache), on all {n_full} layers")
    if a == "recurrent":
        return f"recurrent: {state}; no KV cache"
    if a == "hybrid":
        kv = f"{_n(n_full + shape.n_window, 'attention layer')} keep a KV cache"
        if shape.n_window:
            kv += f" ({shape.n_window} with a sliding window of {shape.window})"
        return f"hybrid: {state}; {kv}"
    if a == "none":
        return "no KV cache (an encoder or non-causal model)"
    heads = "per-layer KV head counts, " if len(set(shape.k)) > 1 else ""
    guess = "" if shape.known else " (llama.cpp's cache for this architecture is measured when planning)"
    return f"full attention: {heads}KV for every token of context on all {n_full} layers{guess}"
