"""Speculative decoding's policy alone (no model): prompt lookup's guesses, how far they come true (scored
whether drafted or not), and how long a draft pays against measured step costs. The runner side (exact replies
with drafts) is tests/integration/engine/test_speculative.py."""
from __future__ import annotations

import random
import statistics

from app.engine.runner.speculation.draft_policy import (MAX_AGE, MIN_GAIN, MIN_SAMPLES, PRIOR_EXP, PRIOR_HIT, GuessScore,
                                                         StepCosts, match_bucket)
from app.engine.runner.speculation.ngram_draft import NgramDrafter, NgramProposer
import draft_replay


def test_lookup_proposes_what_followed_the_longest_most_recent_match():
    d = NgramDrafter([1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 1, 2, 3, 4])
    assert d.lookup(3) == [5, 9, 2]            # "1 2 3 4" (4 tokens) wins over the more recent "2 3 4"
    d.push(5)
    assert d.lookup(4) == [9, 2, 3, 4]
    assert NgramDrafter([5, 1, 2, 3, 8, 1, 2, 3, 9, 1, 2, 3]).lookup(5) == [9, 1, 2, 3]   # of equals, the most recent
    assert NgramDrafter([7, 1, 2, 8, 1, 2]).lookup(5) == []                   # a 2-token match is chance: no draft
    assert NgramDrafter([1, 2, 3, 4, 5, 6]).lookup(4) == []                     # nothing repeats: no draft


def test_a_copy_that_renames_something_resumes_where_it_left_off():
    """A module with two methods ending alike (`add_item(self, name): A B C`, `remove_item(self, name): D D D`), its
    reply copying the first under a new name: after the rename, the copy goes on from the first method's body,
    not from the most recent place the shorter n-gram occurred."""
    module = [11, 12, 13, 1, 50, 2, 3, 4, 5, 6, 7, 9, 60, 2, 3, 4, 8, 8, 8]
    d = NgramDrafter(module + [11, 12, 13, 1])
    assert d.lookup(2) == [50, 2]
    for t in (70, 2, 3, 4):                         # 70: the new name
        d.push(t)
    assert d.lookup(3) == [5, 6, 7]
    assert NgramDrafter(module + [70, 2, 3, 4]).lookup(3) == [8, 8, 8]     # no copy under way: the most recent


def test_guesses_are_scored_whether_drafted_or_not():
    d = NgramDrafter([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3])
    assert d.lookup(0) == []                        # nothing drafted, yet the guess [4, 5, ...] is scored
    assert d.score.match == 3                       # "1 2 3" agrees with the tail, nothing before it does
    before = d.score.chances(3)
    for t in (4, 5, 6):                             # ... and it comes true: the odds rise, by match length
        d.push(t)
    assert d.lookup(2) == [7, 8]
    assert d.score.at == 3                          # the new guess continues the scored one: a 6-token match now
    d.push(0)                                       # a miss ends the run
    assert d.score.at == 0 and d.score.guess == []
    fresh = GuessScore()
    fresh.offer([4, 5, 6], 3)
    assert fresh.chances(3) == before               # the prior, before any outcome
    rates = d.score.rates()
    m3, m5, m6 = match_bucket(3), match_bucket(5), match_bucket(6)
    assert rates[m3] > PRIOR_HIT[m3] and rates[m6] < rates[m5]     # right at 3, 4 and 5 tokens, wrong at 6
    for i in range(m6 + 1, len(rates)):             # unseen: the prior, or the next shorter bucket's odds if higher
        assert rates[i] == max(PRIOR_HIT[i], rates[i - 1])
    assert rates[m6 + 1] < rates[m5] and rates[match_bucket(96)] == PRIOR_HIT[-1]


def test_one_miss_where_a_long_copy_meets_an_edit_does_not_stop_the_next_long_copy():
    """Long matches share one bucket whose prior counts as many outcomes: a reply that copied 40 tokens and met an
    edit, then copies again, drafts longer as its new copy grows, up to 64 tokens once the copy is 60 tokens long
    (costs where 65 rows take ~23 1-row steps). With a bucket per 16-32 tokens of match past 32, each prior from the
    next shorter one counted as 2 outcomes, the miss at 69 tokens left its bucket at ~0.86 a token, and the second
    copy's drafts shrank as it neared that length (33 tokens at 29, 6 at 60)."""
    costs = costs_from(draft_replay.epyc_cost)
    s = GuessScore()
    s.offer(list(range(100, 200)), 29)
    for i in range(40):
        s.push(100 + i)
    s.push(-1)                                      # the edit, 69 tokens into the match
    s.offer(list(range(300, 400)), 3)               # the copy resumes: a fresh match ...
    taken = []
    for i in range(60):                             # ... confirmed token by token
        s.push(300 + i)
        if i + 1 in (30, 40, 50, 60):
            taken.append(costs.step(1).take(s.chances(64)))
    assert taken == sorted(taken) and taken[-1] >= 48, taken


def test_a_longer_match_is_measured_back_past_the_longest_ngram():
    text = list(range(10, 40))
    d = NgramDrafter([1] + text + [2] + text[:20])  # the tail repeats 20 tokens of the text: copying
    assert d.lookup(4) == text[20:24] and d.score.match == 20
    assert NgramDrafter([7, 1, 2, 3, 9, 8, 1, 2, 3]).lookup(1) == [9]


def score_of(run: int, rounds: int = 30, match: int = 3) -> GuessScore:
    """A score after `rounds` guesses from `match`-token matches of which each came true for `run` tokens and
    then missed; then such a guess is offered."""
    s = GuessScore()
    for _ in range(rounds):
        s.offer(list(range(100, 100 + 32)), match)
        for i in range(run):
            s.push(100 + i)
        s.push(-1)
    s.offer(list(range(100, 100 + 32)), match)
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
    assert cheap.step(1).take(short.chances(16)) >= 1           # ... there the same guess pays
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


def test_a_draft_grows_with_the_match_a_copying_reply_extends():
    """A reply that quotes phrases (runs ending after 6 tokens) and now and then copies a block (60 tokens): a
    fresh match drafts up to where phrases end, none just before it, and long drafts once a match is past it."""
    def scored(at: int) -> GuessScore:
        s = GuessScore()
        for k in range(12):
            s.offer(list(range(100, 190)), 3)
            for i in range(60 if k % 4 == 3 else 6):
                s.push(100 + i)
            s.push(-1)
        s.offer(list(range(100, 190)), 3)
        s.at = at
        return s
    costs = cpu_like_costs()
    assert 0 < costs.step(1).take(scored(0).chances(32)) <= 6
    assert costs.step(1).take(scored(5).chances(32)) == 0
    assert costs.step(1).take(scored(8).chances(32)) >= 16


def test_a_miss_does_not_stop_a_sequence_from_drafting_its_later_runs():
    """One draft that missed, then a run whose guesses come true token after token, undrafted: the odds follow
    the run, so the sequence drafts again."""
    costs = cpu_like_costs()
    s = score_of(run=40, rounds=2)
    s.offer(list(range(200, 232)), 3)
    s.push(-1)                                      # a drafted guess missed at its first token
    s.offer(list(range(100, 200)), 3)
    for i in range(20):
        s.push(100 + i)
    assert costs.step(1).take(s.chances(32)) >= 8


def test_old_measurements_expire_so_a_busy_spell_does_not_veto_drafts_for_good():
    costs = StepCosts()
    for _ in range(3):
        costs.record(17, 5.0)                                   # drafts measured while the machine was busy
    for _ in range(MAX_AGE):
        costs.record(1, 0.05)                                   # then only 1-row steps, fast again
    assert costs.cost(17) == costs.cost(1) * 17 ** PRIOR_EXP     # the stale bucket is the prior again


def test_the_same_edit_drafts_alike_every_time_it_is_sent():
    """bench/bench_speculative.py's edit through /v1/chat/completions, replayed (tests/support/draft_replay.py) five
    times in a row against one runner's step costs, on a machine whose steps vary by ~15%: every request drafts
    most of the copied module (accepted tokens within 10% of the median count) and gains over decoding without
    drafts. (With the
    odds scaled down after a draft that delivered less than promised, which only drafting could undo, a request
    drafted 3 tokens where the others drafted ~210: one early miss, then 70 guesses in a row came true undrafted.)"""
    prompt, reply = draft_replay.load("edit_chat.json")
    for seed in range(5):
        rng, proposer = random.Random(seed), NgramProposer(StepCosts())
        runs = [draft_replay.replay(prompt, reply, proposer, rng) for _ in range(5)]
        accepted = [r.accepted for r in runs]          # (drafted counts move by a whole draft where a long one
        typical = statistics.median(accepted)           # misses at an edit: up to 64 tokens)
        assert all(0.9 * typical <= n <= 1.1 * typical for n in accepted), (seed, accepted)
        assert min(accepted) >= 150, (seed, accepted)
        assert statistics.median(r.speedup for r in runs) > 1.2, (seed, [r.speedup for r in runs])


def costs_from(table) -> StepCosts:
    """Step costs measured from a machine whose step of r rows takes table(r) 1-row steps (every row count
    1..49 decoded a few times, 1-row steps between)."""
    costs = StepCosts()
    for _ in range(MIN_SAMPLES):
        for rows in range(2, 50):
            costs.record(1, 0.02)
            costs.record(rows, 0.02 * table(rows))
    return costs


def geometric(a: float, n: int = 32) -> list[float]:
    """P(the first i drafted tokens all come true) for a per-token acceptance `a`."""
    return [a ** i for i in range(1, n + 1)]


def test_the_draft_length_is_the_one_that_pays_most_per_second_on_this_machine():
    """The same acceptance, two machines: where a step of k rows costs about one row (a GPU), long drafts; where
    each row costs (a CPU: 2 rows 2.4x, 16 rows 6.5x), short ones or none. The length taken is the one with the
    most expected tokens (1 + a + a^2 + ...) per second of its step, not per step (per step the longest draft
    would always win)."""
    gpu = costs_from(lambda r: 1.0 + 0.01 * (r - 1))
    cpu = costs_from(draft_replay.epyc_cost)

    def per_second(costs, a, k):
        return (1 + sum(a ** i for i in range(1, k + 1))) / costs.cost(1 + k)

    for a in (0.6, 0.8, 0.9, 0.97):
        for costs in (gpu, cpu):
            k = costs.step(1).take(geometric(a))
            best = max(range(33), key=lambda j: per_second(costs, a, j))
            if k:                                                    # the best length, where drafting pays
                assert per_second(costs, a, k) >= 0.999 * per_second(costs, a, best), (a, k, best)
            else:                                                    # ... by MIN_GAIN over no draft
                assert per_second(costs, a, best) < MIN_GAIN * per_second(costs, a, 0), (a, best)
    assert gpu.step(1).take(geometric(0.6)) >= 3
    assert gpu.step(1).take(geometric(0.9)) >= 16
    assert cpu.step(1).take(geometric(0.6)) == 0                    # 40% wrong: never pays for its rows here
    assert cpu.step(1).take(geometric(0.8)) == 0
    assert 8 <= cpu.step(1).take(geometric(0.97)) <= 32
    assert cpu.step(1).take(geometric(0.97)) <= gpu.step(1).take(geometric(0.97))


def test_a_sequence_whose_guesses_fail_stops_drafting_and_a_long_match_resumes_it():
    """Guesses from short matches that come true for 1 token then miss: on the CPU no draft pays; then the
    sequence copies a long passage (its match grows): drafting starts again, long."""
    cpu = costs_from(draft_replay.epyc_cost)
    s = score_of(run=1, rounds=30)
    assert cpu.step(1).take(s.chances(32)) == 0
    s.offer(list(range(300, 400)), 3)
    for i in range(40):
        s.push(300 + i)
    assert cpu.step(1).take(s.chances(32)) >= 8


def test_a_token_the_reply_did_not_copy_before_ends_the_draft_before_it():
    """A reply that renames a name through the text it copies (here token 9 became something else each time): the
    next guess through token 9 is drafted up to it, not past it, while a guess without it runs on; a token the
    copies always came true at keeps its bucket's odds or better."""
    costs = costs_from(draft_replay.epyc_cost)
    s = GuessScore()
    for k in range(4):                              # four copies of 12 tokens, each leaving the copy at token 9
        s.offer([20 + k, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 9, 31], 12)
        for t in [20 + k, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30]:
            s.push(t)
        s.push(99)
    s.offer([40, 41, 42, 43, 44, 45, 9, 46, 47, 48, 49, 50, 51, 52, 53, 54], 24)
    with_9 = s.chances(16)
    s.offer([60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75], 24)
    without = s.chances(16)
    assert with_9[6] < 0.5 * with_9[5] and without[6] > 0.9 * without[5]
    s.offer([40, 41, 42, 43, 44, 45, 9, 46, 47, 48, 49, 50, 51, 52, 53, 54], 24)
    assert costs.step(1).take(s.chances(16)) == 6
    s.offer([21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 60, 61, 62, 63, 64, 65], 24)
    assert s.chances(16)[9] >= without[9]


def test_each_workload_of_the_bench_gains_where_its_reply_copies_and_drafts_nothing_where_it_does_not():
    """bench/bench_speculative.py's workloads (real greedy replies of Qwen2.5-Coder-0.5B, and one sampled story),
    replayed on the EPYC's step costs with the views admission gives their prompts (prompt_views.py): the replies
    that copy most of their prompt (rename, extract, diff) gain most, and so does the reformatted JSON, which copies
    the document's indented view (without the views every line's whitespace is new and only its own keys repeat:
    it drafts little); those that copy in short runs between edits (type hints, an agent's Write call, completion)
    gain less but never lose; free text drafts nothing, so it costs nothing."""
    floor = {"rename": 1.8, "extract": 1.8, "diff": 1.8, "json": 1.8, "write": 1.3, "hints": 1.1, "complete": 1.0,
             "free": 0.98}
    for name, least in floor.items():
        prompt, reply = draft_replay.load(f"workload_{name}.json")
        views = draft_replay.load_views(f"workload_{name}.json")
        r = draft_replay.replay(prompt, reply, NgramProposer(StepCosts()), random.Random(0), views=views)
        assert r.speedup >= least, (name, r)
        if name == "free":
            assert r.drafted <= 32 and r.accepted >= 0.6 * r.drafted, (name, r)
        if name == "json":                          # the same reply without its views: little drafted, no loss
            plain = draft_replay.replay(prompt, reply, NgramProposer(StepCosts()), random.Random(0))
            assert plain.drafted <= 32 and plain.speedup >= 0.98 and r.drafted > 5 * plain.drafted, (plain, r)
