"""What the windows know about the service: installed models, running models, pins and keep-alives, devices, load
progress.

Kept fresh by the service's event stream (`/api/events`) plus a slow poll (for changes no event announces,
like a model created from the command line). All requests are asynchronous through the bridge.
Covered by tests/gui/test_gui_e2e.py and tests/gui/test_gui_manager.py (kept fresh from /api/events).
"""
from __future__ import annotations

from PySide6.QtCore import QObject, QTimer, Signal

from app.format import format_bytes
from app.gui.common.bridge import ServiceBridge


class ServiceState(QObject):
    models_changed = Signal()              # tags or ps changed
    devices_changed = Signal()
    load_progress = Signal(str, float)     # model, 0..1
    load_finished = Signal(str, object)    # model, event data (layout, actual)
    load_failed = Signal(str, str)         # model, error
    unloaded = Signal(str)
    error = Signal(str)                    # a request failed (service down, ...)
    system_known = Signal(str)             # a model's default system prompt has come (`model_system`)

    def __init__(self, bridge: ServiceBridge, poll_ms: int = 5000, parent: QObject | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.tags: list[dict] = []
        self.ps: list[dict] = []
        self.pins: dict[str, dict] = {}            # /api/pin: each model's pin and own keep-alive, by name
        self.inventory: dict | None = None
        self.progress: dict[str, float] = {}       # model -> progress while loading
        self.connected = False
        self.systems: dict[str, str] = {}          # each model's default system prompt (/api/show)
        self._refreshing = False
        self._dirty = False
        bridge.event.connect(self._on_event)
        bridge.connection.connect(self._on_connection)
        self._timer = QTimer(self)
        self._timer.setInterval(poll_ms)
        self._timer.timeout.connect(self.refresh)

    def start(self) -> None:
        self.bridge.start_events()
        self.refresh()
        self.refresh_devices()
        self._timer.start()

    # queries ---------------------------------------------------------------------------------------------------
    def running(self, name: str) -> dict | None:
        for m in self.ps:
            if m.get("name") == name or m.get("model") == name:
                return m
        return None

    def model_state(self, name: str) -> str:
        """"loaded" | "loading" | "failed" | "" for one installed model."""
        if name in self.progress:
            return "loading"
        m = self.running(name)
        if m is None:
            return ""
        return (m.get("strata") or {}).get("state", "loaded")

    def model_system(self, name: str) -> str | None:
        """The model's own default system prompt (/api/show "system"); None when this call asked for it (asked
        once per model: `system_known(name)` when it has come)."""
        if name in self.systems:
            return self.systems[name]
        self.systems[name] = ""
        call = self.bridge.call(lambda c: c.show(name))
        call.finished.connect(lambda r: (self.systems.__setitem__(name, (r or {}).get("system") or ""),
                                         self.system_known.emit(name)))
        return None

    def only_builtin(self) -> bool:
        """The model list has come (or the service answered) and the built-in model is all it holds."""
        sources = {(m.get("strata") or {}).get("source", "store") for m in self.tags}
        return (bool(self.tags) or self.connected) and sources <= {"builtin"}

    def model_status(self, name: str) -> str:
        """A word on `name` (the model picked, "" none) beside a model picker that already says "loaded"."""
        if not name:
            return "No models installed" if self.connected or self.tags else ""
        st = self.model_state(name)
        if st == "loading":
            return f"loading {int(100 * self.progress.get(name, 0))}%"
        return {"loaded": "", "failed": "failed to load"}.get(st, "loads on first message")

    def installed_names(self) -> list[str]:
        return [m.get("name") or m.get("model") for m in self.tags]

    # refresh ---------------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        if self._refreshing:          # one refresh at a time; remember to run again when it ends
            self._dirty = True
            return
        self._refreshing = True

        async def both(client):
            return await client.tags(), await client.ps(), await client.pins()

        call = self.bridge.call(both)
        call.finished.connect(self._on_models)
        call.failed.connect(self._on_refresh_failed)

    def _on_models(self, result) -> None:
        self._refreshing = False
        tags, ps, pin_list = result
        pins = {p["name"]: p for p in pin_list}
        for m in ps:
            st = m.get("strata") or {}
            name = m.get("name") or m.get("model")
            if st.get("state") == "loading":
                self.progress[name] = float(st.get("progress") or 0.0)
            else:
                self.progress.pop(name, None)
        if tags != self.tags or ps != self.ps or pins != self.pins:
            self.tags, self.ps, self.pins = tags, ps, pins
            self.models_changed.emit()
        if self._dirty:
            self._dirty = False
            self.refresh()

    def _on_refresh_failed(self, msg: str) -> None:
        self._refreshing = False
        self._dirty = False
        self.error.emit(msg)

    def refresh_devices(self) -> None:
        call = self.bridge.call(lambda c: c.devices())
        call.finished.connect(self._on_devices)
        call.failed.connect(self.error.emit)

    def _on_devices(self, inv) -> None:
        self.inventory = inv
        self.devices_changed.emit()

    # events ----------------------------------------------------------------------------------------------------
    def _on_connection(self, up: bool) -> None:
        if up and not self.connected:
            self.refresh()
            self.refresh_devices()
        self.connected = up

    def _on_event(self, etype: str, data) -> None:
        data = data or {}
        model = data.get("model", "")
        if etype == "load_started":
            self.progress[model] = 0.0
            self.load_progress.emit(model, 0.0)
            self.models_changed.emit()
        elif etype == "load_progress":
            self.progress[model] = float(data.get("progress") or 0.0)
            self.load_progress.emit(model, self.progress[model])
        elif etype == "model_settings":          # a pin or keep-alive set (here, by the CLI or the API)
            self.refresh()
        elif etype == "loaded":
            self.progress.pop(model, None)
            self.load_finished.emit(model, data)
            self.refresh()
        elif etype == "load_failed":
            self.progress.pop(model, None)
            self.load_failed.emit(model, str(data.get("error") or "load failed"))
            self.refresh()
        elif etype == "unloaded":
            self.progress.pop(model, None)
            self.unloaded.emit(model)
            self.refresh()
        elif etype == "memory":
            if data.get("inventory"):      # what the loaded models leave; the cap itself, as /api/devices says it
                self.inventory = {**data["inventory"], "memory_cap": data.get("memory_cap")}
                self.devices_changed.emit()


def cap_text(inventory: dict | None, ps: list[dict]) -> str:
    """Strata's memory cap (STRATA_MAX_MEMORY / Settings) and what the loaded models hold of it, for the model
    manager and the memory view."""
    cap = (inventory or {}).get("memory_cap")
    used = sum(int(m.get("size") or 0) for m in ps)
    pinned = [m.get("name") or m.get("model") for m in ps if (m.get("strata") or {}).get("pinned")]
    pins = f"; pinned: {', '.join(pinned)}" if pinned else ""
    if not cap:
        return f"No memory cap: loaded models hold {format_bytes(used)} (Settings → Memory cap){pins}"
    return (f"Memory cap {format_bytes(int(cap))}: loaded models hold {format_bytes(used)}, "
            f"{format_bytes(max(0, int(cap) - used))} left{pins}")
