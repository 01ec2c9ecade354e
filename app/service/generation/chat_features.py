"""Tools, thinking and fill-in-the-middle for one generation, whichever dialect asked.

- plan(): the one decision of whether tools are in use (tool_choice auto / required / named / none, parallel
  calls, a format beside them) and which grammar shapes the calls: an engine/chat/plan.ChatPlan over the model's
  family (from the GGUF, engine/gguf/chat_facts), sent to the runner, which applies it.
- settle_thinking(): thinking asked as a preference (OpenAI, Responses, Anthropic) on a model that cannot think
  is dropped, as llama-server does; asked as a requirement (Ollama's `think`) it stays for check() to refuse.
- check(): a request that needs what the model cannot do is a 400 naming the capability and the field, as
  Ollama answers ("... does not support tools").
- runner_fields(): what the runner needs: the plan, the tools for the template (or, for a template that knows
  none and a forced call, a system message describing them), thinking switches.
- ReplyReader: the model's text -> TextDelta / ThinkingDelta / ToolCallEvent, through the parser the plan names
  (generation/toolcalls), so markup never reaches content. See docs/architecture.md, "Tool calls".
"""
from __future__ import annotations

import asyncio
import json

from app.engine.chat.formats import GENERIC, format_for
from app.engine.chat.plan import ChatPlan, plan_chat
from app.engine.gguf.chat_facts import ChatFacts, cached_chat_facts, read_chat_facts

from ..http.errors import ApiError
from .call_repeats import CallWatch
from .request import GenerationRequest
from .result import TextDelta, ThinkingDelta, ToolCallArguments, ToolCallEvent, ToolCallStart
from .toolcalls import Args, Delta, Done, Open, ToolCall, make_parser
from .tools import new_call_id, tool_names

EFFORTS = ("low", "medium", "high")


async def facts_for(path) -> ChatFacts | None:
    """The model's chat facts (reading the vocabulary takes a moment the first time: off the event loop)."""
    try:
        facts = cached_chat_facts(str(path))      # read before: no thread hop
        if facts is not None:
            return facts
        return await asyncio.get_running_loop().run_in_executor(None, read_chat_facts, str(path))
    except Exception:  # noqa: BLE001 - an unreadable file fails later with its own clear error
        return None


def plan(req: GenerationRequest, facts: ChatFacts | None, raw: bool) -> ChatPlan:
    """The request's chat plan (`raw`: the prompt goes to the model as it is, no template)."""
    return plan_chat(facts.family if facts else GENERIC.name, req.tools, req.tool_choice, req.parallel_tool_calls,
                     has_format=req.json_mode or req.json_schema is not None, raw=raw)


def settle_thinking(req: GenerationRequest, facts: ChatFacts | None) -> None:
    """A thinking request the model cannot honour, asked as a preference (`think_mode` "prefer": the OpenAI,
    Responses and Anthropic dialects), is dropped here, once for every dialect: the reply is the model's plain
    answer, as llama-server serves it. Asked as a requirement (Ollama's `think`), check() refuses it."""
    caps = facts.capabilities if facts else ("completion",)
    if req.think_mode == "prefer" and req.think and "thinking" not in caps:
        req.think, req.think_budget, req.think_effort = None, None, None


def settle_budget(req: GenerationRequest, ro) -> None:
    """The thinking budget, most specific first: the request's own (Anthropic's budget_tokens, a `think_budget`
    option), else its effort level (`think_effort`, made a budget by the runner from the reply's room), else the
    Modelfile's PARAMETER think_budget. Thinking turned off needs none."""
    asked = (req.options or {}).get("think_budget") is not None
    if req.think is False:
        req.think_budget, req.think_effort = None, None
    elif req.think_budget is None and (asked or req.think_effort is None):
        req.think_budget = ro.think_budget


def check(req: GenerationRequest, facts: ChatFacts | None, plan: ChatPlan, model: str) -> None:
    caps = facts.capabilities if facts else ("completion",)
    if "completion" not in caps:
        raise ApiError(400, f"model {model!r} does not support completion (it is an embedding model: use "
                            "/api/embed or /v1/embeddings)", param="model")
    if plan.tools and "tools" not in caps and not plan.forced:
        raise ApiError(400, f"model {model!r} does not support tools (its chat template has no tool calling); "
                            "tool_choice 'required' or a named function still works through a grammar",
                       param="tools")
    if req.think and "thinking" not in caps:
        raise ApiError(400, f"model {model!r} does not support thinking", param="think")
    if isinstance(req.think, str) and req.think not in EFFORTS:
        raise ApiError(400, f"'think' must be true, false, or one of {', '.join(EFFORTS)}, got {req.think!r}",
                       param="think")
    if req.suffix is not None and "insert" not in caps:
        raise ApiError(400, f"model {model!r} does not support insert (suffix / fill-in-the-middle: it has no "
                            "FIM tokens)", param="suffix")


def template_kwargs(think, facts: ChatFacts | None) -> dict:
    """`think` as the template variables thinking templates read (Qwen3's enable_thinking, gpt-oss's
    reasoning_effort, and the switch the model's own template names, ChatFacts.think_toggle: Mistral's
    `thinking`)."""
    if think is None:
        return {}
    effort = format_for(facts.family).thinking.effort if facts is not None else None
    switch = facts.think_toggle if facts is not None and facts.think_toggle != effort else None
    on = think if isinstance(think, bool) else True
    own = {switch: on} if switch else {}
    if isinstance(think, str):
        return {"enable_thinking": True, "reasoning_effort": think} | own
    if effort:                                   # a family that always thinks (gpt-oss) cannot turn it off
        return {} if think else {effort: "low"}  # least effort
    return {"enable_thinking": bool(think)} | own


def tool_prompt(tools: list[dict]) -> str:
    lines = [json.dumps(t["function"], ensure_ascii=False) for t in tools]
    return ("You can call these functions:\n" + "\n".join(lines) + "\nTo call one, answer with only a JSON object: "
            '{"name": <function name>, "arguments": <its arguments as an object>}.')


def with_tool_prompt(messages: list[dict], tools: list[dict]) -> list[dict]:
    """For a template that cannot show tools: describe them in the system message."""
    text = tool_prompt(tools)
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def runner_fields(req: GenerationRequest, facts: ChatFacts | None, plan: ChatPlan,
                  messages: list[dict] | None) -> dict:
    """The GenerateRequest fields for tools, thinking and insert, and the messages the template gets."""
    out: dict = {"template_kwargs": template_kwargs(req.think, facts), "suffix": req.suffix,
                 "think_budget": req.think_budget if req.think is not False else None,
                 "think_effort": req.think_effort if req.think is not False else None, "plan": plan}
    prepare = plan.format.prepare_messages      # what the family's templates need of the messages (Mistral's ids)
    if messages is not None and prepare is not None:
        messages = prepare(messages)
    if plan.tools:
        renders = facts is not None and facts.renders_tools
        out["tools"], out["render_tools"] = req.tools, renders
        if not renders and messages is not None and req.tools:
            messages = with_tool_prompt(messages, req.tools)
    out["messages"] = messages
    return out


class ReplyReader:
    """Turns the runner's text into the service's events through the model family's reply parser. `pieces`: a
    call is given as ToolCallStart, ToolCallArguments..., ToolCallEvent (every call: one the parser streamed as it
    was written, or one it read whole, whose arguments then come in one piece); else only the ToolCallEvent."""

    def __init__(self, req: GenerationRequest, plan: ChatPlan, pieces: bool = False, watch: bool = False):
        names = tool_names(req.tools) if plan.tools else ()
        self.parser = make_parser(plan.parser, names, stream_calls=pieces)
        self.pieces = pieces
        # `watch`: a reply whose calls are not given in pieces is still seen call by call, so that it can end at a
        # call it repeats (call_repeats.py); `repeated` is set there, and the text after that call is not read
        self.watch = CallWatch(plan.parser, names) if watch and not pieces and names else None
        self.repeated = False
        self.drop_thinking = req.think is False
        # parallel_tool_calls false: at most one call, also where no grammar shapes the calls (harmony, XML...)
        self.max_calls = None if req.parallel_tool_calls else 1
        self.n_calls = 0
        self.open: tuple[int, str, str] | None = None     # the call being streamed: index, id, name
        self.skipping = False                              # ... past max_calls: its parts are dropped
        self.pending_lp: tuple = ()

    def feed(self, ev: TextDelta) -> list:
        self.pending_lp += tuple(ev.logprobs)
        text = ev.text
        if self.watch is not None:
            if self.repeated:
                return []
            cut = self.watch.feed(text)
            if cut is not None:
                text, self.repeated = text[:cut], True
        return self._events(self.parser.feed(text), ev.n_tokens)

    def finish(self) -> list:
        out = self._events(self.parser.finish())
        if self.pending_lp:                      # logprobs of tokens that showed no content (markup, thinking)
            out.append(TextDelta("", self.pending_lp))
            self.pending_lp = ()
        return out

    def _full(self) -> bool:
        return self.max_calls is not None and self.n_calls >= self.max_calls

    @property
    def calls_done(self) -> bool:
        """The reply has made every call it may (parallel_tool_calls false: one), so whatever the model writes next
        is dropped, and it can be stopped (where a grammar shapes the calls it ends there by itself)."""
        return self._full() and self.open is None

    def _events(self, d: Delta, n_tokens: int = 0) -> list:
        out: list = []
        for item in d.items:
            if isinstance(item, tuple):
                kind, text = item
                if kind == "thinking":
                    if not self.drop_thinking:
                        out.append(ThinkingDelta(text, n_tokens))
                        n_tokens = 0             # the piece's tokens are counted once
                else:
                    out.append(TextDelta(text, self.pending_lp))
                    self.pending_lp = ()
            elif isinstance(item, ToolCall):
                if self._full():
                    continue
                index, cid = self.n_calls, new_call_id()
                if self.pieces:
                    out += [ToolCallStart(index, cid, item.name),
                            ToolCallArguments(index, json.dumps(item.arguments, ensure_ascii=False))]
                out.append(ToolCallEvent(index, cid, item.name, item.arguments))
                self.n_calls += 1
            elif isinstance(item, Open):
                self.skipping = self._full()
                if not self.skipping:
                    self.open = (self.n_calls, new_call_id(), item.name)
                    out.append(ToolCallStart(*self.open))
            elif isinstance(item, Args):
                if not self.skipping and self.open is not None:
                    out.append(ToolCallArguments(self.open[0], item.text))
            elif isinstance(item, Done):
                if not self.skipping and self.open is not None:
                    index, cid, name = self.open
                    out.append(ToolCallEvent(index, cid, name, item.arguments))
                    self.n_calls += 1
                self.open, self.skipping = None, False
        return out
