"""Speculative decoding's policy alone (no model): prompt lookup's guesses, how far they come true (scored
whether drafted or not), and how long a draft pays against measured step costs. The runner side (exact replies
with drafts) is tests/integration/engine/test_speculative.py."""
from __future__ import annotations

from app.engine.runner.draft_policy import MAX_AGE, PRIOR_EXP, PRIOR_HIT, GuessScore, StepCosts
from app.engine.runner.ngram_draft import NgramDrafter


def test_lookup_proposes_what_followed_the_longest_most_recent_match():
    d = NgramDrafter([1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 1, 2, 3, 4])
    assert d.lookup(3) == [5, 9, 2]            # "1 2 3 4" (4 tokens) wins over the more recent "2 3 4"
    d.push(5)
    assert d.lookup(4) == [9, 2, 3, 4]
    assert NgramDrafter([5, 1, 2, 3, 8, 1, 2, 3, 9, 1, 2, 3]).lookup(5) == [9, 1, 2, 3]   # of equals, the most recent
    assert NgramDrafter([7, 1, 2, 8, 1, 2]).lookup(5) == []                   # a 2-token match is chance: no draft
    assert NgramDrafter([1, 2, 3, 4, 5, 6]).lookup(4) == []                     # nothing repeats: no draft


def test_guesses_are_scored_whether_drafted_or_not():
    d = NgramDrafter([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3])
    assert d.lookup(0) == []                        # nothing drafted, yet the guess [4, 5, ...] is scored
    before = d.score.chances(3)
    for t in (4, 5, 6):                             # ... and it comes true: the odds rise, by position
        d.push(t)
    assert d.lookup(2) == [7, 8]
    assert d.score.at == 3                          # the new guess continues the scored one: scored at depth 3
    d.push(0)                                       # a miss ends the run
    assert d.score.at == 0 and d.score.guess == []
    fresh = GuessScore()
    fresh.offer([4, 5, 6])
    assert fresh.chances(3) == before               # the prior, before any outcome
    odds = [h / n for h, n in zip(d.score.hit, d.score.seen)]
    assert odds[0] > PRIOR_HIT and odds[1] < odds[0] and odds[2] == PRIOR_HIT    # right, right + right + wrong, unseen


def score_of(run: int, rounds: int = 30) -> GuessScore:
    """A score after `rounds` guesses of which each came true for `run` tokens and then missed."""
    s = GuessScore()
    for _ in range(rounds):
        s.offer(list(range(100, 100 + 32)))
        for i in range(run):
            s.push(100 + i)
        s.push(-1)
    s.offer(list(range(100, 100 + 32)))
    return s


def cpu_like_costs() -> StepCosts:
    """Decode seconds as measured on a 2-core EPYC at 1 thread (draft_policy.py): extra rows are dear."""
    return steady_costs((2, 0.115), (4, 0.150), (8, 0.230), (16, 0.340), (17, 0.350))


def steady_costs(*measured: tuple[int, float], one_row: float = 0.050) -> StepCosts:
    """Each (rows, seconds) measured 3 times while a 1-row step takes `one_row` (the pace costs are relative to)."""
    costs = StepCosts()
    for rows, sec in measured:
        for _ in range(3):
            for _ in range(10):
                costs.record(1, one_row)
            costs.record(rows, sec)
    return costs


def test_draft_length_follows_the_score_and_the_measured_costs():
    costs = cpu_like_costs()
    repeats, prose = score_of(run=30), score_of(run=0)
    assert costs.step(1).take(repeats.chances(16)) >= 8         # a sequence that repeats: long drafts pay
    assert costs.step(1).take(prose.chances(16)) == 0           # guesses that never come true: no draft
    short = score_of(run=1)                       # the first token right, the second never
    assert short.chances(2)[0] > 0.9
    assert costs.step(1).take(short.chances(16)) == 0           # 1 token for a 2-row step (2.3x): a loss
    cheap = steady_costs(*((rows, 0.010 + 0.0002 * rows) for rows in range(2, 18)), one_row=0.0102)   # a GPU
    assert cheap.step(1).take(short.chances(16)) == 1           # ... there the same guess pays
    assert StepCosts(measured=False).step(1).take(prose.chances(5)) == 5       # "on": every guess whole


def test_unmeasured_rows_are_scaled_from_measured_neighbours():
    costs = StepCosts()
    assert costs.cost(1) == 1.0 and 1.0 < costs.cost(2) < costs.cost(16) < 16     # the prior shape alone
    for _ in range(3):
        costs.record(1, 0.05)
        costs.record(16, 0.35)
    assert 6.0 < costs.cost(16) / costs.cost(1) < 8.0                             # 16 rows: ~7 1-row steps
    assert costs.cost(1) < costs.cost(4) < costs.cost(8) < costs.cost(16)         # log-log between them
    assert costs.cost(32) > costs.cost(16)
    costs.record(2, 9.0)                                                          # one slow step: not yet used
    assert costs.cost(2) < costs.cost(16)


def test_costs_are_relative_to_the_pace_at_the_time_so_load_changes_cancel():
    costs = StepCosts()
    for _ in range(5):                                          # a busy spell: every step takes twice as long
        costs.record(1, 0.10)
        costs.record(17, 0.70)
    for _ in range(50):                                         # then only 1-row steps, fast again
        costs.record(1, 0.05)
    assert 6.0 < costs.cost(17) / costs.cost(1) < 8.0           # 17 rows still cost ~7 1-row steps, not 14
    assert costs.step(1).take(score_of(run=30).chances(16)) >= 4


def test_others_in_the_batch_raise_the_bar():
    costs = cpu_like_costs()
    s = score_of(run=6)
    alone, shared = costs.step(1), costs.step(4)
    assert alone.take(s.chances(16)) >= shared.take(s.chances(16))


def test_drafts_that_deliver_less_than_promised_lower_the_odds():
    s = score_of(run=30)
    before = s.chances(16)
    for _ in range(3):                                          # drafts promising ~12 tokens get 2 accepted
        s.drafted(sum(before))
        s.verified(2)
    after = s.chances(16)
    assert after[0] < before[0] * 0.5
    assert cpu_like_costs().step(1).take(after) == 0
    for _ in range(10):                                         # drafts that deliver bring the odds back
        s.drafted(sum(s.chances(16)))
        s.verified(16)
    assert s.chances(16)[0] == before[0]


def test_old_measurements_expire_so_a_busy_spell_does_not_veto_drafts_for_good():
    costs = StepCosts()
    for _ in range(3):
        costs.record(17, 5.0)                                   # drafts measured while the machine was busy
    for _ in range(MAX_AGE):
        costs.record(1, 0.05)                                   # then only 1-row steps, fast again
    assert costs.cost(17) == costs.cost(1) * 17 ** PRIOR_EXP     # the stale bucket is the prior again
