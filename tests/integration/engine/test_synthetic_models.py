"""The synthetic GGUFs from tests/support/gguf_factory.py are real models to llama.cpp: each loads with
llama-cpp-python's low-level API and decodes a prompt plus a few generated tokens with finite logits.
Loads run in a child process: a GGML_ASSERT on a bad file would otherwise end the test run."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

# The child: load, tokenize with the copied SmolLM2 tokenizer, decode the prompt, then 4 greedy steps.
CHILD = r"""
import ctypes, json, math, sys
import llama_cpp.llama_cpp as L

@L.llama_log_callback
def quiet(level, text, user_data):
    if level >= 4:                      # ERROR: keep it for the parent
        sys.stderr.write(text.decode(errors="replace"))
L.llama_log_set(quiet, None)

path, mode = sys.argv[1], sys.argv[2]
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = 0
model = L.llama_model_load_from_file(path.encode(), mp)
if not model:
    print(json.dumps({"error": "load failed"})); sys.exit(3)
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)
cp = L.llama_context_default_params()
cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 256, 64, 64, 1
cp.n_threads = cp.n_threads_batch = 1
if mode == "embed":
    cp.embeddings = True
ctx = L.llama_init_from_model(model, cp)
if not ctx:
    print(json.dumps({"error": "context failed"})); sys.exit(4)
text = b"The quick brown fox jumps over"
toks = (L.llama_token * 64)()
n = L.llama_tokenize(vocab, text, len(text), toks, 64, True, False)
assert n > 0, n
out = {"n_vocab": n_vocab, "n_prompt": n, "generated": [], "finite": True}
if mode == "embed":
    rc = L.llama_decode(ctx, L.llama_batch_get_one(toks, n))
    out["rc"] = rc
    n_embd = L.llama_model_n_embd(model)
    emb = L.llama_get_embeddings_seq(ctx, 0)
    vals = [emb[i] for i in range(n_embd)] if emb else []
    out["n_embd"], out["embedding_len"] = n_embd, len(vals)
    out["finite"] = bool(vals) and all(math.isfinite(v) for v in vals)
else:
    batch_tokens, count, pos_rc = toks, n, []
    for step in range(5):
        rc = L.llama_decode(ctx, L.llama_batch_get_one(batch_tokens, count))
        pos_rc.append(rc)
        if rc != 0:
            break
        ptr = L.llama_get_logits_ith(ctx, -1)
        logits = [ptr[i] for i in range(n_vocab)]
        out["finite"] = out["finite"] and all(math.isfinite(v) for v in logits)
        nxt = max(range(n_vocab), key=logits.__getitem__)
        out["generated"].append(nxt)
        batch_tokens, count = (L.llama_token * 1)(nxt), 1
    out["rc"] = max(pos_rc, key=abs)
L.llama_free(ctx); L.llama_model_free(model)
print(json.dumps(out))
"""


def run_child(path, mode: str = "generate") -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"child exited {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fixture", ["dense_gguf", "dense_q8_gguf", "moe_gguf"])
def test_synthetic_model_decodes(request, fixture):
    path = request.getfixturevalue(fixture)
    out = run_child(path)
    assert out["rc"] == 0
    assert out["n_vocab"] == 49152 and out["n_prompt"] >= 5
    assert len(out["generated"]) == 5 and all(0 <= t < 49152 for t in out["generated"])
    assert out["finite"]


def test_q4_0_moe_decodes(synthetic_dir):
    from gguf_factory import write_moe_qwen3

    path = write_moe_qwen3(synthetic_dir / "moe-q4_0.gguf", qtype="Q4_0", n_expert=8, n_expert_used=2)
    out = run_child(path)
    assert out["rc"] == 0 and out["finite"] and len(out["generated"]) == 5


def test_synthetic_embedding_model(embed_gguf):
    out = run_child(embed_gguf, "embed")
    assert out["rc"] == 0 and out["n_embd"] == 64 and out["embedding_len"] == 64 and out["finite"]


def test_llama_cpp_agrees_with_model_info(dense_gguf):
    """What llama.cpp reports about the loaded model matches read_model_info."""
    from app.engine.gguf.model_info import read_model_info

    child = r"""
import json, sys
import llama_cpp.llama_cpp as L
quiet = L.llama_log_callback(lambda *a: None)      # keep a reference: ctypes does not
L.llama_log_set(quiet, None)
mp = L.llama_model_default_params()
m = L.llama_model_load_from_file(sys.argv[1].encode(), mp)
print(json.dumps({"n_layer": L.llama_model_n_layer(m), "n_embd": L.llama_model_n_embd(m),
                  "n_head": L.llama_model_n_head(m), "n_head_kv": L.llama_model_n_head_kv(m),
                  "n_ctx_train": L.llama_model_n_ctx_train(m), "n_params": L.llama_model_n_params(m),
                  "size": L.llama_model_size(m)}))
"""
    r = subprocess.run([sys.executable, "-c", child, str(dense_gguf)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    info = read_model_info(dense_gguf)
    assert got["n_layer"] == info.n_layer and got["n_embd"] == info.n_embd
    assert got["n_head"] == info.n_head and got["n_head_kv"] == info.n_head_kv[0]
    assert got["n_ctx_train"] == info.context_length
    assert got["n_params"] == info.n_params
    assert got["size"] == info.weight_bytes


@pytest.mark.parametrize("kwargs,reason", [
    ({"n_expert": 4, "n_expert_used": 5}, "5 experts used per token but only 4"),
])
def test_files_refused_by_model_info_would_abort_llama_cpp(synthetic_dir, kwargs, reason):
    """Why read_model_info checks these: llama.cpp GGML_ASSERTs on them, killing the process that loads."""
    from gguf_factory import write_moe_qwen3

    from app.engine.gguf.model_info import GGUFError, read_model_info

    path = write_moe_qwen3(synthetic_dir / "moe-bad.gguf", qtype="Q4_0", **kwargs)
    with pytest.raises(GGUFError, match=reason):
        read_model_info(path)
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), "generate"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "GGML_ASSERT" in r.stderr
