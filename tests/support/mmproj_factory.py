"""Writes a tiny synthetic vision projector GGUF ("mmproj") that llama.cpp's clip loader (tools/mtmd/clip.cpp)
accepts: random weights, the keys and tensors of the LLaVA-1.5 `mlp` projector over a small ViT.

Why `mlp`: it is the simplest image projector clip.cpp knows (a ViT, then mm.0 -> GELU -> mm.2); its graph
(`clip_graph_llava`) needs only the standard ViT tensors, a position embedding and the two projector matrices.
The image is resized to `image_size` (no tiles when `clip.vision.image_grid_pinpoints` is absent), so every
image becomes (image_size / patch_size)^2 embeddings of the text model's width (`projection_dim`): SmolLM2-135M's
576 by default, or a synthetic text model's n_embd.

Numpy shapes are ggml's `ne` reversed: a matrix from n_in to n_out is (n_out, n_in).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

SMOLLM2_N_EMBD = 576


def write_mlp_projector(path, n_embd_text: int = SMOLLM2_N_EMBD, image_size: int = 32, patch_size: int = 8,
                        n_embd: int = 32, n_head: int = 2, n_ff: int = 64, n_layer: int = 2, seed: int = 7) -> Path:
    """A LLaVA-style `mlp` projector: (image_size / patch_size)^2 image tokens of width n_embd_text. The graph
    runs n_layer - 1 ViT blocks (llava takes the second-to-last layer's output), so n_layer >= 2."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    w = GGUFWriter(str(path), "clip")
    w.add_string("general.name", "synthetic-mlp-projector")
    w.add_uint32("general.file_type", 0)                      # all f32
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    def tensor(name: str, *shape: int, scale: float = 0.05) -> None:
        w.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def ones(name: str, n: int) -> None:
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    n_patches = (image_size // patch_size) ** 2
    tensor("v.patch_embd.weight", n_embd, 3, patch_size, patch_size)   # conv kernel, ne [p, p, 3, n_embd]
    tensor("v.patch_embd.bias", n_embd)
    tensor("v.class_embd", n_embd)
    tensor("v.position_embd.weight", n_patches + 1, n_embd)             # + 1: the class embedding's position
    ones("v.pre_ln.weight", n_embd)
    tensor("v.pre_ln.bias", n_embd)
    for i in range(n_layer):
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensor(f"v.blk.{i}.{name}.weight", n_embd, n_embd)
            tensor(f"v.blk.{i}.{name}.bias", n_embd)
        ones(f"v.blk.{i}.ln1.weight", n_embd)
        tensor(f"v.blk.{i}.ln1.bias", n_embd)
        ones(f"v.blk.{i}.ln2.weight", n_embd)
        tensor(f"v.blk.{i}.ln2.bias", n_embd)
        tensor(f"v.blk.{i}.ffn_up.weight", n_ff, n_embd)
        tensor(f"v.blk.{i}.ffn_up.bias", n_ff)
        tensor(f"v.blk.{i}.ffn_down.weight", n_embd, n_ff)
        tensor(f"v.blk.{i}.ffn_down.bias", n_embd)
    tensor("mm.0.weight", n_embd_text, n_embd)
    tensor("mm.0.bias", n_embd_text)
    tensor("mm.2.weight", n_embd_text, n_embd_text)
    tensor("mm.2.bias", n_embd_text)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def image_tokens(image_size: int = 32, patch_size: int = 8) -> int:
    """How many embeddings write_mlp_projector's projector makes of any one image."""
    return (image_size // patch_size) ** 2


def llama_build_without_mtmd(folder: Path) -> Path:
    """A llama.cpp "build" without its multimodal library: `folder` holding links to the installed wheel's
    libllama and libggml* but no libmtmd (what LLAMA_CPP_LIB_PATH names for a build of one's own)."""
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib"
    folder.mkdir()
    for f in lib.iterdir():
        if f.name.startswith(("libllama", "libggml")):
            (folder / f.name).symlink_to(f)
    assert not list(folder.glob("libmtmd*"))
    return folder
