"""Tool-call section parsers: the text between a family's call markers -> ToolCall objects, by the name a
family's record gives its sections (`Section.parser`, app/engine/chat/formats.py).

Each function takes the section text (markers removed) and returns the calls, or None when the text is not a
call in that format (the stream parser then keeps the text as content, never drops it). Formats, as the
families' chat templates write them and their models answer (docs/architecture.md, "Tool calls"):
- hermes (Qwen2.5, Qwen3, Hermes, SmolLM3...): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
- qwen3_coder: `<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>`
- llama3 (3.1-3.3): a bare `{"name": ..., "parameters": {...}}`, or after `<|python_tag|>` that JSON or a
  built-in tool call `brave_search.call(query="...")`
- mistral: `[TOOL_CALLS][{"name", "arguments", "id"}]` (v3) or `[TOOL_CALLS]NAME[ARGS]{...}` (v11+)
- deepseek: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>` (R1/V3) or
  `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (V3.1)
- functiongemma: `<start_function_call>call:NAME{key:<escape>text<escape>,n:1}<end_function_call>`
- pythonic (Llama 4, Gemma 3 `tool_code`): `[get_weather(city="Paris"), ...]`
"""
from __future__ import annotations

import ast
import json
import re
from typing import Callable

from app.engine.chat.formats import DS_CALL, DS_SEP, MISTRAL_CALLS

from .jsonscan import calls_from_text, loads_lenient
from .types import ToolCall


def hermes(body: str) -> list[ToolCall] | None:
    calls = calls_from_text(body)
    if calls is None:                     # `<tool_call>>{...}`: a stray character before the object
        text = body.strip()
        if len(text) > 1 and text[0] in ">,(:" and text[1] == "{":
            calls = calls_from_text(text[1:])
    return calls


_QC_FUNC = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.S)
_QC_PARAM = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.S)


def parameter_value(text: str):
    """A qwen3_coder parameter value written as text: JSON when it parses as JSON (numbers, objects), else the string."""
    t = text.strip("\n")
    try:
        return json.loads(t, strict=False)
    except ValueError:
        return t


def qwen3_coder(body: str) -> list[ToolCall] | None:
    calls = []
    for m in _QC_FUNC.finditer(body):
        args = {p.group(1): parameter_value(p.group(2)) for p in _QC_PARAM.finditer(m.group(2))}
        calls.append(ToolCall(m.group(1), args))
    return calls or hermes(body)          # Qwen3-Coder sometimes answers in the Hermes JSON shape


def _py_value(node):
    return ast.literal_eval(node)


def _py_call(node) -> ToolCall | None:
    if not isinstance(node, ast.Call) or node.args and not node.keywords and len(node.args) > 1:
        return None
    f = node.func
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name):
        return None
    parts.append(f.id)
    parts.reverse()
    if len(parts) == 2 and parts[1] == "call":    # Llama 3 built-in tools: brave_search.call(query=...)
        parts = parts[:1]
    try:
        args = {kw.arg: _py_value(kw.value) for kw in node.keywords if kw.arg}
    except (ValueError, SyntaxError, TypeError):
        return None
    if node.args:                                  # f({"city": "Paris"}): one positional dict
        try:
            only = _py_value(node.args[0])
        except (ValueError, SyntaxError, TypeError):
            return None
        if not isinstance(only, dict) or args:
            return None
        args = only
    return ToolCall(".".join(parts), args)


def pythonic(body: str) -> list[ToolCall] | None:
    """`[f(a=1), g(b="x")]` or `f(a=1)`; arguments must be Python literals (no code is run)."""
    text = body.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("tool_code").removeprefix("python").strip()
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return None
    node = tree.body
    nodes = node.elts if isinstance(node, (ast.List, ast.Tuple)) else [node]
    calls = [c for c in (_py_call(n) for n in nodes) if c is not None]
    return calls if calls and len(calls) == len(nodes) else None


def llama3(body: str) -> list[ToolCall] | None:
    """After `<|python_tag|>`: JSON call(s) (several separated by `;`), or a built-in tool's Python call."""
    text = body.strip()
    if text[:1] in "{[":
        calls: list[ToolCall] = []
        for part in _split_semicolons(text):
            got = calls_from_text(part)
            if got is None:
                return calls or None
            calls.extend(got)
        return calls or None
    return pythonic(text)


def _split_semicolons(text: str) -> list[str]:
    """`{...}; {...}` -> the objects (a `;` inside a string is not a separator)."""
    from .jsonscan import json_end
    parts, pos = [], 0
    while pos < len(text):
        end = json_end(text, pos) if text[pos] in "{[" else None
        parts.append(text[pos:end] if end else text[pos:])
        if end is None:
            break
        pos = end
        while pos < len(text) and text[pos] in " \t\r\n;,":
            pos += 1
    return parts


_MISTRAL_V11 = re.compile(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[CALL_ID\]\s*([A-Za-z0-9]+)\s*)?\[ARGS\]", re.S)


def mistral(body: str) -> list[ToolCall] | None:
    """One or more `[TOOL_CALLS]` sections (marker removed from the first; later ones still in `body`)."""
    calls: list[ToolCall] = []
    for part in body.split(MISTRAL_CALLS):
        part = part.strip()
        if not part:
            continue
        m = _MISTRAL_V11.match(part)
        if m:
            args = loads_lenient(part[m.end():])
            if not isinstance(args, dict):
                return calls or None
            calls.append(ToolCall(m.group(1), args, m.group(2)))
            continue
        got = calls_from_text(part)
        if got is None:
            return calls or None
        calls.extend(got)
    return calls or None


DS_CALL_BEGIN, DS_CALL_END = DS_CALL
_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*(?:```|$)", re.S)


def deepseek(body: str) -> list[ToolCall] | None:
    calls: list[ToolCall] = []
    for chunk in body.split(DS_CALL_BEGIN):
        chunk = chunk.split(DS_CALL_END)[0].strip()
        if not chunk:
            continue
        if DS_SEP not in chunk:
            return calls or None
        head, rest = chunk.split(DS_SEP, 1)
        head = head.strip()
        if head == "function":                     # R1 / V3: function<sep>NAME\n```json\n{...}\n```
            name, _, rest = rest.partition("\n")
        else:                                      # V3.1: NAME<sep>{...}
            name = head
        fenced = _FENCE.search(rest)
        args = loads_lenient(fenced.group(1) if fenced else rest)
        if not isinstance(args, dict) or not name.strip():
            return calls or None
        calls.append(ToolCall(name.strip(), args))
    return calls or None


GEMMA_ESC = "<escape>"


class _FGReader:
    """FunctionGemma's argument syntax: {key:value,...}; strings between <escape> marks, bare numbers/booleans,
    nested {...} and [...]."""

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self):
        self.ws()
        s = self.s
        if s.startswith(GEMMA_ESC, self.i):
            j = s.find(GEMMA_ESC, self.i + len(GEMMA_ESC))
            if j < 0:
                raise ValueError("unterminated string")
            v = s[self.i + len(GEMMA_ESC):j]
            self.i = j + len(GEMMA_ESC)
            return v
        if s.startswith("{", self.i):
            return self.obj()
        if s.startswith("[", self.i):
            self.i += 1
            out = []
            while True:
                self.ws()
                if s.startswith("]", self.i):
                    self.i += 1
                    return out
                out.append(self.value())
                self.ws()
                if s.startswith(",", self.i):
                    self.i += 1
        m = re.compile(r"[^,}\]]*").match(s, self.i)
        self.i = m.end()
        word = m.group(0).strip()
        try:
            return json.loads(word, strict=False)
        except ValueError:
            return word

    def obj(self) -> dict:
        self.i += 1                                  # '{'
        out: dict = {}
        while True:
            self.ws()
            if self.i >= len(self.s):
                return out                           # cut off: what was read so far
            if self.s.startswith("}", self.i):
                self.i += 1
                return out
            j = self.s.find(":", self.i)
            if j < 0:
                raise ValueError("key without value")
            key = self.s[self.i:j].strip()
            self.i = j + 1
            out[key] = self.value()
            self.ws()
            if self.s.startswith(",", self.i):
                self.i += 1


def functiongemma(body: str) -> list[ToolCall] | None:
    text = body.strip()
    if not text.startswith("call:"):
        return None
    brace = text.find("{")
    name = (text[5:brace] if brace >= 0 else text[5:]).strip()
    if not name:
        return None
    try:
        args = _FGReader(text[brace:]).obj() if brace >= 0 else {}
    except (ValueError, IndexError):
        return None
    return [ToolCall(name, args)]


SectionParser = Callable[[str], "list[ToolCall] | None"]

SECTION_PARSERS: dict[str, SectionParser] = {
    "hermes": hermes, "qwen3_coder": qwen3_coder, "llama3": llama3, "mistral": mistral, "deepseek": deepseek,
    "functiongemma": functiongemma, "pythonic": pythonic,
    "deepseek_call": lambda b: deepseek(DS_CALL_BEGIN + b),     # one call, its marker consumed
}
