"""A chat's sampling options beyond temperature and context (top_p, top_k, repeat penalty, seed, stop strings),
as a row under the chat's header. Each field's lowest value means "not sent" (the model's or service's default),
so a chat stores only what the user chose; `changed` carries the Ollama `options` to save with the chat.
Covered by tests/gui/test_gui_chat_buttons.py (the chat window's options)."""
from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QLineEdit, QSpinBox, QWidget

from app.gui.chat.history import AUTO_CTX

STOP_SEPARATOR = "|"
MIN_CTX = 256             # the smallest context a user can set (llama.cpp pads n_ctx to 256)
CTX_STEP = 1024


class ContextBox(QSpinBox):
    """A chat's context length: "auto" (AUTO_CTX, its lowest value) sends no num_ctx, so the service gives the
    largest context that fits the measured memory and grows it when a prompt needs more; any other value is the
    user's and is sent. Values between auto and MIN_CTX are never taken (typing "5" on the way to "512" is
    not a context of 5), and the arrows step from auto to CTX_STEP and from below MIN_CTX + CTX_STEP back to auto."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setRange(AUTO_CTX, 1 << 20)
        self.setSingleStep(CTX_STEP)
        self.setSpecialValueText("auto")
        self.setValue(AUTO_CTX)
        self.setToolTip("Context length in tokens. auto: the service picks the largest that fits in memory "
                        "(and grows it when a long prompt needs more); a number is sent as num_ctx")

    def validate(self, text: str, pos: int):
        state, text, pos = super().validate(text, pos)
        if state == QValidator.Acceptable and text.strip() != self.specialValueText():
            v = self.valueFromText(text)
            if AUTO_CTX < v < MIN_CTX:
                state = QValidator.Intermediate
        return state, text, pos

    def stepBy(self, steps: int) -> None:
        v = self.value()
        if v == AUTO_CTX and steps > 0:
            self.setValue(CTX_STEP * steps)
        elif steps < 0 and v + steps * CTX_STEP < MIN_CTX:
            self.setValue(AUTO_CTX)
        else:
            super().stepBy(steps)


def _double(lo: float, hi: float, step: float, decimals: int = 2) -> QDoubleSpinBox:
    sb = QDoubleSpinBox()
    sb.setRange(lo, hi)
    sb.setSingleStep(step)
    sb.setDecimals(decimals)
    sb.setSpecialValueText("default")
    return sb


class ChatOptions(QWidget):
    changed = Signal(dict)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("chatOptions")
        self.top_p = _double(0.0, 1.0, 0.05)
        self.top_p.setToolTip("Nucleus sampling: keep the most likely tokens whose probabilities add up to this")
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setSpecialValueText("default")
        self.top_k.setToolTip("Sample only among this many most likely tokens")
        self.repeat_penalty = _double(0.0, 3.0, 0.05)
        self.repeat_penalty.setToolTip("Above 1 makes repeating recent tokens less likely")
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(-1)          # random until the user sets one (a spin box starts at 0: seed 0 for all)
        self.seed.setToolTip("The same seed, prompt and settings give the same reply")
        self.stop = QLineEdit()
        self.stop.setPlaceholderText(f"stop strings, separated by {STOP_SEPARATOR}")
        self.stop.setToolTip(f"The reply ends before any of these strings (separate several with {STOP_SEPARATOR})")
        fields = (("Top P", self.top_p), ("Top K", self.top_k), ("Repeat penalty", self.repeat_penalty),
                  ("Seed", self.seed), ("Stop", self.stop))
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for label, w in fields:
            w.setObjectName(f"option_{label.lower().replace(' ', '_')}")
            lay.addWidget(QLabel(label))
            lay.addWidget(w, 2 if w is self.stop else 0)
        for sb in (self.top_p, self.top_k, self.repeat_penalty, self.seed):
            sb.valueChanged.connect(lambda _v: self.changed.emit(self.values()))
        self.stop.editingFinished.connect(lambda: self.changed.emit(self.values()))

    def values(self) -> dict:
        out: dict = {}
        if self.top_p.value() > 0:
            out["top_p"] = round(self.top_p.value(), 4)
        if self.top_k.value() > 0:
            out["top_k"] = self.top_k.value()
        if self.repeat_penalty.value() > 0:
            out["repeat_penalty"] = round(self.repeat_penalty.value(), 4)
        if self.seed.value() >= 0:
            out["seed"] = self.seed.value()
        stops = [s for s in (p.strip() for p in self.stop.text().split(STOP_SEPARATOR)) if s]
        if stops:
            out["stop"] = stops
        return out

    def set_values(self, options: dict) -> None:
        """Show a chat's options without announcing a change."""
        for w, key, empty in ((self.top_p, "top_p", 0.0), (self.top_k, "top_k", 0),
                              (self.repeat_penalty, "repeat_penalty", 0.0), (self.seed, "seed", -1)):
            w.blockSignals(True)
            w.setValue(options.get(key, empty))
            w.blockSignals(False)
        self.stop.setText(f" {STOP_SEPARATOR} ".join(options.get("stop") or []))
