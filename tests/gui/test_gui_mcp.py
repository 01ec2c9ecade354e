"""Tools from MCP servers in the chat, end to end: an MCP server written here (stdio, the official `mcp` SDK),
configured in the Settings dialog's mcpServers JSON, turned on for a chat from its Tools menu; the real tools
model (Qwen2.5-Coder-0.5B) calls it, the user is asked first (allow once / always / deny), the result is saved as
a tool message and the model answers. A server that cannot start is an error in the chat, and the chat goes on.
The same over streamable HTTP: an MCPServer app served by uvicorn on loopback (port 0) in this process, reached by
its `url`: listed and called through app/gui/chat/mcp_tools.py, and used by the model in the chat."""
from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.request

import pytest
from PySide6.QtTest import QTest

from gui_util import SHORT, WAIT, click, click_menu, dialog_of, open_popup

SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("test-tools")


@server.tool()
def secret_word() -> str:
    """Return today's secret word. Call this whenever the user asks for the secret word."""
    return "PAPAYA-42"


server.run()
'''
QWEN = "qwen-coder:latest"


class HttpMcpServer:
    """An MCP server over streamable HTTP on 127.0.0.1 (a port the OS picks), in a thread of this process: the
    official SDK's MCPServer as a Starlette app under uvicorn. `url` is its endpoint; stop() ends it."""

    def __init__(self):
        import uvicorn
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError

        server = MCPServer("web-tools")

        @server.tool()
        def secret_word() -> str:
            """Return today's secret word. Call this whenever the user asks for the secret word."""
            return "MANGO-7"

        @server.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @server.tool()
        def fail() -> str:
            """Always fails (a ToolError: its text goes to the client; any other exception's stays on the server)."""
            raise ToolError("the web tool broke")

        self.uvicorn = uvicorn.Server(uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=0,
                                                     log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.uvicorn.run, name="mcp-http", daemon=True)
        self.thread.start()
        end = time.monotonic() + 60
        while not self.uvicorn.started:
            assert self.thread.is_alive() and time.monotonic() < end, "the MCP HTTP server did not start"
            time.sleep(0.02)
        port = self.uvicorn.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/mcp"

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def http_mcp():
    server = HttpMcpServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(live_service, qwen_coder_path):
    svc = live_service(n_threads=2, num_parallel=1, num_ctx=4096, keep_alive="10m")
    body = json.dumps({"path": str(qwen_coder_path), "model": "qwen-coder", "stream": False}).encode()
    urllib.request.urlopen(urllib.request.Request(svc.url + "/api/import", data=body,
                                                  headers={"Content-Type": "application/json"}), timeout=600).read()
    yield svc


@pytest.fixture
def desk(qtbot, service, tmp_path):
    from app.gui.desktop import Desktop

    script = tmp_path / "secret_server.py"
    script.write_text(SERVER)
    d = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(d.chat)
    d.open_chat()
    qtbot.waitUntil(lambda: d.chat.models.row_of(QWEN) >= 0, timeout=WAIT)
    d.chat.model_picker.setCurrentIndex(d.chat.models.row_of(QWEN))
    d.chat.extra_options = {"num_predict": 48, "temperature": 0}
    d.script = script
    yield d
    d.shutdown()


def configure(qtbot, desk, servers: dict) -> None:
    """Type the mcpServers JSON into the Settings dialog and save it."""
    dlg = desk.open_settings()
    dlg.mcp.setPlainText("")
    dlg.mcp.setFocus()
    QTest.keyClicks(dlg.mcp, json.dumps({"mcpServers": servers}))
    click(qtbot, dlg.buttons.button(dlg.buttons.StandardButton.Save))
    qtbot.waitUntil(lambda: not dlg.isVisible(), timeout=SHORT)


def use_tool_server(qtbot, chat, name: str) -> None:
    """Tools ▸ name, checked, from the chat's Tools menu."""
    click_menu(qtbot, open_popup(qtbot, chat.tools_menu), f"tool:{name}")
    assert name in chat.conversation.tools


def permission_asked(qtbot, desk):
    """The permission question, once the model (loaded, its tools listed) has made its call."""
    chat = desk.chat
    qtbot.waitUntil(lambda: (chat.dialog is not None and chat.dialog.isVisible()) or not chat.busy, timeout=WAIT)
    assert chat.dialog is not None, [(m.role, m.content) for m in desk.history.messages(chat.conversation.id)]
    return dialog_of(qtbot, chat, "toolPermissionDialog")


def roles(desk) -> list[str]:
    return [m.role for m in desk.history.messages(desk.chat.conversation.id)]


def test_settings_refuses_a_malformed_mcp_configuration(qtbot, desk):
    dlg = desk.open_settings()
    dlg.mcp.setPlainText(json.dumps({"mcpServers": {"x": {"args": ["a"]}}}))
    click(qtbot, dlg.buttons.button(dlg.buttons.StandardButton.Save))
    assert dlg.isVisible() and "mcpServers.x" in dlg.message.text() and "command" in dlg.message.text()


def answer_every_question(qtbot, desk, button: str) -> int:
    """Until the chat is idle: each permission question that comes is answered with `button`. How many came."""
    chat, n = desk.chat, 0
    while True:
        qtbot.waitUntil(lambda: not chat.busy or (chat.dialog is not None and chat.dialog.isVisible()), timeout=WAIT)
        if not chat.busy:
            return n
        box = dialog_of(qtbot, chat, "toolPermissionDialog")
        click(qtbot, box.findChild(type(box.defaultButton()), button))
        qtbot.waitUntil(lambda: chat.dialog is not box, timeout=SHORT)     # closed (the next call's question may follow)
        n += 1


def test_a_real_model_calls_an_mcp_tool_after_asking(qtbot, desk):
    chat = desk.chat
    configure(qtbot, desk, {"secrets": {"command": sys.executable, "args": [str(desk.script)]}})
    chat.new_chat()
    use_tool_server(qtbot, chat, "secrets")
    chat.send("What is the secret word? Use the secret_word tool.")
    box = permission_asked(qtbot, desk)                                 # asked before the call
    assert "secret_word" in box.text() and "secrets" in box.text()
    assert roles(desk) == ["user", "assistant"] and chat.busy
    click(qtbot, box.findChild(type(box.defaultButton()), "allowOnce"))
    # the result goes back to the model, which answers or (a 0.5B model often does) calls again: denied
    answer_every_question(qtbot, desk, "deny")
    msgs = desk.history.messages(chat.conversation.id)
    assert [m.role for m in msgs[:4]] == ["user", "assistant", "tool", "assistant"], [(m.role, m.content) for m in msgs]
    assert msgs[1].blocks["tool_calls"][0]["function"]["name"] == "secret_word"
    assert msgs[2].content == "PAPAYA-42" and msgs[2].blocks == {"tool_name": "secret_word", "is_error": False}
    for m in msgs[4:]:                                                   # later calls were denied, and said so
        if m.role == "tool":
            assert m.content == "The user denied this tool call." and m.blocks["is_error"] is True
    assert [m.role for m in chat.transcript.messages] == [m.role for m in msgs]
    # "Always allow": no more questions for that tool; the rounds end (an answer, or the round limit)
    chat.send("Call the secret_word tool again.")
    box = permission_asked(qtbot, desk)
    click(qtbot, box.findChild(type(box.defaultButton()), "allowAlways"))
    assert answer_every_question(qtbot, desk, "deny") == 0
    later = desk.history.messages(chat.conversation.id)[len(msgs) + 1:]
    assert [m.content for m in later if m.role == "tool"][:1] == ["PAPAYA-42"]
    assert not chat.busy and chat.tool_loop is None       # (the model's last word may be empty: nothing shown)


def test_a_server_that_cannot_start_is_an_error_in_the_chat(qtbot, desk):
    chat = desk.chat
    configure(qtbot, desk, {"broken": {"command": "strata-no-such-mcp-server"}})
    chat.new_chat()
    use_tool_server(qtbot, chat, "broken")
    chat.extra_options = {"num_predict": 4, "temperature": 0}
    chat.send("Hello.")
    qtbot.waitUntil(lambda: not chat.busy and chat.transcript.messages[-1].role == "assistant", timeout=WAIT)
    errors = [m.content for m in desk.history.messages(chat.conversation.id) if m.role == "error"]
    assert errors and "“broken” did not start" in errors[0] and "strata-no-such-mcp-server" in errors[0]


def test_streamable_http_server_listed_and_called(http_mcp):
    """What the chat does with a `url` server, through mcp_tools (no model): list its tools with their schemas,
    call one with arguments, get a tool's failure as an error result; a server not there fails, never hangs."""
    from app.gui.chat.mcp_tools import call_tool, describe_error, list_tools, parse_config

    specs = parse_config({"mcpServers": {"web": {"url": http_mcp.url},
                                         "gone": {"url": "http://127.0.0.1:9/mcp"}}})
    tools = {t.name: t for t in asyncio.run(list_tools(specs["web"]))}
    assert set(tools) == {"secret_word", "add", "fail"} and all(t.server == "web" for t in tools.values())
    assert tools["add"].parameters["properties"].keys() == {"a", "b"}
    assert tools["add"].as_api_tool()["function"]["name"] == "add"
    assert asyncio.run(call_tool(specs["web"], "secret_word", {})) == ("MANGO-7", False)
    assert asyncio.run(call_tool(specs["web"], "add", {"a": 2, "b": 40})) == ("42", False)
    text, is_error = asyncio.run(call_tool(specs["web"], "fail", {}))
    assert is_error and "the web tool broke" in text
    with pytest.raises(BaseException) as e:
        asyncio.run(list_tools(specs["gone"], timeout=30))
    assert describe_error(e.value) != "it did not answer in time", describe_error(e.value)   # refused, not hung


def test_a_real_model_calls_a_streamable_http_mcp_tool(qtbot, desk, http_mcp):
    chat = desk.chat
    configure(qtbot, desk, {"web": {"url": http_mcp.url}})
    chat.new_chat()
    use_tool_server(qtbot, chat, "web")
    chat.send("What is the secret word? Use the secret_word tool.")
    box = permission_asked(qtbot, desk)
    assert "secret_word" in box.text() and "web" in box.text()
    click(qtbot, box.findChild(type(box.defaultButton()), "allowOnce"))
    answer_every_question(qtbot, desk, "deny")
    msgs = desk.history.messages(chat.conversation.id)
    assert [m.role for m in msgs[:3]] == ["user", "assistant", "tool"], [(m.role, m.content) for m in msgs]
    assert msgs[1].blocks["tool_calls"][0]["function"]["name"] == "secret_word"
    assert msgs[2].content == "MANGO-7" and msgs[2].blocks == {"tool_name": "secret_word", "is_error": False}
