"""The chat's side of MCP tools: which servers a chat uses, their tools (listed once per app session, off the
GUI thread), the user's permission before each call (allow once / always for this tool / deny), and the calls
themselves, run on the bridge's asyncio thread under a timeout (app/gui/chat/mcp_tools.py).

A server that fails to start or crashes becomes a message in the chat; nothing else is affected.
Covered by tests/gui/test_gui_mcp.py (MCP tools in the chat).
"""
from __future__ import annotations

import asyncio
import json

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox

from app.gui.chat.mcp_tools import McpTool, ServerSpec, call_tool, describe_error, list_tools, load_config

MAX_ROUNDS = 8          # tool rounds in a row for one user message, then the model must answer


class ChatTools(QObject):
    failed = Signal(str)          # a message for the chat (a server that did not start, a bad call)

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.tools: dict[str, list[McpTool]] = {}        # by server, listed this session
        self.always: set[tuple[str, str]] = set()        # (server, tool) the user always allows

    def servers(self) -> dict[str, ServerSpec]:
        try:
            return load_config()
        except ValueError as e:
            self.failed.emit(f"MCP servers: {e}")
            return {}

    def clear(self) -> None:
        """After the configuration changed: list again on next use."""
        self.tools.clear()

    def missing(self, names: list[str]) -> list[str]:
        return [n for n in names if n not in self.tools]

    def prepare(self, names: list[str], done) -> object:
        """List the tools of the servers in `names` not listed yet; `done()` runs in the GUI thread once all
        answered or failed. Returns the Call (cancel() stops the wait)."""
        specs = self.servers()

        async def list_all(_client):
            out, errors = {}, {}
            for n in names:
                if n not in specs:
                    errors[n] = "it is no longer in the MCP configuration"
                    continue
                try:
                    out[n] = await list_tools(specs[n])
                except BaseException as e:         # an ExceptionGroup from the SDK, a timeout, a crash
                    if isinstance(e, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
                        raise
                    errors[n] = describe_error(e)
            return out, errors

        call = self.bridge.call(list_all)
        call.finished.connect(lambda r: self._listed(*r, done))
        return call

    def _listed(self, found: dict, errors: dict, done) -> None:
        self.tools.update(found)
        for n, err in errors.items():
            self.tools[n] = []            # not asked again this session unless the chat turns it off and on
            self.failed.emit(f"MCP server “{n}” did not start or answer: {err}")
        done()

    def api_tools(self, names: list[str]) -> list[dict]:
        return [t.as_api_tool() for n in names for t in self.tools.get(n, [])]

    def find(self, names: list[str], tool_name: str) -> McpTool | None:
        return next((t for n in names for t in self.tools.get(n, []) if t.name == tool_name), None)

    def fill_menu(self, menu, chosen: list[str], toggled) -> None:
        """One checkable entry per configured MCP server, checked when in `chosen` (the servers a chat offers);
        `toggled(server, on)`."""
        menu.clear()
        servers = self.servers()
        if not servers:
            menu.addAction("(no MCP servers: add them in Settings)").setEnabled(False)
        for name in servers:
            a = menu.addAction(name)
            a.setObjectName(f"tool:{name}")
            a.setCheckable(True)
            a.setChecked(name in chosen)
            a.toggled.connect(lambda checked, n=name: toggled(n, checked))

    # permission and calls ------------------------------------------------------------------------------------
    def ask(self, parent, tool: McpTool, arguments: dict, answer) -> QMessageBox | None:
        """`answer(True/False)` once the user chose. Returns the question, not opened yet: its asker opens it
        over `parent` (window-modal, not blocking); None when this tool is always allowed (answered at once)."""
        if (tool.server, tool.name) in self.always:
            answer(True)
            return None
        box = QMessageBox(QMessageBox.Question, "Allow a tool call?",
                          f"The model wants to call <b>{tool.name}</b> from the MCP server <b>{tool.server}</b>.",
                          QMessageBox.NoButton, parent)
        box.setObjectName("toolPermissionDialog")
        box.setInformativeText("Arguments:\n" + json.dumps(arguments, indent=1, ensure_ascii=False)[:2000])
        once = box.addButton("Allow once", QMessageBox.AcceptRole)
        once.setObjectName("allowOnce")
        always = box.addButton(f"Always allow {tool.name}", QMessageBox.AcceptRole)
        always.setObjectName("allowAlways")
        deny = box.addButton("Deny", QMessageBox.RejectRole)
        deny.setObjectName("deny")
        box.setDefaultButton(deny)
        box.setEscapeButton(deny)

        def chosen(button) -> None:
            if button is always:
                self.always.add((tool.server, tool.name))
            answer(button in (once, always))

        box.buttonClicked.connect(chosen)
        return box

    def run(self, tool: McpTool, arguments: dict, done) -> object:
        """Call the tool; `done(text, is_error)` in the GUI thread. Returns the Call."""
        spec = self.servers().get(tool.server)

        async def run_it(_client):
            if spec is None:
                return f"the MCP server {tool.server} is no longer configured", True
            try:
                return await call_tool(spec, tool.name, arguments)
            except BaseException as e:
                if isinstance(e, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
                    raise
                return f"the MCP server {tool.server} failed: {describe_error(e)}", True

        call = self.bridge.call(run_it)
        call.finished.connect(lambda r: done(*r))
        return call


def call_arguments(call: dict) -> dict:
    """A tool call's arguments as an object (Ollama gives an object; some dialects a JSON string)."""
    args = (call.get("function") or {}).get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {}
    return args if isinstance(args, dict) else {}
