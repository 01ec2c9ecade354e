"""Grammars for tool calls: forced (`tool_choice` required or a named function) and lazy (`auto`).

A call is the JSON object {"name": NAME, "arguments": ARGS} with ARGS matching that function's JSON schema, built
with the same schema converter as `format` (grammar.py), over one combined schema (anyOf the tools).
- Forced: the whole reply is a call (or, with parallel calls, a list of calls): even a model whose template
  knows no tools answers with one; the service's parser reads bare JSON that names a supplied tool as a call.
- Lazy (llama_sampler_init_grammar_lazy_patterns): generation is free until the family's call marker appears
  (or, for any family, a reply that starts with `{"name"`); from there the call must complete and parse.
  llama.cpp full-matches each pattern against the text so far and feeds the grammar from the first capture
  group, so every root alternative starts with what a capture group holds.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from app.engine.runner.grammar import GrammarError, check_schema_size, json_schema_to_gbnf


@dataclass(frozen=True)
class ToolGrammar:
    gbnf: str
    lazy: bool = False
    patterns: tuple[str, ...] = ()           # regexes (full match, first group = where the grammar starts)
    trigger_tokens: tuple[str, ...] = ()     # special-token texts that start it (resolved to ids by the runner)


# family -> (marker that opens a call, what closes it, the key its JSON uses for arguments, wrapped in a list)
_WRAPPERS = {
    "hermes": ("<tool_call>", "</tool_call>", "arguments", False),
    "llama3": ("<|python_tag|>", "", "parameters", False),
    "mistral": ("[TOOL_CALLS]", "", "arguments", True),
}
_BARE_START = r'\s*(\{\s*"name")[\s\S]*'


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
    """GBNF for the schema with its root renamed to `rule` (so it can sit inside a larger grammar)."""
    check_schema_size(schema)
    try:
        gbnf = json_schema_to_gbnf(json.dumps(schema))
    except Exception as e:  # the converter raises assorted types on schemas it cannot handle
        raise GrammarError(f"tools: a function's parameters schema is not supported: {e}") from e
    return re.sub(r"^root ::=", f"{rule} ::=", gbnf, count=1, flags=re.M)


def forced(tools: list[dict], only: str | None = None, parallel: bool = False) -> ToolGrammar:
    body = _convert(call_schema(tools, only), "call")
    # no free whitespace around the call: a greedy small model would fill num_predict with newlines
    root = 'root ::= call' if not parallel or only else 'root ::= call | "[" call ("," " "? call)* "]"'
    return ToolGrammar(f"{root}\ntc-ws ::= [ \\t\\n]*\n{body}")


def lazy(tools: list[dict], family: str) -> ToolGrammar:
    """`auto`: constrained from the family's marker (or a bare `{"name"` at the start) to the end of the call."""
    opener, closer, args_key, listed = _WRAPPERS.get(family, (None, "", "arguments", False))
    body = _convert(call_schema(tools, None, args_key), "call")
    alts = []
    patterns = [_BARE_START]
    triggers: tuple[str, ...] = ()
    if opener:
        inner = '"[" tc-ws call ("," tc-ws call)* "]"' if listed else "call"
        end = f' tc-ws "{_gbnf_str(closer)}"' if closer else ""
        alts.append(f'("{_gbnf_str(opener)}" tc-ws {inner}{end} tc-ws)+')
        patterns.append(r"[\s\S]*?(" + re.escape(opener) + r")[\s\S]*")
        triggers = (opener,)
    alts.append("call")                         # a bare call at the start (llama3's bare JSON uses its key too)
    root = "root ::= " + " | ".join(alts)
    return ToolGrammar(f"{root}\ntc-ws ::= [ \\t\\n]*\n{body}", lazy=True, patterns=tuple(patterns),
                       trigger_tokens=triggers)


def _gbnf_str(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def for_request(tools: list[dict] | None, tool_choice, family: str, parallel: bool = True) -> ToolGrammar | None:
    """The grammar a request's tools and tool_choice call for, or None (no tools, `none`, or harmony/XML
    families whose calls the grammar does not model: there the parser alone reads them)."""
    if not tools or tool_choice in (None, "none"):
        return None
    if tool_choice == "required":
        return forced(tools, None, parallel)
    if isinstance(tool_choice, str) and tool_choice != "auto":
        return forced(tools, tool_choice, False)
    if family in ("harmony", "qwen3_coder", "functiongemma", "pythonic", "deepseek"):
        return None
    return lazy(tools, family)
