"""One record per reply family: every marker its replies use, spelled once (issue 24, part 3).

A family is the markup a model's replies use for tool calls and thinking, detected from its chat template
(`detect_family`). From its record come:
- the special tokens the runner writes out as text (`shown`), so the service's parser sees the markup;
- the call sections the service's parser reads (`sections`: start, end, and the name of the parser in
  app/service/generation/toolcalls/formats.py) and the thinking markers (`think`);
- the tool-call grammar for `tool_choice: auto` (`grammar`: the marker that starts a call, what closes it, the
  JSON key of the arguments, calls in a list), whose trigger is therefore the parser's section start.
`grammar` None: the grammar does not model that family's calls (XML, Python syntax, harmony); the parser
alone reads them. A CallGrammar without an opener: only a bare `{"name"` call at the reply's start.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

THINK = ("<think>", "</think>")
TOOL_CALL = ("<tool_call>", "</tool_call>")
PYTHON_TAG, PYTHON_START, PYTHON_END = "<|python_tag|>", "<|python_start|>", "<|python_end|>"
MISTRAL_CALLS, MISTRAL_THINK = "[TOOL_CALLS]", ("[THINK]", "[/THINK]")
DS_CALLS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
DS_SEP = "<｜tool▁sep｜>"
CR_ACTION = ("<|START_ACTION|>", "<|END_ACTION|>")
CR_THINK = ("<|START_THINKING|>", "<|END_THINKING|>")
CR_RESPONSE = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
FG_CALL = ("<start_function_call>", "<end_function_call>")
H_START, H_CHANNEL, H_MESSAGE, H_END, H_CALL, H_RETURN, H_CONSTRAIN = (
    "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>")
HARMONY_TOKENS = (H_START, H_CHANNEL, H_MESSAGE, H_END, H_CALL, H_RETURN, H_CONSTRAIN)
# gpt-oss thinks in the `analysis` channel and answers in `final`; a budget spent ends the one, opens the other
HARMONY_THINK_BUDGET = (f"{H_CHANNEL}analysis", H_END, f"{H_END}{H_START}assistant{H_CHANNEL}final{H_MESSAGE}")


@dataclass(frozen=True)
class Section:
    start: str
    end: str | None             # None: the section runs to the end of the reply
    parser: str                 # the section parser's name (app/service/generation/toolcalls/formats.py)


@dataclass(frozen=True)
class CallGrammar:
    opener: str | None = None   # the marker that starts a call (None: only a bare call at the reply's start)
    closer: str = ""
    args_key: str = "arguments"
    listed: bool = False        # the calls after the opener are a JSON list


@dataclass(frozen=True)
class ChatFormat:
    name: str
    sections: tuple[Section, ...] = ()
    think: tuple[str, str] | None = THINK
    shown: tuple[str, ...] = THINK
    grammar: CallGrammar | None = CallGrammar()
    bare_pythonic: bool = False     # a reply that starts with `[name(` is a call list (Gemma 3)
    strip: tuple[str, ...] = ()     # markup around plain content, removed (Command R's <|START_RESPONSE|>)
    # (the text that opens thinking, the text that ends it, the text written to end it when a thinking budget is
    # spent); None: the thinking markers (`think`, else <think>), the end written as it is
    budget_think: tuple[str, str, str] | None = None

    @property
    def think_budget(self) -> tuple[str, str, str]:
        """(opens thinking, ends it, the text written to end it on a spent budget): runner/think_budget.py."""
        if self.budget_think is not None:
            return self.budget_think
        opener, closer = self.think or THINK
        return opener, closer, closer


FORMATS: dict[str, ChatFormat] = {f.name: f for f in (
    ChatFormat("generic"),
    ChatFormat("hermes", (Section(*TOOL_CALL, "hermes"),), shown=TOOL_CALL + THINK, grammar=CallGrammar(*TOOL_CALL)),
    ChatFormat("qwen3_coder", (Section(*TOOL_CALL, "qwen3_coder"),), shown=TOOL_CALL + THINK, grammar=None),
    ChatFormat("llama3", (Section(PYTHON_TAG, None, "llama3"), Section(PYTHON_START, PYTHON_END, "llama3")),
               think=None, shown=(PYTHON_TAG, PYTHON_START, PYTHON_END),
               grammar=CallGrammar(PYTHON_TAG, "", "parameters")),
    ChatFormat("mistral", (Section(MISTRAL_CALLS, None, "mistral"),), think=MISTRAL_THINK,
               shown=(MISTRAL_CALLS, "[ARGS]", "[CALL_ID]") + MISTRAL_THINK,
               grammar=CallGrammar(MISTRAL_CALLS, "", "arguments", True)),
    ChatFormat("command_r", (Section(*CR_ACTION, "hermes"),), think=CR_THINK, shown=CR_ACTION + CR_THINK + CR_RESPONSE,
               strip=CR_RESPONSE),
    ChatFormat("deepseek", (Section(*DS_CALLS, "deepseek"), Section(*DS_CALL, "deepseek_call")),
               shown=DS_CALLS + DS_CALL + (DS_SEP,) + THINK, grammar=None),
    ChatFormat("functiongemma", (Section(*FG_CALL, "functiongemma"),), think=None, shown=FG_CALL + ("<escape>",),
               grammar=None),
    ChatFormat("pythonic", (Section("```tool_code", "```", "pythonic"),), think=None, shown=(), grammar=None,
               bare_pythonic=True),
    ChatFormat("harmony", think=None, shown=HARMONY_TOKENS, grammar=None, budget_think=HARMONY_THINK_BUDGET),
)}

TOOLS_VAR = re.compile(r"\btools\b")


def format_for(family: str | None) -> ChatFormat:
    return FORMATS.get(family or "generic", FORMATS["generic"])


def detect_family(template: str | None) -> str:
    """The family whose tool-call/thinking markup a template's model writes, from the template text."""
    t = template or ""
    if "<|channel|>" in t:
        return "harmony"
    if FG_CALL[0] in t:
        return "functiongemma"
    if "tool▁call▁begin" in t or "tool▁calls▁begin" in t:
        return "deepseek"
    if MISTRAL_CALLS in t or MISTRAL_THINK[0] in t:
        return "mistral"
    if CR_ACTION[0] in t:
        return "command_r"
    if TOOL_CALL[0] in t and "<function=" in t:
        return "qwen3_coder"
    if TOOL_CALL[0] in t:
        return "hermes"
    if PYTHON_TAG in t or PYTHON_START in t or ("<|start_header_id|>" in t and TOOLS_VAR.search(t)):
        return "llama3"
    if "tool_code" in t or "[func_name1(" in t:
        return "pythonic"
    return "generic"
