"""JSON schema -> GBNF with llama.cpp's own rules: a line-for-line port of the C++ converter that
llama-cpp-python 0.3.36 vendors (common/json-schema.cpp builds the typed schema, common/json-schema-to-grammar.cpp
writes the rules), so `format`, `response_format` and tool arguments get what llama-server gives.

Why not llama-cpp-python's Python converter: its whitespace rule is `" "?` (one optional space), so a model that
writes `{\\n  "key"` breaks the grammar, and its string rule admits raw control characters, so replies were
invalid JSON (issue 24). llama.cpp's rules: whitespace `| " " | "\\n"{1,2} [ \\t]{0,20}`, strings without
unescaped control characters, bounded integers by digit ranges, formats (date, time, date-time, uuid),
enum/const, $ref (same document), anyOf/oneOf/allOf, additionalProperties, required properties in schema
order, minItems/maxItems, minLength/maxLength and `^...$` patterns.

Free of llama.cpp imports (both processes may import it). Test: tests/unit/engine/test_json_schema_grammar.py checks every
case of llama.cpp's C++ tests (tests/support/fixtures/json_schema/cases.json) for the exact grammar text.
"""
from __future__ import annotations

import json
import math
import re
from typing import NoReturn

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
_INVALID_RULE_CHARS = re.compile(r"[^a-zA-Z0-9-]+")
_LITERAL_ESCAPE = re.compile(r'[\r\n"\\]')
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "-": "\\-", "]": "\\]", "\\": "\\\\"}
MAX_PATTERN_DEPTH = 100
_NON_LITERAL = set("|.()[]{}*+?^$")
_ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = set("^$.[]()|{}*+?")


class SchemaError(ValueError):
    """The schema falls outside what the converter supports, or is malformed; the message says where."""


# ---- the typed schema (common/json-schema.cpp) -------------------------------------------------------------
class Node:
    kind = "any"


class Any(Node):
    kind = "any"


class Ref(Node):
    kind = "ref"

    def __init__(self, ref: str):
        self.ref = ref
        self.target: Node | None = None          # set once every $ref target is parsed (build)


class AnyOf(Node):
    kind = "anyOf"

    def __init__(self, children: list[Node]):
        self.children = children


class AllOf(Node):
    kind = "allOf"

    def __init__(self, children: list[Node]):
        self.children = children


class Const(Node):
    kind = "const"

    def __init__(self, value):
        self.value = value


class Enum(Node):
    kind = "enum"

    def __init__(self, values):
        self.values = values


class Null(Node):
    kind = "null"


class Boolean(Node):
    kind = "boolean"


class Number(Node):
    kind = "number"


class Integer(Node):
    kind = "integer"

    def __init__(self):
        self.minimum, self.maximum = INT64_MIN, INT64_MAX


class String(Node):
    kind = "string"

    def __init__(self):
        self.pattern, self.format, self.min_length, self.max_length = "", "", 0, -1


class Array(Node):
    kind = "array"

    def __init__(self):
        self.items: Node = Any()
        self.min_items, self.max_items = 0, -1


class Tuple(Node):
    kind = "tuple"

    def __init__(self, items: list[Node]):
        self.items = items


class Object(Node):
    kind = "object"

    def __init__(self):
        self.properties: list[tuple[str, Node, bool]] = []      # (name, schema, required), in schema order
        self.additional: Node | None = None                     # None: not allowed


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _dump(v) -> str:
    """JSON text as nlohmann's dump(): compact, UTF-8."""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


class _Builder:
    def __init__(self, root):
        self.root = root
        self.refs: dict[str, Node | None] = {}
        self.pending: list[Ref] = []

    @staticmethod
    def fail(path: str, msg: str) -> NoReturn:
        raise SchemaError(f"JSON schema error at {path}: {msg}")

    def count(self, schema: dict, key: str, path: str, default: int) -> int:
        if key not in schema:
            return default
        v = schema[key]
        if not _is_int(v) or v < 0:
            self.fail(path, f"{key} must be a non-negative integer")
        return v

    def bound(self, schema: dict, key: str, path: str, round_up: bool) -> int:
        v = schema[key]
        if _is_int(v):
            return v
        if not _is_number(v) or not math.isfinite(v):
            self.fail(path, f"{key} must be a number")
        return int(math.ceil(v) if round_up else math.floor(v))

    def format(self, schema: dict, path: str) -> str:
        if "format" not in schema:
            return ""
        f = schema["format"]
        if not isinstance(f, str):
            self.fail(path, "format must be a string")
        if f in ("date", "time", "date-time"):
            return f
        if f == "uuid" or (len(f) == 5 and f.startswith("uuid") and "1" <= f[4] <= "5"):
            return "uuid"
        return ""

    def resolve(self, ref: str, path: str):
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = int(sel) if sel.isdigit() else len(target)
                if idx >= len(target):
                    self.fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                self.fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def build_ref(self, value, path: str) -> Node:
        if not isinstance(value, str):
            self.fail(path, "$ref must be a string")
        if not value.startswith("#/"):
            self.fail(path, f"unsupported $ref {value}, only references into the same document are supported")
        if value not in self.refs:
            self.refs[value] = None          # reserved first, so a cycle back to this $ref stops here
            self.refs[value] = self.node(self.resolve(value, path), value)
        node = Ref(value)
        self.pending.append(node)
        return node

    def alternatives(self, cls, alts, path: str) -> Node:
        if not isinstance(alts, list):
            self.fail(path, "must be an array of schemas")
        if not alts:
            self.fail(path, "must not be empty")
        return cls([self.node(a, f"{path}/{i}") for i, a in enumerate(alts)])

    def obj(self, schema: dict, path: str) -> Node:
        node = Object()
        required = set()
        if isinstance(schema.get("required"), list):
            required = {n for n in schema["required"] if isinstance(n, str)}
        if "properties" in schema:
            props = schema["properties"]
            if not isinstance(props, dict):
                self.fail(path, "properties must be an object")
            for name, prop in props.items():
                node.properties.append((name, self.node(prop, f"{path}/properties/{name}"), name in required))
        if "additionalProperties" in schema:
            add = schema["additionalProperties"]
            if isinstance(add, bool):
                if add:
                    node.additional = Any()
            elif isinstance(add, dict):
                node.additional = self.node(add, f"{path}/additionalProperties")
            else:
                self.fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            node.additional = Any()              # {"type": "object"} on its own accepts any object
        return node

    def array(self, schema: dict, path: str) -> Node:
        node = Array()
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if isinstance(items, list):
                return Tuple([self.node(it, f"{path}/{key}/{i}") for i, it in enumerate(items)])
            node.items = self.node(items, f"{path}/{key}")
        node.min_items = self.count(schema, "minItems", path, 0)
        node.max_items = self.count(schema, "maxItems", path, -1)
        return node

    def string(self, schema: dict, path: str) -> Node:
        node = String()
        if "pattern" in schema:
            if not isinstance(schema["pattern"], str):
                self.fail(path, "pattern must be a string")
            node.pattern = schema["pattern"]
        node.format = self.format(schema, path)
        node.min_length = self.count(schema, "minLength", path, 0)
        node.max_length = self.count(schema, "maxLength", path, -1)
        return node

    def integer(self, schema: dict, path: str) -> Node:
        node = Integer()
        if "minimum" in schema:
            node.minimum = self.bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            node.minimum = self.bound(schema, "exclusiveMinimum", path, False) + 1
        if "maximum" in schema:
            node.maximum = self.bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            node.maximum = self.bound(schema, "exclusiveMaximum", path, True) - 1
        return node

    def node(self, schema, path: str) -> Node:
        if not isinstance(schema, dict):
            self.fail(path, "schema must be an object")
        if "$ref" in schema:
            return self.build_ref(schema["$ref"], path)
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.alternatives(AnyOf, schema[key], f"{path}/{key}")
        typ = schema.get("type")
        if isinstance(typ, list):
            # {"type": ["a", "b"], ...} is {"anyOf": [{"type": "a", ...}, {"type": "b", ...}]}
            if not typ:
                self.fail(path, "type must not be empty")
            return AnyOf([self.node({**schema, "type": t}, f"{path}/type/{i}") for i, t in enumerate(typ)])
        if "const" in schema:
            return Const(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                self.fail(path, "enum must be a non-empty array")
            return Enum(list(values))
        if typ is not None and not isinstance(typ, str):
            self.fail(path, "type must be a string or an array of strings")
        has_properties = "properties" in schema or \
            ("additionalProperties" in schema and schema["additionalProperties"] is not True)
        if not typ:
            # without a type the structural keywords decide, in the same order as the converter
            if has_properties:
                return self.obj(schema, path)
            if "allOf" in schema:
                return self.alternatives(AllOf, schema["allOf"], f"{path}/allOf")
            if "items" in schema or "prefixItems" in schema:
                return self.array(schema, path)
            if "pattern" in schema or "minLength" in schema or "maxLength" in schema or self.format(schema, path):
                return self.string(schema, path)
            return Any()
        if typ == "object":
            if not has_properties and "allOf" in schema:
                return self.alternatives(AllOf, schema["allOf"], f"{path}/allOf")
            return self.obj(schema, path)
        if typ == "string":
            if "allOf" in schema:
                return self.alternatives(AllOf, schema["allOf"], f"{path}/allOf")
            return self.string(schema, path)
        if typ == "array":
            return self.array(schema, path)
        if typ == "integer":
            return self.integer(schema, path)
        simple: type[Node] | None = {"number": Number, "boolean": Boolean, "null": Null}.get(typ)
        if simple is None:
            self.fail(path, f"unrecognized type {typ}")
        return simple()

    def build(self) -> Node:
        root = self.node(self.root, "#")
        for ref in self.pending:
            ref.target = self.refs.get(ref.ref)
        return root


# ---- the converter (common/json-schema-to-grammar.cpp) ------------------------------------------------------
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


def _build_min_max_int(min_value: int, max_value: int, out: list[str], decimals_left: int = 16,
                       top_level: bool = True) -> None:
    has_min, has_max = min_value != INT64_MIN, max_value != INT64_MAX

    def digit_range(frm: str, to: str) -> None:
        out.append("[")
        out.append(frm if frm == to else f"{frm}-{to}")
        out.append("]")

    def more_digits(min_digits: int, max_digits: int) -> None:
        out.append("[0-9]")
        if min_digits == max_digits == 1:
            return
        out.append("{")
        out.append(str(min_digits))
        if max_digits != min_digits:
            out.append(",")
            if max_digits != INT_MAX:
                out.append(str(max_digits))
        out.append("}")

    def uniform_range(frm: str, to: str) -> None:
        i = 0
        while i < len(frm) and i < len(to) and frm[i] == to[i]:
            i += 1
        if i > 0:
            out.append('"' + frm[:i] + '"')
        if i < len(frm) and i < len(to):
            if i > 0:
                out.append(" ")
            sub_len = len(frm) - i - 1
            if sub_len > 0:
                from_sub, to_sub = frm[i + 1:], to[i + 1:]
                sub_zeros, sub_nines = "0" * sub_len, "9" * sub_len
                to_reached = False
                out.append("(")
                if from_sub == sub_zeros:
                    digit_range(frm[i], chr(ord(to[i]) - 1))
                    out.append(" ")
                    more_digits(sub_len, sub_len)
                else:
                    out.append(f"[{frm[i]}] ")
                    out.append("(")
                    uniform_range(from_sub, sub_nines)
                    out.append(")")
                    if ord(frm[i]) < ord(to[i]) - 1:
                        out.append(" | ")
                        if to_sub == sub_nines:
                            digit_range(chr(ord(frm[i]) + 1), to[i])
                            to_reached = True
                        else:
                            digit_range(chr(ord(frm[i]) + 1), chr(ord(to[i]) - 1))
                        out.append(" ")
                        more_digits(sub_len, sub_len)
                if not to_reached:
                    out.append(" | ")
                    digit_range(to[i], to[i])
                    out.append(" ")
                    uniform_range(sub_zeros, to_sub)
                out.append(")")
            else:
                out.append(f"[{frm[i]}-{to[i]}]")

    if has_min and has_max:
        if min_value < 0 and max_value < 0:
            out.append('"-" (')
            _build_min_max_int(-max_value, -min_value, out, decimals_left, True)
            out.append(")")
            return
        if min_value < 0:
            out.append('"-" (')
            _build_min_max_int(0, -min_value, out, decimals_left, True)
            out.append(") | ")
            min_value = 0
        min_s, max_s = str(min_value), str(max_value)
        for digits in range(len(min_s), len(max_s)):
            uniform_range(min_s, "9" * digits)
            min_s = "1" + "0" * digits
            out.append(" | ")
        uniform_range(min_s, max_s)
        return

    less_decimals = max(decimals_left - 1, 1)
    if has_min:
        if min_value < 0:
            out.append('"-" (')
            _build_min_max_int(INT64_MIN, -min_value, out, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            more_digits(0, decimals_left - 1)
        elif min_value == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                more_digits(0, less_decimals)
            else:
                more_digits(1, decimals_left)
        elif min_value <= 9:
            c = str(min_value)
            range_start = "1" if top_level else "0"
            if c > range_start:
                digit_range(range_start, chr(ord(c) - 1))
                out.append(" ")
                more_digits(1, less_decimals)
                out.append(" | ")
            digit_range(c, "9")
            out.append(" ")
            more_digits(0, less_decimals)
        else:
            min_s = str(min_value)
            c = min_s[0]
            if c > "1":
                digit_range("1" if top_level else "0", chr(ord(c) - 1))
                out.append(" ")
                more_digits(len(min_s), less_decimals)
                out.append(" | ")
            digit_range(c, c)
            out.append(" (")
            _build_min_max_int(int(min_s[1:]), INT64_MAX, out, less_decimals, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                digit_range(chr(ord(c) + 1), "9")
                out.append(" ")
                more_digits(len(min_s) - 1, less_decimals)
        return

    if has_max:
        if max_value >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                more_digits(0, less_decimals)
                out.append(" | ")
            _build_min_max_int(0, max_value, out, decimals_left, True)
        else:
            out.append('"-" (')
            _build_min_max_int(-max_value, INT64_MAX, out, decimals_left, False)
            out.append(")")
        return

    raise SchemaError("At least one of min_value or max_value must be set")


def format_literal(literal: str) -> str:
    return '"' + _LITERAL_ESCAPE.sub(lambda m: _LITERAL_ESCAPES[m.group(0)], literal) + '"'


def _gbnf_escape_length(pattern: str, pos: int) -> int:
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    n = pattern[pos + 1]
    if n in 'trn\\"[]-':
        return 2
    n_hex = {"x": 2, "u": 4, "U": 8}.get(n)
    if n_hex is None or pos + 2 + n_hex > len(pattern):
        return 0
    if not all(h in "0123456789abcdefABCDEF" for h in pattern[pos + 2:pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


class _UnsupportedPattern(Exception):
    pass


class _InvalidPattern(Exception):
    pass


class Converter:
    def __init__(self, dotall: bool = False):
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.refs_being_resolved: set[str] = set()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def add_rule(self, name: str, rule: str) -> str:
        esc = _INVALID_RULE_CHARS.sub("-", name)
        if esc not in self.rules or self.rules[esc] == rule:
            self.rules[esc] = rule
            return esc
        i = 0
        while f"{esc}{i}" in self.rules and self.rules[f"{esc}{i}"] != rule:
            i += 1
        key = f"{esc}{i}"
        self.rules[key] = rule
        return key

    def add_primitive(self, name: str, rule: tuple[str, tuple[str, ...]]) -> str:
        n = self.add_rule(name, rule[0])
        for dep in rule[1]:
            dep_rule = PRIMITIVE_RULES.get(dep) or STRING_FORMAT_RULES.get(dep)
            if dep_rule is None:
                self.errors.append(f"Rule {dep} not known")
                continue
            if dep not in self.rules:
                self.add_primitive(dep, dep_rule)
        return n

    def union(self, name: str, alts: list[Node]) -> str:
        return " | ".join(self.visit(a, name + ("alternative-" if not name else "-") + str(i))
                          for i, a in enumerate(alts))

    def visit_pattern(self, pattern: str, name: str) -> str:
        snapshot = dict(self.rules)
        try:
            return self.pattern_to_rule(pattern, name)
        except _UnsupportedPattern as e:
            self.rules = snapshot
            self.warnings.append(f"pattern {pattern} is not supported ({e}), accepting any string")
            return self.add_rule(name, self.add_primitive("string", PRIMITIVE_RULES["string"]))
        except _InvalidPattern as e:
            self.rules = snapshot
            self.errors.append(f"Invalid pattern {pattern}: {e}")
            return ""

    def pattern_to_rule(self, pattern: str, name: str) -> str:
        if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
            raise _UnsupportedPattern("not anchored with '^' and '$'")
        sub = pattern[1:-1]
        sub_rule_ids: dict[str, str | None] = {}
        length = len(sub)
        st = {"i": 0, "depth": 0}

        def to_rule(ls: tuple[str, bool]) -> str:
            return f'"{ls[0]}"' if ls[1] else ls[0]

        def get_dot() -> str:
            return self.add_rule("dot", r"[\U00000000-\U0010FFFF]" if self.dotall else r"[^\x0A\x0D]")

        def transform() -> tuple[str, bool]:
            seq: list[tuple[str, bool]] = []

            def join_seq() -> tuple[str, bool]:
                ret: list[tuple[str, bool]] = []
                literal = ""
                for item in seq:
                    if item[1]:
                        literal += item[0]
                    else:
                        if literal:
                            ret.append((literal, True))
                            literal = ""
                        ret.append(item)
                if literal:
                    ret.append((literal, True))
                return " ".join(to_rule(x) for x in ret), False

            while st["i"] < length:
                i = st["i"]
                c = sub[i]
                if c == ".":
                    seq.append((get_dot(), False))
                    st["i"] += 1
                elif c == "(":
                    st["i"] += 1
                    if st["i"] < length and sub[st["i"]] == "?":
                        if st["i"] + 1 < length and sub[st["i"] + 1] == ":":
                            st["i"] += 2
                        else:
                            raise _UnsupportedPattern("unsupported group syntax")
                    st["depth"] += 1
                    if st["depth"] > MAX_PATTERN_DEPTH:
                        raise _UnsupportedPattern("pattern nesting too deep")
                    seq.append(("(" + to_rule(transform()) + ")", False))
                elif c == ")":
                    st["i"] += 1
                    if st["depth"] == 0:
                        raise _InvalidPattern("unbalanced parentheses")
                    st["depth"] -= 1
                    return join_seq()
                elif c in "^$":
                    raise _UnsupportedPattern("anchor inside the pattern")
                elif c == "[":
                    sq = c
                    i += 1
                    while i < length and sub[i] != "]":
                        if sub[i] == "\\":
                            n = _gbnf_escape_length(sub, i)
                            if n == 0:
                                raise _UnsupportedPattern(f"unsupported escape in character class: {sub[i:i + 2]}")
                            sq += sub[i:i + n]
                            i += n
                        else:
                            sq += sub[i]
                            i += 1
                    if i >= length:
                        raise _InvalidPattern("unterminated character class")
                    sq += "]"
                    st["i"] = i + 1
                    seq.append((sq, False))
                elif c == "|":
                    seq.append(("|", False))
                    st["i"] += 1
                elif c in "*+?":
                    if not seq:
                        raise _InvalidPattern("nothing to repeat")
                    seq[-1] = (to_rule(seq[-1]) + c, False)
                    st["i"] += 1
                elif c == "{":
                    cb = c
                    i += 1
                    while i < length and sub[i] != "}":
                        cb += sub[i]
                        i += 1
                    if i >= length:
                        raise _UnsupportedPattern("unterminated curly brackets")
                    cb += "}"
                    st["i"] = i + 1
                    nums = cb[1:-1].split(",")
                    min_times, max_times = 0, INT_MAX
                    if len(nums) not in (1, 2):
                        raise _UnsupportedPattern("wrong number of values in curly brackets")
                    try:
                        if len(nums) == 1:
                            min_times = max_times = _stoi(nums[0])
                        else:
                            if nums[0]:
                                min_times = _stoi(nums[0])
                            if nums[1]:
                                max_times = _stoi(nums[1])
                    except ValueError:
                        raise _UnsupportedPattern("invalid number in curly brackets") from None
                    if not seq:
                        raise _InvalidPattern("nothing to repeat")
                    text, is_literal = seq[-1]
                    if not is_literal:
                        rule = sub_rule_ids.get(text)
                        if rule is None:
                            sub_rule_ids[text] = None        # counted in the name, as llama.cpp's map insert is
                            rule = sub_rule_ids[text] = self.add_rule(f"{name}-{len(sub_rule_ids)}", text)
                        text = rule
                    seq[-1] = (build_repetition(f'"{text}"' if is_literal else text, min_times, max_times, ""),
                               False)
                else:
                    literal = ""
                    while i < length:
                        if sub[i] == "\\":
                            if i == length - 1:
                                raise _InvalidPattern("trailing backslash")
                            nxt = sub[i + 1]
                            if nxt in _ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                                literal += nxt
                                i += 2
                            else:
                                n = _gbnf_escape_length(sub, i)
                                if n == 0:
                                    raise _UnsupportedPattern(f"unsupported escape: {sub[i:i + 2]}")
                                literal += sub[i:i + n]
                                i += n
                        elif sub[i] == '"':
                            literal += '\\"'
                            i += 1
                        elif sub[i] not in _NON_LITERAL and (i == length - 1 or not literal or sub[i + 1] == "."
                                                             or sub[i + 1] not in _NON_LITERAL):
                            literal += sub[i]
                            i += 1
                        else:
                            break
                    st["i"] = i
                    if not literal:
                        raise _UnsupportedPattern(f"unsupported character: {c}")
                    seq.append((literal, True))
            return join_seq()

        rule = to_rule(transform())
        if st["depth"] != 0:
            raise _InvalidPattern("unbalanced parentheses")
        return self.add_rule(name, r'"\"" (' + rule + r') "\""')

    def not_strings(self, strings: list[str]) -> str:
        """A JSON string that is none of `strings` (a trie of them, children in code point order)."""
        nodes: list[dict] = [{"children": {}, "end": False}]
        for w in strings:
            n = 0
            for ch in w:
                nxt = nodes[n]["children"].get(ord(ch))
                if nxt is None:
                    nodes.append({"children": {}, "end": False})
                    nxt = nodes[n]["children"][ord(ch)] = len(nodes) - 1
                n = nxt
            nodes[n]["end"] = True
        char_rule = self.add_primitive("char", PRIMITIVE_RULES["char"])
        out = ['["] ( ']

        def visit(idx: int) -> None:
            node = nodes[idx]
            rejects = ""
            first = True
            for cpt, child in sorted(node["children"].items()):
                c = chr(cpt)
                rejects += c
                if not first:
                    out.append(" | ")
                first = False
                out.append(f"[{c}]")
                if nodes[child]["children"]:
                    out.append(" (")
                    visit(child)
                    out.append(")")
                else:
                    out.append(f" {char_rule}+")
            if node["children"]:
                out.append(f' | [^"{rejects}] {char_rule}*')

        visit(0)
        out.append(" )")
        if not nodes[0]["end"]:
            out.append("?")
        out.append(' ["]')
        return "".join(out)

    def resolve_ref(self, node: Ref) -> str:
        frag = node.ref.split("#", 1)[1] if "#" in node.ref else node.ref
        ref_name = "ref" + _INVALID_RULE_CHARS.sub("-", frag)
        if ref_name not in self.rules and node.ref not in self.refs_being_resolved:
            if node.target is None:
                self.errors.append(f"Unresolved $ref {node.ref}")
                return ""
            self.refs_being_resolved.add(node.ref)
            ref_name = self.visit(node.target, ref_name)
            self.refs_being_resolved.discard(node.ref)
        return ref_name

    def object_rule(self, properties: list[tuple[str, Node]], required: set[str], name: str,
                    additional: Node | None) -> str:
        required_props: list[str] = []
        optional_props: list[str] = []
        kv_names: dict[str, str] = {}
        prop_names: list[str] = []
        dash = "" if not name else "-"
        for prop_name, prop_schema in properties:
            prop_rule = self.visit(prop_schema, name + dash + prop_name)
            kv_names[prop_name] = self.add_rule(name + dash + prop_name + "-kv",
                                                format_literal(_dump(prop_name)) + ' space ":" space ' + prop_rule)
            (required_props if prop_name in required else optional_props).append(prop_name)
            prop_names.append(prop_name)
        if additional is not None:
            sub_name = name + dash + "additional"
            value_rule = self.visit(additional, sub_name + "-value") if additional.kind != "any" else \
                self.add_primitive("value", PRIMITIVE_RULES["value"])
            key_rule = self.add_primitive("string", PRIMITIVE_RULES["string"]) if not prop_names else \
                self.add_rule(sub_name + "-k", self.not_strings(prop_names))
            kv_names["*"] = self.add_rule(sub_name + "-kv", key_rule + ' ":" space ' + value_rule)
            optional_props.append("*")
        if not required_props and not optional_props:
            return '"{" space "}"'
        rule = '"{" space '
        rule += ' "," space '.join(kv_names[p] for p in required_props)
        if optional_props:
            rule += " ("
            if required_props:
                rule += ' "," space ( '

            def recursive_refs(ks: list[str], first_is_optional: bool) -> str:
                if not ks:
                    return ""
                k = ks[0]
                kv = kv_names[k]
                comma_ref = f'( "," space {kv} )'
                if first_is_optional:
                    res = comma_ref + ("*" if k == "*" else "?")
                else:
                    res = kv + (" " + comma_ref + "*" if k == "*" else "")
                if len(ks) > 1:
                    res += " " + self.add_rule(name + dash + k + "-rest", recursive_refs(ks[1:], True))
                return res

            rule += " | ".join(recursive_refs(optional_props[i:], False) for i in range(len(optional_props)))
            if required_props:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def visit_primitive(self, rule_name: str, typ: str) -> str:
        return self.add_primitive("root" if rule_name == "root" else typ, PRIMITIVE_RULES[typ])

    def visit_all_of(self, node: AllOf, name: str, rule_name: str) -> str:
        required: set[str] = set()
        properties: list[tuple[str, Node]] = []
        enum_values: dict[str, int] = {}

        def add_component(comp: Node, is_required: bool) -> None:
            if isinstance(comp, Ref):
                if comp.target is not None:
                    add_component(comp.target, is_required)
            elif isinstance(comp, Object):
                for pname, pschema, _ in comp.properties:
                    properties.append((pname, pschema))
                    if is_required:
                        required.add(pname)
            elif isinstance(comp, Enum):
                for v in comp.values:
                    lit = format_literal(_dump(v))
                    enum_values[lit] = enum_values.get(lit, 0) + 1

        for child in node.children:
            if isinstance(child, AnyOf):
                for alt in child.children:
                    add_component(alt, False)
            else:
                add_component(child, True)
        if enum_values:
            inter = [v for v, n in sorted(enum_values.items()) if n == len(node.children)]
            if inter:
                return self.add_rule(rule_name, "(" + " | ".join(inter) + ")")
        return self.add_rule(rule_name, self.object_rule(properties, required, name, None))

    def visit(self, node: Node, name: str) -> str:
        rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
        sub_name = name + ("-" if name else "")
        k = node.kind
        if isinstance(node, Ref):
            return self.add_rule(rule_name, self.resolve_ref(node))
        if isinstance(node, AnyOf):
            return self.add_rule(rule_name, self.union(name, node.children))
        if isinstance(node, AllOf):
            return self.visit_all_of(node, name, rule_name)
        if isinstance(node, Const):
            return self.add_rule(rule_name, format_literal(_dump(node.value)))
        if isinstance(node, Enum):
            return self.add_rule(rule_name, "(" + " | ".join(format_literal(_dump(v)) for v in node.values) + ")")
        if isinstance(node, Object):
            if not node.properties and node.additional is not None and node.additional.kind == "any":
                return self.add_rule(rule_name, self.add_primitive("object", PRIMITIVE_RULES["object"]))
            required = {p for p, _, req in node.properties if req}
            return self.add_rule(rule_name, self.object_rule([(p, s) for p, s, _ in node.properties], required,
                                                             name, node.additional))
        if isinstance(node, Tuple):
            parts = [self.visit(it, f"{sub_name}tuple-{i}") for i, it in enumerate(node.items)]
            return self.add_rule(rule_name, '"[" space ' + ' "," space '.join(parts) + ' space "]"')
        if isinstance(node, Array):
            if node.items.kind == "any" and node.min_items == 0 and node.max_items < 0:
                return self.visit_primitive(rule_name, "array")
            item = self.visit(node.items, sub_name + "item")
            max_items = INT_MAX if node.max_items < 0 else node.max_items
            return self.add_rule(rule_name, '"[" space ' + build_repetition(item, node.min_items, max_items,
                                                                            '"," space') + ' space "]"')
        if isinstance(node, String):
            if node.pattern:
                return self.visit_pattern(node.pattern, rule_name)
            if node.format == "uuid":
                return self.visit_primitive(rule_name, "uuid")
            if node.format:
                prim = node.format + "-string"
                return self.add_rule(rule_name, self.add_primitive(prim, STRING_FORMAT_RULES[prim]))
            if node.min_length > 0 or node.max_length >= 0:
                char = self.add_primitive("char", PRIMITIVE_RULES["char"])
                max_len = INT_MAX if node.max_length < 0 else node.max_length
                return self.add_rule(rule_name, r'"\"" ' + build_repetition(char, node.min_length, max_len)
                                     + r' "\""')
            return self.visit_primitive(rule_name, "string")
        if isinstance(node, Integer):
            if node.minimum == INT64_MIN and node.maximum == INT64_MAX:
                return self.visit_primitive(rule_name, "integer")
            out = ["("]
            _build_min_max_int(node.minimum, node.maximum, out)
            out.append(")")
            return self.add_rule(rule_name, "".join(out))
        if k in ("number", "boolean", "null"):
            return self.visit_primitive(rule_name, k)
        return self.add_rule(rule_name, self.add_primitive("value", PRIMITIVE_RULES["value"]))

    def format_grammar(self) -> str:
        return "".join(f"{k} ::= {v}\n" for k, v in sorted(self.rules.items(), key=lambda kv: kv[0].encode()))


def _stoi(s: str) -> int:
    """std::stoi: leading whitespace, a sign and digits, the rest ignored; ValueError without digits."""
    m = re.match(r"\s*([-+]?\d+)", s)
    if not m:
        raise ValueError(s)
    v = int(m.group(1))
    if not -2**31 <= v < 2**31:
        raise ValueError(s)
    return v


def parse_schema(schema) -> Node:
    """The typed schema (SchemaError naming the place when it is outside the supported subset)."""
    return _Builder(schema).build()


def json_schema_to_grammar(schema, name: str = "") -> str:
    """GBNF for a JSON schema given as a dict (or JSON text), its top rule `root`, or `name` (then every rule it
    adds is named after `name`, so the rules can sit inside a larger grammar); SchemaError when it cannot."""
    if isinstance(schema, (str, bytes)):
        schema = json.loads(schema)
    conv = Converter()
    top = conv.visit(parse_schema(schema), name)
    if name and top != name:                 # a bare primitive is named after its type, not after `name`
        conv.rules[name] = top
    if conv.errors:
        raise SchemaError("JSON schema conversion failed:\n" + "\n".join(conv.errors))
    return conv.format_grammar()
