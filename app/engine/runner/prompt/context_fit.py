"""Fitting a prompt into a sequence's context, never in silence (docs/architecture.md, "Context").

A prompt fits when it leaves room for at least one token and for the request's `reserve`: what the client asked
the prompt to leave free (the service asks for none when the rule refuses, as llama-server: OpenAI's max_tokens and
Anthropic's cap the reply by the room left, they claim no context; Ollama's num_predict claims up to half the
context before messages are dropped). What happens when it does not is the request's `overflow`:
- "error": refuse (ContextOverflow, with the token counts; the service answers in its dialect's words);
- "drop_messages": Ollama's rule for chats: drop the oldest messages, keeping every system message and the last
  message, never cutting inside a message or the template; refused when even that does not fit;
- "truncate": the token rule for a raw prompt: keep the first `n_keep` tokens and the most recent ones.
What was dropped or cut is counted on the sequence (`dropped_messages`, `truncated_tokens`) and reported.
"""
from __future__ import annotations

from typing import Callable

OVERFLOW_ERROR, OVERFLOW_DROP, OVERFLOW_TRUNCATE = "error", "drop_messages", "truncate"
OVERFLOWS = (OVERFLOW_ERROR, OVERFLOW_DROP, OVERFLOW_TRUNCATE)


class ContextOverflow(ValueError):
    """The prompt (plus the reserve) does not fit the context; `data` has the numbers for the client's error."""
    kind = "context"

    def __init__(self, prompt_tokens: int, reserve: int, limit: int, why: str = ""):
        self.data = {"prompt_tokens": prompt_tokens, "reserve": reserve, "limit": limit, "why": why}
        extra = f" + {reserve} reserved for the reply" if reserve else ""
        super().__init__(f"the prompt is {prompt_tokens} tokens{extra}, more than the context of {limit} tokens "
                         f"per sequence{why}")


def reply_room(overflow: str, reserve: int, limit: int) -> int:
    """How much of the context the reserve claims. Refusing ("error") counts all of it: the service gives one only
    to ask whether a prompt leaves that much room (its context-growth check), never for a reply's max_tokens.
    Ollama's rules count at most half the context: its num_predict only caps a reply (which shifts the context
    when it reaches the end), so a long num_predict must not drop messages from a short chat, or refuse it."""
    return reserve if overflow == OVERFLOW_ERROR else min(reserve, limit // 2)


def fits(n_prompt: int, reserve: int, limit: int) -> bool:
    return n_prompt < limit and n_prompt + max(0, reserve) <= limit


def truncate_tokens(toks: list[int], n_keep: int, reserve: int, limit: int) -> list[int]:
    """The first `n_keep` tokens and the most recent ones, leaving room for the reserve (at most half the
    context) or at least one token."""
    room = max(1, min(max(0, reserve), limit // 2))
    target = max(n_keep + 1, limit - room)
    if len(toks) <= target:
        return toks
    return toks[:n_keep] + toks[len(toks) - (target - n_keep):]


def drop_oldest(messages: list[dict], count: Callable[[list[dict]], int | None], reserve: int, limit: int
                ) -> tuple[list[dict], int]:
    """(the messages kept, how many were dropped): the most recent messages that fit with every earlier system
    message, found by binary search over where the kept part starts. The last message is always kept; a start
    at a tool result (its call would be gone) is skipped. `count(msgs)` renders and tokenizes (None: the
    template refused that shape, taken as not fitting). ContextOverflow when even the last message (with the
    system messages) does not fit."""
    n = len(messages)

    def kept_from(start: int) -> list[dict]:
        return [m for m in messages[:start] if m.get("role") == "system"] + messages[start:]

    starts = [i for i in range(1, n) if messages[i].get("role") not in ("system", "tool")] or [n - 1]
    if starts[-1] != n - 1:
        starts.append(n - 1)

    def ok(i: int) -> tuple[bool, int]:
        c = count(kept_from(starts[i]))
        return (c is not None and fits(c, reserve, limit)), (c or 0)

    good, last_count = ok(len(starts) - 1)
    if not good:
        raise ContextOverflow(last_count, reserve, limit, " even with only the system messages and the last "
                                                          "message")
    lo, hi = 0, len(starts) - 1          # ok(hi) holds; find the smallest index that fits
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid)[0]:
            hi = mid
        else:
            lo = mid + 1
    start = starts[hi]
    dropped = sum(1 for m in messages[:start] if m.get("role") != "system")
    return kept_from(start), dropped
