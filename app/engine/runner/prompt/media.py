"""Images in a prompt, through llama.cpp's mtmd (docs/architecture.md, "Images").

A model with a projector (`Layout.mmproj_path`) gets one mtmd context at load. Admission puts mtmd's media marker
where each image goes (before the text of the message that carries it, as Ollama does), decodes the images with
Pillow (never with mtmd's own file helper, which may start an `ffprobe` process for a buffer it cannot read) and
tokenizes the prompt with `mtmd_tokenize` into text and image chunks.

The step loop works on token arrays, so an image's positions are written into the prompt as negative pseudo-tokens
derived from the image's hash: the prompt cache then matches a conversation about the same picture like any other
prefix (and never one about another picture), and the scheduler knows an image starts where the prompt holds a
negative id. The context thread feeds an image whole, with `mtmd_helper_eval_chunk_single` (encode, then decode
its embeddings into the sequence's cells), one image per step, so other sequences wait no longer than for a
long prompt chunk.

Handled: projectors whose image positions advance one per embedding (no M-RoPE): LLaVA-style `mlp`/`ldp`,
Gemma 3, SmolVLM/Idefics3, Pixtral, InternVL, MiniCPM-V, LFM2... (llama.cpp's clip decides the graph). Models
with M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) are refused at load: their positions are not the token count.
The bindings come from `mtmd_lib.load()`, not an import at the top: a llama.cpp build without libmtmd still loads
this module and serves text (a Media cannot be made there: mtmd_lib.VisionUnavailable).
Covered by tests/integration/engine/test_vision_runner.py (images through a real runner).
"""
from __future__ import annotations

import ctypes
import hashlib
import io
import logging

from llama_cpp import llama_cpp as L
from PIL import Image

from app.engine.protocol import IMAGE_MAX_PIXELS
from app.ggml import mtmd_lib

log = logging.getLogger("strata.engine")

CHUNK_TEXT, CHUNK_IMAGE = 0, 1
PSEUDO_SPAN = 1 << 30                        # pseudo-token ids are -(1 .. 2^30)


class MediaError(ValueError):
    """A request's images cannot be used (not an image, too large, markers that do not match): a 400."""
    kind = "invalid"


class Media:
    """The runner's mtmd context for one loaded model (the context thread evaluates, admission tokenizes)."""

    def __init__(self, model, mmproj_path: str, n_threads: int, use_gpu: bool):
        M = mtmd_lib.load()
        params = M.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = max(1, n_threads)
        params.print_timings = False
        self.ctx = M.mtmd_init_from_file(mmproj_path.encode(), model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not load the projector {mmproj_path} for this model")
        if not M.mtmd_support_vision(self.ctx):
            self.close()
            raise RuntimeError(f"the projector {mmproj_path} has no vision encoder")
        if M.mtmd_decode_use_mrope(self.ctx):
            self.close()
            raise RuntimeError(f"the projector {mmproj_path} needs M-RoPE positions (Qwen2-VL family), "
                               "which Strata does not handle yet")
        self.marker = (M.mtmd_default_marker() or b"<__media__>").decode()

    def close(self) -> None:
        M = mtmd_lib.load()
        if self.ctx:
            M.mtmd_free(self.ctx)
            self.ctx = None

    def tokenize(self, text: str, images: list[bytes], add_special: bool) -> "MediaPrompt":
        """`text` (with one marker per image, in order) and the images as one prompt; MediaError when bad."""
        M = mtmd_lib.load()
        bitmaps = [bitmap(data) for data in images]
        try:
            arr = (M.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
            raw = text.encode()
            inp = M.mtmd_input_text()
            inp.text, inp.text_len, inp.add_special, inp.parse_special = raw, len(raw), add_special, True
            chunks = M.mtmd_input_chunks_init()
            rc = M.mtmd_tokenize(self.ctx, chunks, ctypes.byref(inp), arr, len(bitmaps))
            if rc != 0:
                M.mtmd_input_chunks_free(chunks)
                raise MediaError("the images do not match the prompt's image markers" if rc == 1 else
                                 f"the images could not be prepared (mtmd_tokenize returned {rc})")
            return MediaPrompt(chunks)
        finally:
            for b in bitmaps:
                M.mtmd_bitmap_free(b)

    def eval_image(self, lctx, chunk, n_past: int, seq_id: int, n_batch: int) -> int:
        """Encode one image chunk and decode its embeddings into `seq_id`'s cells from n_past (context thread).
        Returns the new n_past; RuntimeError when llama.cpp fails."""
        M = mtmd_lib.load()
        new_past = L.llama_pos(0)
        rc = M.mtmd_helper_eval_chunk_single(self.ctx, lctx, chunk, n_past, seq_id, n_batch, False,
                                             ctypes.byref(new_past))
        if rc != 0:
            raise RuntimeError(f"the image could not be encoded (mtmd returned {rc})")
        return int(new_past.value)


class MediaPrompt:
    """A tokenized prompt with images: its token array (images as pseudo-tokens) and the image chunks by start."""

    def __init__(self, chunks):
        M = mtmd_lib.load()
        self.chunks = chunks
        self.images: dict[int, tuple[object, int]] = {}    # prompt position -> (chunk, n tokens)
        toks: list[int] = []
        for i in range(M.mtmd_input_chunks_size(chunks)):
            c = M.mtmd_input_chunks_get(chunks, i)
            kind = M.mtmd_input_chunk_get_type(c)
            if kind == CHUNK_TEXT:
                n = ctypes.c_size_t(0)
                p = M.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(n))
                toks.extend(p[j] for j in range(n.value))
            elif kind == CHUNK_IMAGE:
                n = M.mtmd_input_chunk_get_n_tokens(c)
                self.images[len(toks)] = (c, n)
                toks.extend(pseudo_tokens((M.mtmd_input_chunk_get_id(c) or b"").decode(), n))
            else:
                self.free()
                raise MediaError("only images are supported (this prompt holds audio)")
        self.tokens = toks
        self.starts = sorted(self.images)

    def free(self) -> None:
        M = mtmd_lib.load()
        if self.chunks:
            M.mtmd_input_chunks_free(self.chunks)
            self.chunks = None
            self.images = {}

    def next_start(self, pos: int) -> int | None:
        """The first image start at or after `pos`."""
        for s in self.starts:
            if s >= pos:
                return s
        return None

    def inside(self, pos: int) -> int | None:
        """The start of the image that `pos` falls strictly inside (so a prefix ending at pos cuts it), else None."""
        for s in self.starts:
            if s < pos < s + self.images[s][1]:
                return s
        return None


def pseudo_tokens(image_id: str, n: int) -> list[int]:
    """n negative ids that only this image (by its hash) produces, one per position."""
    h = int(hashlib.sha256(image_id.encode()).hexdigest()[:12], 16)
    return [-(1 + (h + i) % PSEUDO_SPAN) for i in range(n)]


def bitmap(data: bytes):
    """An mtmd bitmap of the image in `data` (RGB), with the image's sha256 as its id; MediaError when bad."""
    M = mtmd_lib.load()
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > IMAGE_MAX_PIXELS:
                raise MediaError(f"the image is {im.width}x{im.height}: more than {IMAGE_MAX_PIXELS} pixels")
            rgb = im.convert("RGB")
    except MediaError:
        raise
    except Exception as e:  # noqa: BLE001 - Pillow's many decode errors: the client's data is bad
        raise MediaError(f"the image could not be decoded: {e}") from None
    raw = rgb.tobytes()
    bmp = M.mtmd_bitmap_init(rgb.width, rgb.height, (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw))
    if not bmp:
        raise MediaError("the image could not be prepared")
    M.mtmd_bitmap_set_id(bmp, hashlib.sha256(data).hexdigest().encode())
    return bmp
