"""Grammars for tool calls: forced (`tool_choice` required or a named function) and lazy (`auto`).

A call is the JSON object {"name": NAME, "arguments": ARGS} with ARGS matching that function's JSON schema, built
with the same schema converter as `format` (grammar.py), over one combined schema (anyOf the tools).
- Forced: the whole reply is a call (or, with parallel calls, a list of calls): even a model whose template
  knows no tools answers with one; the service's parser reads bare JSON that names a supplied tool as a call.
- Lazy (`auto`): generation is free until the family's call marker appears (or, for any family, a reply that
  starts with `{"name"`); from there the call must complete and parse. The runner watches for the trigger
  itself (`find_trigger`, constrained.py) and then starts an ordinary grammar (`triggered`) whose root begins
  with the exact text already written, so every token it is fed is one it accepts. llama.cpp's own lazy grammar
  replays buffered tokens without checking them, and a rejected one (such as `{\n` where the grammar wants `{"`)
  throws inside libllama.
"""
from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from app.engine.chat.formats import CallGrammar, format_for
from app.engine.chat.plan import EITHER, FORCED, LAZY, ChatPlan, plan_chat
from app.engine.runner.sampling.grammar import GrammarError, schema_grammar


# A reply that opens with a bare call: whitespace, optionally ReAct's `Action:` label (what smolagents'
# ToolCallingAgent prompt teaches), optionally a Markdown code fence (small models such as Qwen2.5-Coder-0.5B
# write ```json around their calls), optionally one stray character glued to the object ('>{"' is one Qwen
# token), then `{`, the JSON whitespace the grammar's `space` rule admits (json_schema_grammar.SPACE_RULE) and
# the "name" key, so the trigger fires only on text the grammar accepts. The service's reply parser reads the
# same forms (service/generation/toolcalls/stream.py).
_BARE_START = re.compile(rb'\s*(?:Action:\s*)?(?P<fence>```(?:json)?[ \t]*\n\s*)?[>,(:]?'
                         rb'(?P<call>\{(?: |\n{1,2}[ \t]{0,20})?"name")')
_FENCE_LINE = 16                     # a fence line longer than this is not "```json"
_LABEL = b"Action:"
BARE, FENCED, MARKER = "bare", "fenced", "marker"


def may_open_bare(text: bytes | bytearray) -> bool:
    """Whether the reply so far can still grow into a bare (or fenced) call's start."""
    t = text.lstrip()
    if t.startswith(_LABEL):
        t = t[len(_LABEL):].lstrip()
    elif t and _LABEL.startswith(t):
        return True
    if t[:1] in (b">", b",", b"(", b":"):
        return len(t) == 1 or t[1:2] == b"{"
    if t.startswith(b"```"):
        nl = t.find(b"\n")
        if nl < 0:
            return len(t) <= _FENCE_LINE
        t = t[nl + 1:].lstrip()
    return not t or t.startswith(b"{") or (len(t) < 3 and b"```".startswith(t))


@dataclass(frozen=True)
class ToolGrammar:
    gbnf: str                                # forced: the whole grammar; lazy: the call rules, without a root
    lazy: bool = False
    opener: str | None = None                # lazy: the family's call marker
    wrapped: str = ""                        # lazy: the root expression for calls that start at the marker
    bare: str = "call"                       # lazy: the root expression for a bare call (several, in parallel)

    def find_trigger(self, text: bytes | bytearray, start: int = 0, bare: bool = True) -> tuple[int, str] | None:
        """Where the constrained part starts in `text` (the reply so far, special tokens as text) and how:
        (offset, BARE) for a reply that opens with `{"name"` (FENCED: inside a ```json fence, which the grammar then
        closes; looked for when `bare`), (offset, MARKER) at the
        family's marker at or after `start`; None while neither has appeared."""
        if bare:
            m = _BARE_START.match(text)
            if m:
                return m.start("call"), FENCED if m.group("fence") else BARE
        if self.opener:
            i = text.find(self.opener.encode(), start)
            if i >= 0:
                return i, MARKER
        return None

    def triggered(self, kind: str, prefix: str) -> str:
        """The grammar from the trigger on: `prefix` (the text of the trigger's first token before the trigger,
        already written) and then the calls."""
        body = self.wrapped if kind == MARKER else 'call tc-ws "```"' if kind == FENCED else self.bare
        lead = f'"{_gbnf_str(prefix)}" ' if prefix else ""
        return f"root ::= {lead}({body})\n{self.gbnf}"


def _function(tool: dict) -> tuple[str, dict]:
    fn = tool.get("function", tool)
    params = fn.get("parameters") or {"type": "object"}
    return fn["name"], params


def call_schema(tools: list[dict], only: str | None = None, args_key: str = "arguments") -> dict:
    alts = []
    for tool in tools:
        name, params = _function(tool)
        if only is not None and name != only:
            continue
        alts.append({"type": "object", "properties": {"name": {"const": name}, args_key: params},
                     "required": ["name", args_key]})
    if not alts:
        raise GrammarError(f"tool_choice names {only!r}, which is not among the tools")
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def _convert(schema: dict, rule: str) -> str:
    """GBNF for the schema, its top rule named `rule` (so it can sit inside a larger grammar)."""
    return schema_grammar(schema, rule, "tools: a function's parameters schema is not supported")


def forced(tools: list[dict], only: str | None = None, parallel: bool = False) -> ToolGrammar:
    body = _convert(call_schema(tools, only), "call")
    # no free whitespace around the call: a greedy small model would fill num_predict with newlines
    root = 'root ::= call' if not parallel or only else 'root ::= call | "[" call ("," " "? call)* "]"'
    return ToolGrammar(f"{root}\ntc-ws ::= [ \\t\\n]*\n{body}")


def lazy(tools: list[dict], shape: CallGrammar, parallel: bool = True) -> ToolGrammar:
    """`auto`: constrained from the family's marker (or a bare `{"name"` at the start) to the end of the call.
    Without `parallel` (OpenAI's parallel_tool_calls false) one call, after which the grammar admits only the
    end of the reply."""
    opener, closer, listed = shape.opener, shape.closer, shape.listed
    body = _convert(call_schema(tools, None, shape.args_key), "call")
    wrapped = ""
    if opener:
        inner = ('"[" tc-ws call ("," tc-ws call)* "]"' if parallel else '"[" tc-ws call tc-ws "]"') if listed \
            else "call"
        end = f' tc-ws "{_gbnf_str(closer)}"' if closer else ""
        wrapped = f'("{_gbnf_str(opener)}" tc-ws {inner}{end} tc-ws)' + ("+" if parallel else "")
    # a bare call at the start is `call` (llama3's bare JSON uses its own key too)
    # bare calls in parallel: one object per line, as small models write them when they drop their markers
    bare = 'call ("\\n" call)* "\\n"?' if parallel else "call"
    return ToolGrammar(f"tc-ws ::= [ \\t\\n]*\n{body}", lazy=True, opener=opener, wrapped=wrapped, bare=bare)


def with_format(tools: list[dict], family: str, format_gbnf: str, parallel: bool = True) -> str:
    """`auto` with a `format` (OpenAI's response_format beside tools): the reply is either content in that format
    or calls (at the family's marker, or as a bare call JSON the parser reads as one), constrained from its first
    token. The format's rules are renamed (`fmt-`) so they cannot clash with the call's."""
    g = lazy(tools, format_for(family).grammar or CallGrammar(), parallel)     # no marker: bare calls only
    alts = ["fmt-root", "call"] + ([g.wrapped] if g.wrapped else [])
    return f"root ::= {' | '.join(alts)}\n{g.gbnf}\n{prefix_rules(format_gbnf, 'fmt-')}"


_GBNF_NAME = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*::=", re.M)


def prefix_rules(gbnf: str, prefix: str) -> str:
    """`gbnf` with every rule it defines renamed `prefix + name`, at the definition and at each use (outside
    string literals, character classes and comments)."""
    names = set(_GBNF_NAME.findall(gbnf))
    out, i, n = [], 0, len(gbnf)
    while i < n:
        c = gbnf[i]
        if c in '"[':
            close = '"' if c == '"' else "]"
            j = i + 1
            while j < n and gbnf[j] != close:
                j += 2 if gbnf[j] == "\\" else 1
            out.append(gbnf[i:j + 1])
            i = j + 1
        elif c == "#":
            j = gbnf.find("\n", i)
            j = n if j < 0 else j
            out.append(gbnf[i:j])
            i = j
        elif c.isalnum() or c in "_-":
            j = i
            while j < n and (gbnf[j].isalnum() or gbnf[j] in "_-"):
                j += 1
            word = gbnf[i:j]
            out.append(prefix + word if word in names else word)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _gbnf_str(s: str) -> str:
    """`s` for a GBNF string literal: quote and backslash escaped, control characters as \\xHH."""
    return "".join(f"\\x{ord(c):02X}" if ord(c) < 0x20 or ord(c) == 0x7F else
                   "\\" + c if c in '"\\' else c for c in s)


# Grammars by tool set: an agent sends the same tools with every request (Claude Code: 24 tools, 64 KB), and
# converting their schemas is most of what a tool grammar costs before the first token (bench/bench_tool_grammar.py).
CACHE_SIZE = 16
_cache: OrderedDict[tuple, ToolGrammar | str] = OrderedDict()
_cache_lock = threading.Lock()


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


def for_plan(tools: list[dict] | None, plan: ChatPlan, format_gbnf: str | None = None) -> ToolGrammar | str | None:
    """The grammar the service's plan names (chat/plan.py), over the family's record: a ToolGrammar (FORCED, LAZY),
    the GBNF for calls or the format (EITHER, with `format_gbnf`), or None. Nothing is decided here. Built once per
    tool set, plan and format (the last CACHE_SIZE are kept); a refusal (GrammarError) is not kept."""
    if not tools or plan.grammar is None:
        return None
    key = (json.dumps(tools, separators=(",", ":")), plan, format_gbnf)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    built = _build(tools, plan, format_gbnf)
    if built is not None:
        with _cache_lock:
            _cache[key] = built
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
    return built


def _build(tools: list[dict], plan: ChatPlan, format_gbnf: str | None) -> ToolGrammar | str | None:
    if plan.grammar == EITHER and format_gbnf is not None:
        return with_format(tools, plan.family, format_gbnf, plan.parallel)
    if plan.grammar == FORCED:
        return forced(tools, plan.only, plan.parallel)
    shape = format_for(plan.family).grammar
    return None if shape is None or plan.grammar != LAZY else lazy(tools, shape, plan.parallel)


def for_request(tools: list[dict] | None, tool_choice, family: str, parallel: bool = True) -> ToolGrammar | None:
    """The grammar for tools and tool_choice without a format, as the service would plan it (for tests)."""
    grammar = for_plan(tools, plan_chat(family, tools, tool_choice, parallel))
    assert not isinstance(grammar, str)          # a bare GBNF comes only with a format (EITHER), never here
    return grammar
