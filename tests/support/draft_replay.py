"""Replays a reply through the real prompt-lookup draft policy (ngram_draft.NgramProposer with draft_policy's
StepCosts) on a synthetic machine: no model and no clock. The reply's tokens come from a fixture (a real greedy
reply, tests/support/fixtures/speculation/); each step drafts what the policy chooses, accepts the longest prefix
of the draft that the reply really continues with (as verification does at temperature 0), and is recorded as
taking what a step of that many rows took on the 2-core EPYC at 1 thread (Qwen2.5-Coder-0.5B Q4_K_M), times
seeded noise like a shared machine's."""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from types import SimpleNamespace

from repo_paths import TESTS

from app.engine.runner.speculation.ngram_draft import MAX_DRAFT, NgramProposer
from app.engine.runner.speculation.proposer import DraftAsk

FIXTURES = TESTS / "support" / "fixtures" / "speculation"

# decode time of a step of `rows` rows over a 1-row step on the 2-core EPYC at 1 thread (Qwen2.5-Coder-0.5B Q4_K_M,
# logits of every row as a verifying step takes them, 300 tokens deep, quiet machine, median of 5): 8 rows 4.8x,
# 16 rows 7.2x, 33 rows 13.6x, 65 rows 23.4x (the same kernels as llama-server's build within 2-6%); 2 and 4 rows as
# measured earlier (2.3-2.5x, 2.6-4.3x)
EPYC_ROWS = ((1, 1.0), (2, 2.4), (4, 3.4), (8, 4.8), (16, 7.2), (33, 13.6), (65, 23.4))


def epyc_cost(rows: int) -> float:
    for (r0, c0), (r1, c1) in zip(EPYC_ROWS, EPYC_ROWS[1:]):
        if r0 <= rows <= r1:
            w = math.log(rows / r0) / math.log(r1 / r0)
            return math.exp(math.log(c0) * (1 - w) + math.log(c1) * w)
    r, c = EPYC_ROWS[-1]
    return c * rows / r


def load(name: str) -> tuple[list[int], list[int]]:
    d = json.loads((FIXTURES / name).read_text())
    return d["prompt"], d["reply"]


def load_views(name: str) -> list[list[int]]:
    """The fixture prompt's views as admission makes them (speculation/prompt_views.py, the prompt's text through
    Qwen2.5-Coder's tokenizer: the escaped view with special tokens parsed, the documents without)."""
    return json.loads((FIXTURES / name).read_text())["views"]


@dataclass
class Replayed:
    drafted: int
    accepted: int
    steps: int
    seconds: float              # synthetic: a 1-row step takes `unit` seconds on average
    plain_seconds: float        # the same reply one token per step, no drafts

    @property
    def speedup(self) -> float:
        return self.plain_seconds / self.seconds


def replay(prompt: list[int], reply: list[int], proposer: NgramProposer, rng: random.Random, *,
           noise: float = 0.15, unit: float = 0.03, max_draft: int = MAX_DRAFT, streams: int = 1,
           views: list[list[int]] | None = None) -> Replayed:
    """One request (or `streams` alike at once, one batch, as a bench's streams sending the same greedy task)
    through a runner's proposer (its step costs are the runner's): `reply[0]` is sampled at the end of the
    prompt's prefill, then one step per decode. Counts and seconds are summed over the streams. `views`: the prompt's
    other forms (prompt_views.py), as admission gives them."""
    costs = proposer.costs
    seqs = [SimpleNamespace(id=f"replay-{i}", drafter=None, views=views or [], history=list(prompt), pending=reply[0], n_gen=1, done=0)
            for i in range(streams)]
    seconds, drafted, accepted, steps = 0.0, 0, 0, 0
    while any(seq.done < len(reply) - 1 for seq in seqs):
        gen = [seq for seq in seqs if seq.done < len(reply) - 1]
        asks = [DraftAsk(seq, n) for seq in gen if (n := min(max_draft, len(reply) - 2 - seq.done)) > 0]
        drafts = proposer.propose(asks, len(gen), 512) if asks else {}
        rows = len(gen)
        for seq in gen:
            draft = drafts.get(seq.id, [])
            ok = 0
            while ok < len(draft) and draft[ok] == reply[seq.done + 1 + ok]:
                ok += 1
            emitted = reply[seq.done + 1:seq.done + 2 + ok]   # the accepted drafts, then the token sampled after
            seq.history.append(seq.pending)
            seq.history.extend(emitted[:ok])
            proposer.emitted(seq, emitted)
            seq.pending = emitted[-1]
            seq.done += len(emitted)
            seq.n_gen += len(emitted)
            if draft:
                drafted += len(draft)
                accepted += ok
                proposer.verified(seq, len(seq.history), len(draft), ok)
            rows += len(draft)
        t = unit * epyc_cost(rows) * math.exp(rng.gauss(0.0, noise))
        costs.record(rows, t)
        seconds += t
        steps += 1
    plain = sum(unit * epyc_cost(k) for k in [streams] * (len(reply) - 1))
    return Replayed(drafted, accepted, steps, seconds, plain)
