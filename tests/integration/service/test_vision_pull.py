"""A vision model pulled from an Ollama-style registry (tests/support/registry_fixture.py on loopback) keeps its projector
layer (`application/vnd.ollama.image.projector`): the model lists the capability `vision` and answers a chat with an
image through the official ollama client. The model is a synthetic dense llama (n_embd 64) and the projector the
synthetic `mlp` one of tests/support/mmproj_factory.py made for that width."""
from __future__ import annotations

import hashlib
import json
import io

import httpx
import ollama
import pytest
from PIL import Image

from gguf_factory import write_dense_llama
from mmproj_factory import write_mlp_projector
from registry_fixture import MEDIA, Registry


@pytest.fixture(scope="module")
def setup(live_service, tmp_path_factory):
    home = tmp_path_factory.mktemp("vision-pull")
    reg = Registry().start()
    model = write_dense_llama(home / "m.gguf", n_embd=64).read_bytes()
    proj = write_mlp_projector(home / "mmproj.gguf", n_embd_text=64).read_bytes()
    reg.add_model("library/tinyvision", "latest", model, extra_layers=[
        {"mediaType": MEDIA["projector"], "digest": reg.add_blob(proj), "size": len(proj)}])
    svc = live_service(n_threads=1, num_ctx=512, num_parallel=1, keep_alive="10m", home=home)
    yield svc, reg
    svc.stop()
    reg.stop()


def test_pulled_projector_makes_a_vision_model(setup):
    svc, reg = setup
    c = ollama.Client(host=svc.url, timeout=300)
    name = f"{reg.host}/library/tinyvision:latest"
    c.pull(name, insecure=True)
    shown = httpx.post(svc.url + "/api/show", json={"model": name}).json()
    assert "vision" in shown["capabilities"] and shown["projector_info"]["clip.projector_type"] == "mlp"
    buf = io.BytesIO()
    Image.new("RGB", (20, 30), (9, 99, 199)).save(buf, "JPEG")
    r = c.chat(model=name, messages=[{"role": "user", "content": "What is it?", "images": [buf.getvalue()]}],
               options={"num_predict": 2, "temperature": 0})
    assert r.done and r.prompt_eval_count > 16


def test_hugging_face_pull_takes_the_repos_projector(live_service, tmp_path, monkeypatch):
    """A Hub repository (the stand-in on loopback, through huggingface_hub) with a Q8_0 model and two projectors:
    the F16 projector comes along (no projector of the model's quantization), and the model takes an image."""

    reg = Registry().start()
    try:
        model = write_dense_llama(tmp_path / "m.gguf", n_embd=64, seed=11).read_bytes()
        f16 = write_mlp_projector(tmp_path / "p16.gguf", n_embd_text=64).read_bytes()
        other = write_mlp_projector(tmp_path / "p32.gguf", n_embd_text=64, seed=3).read_bytes()
        reg.add_hub_repo("someone/TinyVision-GGUF", {"tinyvision-Q8_0.gguf": model, "mmproj-tinyvision-F16.gguf": f16,
                                                     "mmproj-tinyvision-F32.gguf": other})
        monkeypatch.setenv("HF_ENDPOINT", reg.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-cache"))
        svc = live_service(n_threads=1, num_ctx=512, num_parallel=1, keep_alive="10m", home=tmp_path / "home")
        try:
            c = ollama.Client(host=svc.url, timeout=300)
            name = "hf.co/someone/TinyVision-GGUF:Q8_0"
            assert c.pull(name).status == "success"
            shown = httpx.post(svc.url + "/api/show", json={"model": name}).json()
            assert "vision" in shown["capabilities"]
            assert shown["strata"]["projector"]["path"].endswith(hashlib.sha256(f16).hexdigest() + ".gguf")
            buf = io.BytesIO()
            Image.new("RGB", (16, 16), (1, 2, 3)).save(buf, "PNG")
            r = c.chat(model=name, messages=[{"role": "user", "content": "What?", "images": [buf.getvalue()]}],
                       options={"num_predict": 2, "temperature": 0})
            assert r.done and r.prompt_eval_count > 16
        finally:
            svc.stop()
    finally:
        reg.stop()


def test_push_sends_the_projector_and_a_pull_brings_it_back(setup):
    """The pulled vision model pushed under another name carries its projector layer; pulling that name back gives
    a model with the capability `vision` again."""
    svc, reg = setup
    c = ollama.Client(host=svc.url, timeout=300)
    src = f"{reg.host}/library/tinyvision:latest"
    c.pull(src, insecure=True)
    dst = f"{reg.host}/me/tinyvision-copy:v1"
    c.copy(src, dst)
    c.push(dst, insecure=True)
    manifest = json.loads(reg.manifests[("me/tinyvision-copy", "v1")])
    assert [x["mediaType"] for x in manifest["layers"]].count(MEDIA["projector"]) == 1
    c.delete(dst)
    c.pull(dst, insecure=True)
    assert "vision" in httpx.post(svc.url + "/api/show", json={"model": dst}).json()["capabilities"]
