"""The window fits a 1366x768 screen: default size bounded by the screen, the whole settings pane visible without
a scroll bar, every group title on screen; saved geometry is kept on the screen."""

from __future__ import annotations

from conftest import FAST
from PySide6.QtCore import QPoint, QRect, QSize
from PySide6.QtWidgets import QGroupBox, QLabel

from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.window_geometry import DEFAULT_SIZE, default_size, fit_to_screen


def test_the_default_size_is_bounded_by_the_screen():
    assert default_size(QRect(0, 0, 1366, 768)) == QSize(1366, 768)
    assert default_size(QRect(0, 0, 1920, 1080)) == DEFAULT_SIZE == QSize(1440, 900)
    assert default_size(QRect(0, 0, 1280, 1024)) == QSize(1280, 900)


def test_the_settings_pane_fits_a_1366x768_window(qtbot, qasync_loop, shared_worker, tmp_path):
    from app.gui.application import create_main_window

    SettingsStore(tmp_path / "settings.json").save(AppSettings())
    window = create_main_window(tmp_path / "history.sqlite3", tmp_path / "settings.json", worker=shared_worker)
    qtbot.addWidget(window)
    window.resize(1366, 768)  # what default_size gives on a 1366x768 screen
    window.show()
    qtbot.waitExposed(window)
    pane = window.settings_pane
    try:
        assert window.size() == QSize(1366, 768)
        bar = pane.verticalScrollBar()
        qtbot.waitUntil(lambda: bar.maximum() == 0 and not bar.isVisible(), timeout=3000)
        assert pane.widget().height() <= pane.viewport().height()
        assert pane.widget().minimumSizeHint().width() <= pane.viewport().width()  # nothing cut on the right
        viewport = pane.viewport().rect()
        titles = []
        for group in pane.findChildren(QGroupBox):
            top_left = group.mapTo(pane.viewport(), QPoint(0, 0))
            assert viewport.contains(QRect(top_left, group.size())), group.title()
            titles.append(group.title())
        assert titles == ["Model and decoding", "Sampling"]  # the expert settings are under Advanced
        for name in ("decoding", "draft_model", "k", "n_ctx", "temperature", "max_new_tokens"):
            field = pane.fields[name]
            assert field.isVisibleTo(pane) and viewport.contains(QRect(field.mapTo(pane.viewport(), QPoint(0, 0)), field.size())), name
        assert window.live_graph.height() >= window.live_graph.minimumSizeHint().height()
        assert pane.fields["k"].width() <= 80  # K's field no longer stretches the whole width
    finally:
        window.close()
        window.db.close()


def test_plain_language_labels_keep_the_field_names(qtbot):
    from PySide6.QtWidgets import QFormLayout, QLabel

    from app.gui.application import create_application
    from app.gui.widgets.settings_pane import SettingsPane

    create_application()
    pane = SettingsPane(AppSettings(), ["CPU"])
    qtbot.addWidget(pane)
    labels = {}
    for form in pane.findChildren(QFormLayout):
        for row in range(form.rowCount()):
            label = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
            field = form.itemAt(row, QFormLayout.ItemRole.FieldRole)
            if label and field:
                labels[label.widget().text()] = field.widget()
    for text, name in (("Context length (n_ctx)", "n_ctx"), ("Always kept (n_keep)", "n_keep"),
                       ("Forgotten at once (n_discard)", "n_discard"), ("Draft tokens per step (K)", "k"),
                       ("Randomness (temperature)", "temperature"), ("Likely words only (top-p)", "top_p")):  # fmt: skip
        assert text in labels, labels.keys()
        field_term = {"k": "K", "temperature": "Temperature", "top_p": "Top-p"}.get(name, name)
        assert pane.fields[name].toolTip().startswith(f"{field_term}")
    assert "acceptance rate" in pane.fields["adaptive_k"].toolTip()
    # each setting the pane shows unfolded says in one line what it does
    helps = {label.text() for label in pane.findChildren(QLabel, "settingHelp")}
    assert len(helps) >= 6 and all(len(text) < 60 for text in helps)
    assert not any(word in text for text in helps for word in ("n_ctx", "autoregressive", "KV", "sink"))
    # the expert settings are folded under Advanced
    for name in ("target_device", "draft_device", "precision", "kv_cache_precision", "n_keep", "n_discard"):
        assert not pane.fields[name].isVisibleTo(pane) and pane.advanced.box.isAncestorOf(pane.fields[name]), name
    assert pane.advanced.button.text() == "Advanced"
    assert "sink" not in " ".join(field.toolTip() for field in pane.fields.values())


def test_a_saved_geometry_larger_than_the_screen_is_brought_back_onto_it(qtbot):
    from PySide6.QtWidgets import QWidget

    window = QWidget()
    qtbot.addWidget(window)
    window.show()
    available = window.screen().availableGeometry()
    window.resize(available.width() + 800, available.height() + 600)
    window.move(available.right() + 500, available.bottom() + 500)
    fit_to_screen(window)
    assert window.width() <= available.width() and window.height() <= available.height()
    assert available.contains(window.frameGeometry())


def _open_laid_out(qtbot, window, conversation: int, bubbles: int):
    """Open ``conversation`` in the window and wait until its ``bubbles`` bubbles are shown and laid out; returns
    the chat view."""
    window.conversations.refresh()
    window.conversations.open(conversation)
    view = window.chat_view
    qtbot.waitUntil(lambda: view.fully_loaded and len(view.message_widgets()) == bubbles, timeout=3000)
    qtbot.waitUntil(lambda: all(w.isVisible() for w in view.message_widgets()), timeout=3000)
    qtbot.wait(50)  # (layouts settle in posted events)
    return view


def test_nothing_is_cut_at_1366x768(qtbot, make_window, int8_dir):
    from PySide6.QtCore import QRect, Qt
    from PySide6.QtGui import QFontMetrics

    window = make_window(FAST.with_values(decoding="spec_model", draft_model=str(int8_dir)))
    window.resize(1366, 768)
    conversation = window.db.create_conversation("Footers")
    window.db.add_message(conversation, "user", "Compare")
    run = {"ttft_ms": 431.0, "tokens_per_s": 61.27, "acceptance_rate": 0.4312, "new_tokens": 96, "discarded_tokens": 0,
           "rolls": 0, "target_model": "SmolLM2-135M-Instruct-int4"}  # fmt: skip
    compare = {"ar": {**run, "mode": "ar"}, "spec": {**run, "mode": "spec", "drafter": "model", "k": 4},
               "speedup": 1.42, "identical": False, "sampled": False,
               "first_difference": {"token": 57, "top2_gap": 0.02, "noise_bound": 0.12, "near_tie": True}}  # fmt: skip
    window.db.add_message(conversation, "assistant", "x", stats={"compare": compare})
    window.db.add_message(conversation, "user", "Again")
    window.db.add_message(conversation, "assistant", "y", stats={**run, "mode": "spec", "drafter": "model", "k": 4})
    view = _open_laid_out(qtbot, window, conversation, bubbles=4)
    for widget in view.message_widgets():
        if widget.message.role == "assistant":
            footer = widget.footer
            assert " · ".join(footer.lines()).replace("\n", " · ") == footer.text()  # every part shown...
            assert not any("…" in line for line in footer.lines()), footer.lines()  # ...none cut
            assert len(footer.lines()) >= 2  # (these footers are longer than one line at this width)
    # the draft box: its whole name is one hover away, whatever the width shows
    draft = window.settings_pane.draft_model
    assert draft.currentText().startswith("SmolLM2-135M-Instruct · 8-bit") and draft.currentText() in draft.toolTip()
    # a settings error spans the pane: it wraps into lines of several words, never a lone word
    pane = window.settings_pane
    pane.n_ctx.setValue(5)
    error = pane.error_labels["n_ctx"]
    assert error.isVisible() and error.width() >= pane.viewport().width() - 60
    metrics = QFontMetrics(error.font())
    lines = metrics.boundingRect(QRect(0, 0, error.width(), 10_000), Qt.TextFlag.TextWordWrap, error.text()).height()
    assert lines <= 2 * metrics.lineSpacing() + 2, error.text()
    pane.n_ctx.setValue(4096)
    # the status bar says "exact" or "fast" in full; the details are in its tooltip
    label = window.model_label
    assert label.text().endswith((" · exact", " · fast")) and "KV cache" in label.toolTip()
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.width()


def test_the_side_panel_folds_away_in_a_narrow_window_and_comes_back(qtbot, make_window):
    """At 800 px the settings pane was a clipped sliver beside the chat (a newcomer trial); it folds away below
    NARROW_WINDOW_PX and returns above it, unless the user chose otherwise (View > Settings and live graph)."""
    from app.gui.side_panel_fold import NARROW_WINDOW_PX

    window = make_window(FAST, start=False)
    panel, action = window.right_splitter, window.side_panel_action

    def resized(width: int, shown: bool) -> None:
        window.resize(width, 700)
        qtbot.waitUntil(lambda: window.width() == width and panel.isVisible() == shown and action.isChecked() == shown,
                        timeout=3000)  # fmt: skip

    resized(1366, True)
    resized(NARROW_WINDOW_PX - 200, False)
    resized(NARROW_WINDOW_PX - 100, False)
    resized(1366, True)
    action.trigger()  # the user hides it in a wide window: widening again never brings it back
    assert not panel.isVisible()
    resized(NARROW_WINDOW_PX - 200, False)
    resized(1366, False)
    action.trigger()  # shown again by the user
    resized(NARROW_WINDOW_PX - 200, False)
    action.trigger()  # the user wants it even in a narrow window: it stays while the window stays narrow
    resized(NARROW_WINDOW_PX - 100, True)
    resized(1366, True)


def test_at_1100x700_the_model_notice_takes_two_lines_and_the_chat_title_stays_readable(qtbot, make_window):
    """A newcomer trial saw the notice of a chat answered by another model wrap to 6 lines at 1100x700, under a
    title cut to "Gi…": the notice names only that model (the picker shows the one chosen), and the header's
    controls go under the title when they would leave it fewer than TITLE_MIN_CHARS."""
    from app.gui.widgets.chat_view import TITLE_MIN_CHARS

    window = make_window(FAST, start=False)  # the default model at 4 bits; its 8-bit copy is installed too
    window.resize(1100, 700)
    title = "Give me three tips for better sleep"
    chat = window.db.create_conversation(title)
    window.db.add_message(chat, "user", "Hi")
    window.db.add_message(chat, "assistant", "Hello!", stats={"mode": "ar", "target_model": "SmolLM2-135M-Instruct-int8"})
    window.conversations.refresh()
    window.conversations.open(chat)
    notice, view = window.model_notice, window.chat_view
    qtbot.waitUntil(lambda: window.width() == 1100 and notice.isVisible() and view.title_label.width() > 0, timeout=3000)
    qtbot.wait(50)
    assert notice.text.text() == "This chat was answered with SmolLM2-135M-Instruct · 8-bit, not the model chosen now."
    assert notice.action.text() == "Switch to it"
    label = notice.text
    lines = label.heightForWidth(label.width()) / label.fontMetrics().lineSpacing()
    assert lines <= 2, (lines, label.width())
    shown = QLabel.text(view.title_label)  # what the elided label shows, not its whole text
    assert shown == title and TITLE_MIN_CHARS >= 20
    assert view.title_label.width() >= view.title_label.fontMetrics().horizontalAdvance(title)
    assert view.highlight_box.y() > view.title_label.y()  # the controls went under the title
    window.resize(1600, 700)  # wide: the controls come back beside the title
    qtbot.waitUntil(lambda: view.highlight_box.y() < view.title_label.geometry().bottom(), timeout=3000)
    assert QLabel.text(view.title_label) == title


def test_no_wrapped_text_is_cut_when_an_error_line_appears_under_advanced(qtbot, make_window):
    """A newcomer's screenshot at 1366x768: "Precision in use" kept three lines of text in two lines' height (its top
    and bottom lines cut) once an error line appeared under n_keep. Every word-wrapped label on screen gets at
    least the height its lines take, before and after the error."""
    from PySide6.QtWidgets import QLabel

    from inference.precision import NumericPrecision

    window = make_window(start=False)
    window.resize(1366, 768)
    pane = window.settings_pane
    pane.set_precision_in_use(NumericPrecision("f32", "f32", 0, "bf16"))
    pane.advanced.button.click()
    assert pane.precision_in_use.isVisible()

    def cut_labels() -> list[tuple[str, int, int]]:
        return [(label.text()[:40], label.height(), label.heightForWidth(label.width()))
                for label in window.findChildren(QLabel)
                if label.wordWrap() and label.isVisible() and label.text()
                and label.height() < label.heightForWidth(label.width())]  # fmt: skip

    qtbot.waitUntil(lambda: pane.precision_in_use.height() > 0, timeout=3000)
    qtbot.wait(50)  # (layouts settle in posted events)
    assert cut_labels() == []
    assert pane.precision_in_use.height() >= 3 * pane.precision_in_use.fontMetrics().lineSpacing()  # three lines here
    pane.n_keep.setValue(99_999)
    assert pane.error_labels["n_keep"].isVisible()
    qtbot.wait(50)
    assert cut_labels() == []


def test_a_compare_whose_auto_used_three_drafters_keeps_both_columns_and_the_buttons_on_screen(qtbot, make_window):
    """A newcomer's greedy Compare at 1366x768: Auto's title ("Auto (draft head 51 steps at K up to 3, 31% accepted;
    plain 31 steps; prompt lookup 4 steps…") was one unbreakable line that pushed the bubble past the chat's right
    edge, squeezed the Plain column to one word a line and hid every bubble's Copy/Edit buttons. The title now breaks
    into lines; both columns are equally wide and every bubble fits the chat."""
    window = make_window(start=False)
    window.resize(1366, 768)
    conversation = window.db.create_conversation("Compared")
    window.db.add_message(conversation, "user", "Tell me about the moon.")
    run = {"ttft_ms": 524.0, "tokens_per_s": 21.6, "new_tokens": 120, "target_model": "SmolLM2-135M-Instruct-int4"}
    drafters = {"head": {"steps": 51, "drafted": 120, "accepted": 37, "k_max": 3}, "plain": {"steps": 31},
                "lookup": {"steps": 4, "drafted": 8, "accepted": 2, "k_max": 2}}  # fmt: skip
    compare = {"ar": {**run, "mode": "ar", "text": "The Moon is a celestial body. " * 12},
               "spec": {**run, "mode": "auto", "drafters": drafters, "acceptance_rate": 0.3},
               "spec_mode": "auto", "speedup": 1.0, "identical": True, "sampled": False}  # fmt: skip
    window.db.add_message(conversation, "assistant", "The Moon is a celestial body. " * 12, stats={"compare": compare})
    view = _open_laid_out(qtbot, window, conversation, bubbles=2)
    reply = view.message_widgets()[1]
    viewport = view.scroll_area.viewport().width()
    for widget in view.message_widgets():
        assert widget.width() <= viewport, (widget.width(), viewport)  # nothing pushed past the right edge
    ar_width, spec_width = reply.ar_column.width(), reply.spec_column.width()
    assert abs(ar_width - spec_width) <= 0.1 * max(ar_width, spec_width), (ar_width, spec_width)
    title = reply.spec_column.title
    assert title.text().startswith("Auto (draft head 51 steps at K up to 3, 31% accepted; plain 31 steps")
    assert len(title.lines()) >= 2 and not any("…" in line for line in title.lines()), title.lines()


def test_the_side_panel_takes_the_room_a_large_screen_gives(qtbot, make_window):
    """At 1920x1080 the panel stayed ~410 px wide and Decoding and Drafter showed "Auto (fastest measured: draf…"; at
    1366x768 it keeps its 410 px and the chat its room; a width the user drags stands."""
    from app.gui.side_panel_width import CHAT_KEEPS_PX, PANEL_PX

    window = make_window(FAST.with_values(decoding="auto"), start=False)
    pane = window.settings_pane
    combos = (pane.decoding, pane.draft_model)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.right_splitter.width() == PANEL_PX, timeout=3000)
    assert pane.decoding.is_elided()  # (no room for more at this width)
    assert window.splitter.sizes()[1] >= 600
    window.resize(1920, 1080)
    qtbot.waitUntil(lambda: not any(combo.is_elided() for combo in combos), timeout=3000)
    assert pane.decoding.currentText().startswith("Auto (fastest measured:") and pane.draft_model.currentText()
    assert window.right_splitter.width() > PANEL_PX and window.splitter.sizes()[1] >= CHAT_KEEPS_PX
    window.resize(1366, 768)  # back on a small screen, the chat gets its room back
    qtbot.waitUntil(lambda: window.right_splitter.width() == PANEL_PX, timeout=3000)
    sizes = window.splitter.sizes()
    window.splitter.splitterMoved.emit(sizes[0] + sizes[1] - 50, 2)  # as a drag of the handle says it
    window.splitter.setSizes([sizes[0], sizes[1] - 50, sizes[2] + 50])
    window.resize(1920, 1080)
    qtbot.wait(50)
    assert window.right_splitter.width() == PANEL_PX + 50  # the user's width stands


def test_an_error_a_line_longer_than_its_explanation_leaves_reset_to_defaults_in_view_at_1366x768(qtbot, make_window):
    """Newcomer trial at 1366x768: Context length emptied (select all, Delete) brought a scroll bar to the settings,
    and "Reset to defaults" was cut at their bottom edge, above the status bar: the error's second line ("... or leave
    the field to put back 4096") had pushed it out. An error one line longer than the explanation it replaces (an
    emptied field's, in either group) leaves the button whole in view, without a scroll bar."""
    from PySide6.QtCore import Qt

    window = make_window(AppSettings(), start=False)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.size() == QSize(1366, 768), timeout=3000)
    pane = window.settings_pane
    bar = pane.verticalScrollBar()
    for name in ("n_ctx", "temperature", "max_new_tokens"):
        field, error = pane.fields[name], pane.error_labels[name]
        field.setFocus()
        field.selectAll()
        qtbot.keyClick(field, Qt.Key.Key_Delete)
        qtbot.wait(100)  # (layouts settle in posted events)
        assert " is empty: " in error.text() and error.height() == 2 * error.fontMetrics().lineSpacing(), name
        button = pane.reset_button
        assert pane.viewport().rect().contains(QRect(button.mapTo(pane.viewport(), QPoint(0, 0)), button.size())), name
        assert bar.maximum() == 0, name
        qtbot.keyClick(field, Qt.Key.Key_Tab)  # (its last valid value back)
        qtbot.waitUntil(lambda error=error: not error.isVisible(), timeout=3000)
