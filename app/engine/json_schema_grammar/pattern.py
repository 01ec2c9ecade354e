"""Regular expressions as grammar rules: the `_visit_pattern` part of llama.cpp's
common/json-schema-to-grammar.cpp (a `pattern` anchored with ^ and $: literals, classes, groups, alternation,
repetition; what it cannot translate is UnsupportedPattern, a malformed one InvalidPattern).
Covered by tests/unit/engine/test_json_schema_grammar.py (llama.cpp's C++ test cases, exact grammar text)."""
from __future__ import annotations

import re

from .rules import INT_MAX, build_repetition

MAX_PATTERN_DEPTH = 100
_NON_LITERAL = set("|.()[]{}*+?^$")
_ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = set("^$.[]()|{}*+?")


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


class UnsupportedPattern(Exception):
    pass


class InvalidPattern(Exception):
    pass


def _stoi(s: str) -> int:
    """std::stoi: leading whitespace, a sign and digits, the rest ignored; ValueError without digits."""
    m = re.match(r"\s*([-+]?\d+)", s)
    if not m:
        raise ValueError(s)
    v = int(m.group(1))
    if not -2**31 <= v < 2**31:
        raise ValueError(s)
    return v


def pattern_to_rule(conv, pattern: str, name: str) -> str:
    """The rule for a JSON string matching `pattern` (`^...$`), its sub-rules added to `conv` (the Converter:
    `add_rule`, `dotall`); UnsupportedPattern or InvalidPattern when it cannot."""
    if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
        raise UnsupportedPattern("not anchored with '^' and '$'")
    sub = pattern[1:-1]
    sub_rule_ids: dict[str, str | None] = {}
    length = len(sub)
    st = {"i": 0, "depth": 0}

    def to_rule(ls: tuple[str, bool]) -> str:
        return f'"{ls[0]}"' if ls[1] else ls[0]

    def get_dot() -> str:
        return conv.add_rule("dot", r"[\U00000000-\U0010FFFF]" if conv.dotall else r"[^\x0A\x0D]")

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
                        raise UnsupportedPattern("unsupported group syntax")
                st["depth"] += 1
                if st["depth"] > MAX_PATTERN_DEPTH:
                    raise UnsupportedPattern("pattern nesting too deep")
                seq.append(("(" + to_rule(transform()) + ")", False))
            elif c == ")":
                st["i"] += 1
                if st["depth"] == 0:
                    raise InvalidPattern("unbalanced parentheses")
                st["depth"] -= 1
                return join_seq()
            elif c in "^$":
                raise UnsupportedPattern("anchor inside the pattern")
            elif c == "[":
                sq = c
                i += 1
                while i < length and sub[i] != "]":
                    if sub[i] == "\\":
                        n = _gbnf_escape_length(sub, i)
                        if n == 0:
                            raise UnsupportedPattern(f"unsupported escape in character class: {sub[i:i + 2]}")
                        sq += sub[i:i + n]
                        i += n
                    else:
                        sq += sub[i]
                        i += 1
                if i >= length:
                    raise InvalidPattern("unterminated character class")
                sq += "]"
                st["i"] = i + 1
                seq.append((sq, False))
            elif c == "|":
                seq.append(("|", False))
                st["i"] += 1
            elif c in "*+?":
                if not seq:
                    raise InvalidPattern("nothing to repeat")
                seq[-1] = (to_rule(seq[-1]) + c, False)
                st["i"] += 1
            elif c == "{":
                cb = c
                i += 1
                while i < length and sub[i] != "}":
                    cb += sub[i]
                    i += 1
                if i >= length:
                    raise UnsupportedPattern("unterminated curly brackets")
                cb += "}"
                st["i"] = i + 1
                nums = cb[1:-1].split(",")
                min_times, max_times = 0, INT_MAX
                if len(nums) not in (1, 2):
                    raise UnsupportedPattern("wrong number of values in curly brackets")
                try:
                    if len(nums) == 1:
                        min_times = max_times = _stoi(nums[0])
                    else:
                        if nums[0]:
                            min_times = _stoi(nums[0])
                        if nums[1]:
                            max_times = _stoi(nums[1])
                except ValueError:
                    raise UnsupportedPattern("invalid number in curly brackets") from None
                if not seq:
                    raise InvalidPattern("nothing to repeat")
                text, is_literal = seq[-1]
                if not is_literal:
                    rule = sub_rule_ids.get(text)
                    if rule is None:
                        sub_rule_ids[text] = None        # counted in the name, as llama.cpp's map insert is
                        rule = sub_rule_ids[text] = conv.add_rule(f"{name}-{len(sub_rule_ids)}", text)
                    text = rule
                seq[-1] = (build_repetition(f'"{text}"' if is_literal else text, min_times, max_times, ""),
                           False)
            else:
                literal = ""
                while i < length:
                    if sub[i] == "\\":
                        if i == length - 1:
                            raise InvalidPattern("trailing backslash")
                        nxt = sub[i + 1]
                        if nxt in _ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                            literal += nxt
                            i += 2
                        else:
                            n = _gbnf_escape_length(sub, i)
                            if n == 0:
                                raise UnsupportedPattern(f"unsupported escape: {sub[i:i + 2]}")
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
                    raise UnsupportedPattern(f"unsupported character: {c}")
                seq.append((literal, True))
        return join_seq()

    rule = to_rule(transform())
    if st["depth"] != 0:
        raise InvalidPattern("unbalanced parentheses")
    return conv.add_rule(name, r'"\"" (' + rule + r') "\""')
