"""Images through every API on a live server, with the official clients: SmolLM2 made a vision model by the
synthetic projector of tests/support/mmproj_factory.py (/api/create `projector`), beside a text-only SmolLM2. Each dialect
takes an image and answers; /api/show lists the `vision` capability and the projector; bad images (not an image,
truncated, huge dimensions, a decompression bomb, an http URL) are 400s and the runner goes on serving; a
text-only model asked about an image is a 400 naming the missing capability."""
from __future__ import annotations

import base64
import io
import struct
import zlib

import anthropic
import httpx
import ollama
import openai
import pytest
from PIL import Image

from mmproj_factory import llama_build_without_mtmd, write_mlp_projector

VISION, TEXT = "smollm2-vision:latest", "smollm2-text:latest"
NO_REPLY = {"num_predict": 3, "temperature": 0}


def png(color=(200, 10, 10), size=(48, 40)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header states width x height, with one tiny compressed row: a decompression bomb's shape."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + \
        chunk(b"IEND", b"")


def bomb() -> bytes:
    """A real 1-bit PNG of 8000 x 8000 pixels (64 M, beyond the limit) that is a few kB on the wire."""
    buf = io.BytesIO()
    Image.new("1", (8000, 8000), 0).save(buf, "PNG")
    return buf.getvalue()


BAD = {"not an image": b"this is not an image", "truncated": png()[:60],
       "huge dimensions": png_claiming(100_000, 100_000), "decompression bomb": bomb()}


@pytest.fixture(scope="module")
def server(live_service, tmp_path_factory, smollm2_path):
    home = tmp_path_factory.mktemp("vision")
    mmproj = write_mlp_projector(home / "mmproj-synthetic.gguf")
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m", home=home)
    for name, extra in ((VISION, {"projector": str(mmproj)}), (TEXT, {})):
        r = httpx.post(svc.url + "/api/create", json={"model": name, "from": str(smollm2_path), "stream": False,
                                                      **extra}, timeout=120)
        assert r.status_code == 200, r.text
    yield svc


def test_show_lists_vision_and_the_projector(server):
    shown = ollama.Client(host=server.url).show(VISION)
    assert "vision" in shown.capabilities
    raw = httpx.post(server.url + "/api/show", json={"model": VISION}).json()
    assert raw["projector_info"]["clip.projector_type"] == "mlp"
    assert raw["strata"]["projector"]["projector_type"] == "mlp"
    assert "vision" not in ollama.Client(host=server.url).show(TEXT).capabilities


def test_ollama_chat_and_generate_take_images(server):
    c = ollama.Client(host=server.url, timeout=300)
    r = c.chat(model=VISION, messages=[{"role": "user", "content": "What is this?", "images": [png()]}],
               options=NO_REPLY)
    assert r.done and r.prompt_eval_count > 16
    g = c.generate(model=VISION, prompt="Describe the picture.", images=[png((0, 0, 255))], options=NO_REPLY)
    assert g.done and g.prompt_eval_count > 16


def test_openai_image_url_data_url(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=300)
    r = c.chat.completions.create(model=VISION, max_tokens=3, temperature=0, messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is in the image?"},
        {"type": "image_url", "image_url": {"url": data_url(png())}}]}])
    assert r.choices[0].finish_reason in ("stop", "length") and r.usage.prompt_tokens > 16


def test_openai_http_image_url_is_refused_not_fetched(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=60)
    with pytest.raises(openai.BadRequestError, match="not fetched"):
        c.chat.completions.create(model=VISION, max_tokens=3, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}]}])


def test_responses_input_image(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=300)
    r = c.responses.create(model=VISION, max_output_tokens=3, temperature=0, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": data_url(png())}]}])
    assert r.status == "completed" or r.incomplete_details is not None
    assert r.usage.input_tokens > 16


def test_anthropic_image_block(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="x", timeout=300)
    m = c.messages.create(model=VISION, max_tokens=3, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(png()).decode()}},
        {"type": "text", "text": "What is this?"}]}])
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens > 16          # the image's tokens, cached or not


@pytest.mark.parametrize("kind", list(BAD))
def test_bad_images_are_400_and_the_runner_survives(server, kind):
    c = ollama.Client(host=server.url, timeout=300)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model=VISION, messages=[{"role": "user", "content": "What is this?", "images": [BAD[kind]]}],
               options=NO_REPLY)
    assert e.value.status_code == 400, e.value
    assert "image" in str(e.value)
    r = c.chat(model=VISION, messages=[{"role": "user", "content": "And this?", "images": [png()]}],
               options=NO_REPLY)
    assert r.done


def test_text_only_model_refuses_images_naming_vision(server):
    c = ollama.Client(host=server.url, timeout=300)
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model=TEXT, messages=[{"role": "user", "content": "What is this?", "images": [png()]}])
    assert e.value.status_code == 400 and "vision" in str(e.value)
    o = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=60)
    with pytest.raises(openai.BadRequestError, match="vision"):
        o.chat.completions.create(model=TEXT, max_tokens=3, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(png())}}]}])


def test_ps_counts_the_projector_predicted_and_actual(server):
    c = ollama.Client(host=server.url, timeout=300)
    c.chat(model=VISION, messages=[{"role": "user", "content": "Hi", "images": [png()]}], options=NO_REPLY)
    ps = httpx.get(server.url + "/api/ps").json()["models"]
    m = next(x for x in ps if x["name"] == VISION)
    st = m["strata"]
    predicted, actual = st["predicted_kinds"]["CPU"]["projector"], st["actual"]["CPU"]["projector"]
    weights = 1_501_056                                     # the synthetic projector's tensors (exact)
    print(f"\nprojector on CPU: predicted {predicted} bytes, actual {actual} bytes")
    assert actual >= weights - 10_000                       # clip's "model size" line, 2 decimals of MiB
    assert actual <= predicted <= 1.25 * actual             # the compute estimate is an upper bound here
    assert m["size"] == sum(st["predicted"].values()) and st["predicted"]["CPU"] > predicted   # in /api/ps's size
    assert any("vision projector" in r for r in st["layout"]["reasons"])


def test_anthropic_count_tokens_counts_the_image(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="x", timeout=300)
    text = [{"type": "text", "text": "What is this?"}]
    image = [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": base64.b64encode(png()).decode()}}]
    plain = c.messages.count_tokens(model=VISION, messages=[{"role": "user", "content": text}]).input_tokens
    with_image = c.messages.count_tokens(model=VISION, messages=[{"role": "user", "content": image + text}])
    assert with_image.input_tokens >= plain + 16 - 2


def test_a_build_without_the_vision_library_says_why_in_ps_and_refuses_images(live_service, tmp_path, smollm2_path,
                                                                             monkeypatch):
    """LLAMA_CPP_LIB_PATH names a llama.cpp build without libmtmd: the vision model still loads and answers text,
    /api/ps says why it has no vision (strata.vision_missing), and an image is a 400 carrying that reason."""
    build = llama_build_without_mtmd(tmp_path / "llama-no-mtmd")
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(build))      # the runners the service spawns read it
    monkeypatch.delenv("MTMD_CPP_LIB", raising=False)
    svc = live_service(n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m", home=tmp_path / "home")
    mmproj = write_mlp_projector(tmp_path / "mmproj-synthetic.gguf")
    r = httpx.post(svc.url + "/api/create", json={"model": VISION, "from": str(smollm2_path), "stream": False,
                                                  "projector": str(mmproj)}, timeout=120)
    assert r.status_code == 200, r.text
    c = ollama.Client(host=svc.url, timeout=300)
    assert c.chat(model=VISION, messages=[{"role": "user", "content": "Hi"}], options=NO_REPLY).done
    ps = httpx.get(svc.url + "/api/ps").json()["models"]
    why = next(m for m in ps if m["name"] == VISION)["strata"]["vision_missing"]
    assert "libmtmd" in why and str(build) in why
    with pytest.raises(ollama.ResponseError) as e:
        c.chat(model=VISION, messages=[{"role": "user", "content": "What is this?", "images": [png()]}],
               options=NO_REPLY)
    assert e.value.status_code == 400 and "libmtmd" in str(e.value)
