"""The HTTP API on a live loopback server with the real SmolLM2 model, driven by the official, unmodified
`ollama` and `openai` Python clients (plus raw HTTP for the bad-input, origin and Strata-only cases).

One server for the module; every generation is tiny (num_predict <= 8, num_ctx 1024, 1 thread)."""
from __future__ import annotations

import asyncio
import base64
import json
import math
import struct

import httpx
import jsonschema
import ollama
import openai
import pytest

from app import __version__
from app.discovery.host import huge_pages_usable
from service_util import wait_for


MODEL = "smollm2:135m"
TINY = {"num_predict": 6, "temperature": 0, "seed": 1}
# seconds: a bound only a hang reaches (below pytest's 600 s per test); beside two CPU hogs a load and a first token
# took over 120 s
HANG = 480


@pytest.fixture(scope="module")
def server(live_service, smollm2_path):
    return live_service(n_threads=1, num_ctx=1024, num_parallel=2, keep_alive="10m", max_body=64 * 1024)


@pytest.fixture(scope="module")
def oc(server):
    return ollama.Client(host=server.url)


@pytest.fixture(scope="module")
def ai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, timeout=HANG) as c:
        yield c


# ---- models ---------------------------------------------------------------------------------------------

def test_version_and_root(http):
    answer = http.get("/api/version").json()
    # an Ollama release number Ollama's clients accept (Codex --oss needs 0.13.4 or newer), Strata's own beside it
    assert tuple(int(x) for x in answer["version"].split(".")) >= (0, 13, 4)
    assert answer["strata"]["version"] == __version__
    assert "running" in http.get("/").text


def test_list_and_show_with_ollama_client(oc):
    names = [m.model for m in oc.list().models]
    assert MODEL in names
    m = next(m for m in oc.list().models if m.model == MODEL)
    assert m.details.family == "llama" and m.details.quantization_level == "Q4_1" and m.size > 50_000_000
    assert len(m.digest) == 64 and int(m.digest, 16) >= 0                 # sha256 of the GGUF
    show = oc.show(MODEL)
    assert show.modelinfo["general.architecture"] == "llama"
    assert show.modelinfo["llama.context_length"] == 8192
    assert "completion" in show.capabilities
    assert "im_start" in show.template          # the GGUF's own chat template


def test_create_copy_delete_with_ollama_client(oc, http):
    oc.create(model="brief", from_=MODEL, system="Answer in one word.", parameters={"temperature": 0.1,
                                                                                     "stop": ["\n"]})
    show = oc.show("brief")
    assert "Answer in one word." in show.modelfile and "temperature" in show.parameters
    oc.copy("brief", "brief-copy")
    assert {"brief:latest", "brief-copy:latest"} <= {m.model for m in oc.list().models}
    oc.delete("brief-copy")
    with pytest.raises(ollama.ResponseError) as e:
        oc.delete("brief-copy")
    assert e.value.status_code == 404
    # a Modelfile (the older API) works too, and its errors name the line
    r = http.post("/api/create", json={"model": "mf", "modelfile": f"FROM {MODEL}\nPARAMETER top_k 7",
                                       "stream": False})
    assert r.status_code == 200 and r.json() == {"status": "success"}
    r = http.post("/api/create", json={"model": "mf2", "modelfile": "FROM x\nPARAMETER top_k many"})
    assert r.status_code == 400 and "top_k" in r.json()["error"]
    r = http.post("/api/create", json={"model": "mf3", "from": "/nonexistent/model.gguf"})
    assert r.status_code in (400, 404) and r.json()["error"]


def test_pull_of_the_builtin_and_push_to_ollama_com_need_no_network(oc):
    """A pull of the built-in model's name is answered from its file (success, nothing written), and ollama.com
    cannot be pushed to (it needs Ollama's account key): a 400 answered without a connection. Real pulls:
    tests/integration/service/test_pull.py, tests/integration/service/test_names.py."""
    assert oc.pull(MODEL).status == "success"
    with pytest.raises(ollama.ResponseError) as e:
        oc.push("someone/model:latest")
    assert e.value.status_code == 400 and "ollama.com" in str(e.value)


# ---- generation -----------------------------------------------------------------------------------------

def test_generate_not_streamed(oc):
    r = oc.generate(model=MODEL, prompt="Why is the sky blue?", options=TINY)
    assert r.done and r.response.strip()
    assert r.done_reason in ("stop", "length")
    assert 0 < r.eval_count <= 6 and r.prompt_eval_count > 5
    assert r.total_duration >= r.eval_duration > 0 and r.prompt_eval_duration > 0
    again = oc.generate(model=MODEL, prompt="Why is the sky blue?", options=TINY)
    assert again.response == r.response        # temperature 0, same seed: same text
    assert r.context and all(isinstance(t, int) for t in r.context)
    raw = oc.generate(model=MODEL, prompt="<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", raw=True,
                      options=TINY)
    assert raw.response and raw.context is None                          # raw mode returns no context


def test_num_predict_zero_generates_nothing(oc):
    """num_predict 0 means no new token (llama-server's n_predict 0), not "unlimited": the fuzzer found a chat
    with num_predict 0 generating until its client gave up."""
    for r in (oc.generate(model=MODEL, prompt="Why is the sky blue?", options={**TINY, "num_predict": 0}),
              oc.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], options={**TINY, "num_predict": 0})):
        assert r.done and r.done_reason == "length"
        assert r.eval_count == 0 and r.prompt_eval_count > 0
    assert oc.generate(model=MODEL, prompt="Why is the sky blue?", options={**TINY, "num_predict": 0}).response == ""


def test_generate_with_go_template(oc, http):
    t = "<|im_start|>system\n{{ .System }}<|im_end|>\n<|im_start|>user\n{{ .Prompt }}<|im_end|>\n<|im_start|>assistant\n"
    r = oc.generate(model=MODEL, prompt="Hi", system="Be brief.", template=t, options=TINY)
    assert r.response and r.context is not None
    # the rendered template is the whole prompt: SmolLM2 tokenizes it to the same ids as the GGUF template would
    plain = oc.generate(model=MODEL, prompt="Hi", system="Be brief.", options=TINY)
    assert r.prompt_eval_count in (plain.prompt_eval_count, plain.prompt_eval_count + 1, plain.prompt_eval_count - 1)
    bad = http.post("/api/generate", json={"model": MODEL, "prompt": "x", "template": "{{ range .Messages }}{{ end }}"})
    assert bad.status_code == 400 and "not supported" in bad.json()["error"]


def test_generate_streamed(oc):
    parts = list(oc.generate(model=MODEL, prompt="Count: one, two,", options=TINY, stream=True))
    assert len(parts) >= 2 and all(not p.done for p in parts[:-1])
    last = parts[-1]
    assert last.done and last.response == "" and last.eval_count >= 1
    assert "".join(p.response for p in parts).strip()


def test_chat_streamed_and_not(oc):
    msgs = [{"role": "user", "content": "Say hello."}]
    r = oc.chat(model=MODEL, messages=msgs, options=TINY)
    assert r.message.role == "assistant" and r.message.content and r.done
    parts = list(oc.chat(model=MODEL, messages=msgs, options=TINY, stream=True))
    assert parts[-1].done and parts[-1].done_reason in ("stop", "length")
    assert "".join(p.message.content for p in parts) == r.message.content


def test_chat_logprobs(oc):
    r = oc.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], options=TINY, logprobs=True,
                top_logprobs=3)
    assert r.logprobs and len(r.logprobs) == r.eval_count
    first = r.logprobs[0]
    assert first.logprob <= 0 and len(first.top_logprobs) == 3
    assert first.top_logprobs[0].logprob >= first.top_logprobs[1].logprob
    # greedy: the chosen token is the most likely one
    assert first.token == first.top_logprobs[0].token


def test_json_schema_output(oc):
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    r = oc.generate(model=MODEL, prompt="Ollama is 22 years old. Reply in JSON.", format=schema,
                    options={"num_predict": 40, "temperature": 0})
    data = json.loads(r.response)
    assert isinstance(data["age"], int)


def test_a_grammar_that_cannot_continue_is_a_500_naming_it(http, oc):
    """A schema no token can satisfy (a NUL character) ends that request with an error that names the grammar;
    the runner lives on and the next request is served."""
    r = http.post("/api/generate", json={"model": MODEL, "prompt": "x", "stream": False,
                                         "format": {"type": "string", "pattern": "^\\x00$"}, "options": TINY})
    assert r.status_code == 500 and "format JSON schema grammar" in r.json()["error"], r.text
    assert oc.generate(model=MODEL, prompt="Hi", options=TINY).done


def test_response_format_replies_validate(ai):
    """Bounded so a reply always finishes well inside max_tokens: each one is JSON that validates."""
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "tags": {"type": "array", "items": {"enum": ["sun", "rain"]},
                                                        "maxItems": 2}},
              "required": ["city", "tags"], "additionalProperties": False}
    for seed in (1, 2, 3):
        r = ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}],
                                       response_format={"type": "json_schema", "json_schema": {"name": "w",
                                                                                               "schema": schema}},
                                       max_tokens=200, temperature=1.0, seed=seed)
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_embed(oc):
    r = oc.embed(model=MODEL, input=["hello world", "the sky is blue"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 576
    assert math.isclose(sum(x * x for x in r.embeddings[0]), 1.0, rel_tol=1e-3)
    assert r.embeddings[0] != r.embeddings[1] and r.prompt_eval_count > 0
    legacy = oc.embeddings(model=MODEL, prompt="hello world")
    assert len(legacy.embedding) == 576


def test_embeddings_are_in_the_request_log_with_their_lease(oc, http):
    """An embedding request's record (the Server window's request log) has its model's lease: the waits for the
    load and the slot, as a generation's has, not one undivided `answer`."""
    oc.embed(model=MODEL, input="hello world")
    rec = next(r for r in http.get("/api/requests").json()["requests"] if r["path"] == "/api/embed")
    assert rec["status"] == 200 and rec["model"] == MODEL
    assert [name for name, _ in rec["phases"]][:3] == ["prepare", "load", "queued"]


def test_embed_truncates_to_num_ctx(oc):
    """Ollama's /api/embed with truncate cuts an input to the load's num_ctx (a generative model embeds on its
    own context), and refuses it with truncate=false."""
    text = " ".join(f"item{i}" for i in range(120))            # 330 tokens with SmolLM2's tokenizer
    r = oc.embed(model=MODEL, input=text, options={"num_ctx": 256}, truncate=True)
    assert r.prompt_eval_count == 256 and len(r.embeddings[0]) == 576
    with pytest.raises(ollama.ResponseError) as e:       # keep_alive 0: the other tests get the default load back
        oc.embed(model=MODEL, input=text, options={"num_ctx": 256}, truncate=False, keep_alive=0)
    assert e.value.status_code == 400 and "truncate" in str(e.value)


def test_ps_shows_strata_layout(oc, http):
    oc.generate(model=MODEL, prompt="hi", options=TINY)
    ps = oc.ps()
    m = next(m for m in ps.models if m.model == MODEL)
    assert m.size > 0 and m.context_length == 1024 and m.expires_at is not None
    raw = next(x for x in http.get("/api/ps").json()["models"] if x["name"] == MODEL)
    s = raw["strata"]
    assert s["state"] == "loaded" and s["progress"] == 1.0 and s["slots_total"] == 2
    assert s["predicted"]["CPU"] > 50_000_000
    assert s["layout"]["n_parallel"] == 2 and s["layout"]["options"]["num_ctx"] == 1024
    assert "CPU" in s["actual"] and s["actual"]["CPU"]["model"] > 0
    # like with like: the prediction in llama.cpp's own kinds (mapped file pages in "model", repacked copies in
    # "repack"), per device, next to what the load reported
    pk = s["predicted_kinds"]
    assert set(pk) == set(s["actual"])
    for dev, act in s["actual"].items():
        assert set(pk[dev]) == set(act) == {"model", "repack", "kv", "compute", "output"}
        for kind in ("model", "repack", "kv", "compute", "output"):   # compute: measured by the dry run
            assert abs(pk[dev][kind] - act[kind]) <= 0.02 * act[kind] + 64 * 1024, (dev, kind, pk[dev], act)
    cpu = next(d for d in s["layout"]["devices"] if d["device_id"] == "CPU")
    assert sum(pk["CPU"].values()) + cpu["output_reserve"] == s["predicted"]["CPU"] + cpu["mapped"], \
        "old field: totals without mapped, with the output buffer's planned growth for embeddings"
    assert cpu["output_reserve"] > 0
    # a CPU-only plan reads its weights into 2 MiB pages where this host has them (placement.weights_load_mode)
    if huge_pages_usable():
        assert s["layout"]["load_mode"] == "read" and cpu["mapped"] == 0
        assert s["huge_pages"] >= s["actual"]["CPU"]["model"] // 2, (s["huge_pages"], s["actual"])
    else:
        assert s["layout"]["load_mode"] == "mmap" and s["huge_pages"] == 0


@pytest.mark.parametrize("use_mmap,mode", [(True, "mmap"), (False, "read")])
def test_ollama_use_mmap_decides_how_the_weights_load(oc, http, use_mmap, mode):
    """Ollama's load-time `use_mmap`, sent by the official client: the model loads again with its weights mapped
    from the file (the file in the runner's mappings, its mapped slack planned) or read into memory."""
    r = oc.generate(model=MODEL, prompt="hi", options={**TINY, "use_mmap": use_mmap})
    assert r.done
    s = next(x for x in http.get("/api/ps").json()["models"] if x["name"] == MODEL)["strata"]
    assert s["layout"]["load_mode"] == mode and s["layout"]["options"]["use_mmap"] is use_mmap
    assert any(f"use_mmap {str(use_mmap).lower()}" in reason for reason in s["layout"]["reasons"])
    with open(f"/proc/{s['pid']}/maps") as f:
        mapped = ".gguf" in f.read()
    assert mapped is use_mmap
    oc.generate(model=MODEL, prompt="", keep_alive=0)          # the other tests get the default load back


def test_empty_prompt_loads_and_keep_alive_zero_unloads(http):
    r = http.post("/api/generate", json={"model": MODEL})
    assert r.json()["done_reason"] == "load"
    assert MODEL in [m["name"] for m in http.get("/api/ps").json()["models"]]
    r = http.post("/api/chat", json={"model": MODEL, "messages": [], "keep_alive": 0})
    assert r.json()["done_reason"] == "unload" and r.json()["message"]["content"] == ""
    wait_for(lambda: MODEL not in [m["name"] for m in http.get("/api/ps").json()["models"]], what="the unload")


# ---- OpenAI ---------------------------------------------------------------------------------------------

def test_openai_models(ai):
    ids = [m.id for m in ai.models.list().data]
    assert MODEL in ids
    assert ai.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        ai.models.retrieve("no-such-model")


def test_openai_chat_completion(ai):
    r = ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                   max_tokens=6, temperature=0, seed=1)
    assert r.object == "chat.completion" and r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 6 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_openai_chat_stream_with_usage(ai):
    stream = ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hello."}],
                                        max_tokens=6, temperature=0, stream=True,
                                        stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish and finish[-1] in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 1


def test_openai_logprobs(ai):
    r = ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                   temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in content)
    c = ai.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3, temperature=0,
                              logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 3 and len(lp.top_logprobs[0]) == 2


def test_openai_completion_stream(ai):
    chunks = list(ai.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=5, temperature=0,
                                        stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices).strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_openai_json_schema_response_format(ai):
    r = ai.chat.completions.create(
        model=MODEL, max_tokens=40, temperature=0,
        messages=[{"role": "user", "content": "Give a JSON object with a name."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": {
            "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}})
    assert isinstance(json.loads(r.choices[0].message.content)["name"], str)
    r = ai.chat.completions.create(model=MODEL, max_tokens=30, temperature=0, response_format={"type": "json_object"},
                                   messages=[{"role": "user", "content": "JSON please"}])
    assert r.choices[0].message.content.lstrip().startswith(("{", "["))


def test_openai_embeddings(ai, http):
    r = ai.embeddings.create(model=MODEL, input=["hello", "world"])        # the client asks for base64
    assert len(r.data) == 2 and len(r.data[0].embedding) == 576 and r.usage.prompt_tokens > 0
    raw = http.post("/v1/embeddings", json={"model": MODEL, "input": "hello", "encoding_format": "base64"}).json()
    vec = struct.unpack("<576f", base64.b64decode(raw["data"][0]["embedding"]))
    assert math.isclose(vec[0], r.data[0].embedding[0], rel_tol=1e-5)


def test_openai_errors_have_openai_shape(ai, http):
    with pytest.raises(openai.BadRequestError):
        ai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], n=2)
    with pytest.raises(openai.NotFoundError):
        ai.chat.completions.create(model="missing", messages=[{"role": "user", "content": "x"}])
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": [], "max_tokens": 2})
    err = r.json()["error"]
    assert r.status_code == 400 and set(err) == {"message", "type", "param", "code"} and err["param"] == "messages"


# ---- bad input ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path,body,status,word", [
    ("/api/generate", b"{not json", 400, "invalid JSON"),
    ("/api/generate", b"[1, 2]", 400, "object"),
    ("/api/generate", b"", 400, "empty"),
    ("/api/generate", {"prompt": "hi"}, 400, "model"),
    ("/api/generate", {"model": 42, "prompt": "hi"}, 400, "model"),
    ("/api/generate", {"model": MODEL, "prompt": 5}, 400, "prompt"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "stream": "yes"}, 400, "stream"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"temperature": -1}}, 400, "temperature"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"num_ctx": -5}}, 400, "num_ctx"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "keep_alive": "forever"}, 400, "keep_alive"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "format": "xml"}, 400, "format"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "top_logprobs": 99}, 400, "top_logprobs"),
    ("/api/generate", {"model": "no-such-model", "prompt": "hi"}, 404, "not found"),
    ("/api/generate", {"model": "../../etc/passwd", "prompt": "hi"}, 400, "name"),
    ("/api/generate", {"model": "%2e%2e%2fsecret", "prompt": "hi"}, 400, "name"),
    ("/api/chat", {"model": MODEL, "messages": "hello"}, 400, "messages"),
    ("/api/chat", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    ("/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, 400,
     "images"),
    ("/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                   "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                              "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tools"),
    ("/api/embed", {"model": MODEL, "input": [1, 2]}, 400, "input"),
    ("/api/show", {"model": "/etc/passwd"}, 400, "name"),
    ("/api/copy", {"source": MODEL, "destination": "../evil"}, 400, "name"),
    ("/api/layout", {"model": MODEL, "options": {"warp": 9}}, 400, "warp"),
    ("/api/layout", {"model": MODEL, "devices": {"devices": [{"id": "CUDA0"}]}}, 400, "total"),
])
def test_bad_requests_get_4xx_json_naming_the_problem(http, path, body, status, word):
    if isinstance(body, bytes):
        r = http.post(path, content=body, headers={"Content-Type": "application/json"})
    else:
        r = http.post(path, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert word.lower() in (err["message"] if isinstance(err, dict) else err).lower()


_CHAT = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("path,body,name", [
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"num_predict": 1e30}}, "num_predict"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"num_predict": 2**31}}, "num_predict"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"top_k": 2**40}}, "top_k"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"num_ctx": 1.5}}, "num_ctx"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"temperature": float("inf")}}, "temperature"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "options": {"temperature": float("nan")}}, "temperature"),
    ("/api/chat", {"model": MODEL, "messages": _CHAT, "options": {"seed": 2**70}}, "seed"),
    ("/api/generate", {"model": MODEL, "prompt": "hi", "top_logprobs": 1e30}, "top_logprobs"),
    ("/api/embed", {"model": MODEL, "input": "hi", "dimensions": 2**40}, "dimensions"),
    ("/v1/chat/completions", {"model": MODEL, "messages": _CHAT, "max_tokens": 1e30}, "max_tokens"),
    ("/v1/chat/completions", {"model": MODEL, "messages": _CHAT, "max_completion_tokens": 2**31},
     "max_completion_tokens"),
    ("/v1/chat/completions", {"model": MODEL, "messages": _CHAT, "seed": 1e30}, "seed"),
    ("/v1/chat/completions", {"model": MODEL, "messages": _CHAT, "n": 1e30}, "n"),
    ("/v1/chat/completions", {"model": MODEL, "messages": _CHAT, "temperature": float("nan")}, "temperature"),
    ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2**31}, "max_tokens"),
    ("/v1/embeddings", {"model": MODEL, "input": "hi", "dimensions": 1e30}, "dimensions"),
])
def test_numbers_of_the_wrong_kind_or_out_of_range_are_400_naming_the_field(http, path, body, name):
    """Integers must be integers within int32 (a seed within int64) and numbers finite, in every dialect."""
    raw = json.dumps(body)       # NaN / Infinity as Python writes them (some clients do)
    r = http.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    if path.startswith("/v1/"):
        assert err["param"] == name and name in err["message"]
    else:
        assert name in err


def test_oversized_body_is_413(http):
    r = http.post("/api/generate", json={"model": MODEL, "prompt": "x" * 100_000})
    assert r.status_code == 413 and "too large" in r.json()["error"]


def test_wrong_method_and_unknown_route_are_json(http):
    r = http.get("/api/generate")
    assert r.status_code == 405 and "not allowed" in r.json()["error"]
    r = http.get("/api/nothing-here")
    assert r.status_code == 404 and r.json()["error"]
    r = http.request("DELETE", "/api/delete", content=b"")
    assert r.status_code == 400


def test_server_still_answers_after_bad_input(oc):
    assert oc.generate(model=MODEL, prompt="Hi", options=TINY).done


# ---- security -------------------------------------------------------------------------------------------

def test_origins_and_host_header(http):
    r = http.get("/api/tags", headers={"Origin": "https://evil.example"})
    assert r.status_code == 403 and "origin" in r.json()["error"]
    r = http.get("/api/tags", headers={"Origin": "null"})                 # sandboxed iframes send this
    assert r.status_code == 403
    r = http.get("/api/tags", headers={"Origin": "http://localhost:3000"})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    r = http.post("/api/show", json={"model": "nope"}, headers={"Origin": "http://localhost:3000"})
    assert r.status_code == 404 and r.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    r = http.options("/api/chat", headers={"Origin": "http://127.0.0.1:5173", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 204 and "POST" in r.headers["Access-Control-Allow-Methods"]
    r = http.options("/api/chat", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 403
    r = http.post("/api/generate", json={"model": MODEL}, headers={"Host": "rebind.evil.example"})
    assert r.status_code == 403 and "Host" in r.json()["error"]


def test_api_key(live_service, smollm2_path):
    with live_service.running(n_threads=1, api_key="s3cret") as svc:
        with httpx.Client(base_url=svc.url, timeout=HANG) as c:
            assert c.get("/api/version").status_code == 200             # open, like Ollama's
            r = c.get("/api/tags")
            assert r.status_code == 401 and "API key" in r.json()["error"]
            assert c.get("/api/tags", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert c.get("/v1/models").json()["error"]["code"] == "invalid_api_key"
            assert c.get("/api/tags", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert ollama.Client(host=svc.url, headers={"Authorization": "Bearer s3cret"}).list().models
        assert openai.OpenAI(base_url=svc.url + "/v1", api_key="s3cret").models.list().data


# ---- Strata's own ---------------------------------------------------------------------------------------

def test_devices_and_layout(http):
    loaded_before = [m["name"] for m in http.get("/api/ps").json()["models"]]
    inv = http.get("/api/devices").json()
    assert inv["host_ram_total"] > 0 and inv["cpu_cores"] >= 1
    sim = {"devices": [{"id": "CUDA0", "name": "Sim 4 GB", "total": "4 GiB", "backend": "CUDA"}],
           "host_ram_total": "8 GiB", "host_ram_available": "6 GiB", "cpu_cores": 4}
    r = http.post("/api/layout", json={"model": MODEL, "options": {"num_ctx": 2048, "num_parallel": 1},
                                       "devices": sim})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["fits"] is True and out["inventory"]["simulated"] is True
    assert out["layout"]["n_ctx"] == 2048 and out["layout"]["n_gpu_layers"] > 0
    assert [m["name"] for m in http.get("/api/ps").json()["models"]] == loaded_before     # planning loads nothing


def test_events_stream_reports_load_and_unload(server, http):
    http.post("/api/copy", json={"source": MODEL, "destination": "evt"}).raise_for_status()

    async def watch() -> list[str]:
        seen: list[str] = []
        import aiohttp

        async with aiohttp.ClientSession() as s:
            async with s.get(server.url + "/api/events") as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                await resp.content.readline()                   # ": connected"
                loop = asyncio.get_running_loop()
                fut = loop.run_in_executor(None, lambda: (
                    http.post("/api/generate", json={"model": "evt", "keep_alive": "10m"}).raise_for_status(),
                    http.post("/api/generate", json={"model": "evt", "keep_alive": 0}).raise_for_status()))
                async for raw in resp.content:
                    line = raw.decode().strip()
                    if line.startswith("event: "):
                        seen.append(line[7:])
                    if "unloaded" in seen:
                        break
                await fut
        return seen

    seen = asyncio.run(asyncio.wait_for(watch(), HANG))
    assert seen.index("load_started") < seen.index("loaded") < seen.index("unloaded")
    assert "memory" in seen and "load_progress" in seen


def test_metrics(oc, http):
    oc.generate(model=MODEL, prompt="Hi", options=TINY)
    text = http.get("/metrics").text
    assert '# TYPE strata_tokens_total counter' in text
    line = next(l for l in text.splitlines() if l.startswith('strata_tokens_total{kind="completion",model="smollm2:135m"}'))
    assert int(line.split()[-1]) >= 1
    assert 'strata_http_requests_total{method="POST",route="/api/generate",status="200"}' in text
    assert "strata_slots_total" in text and "strata_device_memory_total_bytes" in text


def _requests_counted(http, route: str) -> dict[str, int]:
    """/metrics' strata_http_requests_total for one route, by status."""
    out = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("strata_http_requests_total{") and f'route="{route}"' in line:
            status = line.split('status="', 1)[1].split('"', 1)[0]
            out[status] = int(float(line.split()[-1]))
    return out


@pytest.mark.parametrize("path,body", [
    ("/api/generate", {"prompt": "Count from one to one thousand.",
                       "options": {"num_predict": 4000, "ignore_eos": True}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 4000,
                              "stream": True, "options": {"ignore_eos": True}})])
def test_a_client_that_closes_its_stream_is_counted_as_499_not_500(server, http, path, body):
    """A client closing a stream (Stop, an agent's timeout) is nginx's 499 in /metrics, never a server error. The
    replies ignore the end of text, so the close always comes while they are still being written."""
    before = _requests_counted(http, path)
    with httpx.Client(base_url=server.url, timeout=HANG) as c:
        with c.stream("POST", path, json={"model": MODEL, **body}) as r:
            assert r.status_code == 200
            next(r.iter_lines())              # the reply is under way; then the client goes away
    wait_for(lambda: _requests_counted(http, path).get("499", 0) == before.get("499", 0) + 1, what="a 499 counted")
    after = _requests_counted(http, path)
    assert after.get("500", 0) == before.get("500", 0), after
    wait_for(lambda: all((m.get("strata") or {}).get("slots_busy", 0) == 0 for m in http.get("/api/ps").json()["models"]),
             what="every slot free")


def test_openapi_document(http):
    doc = http.get("/api/openapi.json").json()
    assert {"/api/chat", "/v1/completions", "/api/layout", "/api/ps"} <= set(doc["paths"])

