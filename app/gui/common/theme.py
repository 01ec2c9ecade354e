"""Light or dark, as the system says: the style sheet (resources/style.qss or style-dark.qss), a dark palette
where the platform's own stays light (Fusion on a bare X server), and a signal when the system switches, so
the chat re-renders its code blocks in the matching Pygments style."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

# the repository's (or the frozen bundle's) resources/, beside app/: this file is app/gui/common/theme.py
RESOURCES = Path(__file__).resolve().parents[3] / "resources"


def system_is_dark() -> bool:
    """The system's colour scheme (Qt's style hints); where it does not say, the palette's lightness."""
    scheme = QGuiApplication.styleHints().colorScheme()
    if scheme != Qt.ColorScheme.Unknown:
        return scheme == Qt.ColorScheme.Dark
    return palette_is_dark()


def palette_is_dark(palette: QPalette | None = None) -> bool:
    """The palette's window is darker than its text (what is on screen now)."""
    p = palette or QGuiApplication.palette()
    return p.color(QPalette.Window).lightness() < p.color(QPalette.WindowText).lightness()


def style_sheet(dark: bool = False) -> str:
    f = RESOURCES / ("style-dark.qss" if dark else "style.qss")
    return f.read_text() if f.is_file() else ""


def dark_palette() -> QPalette:
    p = QPalette()
    for role, color in ((QPalette.Window, "#1e2227"), (QPalette.WindowText, "#e9ecef"), (QPalette.Base, "#23272e"),
                        (QPalette.AlternateBase, "#2a2f37"), (QPalette.Text, "#e9ecef"), (QPalette.Button, "#2f343c"),
                        (QPalette.ButtonText, "#e9ecef"), (QPalette.Highlight, "#2f5582"),
                        (QPalette.HighlightedText, "#ffffff"), (QPalette.ToolTipBase, "#2a2f37"),
                        (QPalette.ToolTipText, "#e9ecef"), (QPalette.PlaceholderText, "#868e96"),
                        (QPalette.Link, "#74a7e0")):
        p.setColor(role, QColor(color))
    for role in (QPalette.WindowText, QPalette.Text, QPalette.ButtonText):
        p.setColor(QPalette.Disabled, role, QColor("#6c757d"))
    return p


def apply_theme(app: QApplication, dark: bool) -> None:
    """Our style sheet for `dark`; when dark and the platform's palette is still light, Fusion with a dark
    palette (otherwise the platform's own dark palette is kept)."""
    window = app.palette().color(QPalette.Window)
    if dark and window.lightness() > 128:
        app.setStyle(QStyleFactory.create("Fusion"))
        app.setPalette(dark_palette())
    elif not dark and window.lightness() <= 128:
        app.setPalette(app.style().standardPalette())
    app.setStyleSheet(style_sheet(dark))          # last: setting it repolishes every widget with the palette
