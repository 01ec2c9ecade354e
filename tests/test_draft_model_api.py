"""The `draft` option (speculative decoding's draft model) through the service: a Modelfile's `PARAMETER draft`, the
/api/create checks (an unknown model, another vocabulary: a 400 naming `draft`), a reply drafted by the draft
model, its bytes in the plan, `/api/ps` and the runner's reported allocations; and the plan alone (planner/draft.py)."""
from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from app.engine.gguf.model_info import read_model_info
from app.engine.gguf.vocab_match import vocab_mismatch
from app.engine.layout.types import DevicePlan
from app.engine.planner.draft import with_draft
from engine_util import cpu_layout

BASE = "smollm2:135m"
LIST = "Count: one, two, three, four, five, six, seven, eight, nine, ten. Again: one, two, three,"


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory):
    """A loadable synthetic llama whose vocabulary differs from SmolLM2's in one token's text."""
    from gguf_factory import tokenizer_keys, write_dense_llama
    from gguf_writer import smollm2_tokenizer_kv

    key, tokens, vtype, item = next(k for k in smollm2_tokenizer_kv() if k[0] == "tokenizer.ggml.tokens")
    edited = list(tokens)
    edited[1000] = edited[1000] + "x"
    with tokenizer_keys(extra=[(key, edited, vtype, item)]):
        return write_dense_llama(tmp_path_factory.mktemp("vocab") / "other-vocab.gguf", seed=3)


def test_vocab_match_is_llamas_rule(smollm2_path, other_vocab, dense_gguf):
    assert vocab_mismatch(smollm2_path, smollm2_path) is None
    assert vocab_mismatch(smollm2_path, dense_gguf) is None        # SmolLM2's tokenizer, other weights
    why = vocab_mismatch(smollm2_path, other_vocab)
    assert why and "token 1000" in why


def test_the_plan_holds_the_draft_models_bytes(smollm2_path, dense_gguf):
    target = cpu_layout(smollm2_path, num_ctx=1024, num_parallel=2)
    info = read_model_info(dense_gguf)
    lay = with_draft(target, info, "tiny")
    d = lay.draft
    assert d.model_path == str(info.path) and d.device_id == "CPU" and d.name == "tiny"
    assert d.weights == info.weight_bytes > 0 and d.kv > 0 and d.compute > 0
    cpu = lay.devices[0]
    assert cpu.draft == d.total and cpu.total == target.devices[0].total + d.total
    assert lay.fits
    # a CPU budget the target fits but the draft does not: the layout does not fit, and says why
    tight = replace(target, devices=(replace(target.devices[0], budget=target.devices[0].total + d.total - 1),))
    squeezed = with_draft(tight, info, "tiny")
    assert not squeezed.fits and any("draft model does not fit" in r for r in squeezed.reasons)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app.service.config import ServiceConfig
    from app.service.server import ServiceThread
    from service_util import store_factory

    home = tmp_path_factory.mktemp("svc-draft")
    svc = ServiceThread(ServiceConfig(port=0, n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m"),
                        store_factory=store_factory(home)).start()
    yield svc
    svc.stop()


def test_create_refuses_an_unknown_draft_or_another_vocabulary(server, other_vocab):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        r = c.post("/api/create", json={"model": "d-unknown", "from": BASE, "parameters": {"draft": "nope:1b"},
                                        "stream": False})
        assert r.status_code == 400 and "draft" in r.json()["error"] and "nope:1b" in r.json()["error"], r.text
        assert c.post("/api/create", json={"model": "other-vocab", "from": str(other_vocab),
                                           "stream": False}).status_code == 200
        r = c.post("/api/create", json={"model": "d-mismatch", "modelfile": f"FROM {BASE}\nPARAMETER draft other-vocab\n",
                                        "stream": False})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert "draft" in err and "vocabularies differ" in err and "token 1000" in err
        assert c.post("/api/show", json={"model": "d-mismatch"}).status_code == 404


def test_a_model_with_a_draft_drafts_and_shows_it(server):
    with httpx.Client(base_url=server.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": "smol-drafted", "modelfile": f"FROM {BASE}\nPARAMETER draft {BASE}\n",
                                        "stream": False})
        assert r.status_code == 200, r.text
        show = c.post("/api/show", json={"model": "smol-drafted"}).json()
        assert "draft" in show["parameters"] and BASE in show["parameters"]
        opts = {"temperature": 0, "num_predict": 30, "repeat_penalty": 1.0}
        final = c.post("/api/generate", json={"model": "smol-drafted", "prompt": LIST, "raw": True, "stream": False,
                                              "options": opts}).json()
        assert final["draft_count"] > 0 and final["draft_accepted_count"] == final["draft_count"], final
        ps = {m["name"]: m for m in c.get("/api/ps").json()["models"]}
        s = ps["smol-drafted:latest"]["strata"]
        assert s["draft"]["model"] == BASE and s["draft"]["device"] == "CPU"
        planned = s["draft"]["weights"] + s["draft"]["kv"] + s["draft"]["compute"]
        cpu = next(d for d in s["layout"]["devices"] if d["device_id"] == "CPU")
        assert cpu["draft"] == planned == s["predicted_kinds"]["CPU"]["draft"]
        assert ps["smol-drafted:latest"]["size"] >= planned + s["draft"]["weights"]    # the target's weights are as large
        assert s["actual"]["CPU"]["draft"] > s["draft"]["weights"] // 2     # the runner's buffers, reported
        plain = c.post("/api/generate", json={"model": BASE, "prompt": LIST, "raw": True, "stream": False,
                                              "options": opts}).json()
        assert final["response"] == plain["response"]


def test_a_request_naming_an_unknown_draft_gets_a_400_naming_it(server):
    with httpx.Client(base_url=server.url, timeout=300) as c:
        r = c.post("/api/generate", json={"model": BASE, "prompt": "Hi", "stream": False,
                                          "options": {"draft": "nope:1b", "num_predict": 2}})
        assert r.status_code == 400 and "draft" in r.json()["error"] and "nope:1b" in r.json()["error"], r.text
        r = c.post("/api/generate", json={"model": BASE, "prompt": "Hi", "stream": False,
                                          "options": {"draft": 7, "num_predict": 2}})
        assert r.status_code == 400 and "draft" in r.json()["error"]
        ok = c.post("/api/generate", json={"model": BASE, "prompt": "Hi", "stream": False,
                                           "options": {"num_predict": 2}})
        assert ok.status_code == 200 and ok.json().get("draft_count", 0) == 0
