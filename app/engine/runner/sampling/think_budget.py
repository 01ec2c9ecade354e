"""A cap on how many tokens a reply may spend thinking: Anthropic's `thinking.budget_tokens`, an Ollama
`think_budget` option or Modelfile PARAMETER, or an effort level (`effort_budget`: OpenAI's `reasoning_effort`,
Responses' `reasoning.effort`, Ollama's `think` levels, Anthropic's `output_config.effort`).

The reply is watched token by token. It is thinking when the prompt left a thinking block open (the template
ended with the family's open marker) or when the reply opens with that marker. Once the budget is spent while
the block is still open, the family's close text is written next, token by token, instead of sampled ones
(`next_forced`), and the model goes on with its answer. A reply that starts with anything else is not thinking
and is never touched. The close text per family: `</think>`, Mistral's `[/THINK]`, Command R's
`<|END_THINKING|>`, and for gpt-oss the end of the analysis message and the header of the final one.
"""
from __future__ import annotations

from app.engine.chat.formats import format_for

# effort level -> (share of the reply's room, floor in tokens). The room is max_tokens (num_predict), or what the
# context leaves after the prompt when the request sets no limit. A budget never takes more than ANSWER_KEEP of
# the room away from the answer: with a small max_tokens every level is that cap. As llama-server's
# `--reasoning-budget` and LM Studio's reasoning budget, it is a ceiling, not a target: a model that closes its
# thinking sooner is not touched. Anthropic's xhigh/max and OpenAI's xhigh count as high.
EFFORT_BUDGETS: dict[str, tuple[float, int]] = {
    "minimal": (1 / 16, 64), "low": (1 / 8, 256), "medium": (1 / 4, 1024), "high": (1 / 2, 4096)}
EFFORTS = tuple(EFFORT_BUDGETS)
ANSWER_KEEP = 1 / 4         # a budget leaves at least this share of the room to the answer


def effort_budget(effort: str, room: int) -> int:
    """The thinking budget for an effort level when the reply may have `room` tokens: the level's share of the
    room, at least its floor, at most the room less ANSWER_KEEP of it (docs: README "Thinking budgets")."""
    share, floor = EFFORT_BUDGETS[effort]
    room = max(0, int(room))
    return max(0, min(max(floor, int(room * share)), room - int(room * ANSWER_KEEP) - 1))


def markers(family: str) -> tuple[str, str, str]:
    """(the text that opens thinking, the text that ends it, the text written to end it) for `family`: its
    record's (app/engine/chat/formats.py)."""
    return format_for(family).think_budget


class ThinkBudget:
    """`budget` thinking tokens at most. `piece(tok, special=True)` gives a token's bytes; `close_tokens` are
    the tokens of the text written to end thinking (markers(family)[2]); `open_in_prompt`: the prompt ended
    inside a thinking block."""

    def __init__(self, budget: int, family: str, close_tokens: list[int], piece, open_in_prompt: bool):
        self.left = budget
        self.open, self.close = (m.encode() for m in markers(family)[:2])
        self.close_tokens = list(close_tokens)
        self.piece = piece
        self.state = "thinking" if open_in_prompt else "start"      # start | thinking | closing | done
        self.text = bytearray()
        self.forced: list[int] = []
        if open_in_prompt and self.left <= 0:                     # budget 0: end thinking before any of it
            self.state, self.forced = "closing", list(self.close_tokens)

    def next_forced(self) -> int | None:
        """The next token of the close text to write instead of sampling, or None."""
        if not self.forced:
            return None
        tok = self.forced.pop(0)
        if not self.forced:
            self.state = "done"
        return tok

    def seen(self, tok: int) -> None:
        """Account for the token the reply got (sampled or forced)."""
        if self.state in ("done", "closing"):
            return
        self.text += self.piece(tok, special=True)
        if self.state == "start":
            head = bytes(self.text).lstrip()
            if head.startswith(self.open):
                self.state = "thinking"
            elif not self.open.startswith(head):               # the reply began with something else
                self.state = "done"
                return
            else:
                return                                         # maybe the open marker, not complete yet
        if self.close in self.text:
            self.state = "done"
            return
        self.left -= 1
        if self.left <= 0:
            self.state, self.forced = "closing", list(self.close_tokens)
            if not self.forced:
                self.state = "done"
