"""Speculative decoding with a draft model (runner/speculation/draft_model.py) in a real runner (llama.cpp, CPU, 1 thread): a
second model with the same vocabulary drafts, the target verifies in its batch, and the reply is the target's own
token for token. SmolLM2 drafting for itself must have every greedy draft accepted; a synthetic pair with one
vocabulary (different weights) drafts mostly wrong and must still give the same reply; rejected drafts leave the
draft context's KV (a follow-up on the same slot stays exact); a cancel mid-draft leaves the runner exact."""
from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.layout.types import DraftPlan
from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.sequence import Seq
from app.engine.runner.speculation.draft_model import DraftModel, common_prefix
from app.engine.runner.speculation.proposer import DraftAsk
from engine_util import assert_greedy_agrees, cancel_stream, cpu_layout

_ids = itertools.count()

CODE = '''def add_numbers(a, b):
    """Return the sum of a and b."""
    return a + b


def main():
    print(add_numbers(2, 3))
'''
EDIT = [{"role": "user", "content": "Rename the function add_numbers to sum_two in this code and print the whole "
                                    "code:\n\n" + CODE}]
STORY = [{"role": "user", "content": "Write a short story about a cat who learns to swim."}]
LIST = "Count: one, two, three, four, five, six, seven, eight, nine, ten. Again: one, two, three,"


def rid():
    return f"dm{next(_ids)}"


def run(loop, coro, timeout=300):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


# a token decoded in the target's verify batch and in its own one-row step: within this in its logprob (as in
# test_speculative.py); llama.cpp rounds the two batch shapes differently, so not bit for bit
VERIFY_NOISE = 1e-3


async def collect(client, req):
    """(text, the last event, the logprob records of its tokens)."""
    events = [ev async for ev in client.generate(req)]
    text = "".join(e.text for e in events if isinstance(e, P.TokenEvent))
    return text, events[-1], [lp for e in events if isinstance(e, P.TokenEvent) for lp in (e.logprobs or [])]


def req(spec: bool, **kw) -> P.GenerateRequest:
    kw.setdefault("sampling", P.SamplingParams(temperature=0.0, repeat_penalty=1.0))
    kw.setdefault("num_predict", 48)
    kw.setdefault("logprobs", True)
    kw.setdefault("top_logprobs", 5)
    return P.GenerateRequest(id=rid(), speculate=spec, cache_prompt=False, **kw)


def both(loop, client, **kw):
    return run(loop, collect(client, req(True, **kw))), run(loop, collect(client, req(False, **kw)))


def assert_same(spec, plain):
    """A greedy reply with drafts is the one without, token for token up to a near-tie (assert_greedy_agrees), and
    where none came, in its text and its end too."""
    (t1, d1, lp1), (t2, d2, lp2) = spec, plain
    if assert_greedy_agrees(lp2, lp1, VERIFY_NOISE) == len(lp2):
        assert t1 == t2
        assert (d1.reason, d1.completion_tokens) == (d2.reason, d2.completion_tokens)


def assert_same_sampled(spec, plain):
    """A sampled reply with a seed: each token drawn by the sequence's own chain with the same random numbers."""
    (t1, d1, _), (t2, d2, _) = spec, plain
    assert t1 == t2
    assert (d1.reason, d1.completion_tokens) == (d2.reason, d2.completion_tokens)


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def start(loop, path, draft_path, *, p_min=0.6, max_tokens=8, **layout):
    lay = cpu_layout(path, **layout)
    lay = replace(lay, draft=DraftPlan(model_path=str(draft_path), name="draft", p_min=p_min, max_tokens=max_tokens))
    c = RunnerClient(lay, n_threads=1, model_name="draft-test")
    run(loop, c.start())
    return c


@pytest.fixture(scope="module")
def self_drafting(loop, smollm2_path):
    c = start(loop, smollm2_path, smollm2_path, num_ctx=1024, num_parallel=2)
    yield c
    run(loop, c.close())


def _draft_in_process(model_path, p_min: float):
    from llama_cpp import llama_cpp as L

    L.llama_backend_init()
    model = L.llama_model_load_from_file(str(model_path).encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.n_threads, cp.n_threads_batch = 512, 128, 128, 1, 1, 1
    ctx = L.llama_init_from_model(model, cp)
    assert model and ctx
    return DraftModel(model, ctx, 1, max_tokens=6, p_min=p_min)


def test_rejection_cuts_the_draft_kv_back_to_the_accepted_prefix(smollm2_path):
    """In process, the draft model alone: after a draft of which 2 tokens were accepted and then another token
    sampled, the draft context holds exactly the sequence's tokens (its list and llama.cpp's cells agree), and
    its next draft equals the one a cold draft context makes for the same tokens."""
    from llama_cpp import llama_cpp as L

    dm = _draft_in_process(smollm2_path, p_min=0.0)
    try:
        toks = tokenize(L.llama_model_get_vocab(dm.model), LIST, False, False)
        seq = Seq(P.GenerateRequest(id="a", prompt=LIST))
        seq.slot, seq.history, seq.pending = 0, toks[:-1], toks[-1]
        first = dm.propose([DraftAsk(seq, 6)], 1, 128)["a"]
        assert len(first) == 6
        assert L.llama_memory_seq_pos_max(dm.mem, 0) == len(toks) + 4          # the draft's own cells, but its last
        other = next(t for t in tokenize(L.llama_model_get_vocab(dm.model), " seven", False, False)
                     if t != first[2])
        seq.history, seq.pending = toks + first[:2], other                  # 2 accepted, then the target's own
        dm.verified(seq, len(seq.history), 6, 2)
        assert dm.cells[0] == seq.history
        assert L.llama_memory_seq_pos_max(dm.mem, 0) == len(seq.history) - 1
        warm = dm.propose([DraftAsk(seq, 6)], 1, 128)["a"]
        L.llama_memory_clear(dm.mem, True)
        dm.cells[0] = []
        cold = dm.propose([DraftAsk(seq, 6)], 1, 128)["a"]
        assert warm == cold
    finally:
        dm.close()


def test_a_cancel_mid_draft_leaves_the_draft_context_as_it_was(smollm2_path, monkeypatch):
    """In process: the request cancelled (runner/decode_abort.py, attached to the draft model as the runner does)
    while the draft model decodes it: no draft comes back, the cells it had fed are removed again (its list and
    llama.cpp's cells agree), and the next step drafts as if nothing had happened."""
    from llama_cpp import llama_cpp as L

    from app.engine.runner.decode_abort import DecodeAbort

    dm = _draft_in_process(smollm2_path, p_min=0.0)
    abort = DecodeAbort(dm.model)
    dm.attach_abort(abort)
    real_decode, cancel_in = L.llama_decode, ["c"]

    def decode(ctx, batch):
        if cancel_in:
            abort.cancel(cancel_in.pop())                # the reader's cancel, landing while this decode runs
        return real_decode(ctx, batch)

    monkeypatch.setattr(L, "llama_decode", decode)
    try:
        toks = tokenize(L.llama_model_get_vocab(dm.model), LIST, False, False)
        seq = Seq(P.GenerateRequest(id="c", prompt=LIST))
        seq.slot, seq.history, seq.pending = 0, toks[:-1], toks[-1]
        assert dm.propose([DraftAsk(seq, 6)], 1, 128) == {}
        assert dm.cells[0] == [] and L.llama_memory_seq_pos_max(dm.mem, 0) == -1
        assert not abort.flag.raw[0]                     # the flag went with that decode
        draft = dm.propose([DraftAsk(seq, 6)], 1, 128)["c"]    # the next step
        assert len(draft) == 6 and dm.cells[0] == toks + draft[:-1]
        assert L.llama_memory_seq_pos_max(dm.mem, 0) == len(dm.cells[0]) - 1
        cancel_in.append("another")                      # a cancel of a request this decode does not hold
        assert dm.propose([DraftAsk(seq, 6)], 1, 128)["c"] == draft
    finally:
        abort.close()
        dm.close()


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([5] * 100 + [1], [5] * 100 + [2]) == 100
    assert common_prefix([7], [8]) == 0


@pytest.mark.parametrize("kw", [
    {"messages": EDIT, "num_predict": 60},
    {"messages": STORY},
    {"prompt": LIST, "raw": True, "num_predict": 30},
], ids=["edit", "free-text", "completion"])
def test_a_model_drafting_for_itself_has_every_draft_accepted(loop, self_drafting, kw):
    spec, plain = both(loop, self_drafting, **kw)
    assert_same(spec, plain)
    assert plain[1].draft_tokens == 0
    d = spec[1]
    assert d.draft_tokens > 0
    assert d.draft_accepted == d.draft_tokens       # greedy drafts of the same model, sure ones only (p_min)


def test_several_sequences_draft_at_once(loop, self_drafting):
    async def together():
        return await asyncio.gather(collect(self_drafting, req(True, messages=EDIT, num_predict=40)),
                                    collect(self_drafting, req(True, prompt=LIST, raw=True, num_predict=30)))

    a, b = run(loop, together())
    for _, done, _ in (a, b):
        assert done.completion_tokens > 0 and done.draft_accepted == done.draft_tokens > 0


def test_cancel_mid_draft_then_an_exact_reply(loop, self_drafting):
    async def cancel_after_tokens():
        agen = self_drafting.generate(P.GenerateRequest(id=rid(), messages=EDIT, num_predict=200,
                                                        sampling=P.SamplingParams(temperature=0.0)))
        n = 0
        while n < 12:
            ev = await asyncio.ensure_future(agen.__anext__())
            n += getattr(ev, "n_tokens", 0)
            if isinstance(ev, P.DoneEvent):
                return
        await cancel_stream(agen, asyncio.ensure_future(agen.__anext__()))

    run(loop, cancel_after_tokens())
    spec, plain = both(loop, self_drafting, messages=EDIT, num_predict=40)
    assert_same(spec, plain)
    assert spec[1].draft_accepted == spec[1].draft_tokens > 0


@pytest.fixture(scope="module")
def synthetic_pair(synthetic_dir):
    """Two random-weight llamas with SmolLM2's vocabulary: the target (3 layers) and a draft (2 layers, another
    seed): its drafts are mostly wrong."""
    from gguf_factory import write_dense_llama

    return (write_dense_llama(synthetic_dir / "draft-target.gguf", seed=11),
            write_dense_llama(synthetic_dir / "draft-small.gguf", n_layer=2, seed=12))


def test_different_weights_same_vocabulary_greedy_identity(loop, synthetic_pair):
    target, draft = synthetic_pair
    c = start(loop, target, draft, num_ctx=512, num_parallel=2, n_layer=3, p_min=0.0)
    try:
        drafted = rejected = 0
        for prompt in ("one two three four five", "the cat sat on the mat and the dog"):
            spec, plain = both(loop, c, prompt=prompt, raw=True, num_predict=40)
            assert_same(spec, plain)
            drafted += spec[1].draft_tokens
            rejected += spec[1].draft_tokens - spec[1].draft_accepted
        assert drafted > 0 and rejected > 0
    finally:
        run(loop, c.close())


def test_rejected_drafts_leave_the_draft_kv_and_a_follow_up_is_exact(loop, smollm2_path, synthetic_pair):
    """SmolLM2 with a random-weight draft of its vocabulary (most drafts rejected): a reply, then a follow-up on
    the same slot's cells (`context`). The follow-up must equal the same prompt decoded without drafts from the
    same cached prefix, and its drafts (from the draft context cut back after each rejection, then caught up
    with the follow-up's prompt) verify like any others."""
    c = start(loop, smollm2_path, synthetic_pair[1], num_ctx=1024, num_parallel=1, p_min=0.0)
    try:
        greedy = P.SamplingParams(temperature=0.0, repeat_penalty=1.0)
        replies = {}
        for spec in (True, False):          # the same two requests with drafts and without, each from a cold slot
            text, done, lps = run(loop, collect(c, P.GenerateRequest(id=rid(), prompt=LIST, raw=True, num_predict=24,
                                                                     sampling=greedy, speculate=spec, logprobs=True,
                                                                     top_logprobs=5)))
            follow = {"prompt": " And backwards: ten, nine,", "raw": True, "context": done.context_tokens,
                      "num_predict": 24, "sampling": greedy, "logprobs": True, "top_logprobs": 5}
            warm = run(loop, collect(c, P.GenerateRequest(id=rid(), speculate=spec, **follow)))
            assert warm[1].cached_tokens > 0
            if spec:
                assert done.draft_tokens > done.draft_accepted and warm[1].draft_tokens > 0
            replies[spec] = (text, done, lps), warm
            run(loop, collect(c, P.GenerateRequest(id=rid(), prompt="Unrelated.", raw=True, num_predict=1,
                                                   sampling=greedy)))      # the slot forgets the prefix
    finally:
        run(loop, c.close())
    (first, follow_up), (plain_first, plain_follow_up) = replies[True], replies[False]
    assert_same(first, plain_first)
    if first[0] == plain_first[0]:          # the same context: the follow-ups are comparable
        assert_same(follow_up, plain_follow_up)


@pytest.fixture(scope="module")
def random_drafted(loop, smollm2_path, synthetic_pair):
    """SmolLM2 with a random-weight draft of its vocabulary, drafting whatever it is unsure of (p_min 0)."""
    c = start(loop, smollm2_path, synthetic_pair[1], num_ctx=1024, num_parallel=2, p_min=0.0)
    yield c
    run(loop, c.close())


def test_smollm2_with_a_random_draft_gives_its_own_reply(loop, random_drafted):
    spec, plain = both(loop, random_drafted, messages=EDIT, num_predict=40)
    assert_same(spec, plain)
    assert spec[1].draft_tokens > spec[1].draft_accepted


def test_a_sampled_reply_with_a_seed_is_the_same(loop, random_drafted):
    """Temperature 0.8 with penalties: every token is still sampled by the sequence's own chain at its own row, so
    drafts (mostly wrong here) change nothing."""
    s = P.SamplingParams(temperature=0.8, top_k=40, top_p=0.9, repeat_penalty=1.1, seed=99)
    spec, plain = both(loop, random_drafted, messages=STORY, sampling=s, num_predict=40)
    assert_same_sampled(spec, plain)
    assert spec[1].draft_tokens > 0


def test_a_grammar_reply_under_a_draft_model(loop, random_drafted):
    msgs = [{"role": "user", "content": "Give a JSON object with keys a, b, c whose values are 1, 2, 3."}]
    spec, plain = both(loop, random_drafted, messages=msgs, json_mode=True, num_predict=40)
    assert_same(spec, plain)
    assert spec[1].draft_tokens > 0
