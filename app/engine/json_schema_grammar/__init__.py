"""JSON schema -> GBNF with llama.cpp's own rules: a line-for-line port of the C++ converter that
llama-cpp-python 0.3.36 vendors (common/json-schema.cpp builds the typed schema, common/json-schema-to-grammar.cpp
writes the rules), so `format`, `response_format` and tool arguments get what llama-server gives.

Why not llama-cpp-python's Python converter: its whitespace rule is `" "?` (one optional space), so a model that
writes `{\\n  "key"` breaks the grammar, and its string rule admits raw control characters, so replies were
invalid JSON. llama.cpp's rules: whitespace `| " " | "\\n"{1,2} [ \\t]{0,20}`, strings without
unescaped control characters, bounded integers by digit ranges, formats (date, time, date-time, uuid),
enum/const, $ref (same document), anyOf/oneOf/allOf, additionalProperties, required properties in schema
order, minItems/maxItems, minLength/maxLength and `^...$` patterns.

The parts follow llama.cpp's own files, so each stays diffable against upstream: schema.py (common/json-schema.cpp:
the typed schema), rules.py (the building blocks of common/json-schema-to-grammar.cpp), number_range.py (its integer
ranges), pattern.py (its regular expressions) and converter.py (its schema converter).

Free of llama.cpp imports (both processes may import it). Test: tests/unit/engine/test_json_schema_grammar.py checks
every case of llama.cpp's C++ tests (tests/support/fixtures/json_schema/cases.json) for the exact grammar text.
"""
from __future__ import annotations

from .converter import Converter, json_schema_to_grammar
from .rules import PRIMITIVE_RULES, SPACE_RULE, STRING_FORMAT_RULES, SchemaError, build_repetition, format_literal
from .schema import Node, parse_schema

__all__ = ["Converter", "Node", "PRIMITIVE_RULES", "SPACE_RULE", "STRING_FORMAT_RULES", "SchemaError",
           "build_repetition", "format_literal", "json_schema_to_grammar", "parse_schema"]
