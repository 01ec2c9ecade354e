"""Model facts read from a GGUF file without loading weights (contract shared by planner, runner, service).

`read_model_info(path) -> ModelInfo` validates the file before anything else sees it: a file llama.cpp
would abort on must be refused here with `GGUFError` and a reason.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Weight classes the planner places separately. "experts" are MoE expert tensors (ffn_*_exps),
# the ones that go to the CPU first when a model does not fit.
WEIGHT_CLASSES = ("attention", "ffn", "experts", "norm", "other")


class GGUFError(ValueError):
    """The file is not a GGUF llama.cpp can load; the message says why."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]      # ggml ne order (ne0 first)
    ggml_type: str              # e.g. "Q4_1", "F32"
    n_bytes: int                # exact bytes in the file
    offset: int                 # absolute offset of the data in the file
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
