"""Layout types: what the planner emits and the runner loads exactly (contract).

All plain frozen dataclasses that round-trip through JSON (`to_dict` / `from_dict`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

MiB = 1024 * 1024
# KV cache types a user may choose (K and V alike); the memory model knows more (memory.KV_TYPES: block sizes).
KV_TYPES = ("f16", "q8_0", "q4_0")


@dataclass(frozen=True)
class PlanOptions:
    """What the user may set; None means "planner decides"."""
    num_ctx: int = 4096              # context PER SEQUENCE (Ollama semantics); llama.cpp n_ctx = num_ctx * num_parallel
    num_parallel: int = 1            # parallel sequences (slots)
    num_batch: int | None = None     # n_batch; None = the planner decides (2048 all on GPUs, else 512: placement.py)
    num_ubatch: int = 512            # n_ubatch
    num_gpu: int | None = None       # layers on GPU (llama.cpp n_gpu_layers semantics); None = as many as fit
    main_gpu: int | None = None
    tensor_split: tuple[float, ...] | None = None   # one weight per GPU in the inventory
    cpu_moe: int | None = None       # number of layers whose experts stay on the CPU; None = decide
    kv_type: str = "f16"             # "f16" | "q8_0" | "q4_0" (K and V)
    flash_attn: bool | None = None   # None = auto
    margin: int = 512 * MiB          # kept free on each GPU
    embedding: bool = False          # context for embeddings (pooling)
    n_threads: int | None = None     # compute threads (llama.cpp n_threads); None = physical cores (docs/architecture.md)
    ctx_checkpoints: int = 32        # context checkpoints per slot (recurrent / hybrid / sliding-window models; 0 = off)
    checkpoint_mib: int = 1024       # their bound in host RAM per slot (MiB; 0 = the count alone bounds them)
    cache_reuse: int = 0             # move cached chunks of at least this many tokens to where a new prompt repeats
                                     # them after a change (llama-server's --cache-reuse; 0 = off: approximate)
    use_mmap: bool | None = None     # llama.cpp maps the weights' file (True) or reads it into memory (False); None =
                                     # the planner decides (placement.weights_load_mode), as Ollama's use_mmap
    draft: str = ""                  # speculative decoding's draft model (a model name; "" = none): Layout.draft
    draft_max: int = 8               # its longest draft per sequence and step (llama-server's --draft-max is 16; on
                                     # a CPU each drafted token is one draft-model decode, so fewer pay)
    draft_p_min: float = 0.6         # its draft ends below this probability (llama-server's --draft-p-min)


@dataclass(frozen=True)
class DevicePlan:
    device_id: str                   # "CPU" or a ggml device name ("CUDA0")
    name: str
    layers: tuple[int, ...]          # block indices whose (non-expert) weights sit here
    expert_layers: tuple[int, ...]   # block indices whose MoE expert tensors sit here
    weights: dict[str, int]          # bytes by class: attention, ffn, experts, norm, other, token_embd, output,
                                     # repack (CPU: weights the CPU backend repacks; their bytes leave their class)
    kv: int                          # KV cache bytes
    compute: int                     # compute buffer bytes (measured by dry run, or estimated)
    output: int = 0                  # host output buffer (CPU only)
    budget: int = 0                  # free bytes minus margin (what the plan may use); 0 for unbounded
    mapped: int = 0                  # CPU: file pages llama.cpp maps beyond the weights it reads from the mapping
                                     # (repacked originals, GPU tensors in between): in its CPU_Mapped figure,
                                     # droppable page cache, so NOT in `total`
    output_reserve: int = 0          # CPU: how far the output buffer grows on the first embedding request (every
                                     # token an output); planned for, allocated by llama.cpp only then
    checkpoints: int = 0             # CPU: host RAM the runner's context checkpoints may take (recurrent, hybrid and
                                     # sliding-window models: copies of a sequence's partial memory, per slot)
    projector: int = 0               # the vision projector's weights + image compute buffer (planner/projector.py)
    draft: int = 0                   # the draft model's weights, KV cache and compute buffer (planner/draft.py)

    @property
    def weights_total(self) -> int:
        return sum(self.weights.values())

    @property
    def total(self) -> int:
        return (self.weights_total + self.kv + self.compute + self.output + self.output_reserve + self.checkpoints
                + self.projector + self.draft)


@dataclass(frozen=True)
class DraftPlan:
    """The draft model of speculative decoding (a second, small model with the target's vocabulary) as the runner
    loads it: its own llama_model and llama_context beside the target's, one sequence per target slot, on one device
    (all its layers there). Its bytes are in that device's `DevicePlan.draft` (planner/draft.py)."""
    model_path: str
    name: str = ""                   # the model name the user chose (`draft` option), for /api/ps and messages
    device_id: str = "CPU"           # where its layers, KV cache and compute buffer sit
    n_gpu_layers: int = 0            # 0 on the CPU, -1 (all) on a GPU
    weights: int = 0                 # bytes: GGUF tensor data
    kv: int = 0                      # bytes: its KV cache (the target's context per sequence x slots, f16)
    compute: int = 0                 # bytes: its compute buffer (estimated)
    max_tokens: int = 8              # longest draft per sequence and step
    p_min: float = 0.6               # drafting stops at a token the draft model gives less than this probability

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute


@dataclass(frozen=True)
class Layout:
    model_path: str
    options: PlanOptions
    devices: tuple[DevicePlan, ...]          # CPU first, then GPUs used
    layer_device: tuple[str, ...]            # per block: device_id holding its non-expert weights
    expert_device: tuple[str, ...]           # per block: device_id of its expert tensors ("" if dense)
    # exact llama.cpp parameters that realise the plan
    n_gpu_layers: int
    split_mode: int                          # LLAMA_SPLIT_MODE_* (0 none, 1 layer, 2 row)
    main_gpu: int
    tensor_split: tuple[float, ...]          # per device in `gpu_devices` order
    gpu_devices: tuple[str, ...]             # ggml device names passed as `devices` (no CPU)
    tensor_buft_overrides: tuple[tuple[str, str], ...]   # (regex, device_id or "CPU")
    op_offload: bool
    n_ctx: int                               # total llama.cpp n_ctx = num_ctx * n_parallel
    n_parallel: int
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: bool | None
    fits: bool
    reasons: tuple[str, ...] = field(default_factory=tuple)      # why each decision was made
    suggestions: tuple[str, ...] = field(default_factory=tuple)  # when it does not fit: what would
    lora_adapters: tuple[str, ...] = ()      # LoRA adapter GGUFs the runner applies (scale 1) after loading
    mmproj_path: str | None = None           # the vision projector GGUF the runner loads through mtmd
    context: dict = field(default_factory=dict)   # how num_ctx was chosen: {"num_ctx", "limit", "reason"}
                                                  # (planner.context.ContextChoice; empty when not recorded)
    draft: DraftPlan | None = None           # speculative decoding's draft model (None: none)
    # the smallest batch op_offload streams CPU-held weights to the GPU for (GGML_OP_OFFLOAD_MIN_BATCH, read by
    # the GPU backends when they initialise: the runner sets it before llama.cpp loads); 0: llama.cpp's default
    op_offload_min_batch: int = 0
    # how llama.cpp gets the weights: "mmap" maps the file (the pages are page cache); "read" reads the CPU's weights
    # into the runner's memory, where the kernel can back them with 2 MiB pages (planner.placement.weights_load_mode)
    load_mode: str = "mmap"

    def environment(self) -> dict[str, str]:
        """The environment variables llama.cpp reads that this plan sets (the runner child applies them before it
        loads llama.cpp; a variable the user set wins)."""
        return {"GGML_OP_OFFLOAD_MIN_BATCH": str(self.op_offload_min_batch)} if self.op_offload_min_batch else {}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Layout":
        d = dict(d)
        d["options"] = PlanOptions(**_tuples(d["options"]))
        d["devices"] = tuple(DevicePlan(**_tuples(dp)) for dp in d["devices"])
        d["tensor_buft_overrides"] = tuple(tuple(x) for x in d["tensor_buft_overrides"])
        if isinstance(d.get("draft"), dict):
            d["draft"] = DraftPlan(**d["draft"])
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in _tuples(d).items() if k in names})


def _tuples(d: dict) -> dict[str, Any]:
    """A dataclass's fields from JSON: lists back to the tuples it holds."""
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
