"""The step budget (runner/step/step_budget.py), pure: the prompt tokens a step carries for given measured costs, how
the costs are learned from steps, and how the budget is shared among readers (watched ones first). No model, no
clock: every cost here is a number the test chooses."""
from __future__ import annotations

import pytest

from app.engine.runner.step import step_budget as B
from app.engine.runner.step.step_budget import (FLOOR_TOKENS, MIN_TARGET_S, PaceCosts, Reader, finishing_cut,
                                                prompt_budget, share_budget)
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


def test_a_writers_step_is_bounded_to_a_multiple_of_its_alone_step():
    # a CPU: a writer's step alone 100 ms, a prompt token 10 ms on top of it
    c = costs({1: 0.100}, prompt_s=0.014, mixed_s=0.010)
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 10     # (2 x 100 - 100) ms / 10 ms
    assert prompt_budget(c, capacity=511, writers=1, factor=3.0) == 20
    assert prompt_budget(c, capacity=511, writers=1, factor=1.2) == FLOOR_TOKENS   # prompts still advance
    assert prompt_budget(c, capacity=511, writers=1, factor=100.0) == 511   # never more than the batch holds
    # before any mixed step, the prompt-only steps' cost per token sizes it
    c = costs({1: 0.100}, prompt_s=0.005)
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 20


def test_each_count_of_writers_has_its_own_alone_step():
    c = costs({1: 0.1, 3: 0.2}, mixed_s=0.01)
    assert prompt_budget(c, capacity=509, writers=3, factor=2.0) == 20
    assert prompt_budget(c, capacity=510, writers=2, factor=2.0) == 0      # never measured: one step measures it


def test_a_fast_device_keeps_big_chunks():
    # a GPU: a writers' step 3 ms, a prompt token 20 us: the step may still take MIN_TARGET_S
    c = costs({1: 0.003}, mixed_s=0.00002)
    assert prompt_budget(c, capacity=2047, writers=1, factor=2.0) == 2047
    assert prompt_budget(c, capacity=4095, writers=1, factor=2.0) == int((MIN_TARGET_S - 0.003) / 0.00002)


def test_the_budget_grows_at_most_twofold_per_step():
    c = costs({1: 0.1}, mixed_s=0.001)           # an estimate that says 100 tokens fit
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0, last=10) == 20
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0, last=2) == 2 * FLOOR_TOKENS
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0, last=200) == 100


def test_a_watched_prompt_loosens_the_bound_of_unwatched_writers():
    c = costs({1: 0.1}, mixed_s=0.01)
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0, watched_reader=True) == 70    # (8 x 100 - 100) / 10
    assert prompt_budget(c, capacity=511, writers=1, watched_writers=1, factor=2.0, watched_reader=True) == 10
    assert prompt_budget(c, capacity=511, writers=1, factor=2.0) == 10


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


def test_an_old_alone_step_is_measured_again():
    c = costs({1: 0.1}, mixed_s=0.01)
    assert prompt_budget(c, capacity=511, writers=1) > 0
    c.steps += B.ALONE_MAX_AGE + 1
    assert prompt_budget(c, capacity=511, writers=1) == 0
    c.observe(0, 1, 0.1)
    assert prompt_budget(c, capacity=511, writers=1) > 0


@pytest.mark.parametrize("fixed,per_token", [(0.065, 0.005), (0.2, 0.004), (0.010, 0.0001)])
def test_the_feedback_settles_where_a_mixed_step_takes_the_target(fixed, per_token):
    """Steps cost what a CPU's do: a decode row pays the weights' reads (`fixed`), a small batch of prompt tokens
    mostly overlaps them, a big one costs per token. Fed the steps its own budgets make, the learned cost settles
    so that a mixed step takes about the target."""
    def step_s(k: int) -> float:
        return max(fixed, 0.3 * fixed + per_token * k)

    c, factor, last = PaceCosts(), 2.0, None
    c.observe(512, 0, step_s(512))
    c.observe(0, 1, step_s(0))
    for _ in range(60):
        k = prompt_budget(c, capacity=4095, writers=1, factor=factor, last=last)
        last = k
        c.observe(k, 1, step_s(k))
    target = max(factor * fixed, MIN_TARGET_S)
    assert k > FLOOR_TOKENS
    assert 0.8 * target <= step_s(k) <= 1.15 * target or k == 4095


def test_watched_readers_are_served_first_then_the_others_share_what_is_left():
    rs = [Reader("agent", 6000, False), Reader("chat", 300, True), Reader("batch", 900, False)]
    assert share_budget(rs, 512) == {"chat": 300, "agent": 106, "batch": 106}
    assert share_budget(rs, 200) == {"chat": 200, "agent": 0, "batch": 0}
    assert share_budget([Reader("a", 100, False), Reader("b", 100, False)], 8) == {"a": 4, "b": 4}
    assert share_budget(rs, 0) == {"chat": 0, "agent": 0, "batch": 0}


def test_a_watched_prompt_that_ends_now_gets_a_short_step():
    rs = [Reader("agent", 6000, False), Reader("chat", 40, True)]
    assert finishing_cut(rs, 512) == 40 + FLOOR_TOKENS       # its first token after its own 40 tokens
    assert finishing_cut([Reader("chat", 600, True), Reader("agent", 6000, False)], 512) == 512   # not ending yet
    assert finishing_cut([Reader("bg", 40, False), Reader("agent", 6000, False)], 512) == 512     # nobody watches
    assert finishing_cut(rs, 20) == 20


def test_the_runner_default_is_the_budgets():
    assert RunnerSettings().decode_latency_factor == B.DEFAULT_FACTOR
