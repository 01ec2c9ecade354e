"""Render the desktop app's windows to PNGs (for the README): `python -m tools.screenshots OUTDIR [--url URL]`.

`make screenshots` runs this under Xvfb. Without --url it hosts the real service on a free port with a scratch
STRATA_HOME, chats with the built-in model, loads it, plans what-ifs on simulated GPUs (picked from the list, and
as JSON), sends requests as other apps do (the Server window), and opens the model manager and the settings, so
the pictures show real output.
A developer tool, outside the shipped package (app/): not run by the test suite (`make screenshots` runs it);
tests/gui/ checks the windows it draws.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PySide6.QtGui import QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from app.gui.desktop import Desktop

GiB = 1 << 30

# A simulated machine for the what-if pictures (same schema as STRATA_DEVICES files).
SIM_GPU = {"devices": [{"id": "CUDA0", "name": "Simulated RTX 4060 (8 GB)", "kind": "gpu", "backend": "SIM",
                        "total": 8 * GiB, "free": 7 * GiB}],
           "host_ram_total": 32 * GiB, "host_ram_available": 24 * GiB, "cpu_cores": 8, "cpu_name": "Simulated CPU",
           "simulated": True}
SIM_TINY = {"devices": [{"id": "CUDA0", "name": "Simulated 1 GB GPU", "kind": "gpu", "backend": "SIM",
                         "total": GiB, "free": 256 << 20}],
            "host_ram_total": 1 * GiB, "host_ram_available": 200 << 20, "cpu_cores": 2, "cpu_name": "Simulated CPU",
            "simulated": True}

PROMPT = "Write a Python function that checks whether a number is prime, then explain it in two sentences."
EDITED = "Write a Python function that reverses a string."


def wait(app, cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"screenshots: gave up waiting for {what}")
        app.processEvents()
        time.sleep(0.01)
    for _ in range(5):
        app.processEvents()


def settle(app, seconds: float = 0.3) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def save(widget, path: Path) -> None:
    pm = widget.grab()
    if not pm.save(str(path)):
        raise RuntimeError(f"could not write {path}")
    print(f"wrote {path} ({pm.width()}x{pm.height()})")


def save_screen(app, window, path: Path) -> None:
    g = window.frameGeometry()
    pm = app.primaryScreen().grabWindow(0, g.x(), g.y(), g.width(), g.height())
    if pm.isNull() or not pm.save(str(path)):
        save(window, path)          # no real screen (offscreen platform): the window alone
        return
    print(f"wrote {path} ({pm.width()}x{pm.height()}, screen)")


def hover_unsure_token(reply) -> None:
    """Move the mouse over the least certain token (of the first 40) so its alternatives tooltip shows."""
    body = reply.body
    lps = reply.logprobs[:40]
    if not lps or not body.token_offsets:
        return
    i = min(range(len(lps)), key=lambda k: lps[k].get("logprob", 0.0) if lps[k].get("token", "").strip() else 0)
    cur = QTextCursor(body.document())
    cur.setPosition(body.token_offsets[i] + 1)
    r = body.cursorRect(cur)
    QTest.mouseMove(body.viewport(), r.center())


def save_whatif(app, mem, devices: dict, num_ctx: int, what: str, path: Path) -> None:
    """Plan `num_ctx` on the simulated `devices` (the advanced JSON editor) in the what-if tab and save the
    memory window once the plan (or its refusal warning) shows."""
    w = mem.whatif
    w.compare.setChecked(False)
    w.num_ctx.setValue(num_ctx)
    w.form_a.picker.advanced.setChecked(True)
    w.form_a.picker.json.setPlainText(json.dumps(devices, indent=1))
    plan_and_wait(app, w, what)
    save(mem, path)


def plan_and_wait(app, w, what: str) -> None:
    done = []
    w.planned.connect(lambda: done.append(1))
    w.plan()
    wait(app, lambda: bool(done), 120, what)
    settle(app)


def shoot_chat(app, desk, out: Path) -> None:
    chat = desk.open_chat()
    chat.resize(1180, 760)
    wait(app, lambda: desk.state.tags, 60, "the model list")
    chat.send(PROMPT)
    wait(app, lambda: not chat.busy, 300, "the reply")
    settle(app)
    save(chat, out / "chat.png")
    reply = chat.transcript.messages[-1]
    if reply.logprobs:
        reply.tokens_button.setChecked(True)
        settle(app)
        hover_unsure_token(reply)
        settle(app, 0.8)
        save_screen(app, chat, out / "chat-tokens.png")   # the screen: the tooltip is its own window
        reply.tokens_button.setChecked(False)
    shoot_branch(app, desk, out)
    desk.follow_system_theme(dark=True)
    settle(app, 0.5)
    save(chat, out / "chat-dark.png")
    desk.follow_system_theme(dark=False)
    settle(app)


def shoot_branch(app, desk, out: Path) -> None:
    """The first message edited and sent again: the new version and its reply, with ‹ 2/2 › to go back."""
    chat = desk.chat
    first = chat.transcript.messages[0]
    chat.session.resend_edited(first.message_id, EDITED)
    wait(app, lambda: not chat.busy, 300, "the edited message's reply")
    settle(app)
    save(chat, out / "chat-branch.png")


def shoot_memory(app, desk, out: Path) -> None:
    mem = desk.open_memory()
    mem.resize(1100, 760)
    desk.state.refresh()
    desk.state.refresh_devices()
    wait(app, lambda: any((m.get("strata") or {}).get("layout") for m in desk.state.ps), 60, "a loaded layout")
    wait(app, lambda: desk.state.inventory is not None, 30, "the device inventory")
    mem.live.render()
    mem.live.view.zoom.setChecked(True)     # a small model in a big RAM: show its own bytes
    settle(app)
    save(mem, out / "memory-live.png")
    mem.tabs.setCurrentWidget(mem.whatif)
    mem.whatif.num_parallel.setValue(4)
    save_whatif(app, mem, SIM_GPU, 8192, "a what-if plan", out / "memory-whatif.png")
    save_whatif(app, mem, SIM_TINY, 131072, "a refused plan", out / "memory-whatif-refused.png")


def shoot_whatif_picker(app, desk, out: Path) -> None:
    """Devices picked from the list (a described machine with one RTX 4060), plan B the same with a q8_0 KV
    cache, side by side."""
    from app.gui.memory.whatif_data import GPU_PRESETS

    mem = desk.open_memory()
    mem.resize(1280, 860)
    w = mem.whatif
    w.form_a.picker.advanced.setChecked(False)
    w.form_a.picker.described.setChecked(True)
    w.form_a.picker.gpus = []
    w.form_a.picker.preset.setCurrentIndex(next(i for i, p in enumerate(GPU_PRESETS) if "4060" in p.name))
    w.form_a.picker.add_selected()
    w.num_ctx.setValue(8192)
    w.compare.setChecked(True)
    w.form_b.copy_from(w.form_a)
    w.form_b.kv_type.setCurrentText("q8_0")
    w.tabs.setCurrentIndex(0)
    for side in (w.result_a, w.result_b):       # a small model on big devices: show its own bytes
        side.view.zoom.setChecked(True)
    plan_and_wait(app, w, "two plans")
    save(mem, out / "memory-whatif-compare.png")
    w.compare.setChecked(False)
    for side in (w.result_a, w.result_b):
        side.view.zoom.setChecked(False)


def shoot_manager(app, desk, out: Path) -> None:
    m = desk.open_models()
    m.resize(1180, 640)
    wait(app, lambda: len(m.table_model.rows) >= 3 and all(r.capabilities for r in m.table_model.rows), 60,
         "the model list with capabilities")
    m.select(m.table_model.rows[-1].name)
    m.pull_panel.name.setText("qwen3:0.6b")
    settle(app)
    save(m, out / "models.png")


def client_traffic(url: str, model: str) -> None:
    """Requests from other apps, as the Server window lists them: the official OpenAI and Anthropic clients when
    installed (the dev install has them), plain HTTP otherwise; a follow-up that reuses the prompt cache, and one
    request refused (a model the service does not have)."""
    system = "You are a concise assistant for a command-line coding agent. " * 12
    turns = [{"role": "system", "content": system}, {"role": "user", "content": "Write a haiku about the sea."}]
    try:
        import anthropic
        import openai
    except ImportError:
        for body in ({"model": model, "messages": turns, "stream": False, "options": {"num_predict": 40}},
                     {"model": "gpt-4o", "messages": turns[1:], "stream": False}):
            req = urllib.request.Request(url + "/api/chat", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=300).read()
            except OSError:
                pass
        return
    ai = openai.OpenAI(base_url=url + "/v1", api_key="sk-not-shown", max_retries=0)
    reply = ""
    turns[0] = {"role": "system", "content": "Today's date is 2026-11-27. " + system}
    for c in ai.chat.completions.create(model=model, messages=turns, max_tokens=40, seed=2, stream=True):
        reply += "".join(ch.delta.content or "" for ch in c.choices)
    turns += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Now one about mountains."}]
    ai.chat.completions.create(model=model, messages=turns, max_tokens=40, seed=2)
    # the next day, the same conversation again: one early byte of the system prompt changed (the explainer)
    turns[0] = {"role": "system", "content": "Today's date is 2026-11-28. " + system}
    ai.chat.completions.create(model=model, messages=turns, max_tokens=16, seed=2)
    anthropic.Anthropic(base_url=url, api_key="sk-ant-not-shown", max_retries=0).messages.create(
        model=model, max_tokens=24, messages=[{"role": "user", "content": "Name a prime number."}])
    try:
        ai.chat.completions.create(model="gpt-4o", messages=turns[1:2], max_tokens=8)
    except openai.NotFoundError:
        pass


def listen_hidden(desk) -> None:
    """The Server window made and listening, not yet shown: its plots then cover the whole session."""
    from app.gui.server.server_window import ServerWindow

    desk.server = ServerWindow(desk.state)
    desk.actions.install(desk.server)
    desk.server.start_listening()


def shoot_server(app, desk, out: Path) -> None:
    """The Server window after the chat and other apps' requests: the list, the plots, and one request's
    timeline and Cache tab (the next day's request: where its prompt diverged, and its anatomy). It was opened at
    the start, so its plots cover the whole session."""
    import threading

    win = desk.open_server()
    win.resize(1280, 900)
    model = desk.chat.selected_model()
    t = threading.Thread(target=client_traffic, args=(desk.bridge.base_url, model), daemon=True)
    t.start()
    wait(app, lambda: not t.is_alive(), 600, "the other apps' requests")
    wait(app, lambda: any((r.get("status") or 0) >= 400 for r in win.model.rows), 30, "the refused request")
    settle(app, 2.5)          # two more samples for the plots
    changed = [r for r in win.model.rows if (r.get("cache") or {}).get("flagged")]
    done = changed or [r for r in win.model.rows if r.get("completion_tokens") and r.get("cached_tokens")]
    if done:                  # the next day's request (its cache miss explained), else the cached follow-up
        win.select_request(max(done, key=lambda r: r["id"] if changed else r["cached_tokens"])["id"])
        wait(app, lambda: win.detail is not None, 30, "the request's detail")
    settle(app)
    save(win, out / "server.png")


def shoot_settings(app, desk, out: Path) -> None:
    dlg = desk.open_settings()
    settle(app)
    save(dlg, out / "settings.png")
    dlg.reject()


def shoot_menu(app, desk, out: Path) -> None:
    """The Models menu (the tray's entries; in the window when the desktop has no tray)."""
    chat = desk.chat
    menu = chat.models_menu
    desk.tray.populate()
    menu.popup(chat.mapToGlobal(chat.rect().topLeft()) + chat.rect().center() / 4)
    settle(app, 0.5)
    save(menu, out / "tray-menu.png")
    menu.hide()


def other_apps_home(root: Path) -> Path:
    """A home with the built-in model also "downloaded" by LM Studio (a hard link: no copy), so the manager
    shows a model from another app's folder."""
    from app.engine.gguf.builtin_model import builtin_model_path

    src = builtin_model_path()
    d = root / ".lmstudio" / "models" / "HuggingFaceTB" / "SmolLM2-135M-Instruct-GGUF"
    d.mkdir(parents=True, exist_ok=True)
    dst = d / "smollm2-135m-instruct-q4_1.gguf"
    if src is not None and not dst.exists():
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.screenshots")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--url", help="use a running service instead of hosting one")
    ap.add_argument("--tools-model", type=Path, default=TOOLS_MODEL,
                    help="a GGUF that calls tools, for the MCP pictures (default: make test-models' Qwen)")
    args = ap.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("STRATA_HOME"):
        os.environ["STRATA_HOME"] = tempfile.mkdtemp(prefix="strata-shots-")
    if not os.environ.get("STRATA_USER_HOME"):           # never the real ~/.ollama etc. in the pictures
        os.environ["STRATA_USER_HOME"] = str(other_apps_home(Path(os.environ["STRATA_HOME"]) / "user-home"))
    os.environ.setdefault("STRATA_NUM_THREADS", "2")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    server = None if args.url else start_server()
    url = args.url or server.url
    desk = Desktop(url, use_tray=False, poll_ms=1000)
    try:
        listen_hidden(desk)
        shoot_chat(app, desk, args.outdir)
        shoot_memory(app, desk, args.outdir)
        shoot_server(app, desk, args.outdir)
        shoot_whatif_picker(app, desk, args.outdir)
        copy_for_the_manager(app, desk)
        shoot_manager(app, desk, args.outdir)
        shoot_settings(app, desk, args.outdir)
        shoot_menu(app, desk, args.outdir)
        shoot_mcp(app, desk, args.outdir, args.tools_model)
    finally:
        desk.shutdown()
        if server is not None:
            server.send_signal(signal.SIGINT)
            server.wait(60)
    return 0


def start_server() -> subprocess.Popen:
    """`strata serve` on a free port, as its own process (the GUI only ever talks to a service over HTTP)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, STRATA_HOST=f"127.0.0.1:{port}")
    proc = subprocess.Popen([sys.executable, "-m", "app", "serve"], env=env)
    proc.url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(proc.url + "/api/version", timeout=2).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                proc.kill()
                raise RuntimeError("screenshots: strata serve did not start") from None
            time.sleep(0.2)


MCP_SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("weather")


@server.tool()
def get_weather(city: str) -> str:
    """The weather now in a city."""
    return f"{city}: sunny, 21 °C, light wind from the west"


server.run()
'''
TOOLS_MODEL = Path.home() / ".cache" / "strata-test-models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def shoot_mcp(app, desk, out: Path, model_file: Path) -> None:
    """A chat using an MCP server's tool (a small stdio server written here) with a real tools model: the
    permission question, then the call, its result and the answer."""
    from app.gui.chat.mcp_tools import save_config

    if not model_file.is_file():
        print(f"skipped chat-tool*.png: no tools model at {model_file} (make test-models)")
        return
    done = []

    async def imp(c):
        async for _ in c.import_stream(str(model_file), "qwen-coder"):
            pass
    call = desk.bridge.call(imp)
    call.finished.connect(lambda _r: done.append(1))
    call.failed.connect(lambda e: done.append(e))
    wait(app, lambda: bool(done), 600, "the tools model's import")
    script = Path(os.environ["STRATA_HOME"]) / "weather_server.py"
    script.write_text(MCP_SERVER)
    save_config(json.dumps({"mcpServers": {"weather": {"command": sys.executable, "args": [str(script)]}}}))
    desk.chat.session.tools.clear()
    desk.state.refresh()
    chat = desk.open_chat()
    wait(app, lambda: chat.models.row_of("qwen-coder:latest") >= 0, 60, "the tools model in the list")
    chat.new_chat()
    chat.model_picker.setCurrentIndex(chat.models.row_of("qwen-coder:latest"))
    chat.set_chat_tool("weather", True)
    chat.extra_options = {"num_predict": 80, "temperature": 0}
    chat.send("What is the weather in Lisbon right now?")
    wait(app, lambda: not chat.busy or (chat.dialog is not None and chat.dialog.isVisible()), 300,
         "the tool call")
    if chat.dialog is None:
        print("skipped chat-tool*.png: the model answered without calling the tool")
        return
    settle(app, 0.5)
    save_screen(app, chat, out / "chat-tool-permission.png")
    first = True
    while chat.busy:
        if chat.dialog is not None and chat.dialog.isVisible():
            name = "allowOnce" if first else "deny"
            chat.dialog.findChild(type(chat.dialog.defaultButton()), name).click()
            first = False
        wait(app, lambda: not chat.busy or (chat.dialog is not None and chat.dialog.isVisible()), 300,
             "the tool's result and the answer")
    settle(app)
    chat.transcript.verticalScrollBar().setValue(0)     # the question, the call, its result
    settle(app)
    save(chat, out / "chat-tool.png")


def copy_for_the_manager(app, desk) -> None:
    """A store model of one's own next to the built-in and the LM Studio one (a copy: no file is copied)."""
    done = []
    call = desk.bridge.call(lambda c: c.copy("smollm2:135m", "my-assistant:latest"))
    call.finished.connect(lambda _r: done.append(1))
    call.failed.connect(lambda e: done.append(e))
    wait(app, lambda: bool(done), 60, "the copy")
    desk.state.refresh()


if __name__ == "__main__":
    sys.exit(main())
