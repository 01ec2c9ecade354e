"""The `draft` option (speculative decoding's draft model) through the service: a Modelfile's `PARAMETER draft`, the
/api/create checks (an unknown model, another vocabulary: a 400 naming `draft`), a request's `options.draft`, a
reply drafted by the draft model, its bytes in the plan, `/api/ps` and the runner's reported allocations."""
from __future__ import annotations

import httpx
import pytest

BASE = "smollm2:135m"
LIST = "Count: one, two, three, four, five, six, seven, eight, nine, ten. Again: one, two, three,"


@pytest.fixture(scope="module")
def other_vocab(tmp_path_factory):
    from gguf_factory import write_other_vocab_llama

    return write_other_vocab_llama(tmp_path_factory.mktemp("vocab") / "other-vocab.gguf")


@pytest.fixture(scope="module")
def server(live_service):
    return live_service(n_threads=1, num_ctx=1024, num_parallel=1, keep_alive="10m")


def test_create_refuses_an_unknown_draft_or_another_vocabulary(server, other_vocab, tmp_path):
    from gguf_families import write_mamba

    mamba = write_mamba(tmp_path / "mamba.gguf", n_layer=2)         # SmolLM2's vocabulary, a recurrent state
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
        r = c.post("/api/create", json={"model": "d-mamba", "from": str(mamba), "parameters": {"draft": BASE},
                                        "stream": False})
        assert r.status_code == 400 and "recurrent" in r.json()["error"] and "draft" in r.json()["error"], r.text


def test_a_model_with_a_draft_drafts_and_shows_it(server):
    with httpx.Client(base_url=server.url, timeout=300) as c:
        r = c.post("/api/create", json={"model": "smol-drafted", "modelfile": f"FROM {BASE}\nPARAMETER draft {BASE}\n"
                                                                      "PARAMETER draft_max 4\n",
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
        assert s["layout"]["draft"]["max_tokens"] == 4 and s["layout"]["draft"]["p_min"] == 0.6
        planned = s["draft"]["weights"] + s["draft"]["kv"] + s["draft"]["compute"]
        cpu = next(d for d in s["layout"]["devices"] if d["device_id"] == "CPU")
        assert cpu["draft"] == planned == s["predicted_kinds"]["CPU"]["draft"]
        assert ps["smol-drafted:latest"]["size"] >= planned + s["draft"]["weights"]    # the target's weights are as large
        assert s["actual"]["CPU"]["draft"] > s["draft"]["weights"] // 2     # the runner's buffers, reported
        what_if = c.post("/api/layout", json={"model": "smol-drafted"}).json()      # planned as a load plans it
        assert what_if["layout"]["draft"]["name"] == BASE and what_if["layout"]["devices"][0]["draft"] == planned
        assert c.post("/api/layout", json={"model": "smol-drafted", "options": {"draft": ""}}).json()["layout"][
            "draft"] is None
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
