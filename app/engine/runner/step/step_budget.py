"""The step budget (context thread, pure): how many prompt tokens the next step may carry, so that the sequences
writing a reply keep their pace while other sequences' prompts are read, and how those tokens are shared.

Why in time, not tokens: on a CPU a prompt token costs ~14 ms (Qwen2.5-Coder-0.5B, 2 threads) and a 512-token chunk
7-10 s, so a step that carries one makes every writing sequence's next token wait that long (a streamed reply fell
from ~15 tok/s to ~0.1 tok/s while another client's 6k-token prompt was read). vLLM's chunked prefill runs the
decodes first and fills a per-step *token* budget with prompt tokens; on a GPU that budget costs milliseconds. Here
the budget is sized from what steps measurably cost on this machine (`PaceCosts`, learned from every step):
  - a writing step alone: the seconds of a step that carries only the writers' rows (by how many write), the pace
    a reply has with nobody else's prompt in the way;
  - a prompt token: seconds per prompt token, from prompt-only steps (full chunks) and, once steps mix, per prompt
    token *on top of* the writers' step (`mixed_s`, an EMA of (step - alone step) / prompt tokens). A feedback
    loop: a chunk whose step came out shorter than the target lowers the estimate and the next chunk grows, so the
    budget settles where a mixed step takes the target, whatever the shape of this machine's cost curve (a CPU's
    small batches cost less per token than the weight reads a decode row pays anyway).
`prompt_budget` gives the writers' steps a target of `factor` x their alone step (at least MIN_TARGET_S, so a GPU's
3 ms steps do not cut prompts into crumbs) and fills the rest with prompt tokens, never fewer than FLOOR_TOKENS
(prompts always advance) and at most twice the last budget (a wrong estimate costs one step, not seconds). With no
sequence writing, a prompt keeps the full batch (today's chunking: the long prompt alone is as fast as before). A
writers' step never measured (or not lately: the machine's load changes) is measured once by a step without prompt
tokens. Nothing measured at all (a runner's first steps, tests that drive steps by hand): the full batch.

Priority: a request may say a person is watching it (`GenerateRequest.priority` 1: a streamed reply). Readers
that are watched get their shares of the budget first (`share_budget`), and one whose prompt ends within this step
gets a step cut to its remainder (its first token comes after its own prompt, not after another's 512-token
chunk). When only unwatched (background) sequences write while a watched prompt is read, the writers' target is
BACKGROUND_FACTOR times looser: the person waiting for a first token goes first.
Covered by tests/unit/engine/runner/step/test_step_budget.py (pure) and test_step_cycle.py (in the step loop).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

DEFAULT_FACTOR = 1.75        # a writer's step may take this many times its alone step (reply >= ~0.55x its pace)
FLOOR_TOKENS = 8             # prompt tokens a step carries at least while anything writes
MIN_TARGET_S = 0.05          # a writers' step may always take this long (20 tokens/s): fast devices keep big chunks
BACKGROUND_FACTOR = 4.0      # only unwatched writers and a watched prompt waiting: their target this much looser
RATE = 0.2                   # weight of each new measurement in the moving averages
MIN_PROMPT_ROWS = 64         # prompt-only steps shorter than this say little about a prompt token's cost (the step's
                             # fixed part, the weights' reads, dominates them)
ALONE_MAX_AGE = 400          # steps after which a writers' step is measured again (the machine's load changes)


@dataclass
class PaceCosts:
    """What steps cost on this machine, learned online (`observe` after every decode that succeeded)."""
    prompt_s: float | None = None       # seconds per prompt token in prompt-only steps (full chunks)
    mixed_s: float | None = None        # seconds per prompt token on top of the writers' step, in mixed steps
    alone: dict[int, tuple[float, int]] = field(default_factory=dict)   # writers -> (EMA seconds, step measured)
    steps: int = 0

    def observe(self, prompt_tokens: int, writers: int, seconds: float) -> None:
        """One step: `prompt_tokens` prompt rows, `writers` writing sequences, `seconds` the whole step took."""
        self.steps += 1
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
        alone = self.alone_s(writers, fresh=False)
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


def _ema(old: float | None, new: float) -> float:
    return new if old is None else old + RATE * (new - old)


def prompt_budget(costs: PaceCosts, *, capacity: int, writers: int, watched_writers: int = 0,
                  watched_reader: bool = False, factor: float = DEFAULT_FACTOR, floor: int = FLOOR_TOKENS,
                  last: int | None = None) -> int:
    """Prompt tokens the next step may carry: `capacity` rows are free once the writers have theirs; `writers`
    sequences write (`watched_writers` of them for a person), `watched_reader`: a watched prompt is being read;
    `last`: the previous mixed step's budget (None: none). `factor` <= 0 turns the bound off (the full batch)."""
    if writers == 0 or factor <= 0 or capacity <= 0 or costs.steps == 0:
        return max(0, capacity)
    alone = costs.alone_s(writers)
    if alone is None:
        return 0                                     # measure the writers' step alone, once
    per_token = costs.per_prompt_token()
    if per_token is None:
        return min(capacity, floor)                  # measure a small mixed step first
    if watched_reader and not watched_writers:
        factor *= BACKGROUND_FACTOR
    target = max(factor * alone, MIN_TARGET_S)
    k = max(floor, int((target - alone) / per_token))
    if last is not None:
        k = min(k, 2 * max(last, floor))
    return min(capacity, k)


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
    """Prompt tokens per reader: the watched ones' shares first (equal shares, then leftovers in the list's order:
    `prefill_shares`), then the others' from what is left."""
    watched = [r for r in readers if r.watched]
    others = [r for r in readers if not r.watched]
    grant = prefill_shares(watched, budget) if watched else {}
    budget -= sum(grant.values())
    grant.update(prefill_shares(others, budget) if others else {})
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
