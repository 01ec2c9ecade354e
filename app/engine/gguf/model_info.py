"""Model facts read from a GGUF file without loading weights (contract shared by planner, runner, service).

`read_model_info(path) -> ModelInfo` validates the file before anything else sees it: a file llama.cpp
would abort on must be refused here with `GGUFError` and a reason.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from app.engine.gguf.errors import GGUFError
from app.engine.gguf.kv_shape import KVShape, read_kv_shape

# Weight classes the planner places separately. "experts" are MoE expert tensors (ffn_*_exps),
# the ones that go to the CPU first when a model does not fit.
WEIGHT_CLASSES = ("attention", "ffn", "experts", "norm", "other")


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]      # ggml ne order (ne0 first)
    ggml_type: str              # e.g. "Q4_1", "F32"
    n_bytes: int                # exact bytes in the file
    offset: int                 # absolute offset of the data in the file (split model: parts laid end to end)
    layer: int | None           # blk.N -> N; None for token_embd/output/etc.
    weight_class: str           # one of WEIGHT_CLASSES, or "token_embd" / "output"


@dataclass(frozen=True)
class LayerWeights:
    index: int
    bytes_by_class: dict[str, int]   # keys from WEIGHT_CLASSES

    @property
    def total(self) -> int:
        return sum(self.bytes_by_class.values())


@dataclass(frozen=True)
class ModelInfo:
    path: str
    architecture: str               # general.architecture, e.g. "llama", "qwen3moe"
    name: str                       # general.name or file stem
    file_size: int
    data_offset: int                # start of the tensor data section
    n_params: int
    quantization: str               # file type, e.g. "Q4_1"; most common weight type if unknown
    context_length: int             # n_ctx_train
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: tuple[int, ...]      # per layer (GQA; may vary per layer)
    head_dim_k: int                 # key_length (n_embd/n_head if absent)
    head_dim_v: int
    n_vocab: int
    sliding_window: int             # 0 = none
    swa_layers: tuple[bool, ...]    # per layer: True = sliding-window attention layer
    n_expert: int                   # 0 = dense
    n_expert_used: int
    chat_template: str | None
    tokenizer_model: str | None     # tokenizer.ggml.model, e.g. "gpt2", "llama"
    pooling_type: int | None        # set for embedding models
    is_embedding: bool              # encoder/pooling model (bert, nomic-bert, ...)
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    layers: tuple[LayerWeights, ...] = field(repr=False)
    token_embd_bytes: int = 0
    output_bytes: int = 0           # 0 when the output is tied to token_embd
    other_bytes: int = 0            # tensors outside blk.N that are neither token_embd nor output (output_norm, ...)
    kv: KVShape | None = None       # what llama.cpp's memory keeps per layer (None: plain attention from the fields above)
    # the publisher's sampling defaults (general.sampling.*, llama.cpp #17120), as option names: (("top_k", 20), ...)
    sampling: tuple[tuple[str, float | int], ...] = ()

    @property
    def weight_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    def to_dict(self, with_tensors: bool = False) -> dict:
        d = asdict(self)
        if not with_tensors:
            d.pop("tensors")
        return d


# general.sampling.* (gguf-py's Keys.General.SAMPLING_*, read by llama.cpp's common since #17120) -> the option
# name it sets here (Ollama's vocabulary), and whether it is an integer. `sequence` (the sampler order) and XTC
# have no counterpart here and are not read.
GGUF_SAMPLING: dict[str, tuple[str, bool]] = {
    "temp": ("temperature", False), "top_k": ("top_k", True), "top_p": ("top_p", False), "min_p": ("min_p", False),
    "penalty_repeat": ("repeat_penalty", False), "penalty_last_n": ("repeat_last_n", True),
    "mirostat": ("mirostat", True), "mirostat_tau": ("mirostat_tau", False), "mirostat_eta": ("mirostat_eta", False)}


def sampling_defaults(get) -> tuple[tuple[str, float | int], ...]:
    """The publisher's sampling defaults from a GGUF's general.sampling.* keys (`get(key)`), as option names; a
    value of the wrong kind is left out."""
    out: list[tuple[str, float | int]] = []
    for key, (option, integer) in GGUF_SAMPLING.items():
        v = get(f"general.sampling.{key}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            continue
        if integer and float(v).is_integer():
            out.append((option, int(v)))
        elif not integer:
            out.append((option, round(float(v), 6)))     # float32 0.95 reads 0.949999988
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------
# Reader. The parsing and validation live in gguf_parse (bounds-checked, fast); this turns that into facts.

import os as _os
import time as _time
import re as _re
from collections import Counter as _Counter
from functools import lru_cache as _lru_cache

_BLK = _re.compile(r"^blk\.(\d+)\.(.+)$")
# Layer norms (they go with the layer, tiny); the q/k norms inside attention count as attention.
_ATTN_INNER_NORMS = {"attn_q_norm", "attn_k_norm", "attn_q_a_norm", "attn_kv_a_norm"}
_EXPERTS = _re.compile(r"^ffn_\w+_(ch)?exps$")
_DENSE_FFN = _re.compile(r"^ffn_(up|down|gate|gate_up|act)(_shexp)?$|^ffn_\w*_shexp$")
# Encoder-only architectures (no causal decode; embeddings only).
ENCODER_ARCHES = {"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert",
                  "modern-bert", "t5encoder", "eurobert"}
def classify_tensor(name: str) -> tuple[int | None, str]:
    """(layer index or None, weight class) for a GGUF tensor name."""
    m = _BLK.match(name)
    if not m:
        base = name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name
        if base == "token_embd":
            return None, "token_embd"
        if base == "output":
            return None, "output"
        return None, "other"
    layer, rest = int(m.group(1)), m.group(2)
    base = rest.rsplit(".", 1)[0] if rest.endswith((".weight", ".bias", ".scale")) else rest
    if base in _ATTN_INNER_NORMS:
        return layer, "attention"
    if base.endswith("norm"):
        return layer, "norm"
    if base.startswith("attn_"):
        return layer, "attention"
    if _EXPERTS.match(base):
        return layer, "experts"
    if _DENSE_FFN.match(base):
        return layer, "ffn"
    return layer, "other"       # router (ffn_gate_inp), expert bias, ssm_*, ...


def _per_layer(path: str, key: str, v, n_layer: int, default: int) -> tuple[int, ...]:
    """A hyper-parameter that is one integer or one per layer (e.g. head_count_kv), as a per-layer tuple."""
    if v is None:
        return (default,) * n_layer
    vals = v if isinstance(v, list) else [v]
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in vals):
        raise GGUFError(f"{path}: {key} must be a non-negative integer or one per layer, got {str(v)[:60]}")
    if isinstance(v, list):
        if len(v) < n_layer:
            raise GGUFError(f"{path}: {key} has {len(v)} entries for {n_layer} layers")
        return tuple(v[:n_layer])
    return (v,) * n_layer


MAX_EXPERTS = 1024      # LLAMA_MAX_EXPERTS
MAX_LAYERS = 512        # LLAMA_MAX_LAYERS
RACY_SECONDS = 2.0      # files modified more recently than this are not cached
# Architectures whose graph builder asserts n_embd_head == n_rot (GGML_ASSERT in src/models/*.cpp).
_ROPE_EQUALS_HEAD = {
    "apertus", "arcee", "arctic", "baichuan", "chameleon", "codeshell", "cogvlm", "cohere2moe", "dbrx", "deci",
    "deepseek", "dots1", "dream", "ernie4_5", "ernie4_5-moe", "exaone", "exaone-moe", "exaone4", "falcon", "granite",
    "granite_swa", "graniteswitch", "grok", "grovemoe", "hunyuan-moe", "hunyuan_vl", "hy_v3", "internlm2", "jais2",
    "llada", "llada-moe", "llama", "llama4", "maincoder", "mellum", "minimax-01", "minimax-m2", "mistral3",
    "nemotron", "olmo", "olmo2", "olmoe", "orion", "paddleocr", "plamo", "qwen2", "qwen2moe", "qwen2vl", "qwen3",
    "qwen3moe", "qwen3vl", "qwen3vlmoe", "rnd1", "seed_oss", "smallthinker", "smollm3", "starcoder2", "xverse",
}


def _check_llama_asserts(path: str, arch: str, hp, hpi, head_dim_k: int) -> None:
    """Hyper-parameters that make llama.cpp GGML_ASSERT (kill the process) instead of failing the load."""
    n_expert = hpi("expert_count")
    used = hpi("expert_used_count")
    if n_expert > MAX_EXPERTS:
        raise GGUFError(f"{path}: {n_expert} experts (llama.cpp supports at most {MAX_EXPERTS})")
    if used > n_expert:
        raise GGUFError(f"{path}: {used} experts used per token but only {n_expert} experts")
    if n_expert and not used:
        raise GGUFError(f"{path}: {n_expert} experts but expert_used_count is 0")
    groups = hpi("expert_group_count")
    if n_expert and groups:
        group_used = hpi("expert_group_used_count")
        if groups >= n_expert or n_expert % groups or (groups > 1 and not 0 < group_used < groups):
            raise GGUFError(f"{path}: inconsistent expert groups ({groups} groups, {group_used} used, "
                            f"{n_expert} experts)")
    n_rot = hp("rope.dimension_count")
    if arch in _ROPE_EQUALS_HEAD and isinstance(n_rot, int) and head_dim_k and n_rot != head_dim_k:
        raise GGUFError(f"{path}: rope.dimension_count {n_rot} differs from the head size {head_dim_k} "
                        f"({arch} requires them equal)")


def read_model_info(path) -> ModelInfo:
    """Model facts from a GGUF file, validated; raises GGUFError naming the problem. Cached per file version."""
    p = _os.path.realpath(_os.fspath(path))
    try:
        st = _os.stat(p)
    except OSError:
        st = None
    # File timestamps are only as fine as the kernel's clock tick: a file rewritten (same size) within a few ms
    # keeps its mtime. So only files untouched for a while are cached (git's "racy timestamp" rule).
    if st is None or _time.time() - st.st_mtime < RACY_SECONDS:
        return _read_model_info(p)   # (raises the proper "no such file" GGUFError when missing)
    return _read_model_info_cached(p, (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns))


@_lru_cache(maxsize=64)
def _read_model_info_cached(path: str, _version_key) -> ModelInfo:
    return _read_model_info(path)


def _read_model_info(path: str) -> ModelInfo:
    # Long (~130 lines) on purpose: a flat read of the GGUF's hyper-parameters in the order llama.cpp's
    # llm_load_hparams reads them, each checked where it is read so a refusal names the key; splitting it would
    # scatter that correspondence.
    from gguf import LlamaFileType

    from app.engine.gguf.parser import ArraySummary, parse_gguf
    from app.engine.gguf.split import split_parts

    gf = parse_gguf(path)
    parts = split_parts(path, gf)     # [gf], or every part of a split model (checked, named as llama.cpp wants)
    arch = gf.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{path}: no general.architecture key (not a model file?)")

    def hp(suffix, default=None):
        return gf.get(f"{arch}.{suffix}", default)

    def hpi(suffix, default=0) -> int:
        """An integer hyper-parameter (a per-layer array gives its maximum); anything else is refused."""
        v = hp(suffix, default)
        vals = v if isinstance(v, list) else [v]
        if not vals or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in vals):
            raise GGUFError(f"{path}: {arch}.{suffix} must be a non-negative integer, got {str(v)[:60]}")
        return max(vals)

    n_layer = hp("block_count")
    if not isinstance(n_layer, int) or isinstance(n_layer, bool):
        raise GGUFError(f"{path}: no {arch}.block_count key (not a language model: {arch!r})")
    if not 0 < n_layer <= MAX_LAYERS:
        raise GGUFError(f"{path}: {arch}.block_count = {n_layer} is not a plausible layer count "
                        f"(llama.cpp allows 1..{MAX_LAYERS})")
    if not any(part.tensors for part in parts):
        raise GGUFError(f"{path}: no tensors (a vocabulary-only file?)")

    n_embd = hpi("embedding_length")
    if not 0 < n_embd <= 1 << 20:
        raise GGUFError(f"{path}: {arch}.embedding_length = {n_embd} is not plausible")
    heads = _per_layer(path, f"{arch}.attention.head_count", hp("attention.head_count"), n_layer, 0)
    n_head = max(heads) if heads else 0
    n_head_kv = _per_layer(path, f"{arch}.attention.head_count_kv", hp("attention.head_count_kv"), n_layer,
                           n_head)
    for il, (h, h_kv) in enumerate(zip(heads, n_head_kv)):
        # llama.cpp divides by these (n_gqa = n_head / n_head_kv); 0 KV heads marks a recurrent layer
        if h_kv < 0 or h < 0 or h_kv > max(h, 0) or (h_kv and h % h_kv):
            raise GGUFError(f"{path}: layer {il} has {h} attention heads and {h_kv} KV heads "
                            "(KV heads must divide the heads)")
    head_dim_k = hpi("attention.key_length") or (n_embd // n_head if n_head else 0)
    head_dim_v = hpi("attention.value_length") or (n_embd // n_head if n_head else 0)

    _check_llama_asserts(path, arch, hp, hpi, head_dim_k)

    kv = read_kv_shape(arch, hp, n_layer, n_embd, heads, n_head_kv)
    sliding_window = kv.window
    swa_layers = tuple(c == "window" for c in kv.cache)

    tokens = gf.get("tokenizer.ggml.tokens")
    n_vocab = hpi("vocab_size")
    if not n_vocab and isinstance(tokens, ArraySummary):
        n_vocab = tokens.length
    elif not n_vocab and isinstance(tokens, list):
        n_vocab = len(tokens)

    tensors: list[TensorInfo] = []
    layer_bytes: dict[int, dict[str, int]] = {}
    n_params = 0
    top = {"token_embd": 0, "output": 0, "other": 0}
    bytes_by_type: _Counter = _Counter()
    # a split model's parts are numbered as if the files were laid end to end (offsets stay disjoint)
    base = 0
    all_tensors = []
    for part in parts:
        all_tensors += [(t, base + part.data_offset + t.rel_offset) for t in part.tensors]
        base += part.file_size
    for t, offset in all_tensors:
        layer, cls = classify_tensor(t.name)
        tensors.append(TensorInfo(t.name, t.ne, t.ggml_type.name, t.n_bytes, offset, layer, cls))
        n_params += t.n_elements
        if len(t.ne) >= 2:
            bytes_by_type[t.ggml_type.name] += t.n_bytes
        if layer is None:
            top[cls] += t.n_bytes
        else:
            d = layer_bytes.setdefault(layer, dict.fromkeys(WEIGHT_CLASSES, 0))
            d[cls] += t.n_bytes
        if t.name == "token_embd.weight" and not n_vocab and len(t.ne) == 2:
            n_vocab = t.ne[1]
    n_layers_seen = max([n_layer] + [i + 1 for i in layer_bytes])
    layers = tuple(LayerWeights(i, layer_bytes.get(i, dict.fromkeys(WEIGHT_CLASSES, 0)))
                   for i in range(n_layers_seen))

    ftype = gf.get("general.file_type")
    quant = None
    if isinstance(ftype, int):
        try:
            quant = LlamaFileType(ftype).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            quant = None
    if quant is None:
        quant = bytes_by_type.most_common(1)[0][0] if bytes_by_type else "unknown"

    pooling = hp("pooling_type")
    pooling = int(pooling) if isinstance(pooling, int) else None
    template = gf.get("tokenizer.chat_template")
    tok_model = gf.get("tokenizer.ggml.model")
    name = gf.get("general.name")
    return ModelInfo(
        path=path,
        architecture=arch,
        name=name if isinstance(name, str) and name else _os.path.splitext(_os.path.basename(path))[0],
        file_size=sum(part.file_size for part in parts),
        data_offset=gf.data_offset,
        n_params=n_params,
        quantization=quant,
        context_length=hpi("context_length"),
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_vocab=n_vocab,
        sliding_window=sliding_window,
        swa_layers=swa_layers,
        n_expert=hpi("expert_count"),
        n_expert_used=hpi("expert_used_count"),
        chat_template=template if isinstance(template, str) else None,
        tokenizer_model=tok_model if isinstance(tok_model, str) else None,
        pooling_type=pooling,
        is_embedding=arch in ENCODER_ARCHES or (pooling is not None and pooling > 0),
        tensors=tuple(tensors),
        layers=layers,
        token_embd_bytes=top["token_embd"],
        output_bytes=top["output"],
        other_bytes=top["other"],
        kv=kv,
        sampling=sampling_defaults(gf.get),
    )
