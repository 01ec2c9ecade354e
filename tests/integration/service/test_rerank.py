"""Reranking on a live server with a random-weight Qwen3-style reranker GGUF written by the test (pooling type rank,
a "yes"/"no" classification head, a rerank template), through Cohere's official client (/v1/rerank is the shape
Cohere, Jina and llama-server share) and raw HTTP for /rerank and /api/rerank: results follow the scores the
model computes, top_n, return_documents, empty and over-long documents, and a model that is no reranker refused."""
from __future__ import annotations

import cohere
import httpx
import pytest

from gguf_factory import write_qwen3_reranker

QUERY = "Which river flows through Paris?"
DOCS = ["The Seine flows through Paris.", "Bananas are rich in potassium.", "Paris is the capital of France.",
        "The Thames flows through London.", "A recipe for lemon cake."]


@pytest.fixture(scope="module")
def server(live_service, tmp_path_factory, smollm2_path):
    home = tmp_path_factory.mktemp("rerank")
    path = write_qwen3_reranker(home / "tiny-reranker.gguf")
    svc = live_service(n_threads=1, num_ctx=256, num_parallel=1, keep_alive="10m", prompt_cache_mib=0, home=home)
    r = httpx.post(svc.url + "/api/create", json={"model": "reranker", "from": str(path), "stream": False},
                   timeout=120)
    assert r.status_code == 200, r.text
    yield svc


def _post(server, path, **body):
    return httpx.post(server.url + path, json={"model": "reranker", **body}, timeout=120)


def _scores(server, docs) -> dict[int, float]:
    r = _post(server, "/v1/rerank", query=QUERY, documents=docs)
    assert r.status_code == 200, r.text
    return {x["index"]: x["relevance_score"] for x in r.json()["results"]}


def test_cohere_client_ranks_by_the_model_scores(server):
    co = cohere.ClientV1(base_url=server.url, api_key="unused") if hasattr(cohere, "ClientV1") else \
        cohere.Client(base_url=server.url, api_key="unused")
    res = co.rerank(model="reranker", query=QUERY, documents=DOCS, top_n=3)
    ranked = [(r.index, r.relevance_score) for r in res.results]
    assert len(ranked) == 3
    # each document's score is the model's for that (query, document) pair: the same scored alone
    alone = {i: _scores(server, [d])[0] for i, d in enumerate(DOCS)}
    assert all(abs(alone[i] - s) < 1e-4 for i, s in ranked)
    # best first, and the three best of all five
    best = sorted(alone, key=lambda i: -alone[i])[:3]
    assert [i for i, _ in ranked] == best
    assert all(0.0 < s < 1.0 for s in alone.values())        # Qwen3's head: softmax P("yes")
    assert len({round(s, 6) for s in alone.values()}) == len(DOCS)     # the scores do depend on the document


def test_order_of_documents_does_not_change_their_scores(server):
    a = _scores(server, DOCS)
    b = _scores(server, list(reversed(DOCS)))
    n = len(DOCS)
    assert all(abs(a[i] - b[n - 1 - i]) < 1e-4 for i in range(n))


def test_same_fields_on_rerank_and_api_rerank(server):
    for path in ("/rerank", "/api/rerank"):
        r = _post(server, path, query=QUERY, documents=[{"text": d} for d in DOCS], top_n=2, return_documents=True)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["results"]) == 2 and body["usage"]["prompt_tokens"] > 0
        assert all(x["document"]["text"] == DOCS[x["index"]] for x in body["results"])
        s = [x["relevance_score"] for x in body["results"]]
        assert s == sorted(s, reverse=True)


def test_rerank_requests_are_in_the_request_log_with_their_lease(server):
    """A rerank request's record (the Server window's request log) has its model's lease: the waits for the load
    and the slot, not one undivided `answer`."""
    assert _post(server, "/v1/rerank", query=QUERY, documents=DOCS[:2]).status_code == 200
    recs = httpx.get(server.url + "/api/requests", timeout=60).json()["requests"]
    rec = next(r for r in recs if r["path"] == "/v1/rerank")
    assert rec["status"] == 200 and rec["model"] == "reranker:latest"        # the name it resolved to
    assert [name for name, _ in rec["phases"]][:3] == ["prepare", "load", "queued"]


def test_empty_and_over_long_documents(server):
    r = _post(server, "/v1/rerank", query=QUERY, documents=[])
    assert r.status_code == 400 and r.json()["error"]["param"] == "documents"
    r = _post(server, "/v1/rerank", query=QUERY, documents=["", DOCS[0]])      # an empty document is scored
    assert r.status_code == 200 and len(r.json()["results"]) == 2
    long_doc = " ".join(["The Seine is a long river that flows through Paris and Rouen."] * 40)   # > 256 tokens
    r = _post(server, "/v1/rerank", query=QUERY, documents=[long_doc, DOCS[1]])
    assert r.status_code == 200, r.text                                      # cut to the context, as embeddings
    assert r.json()["usage"]["prompt_tokens"] <= 256 + _post(server, "/v1/rerank", query=QUERY,
                                                             documents=[DOCS[1]]).json()["usage"]["prompt_tokens"]
    r = _post(server, "/v1/rerank", query=QUERY, documents=[long_doc], truncate=False)
    assert r.status_code == 400 and "truncate" in r.json()["error"]["message"]
    r = _post(server, "/v1/rerank", documents=DOCS)
    assert r.status_code == 400 and r.json()["error"]["param"] == "query"


def test_a_model_that_is_no_reranker_is_refused(server):
    r = httpx.post(server.url + "/v1/rerank", json={"model": "smollm2:135m", "query": QUERY, "documents": DOCS},
                   timeout=60)
    assert r.status_code == 400 and "not a reranker" in r.json()["error"]["message"]
    show = httpx.post(server.url + "/api/show", json={"model": "reranker"}, timeout=60).json()
    assert show["capabilities"] == ["rerank"]
    r = httpx.post(server.url + "/api/embed", json={"model": "reranker", "input": "hi"}, timeout=60)
    assert r.status_code == 400 and "reranker" in r.json()["error"]
