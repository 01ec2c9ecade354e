"""Files attached to a chat message: read, shown as removable chips over the message box. Text and code files go
into the message with their names; when they do not fit the context left (counted with the model's tokenizer
through the API before sending), each one that does not fit is cut and the message says so. Images (a file, or
image data pasted) go with the message as images (a vision model reads them; the service refuses them for a
model without the capability `vision`), are saved with the conversation and shown as thumbnails.
Covered by tests/gui/test_gui_attachments.py."""
from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget

MAX_BYTES = 4 << 20          # read at most this much of a file (a bigger one is cut at once, and says so)
MAX_IMAGE_BYTES = 20 << 20   # the service's limit per image (docs: README "Images")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
THUMB = 48                   # thumbnail height in pixels
CUT_MARGIN = 0.95            # characters kept = this x the share of tokens that fits (token sizes vary)


@dataclass
class Attachment:
    name: str
    text: str
    cut_on_read: bool = False          # the file was bigger than MAX_BYTES
    image: bytes | None = None         # an image (its file's bytes): sent as an image, not as text


@dataclass
class Fitted:
    attachment: Attachment
    text: str                          # what goes into the message
    note: str = ""                     # "" when whole; else what was cut and why


def local_files(mime) -> list[str]:
    """The local files in a drop or a paste (remote URLs are not attachable)."""
    if mime is None or not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls() if u.isLocalFile() and Path(u.toLocalFile()).is_file()]


def read_attachment(path: str | Path) -> Attachment:
    """A UTF-8 text file (code, Markdown, CSV, logs...) or an image Qt can read. Anything else raises ValueError
    saying why."""
    p = Path(path)
    if p.suffix.lower() in IMAGE_SUFFIXES:
        return _read_image(p)
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ValueError(f"cannot read {p.name}: {e.strerror or e}") from e
    cut = len(data) > MAX_BYTES
    data = data[:MAX_BYTES]
    if b"\0" in data:
        raise ValueError(f"{p.name} is not a text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if not cut or e.start < len(data) - 4:        # (a cut may split the last character)
            raise ValueError(f"{p.name} is not UTF-8 text") from None
        text = data[:e.start].decode("utf-8")
    return Attachment(p.name, text, cut)


def _read_image(p: Path) -> Attachment:
    try:
        data = p.read_bytes() if p.stat().st_size <= MAX_IMAGE_BYTES else None
    except OSError as e:
        raise ValueError(f"cannot read {p.name}: {e.strerror or e}") from e
    if data is None:
        raise ValueError(f"{p.name} is larger than {MAX_IMAGE_BYTES >> 20} MiB")
    if QImage.fromData(data).isNull():
        raise ValueError(f"{p.name} is not a text file (nor an image that can be read)")
    return Attachment(p.name, "", image=data)


def pasted_image(image: QImage, n: int) -> Attachment:
    """Image data pasted (a screenshot): PNG-encoded, named pasted-N.png."""
    buf = QBuffer()
    buf.open(QIODevice.WriteOnly)
    image.save(buf, "PNG")
    return Attachment(f"pasted-{n}.png", "", image=bytes(buf.data()))


def images_block(attachments: list[Attachment]) -> list[str]:
    """The images of a message as the conversation saves them and the API takes them: base64."""
    return [base64.b64encode(a.image).decode() for a in attachments if a.image]


def thumbnail(data: bytes, height: int = THUMB) -> QLabel:
    label = QLabel()
    label.setObjectName("imageThumbnail")
    pix = QPixmap()
    pix.loadFromData(QByteArray(data))
    if not pix.isNull():
        label.setPixmap(pix.scaledToHeight(height, Qt.SmoothTransformation))
    return label


class Thumbnails(QWidget):
    """A message's images (base64, as saved), in a row of thumbnails."""

    def __init__(self, images_b64: list[str], parent=None):
        super().__init__(parent)
        self.setObjectName("messageImages")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for b in images_b64:
            row.addWidget(thumbnail(base64.b64decode(b)))
        row.addStretch(1)


def fit(attachments: list[Attachment], token_counts: list[int], budget: int) -> list[Fitted]:
    """Keep files whole in order while they fit `budget` tokens; the first that does not is cut to what is left
    (proportionally, by characters, with a margin), and any after it get nothing but a note."""
    out, left = [], max(0, budget)
    for a, n in zip(attachments, token_counts):
        if n <= left:
            out.append(Fitted(a, a.text, "cut: the file was larger than 4 MiB" if a.cut_on_read else ""))
            left -= n
            continue
        keep = int(len(a.text) * left / max(1, n) * CUT_MARGIN) if left > 0 else 0
        out.append(Fitted(a, a.text[:keep], f"cut to fit the context: {keep:,} of {len(a.text):,} characters "
                                             f"kept (about {left:,} of {n:,} tokens)"))
        left = 0
    return out


def message_with(text: str, fitted: list[Fitted]) -> str:
    """The message as sent and saved: the user's text, then each file by name in a fence."""
    parts = [text.rstrip()] if text.strip() else []
    for f in fitted:
        fence = "````" if "```" in f.text else "```"
        head = f"**{f.attachment.name}**" + (f" ({f.note})" if f.note else "")
        parts.append(f"{head}\n\n{fence}\n{f.text}\n{fence}")
    return "\n\n".join(parts)


class AttachmentBar(QWidget):
    """The files attached to the message being written, each with a × to remove it; hidden when none."""
    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("attachmentBar")
        self.items: list[Attachment] = []
        self.row = QHBoxLayout(self)
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)
        self.setVisible(False)

    def add(self, a: Attachment) -> None:
        self.items.append(a)
        self._rebuild()

    def add_files(self, paths: list[str]) -> list[str]:
        """Read each file (in the GUI thread: at most 4 MiB each) and attach it; returns why each one that is not
        text or an image was left out."""
        refused = []
        for path in paths:
            try:
                self.add(read_attachment(path))
            except ValueError as e:
                refused.append(str(e))
        return refused

    def add_pasted(self, image: QImage) -> None:
        """Image data pasted (a screenshot): attached as a PNG."""
        if image is not None and not image.isNull():
            self.add(pasted_image(image, sum(1 for a in self.items if a.name.startswith("pasted-")) + 1))

    def remove(self, a: Attachment) -> None:
        self.items.remove(a)
        self._rebuild()

    def clear(self) -> None:
        self.items = []
        self._rebuild()

    def _rebuild(self) -> None:
        while self.row.count() > 1:
            w = self.row.takeAt(0).widget()
            if w is not None:
                w.hide()
                w.setParent(None)
                w.deleteLater()
        for a in self.items:
            chip = QWidget()
            chip.setObjectName("attachmentChip")
            cl = QHBoxLayout(chip)
            cl.setContentsMargins(6, 0, 0, 0)
            if a.image:
                cl.addWidget(thumbnail(a.image, 24))
            label = QLabel(f"🖼 {a.name}" if a.image else f"📄 {a.name} ({len(a.text):,} characters)")
            x = QToolButton()
            x.setObjectName("removeAttachment")
            x.setText("×")
            x.setToolTip(f"Remove {a.name}")
            x.setAutoRaise(True)
            x.clicked.connect(lambda _c=False, a=a: self.remove(a))
            cl.addWidget(label)
            cl.addWidget(x)
            self.row.insertWidget(self.row.count() - 1, chip)
        self.setVisible(bool(self.items))
        self.changed.emit()
