"""The Settings dialog (File → Settings…, Ctrl+,): edits `settings.json` in the data dir (app/settings.py), which
the service reads when it starts, from the desktop app and `strata serve` alike. A setting an environment
variable sets is shown greyed out with the variable's name: the environment wins, as it does for the service.
Covered by tests/gui/test_gui_settings.py.
"""
from __future__ import annotations

import os
import secrets

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox, QDialog, QDialogButtonBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit,
    QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

from app import settings
from app.gui.chat import mcp_tools
from app.settings import BY_KEY, EXTERNAL_SOURCES, SOURCE_LABELS, SettingsError

INT_MAX = {"num_parallel": 256, "num_ctx": 1 << 20, "num_threads": 1024, "prompt_cache_mib": 1 << 20,
           "ctx_checkpoints": 1024, "checkpoint_mib": 1 << 20, "gpu_margin_mib": 1 << 20, "cache_reuse": 1 << 20,
           "max_memory_mib": 1 << 30}


def split_host(host: str) -> tuple[str, int]:
    """"127.0.0.1:11434" -> ("127.0.0.1", 11434); "[::1]:8080" -> ("::1", 8080); no port -> 11434."""
    h = host.strip().removeprefix("http://").removeprefix("https://").rstrip("/")
    if h.startswith("["):
        addr, _, rest = h[1:].partition("]")
        return addr, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else 11434
    if h.count(":") == 1:
        addr, port = h.split(":")
        return addr or "127.0.0.1", int(port) if port.isdigit() else 11434
    return h or "127.0.0.1", 11434


def join_host(addr: str, port: int) -> str:
    addr = addr.strip() or "127.0.0.1"
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


class SettingsDialog(QDialog):
    saved = Signal(str)          # the file's path

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Strata — Settings")
        self.resize(640, 560)
        self.fields: dict[str, QWidget] = {}
        self.env = settings.overridden()
        lay = QVBoxLayout(self)
        lay.addWidget(self._build_server())
        lay.addWidget(self._build_models())
        lay.addWidget(self._build_sources())
        lay.addWidget(self._build_mcp())
        lay.addStretch(1)
        self.message = QLabel()
        self.message.setObjectName("settingsMessage")
        self.message.setWordWrap(True)
        lay.addWidget(self.message)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Cancel
                                        | QDialogButtonBox.RestoreDefaults)
        self.buttons.accepted.connect(lambda: self.save())
        self.buttons.rejected.connect(self.reject)
        self.buttons.button(QDialogButtonBox.RestoreDefaults).clicked.connect(lambda: self.show_values({}))
        lay.addWidget(self.buttons)
        self.reload()

    # construction --------------------------------------------------------------------------------------------
    def _row(self, form: QFormLayout, key: str, widget: QWidget) -> None:
        s = BY_KEY[key]
        widget.setObjectName(key)
        widget.setToolTip(s.help)
        self.fields[key] = widget
        label = QLabel(s.label)
        label.setToolTip(s.help)
        if key in self.env:      # the environment wins: say so and with what; the file's value does not apply
            var = self.env[key]
            shown = "…" if key == "api_key" else os.environ.get(var, "")
            widget.setEnabled(False)
            widget.setToolTip(f"Set by the environment variable {var}, which wins over this file.")
            label.setText(f"{s.label} ({var}={shown})")
        form.addRow(label, widget)

    def _spin(self, key: str) -> QSpinBox:
        sb = QSpinBox()
        sb.setRange(BY_KEY[key].minimum, INT_MAX[key])
        return sb

    def _build_server(self) -> QGroupBox:
        box = QGroupBox("Server")
        form = QFormLayout(box)
        host = QWidget()
        hl = QHBoxLayout(host)
        hl.setContentsMargins(0, 0, 0, 0)
        self.address = QLineEdit()
        self.address.setObjectName("address")
        self.port = QSpinBox()
        self.port.setObjectName("port")
        self.port.setRange(1, 65535)
        hl.addWidget(self.address, 1)
        hl.addWidget(QLabel("port"))
        hl.addWidget(self.port)
        self._row(form, "host", host)
        key = QWidget()
        kl = QHBoxLayout(key)
        kl.setContentsMargins(0, 0, 0, 0)
        self.api_key = QLineEdit()
        self.api_key.setObjectName("apiKeyEdit")
        self.api_key.setEchoMode(QLineEdit.PasswordEchoOnEdit)
        self.api_key.setPlaceholderText("(none: anyone on this machine may call the API)")
        generate = QPushButton("Generate")
        generate.setObjectName("generateKey")
        generate.clicked.connect(lambda: self.api_key.setText(secrets.token_urlsafe(24)))
        kl.addWidget(self.api_key, 1)
        kl.addWidget(generate)
        self._row(form, "api_key", key)
        self.origins = QPlainTextEdit()
        self.origins.setPlaceholderText("one per line, e.g. https://app.example.com")
        self.origins.setMaximumHeight(60)
        self._row(form, "origins", self.origins)
        self.rpc_workers = QPlainTextEdit()
        self.rpc_workers.setPlaceholderText("one host:port per line (strata worker on another computer)")
        self.rpc_workers.setMaximumHeight(48)
        self._row(form, "rpc_workers", self.rpc_workers)
        self.request_bodies = QCheckBox("keep each request's and reply's body (credentials masked)")
        self._row(form, "request_bodies", self.request_bodies)
        return box

    def _build_models(self) -> QGroupBox:
        box = QGroupBox("Models")
        form = QFormLayout(box)
        for key in ("num_parallel", "num_ctx", "num_threads", "prompt_cache_mib", "ctx_checkpoints", "checkpoint_mib",
                    "cache_reuse", "gpu_margin_mib", "max_memory_mib"):
            self._row(form, key, self._spin(key))
        self.fields["max_memory_mib"].setSpecialValueText("no cap")
        self.fields["max_memory_mib"].setSingleStep(1024)
        self.fields["num_threads"].setSpecialValueText("automatic (the physical cores)")
        self.fields["prompt_cache_mib"].setSpecialValueText("automatic (10% of free RAM, at most 4 GiB)")   # -1; 0 = off
        self.fields["num_ctx"].setSingleStep(1024)
        self.fields["gpu_margin_mib"].setSingleStep(128)
        self.keep_alive = QLineEdit()
        self._row(form, "keep_alive", self.keep_alive)
        return box

    def _build_sources(self) -> QGroupBox:
        box = QGroupBox("Other apps' folders to scan for models (read-only: nothing is copied or changed)")
        bl = QVBoxLayout(box)
        holder = QWidget()
        hl = QVBoxLayout(holder)
        hl.setContentsMargins(0, 0, 0, 0)
        self.sources = {}
        for src in EXTERNAL_SOURCES:
            cb = QCheckBox(SOURCE_LABELS[src])
            cb.setObjectName(f"scan_{src}")
            self.sources[src] = cb
            hl.addWidget(cb)
        form = QFormLayout()
        self._row(form, "external_sources", holder)
        bl.addLayout(form)
        return box

    def _build_mcp(self) -> QGroupBox:
        """MCP servers in the `mcpServers` JSON other apps use; kept in mcp.json (the desktop app's alone)."""
        box = QGroupBox("Tools: MCP servers (the mcpServers JSON of Claude Desktop, LM Studio, Cursor)")
        bl = QVBoxLayout(box)
        self.mcp = QPlainTextEdit()
        self.mcp.setObjectName("mcpServers")
        self.mcp.setPlaceholderText('{"mcpServers": {"files": {"command": "npx", "args": ["-y", '
                                    '"@modelcontextprotocol/server-filesystem", "/home/me/notes"]},\n'
                                    '                "remote": {"url": "http://127.0.0.1:8000/mcp"}}}')
        self.mcp.setToolTip("A server started as a command (stdio: command, args, env) or reached at a URL "
                            "(streamable HTTP). Each chat picks which of them it uses (the Tools button); every "
                            "call asks you first.")
        self.mcp.setMaximumHeight(90)
        bl.addWidget(self.mcp)
        return box

    # values --------------------------------------------------------------------------------------------------
    def reload(self) -> None:
        self.mcp.setPlainText(mcp_tools.config_text())
        try:
            self.show_values(settings.load())
            self.message.setText(f"Stored in {settings.settings_path()}. The service reads it when it starts.")
        except SettingsError as e:
            self.show_values({})
            self.message.setText(f"The settings file has a problem ({e}); saving replaces it.")

    def show_values(self, saved: dict) -> None:
        v = {s.key: s.default for s in settings.SETTINGS}
        v.update(saved)
        addr, port = split_host(v["host"])
        self.address.setText(addr)
        self.port.setValue(port)
        self.api_key.setText(v["api_key"])
        self.origins.setPlainText("\n".join(v["origins"]))
        self.rpc_workers.setPlainText("\n".join(v["rpc_workers"]))
        for key in INT_MAX:
            self.fields[key].setValue(v[key])
        self.keep_alive.setText(v["keep_alive"])
        self.request_bodies.setChecked(bool(v["request_bodies"]))
        for src, cb in self.sources.items():
            cb.setChecked(src in v["external_sources"])

    def values(self) -> dict:
        out = {"host": join_host(self.address.text(), self.port.value()), "api_key": self.api_key.text().strip(),
               "origins": [o.strip() for o in self.origins.toPlainText().splitlines() if o.strip()],
               "rpc_workers": [w.strip() for w in self.rpc_workers.toPlainText().splitlines() if w.strip()],
               "keep_alive": self.keep_alive.text().strip(),
               "request_bodies": int(self.request_bodies.isChecked()),
               "external_sources": [s for s, cb in self.sources.items() if cb.isChecked()]}
        out.update({key: self.fields[key].value() for key in INT_MAX})
        return out

    def save(self) -> bool:
        """Write the file; on a refusal say which setting and keep the dialog open."""
        try:
            mcp_tools.save_config(self.mcp.toPlainText())
        except ValueError as e:
            self.message.setText(f"Not saved: MCP servers: {e}")
            return False
        try:
            path = settings.save(self.values())
        except SettingsError as e:
            self.message.setText(f"Not saved: {e}")
            return False
        self.message.setText(f"Saved to {path}.")
        self.saved.emit(str(path))
        self.accept()
        return True


RESTART_NOTE = "Settings saved. The service uses them from its next start: quit Strata and open it again."
