"""The step budget (context thread, pure): how many prompt tokens the next step may carry, so that the sequences
writing a reply keep their pace while other sequences' prompts are read, and how those tokens are shared.

Why in time, not tokens: on a CPU a prompt token costs 14-30 ms (Qwen2.5-Coder-0.5B, 2 threads, quiet to busy) and a
512-token chunk 7-15 s, so a step that carries one makes every writing sequence's next token wait that long (a
streamed reply fell from ~15 tok/s to ~0.1 tok/s while another client's 6k-token prompt was read). vLLM's chunked
prefill runs the decodes first and fills a per-step *token* budget with prompt tokens; on a GPU that budget costs
milliseconds. Here the budget is sized from what steps measurably cost on this machine (`PaceCosts`, learned from
every step, per model since each runner has its own):
  - fixed per step and per decoded token, together: the seconds of a step that carries only the writers' rows, by
    how many write (`alone`): the pace a reply has with nobody else's prompt in the way;
  - per prompt token: from prompt-only steps (full chunks, `prompt_s`) and, once steps mix, what a mixed step costs
    beyond the writers' step alone per prompt token it carried (`mixed_s`). On this CPU that is additive: 1 writer +
    8 prompt tokens took 0.33 s where the writer alone took 0.10 s and a prompt token in a 512 chunk 0.024 s.
The writers allow their steps `factor` x their alone step on average (at least MIN_TARGET_S a step, so a GPU's 3 ms
steps do not cut prompts into crumbs): each writers' step earns (factor - 1) x alone seconds for prompts, and what
a step took beyond alone is spent (`bank`, kept in `PaceCosts.observe` from the steps' real times, so a wrong
estimate is paid back by the next steps, never accumulated). A step carries prompt tokens once the bank pays for
FLOOR_TOKENS of them (a smaller chunk pays a step's fixed costs for little), otherwise the writers step alone and
the bank grows; the bank holds at most BANK_MAX_S, so a writer never waits longer than that for one token. With a
factor of 1.75 a reply keeps ~0.57x its pace while the prompts get the remaining ~43% of the machine.
With no sequence writing, a prompt keeps the full batch (today's chunking: one long prompt alone is as fast as
before). A writers' step never measured (or not lately: the machine's load changes) is measured by one step
without prompt tokens. Nothing measured at all (a runner's first steps, tests that drive steps by hand): the full
batch.

Priority: a request may say a person is watching it (`GenerateRequest.priority` 1: a streamed reply). A watched
prompt that ends within the step gets a step cut to its remainder and its remainder first (`finishing_cut`,
`share_budget`): its first token comes after its own prompt, not after another's 512-token chunk. Other watched
readers get their shares of the budget before unwatched ones. When only unwatched (background) sequences write while
a watched prompt is read, the writers' factor is BACKGROUND_FACTOR times larger: the person waiting goes first.
Covered by tests/unit/engine/runner/step/test_step_budget.py (pure) and test_step_cycle.py (in the step loop).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

DEFAULT_FACTOR = 1.75        # writers' steps may take this many times their alone step on average (pace >= ~0.57x)
FLOOR_TOKENS = 32            # the smallest prompt chunk a writers' step carries (else it saves up for one): on a CPU
                             # a 17-token chunk cost 26-29 ms a token, a 512-token one 23 ms
MIN_TARGET_S = 0.04          # a writers' step may always take this long (25 tokens/s): fast devices keep big chunks
BANK_MAX_S = 2.0             # seconds of prompt time the writers may save up: the longest a token waits for a chunk
BACKGROUND_FACTOR = 4.0      # only unwatched writers and a watched prompt waiting: their factor this much larger
RATE = 0.2                   # weight of each new measurement in the moving averages
MIN_PROMPT_ROWS = 64         # prompt-only steps shorter than this say little about a prompt token's cost (the step's
                             # fixed part, the weights' reads, dominates them)
ALONE_MAX_AGE = 400          # steps after which a writers' step is measured again (the machine's load changes)


@dataclass
class PaceCosts:
    """What steps cost on this machine, learned online (`observe` after every decode that succeeded), and the
    writers' bank of prompt time."""
    prompt_s: float | None = None       # seconds per prompt token in prompt-only steps (full chunks)
    mixed_s: float | None = None        # seconds per prompt token on top of the writers' step, in mixed steps
    alone: dict[int, tuple[float, int]] = field(default_factory=dict)   # writers -> (EMA seconds, step measured)
    steps: int = 0
    bank: float = 0.0                   # seconds of prompt time the writers may still give (negative: owed)
    # what the plan in flight is expected to add to the bank (its allowance less its chunk's estimated cost): the
    # next plan is built while it runs (async batch preparation), before `observe` settles it
    pending: float = 0.0

    def observe(self, prompt_tokens: int, writers: int, seconds: float, allowance: float = 0.0) -> None:
        """One step: `prompt_tokens` prompt rows, `writers` writing sequences, `seconds` the whole step took;
        `allowance`: what the step's writers allowed prompts beyond their alone step (`allowance`), which the bank
        earns, less what the step took beyond it."""
        self.steps += 1
        self.pending = 0.0
        alone = self.alone_s(writers, fresh=False) if writers else None
        if allowance <= 0 or alone is None:
            self.bank = 0.0                          # nobody reads, or nothing bounds them: nothing saved up
        elif seconds > 0:
            self.bank = max(-BANK_MAX_S, min(BANK_MAX_S, self.bank + allowance - (seconds - alone)))
        if seconds <= 0:
            return
        if prompt_tokens == 0:
            # a writers' step (with drafts' rows it costs more; counted alike, so a step that measures always does)
            if writers:
                old = self.alone.get(writers)
                self.alone[writers] = (_ema(old[0] if old else None, seconds), self.steps)
            return
        if writers == 0:
            if prompt_tokens >= MIN_PROMPT_ROWS:
                self.prompt_s = _ema(self.prompt_s, seconds / prompt_tokens)
            return
        if alone is None:
            return
        floor = 0.05 * self.prompt_s if self.prompt_s else 1e-6   # a step that came out faster than its writers'
        self.mixed_s = _ema(self.mixed_s, max(floor, (seconds - alone) / prompt_tokens))   # alone: noise

    def alone_s(self, writers: int, fresh: bool = True) -> float | None:
        """The writers' step alone, measured (and, `fresh`, not longer than ALONE_MAX_AGE steps ago)."""
        got = self.alone.get(writers)
        if got is None or (fresh and self.steps - got[1] > ALONE_MAX_AGE):
            return None
        return got[0]

    def per_prompt_token(self) -> float | None:
        return self.mixed_s if self.mixed_s is not None else self.prompt_s

    def planned(self, prompt_tokens: int, allowance: float) -> None:
        """A plan goes to execution (with writers): what it should add to the bank, until `observe` settles it."""
        per_token = self.per_prompt_token() or 0.0
        self.pending = allowance - prompt_tokens * per_token if allowance > 0 else 0.0


def _ema(old: float | None, new: float) -> float:
    return new if old is None else old + RATE * (new - old)


def allowance(alone: float, factor: float) -> float:
    """Seconds a writers' step (`alone` seconds alone) allows prompts on average at `factor`."""
    return max((factor - 1.0) * alone, MIN_TARGET_S - alone, 0.0)


def effective_factor(factor: float, watched_writers: int, watched_reader: bool) -> float:
    """The writers' factor: BACKGROUND_FACTOR times larger when none of them is watched and a watched prompt waits."""
    return factor * BACKGROUND_FACTOR if watched_reader and not watched_writers else factor


def prompt_budget(costs: PaceCosts, *, capacity: int, writers: int, watched_writers: int = 0,
                  watched_reader: bool = False, factor: float = DEFAULT_FACTOR, floor: int = FLOOR_TOKENS) -> int:
    """Prompt tokens the next step may carry: `capacity` rows are free once the writers have theirs; `writers`
    sequences write (`watched_writers` of them for a person), `watched_reader`: a watched prompt is being read.
    0: the writers step alone (saving up for a chunk, or measuring their step). `factor` <= 0 turns the bound off
    (the full batch)."""
    if writers == 0 or factor <= 0 or capacity <= 0 or costs.steps == 0:
        return max(0, capacity)
    alone = costs.alone_s(writers)
    if alone is None:
        return 0                                     # measure the writers' step alone, once
    per_token = costs.per_prompt_token()
    if per_token is None:
        return min(capacity, floor)                  # measure a small mixed step first
    spend = costs.bank + costs.pending + allowance(alone, effective_factor(factor, watched_writers, watched_reader))
    k = int(spend / per_token)
    if k < min(floor, capacity) and costs.bank + costs.pending < BANK_MAX_S:
        return 0                                     # save up for a chunk worth its step
    return min(capacity, max(1, k))


class Reader(NamedTuple):
    """A sequence reading its prompt, as the budget sees it."""
    id: str
    left: int                   # prompt tokens still to read
    watched: bool               # a person waits for its reply


def finishing_cut(readers: Iterable[Reader], budget: int, floor: int = FLOOR_TOKENS) -> int:
    """The budget cut for a watched prompt that ends within it: the step carries its remainder (and the floor for
    the others), so its first token is not held behind another prompt's chunk."""
    ending = [r.left for r in readers if r.watched and r.left <= budget]
    if not ending:
        return budget
    return min(budget, sum(ending) + floor)


def share_budget(readers: list[Reader], budget: int) -> dict[str, int]:
    """Prompt tokens per reader: watched prompts that end within the budget first (shortest first, whole), then the
    other watched ones' shares (equal shares, then leftovers in the list's order: `prefill_shares`), then the
    others' from what is left."""
    grant = {r.id: 0 for r in readers}
    for r in sorted((r for r in readers if r.watched and r.left <= budget), key=lambda r: r.left):
        if r.left <= budget:
            grant[r.id] = r.left
            budget -= r.left
    watched = [r for r in readers if r.watched and not grant[r.id]]
    others = [r for r in readers if not r.watched]
    for group in (watched, others):
        shares = prefill_shares(group, budget)
        grant.update(shares)
        budget -= sum(shares.values())
    return grant


def prefill_shares(readers: list[Reader], budget: int) -> dict[str, int]:
    """Equal shares of `budget` first, then the leftovers in the list's order (round-robin when the caller turns
    the list each step), so no long prompt starves the others."""
    if not readers:
        return {}
    share = max(1, budget // len(readers))
    grant = {}
    for r in readers:
        grant[r.id] = max(0, min(r.left, share, budget))
        budget -= grant[r.id]
    for r in readers:
        extra = min(r.left - grant[r.id], budget)
        if extra > 0:
            grant[r.id] += extra
            budget -= extra
    return grant
