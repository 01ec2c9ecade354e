"""Images through a real runner process: SmolLM2 with the synthetic projector of tests/support/mmproj_factory.py.
An image in a chat message is encoded through mtmd and decoded into the sequence's cells; the same picture asked
about again is found in the prompt cache (image included), another picture is not; bad images and images sent to
a model without a projector fail that request only, and the runner goes on serving."""
from __future__ import annotations

import asyncio
import io
import itertools
from dataclasses import replace

import pytest
from PIL import Image

from app.engine import protocol as P
from app.engine.client import RequestError, RunnerClient
from engine_util import assert_greedy_agrees, cpu_layout, collect as collect_logprobs
from mmproj_factory import image_tokens, write_mlp_projector

_ids = itertools.count()


def png(color=(200, 10, 10), size=(50, 40)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def runner(loop, smollm2_path, tmp_path_factory):
    mmproj = write_mlp_projector(tmp_path_factory.mktemp("mmproj") / "mmproj.gguf")
    layout = replace(cpu_layout(smollm2_path, num_ctx=1024, num_parallel=2, n_batch=256), mmproj_path=str(mmproj))
    c = RunnerClient(layout, n_threads=1, model_name="smollm2-vision")
    loop.run_until_complete(c.start())
    yield c
    loop.run_until_complete(c.close())


def ask(images, text="What is in this picture?", n=4) -> P.GenerateRequest:
    msg = {"role": "user", "content": text}
    if images:
        msg["images"] = images
    return P.GenerateRequest(id=f"v{next(_ids)}", messages=[msg], num_predict=n,
                             sampling=P.SamplingParams(temperature=0.0, repeat_penalty=1.0))


def run(loop, coro, timeout=300):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


async def collect(client, req):
    events = [ev async for ev in client.generate(req)]
    return "".join(e.text for e in events if isinstance(e, P.TokenEvent)), events[-1]


def test_image_is_encoded_and_answered(loop, runner):
    _, text_only = run(loop, collect(runner, ask(None)))
    _, done = run(loop, collect(runner, ask([png()])))
    assert isinstance(done, P.DoneEvent) and done.reason in ("stop", "length")
    # the image's 16 embeddings are part of the prompt (the marker itself is no text)
    assert done.prompt_tokens >= text_only.prompt_tokens + image_tokens() - 2


def test_same_image_again_comes_from_the_prompt_cache(loop, runner):
    picture = png((10, 200, 10))
    _, first = run(loop, collect(runner, ask([picture], "Describe it.")))
    _, again = run(loop, collect(runner, ask([picture], "Describe it.")))
    assert again.prompt_tokens == first.prompt_tokens
    assert again.cached_tokens >= first.prompt_tokens - 2       # image included: it was not encoded again
    _, other = run(loop, collect(runner, ask([png((10, 10, 200))], "Describe it.")))
    # another picture: at most the text before the image is reused (its pseudo-tokens differ from the first)
    assert other.cached_tokens < first.prompt_tokens - image_tokens()


def test_two_images_in_one_conversation(loop, runner):
    req = ask([png((1, 2, 3)), png((4, 5, 6), (64, 64))], "Compare them.")
    _, done = run(loop, collect(runner, req))
    assert done.reason in ("stop", "length")


@pytest.mark.parametrize("data", [b"not an image at all", png()[:40],
                                  b"\x89PNG\r\n\x1a\n" + b"\x00" * 64])
def test_bad_image_fails_the_request_not_the_runner(loop, runner, data):
    with pytest.raises(RequestError, match="image"):
        run(loop, collect(runner, ask([data])))
    assert runner.alive
    _, done = run(loop, collect(runner, ask([png()])))
    assert done.reason in ("stop", "length")


def test_images_to_a_model_without_projector_are_refused(loop, smollm2_path):
    c = RunnerClient(cpu_layout(smollm2_path, num_ctx=256, num_parallel=1, n_batch=64), n_threads=1)
    run(loop, c.start())
    try:
        with pytest.raises(RequestError, match="vision"):
            run(loop, collect(c, ask([png()])))
        assert c.alive
    finally:
        run(loop, c.close())


def test_images_and_text_in_parallel_sequences(loop, runner):
    """Two sequences at once (the runner has 2 slots): one with two images, one text only; both finish, and each
    answer is the one it gets alone (its cells were not disturbed by the other's batches): token for token up to a
    near-tie that a shared batch may round the other way (which rows share a step depends on when each arrives)."""
    pics = [png((50, 60, 70)), png((80, 90, 100), (40, 64))]

    def image_ask():
        return replace(ask(pics, "Compare these.", n=6), logprobs=True, top_logprobs=5)

    def text_ask():
        return replace(ask(None, "Tell me a story about a cat.", n=6), logprobs=True, top_logprobs=5)

    img_alone = run(loop, collect_logprobs(runner, image_ask()))
    text_alone = run(loop, collect_logprobs(runner, text_ask()))

    async def both():
        return await asyncio.gather(collect_logprobs(runner, image_ask()), collect_logprobs(runner, text_ask()))
    img, txt = run(loop, both())
    assert img[1].reason in ("stop", "length") and txt[1].reason in ("stop", "length")
    assert img[1].prompt_tokens == img_alone[1].prompt_tokens
    assert_greedy_agrees(img_alone[2], img[2])
    assert_greedy_agrees(text_alone[2], txt[2])


def test_a_llama_cpp_build_without_the_vision_library_serves_text_and_refuses_images(loop, smollm2_path,
                                                                                   tmp_path, monkeypatch):
    """LLAMA_CPP_LIB_PATH names a llama.cpp folder with libllama and libggml* but no libmtmd (a build without its
    multimodal target: here links to the wheel's own libraries): the runner of a model with a projector loads,
    says why it has no vision (Loaded.vision_missing), serves text, and refuses an image with that reason."""
    from mmproj_factory import llama_build_without_mtmd, write_mlp_projector

    build = llama_build_without_mtmd(tmp_path / "llama-no-mtmd")
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(build))      # the spawned runner reads it
    monkeypatch.delenv("MTMD_CPP_LIB", raising=False)
    mmproj = write_mlp_projector(tmp_path / "mmproj.gguf")
    layout = replace(cpu_layout(smollm2_path, num_ctx=512, num_parallel=1, n_batch=128), mmproj_path=str(mmproj))
    c = RunnerClient(layout, n_threads=1, model_name="smollm2-no-mtmd")
    loaded = run(loop, c.start())
    try:
        assert "libmtmd" in loaded.vision_missing and str(build) in loaded.vision_missing
        assert not any("projector" in kinds and kinds["projector"] for kinds in loaded.actual.values())
        _, done = run(loop, collect(c, ask(None)))
        assert done.reason in ("stop", "length") and done.completion_tokens > 0
        with pytest.raises(RequestError, match="libmtmd is missing"):
            run(loop, collect(c, ask([png()])))
        assert c.alive
        _, done = run(loop, collect(c, ask(None, "Say hello.")))
        assert done.completion_tokens > 0
    finally:
        run(loop, c.close())
