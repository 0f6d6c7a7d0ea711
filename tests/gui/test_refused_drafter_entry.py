"""A refused drafter reads, in the Drafter list, as its name with why it is refused (a newcomer who opened the list
with an invalid drafter chosen saw its entry as a blank pink row), in the list's own colours."""

from __future__ import annotations

from collections import Counter

from conftest import FAST
from PySide6.QtGui import QColor

from app.gui import theme
from app.gui.widgets import settings_pane
from app.gui.widgets.settings_pane import BROWSE_DRAFT, LOOKUP_DRAFT
from inference.settings import Decoding


def _row_contrast(view, row: int) -> tuple[QColor, float]:
    """The background of ``row`` of a list as drawn (its most common colour) and the highest contrast of its pixels
    with it (a glyph's stem has the text's full colour)."""
    image = view.viewport().grab(view.visualRect(view.model().index(row, 0))).toImage()
    pixels = [image.pixelColor(x, y) for x in range(image.width()) for y in range(image.height())]
    common = Counter(p.rgb() for p in pixels).most_common(1)[0][0]
    background = next(p for p in pixels if p.rgb() == common)
    return background, max(theme.contrast_ratio(p, background) for p in pixels)


def test_a_refused_drafter_reads_as_its_name_and_why_in_the_list(qtbot, make_window, tmp_path, monkeypatch):
    folder = tmp_path / "not-a-model"
    folder.mkdir()

    async def chosen(*_args, **_kwargs):
        return str(folder)

    monkeypatch.setattr(settings_pane, "choose_file", chosen)
    window = make_window(FAST.with_values(decoding=Decoding.AUTO.value), start=False)
    pane = window.settings_pane
    combo = pane.draft_model
    combo.setCurrentIndex(combo.findData(BROWSE_DRAFT))
    error = pane.error_labels["draft_model"]
    qtbot.waitUntil(lambda: error.text() != "", timeout=5000)
    why = (f"{folder} is not a model folder: missing openvino_model.xml, openvino_model.bin, openvino_tokenizer.xml, "
           "openvino_detokenizer.xml")  # fmt: skip
    assert error.text() == why
    row = combo.findData(str(folder))
    assert combo.currentIndex() == row
    assert combo.itemText(row) == f"not-a-model ✘ refused: {why}"
    assert combo.itemData(row, 3) == f"not-a-model is refused: {why}"  # Qt.ToolTipRole

    combo.showPopup()
    view = combo.view()
    qtbot.waitUntil(view.isVisible, timeout=3000)
    qtbot.wait(100)
    background, contrast = _row_contrast(view, row)  # the row chosen: drawn as the list draws its chosen row
    assert background != QColor(theme.current().invalid) and contrast >= theme.MIN_CONTRAST, (background.name(), contrast)
    combo.hidePopup()

    combo.setCurrentIndex(combo.findData(LOOKUP_DRAFT))  # another drafter: the folder reads as its name again
    qtbot.waitUntil(lambda: error.text() == "", timeout=5000)
    assert combo.itemText(combo.findData(str(folder))) == "not-a-model"
    assert combo.itemData(combo.findData(str(folder)), 3) is None
