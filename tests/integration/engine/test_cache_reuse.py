"""Cache reuse after a change (PlanOptions.cache_reuse, llama-server's --cache-reuse; app/engine/runner/cache/chunk_reuse.py)
in a real runner: SmolLM2 on llama.cpp (CPU, 1 thread). A long prompt whose early line changes (a date, as OpenCode's
`<env>` block) computes only the changed tokens and the tail, the rest moved from the slot's cells; a block deleted
from the middle (llama-server's case) computes only the tail; a conversation that lost its slot gets the same from
host RAM. Off (the default), only the common prefix is reused and the reply equals a cold run's. The moved cells
were computed next to the old text, so the reply is not a cold run's exactly: it is checked to stay sane (the cold
reply's tokens rank at the top of the reused run's distribution), not equal. Families whose memory cannot move cells
(a window-sized SWA cache, a recurrent state) take the normal path with the option on."""
from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from app.engine import protocol as P
from app.engine.client import RunnerClient
from app.engine.gguf.model_info import read_model_info
from app.engine.layout.types import DraftPlan
from engine_util import collect, cpu_layout, greedy, request_id
from engine_util import run as run_for

# two SmolLM2 runners and ~800-token prompts: a minute on two quiet cores, many more on a shared machine
pytestmark = pytest.mark.timeout(1800)
from gguf_families import write_gemma2, write_mamba

MIN_CHUNK = 16


def run(loop, coro):
    return run_for(loop, coro, timeout=900)


def prompt(date: str, *, drop: int | None = None, question: str = "Which tool reads a file?") -> str:
    """An agent-like prompt: a header with the date early, then 30 tool descriptions (one of them left out with
    `drop`), then the question."""
    tools = [f"Tool {i}: {name}(path, limit) {verb} the {thing} at path and returns at most limit lines of it.\n"
             for i, (name, verb, thing) in enumerate(
                 (n, v, t) for n in ("read", "write", "grep", "glob", "list", "patch")
                 for v, t in (("reads", "file"), ("scans", "folder"), ("checks", "link"), ("opens", "archive"),
                              ("prints", "log")))]
    if drop is not None:
        tools.pop(drop)
    return (f"You are a coding agent working in /home/user/project.\nToday's date: {date}\n\n"
            + "".join(tools) + f"\nQuestion: {question}\nAnswer:")


def gen(text: str, **kw) -> P.GenerateRequest:
    kw.setdefault("num_predict", 8)
    return P.GenerateRequest(id=request_id("cr"), prompt=text, raw=True, sampling=greedy(), logprobs=True,
                             top_logprobs=5, **kw)


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def start(loop, path, *, cache_reuse: int, num_parallel: int = 1, cache_mib: int = 64, n_layer: int = 30,
          draft=None):
    layout = cpu_layout(path, num_ctx=2048, num_parallel=num_parallel, n_batch=512, n_layer=n_layer)
    layout = replace(layout, options=replace(layout.options, cache_reuse=cache_reuse), draft=draft)
    c = RunnerClient(layout, n_threads=1, model_name=path.stem, prompt_cache_bytes=cache_mib << 20)
    run(loop, c.start())
    return c


@pytest.fixture(scope="module")
def reusing(loop, smollm2_path):
    c = start(loop, smollm2_path, cache_reuse=MIN_CHUNK)
    yield c
    run(loop, c.close())


@pytest.fixture(scope="module")
def plain(loop, smollm2_path):
    c = start(loop, smollm2_path, cache_reuse=0)
    yield c
    run(loop, c.close())


def changed_span(loop, client, a: str, b: str) -> tuple[int, int]:
    """(common prefix, tokens of b after its last token shared with a at the end) of two prompts' tokens."""
    ta = run(loop, client.tokenize(a))
    tb = run(loop, client.tokenize(b))
    n = 0
    while n < min(len(ta), len(tb)) and ta[n] == tb[n]:
        n += 1
    k = 0
    while k < min(len(ta), len(tb)) - n and ta[-1 - k] == tb[-1 - k]:
        k += 1
    return n, len(tb) - n - k


def assert_sane(warm, cold):
    """The reused run's reply is not necessarily the cold one's; each token the cold run chose greedily is among the
    reused run's five most likely at the same place while the replies agree, and the first always is."""
    (t1, d1, lp1), (t2, d2, lp2) = warm, cold
    assert d1.completion_tokens > 0 and t1.strip()
    for a, b in zip(lp1, lp2):
        assert b.token in [t.token for t in a.top], (a, b)
        if a.token != b.token:
            break


def test_a_changed_date_computes_only_the_change_and_the_tail(loop, reusing, plain):
    day1 = prompt("Fri Nov 27 2026")
    day2_same = prompt("Sat Nov 28 2026")
    day2 = prompt("Sat Nov 28 2026", question="Which tool opens an archive?")
    n_prefix, n_date = changed_span(loop, reusing, day1, day2_same)
    n_same, _ = changed_span(loop, reusing, day2_same, day2)
    for c in (reusing, plain):
        run(loop, collect(c, gen(day1)))
    warm = run(loop, collect(reusing, gen(day2)))
    done = warm[1]
    computed = done.prompt_tokens - done.cached_tokens
    assert done.prompt_tokens > 600 and n_prefix < 30 and 0 < n_date < 10      # the date is early
    # the date's tokens and the tail from the changed question on are computed; every tool description in between
    # is moved
    tail = done.prompt_tokens - n_same
    assert computed <= n_date + tail, (computed, n_date, tail)
    assert done.reused_tokens == done.cached_tokens - n_prefix > 500
    st = run(loop, reusing.stats())
    assert st.cache_reused_tokens >= done.reused_tokens
    # off: only the prefix, and the reply equals a cold run's
    off = run(loop, collect(plain, gen(day2)))
    assert off[1].cached_tokens == n_prefix and off[1].reused_tokens == 0
    cold = run(loop, collect(plain, gen(day2, cache_prompt=False)))
    assert (off[0], [x.token for x in off[2]]) == (cold[0], [x.token for x in cold[2]])
    assert_sane(warm, cold)
    # the next turn continues the moved cells as a plain prefix
    nxt = run(loop, collect(reusing, gen(day2 + warm[0] + "\nQuestion: and which one writes?\nAnswer:")))
    assert nxt[1].cached_tokens >= done.prompt_tokens and nxt[1].reused_tokens == 0


def test_a_deleted_block_moves_the_rest_back(loop, reusing, plain):
    full, shorter = prompt("Mon Nov 30 2026"), prompt("Mon Nov 30 2026", drop=3)
    run(loop, collect(reusing, gen(full)))
    warm = run(loop, collect(reusing, gen(shorter)))
    n_prefix, n_changed = changed_span(loop, reusing, full, shorter)
    assert n_changed == 0                                      # a pure deletion: llama-server's own case
    assert warm[1].prompt_tokens - warm[1].cached_tokens <= 2
    assert warm[1].reused_tokens > 400
    cold = run(loop, collect(plain, gen(shorter, cache_prompt=False)))
    assert_sane(warm, cold)


def test_a_conversation_back_from_host_ram_reuses_after_the_change(loop, reusing):
    """One slot: another prompt takes it, the first goes to host RAM; its next day comes back from there."""
    day1, day2 = prompt("Tue Dec 1 2026"), prompt("Wed Dec 2 2026")
    run(loop, collect(reusing, gen(day1)))
    run(loop, collect(reusing, gen("An unrelated prompt about the sea and its tides. " * 20)))
    warm = run(loop, collect(reusing, gen(day2)))
    n_prefix, n_changed = changed_span(loop, reusing, day1, day2)
    assert warm[1].prompt_tokens - warm[1].cached_tokens <= n_changed + 2
    assert warm[1].reused_tokens > 500


def test_a_draft_model_keeps_its_own_cells_exact(loop, smollm2_path, reusing):
    """Speculative decoding with a draft model (SmolLM2 drafting for itself): the target's prompt is moved, the
    draft computes its part from the change on (it catches up by common prefix, never moves cells), so its drafts
    still come true, and the reply is the one the same runner gives without a draft."""
    day1, day2 = prompt("Thu Dec 10 2026"), prompt("Fri Dec 11 2026")
    c = start(loop, smollm2_path, cache_reuse=MIN_CHUNK,
              draft=DraftPlan(model_path=str(smollm2_path), name="draft", p_min=0.0, max_tokens=4))
    try:
        run(loop, collect(c, gen(day1, num_predict=24)))
        text, done, _ = run(loop, collect(c, gen(day2, num_predict=24)))
    finally:
        run(loop, c.close())
    assert done.reused_tokens > 500
    assert done.draft_tokens > 0 and done.draft_accepted >= done.draft_tokens // 2, done
    run(loop, collect(reusing, gen(day1, num_predict=24)))
    plain_text, plain_done, _ = run(loop, collect(reusing, gen(day2, num_predict=24)))
    assert plain_done.reused_tokens == done.reused_tokens
    assert text == plain_text


@pytest.mark.parametrize("family", ["gemma2", "mamba"])
def test_memories_that_cannot_move_cells_take_the_normal_path(loop, tmp_path, family):
    """A window-sized SWA cache (gemma2, window 32) cannot shift; a recurrent state (mamba) has no cells to move:
    with the option on, nothing is moved and the reply equals a cold run's."""
    path = write_gemma2(tmp_path / "g.gguf", window=32) if family == "gemma2" else write_mamba(tmp_path / "m.gguf")
    c = start(loop, path, cache_reuse=MIN_CHUNK, n_layer=read_model_info(path).n_layer)
    try:
        day1, day2 = prompt("Thu Dec 3 2026"), prompt("Fri Dec 4 2026")
        run(loop, collect(c, gen(day1)))
        warm = run(loop, collect(c, gen(day2)))
        n_prefix, _ = changed_span(loop, c, day1, day2)
        assert warm[1].cached_tokens <= n_prefix and warm[1].reused_tokens == 0
        cold = run(loop, collect(c, gen(day2, cache_prompt=False)))
        assert [x.token for x in warm[2]] == [x.token for x in cold[2]]
        assert run(loop, c.stats()).cache_reused_tokens == 0
    finally:
        run(loop, c.close())
