"""A cap on how many tokens a reply may spend thinking (Anthropic's `thinking.budget_tokens`).

The reply is watched token by token. It is thinking when the prompt left a thinking block open (the template
ended with the family's open marker) or when the reply opens with that marker. Once the budget is spent while
the block is still open, the family's close text is written next, token by token, instead of sampled ones
(`next_forced`), and the model goes on with its answer. A reply that starts with anything else is not thinking
and is never touched. The close text per family: `</think>`, Mistral's `[/THINK]`, Command R's
`<|END_THINKING|>`, and for gpt-oss the end of the analysis message and the header of the final one.
"""
from __future__ import annotations

from app.engine.chat.formats import format_for


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
