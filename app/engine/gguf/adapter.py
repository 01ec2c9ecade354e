"""LoRA adapters in GGUF (what llama.cpp's convert_lora_to_gguf.py writes, and Ollama's ADAPTER layers are):
`general.type = adapter`, `adapter.type = lora`, tensors `<base tensor>.lora_a` / `.lora_b`. Checked here before a
model is made with one, so a wrong file is refused with a reason instead of failing the load in llama.cpp.
Covered by tests/integration/service/test_pull_hf_push.py (LoRA adapters from uploads and Modelfiles)."""
from __future__ import annotations

from dataclasses import dataclass

from app.engine.gguf.errors import GGUFError
from app.engine.gguf.parser import parse_gguf


@dataclass(frozen=True)
class AdapterInfo:
    path: str
    architecture: str
    alpha: float | None
    n_tensors: int
    file_size: int


def read_adapter(path, base_architecture: str | None = None) -> AdapterInfo:
    gf = parse_gguf(path)
    if gf.get("general.type") != "adapter" or gf.get("adapter.type") != "lora":
        raise GGUFError(f"{path}: not a LoRA adapter (general.type {gf.get('general.type')!r}, adapter.type "
                        f"{gf.get('adapter.type')!r}; expected 'adapter' and 'lora')")
    arch = gf.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{path}: the adapter names no general.architecture")
    if base_architecture is not None and arch != base_architecture:
        raise GGUFError(f"{path}: a LoRA adapter for {arch!r} cannot go on a {base_architecture!r} model")
    names = [t.name for t in gf.tensors]
    if not names or not all(n.endswith((".lora_a", ".lora_b")) for n in names):
        raise GGUFError(f"{path}: a LoRA adapter holds only *.lora_a / *.lora_b tensors")
    alpha = gf.get("adapter.lora.alpha")
    return AdapterInfo(str(path), arch, float(alpha) if isinstance(alpha, (int, float)) else None, len(names),
                       gf.file_size)
