"""Request admission in-process (app/engine/runner/prompt/admission.py) on SmolLM2's vocabulary and chat template (a
vocab-only load: no weights, no context, no runner process): the fields it refuses by name, the prompt text and
tokens it builds, the `context` ids it checks, fitting to a small context by each overflow rule, the checkpoint at
the last user message, and a whole Seq admitted (prompt, sampler, stops)."""
from __future__ import annotations

import pytest
from llama_cpp import llama_cpp as L

from app.engine import protocol as P
from app.engine.runner.output.text import Vocab
from app.engine.runner.prompt import context_fit
from app.engine.runner.prompt.admission import Admission, validate, with_markers
from app.engine.runner.sequence import N_KEEP, Seq

N_CTX_SEQ = 96


@pytest.fixture(scope="module")
def adm(vocab_model):
    v = L.llama_model_get_vocab(vocab_model)
    return Admission(vocab_model, N_CTX_SEQ, Vocab(v, L.llama_vocab_n_tokens(v)))


def req(**kw) -> P.GenerateRequest:
    return P.GenerateRequest(id=kw.pop("id", "r"), **kw)


def admitted(adm: Admission, r: P.GenerateRequest) -> Seq:
    seq = Seq(r)
    adm(seq)
    return seq


@pytest.fixture
def seqs():
    """Seqs admitted in a test; their sampler chains are freed after it."""
    made: list[Seq] = []
    yield made
    for s in made:
        if s.adm.sampler is not None:
            s.adm.sampler.free()


@pytest.mark.parametrize("fields,name", [
    ({"num_predict": True}, "num_predict"), ({"num_predict": "5"}, "num_predict"),
    ({"top_logprobs": -1}, "top_logprobs"), ({"top_logprobs": 21}, "top_logprobs"),
    ({"stop": "END"}, "stop"), ({"stop": ["a", 1]}, "stop"),
    ({"suffix": 3}, "suffix"),
])
def test_fields_the_runner_relies_on_are_refused_by_name(fields, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        validate(req(prompt="x", **fields))
    validate(req(prompt="x", num_predict=5, top_logprobs=20, stop=["a"], suffix="s"))


def test_the_loaded_models_own_template_and_no_fill_in_the_middle(adm):
    assert adm.template and "<|im_start|>" in adm.template and adm.family == "generic"
    assert adm.fim is None
    with pytest.raises(ValueError, match="fill-in-the-middle"):
        adm.infill_tokens(req(prompt="def f(", suffix=")"))


def test_prompt_text_by_kind_of_request(adm):
    chat = adm.prompt_text(req(messages=[{"role": "user", "content": "hello there"}]))
    assert "<|im_start|>user\nhello there<|im_end|>" in chat and chat.endswith("<|im_start|>assistant\n")
    gen = adm.prompt_text(req(prompt="hello there", system="Be brief."))
    assert "<|im_start|>system\nBe brief.<|im_end|>" in gen and "hello there" in gen
    assert adm.prompt_text(req(prompt="as is", raw=True)) == "as is"
    assert adm.prompt_text(req(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                               raw=True)) == "ab"
    with pytest.raises(ValueError, match="prompt or messages"):
        adm.prompt_text(req())
    with pytest.raises(ValueError, match="prompt must be a string"):
        adm.prompt_text(req(prompt=["not", "text"]))


def test_tokens_follow_the_context_ids_as_they_are(adm):
    alone = adm.tokens_of("The cat sat")
    assert adm.tokens_of("The cat sat", [7, 8, 9]) == [7, 8, 9] + alone
    assert adm.context_tokens(req(prompt="x", context=[1, 2])) == [1, 2]
    with pytest.raises(ValueError, match="empty"):
        adm.tokens_of("")


@pytest.mark.parametrize("ctx,why", [
    ([1, True], "list of token ids"), ("1 2", "list of token ids"), ([1, 2.0], "list of token ids"),
    ([-1], "outside the vocabulary"), ([49152], r"outside the vocabulary \(0..49151\)"),
])
def test_context_ids_are_checked(adm, ctx, why):
    with pytest.raises(ValueError, match=why):
        adm.context_tokens(req(prompt="x", context=ctx))


def test_a_chat_request_is_admitted_whole(adm, seqs):
    r = req(messages=[{"role": "user", "content": "Name a colour."}], stop=["\n\n"], json_mode=True)
    seqs.append(seq := admitted(adm, r))
    want = adm.tokens_of(adm.prompt_text(r))
    assert seq.adm.prompt.tolist() == want and seq.adm.n_prompt == len(want)
    assert seq.adm.n_keep == N_KEEP
    assert seq.adm.sampler is not None and seq.adm.sampler.grammar is not None     # format json: a grammar
    assert seq.adm.stop_bytes is not None and seq.out.stop is not None
    assert (seq.adm.dropped_messages, seq.adm.truncated_tokens) == (0, 0)
    assert adm.grammar(r)[1] == "format json" and adm.grammar(req(prompt="x")) == (None, "format json")


def long_text(n_words: int) -> str:
    return " ".join(f"word{i}" for i in range(n_words))


def test_a_long_raw_prompt_is_cut_keeping_its_start_and_its_end(adm, seqs):
    r = req(prompt=long_text(200), raw=True, overflow="truncate")
    full = adm.tokens_of(r.prompt)
    assert len(full) > N_CTX_SEQ
    seqs.append(seq := admitted(adm, r))
    kept = seq.adm.prompt.tolist()
    assert context_fit.fits(len(kept), 0, N_CTX_SEQ)
    assert kept[:N_KEEP] == full[:N_KEEP] and kept[N_KEEP:] == full[len(full) - (len(kept) - N_KEEP):]
    assert seq.adm.truncated_tokens == len(full) - len(kept) > 0


def test_refusing_overflow_names_the_numbers(adm):
    with pytest.raises(context_fit.ContextOverflow) as e:
        admitted(adm, req(prompt=long_text(200), raw=True, overflow="error"))
    assert e.value.data["limit"] == N_CTX_SEQ and e.value.data["prompt_tokens"] > N_CTX_SEQ
    with pytest.raises(ValueError, match="^overflow must be one of error, drop_messages, truncate"):
        admitted(adm, req(prompt=long_text(200), raw=True, overflow="wrap"))


def test_the_oldest_messages_are_dropped_and_the_last_kept(adm, seqs):
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": long_text(12) + f" turn{i}"}
            for i in range(9)]
    r = req(messages=msgs, overflow="drop_messages")
    seqs.append(seq := admitted(adm, r))
    assert seq.adm.dropped_messages > 0 and seq.adm.truncated_tokens == 0
    assert context_fit.fits(seq.adm.n_prompt, 0, N_CTX_SEQ)
    kept = msgs[seq.adm.dropped_messages:]
    assert seq.adm.prompt.tolist() == adm.tokens_of(adm.render(kept, r))
    assert "turn8" in adm.render(kept, r)


def test_the_checkpoint_goes_where_the_last_user_message_starts(vocab_model, seqs):
    v = L.llama_model_get_vocab(vocab_model)
    a = Admission(vocab_model, 4096, Vocab(v, L.llama_vocab_n_tokens(v)))
    a.mark_last_user = True
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Name a colour."}]
    seqs.append(seq := admitted(a, req(messages=msgs)))
    (n,) = seq.adm.checkpoint_at
    head = a.tokens_of(a.render(msgs[:3], req(messages=msgs), add_generation_prompt=False))
    toks = seq.adm.prompt.tolist()
    assert 0 < n < len(toks) - 1 and toks[:n] == head[:n]
    tail = b"".join(a.vocab_out.piece(t, special=True) for t in toks[n:]).decode()
    assert tail.startswith("<|im_start|>user\nName a colour.") and "Hello!" not in tail, tail
    seqs.append(one := admitted(a, req(messages=msgs[1:2])))
    assert one.adm.checkpoint_at == []                  # no earlier message: no checkpoint
    seqs.append(raw := admitted(a, req(prompt="x y", raw=True)))
    assert raw.adm.checkpoint_at == []                  # not a chat


def test_with_markers_puts_one_marker_per_image_and_takes_the_images_out():
    r = req(prompt="what is this?", images=[b"p1"],
            messages=[{"role": "user", "content": "and these", "images": [b"m1", b"m2"]},
                      {"role": "assistant", "content": "ok"}])
    out, images = with_markers(r, "<M>")
    assert images == [b"p1", b"m1", b"m2"]
    assert out.prompt == "<M>what is this?" and out.images is None
    assert out.messages == [{"role": "user", "content": "<M><M>and these"}, {"role": "assistant", "content": "ok"}]
    assert r.messages[0]["images"] == [b"m1", b"m2"]     # the request itself is left as it was
