"""A chat request's plan: what the service decided about tools, made once and applied by the runner as it is
(the same record as llama.cpp's `common_chat_params`).

The service (app/service/generation/chat_features.py) makes one ChatPlan per request from the model's family, which it read
once from the GGUF (engine/gguf/chat_facts), and the request's tools, tool_choice, parallel_tool_calls and
format. The runner builds the grammar the plan names (runner/sampling/tool_grammar.for_plan) over the family's record
(chat/formats.py), and the service's reply parser is the same record's: the grammar's trigger and the parser
cannot disagree. Free of llama.cpp, so both processes import it.
"""
from __future__ import annotations

from dataclasses import dataclass

from app.engine.chat.formats import GENERIC, ChatFormat, format_for

# the tool-call grammar a plan names
FORCED = "forced"          # the whole reply is a call (tool_choice required, or the one function named)
LAZY = "lazy"              # auto: free text until the family's call marker (or a bare call at the start)
EITHER = "either"          # auto beside a format: content in that format, or calls


@dataclass(frozen=True)
class ChatPlan:
    family: str = GENERIC.name          # the record in chat/formats.py: shown tokens, grammar shape, think tags
    tools: bool = False                 # tools are in use (given, and tool_choice is not "none")
    tool_choice: str | None = None      # "auto" | "required" | a function's name (None: no tools)
    grammar: str | None = None          # FORCED | LAZY | EITHER | None (no tool-call grammar)
    only: str | None = None             # FORCED: the function tool_choice names
    parallel: bool = True               # more than one call may come (parallel_tool_calls)

    @property
    def format(self) -> ChatFormat:
        """The family's record: everything the runner and the service read about its markup."""
        return format_for(self.family)

    @property
    def forced(self) -> bool:
        """tool_choice "required" or a function's name: the grammar makes the call, whatever the template."""
        return self.tools and self.tool_choice != "auto"

    @property
    def parser(self) -> str:
        """The reply parser's name (app/service/generation/toolcalls): the family record's, as the grammar's trigger."""
        return self.format.name

    @property
    def trigger(self) -> str | None:
        """The marker from which a LAZY grammar constrains the reply (None: only a bare call at the start)."""
        shape = self.format.grammar
        return shape.opener if shape is not None else None


def plan_chat(family: str, tools, tool_choice, parallel: bool = True, *, has_format: bool = False,
              raw: bool = False) -> ChatPlan:
    """The one decision of whether tools are in use and which grammar shapes the calls."""
    family = format_for(family).name
    if not tools or tool_choice == "none":
        return ChatPlan(family)
    choice = tool_choice or "auto"
    use = ChatPlan(family, True, choice, parallel=bool(parallel))
    if raw:                                      # no template: the tools shape nothing
        return use
    if choice == "auto":
        if has_format:
            return ChatPlan(family, True, choice, EITHER, parallel=bool(parallel))
        if format_for(family).grammar is None:   # calls the grammar does not model: the parser alone reads them
            return use
        return ChatPlan(family, True, choice, LAZY, parallel=bool(parallel))
    if choice == "required":
        return ChatPlan(family, True, choice, FORCED, parallel=bool(parallel))
    return ChatPlan(family, True, choice, FORCED, only=choice, parallel=False)
