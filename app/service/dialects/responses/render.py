"""The internal result -> OpenAI's Responses wire format: a `response` object whose `output` holds reasoning,
message, function_call and custom_tool_call items, or the event stream response.created ... response.completed
(response.incomplete when max_output_tokens cut the reply; each event carries its `type` and a
`sequence_number`). A call to a namespace's member names its `namespace`; a call to a custom tool is a
`custom_tool_call` whose `input` is the string the model wrote."""
from __future__ import annotations

import json
import time
import uuid

from ...generation.result import GenerationResult, TextDelta, ThinkingDelta, ToolCallArguments, ToolCallEvent, ToolCallStart
from ...generation.toolcalls.jsonscan import string_so_far
from ...http.bodies import SSEEvent, SSEWriter
from ...http.errors import ApiError
from ..base import Renderer
from .parse import CUSTOM_INPUT, WireChoices, WireTool


def error_body(err: ApiError) -> dict:
    """The HTTP body of an error: the Responses API answers with OpenAI's error object (a prompt too long in
    OpenAI's words); a stream that began fails with its own events instead (ResponsesRenderer.error)."""
    return {"error": {"message": err.openai_message(), "type": err.type, "param": err.param, "code": err.code}}


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def usage(result: GenerationResult) -> dict:
    d = result.finished
    i, o = (d.prompt_tokens, d.completion_tokens) if d else (0, 0)
    cached = d.cached_tokens if d else 0                # of input_tokens, found in the prompt cache (as OpenAI)
    return {"input_tokens": i, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": o,
            "output_tokens_details": {"reasoning_tokens": result.thinking_tokens}, "total_tokens": i + o}


def message_item(item_id: str, text: str, status: str = "completed") -> dict:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status == "completed" \
        else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def reasoning_item(item_id: str, text: str | None) -> dict:
    return {"type": "reasoning", "id": item_id, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}] if text is not None else []}


def custom_input(arguments) -> str:
    """A custom tool's input from the call the model made: the string it gave (as `input`, or as the one
    argument it wrote under another name), else its arguments as JSON text."""
    if isinstance(arguments, dict):
        if isinstance(arguments.get(CUSTOM_INPUT), str):
            return arguments[CUSTOM_INPUT]
        strings = [v for v in arguments.values() if isinstance(v, str)]
        if len(arguments) == 1 and strings:
            return strings[0]
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


_INPUT_HEAD = json.dumps({CUSTOM_INPUT: ""})[:-2]     # `{"input": "`: how a custom call's arguments begin


def call_payload(ev: ToolCallEvent, tool: WireTool) -> str:
    """What the call item carries: a custom tool's input text, a function's arguments as a JSON string."""
    return custom_input(ev.arguments) if tool.custom else json.dumps(ev.arguments, ensure_ascii=False)


def call_item(item_id: str, ev: ToolCallEvent | ToolCallStart, tool: WireTool | None = None,
              status: str = "completed", payload: str | None = None) -> dict:
    """A call's output item; `payload`: its arguments (or custom input) as the stream gave them, else from the
    call (a completed one) or empty."""
    tool = tool or WireTool(ev.name)
    if payload is None:
        payload = call_payload(ev, tool) if isinstance(ev, ToolCallEvent) and status == "completed" else ""
    item = {"type": "custom_tool_call" if tool.custom else "function_call", "id": item_id, "call_id": ev.id,
            "name": tool.name, ("input" if tool.custom else "arguments"): payload, "status": status}
    if tool.namespace:
        item["namespace"] = tool.namespace
    return item


class ResponsesRenderer(Renderer):
    writer = SSEWriter
    call_pieces = True

    def __init__(self, model: str, wire: WireChoices, *, show_thinking: bool = True):
        self.model, self.wire = model, wire
        self.show_thinking = show_thinking
        self.id = _id("resp")
        self.created = int(time.time())
        self.seq = 0
        self.output: list[dict] = []       # finished items (streaming)
        self.open: dict | None = None      # {"kind", "id", "text"} of the item being streamed
        self.call: dict | None = None      # {"start", "id", "tool", "text"} of the call being streamed

    def _response(self, status: str, output: list[dict], result: GenerationResult | None = None) -> dict:
        w = self.wire
        incomplete = None
        if result is not None and result.finished is not None and result.finished.reason == "length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status, "error": None,
            "incomplete_details": incomplete, "instructions": w.instructions, "max_output_tokens": w.max_output_tokens,
            "model": self.model, "output": output, "parallel_tool_calls": w.parallel_tool_calls,
            "previous_response_id": None, "reasoning": {"effort": w.effort, "summary": w.summary}, "store": False,
            "temperature": w.temperature,
            "text": {"format": w.text_format or {"type": "text"}, **({"verbosity": w.verbosity} if w.verbosity else {})},
            "tool_choice": w.tool_choice, "tools": list(w.tools), "top_p": w.top_p, "truncation": "disabled",
            "usage": usage(result) if result is not None else None, "metadata": w.metadata or {},
        }

    # ---- streamed -------------------------------------------------------------------------------------------
    def _ev(self, kind: str, **data) -> SSEEvent:
        ev = SSEEvent(kind, {"type": kind, "sequence_number": self.seq, **data})
        self.seq += 1
        return ev

    def opening(self):
        return [self._ev("response.created", response=self._response("in_progress", [])),
                self._ev("response.in_progress", response=self._response("in_progress", []))]

    def keepalive(self):
        """While the prompt is read (minutes for an agent's first on a CPU): response.in_progress again, an event
        Codex and the openai client accept, so their idle limits do not end the stream."""
        return [self._ev("response.in_progress", response=self._response("in_progress", list(self.output)))]

    def _close_open(self) -> list:
        o, self.open = self.open, None
        if o is None:
            return []
        idx = len(self.output)
        if o["kind"] == "message":
            item = message_item(o["id"], o["text"])
            part = item["content"][0]
            out = [self._ev("response.output_text.done", item_id=o["id"], output_index=idx, content_index=0,
                            text=o["text"], logprobs=[]),
                   self._ev("response.content_part.done", item_id=o["id"], output_index=idx, content_index=0,
                            part=part)]
        else:
            item = reasoning_item(o["id"], o["text"])
            out = [self._ev("response.reasoning_text.done", item_id=o["id"], output_index=idx, content_index=0,
                            text=o["text"])]
        self.output.append(item)
        return out + [self._ev("response.output_item.done", output_index=idx, item=item)]

    def _open(self, kind: str) -> list:
        if self.open is not None and self.open["kind"] == kind:
            return []
        out = self._close_open()
        item_id = _id("msg" if kind == "message" else "rs")
        self.open = {"kind": kind, "id": item_id, "text": ""}
        idx = len(self.output)
        if kind == "message":
            out.append(self._ev("response.output_item.added", output_index=idx,
                                item=message_item(item_id, "", "in_progress")))
            out.append(self._ev("response.content_part.added", item_id=item_id, output_index=idx, content_index=0,
                                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []}))
        else:
            out.append(self._ev("response.output_item.added", output_index=idx, item=reasoning_item(item_id, None)))
        return out

    def delta(self, ev: TextDelta):
        if not ev.text:
            return []
        out = self._open("message")
        item = self.open
        assert item is not None                      # _open just opened it
        item["text"] += ev.text
        out.append(self._ev("response.output_text.delta", item_id=item["id"], output_index=len(self.output),
                            content_index=0, delta=ev.text, logprobs=[]))
        return out

    def thinking(self, ev: ThinkingDelta):
        if not ev.text or not self.show_thinking:
            return []
        out = self._open("reasoning")
        item = self.open
        assert item is not None                      # _open just opened it
        item["text"] += ev.text
        out.append(self._ev("response.reasoning_text.delta", item_id=item["id"], output_index=len(self.output),
                            content_index=0, delta=ev.text))
        return out

    def tool_call_start(self, ev: ToolCallStart):
        """The call's item is added (in_progress, arguments ""); a function's arguments follow as
        `function_call_arguments.delta` pieces, and `.done` carries them whole. A custom tool's input (the string
        its function's one argument holds) follows as `custom_tool_call_input.delta` pieces, `.done` whole."""
        out = self._close_open()
        tool = self.wire.wire_tool(ev.name)
        item_id = _id("ctc" if tool.custom else "fc")
        self.call = {"start": ev, "id": item_id, "tool": tool, "text": "", "sent": ""}
        out.append(self._ev("response.output_item.added", output_index=len(self.output),
                            item=call_item(item_id, ev, tool, "in_progress")))
        return out

    def tool_call_arguments(self, ev: ToolCallArguments):
        call = self.call
        if call is None:
            return []
        call["text"] += ev.text
        if call["tool"].custom:
            return self._custom_delta(call)
        return [self._ev("response.function_call_arguments.delta", item_id=call["id"], output_index=len(self.output),
                         delta=ev.text)]

    def _custom_delta(self, call: dict) -> list:
        """A custom tool's input as it is written: the `input` string of arguments that begin `{"input": "`
        (what its function's grammar writes), decoded; other arguments wait for the call's end."""
        text = call["text"]
        if not text.startswith(_INPUT_HEAD):
            return []
        decoded, _ = string_so_far(text[len(_INPUT_HEAD):])
        new = decoded[len(call["sent"]):]
        if not new:
            return []
        call["sent"] = decoded
        return [self._ev("response.custom_tool_call_input.delta", item_id=call["id"], output_index=len(self.output),
                         delta=new)]

    def tool_call(self, ev: ToolCallEvent):
        out = [] if self.call is not None else list(self.tool_call_start(ToolCallStart(ev.index, ev.id, ev.name)))
        call, self.call = self.call, None
        assert call is not None
        tool, item_id, idx = call["tool"], call["id"], len(self.output)
        if tool.custom:
            payload = custom_input(ev.arguments)
            sent = call["sent"]
            rest = payload[len(sent):] if payload.startswith(sent) else ""
            if rest or not sent:
                out.append(self._ev("response.custom_tool_call_input.delta", item_id=item_id, output_index=idx,
                                    delta=rest))
            out.append(self._ev("response.custom_tool_call_input.done", item_id=item_id, output_index=idx,
                                input=payload))
        else:
            payload = call["text"] or json.dumps(ev.arguments, ensure_ascii=False)
            if not call["text"]:
                out.append(self._ev("response.function_call_arguments.delta", item_id=item_id, output_index=idx,
                                    delta=payload))
            out.append(self._ev("response.function_call_arguments.done", item_id=item_id, output_index=idx,
                                arguments=payload, name=tool.name))
        item = call_item(item_id, ev, tool, payload=payload)
        out.append(self._ev("response.output_item.done", output_index=idx, item=item))
        self.output.append(item)
        return out

    def closing(self, result: GenerationResult):
        out = self._close_open()
        if not self.output:             # a reply of nothing is an empty message, as complete() gives it
            out += self._open("message") + self._close_open()
        response = self._response("completed", self.output, result)
        # a reply cut by max_output_tokens ends with its own event, as OpenAI's does
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        trailer = {"strata": dict(self.trailer)} if self.trailer else {}    # what the headers could not carry
        return out + [self._ev(kind, response=response, **trailer)]

    def error(self, err: ApiError):
        """A failure after the stream began: the `error` event, then `response.failed` (the response, its items so
        far and its `error`), which ends a Responses stream as OpenAI's does: Codex and the openai client read the
        end of the turn from it."""
        code = err.code or err.type
        out = self._close_open()
        call, self.call = self.call, None
        if call is not None:                # a call cut off by the failure: shown as it stood, incomplete
            self.output.append(call_item(call["id"], call["start"], call["tool"], "incomplete", call["text"]))
        response = self._response("failed", list(self.output))
        response["error"] = {"code": code, "message": err.message}
        return out + [self._ev("error", code=code, message=err.message, param=err.param),
                      self._ev("response.failed", response=response)]

    # ---- whole ----------------------------------------------------------------------------------------------
    def complete(self, result: GenerationResult) -> dict:
        output = []
        if result.thinking and self.show_thinking:
            output.append(reasoning_item(_id("rs"), result.thinking))
        if result.text or not result.tool_calls:
            output.append(message_item(_id("msg"), result.text))
        for c in result.tool_calls:
            tool = self.wire.wire_tool(c.name)
            output.append(call_item(_id("ctc" if tool.custom else "fc"), c, tool))
        return self._response("completed", output, result)
