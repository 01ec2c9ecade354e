"""Structured output: `format: "json"` and JSON schemas turned into GBNF for llama.cpp's grammar sampler.

The converter is ours (app/engine/json_schema_grammar/, a port of llama.cpp's C++ one, the rules llama-server
uses); here we bound the schema's size (an upper bound past what a reply reaches is left out, `fit_bounds`) and
give clear errors, since a grammar llama.cpp cannot parse makes its sampler constructor return NULL. `format: "json"` is the schema {"type": "object"}: any JSON object.
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
_UPPER = ("maxLength", "maxItems", "maxProperties")
_LOWER = ("minLength", "minItems", "minProperties")
_DATA = frozenset(("const", "enum", "default", "examples"))     # values, not schemas: copied untouched
_MAPS = frozenset(("properties", "$defs", "definitions", "patternProperties", "dependentSchemas"))  # name -> schema
_COUNTER = re.compile(r"(?<!\\)\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fit_bounds(schema):
    """The schema the grammar is built from, with every upper bound above MAX_REPEAT left out: such a bound (Claude
    Code bounds its tools' strings at maxLength 524288) is past what any reply in a context reaches, so it means
    "unbounded" in practice, and written out it would be a grammar llama.cpp cannot hold (a pattern's `{m,n}`
    becomes `{m,}`). A copy; `schema` itself is not changed. GrammarError naming the keyword for what cannot be
    built: a lower bound above MAX_REPEAT (a reply that long cannot be required through a grammar), bounds adding
    up beyond MAX_TOTAL_REPEAT, more than MAX_NODES objects and arrays."""
    out: list = [None]
    total, nodes = 0, 0
    stack: list = [(schema, out, 0, False)]      # (source node, parent container, key or index, names -> schemas)
    while stack:
        node, parent, key, names = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise GrammarError(f"JSON schema too large (more than {MAX_NODES} objects and arrays)")
        if isinstance(node, list):
            copy: list = list(node)
            parent[key] = copy
            stack.extend((v, copy, i, False) for i, v in enumerate(node) if isinstance(v, (dict, list)))
            continue
        d = dict(node)
        parent[key] = d
        if names:                                # {"properties": {NAME: schema}}: every value is a schema
            stack.extend((v, d, k, False) for k, v in node.items() if isinstance(v, (dict, list)))
            continue
        for k in _UPPER:
            v = d.get(k)
            if _number(v):
                if v > MAX_REPEAT:
                    del d[k]                     # past what a reply reaches: unbounded for the grammar
                else:
                    total += int(v)
        for k in _LOWER:
            v = d.get(k)
            if _number(v):
                if v > MAX_REPEAT:
                    raise GrammarError(f"JSON schema {k} {v} is over the limit of {MAX_REPEAT} for structured "
                                       f"output (a grammar cannot require a reply that long)")
                total += int(v)
        pattern = d.get("pattern")
        if isinstance(pattern, str):
            d["pattern"], repeats = _fit_pattern(pattern)
            total += repeats
        if total > MAX_TOTAL_REPEAT:
            raise GrammarError(f"JSON schema bounds add up to more than {MAX_TOTAL_REPEAT} repetitions")
        stack.extend((v, d, k, k in _MAPS) for k, v in node.items() if k not in _DATA and isinstance(v, (dict, list)))
    return out[0]


def _fit_pattern(pattern: str) -> tuple[str, int]:
    """(the pattern with each `{m,n}` whose n is above MAX_REPEAT written `{m,}`, the repetitions it still bounds);
    GrammarError for a lower count above it."""
    total = 0

    def fit(m: re.Match) -> str:
        nonlocal total
        lo, comma, hi = int(m.group(1)), m.group(2), m.group(3)
        if lo > MAX_REPEAT:
            raise GrammarError(f"JSON schema pattern repeats {m.group(0)}: over the limit of {MAX_REPEAT}")
        if comma and hi and int(hi) > MAX_REPEAT:
            total += lo
            return "{" + str(lo) + ",}"
        total += max(lo, int(hi or 0))
        return m.group(0)

    return _COUNTER.sub(fit, pattern), total


def check_schema_size(schema) -> None:
    """Refuse schemas whose grammar would be too big to build (GrammarError naming the keyword)."""
    fit_bounds(schema)


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
    """The schema's GBNF (top rule `root`, or `name`), its bounds fitted (fit_bounds); GrammarError saying `what`."""
    schema = fit_bounds(schema)
    try:
        return json_schema_to_grammar(schema, name)
    except (SchemaError, RecursionError) as e:
        raise GrammarError(f"{what}: {e}") from e
