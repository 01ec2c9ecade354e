"""Memory truth for every KV shape llama.cpp has: one synthetic GGUF per architecture family (tests/support/gguf_factory.py
FAMILIES: sliding window, chunked attention, MLA, different K/V head sizes, per-layer KV heads, attention sinks,
recurrent and hybrid state, MoE with shared experts), each loaded and decoded by llama.cpp, each carrying its
family's real chat template, and each planned and then loaded for real over num_ctx 512/4096/32768 x 1 and 4
sequences x f16 and q8_0 KV: the predicted bytes per kind within 5% (2% in total) of llama.cpp's buffer lines,
from the KV shape alone (no dry-run correction needed). All loads of a test run in ONE child process.

Where the planner does not know an architecture's KV shape, the dry run measures it: simulated here by planning a
real model with a wrong shape and checking the measured plan against the real load."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from app.engine.planner.verify import KINDS, compare, format_table, run_verify_many

COMBOS = [(c, p, k) for c in (512, 4096, 32768) for p in (1, 4) for k in ("f16", "q8_0")]
# each line of the log prints MiB with two decimals, and a kind may sum two lines (KV + recurrent state)
ROUNDING = 2 * (int(0.005 * 1024 * 1024) + 1)
MiB = 1024 * 1024


@pytest.fixture(scope="session")
def family_paths(synthetic_dir):
    from gguf_factory import FAMILIES, write_family

    d = synthetic_dir / "families"
    return {name: write_family(name, d) for name in FAMILIES}


@pytest.fixture(scope="module")
def verified(family_paths):
    """name -> verify rows; deci also with flash attention off (V transposed: padded to the widest layer)."""
    res = run_verify_many([str(p) for p in family_paths.values()], COMBOS, timeout=1200)
    rows = {name: res[str(p)] for name, p in family_paths.items()}
    rows["deci"] += run_verify_many([str(family_paths["deci"])], [(4096, 4, "f16", False)])[str(family_paths["deci"])]
    return rows


def _families():
    from gguf_factory import FAMILIES

    return list(FAMILIES)


@pytest.mark.parametrize("name", _families())
def test_family_memory_predicted_matches_actual(name, verified):
    rows = verified[name]
    print()
    print(format_table(name, rows))
    assert len(rows) >= len(COMBOS)
    for r in rows:
        where = (name, r["num_ctx"], r["parallel"], r["kv"], r["flash_attn"])
        assert "error" not in r, r
        assert not r["kv_measured"], ("the KV shape alone must predict this family", where)
        assert set(r["predicted"]) == set(r["actual"]) == {"CPU"}, r
        c = compare(r)["CPU"]
        assert abs(c["total_err"]) <= 0.02, (where, c)
        p, a = r["predicted"]["CPU"], r["actual"]["CPU"]
        for k in KINDS:
            assert abs(p[k] - a[k]) <= max(0.05 * a[k], ROUNDING), (where, k, p[k], a[k])


def test_sliding_and_state_memory_does_not_grow_like_full_attention(verified):
    """The matrix exercises what differs: a window caps the SWA layers, recurrent state ignores the context."""
    def kv(name, ctx, par, t="f16"):
        return next(r["actual"]["CPU"]["kv"] for r in verified[name]
                    if (r["num_ctx"], r["parallel"], r["kv"], r["flash_attn"]) == (ctx, par, t, None))

    full = kv("llama", 32768, 4) / kv("llama", 4096, 4)
    assert full == pytest.approx(8, rel=0.01)
    # gemma3: 5 of 6 layers slide (window 512 + ubatch 512 = 1024 cells per sequence), 1 keeps the whole context
    assert kv("gemma3", 32768, 4) / kv("gemma3", 4096, 4) == pytest.approx((5 * 1024 + 32768) / (5 * 1024 + 4096),
                                                                           rel=0.01)
    assert kv("mamba", 32768, 4) == kv("mamba", 512, 4) > kv("mamba", 512, 1)
    assert kv("deepseek2", 32768, 1) < kv("deepseek2-mha", 32768, 1) / 2    # MLA: one K row, no V
    fa_off = next(r for r in verified["deci"] if r["flash_attn"] is False)
    assert fa_off["actual"]["CPU"]["kv"] > kv("deci", 4096, 4)               # V padded to 4 heads on every layer


def test_family_shapes_named(family_paths):
    from gguf_factory import FAMILIES

    from app.engine.gguf.model_info import read_model_info

    for name, fam in FAMILIES.items():
        info = read_model_info(family_paths[name])
        assert info.architecture == fam.arch, name
        assert info.kv.attention == fam.attention, name
        assert info.kv.known, name
        assert info.chat_template == fam.template_text(), name


# One child loads every family, checks llama.cpp's view of its template, and decodes a prompt + 3 greedy tokens.
CHILD = r"""
import json, math, sys
import llama_cpp.llama_cpp as L

@L.llama_log_callback
def quiet(level, text, user_data):
    pass
L.llama_log_set(quiet, None)
L.llama_backend_init()
out = {}
for name, path in json.loads(sys.argv[1]).items():
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        out[name] = {"error": "load failed"}; continue
    tmpl = L.llama_model_chat_template(model, None)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.swa_full = 512, 64, 64, 1, False
    cp.n_threads = cp.n_threads_batch = 1
    ctx = L.llama_init_from_model(model, cp)
    text = b"The quick brown fox jumps over"
    toks = (L.llama_token * 64)()
    n = L.llama_tokenize(vocab, text, len(text), toks, 64, True, False)
    rcs, finite, batch, count = [], True, toks, n
    for step in range(4):
        rcs.append(L.llama_decode(ctx, L.llama_batch_get_one(batch, count)))
        if rcs[-1]:
            break
        ptr = L.llama_get_logits_ith(ctx, -1)
        logits = [ptr[i] for i in range(n_vocab)]
        finite = finite and all(math.isfinite(v) for v in logits)
        batch, count = (L.llama_token * 1)(max(range(n_vocab), key=logits.__getitem__)), 1
    out[name] = {"rcs": rcs, "finite": finite, "template": tmpl.decode() if tmpl else None}
    L.llama_free(ctx); L.llama_model_free(model)
print(json.dumps(out))
"""


def test_every_family_loads_and_decodes_with_its_template(family_paths):
    from gguf_factory import FAMILIES

    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps({k: str(v) for k, v in family_paths.items()})],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for name, fam in FAMILIES.items():
        got = out[name]
        assert "error" not in got, (name, got)
        assert got["rcs"] == [0, 0, 0, 0] and got["finite"], (name, got)
        assert got["template"] == fam.template_text(), name          # None: the family has none (mamba)
    assert FAMILIES["mamba"].template is None
    assert all(FAMILIES[n].template_path.is_file() for n in FAMILIES if n != "mamba")


def test_unknown_kv_shape_is_measured_by_the_dry_run(family_paths, verified):
    """A model whose KV shape the planner gets wrong (here: gemma3 planned as if every layer kept the whole
    context) is planned with the size the no_alloc dry run measured, and that matches the real load."""
    from app.discovery.simulated import inventory_from_dict
    from app.engine.gguf.kv_shape import KVShape
    from app.engine.gguf.model_info import read_model_info
    from app.engine.planner.dryrun import plan_measured
    from app.engine.planner.search import plan
    from app.engine.layout.types import PlanOptions

    info = read_model_info(family_paths["gemma3"])
    wrong = KVShape("full", ("full",) * info.n_layer, info.kv.k, info.kv.v, known=False)
    info = replace(info, kv=wrong)
    inv = inventory_from_dict({"devices": [], "host_ram_total": "16 GiB", "cpu_cores": 2})
    opts = PlanOptions(num_ctx=32768, num_parallel=4)
    actual = next(r["actual"]["CPU"]["kv"] for r in verified["gemma3"]
                  if (r["num_ctx"], r["parallel"], r["kv"]) == (32768, 4, "f16"))
    guessed = plan(info, inv, opts).devices[0].kv
    assert guessed > 2 * actual                                   # the wrong shape over-predicts a lot
    measured = plan_measured(info, inv, opts)
    assert abs(measured.devices[0].kv - actual) <= ROUNDING
    assert any(r.startswith("KV cache as the dry run measured") for r in measured.reasons)
