"""Images in requests (generation/images.py): base64 and data: URLs decoded and checked before any runner sees them
(a known format, a size within bounds read from the header, a structure that holds), an http(s) URL refused
without being fetched, and each refusal a 400 naming the field. The same images through every dialect on a live
service: tests/integration/service/test_vision_api.py."""
from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from PIL import Image

from app.engine.protocol import IMAGE_MAX_PIXELS
from app.service.generation import images
from app.service.generation.request import GenerationRequest
from app.service.http.errors import ApiError


def png(size=(8, 6)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(buf, "PNG")
    return buf.getvalue()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG header that states a size, with one tiny IDAT: what a decompression bomb looks like up front."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b"")


def refusal(fn, *args) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args)
    assert e.value.status == 400
    return e.value


def test_a_png_as_base64_and_as_a_data_url_is_taken_unchanged():
    data = png()
    b64 = base64.b64encode(data).decode()
    assert images.from_base64(b64, "images[0]", "images") == data
    assert images.from_base64("data:image/png;base64," + b64, "images[0]", "images") == data
    assert images.from_url("data:image/png;base64," + b64, "image_url", "messages") == data


@pytest.mark.parametrize("value, says", [
    ("", "must be a base64-encoded image"),
    ("not base64 !!", "is not valid base64"),
    (base64.b64encode(b"just some text").decode(), "is not an image that can be read"),
])
def test_bad_base64_images_are_400_naming_the_field(value, says):
    e = refusal(images.from_base64, value, "messages[0].images[0]", "messages")
    assert says in e.message and e.message.startswith("messages[0].images[0]") and e.param == "messages"


def test_an_http_url_is_refused_and_never_fetched():
    e = refusal(images.from_url, "https://example.com/cat.png", "image_url", "messages")
    assert "not fetched" in e.message


def test_a_data_url_without_base64_is_refused():
    e = refusal(images.from_url, "data:image/png," + "x" * 10, "image_url", "messages")
    assert "data: URL holding a base64 image" in e.message


def test_a_stated_size_beyond_the_limit_is_refused_before_decoding():
    side = int(IMAGE_MAX_PIXELS ** 0.5) + 100
    e = refusal(images.check, png_claiming(side, side), "image", "messages")
    assert str(IMAGE_MAX_PIXELS) in e.message


def test_the_number_of_images_per_request_is_bounded():
    one = png()
    ok = GenerationRequest(model="m", messages=[{"role": "user", "content": "", "images": [one] * images.MAX_IMAGES}])
    images.limit(ok)
    too_many = GenerationRequest(model="m", images=[one], messages=ok.messages)
    e = refusal(images.limit, too_many)
    assert f"at most {images.MAX_IMAGES} images" in e.message
