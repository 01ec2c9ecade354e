"""Images in requests, whatever the dialect: base64 (Ollama `images`, Anthropic `image` blocks) or `data:` URLs
(OpenAI `image_url`, Responses `input_image`) -> the image's bytes, checked before anything reaches a runner.

Checked here (docs/architecture.md, "Images"): at most MAX_IMAGE_BYTES encoded and IMAGE_MAX_PIXELS pixels (read
from the header, before any pixel is decoded: a decompression bomb is refused by its stated size), a format Pillow
knows, and a file whose structure holds (`verify`: a truncated or corrupt file is a 400 here). The runner decodes
the pixels (runner/prompt/media.py) and refuses what still fails there with a 400 of its own, never a crash. An http(s)
image URL is refused: nothing touches the network unasked.
"""
from __future__ import annotations

import base64
import binascii
import io
import warnings

from PIL import Image

from app.engine.protocol import IMAGE_MAX_PIXELS

from ..http.errors import ApiError

MAX_IMAGE_BYTES = 20 * 1024 * 1024          # encoded, per image (what OpenAI and Anthropic accept)
MAX_IMAGES = 16                             # per request


def count(req) -> int:
    return len(req.images or []) + sum(len(m.get("images") or []) for m in req.messages or [] if isinstance(m, dict))


def from_base64(value, where: str, param: str) -> bytes:
    """A base64 image (a data: URL is taken too, as Ollama's clients sometimes send one) -> checked bytes."""
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"{where} must be a base64-encoded image", param=param)
    if value.startswith("data:"):
        return from_url(value, where, param)
    return check(_b64(value, where, param), where, param)


def from_url(url, where: str, param: str) -> bytes:
    """A `data:image/...;base64,...` URL -> checked bytes; an http(s) URL is refused (never fetched)."""
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{where} must be a data: URL holding a base64 image", param=param)
    low = url[:8].lower()
    if low.startswith(("http://", "https://")):
        raise ApiError(400, f"{where}: image URLs are not fetched (nothing here touches the network unasked); send "
                            "the image itself as a data: URL (data:image/png;base64,...)", param=param)
    head, sep, data = url.partition(",")
    if not head.lower().startswith("data:") or not sep or not head.lower().endswith(";base64"):
        raise ApiError(400, f"{where} must be a data: URL holding a base64 image (data:image/png;base64,...)",
                       param=param)
    return check(_b64(data, where, param), where, param)


def _b64(text: str, where: str, param: str) -> bytes:
    if len(text) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise ApiError(400, f"{where}: the image is larger than {MAX_IMAGE_BYTES >> 20} MiB", param=param)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where} is not valid base64", param=param) from None


def check(data: bytes, where: str, param: str) -> bytes:
    """`data` is an image of a known format within the size limits, whose structure holds; else a 400."""
    if len(data) > MAX_IMAGE_BYTES:
        raise ApiError(400, f"{where}: the image is larger than {MAX_IMAGE_BYTES >> 20} MiB", param=param)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                w, h = im.size
                if w <= 0 or h <= 0 or w * h > IMAGE_MAX_PIXELS:
                    raise ApiError(400, f"{where}: the image is {w}x{h} pixels; at most {IMAGE_MAX_PIXELS} pixels "
                                        "are taken", param=param)
                im.verify()
    except ApiError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ApiError(400, f"{where}: the image states a size beyond {IMAGE_MAX_PIXELS} pixels "
                            "(a decompression bomb?)", param=param) from None
    except Exception as e:  # noqa: BLE001 - Pillow's many errors for data that is no image it knows
        raise ApiError(400, f"{where} is not an image that can be read ({type(e).__name__}: {e})",
                       param=param) from None
    return data


def limit(req, param: str = "messages") -> None:
    n = count(req)
    if n > MAX_IMAGES:
        raise ApiError(400, f"at most {MAX_IMAGES} images per request, got {n}", param=param)
