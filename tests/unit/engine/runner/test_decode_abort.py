"""The cancel's abort flag (runner/decode_abort.py): an abort we asked for is logged at DEBUG, a real failure as
an error."""
from __future__ import annotations

import logging

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.runner.batch import NpBatch
from app.engine.runner.decode_abort import DecodeAbort
from app.ggml import llama_log


def test_an_abort_we_asked_for_is_not_an_error_but_real_failures_are(llama, caplog):
    model, _, vocab, v = llama
    llama_log.install()                              # the runner's routing of llama.cpp lines into logging
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.n_threads, cp.n_threads_batch = 256, 64, 32, 1, 1, 1
    ctx = L.llama_init_from_model(model, cp)       # its own context: the engine installs an abort callback on it
    assert ctx
    eng = DecodeAbort(model)                         # no loop: the test drives the context
    eng.install(ctx)
    caplog.set_level(logging.DEBUG, logger="strata.llama")
    b = NpBatch(L.llama_n_batch(ctx))

    def decode(tokens):
        b.clear()
        b.add_span(np.asarray(tokens, dtype=np.int32), 0, 0, logits_last=True)
        caplog.clear()
        rc = L.llama_decode(ctx, b.struct)
        return rc, [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "strata.llama"]

    try:
        with eng.running({"r"}):
            eng.cancel("r")                          # the request is in the running batch
            rc, lines = decode(range(100, 164))
            assert rc == 2
            assert any("ret = 2" in m for _, m in lines), lines          # llama.cpp did report the abort ...
            assert [m for lvl, m in lines if lvl > logging.DEBUG] == []  # ... at DEBUG only
            rc, lines = decode([v.n_vocab + 5])      # a real failure while the abort flag is still up
            assert rc == -1
            assert any(lvl == logging.ERROR and "ret = -1" in m for lvl, m in lines), lines
        assert not eng.flag.raw[0]                   # the flag belonged to that decode
        eng.cancel("r")                              # no decode holds it now: nothing to stop
        assert not eng.flag.raw[0]
        eng.close()                                  # unregisters the rule: llama.cpp's own levels come back
        eng.install(ctx)
        eng.request()
        rc, lines = decode(range(100, 164))
        assert rc == 2 and any(lvl == logging.ERROR and "ret = 2" in m for lvl, m in lines), lines
    finally:
        eng.close()
        L.llama_free(ctx)
