"""Images in the chat window, against the real service: SmolLM2 made a vision model by the synthetic projector of
tests/support/mmproj_factory.py. An image attached by file and one pasted (a screenshot's image data) show as
thumbnails over the message box, go with the message to the model (which answers), are saved with the conversation
and shown as thumbnails in the history, also after the conversation is opened again; a file that is neither text
nor a readable image is refused by name."""
from __future__ import annotations

import base64
import io

import httpx
import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLabel

from gui_util import WAIT
from mmproj_factory import write_mlp_projector

VISION = "smollm2-vision:latest"


@pytest.fixture(scope="module")
def service(live_service, tmp_path_factory, smollm2_path):
    home = tmp_path_factory.mktemp("gui-vision")
    mmproj = write_mlp_projector(home / "mmproj.gguf")
    svc = live_service(n_threads=2, num_parallel=1, num_ctx=1024, keep_alive="10m", home=home)
    r = httpx.post(svc.url + "/api/create", json={"model": VISION, "from": str(smollm2_path),
                                                  "projector": str(mmproj), "stream": False}, timeout=120)
    assert r.status_code == 200, r.text
    yield svc


def test_attach_drop_and_paste_images_then_send(qtbot, service, tmp_path):
    from app.gui.desktop import Desktop

    desk = Desktop(service.url, use_tray=False, poll_ms=300)
    qtbot.addWidget(desk.chat)
    try:
        chat = desk.chat
        desk.open_chat()
        qtbot.waitUntil(lambda: VISION in desk.state.installed_names(), timeout=WAIT)
        chat.model_picker.setCurrentIndex(chat.models.row_of(VISION))
        chat.extra_options = {"num_predict": 3, "seed": 5}
        photo = tmp_path / "photo.png"
        Image.new("RGB", (64, 48), (200, 30, 30)).save(photo)
        broken = tmp_path / "broken.jpg"
        broken.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
        chat.attach_files([str(photo), str(broken)])
        assert [a.name for a in chat.attachment_bar.items] == ["photo.png"]
        assert "broken.jpg is not a text file (nor an image that can be read)" in chat.statusBar().currentMessage()
        shot = QImage(40, 30, QImage.Format_RGB32)
        shot.fill(QColor(10, 200, 10))
        pasted = QMimeData()
        pasted.setImageData(shot)
        QGuiApplication.clipboard().setMimeData(pasted)                 # a screenshot copied, then pasted
        chat.input.setFocus()
        QTest.keyClick(chat.input, Qt.Key_V, Qt.ControlModifier)
        assert [a.name for a in chat.attachment_bar.items] == ["photo.png", "pasted-1.png"]
        assert len(chat.attachment_bar.findChildren(QLabel, "imageThumbnail")) == 2
        QTest.keyClicks(chat.input, "What is in these pictures?")
        QTest.keyClick(chat.input, Qt.Key_Return)
        qtbot.waitUntil(lambda: not chat.busy and chat.transcript.messages[-1].role != "user", timeout=WAIT)
        reply = chat.transcript.messages[-1]
        assert reply.role == "assistant", reply.content
        assert reply.stats.get("prompt_eval_count", 0) > 2 * 16          # both images' embeddings were read
        user = [m for m in desk.history.messages(chat.conversation.id) if m.role == "user"][-1]
        assert user.content == "What is in these pictures?" and len(user.blocks["images"]) == 2
        shown = [m for m in chat.transcript.messages if m.role == "user"][-1]
        assert len(shown.findChildren(QLabel, "imageThumbnail")) == 2
        assert chat.attachment_bar.items == [] and not chat.attachment_bar.isVisible()
        chat.select_conversation(chat.conversation.id)                    # opened again: thumbnails from history
        shown = [m for m in chat.transcript.messages if m.role == "user"][-1]
        assert len(shown.findChildren(QLabel, "imageThumbnail")) == 2
        with Image.open(io.BytesIO(base64.b64decode(user.blocks["images"][0]))) as im:
            assert im.size == (64, 48)
    finally:
        desk.shutdown()


def test_the_memory_view_draws_the_vision_projector(qtbot, service):
    """The memory window of a loaded vision model: the projector's bytes (the plan's `projector` on the device mtmd
    puts it, here the CPU) are their own segment in the bars, with its colour, tooltip and legend entry, and its own
    row in predicted vs actual; the what-if plan ("Plan on this machine") counts it too."""
    from app.engine.gguf.projector import read_projector
    from app.engine.planner.projector import projector_bytes
    from app.gui.desktop import Desktop
    from app.gui.memory.memory_data import OUR_KINDS, PROJECTOR, SEGMENT_COLORS, SEGMENT_LABELS
    from app.gui.memory.whatif_data import plan_facts
    from mmproj_factory import SMOLLM2_N_EMBD

    path = httpx.post(service.url + "/api/show", json={"model": VISION}, timeout=60).json()["strata"]["projector"]["path"]
    need = projector_bytes(read_projector(path), SMOLLM2_N_EMBD)
    r = httpx.post(service.url + "/api/generate", json={"model": VISION, "keep_alive": "10m"}, timeout=300)
    assert r.status_code == 200, r.text
    desk = Desktop(service.url, use_tray=False, poll_ms=300)
    try:
        mem = desk.open_memory()
        qtbot.addWidget(mem)
        live = mem.live
        qtbot.waitUntil(lambda: live.model_combo.findText(VISION) >= 0, timeout=WAIT)
        live.model_combo.setCurrentText(VISION)
        qtbot.waitUntil(lambda: bool(live.view.bars.columns) and live.view.bars.columns[0].get(PROJECTOR) > 0,
                        timeout=WAIT)
        cpu = live.view.bars.columns[0]
        assert cpu.device_id == "CPU" and cpu.get(PROJECTOR) == need > 0
        live.view.zoom.setChecked(True)                    # the model's parts on one scale: the projector shows
        [(_k, b, rect)] = [s for s in live.view.bars.segment_rects(0) if s[0] == PROJECTOR]
        assert b == need and rect.height() > 0
        assert live.view.bars.hit(rect.center().x(), rect.center().y()) == (0, PROJECTOR, need)
        assert SEGMENT_LABELS[PROJECTOR] == "Vision projector" in live.view.bars.tooltip_text(0, PROJECTOR, need)
        legend = live.view.findChild(QLabel, "legend").text()
        assert f"color:{SEGMENT_COLORS[PROJECTOR]}'>&#9632;</span>&nbsp;Vision&nbsp;projector" in legend, legend
        if rect.height() >= 3:
            c = rect.center()
            img = live.view.bars.grab().toImage()
            dpr = img.devicePixelRatio()
            assert img.pixelColor(int(c.x() * dpr), int(c.y() * dpr)).name() == SEGMENT_COLORS[PROJECTOR]
        [row] = [r for r in live.comparison.rows if r.device_id == "CPU"]
        [part] = [p for p in row.parts if p.kind == "projector"]
        assert part.predicted == need and part.actual and part.actual > 0        # the runner's measured bytes
        # the what-if plan of the same model counts the projector where a load would put it
        desk.plan_model(VISION)
        what = mem.whatif
        qtbot.waitUntil(lambda: what.last_result is not None and bool(what.view.bars.columns), timeout=WAIT)
        planned = {c.device_id: c.get(PROJECTOR) for c in what.view.bars.columns}
        assert planned["CPU"] == need, planned
        cpu_plan = next(c for c in what.view.bars.columns if c.device_id == "CPU")      # the facts table agrees
        assert plan_facts(what.last_result)["On CPU"] == f"{sum(cpu_plan.get(k) for k in OUR_KINDS) / 2**30:.2f} GiB"
    finally:
        desk.shutdown()
