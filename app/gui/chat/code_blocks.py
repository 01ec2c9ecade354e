"""Code blocks in a rendered message: found in the QTextDocument Qt's Markdown importer made, coloured with
Pygments (token colours from a light or dark Pygments style, chosen from the palette), each with a Copy button
over its top-right corner. The document's text is left as it is (selection and copy of the whole message see the
code exactly), only its formats change.

Qt's importer marks every line of a fenced or indented code block with BlockCodeLanguage (the fence's info string,
"" when none); lines of one block sit next to each other, so a block's text maps onto the document one to one.
Covered by tests/gui/test_gui_chat_messages.py (code fences in replies).
"""
from __future__ import annotations

from dataclasses import dataclass

from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.styles import get_style_by_name
from pygments.util import ClassNotFound
from PySide6.QtGui import (
    QColor, QFont, QFontDatabase, QGuiApplication, QTextBlockFormat, QTextCharFormat, QTextCursor,
    QTextDocument, QTextFormat,
)
from PySide6.QtWidgets import QToolButton

from app.gui.common.theme import palette_is_dark

LIGHT_STYLE, DARK_STYLE = "default", "monokai"


@dataclass
class Fence:
    first_block: int          # block number of its first line
    position: int             # document position of its first character
    language: str
    text: str


def find_fences(doc: QTextDocument) -> list[Fence]:
    fences: list[Fence] = []
    lines: list[str] = []
    start = None
    lang = None
    block = doc.begin()
    while True:
        code = block.isValid() and block.blockFormat().hasProperty(QTextFormat.BlockCodeLanguage)
        this_lang = str(block.blockFormat().property(QTextFormat.BlockCodeLanguage) or "") if code else None
        if start is not None and (not code or this_lang != lang):
            fences.append(Fence(start.blockNumber(), start.position(), lang or "", "\n".join(lines)))
            start, lines = None, []
        if not block.isValid():
            return fences
        if code:
            if start is None:
                start, lang = block, this_lang
            lines.append(block.text())
        block = block.next()


def lexer_for(language: str):
    name = (language.split() or [""])[0].lower()
    try:
        return get_lexer_by_name(name, stripnl=False, ensurenl=False) if name else TextLexer()
    except ClassNotFound:
        return TextLexer()


def _formats(style_name: str) -> tuple[dict, QColor]:
    style = get_style_by_name(style_name)
    out = {}
    for ttype, spec in style:
        f = QTextCharFormat()
        if spec["color"]:
            f.setForeground(QColor("#" + spec["color"]))
        if spec["bold"]:
            f.setFontWeight(QFont.Bold)
        if spec["italic"]:
            f.setFontItalic(True)
        out[ttype] = f
    return out, QColor(style.background_color or "#f8f8f8")


_CACHE: dict[str, tuple] = {}


def style_formats(dark: bool) -> tuple[dict, QColor]:
    name = DARK_STYLE if dark else LIGHT_STYLE
    if name not in _CACHE:
        _CACHE[name] = _formats(name)
    return _CACHE[name]


def highlight(doc: QTextDocument, fences: list[Fence], dark: bool | None = None) -> None:
    """Monospace font, the style's background and Pygments token colours on every fence."""
    formats, background = style_formats(palette_is_dark() if dark is None else dark)
    mono = QFontDatabase.systemFont(QFontDatabase.FixedFont)
    cur = QTextCursor(doc)
    cur.beginEditBlock()
    for fence in fences:
        end = fence.position + len(fence.text)
        cur.setPosition(fence.position)
        cur.setPosition(end, QTextCursor.KeepAnchor)
        bf = QTextBlockFormat()
        bf.setBackground(background)
        cur.mergeBlockFormat(bf)
        cf = QTextCharFormat()
        cf.setFontFamilies([mono.family()])
        cur.mergeCharFormat(cf)
        for index, ttype, value in lexer_for(fence.language).get_tokens_unprocessed(fence.text):
            while ttype is not None and ttype not in formats:
                ttype = ttype.parent
            f = formats.get(ttype)
            if f is None or not value or (not f.foreground().style() and not f.hasProperty(QTextFormat.FontWeight)
                                          and not f.fontItalic()):
                continue
            cur.setPosition(fence.position + index)
            cur.setPosition(fence.position + index + len(value), QTextCursor.KeepAnchor)
            cur.mergeCharFormat(f)
    cur.endEditBlock()


class CopyCodeButton(QToolButton):
    """"Copy" over a code block's top-right corner; puts the block's text on the clipboard."""

    def __init__(self, fence: Fence, parent=None):
        super().__init__(parent)
        self.fence = fence
        self.setObjectName("copyCode")
        self.setText("Copy")
        self.setToolTip(f"Copy this {fence.language + ' ' if fence.language else ''}code")
        self.setAutoRaise(True)
        self.clicked.connect(self.copy)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.fence.text)
        self.setText("Copied")
