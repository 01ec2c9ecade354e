"""Integer bounds as grammar rules: `build_min_max_int` of llama.cpp's common/json-schema-to-grammar.cpp, which
spells a range (minimum, maximum, either or both) as alternatives of digit ranges, no number outside it accepted.
Covered by tests/unit/engine/test_json_schema_grammar.py (llama.cpp's C++ test cases, exact grammar text)."""
from __future__ import annotations

from .rules import INT64_MAX, INT64_MIN, INT_MAX, SchemaError


def build_min_max_int(min_value: int, max_value: int, out: list[str], decimals_left: int = 16,
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
            build_min_max_int(-max_value, -min_value, out, decimals_left, True)
            out.append(")")
            return
        if min_value < 0:
            out.append('"-" (')
            build_min_max_int(0, -min_value, out, decimals_left, True)
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
            build_min_max_int(INT64_MIN, -min_value, out, decimals_left, False)
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
            build_min_max_int(int(min_s[1:]), INT64_MAX, out, less_decimals, False)
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
            build_min_max_int(0, max_value, out, decimals_left, True)
        else:
            out.append('"-" (')
            build_min_max_int(-max_value, INT64_MAX, out, decimals_left, False)
            out.append(")")
        return

    raise SchemaError("At least one of min_value or max_value must be set")
