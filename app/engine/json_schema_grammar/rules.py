"""The grammar's building blocks as llama.cpp's common/json-schema-to-grammar.cpp defines them: the whitespace
rule, the primitive and string-format rules, rule-name and literal escaping, `build_repetition` and
`format_literal`, and the error every part raises.
Covered by tests/unit/engine/test_json_schema_grammar.py (llama.cpp's C++ test cases, exact grammar text)."""
from __future__ import annotations

import json
import re

INT_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

SPACE_RULE = r'| " " | "\n"{1,2} [ \t]{0,20}'

PRIMITIVE_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
               ("integral-part", "decimal-part")),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": ("object | array | string | number | boolean | null",
              ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
               ("string", "value")),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": (r'"\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\""',
             ()),
    "char": (r'[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": (r'"\"" char* "\""', ("char",)),
    "null": ('"null"', ()),
}

STRING_FORMAT_RULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) '
             '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": (r'"\"" date "\""', ("date",)),
    "time-string": (r'"\"" time "\""', ("time",)),
    "date-time-string": (r'"\"" date-time "\""', ("date-time",)),
}

RESERVED_NAMES = {"root"} | set(PRIMITIVE_RULES) | set(STRING_FORMAT_RULES)
INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")
_LITERAL_ESCAPE = re.compile(r'[\r\n"\\]')
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "-": "\\-", "]": "\\]", "\\": "\\\\"}


class SchemaError(ValueError):
    """The schema falls outside what the converter supports, or is malformed; the message says where."""


def dump_json(v) -> str:
    """JSON text as nlohmann's dump(): compact, UTF-8."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def build_repetition(item_rule: str, min_items: int, max_items: int, separator_rule: str = "") -> str:
    has_max = max_items != INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item_rule + "?"
    if not separator_rule:
        if min_items == 1 and not has_max:
            return item_rule + "+"
        if min_items == 0 and not has_max:
            return item_rule + "*"
        return item_rule + "{" + str(min_items) + "," + (str(max_items) if has_max else "") + "}"
    result = item_rule + " " + build_repetition("(" + separator_rule + " " + item_rule + ")",
                                                0 if min_items == 0 else min_items - 1,
                                                max_items - 1 if has_max else max_items)
    if min_items == 0:
        result = "(" + result + ")?"
    return result



def format_literal(literal: str) -> str:
    return '"' + _LITERAL_ESCAPE.sub(lambda m: _LITERAL_ESCAPES[m.group(0)], literal) + '"'
