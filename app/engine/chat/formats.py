"""One complete record per chat family: everything a family's templates and replies need, spelled once.

A family is the markup a model's replies use for tool calls and thinking, recognised in its chat template
(`detect_family`: the first record whose `detect` accepts the template). Its `ChatFormat` holds, as llama.cpp's
`common_chat_params` does per format:
- the special tokens the runner writes out as text (`shown`), so the reply parser sees the markup;
- the reply parser (`reply_parser`: "sections", or "harmony" for gpt-oss's channels), the call sections it reads
  (`sections`: start, end, and the name of its call syntax's reader in
  app/service/generation/toolcalls/syntaxes.py), the thinking markers (`think`) and what is stripped;
- the tool-call grammar for `tool_choice: auto` (`grammar`: the marker that starts a call, what closes it, the
  JSON key of the arguments, calls in a list), whose trigger is therefore a section's start;
- how a template shows it can think (`thinking`: its marker, its switch variable) and the text written to end
  thinking when a budget is spent (`think_budget`);
- what the messages need before the template renders them (`prepare_messages`).
`grammar` None: the grammar does not model that family's calls (XML, Python syntax, harmony); the parser
alone reads them. A CallGrammar without an opener: only a bare `{"name"` call at the reply's start.

Everything else reads these fields and never the family's name, so a new family is one record here (in the
order of `detect`) plus, where its calls have a syntax of their own, one section parser.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Callable

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
H_ANALYSIS, H_FINAL = "analysis", "final"     # gpt-oss's channels: thinking, and the answer
# a budget spent ends the analysis message and opens the final one
HARMONY_THINK_BUDGET = (f"{H_CHANNEL}{H_ANALYSIS}", H_END, f"{H_END}{H_START}assistant{H_CHANNEL}{H_FINAL}{H_MESSAGE}")

TOOLS_VAR = re.compile(r"\btools\b")
THINK_HINTS = (THINK[0], "enable_thinking", "reasoning_content")   # a template of any family that can think


@dataclass(frozen=True)
class Section:
    start: str
    end: str | None             # None: the section runs to the end of the reply
    parser: str                 # its call syntax's name (app/service/generation/toolcalls/syntaxes.py, READERS)


@dataclass(frozen=True)
class CallGrammar:
    """The `auto` grammar's wrapper around a call (runner/sampling/tool_grammar.lazy)."""
    opener: str | None = None   # the marker that starts a call (None: only a bare call at the reply's start)
    closer: str = ""
    args_key: str = "arguments"
    listed: bool = False        # the calls after the opener are a JSON list


@dataclass(frozen=True)
class TemplateThinking:
    """How a family's template shows that its model thinks, and what switches it."""
    marker_needed: bool = False     # only a template that writes the family's own open marker thinks (Command R)
    switch: str | None = None       # the family's own switch variable, when the template names it (Mistral)
    effort: str | None = None       # always thinks; this variable sets how hard (gpt-oss's reasoning_effort)


def nine_char_call_ids(messages: list[dict]) -> list[dict]:
    """Mistral's templates refuse call ids that are not exactly 9 letters/digits: map each id to a stable one."""
    def nine(cid: str) -> str:
        if re.fullmatch(r"[A-Za-z0-9]{9}", cid):
            return cid
        return hashlib.sha256(cid.encode()).hexdigest()[:9]

    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": nine(c["id"])} for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            m["tool_call_id"] = nine(m["tool_call_id"])
        out.append(m)
    return out


@dataclass(frozen=True)
class ChatFormat:
    name: str
    detect: Callable[[str], bool]   # the chat template's text is this family's (tried in FORMATS' order)
    sections: tuple[Section, ...] = ()
    think: tuple[str, str] | None = THINK       # the thinking markers the reply parser reads
    shown: tuple[str, ...] = THINK
    grammar: CallGrammar | None = CallGrammar()
    reply_parser: str = "sections"  # "sections" (toolcalls/stream.py) | "harmony" (toolcalls/harmony.py)
    bare_pythonic: bool = False     # a reply that starts with `[name(` is a call list (Gemma 3)
    strip: tuple[str, ...] = ()     # markup around plain content, removed (Command R's <|START_RESPONSE|>)
    thinking: TemplateThinking = TemplateThinking()
    # (the text that opens thinking, the text that ends it, the text written to end it when a thinking budget is
    # spent); None: the thinking markers (`think`, else <think>), the end written as it is
    budget_think: tuple[str, str, str] | None = None
    prepare_messages: Callable[[list[dict]], list[dict]] | None = None   # before the template renders them

    @property
    def think_budget(self) -> tuple[str, str, str]:
        """(opens thinking, ends it, the text written to end it on a spent budget): runner/sampling/think_budget.py."""
        if self.budget_think is not None:
            return self.budget_think
        opener, closer = self.think or THINK
        return opener, closer, closer

    def template_thinking(self, template: str | None) -> tuple[bool, str | None, str | None]:
        """(a model with this template thinks, the marker that opens it, the template variable that switches it)."""
        t = template or ""
        if self.thinking.effort:
            return True, None, self.thinking.effort
        switch = self.thinking.switch
        toggle = "enable_thinking" if "enable_thinking" in t else (
            switch if switch and re.search(rf"\b{re.escape(switch)}\b", t) else None)
        own = self.think[0] if self.think else None
        if own and own in t:
            return True, own, toggle
        if self.thinking.marker_needed:
            return False, own, toggle
        if any(h in t for h in THINK_HINTS):
            return True, THINK[0], toggle
        return False, None, None


def _llama3(t: str) -> bool:
    return PYTHON_TAG in t or PYTHON_START in t or ("<|start_header_id|>" in t and bool(TOOLS_VAR.search(t)))


# in the order templates are tried: a marker one family shares with a later one (<tool_call>) decides first
FORMATS: dict[str, ChatFormat] = {f.name: f for f in (
    ChatFormat("harmony", lambda t: H_CHANNEL in t, think=None, shown=HARMONY_TOKENS, grammar=None,
               reply_parser="harmony", thinking=TemplateThinking(effort="reasoning_effort"),
               budget_think=HARMONY_THINK_BUDGET),
    ChatFormat("functiongemma", lambda t: FG_CALL[0] in t, (Section(*FG_CALL, "functiongemma"),), think=None,
               shown=FG_CALL + ("<escape>",), grammar=None),
    ChatFormat("deepseek", lambda t: "tool▁call▁begin" in t or "tool▁calls▁begin" in t,
               (Section(*DS_CALLS, "deepseek"), Section(*DS_CALL, "deepseek_call")),
               shown=DS_CALLS + DS_CALL + (DS_SEP,) + THINK, grammar=None),
    ChatFormat("mistral", lambda t: MISTRAL_CALLS in t or MISTRAL_THINK[0] in t,
               (Section(MISTRAL_CALLS, None, "mistral"),), think=MISTRAL_THINK,
               shown=(MISTRAL_CALLS, "[ARGS]", "[CALL_ID]") + MISTRAL_THINK,
               grammar=CallGrammar(MISTRAL_CALLS, "", "arguments", True),
               thinking=TemplateThinking(switch="thinking"), prepare_messages=nine_char_call_ids),
    ChatFormat("command_r", lambda t: CR_ACTION[0] in t, (Section(*CR_ACTION, "hermes"),), think=CR_THINK,
               shown=CR_ACTION + CR_THINK + CR_RESPONSE, strip=CR_RESPONSE,
               thinking=TemplateThinking(marker_needed=True)),
    ChatFormat("qwen3_coder", lambda t: TOOL_CALL[0] in t and "<function=" in t,
               (Section(*TOOL_CALL, "qwen3_coder"),), shown=TOOL_CALL + THINK, grammar=None),
    ChatFormat("hermes", lambda t: TOOL_CALL[0] in t, (Section(*TOOL_CALL, "hermes"),), shown=TOOL_CALL + THINK,
               grammar=CallGrammar(*TOOL_CALL)),
    ChatFormat("llama3", _llama3, (Section(PYTHON_TAG, None, "llama3"), Section(PYTHON_START, PYTHON_END, "llama3")),
               think=None, shown=(PYTHON_TAG, PYTHON_START, PYTHON_END),
               grammar=CallGrammar(PYTHON_TAG, "", "parameters")),
    ChatFormat("pythonic", lambda t: "tool_code" in t or "[func_name1(" in t,
               (Section("```tool_code", "```", "pythonic"),), think=None, shown=(), grammar=None, bare_pythonic=True),
    ChatFormat("generic", lambda t: True),
)}
GENERIC = FORMATS["generic"]


def format_for(family: str | None) -> ChatFormat:
    """The family's record (an unknown or missing family: generic, whose parser reads only bare JSON calls)."""
    return FORMATS.get(family or GENERIC.name, GENERIC)


def detect_family(template: str | None) -> str:
    """The family whose tool-call/thinking markup a template's model writes, from the template text."""
    t = template or ""
    return next(f.name for f in FORMATS.values() if f.detect(t))
