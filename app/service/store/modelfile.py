"""Parse Ollama Modelfiles for `/api/create`: FROM, PARAMETER, TEMPLATE, SYSTEM (plus LICENSE and MESSAGE, kept).

Values may be bare (rest of the line), "double-quoted", or \"\"\"triple-quoted\"\"\" over several lines.
PARAMETER values are typed by key (num_ctx -> int, temperature -> float, stop -> list, repeated).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

INT_PARAMS = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "num_keep", "seed", "num_predict",
              "top_k", "repeat_last_n", "mirostat", "cpu_moe", "draft_max",
              "cache_reuse", "think_budget"}
FLOAT_PARAMS = {"temperature", "top_p", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
                "frequency_penalty", "mirostat_tau", "mirostat_eta", "tfs_z", "draft_p_min"}
BOOL_PARAMS = {"penalize_newline", "use_mmap", "use_mlock", "numa", "low_vram", "flash_attn", "ignore_eos",
               "answer_after_tools", "stop_repeated_calls"}
STR_PARAMS = {"kv_type", "draft"}
LIST_PARAMS = {"stop"}
KNOWN_PARAMS = INT_PARAMS | FLOAT_PARAMS | BOOL_PARAMS | STR_PARAMS | LIST_PARAMS
INSTRUCTIONS = {"FROM", "PARAMETER", "TEMPLATE", "SYSTEM", "ADAPTER", "LICENSE", "MESSAGE"}


class ModelfileError(ValueError):
    """The Modelfile cannot be used; the message says which line and why."""


@dataclass
class Modelfile:
    from_: str = ""
    parameters: dict = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    license: str | None = None
    messages: list[dict] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)    # ADAPTER lines: LoRA GGUF paths on this machine


def parse_param_value(key: str, raw) -> object:
    """Type a PARAMETER (or a `parameters` JSON value) by its key; raises ModelfileError."""
    key = key.lower()
    if key not in KNOWN_PARAMS:
        raise ModelfileError(f"unknown parameter {key!r}")
    if not isinstance(raw, str):            # already typed (JSON `parameters` of /api/create)
        if key in LIST_PARAMS:
            if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
                return list(raw)
            raise ModelfileError(f"parameter {key!r} must be a string or a list of strings")
        if key in INT_PARAMS and isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if key in FLOAT_PARAMS and isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return float(raw)
        if key in BOOL_PARAMS and isinstance(raw, bool):
            return raw
        raise ModelfileError(f"parameter {key!r} has the wrong type: {raw!r}")
    try:
        if key in INT_PARAMS:
            return int(raw)
        if key in FLOAT_PARAMS:
            return float(raw)
        if key in BOOL_PARAMS:
            low = raw.strip().lower()
            if low in ("true", "1", "yes"):
                return True
            if low in ("false", "0", "no"):
                return False
            raise ValueError(raw)
        if key in LIST_PARAMS:
            return [raw]
        return raw
    except ValueError:
        raise ModelfileError(f"parameter {key!r}: cannot read {raw!r}") from None


def _read_value(text: str, pos: int, lineno: int) -> tuple[str, int]:
    """Value starting at text[pos]; returns (value, position after it)."""
    if text.startswith('"""', pos):
        end = text.find('"""', pos + 3)
        if end < 0:
            raise ModelfileError(f"line {lineno}: unterminated \"\"\" string")
        return text[pos + 3:end], end + 3
    if text.startswith('"', pos):
        i = pos + 1
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == '"':
                try:
                    return json.loads(text[pos:i + 1]), i + 1
                except json.JSONDecodeError:
                    return text[pos + 1:i], i + 1
            if text[i] == "\n":
                break
            i += 1
        raise ModelfileError(f"line {lineno}: unterminated \" string")
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    return text[pos:end].strip(), end


def _token(text: str, pos: int) -> tuple[str, int]:
    """The word at `pos` and where the blanks after it end."""
    n, k = len(text), pos
    while k < n and not text[k].isspace():
        k += 1
    word = text[pos:k]
    while k < n and text[k] in " \t":
        k += 1
    return word, k


def parse_modelfile(text: str) -> Modelfile:
    if not isinstance(text, str):
        raise ModelfileError("the Modelfile must be text")
    mf = Modelfile()
    pos, n = 0, len(text)
    while pos < n:
        # skip blank space and comments
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            break
        lineno = text.count("\n", 0, pos) + 1
        if text[pos] == "#":
            nl = text.find("\n", pos)
            pos = n if nl < 0 else nl + 1
            continue
        name, j = _token(text, pos)
        word = name.upper()
        if word not in INSTRUCTIONS:
            raise ModelfileError(f"line {lineno}: unknown instruction {name!r}")
        pos = _instruction(mf, word, text, j, lineno)
    if not mf.from_:
        raise ModelfileError("the Modelfile has no FROM line")
    return mf


def _instruction(mf: Modelfile, word: str, text: str, j: int, lineno: int) -> int:
    """Apply one instruction whose arguments start at `j`; returns where the next one may start."""
    if word == "PARAMETER":
        key, k = _token(text, j)
        key = key.lower()
        raw, pos = _read_value(text, k, lineno)
        if not key or raw == "":
            raise ModelfileError(f"line {lineno}: PARAMETER needs a name and a value")
        value = parse_param_value(key, raw)
        if key in LIST_PARAMS:
            mf.parameters.setdefault(key, []).extend(value)
        else:
            mf.parameters[key] = value
        return pos
    if word == "MESSAGE":
        role, k = _token(text, j)
        role = role.lower()
        if role not in ("system", "user", "assistant"):
            raise ModelfileError(f"line {lineno}: MESSAGE role must be system, user or assistant")
        content, pos = _read_value(text, k, lineno)
        mf.messages.append({"role": role, "content": content})
        return pos
    value, pos = _read_value(text, j, lineno)
    if word == "FROM":
        if not value:
            raise ModelfileError(f"line {lineno}: FROM needs a model name or a path")
        mf.from_ = value
    elif word == "TEMPLATE":
        mf.template = value
    elif word == "SYSTEM":
        mf.system = value
    elif word == "LICENSE":
        mf.license = value
    elif word == "ADAPTER":
        if not value:
            raise ModelfileError(f"line {lineno}: ADAPTER needs the path of a LoRA adapter GGUF")
        mf.adapters.append(value)
    return pos


def render_modelfile(from_: str, parameters: dict, template: str | None, system: str | None,
                     adapters: tuple[str, ...] = (), license: str | None = None) -> str:
    """The `modelfile` text `/api/show` returns."""
    lines = ["# Modelfile generated by \"strata show\"", f"FROM {from_}"]
    lines += [f"ADAPTER {a}" for a in adapters]
    if template:
        lines.append(f'TEMPLATE """{template}"""')
    if system:
        lines.append(f'SYSTEM """{system}"""')
    for k, v in (parameters or {}).items():
        for item in (v if isinstance(v, list) else [v]):
            lines.append(f"PARAMETER {k} {json.dumps(item) if isinstance(item, str) else _fmt(item)}")
    if license:
        lines.append(f'LICENSE """{license}"""')
    return "\n".join(lines) + "\n"


def render_parameters(parameters: dict) -> str:
    out = []
    for k, v in (parameters or {}).items():
        for item in (v if isinstance(v, list) else [v]):
            out.append(f"{k:<30} {json.dumps(item) if isinstance(item, str) else _fmt(item)}")
    return "\n".join(out)


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
