"""The synthetic projector of tests/support/mmproj_factory.py is a real projector to llama.cpp's mtmd: clip's loader
accepts it, mtmd_tokenize makes an image chunk of the predicted size, and mtmd_helper_eval_chunks encodes the image
and decodes its embeddings into a real llama context (SmolLM2) whose logits are finite afterwards. A projector
whose width does not match the text model is refused by mtmd_init_from_file (NULL), not a crash.
Each probe runs in a child process: an abort in llama.cpp must not end the test run."""
from __future__ import annotations

import json
import subprocess
import sys

from mmproj_factory import image_tokens, write_mlp_projector

CHILD = r"""
import ctypes, io, json, math, sys
import llama_cpp.llama_cpp as L
import llama_cpp.mtmd_cpp as M
from PIL import Image

model_path, mmproj_path = sys.argv[1], sys.argv[2]
L.llama_backend_init()
mp = L.llama_model_default_params()
mp.n_gpu_layers = 0
model = L.llama_model_load_from_file(model_path.encode(), mp)
cp = L.llama_context_default_params()
cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 512, 128, 128, 1
cp.n_threads = cp.n_threads_batch = 1
ctx = L.llama_init_from_model(model, cp)
params = M.mtmd_context_params_default()
params.use_gpu, params.n_threads, params.print_timings, params.warmup = False, 1, False, False
mctx = M.mtmd_init_from_file(mmproj_path.encode(), model, params)
if not mctx:
    print(json.dumps({"loaded": False})); sys.exit(0)
img = Image.new("RGB", (50, 40), (200, 10, 10))
rgb = img.tobytes()
bmp = M.mtmd_bitmap_init(img.width, img.height, (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb))
M.mtmd_bitmap_set_id(bmp, b"red-50x40")
prompt = b"User: " + M.mtmd_default_marker() + b" What is in the picture?\nAssistant:"
text = M.mtmd_input_text()
text.text, text.text_len, text.add_special, text.parse_special = prompt, len(prompt), True, True
chunks = M.mtmd_input_chunks_init()
rc_tok = M.mtmd_tokenize(mctx, chunks, ctypes.byref(text), (M.mtmd_bitmap_p_ctypes * 1)(bmp), 1)
kinds = []
for i in range(M.mtmd_input_chunks_size(chunks)):
    c = M.mtmd_input_chunks_get(chunks, i)
    kinds.append([M.mtmd_input_chunk_get_type(c), M.mtmd_input_chunk_get_n_tokens(c),
                  (M.mtmd_input_chunk_get_id(c) or b"").decode()])
n_past = L.llama_pos(0)
rc_eval = M.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 128, True, ctypes.byref(n_past))
logits = L.llama_get_logits_ith(ctx, -1)
n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
finite = bool(logits) and all(math.isfinite(logits[i]) for i in range(n_vocab))
print(json.dumps({"loaded": True, "vision": bool(M.mtmd_support_vision(mctx)), "rc_tokenize": rc_tok,
                  "chunks": kinds, "rc_eval": rc_eval, "n_past": n_past.value,
                  "pos_max": L.llama_memory_seq_pos_max(L.llama_get_memory(ctx), 0), "finite": finite}))
"""


def _probe(model, mmproj) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(model), str(mmproj)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_synthetic_projector_encodes_an_image_into_smollm2(smollm2_path, tmp_path):
    out = _probe(smollm2_path, write_mlp_projector(tmp_path / "mmproj.gguf"))
    assert out["loaded"] and out["vision"]
    assert out["rc_tokenize"] == 0
    # text, image, text: the image chunk (type 1) has the projector's (32/8)^2 = 16 embeddings and our id
    assert [k[0] for k in out["chunks"]] == [0, 1, 0]
    assert out["chunks"][1][1:] == [image_tokens(), "red-50x40"]
    n_all = sum(k[1] for k in out["chunks"])
    assert out["rc_eval"] == 0
    assert out["n_past"] == n_all and out["pos_max"] == n_all - 1
    assert out["finite"]


def test_projector_of_another_width_is_refused_not_a_crash(smollm2_path, tmp_path):
    out = _probe(smollm2_path, write_mlp_projector(tmp_path / "mmproj-64.gguf", n_embd_text=64))
    assert out == {"loaded": False}
