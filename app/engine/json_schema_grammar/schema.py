"""The typed schema, as llama.cpp's common/json-schema.cpp builds it from a JSON schema: nodes (any, $ref, anyOf,
allOf, const, enum, the types, tuples, objects) with their bounds checked, $refs resolved within the document;
SchemaError naming the place when a schema is outside the supported subset.
Covered by tests/unit/engine/test_json_schema_grammar.py (llama.cpp's C++ test cases, exact grammar text)."""
from __future__ import annotations

import math
from typing import NoReturn

from .rules import INT64_MAX, INT64_MIN, SchemaError


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



def parse_schema(schema) -> Node:
    """The typed schema (SchemaError naming the place when it is outside the supported subset)."""
    return _Builder(schema).build()
