"""The schema converter of llama.cpp's common/json-schema-to-grammar.cpp: the typed schema (schema.py) -> GBNF
rules ($refs, unions, allOf, objects with required and optional properties and additionalProperties, arrays,
tuples, strings with bounds, formats or patterns, integers with bounds), and `json_schema_to_grammar`.
Covered by tests/unit/engine/test_json_schema_grammar.py (llama.cpp's C++ test cases, exact grammar text)."""
from __future__ import annotations

import json

from .number_range import build_min_max_int
from .pattern import InvalidPattern, UnsupportedPattern, pattern_to_rule
from .rules import (INT64_MAX, INT64_MIN, INT_MAX, INVALID_RULE_CHARS, PRIMITIVE_RULES, RESERVED_NAMES, SPACE_RULE,
                    STRING_FORMAT_RULES, SchemaError, build_repetition, dump_json, format_literal)
from .schema import AllOf, AnyOf, Array, Const, Enum, Integer, Node, Object, Ref, String, Tuple, parse_schema


class Converter:
    def __init__(self, dotall: bool = False):
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.refs_being_resolved: set[str] = set()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def add_rule(self, name: str, rule: str) -> str:
        esc = INVALID_RULE_CHARS.sub("-", name)
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
            return pattern_to_rule(self, pattern, name)
        except UnsupportedPattern as e:
            self.rules = snapshot
            self.warnings.append(f"pattern {pattern} is not supported ({e}), accepting any string")
            return self.add_rule(name, self.add_primitive("string", PRIMITIVE_RULES["string"]))
        except InvalidPattern as e:
            self.rules = snapshot
            self.errors.append(f"Invalid pattern {pattern}: {e}")
            return ""


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
        ref_name = "ref" + INVALID_RULE_CHARS.sub("-", frag)
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
                                                format_literal(dump_json(prop_name)) + ' space ":" space ' + prop_rule)
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
                    lit = format_literal(dump_json(v))
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
            return self.add_rule(rule_name, format_literal(dump_json(node.value)))
        if isinstance(node, Enum):
            return self.add_rule(rule_name, "(" + " | ".join(format_literal(dump_json(v)) for v in node.values) + ")")
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
            build_min_max_int(node.minimum, node.maximum, out)
            out.append(")")
            return self.add_rule(rule_name, "".join(out))
        if k in ("number", "boolean", "null"):
            return self.visit_primitive(rule_name, k)
        return self.add_rule(rule_name, self.add_primitive("value", PRIMITIVE_RULES["value"]))

    def format_grammar(self) -> str:
        return "".join(f"{k} ::= {v}\n" for k, v in sorted(self.rules.items(), key=lambda kv: kv[0].encode()))


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
