"""The chat's reply flow, apart from the window that shows it: send -> count the attached files -> stream the
reply -> answer its tool calls (MCP) -> save; and Stop, Regenerate, Continue, an edited message resent, a reply
abandoned at quit.

The window (`chat_window.py`) keeps the layout, menus, the conversations list and the widgets; it reaches this
object through a few methods, and this one reaches the window through `ChatHost` (the chat shown, the model picked,
the transcript the reply streams into) and two signals: `busy_changed` (the buttons follow) and `dialog_requested`
(a tool call's permission question, opened over the window). Everything that waits runs on the bridge's asyncio
thread; while it does the session is `busy` and `stop()` ends it.
Covered by tests/gui/test_gui_e2e.py, tests/gui/test_gui_mcp.py and the other tests/gui/test_gui_chat_*.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from PySide6.QtCore import QObject, Signal

from app.gui.chat.attachments import fit, images_block, message_with
from app.gui.chat.chat_tools import MAX_ROUNDS, ChatTools, call_arguments
from app.gui.chat.chat_view import Transcript, format_stats
from app.gui.chat.history import AUTO_CTX, ChatHistory, Conversation, Message
from app.gui.chat.mcp_tools import McpTool
from app.gui.chat.reply import PendingReply
from app.gui.common.bridge import Call

TOP_LOGPROBS = 5
CONTINUE_PROMPT = "Continue exactly where your last reply stopped. Do not repeat anything."


def progress_text(p: dict) -> str:
    """llama-server's `prompt_progress` ({total, cache, processed, time_ms}) as the status bar says it: "Reading
    the prompt: 42% of 10,000 tokens, about 12 s left" (the time left at the rate measured on this prompt)."""
    total, cache, done = int(p.get("total") or 0), int(p.get("cache") or 0), int(p.get("processed") or 0)
    seconds = float(p.get("time_ms") or 0) / 1000
    pct = 100 * done // total if total else 0
    text = f"Reading the prompt: {pct}% of {total:,} tokens"
    if done > cache and seconds > 0:
        left = (total - done) * seconds / (done - cache)
        text += f", about {left:.0f} s left" if left >= 1 else ", almost done"
    return text

class ChatHost(Protocol):
    """What the session needs from the window that shows the chat."""
    conversation: Conversation | None     # the chat shown (None: none yet)
    transcript: Transcript                # where replies stream and messages are added

    def selected_model(self) -> str: ...
    def wants_alternatives(self) -> bool: ...          # each token's top alternatives asked for
    def new_chat(self) -> Conversation: ...
    def show_messages(self) -> None: ...               # the transcript redrawn from the chat's branch shown
    def name_chat(self, text: str) -> None: ...        # a chat still untitled takes its title from `text`
    def message_sent(self) -> None: ...                # the composer emptied
    def clear_attachments(self) -> None: ...
    def show_status(self, text: str, ms: int = 0) -> None: ...
    def close_dialog(self) -> None: ...


@dataclass
class ToolRound:
    """One round of tool calls being answered, one call at a time: ask the user -> run -> save its result;
    when none is left the model is asked again."""
    conversation_id: int
    servers: list[str]                 # the MCP servers the chat offers
    calls: list[dict] = field(default_factory=list)     # those not answered yet


class ChatSession(QObject):
    busy_changed = Signal()
    dialog_requested = Signal(object)     # a dialog to open over the window (window-modal, not blocking)

    def __init__(self, host: ChatHost, bridge, history: ChatHistory, parent=None):
        super().__init__(parent)
        self.host = host
        self.bridge = bridge
        self.history = history
        self.call: Call | None = None            # the reply streaming
        self.preparing: Call | None = None       # before a reply: files counted, tools listed, a tool call run
        self.pending: PendingReply | None = None     # the reply streaming now
        self.tools = ChatTools(bridge, self)     # MCP servers' tools (chat_tools.py)
        self.tools.failed.connect(lambda msg: self.show_error(msg))
        self.tool_round: ToolRound | None = None     # the tool calls being answered, while they are
        self.tool_rounds = 0                     # tool rounds since the user's last message
        self.extra_options: dict = {}            # more Ollama options for every request (num_predict, seed...)
        self.pending_images: list = []           # image attachments of the message being sent (send -> send_text)

    @property
    def busy(self) -> bool:
        return self.call is not None or self.preparing is not None or self.tool_round is not None

    @property
    def tool_loop(self) -> int | None:
        """The chat whose tool calls are being answered, while they are."""
        return self.tool_round.conversation_id if self.tool_round is not None else None

    def _changed(self) -> None:
        self.busy_changed.emit()

    def _prepared(self) -> None:
        self.preparing = None
        self._changed()

    # sending -----------------------------------------------------------------------------------------------------
    def send(self, text: str, attachments: list) -> None:
        """`attachments`: the composer's (images go as images, the rest into the message, fitted to the context)."""
        if (not text and not attachments) or self.busy:
            return
        self.pending_images = [a for a in attachments if a.image]
        files = [a for a in attachments if not a.image]
        if files:
            self._send_with_files(text, files)
        else:
            self.host.clear_attachments()
            self.send_text(text)

    def _send_with_files(self, text: str, files: list) -> None:
        """Count the chat and each file with the model's tokenizer (through the API, off the GUI thread), cut
        what does not fit the context left after the chat and the reply's reserve, then send."""
        model = self.host.selected_model()
        if not model:
            self.send_text(message_with(text, fit(files, [0] * len(files), 0)))
            return
        if self.host.conversation is None:
            self.host.new_chat()
        conv = self.host.conversation
        body = self.request_body()
        turns = [m for m in body["messages"] if m["role"] in ("user", "assistant") and m["content"]]
        turns.append({"role": "user", "content": text or "(files)"})
        system, num_ctx = conv.system, conv.num_ctx

        async def count(c):
            base = await c.count_tokens(model, turns, system)
            each = [await c.count_tokens(model, [{"role": "user", "content": a.text or " "}]) for a in files]
            return base, each, num_ctx if num_ctx != AUTO_CTX else await c.context_length(model)

        self.preparing = self.bridge.call(count)
        self.preparing.finished.connect(lambda r: self._files_counted(text, files, *r))
        self.preparing.failed.connect(lambda err: (setattr(self, "preparing", None), self.show_error(err),
                                                  self._changed()))
        self.preparing.cancelled.connect(self._prepared)
        self.host.show_status("Counting the attached files' tokens…")
        self._changed()

    def _files_counted(self, text: str, files: list, base: int, each: list[int], num_ctx: int) -> None:
        """`num_ctx`: the chat's own context, or (auto) the one the service gives the model now."""
        self.preparing = None
        opts = {**self.host.conversation.options, **self.extra_options}
        reserve = int(opts.get("num_predict") or 0) if int(opts.get("num_predict") or 0) > 0 \
            else min(1024, num_ctx // 4)
        fitted = fit(files, each, num_ctx - base - reserve)
        self.host.clear_attachments()
        cut = [f.attachment.name for f in fitted if f.note]
        if cut:
            self.host.show_status(f"Cut to fit the context: {', '.join(cut)}", 15000)
        self.send_text(message_with(text, fitted))

    def send_text(self, text: str) -> None:
        """Save `text` (with the images attached) as the user's message and ask for a reply."""
        self.tool_rounds = 0
        images, self.pending_images = images_block(self.pending_images), []
        blocks = {"images": images} if images else None        # saved with the conversation, sent each turn
        if self.host.conversation is None:
            self.host.new_chat()
        self.host.name_chat(text or "Image")
        msg = self.history.add_message(self.host.conversation.id, "user", text, blocks=blocks)
        self.host.transcript.add("user", text, message_id=msg.id, blocks=blocks)
        self.host.message_sent()
        self.start_reply()

    def request_body(self) -> dict:
        conv = self.host.conversation
        messages = []
        if conv.system.strip():
            messages.append({"role": "system", "content": conv.system})
        for m in self.history.messages(conv.id):
            if m.role in ("user", "assistant", "tool"):
                msg = {"role": m.role, "content": m.content}
                if m.blocks.get("tool_calls"):
                    msg["tool_calls"] = m.blocks["tool_calls"]
                if m.role == "tool" and m.blocks.get("tool_name"):
                    msg["tool_name"] = m.blocks["tool_name"]
                if m.blocks.get("images"):
                    msg["images"] = m.blocks["images"]
                messages.append(msg)
        body = {"model": self.host.selected_model(), "messages": messages,
                "options": {"temperature": conv.temperature, **conv.options, **self.extra_options}}
        if conv.num_ctx != AUTO_CTX:            # auto: the service picks (and grows) the context
            body["options"] = {"num_ctx": conv.num_ctx, **body["options"]}
        # logprobs always: one entry per generated token, so a reply the user stopped (no final totals arrive)
        # still counts its real tokens; the alternatives themselves only when asked for
        body["logprobs"] = True
        if self.host.wants_alternatives():
            body["top_logprobs"] = TOP_LOGPROBS
        body["return_progress"] = True          # a long prompt's reading shows in the status bar (progress_text)
        return body

    # the reply ---------------------------------------------------------------------------------------------------
    def start_reply(self, continuing: Message | None = None) -> None:
        """Ask for a reply to the branch shown; `continuing` (a saved reply cut at its length limit, the last
        message shown) is extended instead of a new reply being added."""
        model = self.host.selected_model()
        if not model:
            self.show_error("No model to answer with: add one (Models → Manage models: import a .gguf or pull "
                            "one) and pick it above.")
            return
        conv = self.host.conversation
        missing = self.tools.missing(conv.tools)
        if missing:                  # list their tools first (once per session), then ask
            self.preparing = self.tools.prepare(missing, lambda: (setattr(self, "preparing", None),
                                                                  self.start_reply(continuing)))
            self.preparing.cancelled.connect(self._prepared)
            self._changed()
            return
        body = self.request_body()
        if self.tools.api_tools(conv.tools):
            body["tools"] = self.tools.api_tools(conv.tools)
        keep = self.host.wants_alternatives()
        transcript = self.host.transcript
        if continuing is not None:
            # The service renders every assistant message as a finished turn, so the model is asked to go on
            # (this request's extra message is not saved); its words are appended to the cut reply.
            body["messages"].append({"role": "user", "content": CONTINUE_PROMPT})
            widget = next(w for w in transcript.messages if w.message_id == continuing.id)
            self.pending = PendingReply(conv.id, model, widget, parent_id=continuing.parent_id,
                                        continues=continuing.id, prefix=continuing.content, keep_logprobs=keep)
        else:
            self.pending = PendingReply(conv.id, model, transcript.add("assistant", ""),
                                        parent_id=self.history.conversation_leaf(conv.id), keep_logprobs=keep)
        self.call = self.bridge.stream(lambda c: c.chat_stream(body))
        self.call.item.connect(self._on_chunk)
        self.call.finished.connect(lambda _r: self._end_reply(stopped=False))
        self.call.cancelled.connect(lambda: self._end_reply(stopped=True))
        self.call.failed.connect(self._on_failed)
        self._changed()

    def _on_chunk(self, obj: dict) -> None:
        p = self.pending
        if p is None:
            return
        if obj.get("prompt_progress"):          # a long prompt is being read: how far, and the time left
            self.host.show_status(progress_text(obj["prompt_progress"]))
            return
        grew = p.add(obj)
        transcript = self.host.transcript
        if p.widget in transcript.messages:          # (not after a chat switch)
            if grew:
                transcript.stream_text(p.widget, p.text)
            p.widget.show_streaming_blocks(p.thinking, p.tool_calls)

    def _end_reply(self, stopped: bool) -> None:
        pending, self.pending = self.pending, None
        self.call = None
        if pending is not None:
            self._save_reply(pending, stopped)
            conv = self.host.conversation
            if not stopped and pending.tool_calls and conv is not None \
                    and conv.id == pending.conversation_id and conv.tools:
                self._answer_tool_calls(list(pending.tool_calls))
        self._changed()

    def _save_reply(self, p: PendingReply, stopped: bool) -> None:
        """Save what arrived to the chat it belongs to. The user may have switched chats meanwhile (the widget
        is gone: save only) or deleted that chat (nothing to save to)."""
        transcript = self.host.transcript
        shown = p.widget in transcript.messages
        if shown:
            transcript.flush()
        stats = p.stats(stopped)
        blocks = p.blocks()
        if not p.text and not blocks:
            if shown and p.continues is None:
                transcript.remove(p.widget)    # nothing arrived: no empty bubble
            return
        try:
            self.history.get(p.conversation_id)
        except KeyError:
            return
        if p.continues is not None:
            old = self.history.message(p.continues)
            msg = self.history.update_message(p.continues, p.text, stats, old.logprobs + p.logprobs, blocks)
        else:
            msg = self.history.add_message(p.conversation_id, "assistant", p.text, stats, p.logprobs, blocks,
                                           parent_id=p.parent_id)
        if shown:
            p.widget.message_id = msg.id
            siblings = self.history.siblings(msg.id)
            p.widget.set_branch(siblings.index(msg.id), len(siblings))
            p.widget.set_content(p.text)
            p.widget.set_thinking(blocks.get("thinking", ""), blocks.get("thinking_tokens", 0))
            p.widget.set_logprobs(p.logprobs)
            p.widget.set_stats(stats)
        self.host.show_status(format_stats(stats), 8000)

    def _on_failed(self, error: str) -> None:
        pending, self.pending = self.pending, None
        self.call = None
        if pending is not None:
            self._save_reply(pending, stopped=True)   # keep whatever arrived before the error
        self.show_error(error)
        self._changed()

    def show_error(self, error: str) -> None:
        """An error as a message of the chat shown (saved with it)."""
        conv = self.host.conversation
        mid = self.history.add_message(conv.id, "error", error).id if conv else None
        self.host.transcript.add("error", error, message_id=mid)

    # MCP tool calls: one round at a time, each call asked -> run -> saved, then the model asked again ------------
    def _answer_tool_calls(self, calls: list[dict]) -> None:
        conv = self.host.conversation
        if self.tool_rounds >= MAX_ROUNDS:
            self.show_error(f"Stopped after {MAX_ROUNDS} rounds of tool calls without an answer.")
            return
        self.tool_rounds += 1
        self.tool_round = ToolRound(conv.id, list(conv.tools), calls)
        self._changed()
        self._next_tool_call(self.tool_round)

    def _answering(self, r: ToolRound) -> bool:
        """`r` is still the round being answered, on the chat shown (Stop or a chat switch ends it)."""
        conv = self.host.conversation
        return self.tool_round is r and conv is not None and conv.id == r.conversation_id

    def _next_tool_call(self, r: ToolRound) -> None:
        if not self._answering(r):
            return
        if not r.calls:
            self.tool_round = None
            self.start_reply()
            return
        call = r.calls.pop(0)
        name = (call.get("function") or {}).get("name", "")
        args = call_arguments(call)
        tool = self.tools.find(r.servers, name)
        if tool is None:
            self._tool_result(r, name, f"There is no tool named {name!r}.", True)
            return
        box = self.tools.ask(self.host, tool, args, lambda allowed: self._tool_allowed(r, tool, args, allowed))
        if box is not None:
            self.dialog_requested.emit(box)

    def _tool_allowed(self, r: ToolRound, tool: McpTool, args: dict, allowed: bool) -> None:
        if not self._answering(r):
            return
        if not allowed:
            self._tool_result(r, tool.name, "The user denied this tool call.", True)
            return
        self.preparing = self.tools.run(tool, args, lambda text, err: self._tool_result(r, tool.name, text, err))
        self._changed()

    def _tool_result(self, r: ToolRound, name: str, text: str, is_error: bool) -> None:
        """Save a call's result as a tool message, then go on with the next call."""
        self.preparing = None
        if not self._answering(r):
            return
        blocks = {"tool_name": name, "is_error": is_error}
        msg = self.history.add_message(r.conversation_id, "tool", text, blocks=blocks)
        self.host.transcript.add("tool", text, message_id=msg.id, blocks=blocks)
        self._next_tool_call(r)

    # the user's other requests -------------------------------------------------------------------------------------
    def stop(self) -> None:
        if self.tool_round is not None:          # tool calls being answered: no more of them, no new reply
            self.tool_round = None
            self.host.close_dialog()
            self._changed()
        for call in (self.preparing, self.call):
            if call is not None:
                call.cancel()

    def abandon_reply(self) -> None:
        """At quit: save what has arrived now (the bridge will not deliver the cancellation any more)."""
        if self.call is not None:
            call = self.call
            self._end_reply(stopped=True)
            call.cancel()

    def regenerate(self) -> None:
        """Ask again for a reply to the last user message; the old reply stays as a branch (‹ 1/2 ›)."""
        conv = self.host.conversation
        if self.busy or not conv:
            return
        users = [m for m in self.history.messages(conv.id) if m.role == "user"]
        if not users:
            return
        self.history.set_leaf(conv.id, users[-1].id)
        self.host.show_messages()
        self.start_reply()

    def resend_edited(self, message_id: int, text: str) -> None:
        """The edited message added as a new branch beside the old one, and a reply asked for."""
        if self.busy:
            return
        old = self.history.message(message_id)
        self.history.add_message(old.conversation_id, "user", text, parent_id=old.parent_id)
        self.host.show_messages()
        self.start_reply()

    def continue_reply(self, message_id: int) -> None:
        """A reply cut at its length limit goes on: the chat so far, that reply included, is sent again with a
        request to continue, and what comes is added to the same reply."""
        msg = self.history.message(message_id)
        shown = self.history.messages(msg.conversation_id)
        if not shown or shown[-1].id != message_id:       # only the last reply of the branch shown
            return
        self.start_reply(continuing=msg)
