"""Structured output: `format: "json"` and JSON schemas turned into GBNF for llama.cpp's grammar sampler.

The converter is ours (app/engine/json_schema_grammar.py, a port of llama.cpp's C++ one, the rules llama-server
uses); here we bound the schema's size and give clear errors, since a grammar llama.cpp cannot parse makes its
sampler constructor return NULL. `format: "json"` is the schema {"type": "object"}: any JSON object.
"""
from __future__ import annotations

import re

from app.engine.json_schema_grammar import SchemaError, json_schema_to_grammar


class GrammarError(ValueError):
    """The requested format/schema cannot be turned into a grammar; the message says why."""


# The converter writes a bounded repetition out in full (maxLength n = n nested optionals) and llama.cpp's
# grammar parser recurses once per nesting level: maxLength 20000 crashed the runner (SIGSEGV), minLength 1e9
# never finished (a 5 GB grammar string). llama.cpp itself refuses nesting beyond ~1000-2000 levels.
MAX_REPEAT = 1000                 # per minLength/maxLength/minItems/maxItems and per {m,n} in a pattern
MAX_TOTAL_REPEAT = 20_000         # summed over the whole schema (many properties with large bounds)
MAX_NODES = 10_000                # schema objects and arrays
_BOUNDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_COUNTER = re.compile(r"(?<!\\)\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def check_schema_size(schema) -> None:
    """Refuse schemas whose grammar would be too big to build (GrammarError naming the keyword)."""
    total, nodes, stack = 0, 0, [schema]
    while stack:
        node = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise GrammarError(f"JSON schema too large (more than {MAX_NODES} objects and arrays)")
        if isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, (dict, list)))
            continue
        for key in _BOUNDS:
            v = node.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if v > MAX_REPEAT:
                    raise GrammarError(f"JSON schema {key} {v} is over the limit of {MAX_REPEAT} for structured output")
                total += int(v)
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            for m in _COUNTER.finditer(pattern):
                n = max(int(m.group(1)), int(m.group(2) or 0))
                if n > MAX_REPEAT:
                    raise GrammarError(f"JSON schema pattern repeats {m.group(0)}: over the limit of {MAX_REPEAT}")
                total += n
        if total > MAX_TOTAL_REPEAT:
            raise GrammarError(f"JSON schema bounds add up to more than {MAX_TOTAL_REPEAT} repetitions")
        stack.extend(v for v in node.values() if isinstance(v, (dict, list)))


def grammar_for(json_mode: bool = False, json_schema: dict | None = None) -> str | None:
    """GBNF for the request, or None when output is unconstrained."""
    if json_schema is not None:
        if not isinstance(json_schema, dict):
            raise GrammarError(f"format must be \"json\" or a JSON schema object, got {type(json_schema).__name__}")
        return schema_grammar(json_schema)
    if json_mode:
        return json_schema_to_grammar({"type": "object"})
    return None


def schema_grammar(schema: dict, name: str = "", what: str = "unsupported JSON schema") -> str:
    """The schema's GBNF (top rule `root`, or `name`), after the size checks; GrammarError saying `what`."""
    check_schema_size(schema)
    try:
        return json_schema_to_grammar(schema, name)
    except (SchemaError, RecursionError) as e:
        raise GrammarError(f"{what}: {e}") from e
