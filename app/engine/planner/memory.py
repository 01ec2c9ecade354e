"""The memory model: bytes that a placement costs on each device, from the GGUF tensor table and hyper-parameters.

Weights are exact (the tensor table), split per block into the three parts the planner moves independently,
using the SAME regular expressions the Layout hands to llama.cpp as `tensor_buft_overrides`:
  - experts  E: `blk.N.ffn_*_exps`     (MoE expert tensors; first to go to the CPU)
  - ffn rest F: `blk.N.ffn_*` not E    (dense FFN, shared experts, router, ffn_norm; CPU in a "partial" layer)
  - attention A: every other blk.N tensor (attention, its norms; stays on the layer's device)
KV cache bytes mirror llama.cpp (src/llama-context.cpp, llama-kv-cache*.cpp, llama-memory-recurrent.cpp) through the
model's KV shape (app.engine.gguf.kv_shape): n_ctx padded to 256, one stream of n_ctx_seq cells per sequence,
sliding-window layers sized PAD(min(n_ctx_seq, n_swa + n_ubatch), 256) (swa_full off), MLA K-only rows, recurrent
layers one f32 state row per sequence. What the shape cannot know is measured by the dry run (measured_kv).
The compute buffer is measured by a dry run (app.engine.planner.dryrun); `estimate_compute` is only the fallback.
Weight repacking by the CPU backend (app.engine.planner.repack) needs each part's file extent and what of it repacks on this
CPU: `MemoryModel.spans`; llama.cpp's mapped span is computed from it once the placement is known.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from app.engine.layout.context_rules import SWA_FULL, embed_chunk_tokens
from app.engine.planner import repack
from app.engine.gguf.kv_shape import KVShape
from app.engine.gguf.model_info import ModelInfo

MiB = 1024 * 1024

# regex fragments shared with the Layout's overrides (app.engine.planner.search); matched with re.search like std::regex_search
EXPERTS_RE = r"ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_RE = r"ffn_"
_EXPERTS = re.compile(r"^blk\.(\d+)\." + EXPERTS_RE)
_FFN = re.compile(r"^blk\.(\d+)\." + FFN_RE)
_BLK = re.compile(r"^blk\.(\d+)\.")

# ggml block size and bytes per block for KV cache types
KV_BLOCKS = {"f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18), "q4_1": (32, 20),
            "q5_0": (32, 22), "q5_1": (32, 24), "iq4_nl": (32, 18)}

GPU_ALIGN = 256      # CUDA/Vulkan/Metal buffer alignments are <= 256


def pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def row_size(kv_type: str, n: int) -> int:
    try:
        blck, size = KV_BLOCKS[kv_type.lower()]
    except KeyError:
        raise ValueError(f"kv_type {kv_type!r} is not a KV cache type (use f16, q8_0 or q4_0)") from None
    return (n + blck - 1) // blck * size


@dataclass(frozen=True)
class BlockParts:
    """Weight bytes of one block by part (A, F, E), each also split by weight class for reporting."""
    attn: dict[str, int]
    ffn: dict[str, int]
    experts: dict[str, int]
    n_tensors: tuple[int, int, int]   # tensor counts in A, F, E (for alignment padding)

    def bytes(self, part: str) -> int:
        return sum(getattr(self, part).values())


def _add(d: dict[str, int], k: str, n: int) -> None:
    d[k] = d.get(k, 0) + n


def block_parts(info: ModelInfo) -> tuple[BlockParts, ...]:
    """Per block: bytes by part and class. From the tensor table when present, else from LayerWeights."""
    n = info.n_layer
    attn: list[dict[str, int]] = [{} for _ in range(n)]
    ffn: list[dict[str, int]] = [{} for _ in range(n)]
    exp: list[dict[str, int]] = [{} for _ in range(n)]
    counts = [[0, 0, 0] for _ in range(n)]
    if info.tensors:
        for t in info.tensors:
            m = _BLK.match(t.name)
            if not m:
                continue
            il = int(m.group(1))
            if il >= n:
                continue
            if _EXPERTS.match(t.name):
                _add(exp[il], t.weight_class, t.n_bytes)
                counts[il][2] += 1
            elif _FFN.match(t.name):
                _add(ffn[il], t.weight_class, t.n_bytes)
                counts[il][1] += 1
            else:
                _add(attn[il], t.weight_class, t.n_bytes)
                counts[il][0] += 1
    else:
        for lw in info.layers:
            b = lw.bytes_by_class
            _add(attn[lw.index], "attention", b.get("attention", 0))
            _add(attn[lw.index], "norm", b.get("norm", 0))
            _add(ffn[lw.index], "ffn", b.get("ffn", 0))
            _add(ffn[lw.index], "other", b.get("other", 0))
            _add(exp[lw.index], "experts", b.get("experts", 0))
            counts[lw.index] = [4, 3, 3]
    return tuple(BlockParts(attn[i], ffn[i], exp[i], (counts[i][0], counts[i][1], counts[i][2])) for i in range(n))


@dataclass(frozen=True)
class ContextShape:
    """The context sizes llama.cpp will actually use for these options (after its padding/clamping)."""
    n_ctx: int          # total cells = n_ctx_seq * n_seq
    n_ctx_seq: int
    n_seq: int
    n_batch: int
    n_ubatch: int


def context_shape(num_ctx: int, num_parallel: int, num_batch: int = 512, num_ubatch: int = 512,
                  kv_unified: bool = False) -> ContextShape:
    n_req = num_ctx * num_parallel
    n_batch = min(n_req, num_batch)
    n_ubatch = min(n_batch, num_ubatch)
    n_ctx = pad(n_req, 256)
    if kv_unified:
        n_seq_cells = n_ctx
    else:
        n_seq_cells = pad(n_ctx // num_parallel, 256)
        n_ctx = n_seq_cells * num_parallel
    return ContextShape(n_ctx, n_seq_cells, num_parallel, n_batch, n_ubatch)


def kv_shape_of(info: ModelInfo) -> KVShape:
    """The model's KV shape; for a ModelInfo built without one (tests' synthetic shapes), plain or sliding attention
    from its head counts, head sizes and sliding-window fields."""
    if info.kv is not None:
        return info.kv
    n = info.n_layer
    heads = [info.n_head_kv[il] if il < len(info.n_head_kv) else info.n_head_kv[-1] for il in range(n)]
    swa = [info.sliding_window > 0 and il < len(info.swa_layers) and info.swa_layers[il] for il in range(n)]
    return KVShape("sliding" if any(swa) else "full", tuple("window" if w else "full" for w in swa),
                   tuple(info.head_dim_k * h for h in heads), tuple(info.head_dim_v * h for h in heads),
                   info.sliding_window if any(swa) else 0)


def kv_bytes_per_layer(info: ModelInfo, num_ctx: int, num_parallel: int, kv_type: str = "f16",
                       num_batch: int = 512, num_ubatch: int = 512, type_v: str | None = None,
                       flash_attn: bool | None = None, swa_full: bool = SWA_FULL) -> tuple[int, ...]:
    """Cache bytes of each block for `num_ctx` tokens per sequence and `num_parallel` sequences: K and V rows per
    cell (llama_kv_cache), or the recurrent state rows (llama_memory_recurrent, always f32, one per sequence).
    `flash_attn=False` stores V transposed, which llama.cpp pads to the widest layer's V ([TAG_V_CACHE_VARIABLE])."""
    cs = context_shape(num_ctx, num_parallel, num_batch, num_ubatch)
    shape = kv_shape_of(info)
    tv = type_v or kv_type
    full_cells = cs.n_ctx_seq * cs.n_seq
    window_cells = full_cells if swa_full else pad(min(cs.n_ctx_seq, shape.window + cs.n_ubatch), 256) * cs.n_seq
    out = []
    for il, cache in enumerate(shape.cache):
        if cache == "state":
            out.append((shape.r + shape.s) * 4 * cs.n_seq)
        elif cache in ("full", "window"):
            cells = full_cells if cache == "full" else window_cells
            v = shape.v[il] if (flash_attn is not False or shape.attention == "mla") else shape.v_max
            out.append(row_size(kv_type, shape.k[il]) * cells + row_size(tv, v) * cells)
        else:
            out.append(0)
    return tuple(out)


def checkpoint_bytes(info: ModelInfo, num_ctx: int, num_parallel: int, kv_type: str = "f16", num_batch: int = 512,
                     num_ubatch: int = 512, count: int = 32, mib_per_slot: int = 0) -> int:
    """Host RAM the runner's context checkpoints may take (app/engine/runner/cache/stores.Checkpoints): per slot up
    to `count` copies of one sequence's partial memory (what llama_state_seq_get_data_ext with PARTIAL_ONLY
    copies: the recurrent state rows, or else the sliding-window cells), at most `mib_per_slot` MiB a slot
    (0 = the count alone). 0 for a model whose cache keeps every cell (it needs no checkpoints)."""
    if count <= 0:
        return 0
    shape = kv_shape_of(info)
    one_seq = kv_bytes_per_layer(info, num_ctx, 1, kv_type, num_batch, num_ubatch)
    partial = sum(b for b, c in zip(one_seq, shape.cache) if c == "state") or \
        sum(b for b, c in zip(one_seq, shape.cache) if c == "window")
    per_slot = count * partial
    if mib_per_slot > 0:
        per_slot = min(per_slot, mib_per_slot * MiB)
    return per_slot * num_parallel


def fit_measured_kv(kv: tuple[int, ...], measured: tuple[int, int] | None) -> tuple[int, ...]:
    """Per-block cache bytes made to agree with what a dry run measured: `measured` = (bytes, number of log lines)
    from llama.cpp's cache size lines (app.ggml.alloc_report.cache_size). Within the lines' rounding (0.005 MiB
    each) the prediction stands; otherwise (a KV shape this planner does not mirror) the measured total is spread
    over the blocks in proportion to the prediction (evenly when it predicted nothing)."""
    if measured is None:
        return kv
    total, n_lines = measured
    predicted = sum(kv)
    if abs(predicted - total) <= n_lines * (MiB // 200 + 1) + predicted // 1000:
        return kv
    weights = list(kv) if predicted else [1] * len(kv)
    wsum = sum(weights) or 1
    out = [total * w // wsum for w in weights]
    if out:
        out[max(range(len(out)), key=lambda i: weights[i])] += total - sum(out)
    return tuple(out)


def output_buffer_bytes(info: ModelInfo, num_parallel: int, embedding: bool = False) -> int:
    """Host output buffer reserved at context creation: logits (and embeddings) for n_seq_max outputs, f32."""
    floats = info.n_vocab * num_parallel
    if embedding or info.is_embedding:
        floats += info.n_embd * num_parallel
    return floats * 4


def output_reserve_bytes(info: ModelInfo, num_ctx: int, num_parallel: int, num_batch: int = 512,
                         num_ubatch: int = 512, embedding: bool = False) -> int:
    """How far the host output buffer grows beyond its size at load when an embedding request comes: llama.cpp
    makes every token of an embedding batch an output and reallocates the buffer for logits + embeddings of all
    of them (llama_context::output_reserve; it never shrinks). An embedding model decodes a whole input (up to
    min(n_ubatch, n_ctx_seq) tokens) at once; a generative model decodes embed_chunk_tokens at a time."""
    cs = context_shape(num_ctx, num_parallel, num_batch, num_ubatch)
    row = (info.n_vocab + info.n_embd) * 4
    if embedding or info.is_embedding:
        n_out = min(cs.n_ubatch, cs.n_ctx_seq)
    else:
        n_out = embed_chunk_tokens(info.n_vocab, info.n_embd, cs.n_batch)
    return max(0, n_out * row - output_buffer_bytes(info, num_parallel, embedding))


def estimate_compute(info: ModelInfo, num_ctx: int, num_parallel: int, num_batch: int = 512, num_ubatch: int = 512,
                     flash_attn: bool | None = None, with_output: bool = True) -> int:
    """Rough compute-buffer size for ONE device running the graph (used only when no dry run measured it).
    The largest intermediates: logits (n_ubatch x n_vocab f32) on the output device, attention scores
    (n_head x n_ubatch x n_kv f32) without flash attention, FFN activations."""
    cs = context_shape(num_ctx, num_parallel, num_batch, num_ubatch)
    u = cs.n_ubatch
    logits = u * info.n_vocab * 4 if with_output else 0
    kq = 0 if flash_attn else info.n_head * u * cs.n_ctx_seq * 4
    n_ff = 0
    for p in (info.tensors or ()):
        if p.layer == 0 and p.name.startswith("blk.0.ffn_up"):
            n_ff = max(n_ff, p.shape[1] if len(p.shape) > 1 else 0)
    if info.is_moe:
        n_ff = n_ff * max(1, info.n_expert_used)
    ffn = u * max(n_ff, 4 * info.n_embd) * 4 * 3
    base = u * info.n_embd * 4 * 6
    return max(logits, kq, ffn) + base


@dataclass(frozen=True)
class SpanGroup:
    """The tensors of one movable part (a block's attn/ffn/experts, or token_embd/output/other) for the CPU mapping
    and repack split: their file extent and bytes, all of them and without the ones the CPU backend repacks."""
    block: int                          # blk.N -> N; -1 outside the blocks
    part: str                           # "attn" | "ffn" | "experts" in a block; "token_embd" | "output" | "other"
    extent_all: tuple[int, int, int]    # (first offset, end, bytes) of every tensor
    extent_kept: tuple[int, int, int]   # the same without repacking tensors ((-1, 0, 0) when none are left)
    moved: tuple[tuple[str, int], ...]  # repacking tensors' bytes by key (weight class; part outside the blocks)
    n_repack: int                       # their size in the repack buffer (32-byte aligned each)


_spans_cache: list = []                 # [(info.tensors, features, groups)]: plan() runs memory_model often


def span_groups(info: ModelInfo, cpu_features: tuple[str, ...] = ()) -> tuple[SpanGroup, ...]:
    for tensors, feats, groups in _spans_cache:
        if tensors is info.tensors and feats == cpu_features:
            return groups
    acc: dict[tuple[int, str], list] = {}
    for t in info.tensors:
        m = _BLK.match(t.name)
        if m:
            il = int(m.group(1))
            if il >= info.n_layer:
                continue
            part = "experts" if _EXPERTS.match(t.name) else "ffn" if _FFN.match(t.name) else "attn"
        else:
            il, part = -1, t.weight_class if t.weight_class in ("token_embd", "output") else "other"
        g = acc.setdefault((il, part), [[-1, 0, 0], [-1, 0, 0], {}, 0])
        rp = bool(cpu_features) and repack.tensor_repacks(t.name, t.shape, t.ggml_type, cpu_features)
        for ext in (g[0],) if rp else (g[0], g[1]):
            ext[0] = t.offset if ext[0] < 0 else min(ext[0], t.offset)
            ext[1] = max(ext[1], t.offset + t.n_bytes)
            ext[2] += t.n_bytes
        if rp:
            key = t.weight_class if il >= 0 else part
            g[2][key] = g[2].get(key, 0) + t.n_bytes
            g[3] += repack.pad(t.n_bytes)
    groups = tuple(SpanGroup(il, part, tuple(g[0]), tuple(g[1]), tuple(g[2].items()), g[3])
                   for (il, part), g in acc.items())
    _spans_cache[:] = [(info.tensors, cpu_features, groups)] + _spans_cache[:7]
    return groups


def tied_output_repack(info: ModelInfo, cpu_features: tuple[str, ...] = ()) -> int:
    """Bytes of the repacked copy of token_embd that a tied output layer gets when it is on the CPU (else 0)."""
    if info.output_bytes or not cpu_features:
        return 0
    for t in info.tensors:
        if t.name == "token_embd.weight" and repack.output_copy_repacks(t.shape, t.ggml_type, cpu_features):
            return repack.pad(t.n_bytes)
    return 0


@dataclass(frozen=True)
class MemoryModel:
    """Everything plan() needs, precomputed once per (model, context options): plain numbers, no I/O."""
    n_layer: int
    parts: tuple[BlockParts, ...]
    kv: tuple[int, ...]                 # per block
    token_embd: int                     # always on the CPU (llama.cpp keeps the input layer there)
    output: int                         # output.weight; with tied embeddings: the duplicate made on a GPU
    output_tied: bool
    other: int                          # output_norm etc. (go with the output layer)
    output_buffer: int                  # host output buffer (CPU) at load
    n_tensors_other: int = 2
    spans: tuple[SpanGroup, ...] = ()   # for llama.cpp's mapped span and the repack split (app.engine.planner.repack)
    output_repack: int = 0              # a tied output on the CPU: its repacked copy of token_embd (real, extra)
    cpu_features: tuple[str, ...] = ()
    output_reserve: int = 0             # its growth on the first embedding request (output_reserve_bytes)
    checkpoints: int = 0                # host RAM the context checkpoints may take (checkpoint_bytes)

    def part_bytes(self, il: int, part: str, gpu: bool = False) -> int:
        p = self.parts[il]
        b = p.bytes(part)
        if gpu and b:
            idx = {"attn": 0, "ffn": 1, "experts": 2}[part]
            b += p.n_tensors[idx] * GPU_ALIGN
        return b

    def output_bytes(self, on_gpu: bool) -> int:
        """Output layer weights where the output layer sits. A tied output on a GPU is a copy of token_embd."""
        if self.output_tied:
            return (self.token_embd if on_gpu else 0) + self.other
        return self.output + self.other


def memory_model(info: ModelInfo, num_ctx: int, num_parallel: int, kv_type: str = "f16", num_batch: int = 512,
                 num_ubatch: int = 512, embedding: bool = False, cpu_features: tuple[str, ...] = (),
                 flash_attn: bool | None = None, ctx_checkpoints: int = 0, checkpoint_mib: int = 0) -> MemoryModel:
    """`cpu_features`: the inventory's (ggml names, "REPACK" when the build repacks); () = no repacking.
    `ctx_checkpoints`/`checkpoint_mib`: the runner's context checkpoint bounds (PlanOptions)."""
    tied = info.output_bytes == 0
    return MemoryModel(
        n_layer=info.n_layer,
        parts=block_parts(info),
        kv=kv_bytes_per_layer(info, num_ctx, num_parallel, kv_type, num_batch, num_ubatch, flash_attn=flash_attn),
        token_embd=info.token_embd_bytes,
        output=info.output_bytes,
        output_tied=tied,
        other=info.other_bytes,
        output_buffer=output_buffer_bytes(info, num_parallel, embedding),
        output_reserve=output_reserve_bytes(info, num_ctx, num_parallel, num_batch, num_ubatch, embedding),
        spans=span_groups(info, tuple(cpu_features)),
        output_repack=tied_output_repack(info, tuple(cpu_features)),
        cpu_features=tuple(cpu_features),
        checkpoints=checkpoint_bytes(info, num_ctx, num_parallel, kv_type, num_batch, num_ubatch, ctx_checkpoints,
                                     checkpoint_mib),
    )
