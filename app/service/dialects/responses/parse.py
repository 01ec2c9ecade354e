"""OpenAI's Responses API (POST /v1/responses) -> the internal request. Stateless: `input` as text or items
(messages of any role, developer included; function_call / custom_tool_call and their outputs; reasoning items,
skipped), `instructions`, tools, tool_choice, `reasoning`, `text.format`; `previous_response_id` and
`conversation` (server-side state) are refused with a 400 naming them.

Tools (docs/agents.md has the whole field table): `function` as it is; a `namespace` is flattened into its
members, named `<namespace>.<name>` inside and given back as a call with `namespace` and `name`; a `custom`
(freeform) tool is served as a function of one string, `input` (its grammar, when it has one, shown to the
model in that parameter's description, not enforced), and its call given back as a `custom_tool_call`; hosted
tools that run on OpenAI's side (web_search, file_search, code_interpreter, image_generation, ...) are left out
and named in the X-Strata-Dropped-Tools header, never a 400. `ToolMap` is what the renderer needs to give each
call back in its own shape."""
from __future__ import annotations

import json
from dataclasses import dataclass, field as dc_field
from typing import Any

from ...generation import images as image_input
from ...generation.options import check_int, check_number
from ...generation.request import EFFORT_LEVELS, GenerationRequest, field, model_name, ollama_options
from ...generation.tools import call_message, check_tool_results, function_tool, parse_tool_choice, tool_names
from ...http.errors import ApiError
from ..openai.parse import parse_response_format

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# tools OpenAI runs on its own side: nothing here can run them, so they are left out (named in a header)
HOSTED_TOOLS = ("web_search", "web_search_preview", "file_search", "code_interpreter", "image_generation",
                "computer_use_preview", "computer", "mcp", "local_shell", "shell", "apply_patch", "tool_search")
CUSTOM_INPUT = "input"              # the one string parameter a custom tool is served with


@dataclass(frozen=True)
class WireTool:
    """How one internal function is named on the wire: its namespace, its own name, and whether it is a
    `custom` tool (called with a string `input`) or a `function` (called with JSON `arguments`)."""
    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass(frozen=True)
class WireChoices:
    """What the response object echoes back that the internal request does not carry."""
    instructions: str | None = None
    tools: tuple = ()
    tool_choice: object = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    effort: str | None = None
    summary: str | None = None
    text_format: dict | None = None
    verbosity: str | None = None
    metadata: dict | None = None
    tool_map: dict = dc_field(default_factory=dict)     # internal function name -> WireTool (namespaced, custom)

    def wire_tool(self, internal: str) -> WireTool:
        return self.tool_map.get(internal) or WireTool(internal)


def _bad(message: str, param: str = "input") -> ApiError:
    return ApiError(400, message, param=param)


def _content(content, where: str, images: list | None = None) -> str:
    """A content's text; `input_image` parts (data: URLs) go to `images` where the caller takes them."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}.content must be a string or an array of content parts")
    parts = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(p.get("text"), str):
            parts.append(p["text"])
        elif kind == "refusal" and isinstance(p.get("refusal"), str):      # an assistant turn that refused
            parts.append(p["refusal"])
        elif kind == "input_image" and images is not None:
            if p.get("file_id") and not p.get("image_url"):
                raise _bad(f"{where}.content[{j}]: file_id images are not supported (no file storage here); "
                           "send image_url as a data: URL")
            images.append(image_input.from_url(p.get("image_url"), f"{where}.content[{j}].image_url", "input"))
        elif kind in ("input_image", "input_file", "input_audio"):
            raise _bad(f"{where}.content[{j}]: {kind} is not supported here")
        else:
            raise _bad(f"{where}.content[{j}]: unknown content part {kind!r}")
    return "".join(parts)


def _output_text(output, where: str, images: list) -> str:
    """A tool call's output: a string, or content parts (text; images go to `images`)."""
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return _content(output, f"{where}.output", images)
    return json.dumps(output)


def _joined(namespace, name: str) -> str:
    """The internal name of a namespace's member (as Ollama's Responses layer names it)."""
    return f"{namespace}.{name}" if isinstance(namespace, str) and namespace else name


def _add_call(out: list[dict], name: str, args: dict, cid: str) -> None:
    if not out or out[-1]["role"] != "assistant":        # calls join the assistant turn before them
        out.append({"role": "assistant", "content": ""})
    out[-1].setdefault("tool_calls", []).append(call_message(name, args, cid))


def _call_id(item: dict, where: str) -> str:
    cid = item.get("call_id")
    if not isinstance(cid, str) or not cid:
        raise _bad(f"{where}.call_id is required")
    return cid


def _call_name(item: dict, where: str) -> str:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"{where}.name is required")
    return _joined(item.get("namespace"), name)


# items a client sends back from earlier turns that carry nothing a model here can read: a hosted tool's call
# (it never ran here), an encrypted compaction of earlier turns, a previous turn's reasoning (templates drop
# it from history anyway)
SKIPPED_ITEMS = ("reasoning", "web_search_call", "file_search_call", "code_interpreter_call",
                 "image_generation_call", "computer_call", "computer_call_output", "mcp_list_tools",
                 "mcp_approval_request", "mcp_approval_response", "mcp_call", "tool_search_call",
                 "tool_search_output", "compaction", "compaction_summary")


def parse_input(raw) -> list[dict]:
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise _bad("'input' must be a string or a non-empty array of items")
    out: list[dict] = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            raw_role = item.get("role")
            role = ROLES.get(raw_role) if isinstance(raw_role, str) else None
            if role is None:
                raise _bad(f"{where}.role must be one of user, assistant, system, developer")
            imgs: list[bytes] = []
            msg: dict[str, Any] = {"role": role, "content": _content(item.get("content"), where, imgs)}
            if imgs:
                msg["images"] = imgs
            out.append(msg)
        elif kind == "function_call":
            name, cid, args = _call_name(item, where), _call_id(item, where), item.get("arguments", "{}")
            try:
                args = json.loads(args) if isinstance(args, str) and args.strip() else (args or {})
            except ValueError:
                raise _bad(f"{where}.arguments must be a JSON object (a string that is not JSON)") from None
            if not isinstance(args, dict):
                raise _bad(f"{where}.arguments must be a JSON object")
            _add_call(out, name, args, cid)
        elif kind == "custom_tool_call":
            name, cid, text = _call_name(item, where), _call_id(item, where), item.get("input", "")
            if not isinstance(text, str):
                raise _bad(f"{where}.input must be a string")
            _add_call(out, name, {CUSTOM_INPUT: text}, cid)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            imgs = []
            text = _output_text(item.get("output", ""), where, imgs)
            if item.get("call_id") is None and isinstance(item.get("name"), str):
                # an output the client adds that answers no call (Codex's agent.goal_objective: context for the
                # model): a tool result must follow its call in every template, so it is a user message
                msg = {"role": "user", "content": f"[{_call_name(item, where)}]\n{text}"}
            else:
                msg = {"role": "tool", "content": text, "tool_call_id": _call_id(item, where)}
            if imgs:
                msg["images"] = imgs
            out.append(msg)
        elif kind in SKIPPED_ITEMS:
            continue
        elif kind == "item_reference":
            raise _bad(f"{where}: item references need stored responses; this server is stateless")
        else:
            raise _bad(f"{where}.type {kind!r} is not supported")
    check_tool_results(out, "input")
    return out


def _hosted(kind) -> bool:
    """A tool OpenAI runs itself, by its type (dated versions too: web_search_2025_08_26)."""
    return isinstance(kind, str) and any(kind == h or kind.startswith(h + "_20") for h in HOSTED_TOOLS)


def _custom_tool(t: dict, where: str) -> dict:
    """A custom (freeform) tool as a function of one string. Its grammar is described to the model, not
    enforced: llama.cpp's grammars are GBNF, and a Lark or regex definition is not translated."""
    fmt = t.get("format")
    describe = "The tool's input, as plain text."
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        describe = (f"The tool's input: text that follows this {fmt.get('syntax') or ''} grammar "
                    f"exactly:\n{fmt.get('definition') or ''}")
    elif fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise _bad(f"{where}.format must be {{\"type\": \"text\"}} or {{\"type\": \"grammar\", \"syntax\", "
                   "\"definition\"}", "tools")
    return {"name": t.get("name"), "description": t.get("description"),
            "parameters": {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string", "description": describe}},
                           "required": [CUSTOM_INPUT], "additionalProperties": False}}


def parse_tool_list(raw) -> tuple[list[dict] | None, dict[str, WireTool], list[str]]:
    """The Responses `tools` -> (function tools in the internal shape, how each namespaced or custom one is named
    on the wire, the hosted tools left out)."""
    if raw is None:
        return None, {}, []
    if not isinstance(raw, list):
        raise _bad("'tools' must be an array of tools", "tools")
    flat: list[dict] = []
    tool_map: dict[str, WireTool] = {}
    dropped: list[str] = []

    def add(t, where: str, namespace: str | None) -> None:
        if not isinstance(t, dict):
            raise _bad(f"{where} must be an object", "tools")
        kind = t.get("type", "function")
        if kind == "namespace" and namespace is None:
            ns = t.get("name")
            if not isinstance(ns, str) or not ns:
                raise _bad(f"{where}.name is required", "tools")
            members = t.get("tools")
            if not isinstance(members, list):
                raise _bad(f"{where}.tools must be an array of function or custom tools", "tools")
            for j, member in enumerate(members):
                add(member, f"{where}.tools[{j}]", ns)
            return
        if _hosted(kind) and namespace is None:
            if kind not in dropped:
                dropped.append(kind)
            return
        if kind == "custom":
            fn = _custom_tool(t, where)
        elif kind == "function":
            fn = t["function"] if isinstance(t.get("function"), dict) else t
        else:
            raise _bad(f"{where}.type {kind!r} is not supported (function, custom, namespace, or a hosted tool, "
                       "which is left out)", "tools")
        tool = function_tool(fn.get("name"), fn.get("description"), fn.get("parameters"), where, "tools")
        name = tool["function"]["name"]
        internal = _joined(namespace, name)
        if internal in tool_names(flat):
            raise _bad(f"{where}: two tools are named {internal!r}", "tools")
        tool["function"]["name"] = internal
        if namespace is not None or kind == "custom":
            tool_map[internal] = WireTool(name, namespace, kind == "custom")
        flat.append(tool)

    for i, t in enumerate(raw):
        add(t, f"tools[{i}]", None)
    return flat or None, tool_map, dropped


def parse_choice(raw, tools: list[dict] | None) -> tuple[str | None, list[dict] | None]:
    """The Responses `tool_choice` -> (internal tool_choice, the tools it leaves offered). A named function or
    custom tool (with its namespace) picks it; `allowed_tools` narrows the tools to its list; a hosted tool's
    type (left out here) leaves the choice to the model."""
    if raw is None or (raw == "auto" and not tools):
        return None, tools
    if isinstance(raw, dict):
        kind = raw.get("type")
        if kind in ("function", "custom"):
            name = raw.get("name")
            if not isinstance(name, str) or not name:
                raise _bad(f"tool_choice.name is required for type {kind!r}", "tool_choice")
            internal = _joined(raw.get("namespace"), name)
            return parse_tool_choice({"type": "function", "name": internal}, tools), tools
        if kind == "allowed_tools":
            mode, listed = raw.get("mode", "auto"), raw.get("tools")
            if mode not in ("auto", "required") or not isinstance(listed, list):
                raise _bad("tool_choice.allowed_tools needs 'mode' (auto or required) and a 'tools' array",
                           "tool_choice")
            keep = {_joined(x.get("namespace"), x["name"]) for x in listed
                    if isinstance(x, dict) and isinstance(x.get("name"), str)}
            narrowed = [t for t in tools or () if t["function"]["name"] in keep] or None
            return (None if mode == "auto" and not narrowed else parse_tool_choice(mode, narrowed)), narrowed
        if _hosted(kind):
            return None, tools
    return parse_tool_choice(raw, tools), tools


def parse_reasoning(raw) -> tuple[bool | str | None, str | None, str | None, str | None]:
    """-> (think value for the internal request, the effort to echo, the summary to echo, the thinking budget's
    level: EFFORT_LEVELS). `summary` (auto, concise, detailed) asks for a summary of the reasoning: the reasoning
    item carries the model's own text."""
    if raw is None:
        return None, None, None, None
    if not isinstance(raw, dict):
        raise _bad("'reasoning' must be an object", "reasoning")
    effort = raw.get("effort")
    summary = raw.get("summary", raw.get("generate_summary"))
    if summary is not None and summary not in ("auto", "concise", "detailed"):
        raise _bad(f"'reasoning.summary' must be one of auto, concise, detailed, got {summary!r}", "reasoning")
    if effort is None:
        return True, None, summary, None
    if effort not in EFFORTS:
        raise _bad(f"'reasoning.effort' must be one of {', '.join(EFFORTS)}, got {effort!r}", "reasoning.effort")
    think, level = EFFORT_LEVELS[effort]
    return think, effort, summary, level


def parse_text_format(raw) -> tuple[bool, dict | None, dict | None]:
    if raw is None:
        return False, None, None
    fmt = raw.get("format") if isinstance(raw, dict) else None
    if fmt is None:
        return False, None, None
    if not isinstance(fmt, dict):
        raise _bad("'text.format' must be an object", "text")
    if fmt.get("type") == "json_schema":       # flat here: {"type", "name", "schema", "strict"}
        rf = {"type": "json_schema", "json_schema": {"schema": fmt.get("schema") or {"type": "object"}}}
    else:
        rf = fmt
    try:
        json_mode, schema = parse_response_format(rf)
    except ApiError as e:
        raise _bad(e.message.replace("response_format", "text.format"), "text") from None
    return json_mode, schema, fmt


def _verbosity(text) -> str | None:
    v = text.get("verbosity") if isinstance(text, dict) else None
    if v is not None and v not in ("low", "medium", "high"):
        raise _bad(f"'text.verbosity' must be one of low, medium, high, got {v!r}", "text")
    return v


def parse_responses(body: dict) -> tuple[GenerationRequest, WireChoices]:
    """Fields read: model, input, instructions, tools, tool_choice, parallel_tool_calls, reasoning, text
    (format; verbosity echoed), stream, max_output_tokens, temperature, top_p, metadata (echoed).
    Accepted and ignored, as they change nothing a local server does: store (nothing is stored: the response
    says `store: false`), include (reasoning.encrypted_content:
    there is nothing encrypted to give), prompt_cache_key (the prompt cache matches prefixes by itself),
    client_metadata, user, safety_identifier, service_tier, truncation, stream_options, max_tool_calls,
    top_logprobs."""
    if body.get("previous_response_id") is not None or body.get("conversation") is not None:
        key = "previous_response_id" if body.get("previous_response_id") is not None else "conversation"
        raise _bad(f"'{key}' needs stored responses; this server is stateless: send the whole conversation in "
                   "'input'", key)
    if body.get("background") is True:
        raise _bad("'background' needs stored responses; this server is stateless: stream instead", "background")
    if body.get("prompt") is not None:
        raise _bad("'prompt' (a stored prompt template) needs stored prompts; send 'instructions' and 'input'",
                   "prompt")
    req = GenerationRequest(model=model_name(body), messages=parse_input(body.get("input")))
    instructions = field(body, "instructions", str)
    if instructions:
        req.messages = [{"role": "system", "content": instructions}] + (req.messages or [])
    req.tools, tool_map, req.dropped_tools = parse_tool_list(body.get("tools"))
    req.tool_choice, req.tools = parse_choice(body.get("tool_choice"), req.tools)
    req.parallel_tool_calls = field(body, "parallel_tool_calls", bool, True)
    req.think, effort, summary, req.think_effort = parse_reasoning(body.get("reasoning"))
    req.think_mode = "prefer"                      # a model that cannot think ignores `reasoning`
    req.json_mode, req.json_schema, text_format = parse_text_format(body.get("text"))
    req.stream = field(body, "stream", bool, False)
    opts: dict = {}
    if body.get("max_output_tokens") is not None:
        opts["num_predict"] = check_int("max_output_tokens", body["max_output_tokens"], 1)
    if body.get("temperature") is not None:
        opts["temperature"] = check_number("temperature", body["temperature"], 0, 2)
    if body.get("top_p") is not None:
        opts["top_p"] = check_number("top_p", body["top_p"], 0, 1)
    req.options = {**ollama_options(body), **opts}
    wire = WireChoices(instructions=instructions, tools=tuple(body.get("tools") or ()),
                       tool_choice=body.get("tool_choice", "auto"), parallel_tool_calls=req.parallel_tool_calls,
                       temperature=opts.get("temperature"), top_p=opts.get("top_p"),
                       max_output_tokens=opts.get("num_predict"), effort=effort, summary=summary,
                       text_format=text_format, verbosity=_verbosity(body.get("text")),
                       metadata=field(body, "metadata", dict),
                       tool_map=tool_map)
    return req, wire
