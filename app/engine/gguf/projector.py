"""Vision projectors in GGUF ("mmproj" files, what llama.cpp's convert_hf_to_gguf.py --mmproj writes and Ollama's
`application/vnd.ollama.image.projector` layers are): `general.architecture = clip`, `clip.has_vision_encoder`,
`clip.projector_type` (or `clip.vision.projector_type`). Checked here before a model is made with one, so a wrong
file is refused with a reason instead of failing the load in llama.cpp."""
from __future__ import annotations

from dataclasses import dataclass

from app.engine.gguf.errors import GGUFError
from app.engine.gguf.parser import parse_gguf

# Projectors whose image positions advance one per embedding (runner/prompt/media.py feeds them); the M-RoPE ones
# (Qwen2-VL family) are refused by the runner at load.
MROPE_TYPES = ("qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "qwen2.5o", "glm4v", "youtuvl")


@dataclass(frozen=True)
class ProjectorInfo:
    path: str
    projector_type: str              # clip.cpp's name: "mlp", "gemma3", "idefics3", ...
    image_size: int | None
    patch_size: int | None
    n_embd: int | None               # the vision encoder's width, heads, FFN size (clip.vision.*)
    n_head: int | None
    n_ff: int | None
    weight_bytes: int                # every tensor's bytes (all of it is loaded on one device)
    n_tensors: int
    file_size: int


def read_projector(path) -> ProjectorInfo:
    """The projector's facts; GGUFError when `path` is not a vision projector. (Whether its embeddings fit the
    text model's width is llama.cpp's check at load: mtmd refuses a mismatch, and the load fails with that.)"""
    gf = parse_gguf(path)
    if gf.get("general.architecture") != "clip":
        raise GGUFError(f"{path}: not a vision projector (general.architecture is "
                        f"{gf.get('general.architecture')!r}, expected 'clip')")
    if not gf.get("clip.has_vision_encoder"):
        raise GGUFError(f"{path}: the projector has no vision encoder (clip.has_vision_encoder)")
    ptype = gf.get("clip.projector_type") or gf.get("clip.vision.projector_type")
    if not isinstance(ptype, str) or not ptype:
        raise GGUFError(f"{path}: the projector names no clip.projector_type")

    def num(key):
        v = gf.get(key)
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    return ProjectorInfo(str(path), ptype, num("clip.vision.image_size"), num("clip.vision.patch_size"),
                         num("clip.vision.embedding_length"), num("clip.vision.attention.head_count"),
                         num("clip.vision.feed_forward_length"),
                         sum(t.n_bytes for t in gf.tensors), len(gf.tensors), gf.file_size)
