"""The step budget (runner/step/step_budget.py), pure: the prompt tokens a step carries for given measured costs, how
the costs are learned from steps, and how the budget is shared among readers (watched ones first). No model, no
clock: every cost here is a number the test chooses."""
from __future__ import annotations

import pytest

from app.engine.runner.step import step_budget as B
from app.engine.runner.step.step_budget import (BANK_MAX_S, FLOOR_TOKENS, MIN_TARGET_S, PaceCosts, Reader,
                                                finishing_cut, prompt_budget, share_budget)
from app.engine.runner_settings import RunnerSettings


def costs(alone: dict[int, float] | None = None, prompt_s: float | None = None,
          mixed_s: float | None = None) -> PaceCosts:
    c = PaceCosts(prompt_s=prompt_s, mixed_s=mixed_s, steps=10)
    c.alone = {n: (s, 10) for n, s in (alone or {}).items()}
    return c


def test_without_writers_a_prompt_takes_the_whole_batch():
    c = costs({1: 0.1}, prompt_s=0.014)
    assert prompt_budget(c, capacity=512, writers=0) == 512
    assert prompt_budget(PaceCosts(), capacity=512, writers=2) == 512     # nothing measured yet: as before
    assert prompt_budget(c, capacity=512, writers=1, factor=0) == 512     # the bound turned off


def test_a_writers_step_carries_what_its_allowance_and_the_bank_pay_for():
    # a CPU: a writer's step alone 100 ms, a prompt token 5 ms on top of it; the bank empty
    c = costs({1: 0.100}, prompt_s=0.014, mixed_s=0.005)
    assert prompt_budget(c, capacity=511, writers=1, factor=3.0) == 40     # (3 - 1) x 100 ms / 5 ms
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 0      # 20 tokens: saves up for FLOOR_TOKENS
    c.bank = 0.1
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 40     # (100 saved + 100) ms / 5 ms
    c.pending = -0.1                                                       # the step in flight spends it
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 0
    c.pending = 0.0
    assert prompt_budget(c, capacity=511, writers=1, factor=100.0) == 511  # never more than the batch holds
    assert prompt_budget(c, capacity=8, writers=1, factor=2.0) == 8        # a batch smaller than the floor
    c.bank = BANK_MAX_S                                                    # a very slow machine: the bank is full,
    c.mixed_s = 1.0                                                        # the chunk goes smaller than the floor
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 2
    # before any mixed step, the prompt-only steps' cost per token sizes it
    c = costs({1: 0.100}, prompt_s=0.0025)
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 40
    assert FLOOR_TOKENS == 32


def test_each_count_of_writers_has_its_own_alone_step():
    c = costs({1: 0.1, 3: 0.2}, mixed_s=0.005)
    assert prompt_budget(c, capacity=509, writers=3, factor=2.0) == 40
    assert prompt_budget(c, capacity=510, writers=2, factor=2.0) == 0      # never measured: one step measures it


def test_a_fast_device_keeps_big_chunks():
    # a GPU: a writers' step 3 ms, a prompt token 20 us: the step may still take MIN_TARGET_S
    c = costs({1: 0.003}, mixed_s=0.00002)
    assert prompt_budget(c, capacity=1023, writers=1, factor=2.0) == 1023
    assert prompt_budget(c, capacity=4095, writers=1, factor=2.0) == int((MIN_TARGET_S - 0.003) / 0.00002)


def test_a_watched_prompt_loosens_the_bound_of_unwatched_writers():
    c = costs({1: 0.1}, mixed_s=0.005)
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0, watched_reader=True) == 140   # (8 - 1) x 100 / 5
    assert prompt_budget(c, capacity=511, writers=1, watched_writers=1, factor=3.0, watched_reader=True) == 40
    assert prompt_budget(c, capacity=511, writers=1, factor=3.0) == 40


def test_costs_are_learned_from_steps():
    c = PaceCosts()
    c.observe(512, 0, 7.0)                       # a prompt-only chunk
    assert c.prompt_s == pytest.approx(7.0 / 512) and c.mixed_s is None
    c.observe(20, 0, 5.0)                        # a short prompt-only step says little: not counted
    assert c.prompt_s == pytest.approx(7.0 / 512)
    c.observe(8, 1, 0.2)                         # mixed, but the writer's step alone is not known yet
    assert c.mixed_s is None
    c.observe(0, 1, 0.065)
    c.observe(0, 1, 0.075)                       # a moving average
    assert c.alone_s(1) == pytest.approx(0.065 + B.RATE * 0.010)
    c.observe(8, 1, 0.147)
    assert c.mixed_s == pytest.approx((0.147 - c.alone_s(1)) / 8)
    c.observe(8, 1, 0.01)                        # faster than the writer alone (noise): a floor, never <= 0
    assert c.mixed_s > 0


def test_the_bank_earns_the_allowance_and_pays_what_steps_took_beyond_alone():
    c = costs({1: 0.1}, mixed_s=0.01)
    c.pending = 0.05                             # what a plan in flight was expected to add: settled by observe
    c.observe(0, 1, 0.1, allowance=0.075)
    assert c.pending == 0        # a writer's step alone while a prompt waits: saved
    c.observe(0, 1, 0.1, allowance=0.075)
    assert c.bank == pytest.approx(0.15, abs=0.01)
    c.observe(20, 1, 0.4, allowance=0.075)       # a chunk that took 0.3 s beyond alone: spent, and owed
    assert c.bank == pytest.approx(0.15 + 0.075 - 0.3, abs=0.02)
    for _ in range(1000):                        # saving is bounded: one token waits at most BANK_MAX_S
        c.observe(0, 1, 0.1, allowance=0.075)
    assert c.bank == pytest.approx(BANK_MAX_S)
    c.observe(0, 1, 0.1)                         # no prompt waits (no allowance): nothing stays saved
    assert c.bank == 0
    c.observe(512, 0, 7.0)
    assert c.bank == 0


def test_an_old_alone_step_is_measured_again():
    c = costs({1: 0.1}, mixed_s=0.005)
    assert prompt_budget(c, capacity=511, writers=1, factor=3.0) > 0
    c.steps += B.ALONE_MAX_AGE + 1
    assert prompt_budget(c, capacity=511, writers=1, factor=3.0) == 0
    c.observe(0, 1, 0.1)
    assert prompt_budget(c, capacity=511, writers=1, factor=3.0) > 0


@pytest.mark.parametrize("alone,per_token,fixed", [(0.1, 0.03, 0.0), (0.065, 0.014, 0.05), (0.2, 0.004, 0.02),
                                                   (0.01, 0.0001, 0.001)])
@pytest.mark.parametrize("factor", [1.5, 1.75, 3.0])
def test_writers_keep_their_pace_on_average_and_prompts_advance(alone, per_token, fixed, factor):
    """Steps cost what they cost on a CPU (the writer's step, plus a fixed part and a cost per token for a chunk;
    the learner is not told which). Fed the steps its own budgets make, the writer's average step stays within its
    factor (a little over: a chunk's fixed part is learned as per-token cost) and the prompt still gets most of
    the time the writer gives up."""
    def step_s(k: int) -> float:
        return alone + (fixed + per_token * k if k else 0.0)

    c, total, prompt = PaceCosts(), 0.0, 0
    c.observe(512, 0, fixed + per_token * 512)
    c.observe(0, 1, alone)
    n, allow = 400, B.allowance(alone, factor)
    k = prompt_budget(c, capacity=511, writers=1, factor=factor)
    for _ in range(n):
        c.planned(k, allow)                               # as the loop runs it: the next plan is built while
        k_next = prompt_budget(c, capacity=511, writers=1, factor=factor)    # this one's step runs
        t = step_s(k)
        c.observe(k, 1, t, allowance=allow)
        total += t
        prompt += k
        k = k_next
    target = max(factor * alone, MIN_TARGET_S)
    assert total / n <= 1.1 * target                      # the writer's pace: >= ~1/factor of its own
    assert prompt > 0
    given = n * (target - alone)                          # what the writer gave up, in seconds
    assert prompt * per_token >= 0.6 * min(given, n * per_token * 511)


def test_watched_readers_are_served_first_then_the_others_share_what_is_left():
    rs = [Reader("agent", 6000, False), Reader("chat", 300, True), Reader("batch", 900, False)]
    assert share_budget(rs, 512) == {"chat": 300, "agent": 106, "batch": 106}
    assert share_budget(rs, 200) == {"chat": 200, "agent": 0, "batch": 0}
    assert share_budget([Reader("a", 100, False), Reader("b", 100, False)], 8) == {"a": 4, "b": 4}
    assert share_budget(rs, 0) == {"chat": 0, "agent": 0, "batch": 0}
    # a watched prompt that ends in this step gets its remainder whole, before another watched one's share
    rs = [Reader("agent", 6000, True), Reader("chat", 57, True)]
    assert share_budget(rs, 57 + 16) == {"chat": 57, "agent": 16}


def test_a_watched_prompt_that_ends_now_gets_a_short_step():
    rs = [Reader("agent", 6000, False), Reader("chat", 40, True)]
    assert finishing_cut(rs, 512) == 40 + FLOOR_TOKENS       # its first token after its own 40 tokens
    assert finishing_cut([Reader("chat", 600, True), Reader("agent", 6000, False)], 512) == 512   # not ending yet
    assert finishing_cut([Reader("bg", 40, False), Reader("agent", 6000, False)], 512) == 512     # nobody watches
    assert finishing_cut(rs, 20) == 20


def test_the_runner_default_is_the_budgets():
    assert RunnerSettings().decode_latency_factor == B.DEFAULT_FACTOR
