"""Runner parts without a runner process: stop strings, UTF-8 detokenizing, logprobs, the numpy batch,
chat templates, grammars, sampling validation, embedding truncation. Real SmolLM2 vocab and logits where the
behaviour depends on llama.cpp (loaded in-process: nothing here can hit a GGML_ASSERT)."""
from __future__ import annotations

import logging

import numpy as np
import pytest
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.batch import NpBatch
from app.engine.runner.decode_abort import DecodeAbort
from app.engine.runner.embedding.embeddings import InputTooLong, fit_tokens, tokenize
from app.engine.runner.output.text import Detokenizer, StopBytes, StopMatcher, Vocab, log_softmax, logprobs_from_logits
from app.engine.runner.prompt.chat_template import TemplateError, render_chat
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.greedy import greedy_pick
from app.engine.runner.sampling.grammar import GrammarError, grammar_for
from app.ggml import llama_log
from app.engine.runner.sampling.chain import (SamplingError, accept_prompt, build_chain, free_grammar, grammar_sampler,
                                          penalty_window, validate)
from engine_util import llama_context


@pytest.fixture(scope="module")
def llama(smollm2_path):
    with llama_context(smollm2_path, n_ctx=512, n_batch=128, n_seq=2) as (model, ctx):
        vocab = L.llama_model_get_vocab(model)
        yield model, ctx, vocab, Vocab(vocab, L.llama_vocab_n_tokens(vocab))


def stream(matcher, pieces):
    out = []
    for p in pieces:
        safe, stopped = matcher.push(p)
        out.append(safe)
        if stopped:
            return out, True
    out.append(matcher.flush())
    return out, False


def test_stop_string_across_pieces_is_held_then_cut():
    out, stopped = stream(StopMatcher(["o Wo"]), ["Hel", "lo", " W", "orld"])
    assert stopped and "".join(out) == "Hell"
    assert out == ["Hel", "l", "", ""]                 # "o", then "o W" held back, never streamed


def test_held_text_is_released_when_it_stops_matching():
    out, stopped = stream(StopMatcher(["</end>"]), ["a</e", "nd", "x>b"])
    assert not stopped and "".join(out) == "a</endx>b"
    assert out[0] == "a"


def test_earliest_of_several_stops_wins_and_flush_returns_the_tail():
    out, stopped = stream(StopMatcher(["XYZ", "B"]), ["aaXY", "ZB"])
    assert stopped and "".join(out) == "aa"
    m = StopMatcher(["STOP"])
    assert m.push("abcST") == ("abc", False)
    assert m.flush() == "ST"


def test_stop_bytes_fire_on_the_same_piece_as_the_text_matcher():
    # the context thread's byte check must agree with the output thread's text check, including characters
    # split across pieces and stop strings that span pieces
    import codecs
    import random

    rng = random.Random(1234)
    alphabet = ["a", "b", " ", "é", "中", "😀", "\n"]
    checked = 0
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        data = text.encode()
        cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 12)))) if len(data) > 1 else []
        pieces = [data[i:j] for i, j in zip([0] + cuts, cuts + [len(data)])]
        i = rng.randrange(len(text))
        stops = [text[i:i + rng.randint(1, 4)], rng.choice(["zz", "😀a", "中 "])]
        dec, matcher, sb = codecs.getincrementaldecoder("utf-8")("replace"), StopMatcher(stops), StopBytes(stops)
        at_text = at_bytes = None
        for k, piece in enumerate(pieces):
            if at_text is None and matcher.push(dec.decode(piece))[1]:
                at_text = k
            if at_bytes is None and sb.push(piece):
                at_bytes = k
        assert at_text is not None and at_bytes == at_text, (pieces, stops)
        checked += 1
    assert checked == 400
    assert StopBytes([]).push(b"anything") is False and StopBytes([""]).push(b"x") is False


def test_detokenizer_never_splits_a_character(llama):
    _, _, vocab, v = llama
    text = "naïve café 😀 世界 ok"
    toks = tokenize(vocab, text, add_special=False)
    d = Detokenizer(v)
    chunks = [d.push(t) for t in toks] + [d.flush()]
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)
    assert len(toks) > len(text.split())             # multi-byte characters really were split across tokens


def _decode_prompt(ctx, vocab, text, seq=0, batch=None):
    toks = tokenize(vocab, text, add_special=False)
    b = batch or NpBatch(128)
    b.clear()
    row = b.add_span(toks, 0, seq, logits_last=True)
    assert L.llama_decode(ctx, b.struct) == 0
    return toks, row


def test_logprobs_from_raw_logits_are_normalised(llama):
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    L.llama_memory_clear(mem, True)
    _, row = _decode_prompt(ctx, vocab, "The capital of France is")
    n_vocab = v.n_vocab
    logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(n_vocab,)).copy()
    lp = log_softmax(logits)
    m = lp.max()
    assert abs(m + np.log(np.exp(lp - m).sum())) < 1e-9        # logsumexp over the vocabulary = 0
    best = int(np.argmax(logits))
    tl = logprobs_from_logits(logits, best, 20, v)
    assert tl.logprob == pytest.approx(lp[best]) and tl.token == v.text(best)
    assert [t[1] for t in tl.top] == sorted((t[1] for t in tl.top), reverse=True) and len(tl.top) == 20
    assert tl.top[0][1] == pytest.approx(tl.logprob)
    assert logprobs_from_logits(logits, best, 0, v).top == []


def test_numpy_batch_two_sequences_match_each_alone(llama):
    _, ctx, vocab, _ = llama
    mem = L.llama_get_memory(ctx)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    prompts = ["Hello there, my name is", "import numpy as np\n"]
    alone = []
    for p in prompts:
        L.llama_memory_clear(mem, True)
        _, row = _decode_prompt(ctx, vocab, p, seq=0)
        alone.append(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(n_vocab,)).copy())
    L.llama_memory_clear(mem, True)
    b = NpBatch(128)
    rows = [b.add_span(tokenize(vocab, p, add_special=False), 0, s, logits_last=True) for s, p in enumerate(prompts)]
    assert b.struct.n_tokens == b.n and L.llama_decode(ctx, b.struct) == 0
    for r, ref in zip(rows, alone):
        # the same logits up to rounding (one batch of both prompts is another shape than each alone, and llama.cpp
        # rounds shapes differently), so the best token alone is the best here or within that rounding of it
        got = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, r), shape=(n_vocab,))
        assert np.allclose(got, ref, atol=1e-3)
        assert got[np.argmax(ref)] >= got.max() - 3e-3           # two allclose bounds (atol + rtol * |logit|)
    assert list(b.seq[:b.n]) == [0] * (rows[0] + 1) + [1] * (rows[1] - rows[0])
    with pytest.raises(OverflowError):
        b.add_span(list(range(200)), 0, 0, logits_last=True)


def test_chat_template_renders_smollm2_template(llama):
    model = llama[0]
    tpl = L.llama_model_chat_template(model, None).decode()
    out = render_chat(tpl, [{"role": "user", "content": "Hi"}])
    assert "<|im_start|>user\nHi<|im_end|>" in out and out.endswith("<|im_start|>assistant\n")
    assert "You are a helpful AI assistant" in out                   # the template's default system prompt
    out2 = render_chat(tpl, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert "Be brief." in out2 and "helpful AI assistant" not in out2
    with pytest.raises(TemplateError):
        render_chat(tpl, [{"content": "no role"}])
    with pytest.raises(TemplateError, match="nope"):
        render_chat("{{ raise_exception('nope') }}", [])
    with pytest.raises(TemplateError):
        render_chat("{% for %}", [])
    assert render_chat(None, [{"role": "user", "content": "x"}]).startswith("<|im_start|>user\nx")   # ChatML fallback


def test_grammars_for_json_and_schemas(llama):
    _, _, vocab, v = llama
    assert grammar_for() is None
    assert "root" in grammar_for(json_mode=True)
    g = grammar_for(json_schema={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    assert "root" in g
    free_grammar(grammar_sampler(vocab, g))
    with pytest.raises(GrammarError):
        grammar_for(json_schema=["not", "a", "schema"])
    with pytest.raises(SamplingError, match="grammar"):
        grammar_sampler(vocab, "root ::= [unterminated")


def test_prompt_tokens_feed_the_penalties_but_never_the_grammar(llama):
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    prompt = "Words that are not JSON at all: red, green, blue."
    toks = tokenize(vocab, prompt, add_special=False)
    p = P.SamplingParams(temperature=0, repeat_penalty=1.5, repeat_last_n=8)
    assert penalty_window(p, 512) == 8 and penalty_window(P.SamplingParams(repeat_last_n=-1), 512) == 512
    chain = build_chain(p, v.n_vocab, n_ctx=512)
    sampler = SeqSampler(chain, vocab, v.n_vocab, grammar_for(json_mode=True), "format json", v.piece)
    try:
        assert accept_prompt(chain, toks, penalty_window(p, 512)) == 8          # only the window's worth
        L.llama_memory_clear(mem, True)
        _, row = _decode_prompt(ctx, vocab, prompt, seq=0)
        first = v.text(sampler.sample(ctx, row))
        # had the grammar seen the prose above, it would be past its start (or broken); it still wants an object
        assert first.lstrip().startswith("{"), first
    finally:
        sampler.free()
        L.llama_memory_clear(mem, True)
    neutral = build_chain(P.SamplingParams(temperature=0, repeat_penalty=1.0), v.n_vocab)
    assert accept_prompt(neutral, toks, 64) == 0                                 # nothing to feed
    L.llama_sampler_free(neutral)


@pytest.mark.parametrize("repeat,last_n", [(1.0, 64), (1.1, 64), (1.5, 8), (1.3, -1)])
def test_greedy_pick_takes_what_the_chain_takes(llama, repeat, last_n):
    """A greedy chain with at most a repeat penalty is sampled as the argmax of the (penalised) logits, without
    llama.cpp's candidate array: over a real generation from SmolLM2 (a repetitive list, so the penalty window
    turns over and changes picks) it takes every token llama.cpp's chain takes from the same logits, prompt tail
    included in the window, and among equal maxima the first, as llama.cpp's greedy does."""
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    p = P.SamplingParams(temperature=0, repeat_penalty=repeat, repeat_last_n=last_n)
    window = penalty_window(p, 512)
    for other in (P.SamplingParams(temperature=0.7), P.SamplingParams(temperature=0, logit_bias={5: 1.0}),
                  P.SamplingParams(temperature=0, presence_penalty=0.5),
                  P.SamplingParams(temperature=0, frequency_penalty=0.5)):
        assert greedy_pick(other, window) is None, other
    fast = SeqSampler(build_chain(p, v.n_vocab, 512), vocab, v.n_vocab, greedy=greedy_pick(p, window))
    chain = build_chain(p, v.n_vocab, 512)
    assert fast.greedy is not None
    L.llama_memory_clear(mem, True)
    toks, row = _decode_prompt(ctx, vocab, "one, two, three, one, two, three, one, two, three, one, two,")
    fast.accept_prompt(np.asarray(toks), window)
    accept_prompt(chain, toks, window)
    differs = 0
    try:
        b = NpBatch(4)
        for i in range(40):
            logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(v.n_vocab,))
            before = logits.copy()
            tok = fast.sample(ctx, row)
            assert np.array_equal(logits, before)               # the penalised logits were put back
            assert tok == L.llama_sampler_sample(chain, ctx, row), i
            differs += tok != int(before.argmax())
            b.clear()
            row = b.add_span([tok], len(toks) + i, 0, logits_last=True)
            assert L.llama_decode(ctx, b.struct) == 0
        if repeat >= 1.3:
            assert differs, "the penalty never changed a pick: the comparison proves nothing about it"
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, row), shape=(v.n_vocab,))
        logits[[7, 300, 4000]] = logits.max() + 1.0         # three equal maxima: both take the first, token 7
        assert fast.sample(ctx, row) == L.llama_sampler_sample(chain, ctx, row) == 7
    finally:
        fast.free()
        L.llama_sampler_free(chain)
        L.llama_memory_clear(mem, True)


@pytest.mark.parametrize("field,value", [("temperature", -0.5), ("top_p", 1.5), ("top_k", -1), ("mirostat", 3),
                                         ("typical_p", 0.0), ("repeat_penalty", 0.0), ("seed", -2),
                                         ("min_p", float("nan")), ("logit_bias", {-1: 1.0})])
def test_sampling_validation_names_the_option(field, value):
    with pytest.raises(SamplingError, match=field):
        validate(P.SamplingParams(**{field: value}), n_vocab=100)


def test_every_sampler_option_builds_a_chain(llama):
    _, _, vocab, v = llama
    for p in (P.SamplingParams(), P.SamplingParams(temperature=0), P.SamplingParams(mirostat=1),
              P.SamplingParams(mirostat=2, seed=3), P.SamplingParams(min_p=0.05, typical_p=0.9, top_k=0, top_p=1.0,
                                                                     presence_penalty=0.5, frequency_penalty=0.5,
                                                                     repeat_last_n=-1, logit_bias={5: -100.0})):
        chain = build_chain(p, v.n_vocab, n_ctx=512)
        assert chain and L.llama_sampler_chain_n(chain) >= 1
        L.llama_sampler_free(chain)


def test_every_sampler_option_samples_under_a_grammar(llama):
    """The grammar kept out of the chain (constrained.SeqSampler): whatever the chain's samplers (truncation,
    mirostat, a strong bias towards a word), every sampled token is one a fresh copy of the grammar allows in
    turn, and the reply opens as JSON does."""
    _, ctx, vocab, v = llama
    mem = L.llama_get_memory(ctx)
    hello = tokenize(vocab, "Hello", add_special=False)[0]
    for p in (P.SamplingParams(), P.SamplingParams(temperature=0), P.SamplingParams(mirostat=1, seed=2),
              P.SamplingParams(mirostat=2, seed=3), P.SamplingParams(temperature=1.5, top_k=0, top_p=0.5, min_p=0.1,
                                                                     typical_p=0.8, seed=4),
              P.SamplingParams(temperature=0, logit_bias={hello: 100.0})):
        gbnf = grammar_for(json_mode=True)
        s = SeqSampler(build_chain(p, v.n_vocab, n_ctx=512), vocab, v.n_vocab, gbnf, "format json", v.piece)
        check = SeqSampler(None, vocab, v.n_vocab, gbnf)
        L.llama_memory_clear(mem, True)
        toks, row = _decode_prompt(ctx, vocab, "Reply in JSON:")
        out = b""
        try:
            for i in range(8):
                tok = s.sample(ctx, row)
                assert check.allows(check.grammar, tok), (p, out, v.piece(tok))
                L.llama_sampler_accept(check.grammar, tok)
                out += v.piece(tok)
                b = NpBatch(4)
                row = b.add_span([tok], len(toks) + i, 0, logits_last=True)
                assert L.llama_decode(ctx, b.struct) == 0
        finally:
            s.free()
            check.free()
        assert out.startswith(b"{"), (p, out)
    L.llama_memory_clear(mem, True)


def test_embedding_truncation_rule():
    assert fit_tokens([1, 2, 3], 5, truncate=False) == [1, 2, 3]
    assert fit_tokens([1, 2, 3, 4, 5, 6], 4, truncate=True) == [1, 2, 3, 4]
    with pytest.raises(InputTooLong, match="6 tokens"):
        fit_tokens([1, 2, 3, 4, 5, 6], 4, truncate=False, index=0)


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
