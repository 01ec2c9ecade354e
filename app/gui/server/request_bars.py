"""The selected request drawn to scale, painted with QPainter: its time cut into phases (`TimelineView`) and its
prompt's tokens cut into parts (`AnatomyBar`); the numbers come from server_data (timeline, anatomy_segments).
Covered by tests/gui/test_gui_server.py (segments, their widths and tooltips)."""
from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette, QPen
from PySide6.QtWidgets import QWidget

from app.gui.server.server_data import PART_COLORS, PHASE_COLORS, PHASE_HELP, _ms, anatomy_segments, timeline


class TimelineView(QWidget):
    """One request's time, to scale: a bar cut into its phases (prepare, load, queued, prefill, decode, finish),
    a mark at the first token, each part's name and length under it."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.record: dict | None = None
        self.setMinimumHeight(64)

    def set_record(self, rec: dict | None) -> None:
        self.record = rec
        parts = timeline(rec) if rec else []
        self.setToolTip("\n".join(f"{n}: {_ms(s)} ({PHASE_HELP.get(n, n)})" for n, _, s in parts))
        self.update()

    def parts(self) -> list[tuple[str, float, float]]:
        return timeline(self.record) if self.record else []

    def segment_rects(self) -> list[tuple[str, QRectF]]:
        """Where each phase is drawn: widths in proportion to its seconds (what tests measure)."""
        parts = self.parts()
        total = sum(s for _, _, s in parts)
        left, width = 8.0, max(1.0, self.width() - 16.0)
        out = []
        for name, start, secs in parts:
            x = left + (start / total * width if total > 0 else 0.0)
            w = secs / total * width if total > 0 else 0.0
            out.append((name, QRectF(x, 8.0, w, 22.0)))
        return out

    def paintEvent(self, _ev) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        text = self.palette().color(QPalette.WindowText)
        if not self.record:
            p.setPen(text)
            p.drawText(self.rect(), Qt.AlignCenter, "Select a request to see where its time went.")
            return
        rects = self.segment_rects()
        fm = p.fontMetrics()
        for name, r in rects:
            p.fillRect(r, QColor(PHASE_COLORS.get(name, "#888888")))
        # the legend under the bar: each part's colour, name and length, in order (wrapping when narrow)
        x, y = 8, 36
        for name, _, secs in self.parts():
            label = f"{name} {_ms(secs)}"
            w = 14 + fm.horizontalAdvance(label) + 14
            if x + w > self.width() and x > 8:
                x, y = 8, y + fm.height() + 2
            p.fillRect(QRectF(x, y + (fm.height() - 10) / 2, 10, 10), QColor(PHASE_COLORS.get(name, "#888888")))
            p.setPen(text)
            p.drawText(x + 14, y + fm.ascent(), label)
            x += w
        ttft = self.record.get("ttft")
        total = sum(s for _, _, s in self.parts())
        if ttft is not None and total > 0:
            x = 8.0 + ttft / total * max(1.0, self.width() - 16.0)
            p.setPen(QPen(text, 2))
            p.drawLine(int(x), 4, int(x), 34)
            p.drawText(int(x) + 3, 4 + fm.ascent(), "first token")
        p.end()


class AnatomyBar(QWidget):
    """Where a prompt's tokens went, to scale: the system message, each tool's schema, the template's text and
    the history by turn, each segment's width in proportion to its tokens; the tokens this request computed (after
    its cached prefix) hatched."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.segments: list[dict] = []
        self.setMinimumHeight(44)

    def set_report(self, cache: dict | None) -> None:
        self.segments = anatomy_segments(cache)
        self.setToolTip("\n".join(f"{s['name']}: {s['tokens']:,} tokens" + (" computed" if s["computed"] else
                                                                            " from the cache")
                                   + (f", {_ms(s['seconds'])} to compute" if s.get("seconds") else "")
                                   for s in self.segments))
        self.update()

    def segment_rects(self) -> list[tuple[dict, QRectF]]:
        total = sum(s["tokens"] for s in self.segments)
        left, width = 8.0, max(1.0, self.width() - 16.0)
        out, x = [], left
        for seg in self.segments:
            w = seg["tokens"] / total * width if total else 0.0
            out.append((seg, QRectF(x, 6.0, w, 18.0)))
            x += w
        return out

    def paintEvent(self, _ev) -> None:
        p = QPainter(self)
        text = self.palette().color(QPalette.WindowText)
        if not self.segments:
            p.setPen(text)
            p.drawText(self.rect(), Qt.AlignCenter, "No prompt anatomy for this request.")
            return
        hatch = QBrush(QColor(255, 255, 255, 150), Qt.BDiagPattern)
        for seg, r in self.segment_rects():
            p.fillRect(r, QColor(PART_COLORS.get(seg["kind"], "#888888")))
            if seg["computed"]:
                p.fillRect(r, hatch)
            if r.width() >= 3:
                p.setPen(QPen(self.palette().color(QPalette.Base), 1))
                p.drawLine(r.topRight(), r.bottomRight())
        fm = p.fontMetrics()
        x, y = 8, 30
        totals: dict[str, int] = {}
        for seg in self.segments:
            totals[seg["kind"]] = totals.get(seg["kind"], 0) + seg["tokens"]
        names = {"system": "system", "tool": "tools", "template": "template", "message": "history"}
        legend = [(f"{names.get(k, k)} {n:,}", QColor(PART_COLORS.get(k, "#888888")), False)
                  for k, n in totals.items()]
        legend.append((f"computed {sum(s['tokens'] for s in self.segments if s['computed']):,}", QColor("#888888"),
                       True))
        for label, color, hatched in legend:
            box = QRectF(x, y + (fm.height() - 10) / 2, 10, 10)
            p.fillRect(box, color)
            if hatched:
                p.fillRect(box, hatch)
            p.setPen(text)
            p.drawText(x + 14, y + fm.ascent(), label)
            x += 14 + fm.horizontalAdvance(label) + 14
        p.end()
