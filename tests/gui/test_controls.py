"""Every control of the window, used the way a user would (clicks, keys), on the default model.

Each test has a window of its own, on a history of its own holding the chats it starts from (``make_env``), so
that it runs alone as in file order (a test run alone read a chat an earlier one had written). When every test of
the file has run, the module's teardown checks that every button a window shows at the end (on a chat, as it quits)
was clicked and every menu action triggered at least once by one of them (``used``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from conftest import FAST
from gui_helpers import ControlTracker, accept_file_dialog, activate, click, find_dialog
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDialogButtonBox, QFileDialog, QLineEdit, QMessageBox, QToolButton

from app.gui.reply_format import DRAFTER_NAMES, TIMING_NOISE
from app.gui.settings_store import AppSettings, SettingsStore
from app.gui.widgets.settings_pane import BROWSE_DRAFT
from inference.draft_head import HEAD_K
from inference.models.default_head import default_head_dir
from inference.models.default_model import default_model_dir
from inference.models.store import ModelManifest, read_manifest, readable_name
from inference.settings import SpeculativeSettings

TIMEOUT = 120_000


@dataclass(frozen=True)
class Chat:
    """A chat a test starts from: its title, system prompt and messages ((role, content) pairs)."""

    title: str
    messages: tuple[tuple[str, str], ...]
    system_prompt: str = ""


class Used:
    """The controls clicked and the actions triggered in the file's windows (``ControlTracker``'s names, the same
    for a control of any window), with the tests that ran, and the controls a window shows at the end (on a chat,
    when it quits: test_quit_closes_the_window)."""

    def __init__(self) -> None:
        self.controls: set[str] = set()
        self.clicked: set[str] = set()
        self.actions: set[str] = set()
        self.triggered: set[str] = set()
        self.tests: set[str] = set()

    def add(self, test: str, tracker: ControlTracker) -> None:
        """Record what ``test`` used of ``tracker``'s window, and the actions it has."""
        self.clicked |= tracker.clicked
        self.actions |= {action.text() for action in tracker.actions()}
        self.triggered |= tracker.triggered
        self.tests.add(test)


@pytest.fixture(scope="module")
def used(request):
    """What the file's tests used; once every one of them has run, every button of the window at the end was
    clicked and every menu action triggered by one of them."""
    record = Used()
    yield record
    tests = {name for name in dir(request.module) if name.startswith("test_")}
    if record.tests >= tests:
        assert record.controls - record.clicked == set(), "buttons never clicked by these tests"
        assert record.actions - record.triggered == set(), "menu actions never triggered by these tests"


@pytest.fixture
def make_env(request, qtbot, qasync_loop, shared_worker, tmp_path, used):
    """Factory: a window of the test's own, its model ready, on a fresh history holding ``chats`` (the last one
    shown); returns the window, its tracker and its folder (settings.json: ``FAST``). What the test used of the
    window goes to ``used``."""
    from app.gui.application import create_main_window
    from app.gui.history_db import HistoryDB

    made = []

    def make(*chats: Chat) -> dict:
        folder = tmp_path / f"controls{len(made)}"
        folder.mkdir()
        SettingsStore(folder / "settings.json").save(FAST)
        db = HistoryDB(folder / "history.sqlite3")
        ids = []
        for chat in chats:
            ids.append(db.create_conversation(chat.title, system_prompt=chat.system_prompt))
            for role, content in chat.messages:
                db.add_message(ids[-1], role, content)
        db.close()
        window = create_main_window(folder / "history.sqlite3", folder / "settings.json", worker=shared_worker)
        window.show()
        window.activateWindow()
        made.append((window, ControlTracker(window)))
        window.start()
        qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
        if ids:
            window.conversations.open(ids[-1])
            view = window.chat_view
            qtbot.waitUntil(lambda: view.conversation_id == ids[-1] and view.fully_loaded, timeout=5000)
        return {"window": window, "tracker": made[-1][1], "folder": folder}

    yield make
    for window, tracker in made:
        used.add(request.node.name, tracker)
        tracker.remove()
        window.close()
        window.db.close()


@pytest.fixture
def env(make_env):
    """A window of the test's own on an empty history (``make_env``)."""
    return make_env()


#: A chat of two exchanges, the second to be edited and answered again.
TWO_EXCHANGES = Chat("First line", (
    ("user", "First line\nsecond line: say hello"), ("assistant", "Hello!"),
    ("user", "Count from one to twenty."), ("assistant", "One, two, three, four, five."),
))  # fmt: skip
#: A chat longer than the 8 messages a chat opens on.
LONG_CHAT = Chat("Long chat", tuple(
    pair for n in range(6) for pair in (("user", f"Question {n}?"), ("assistant", f"Answer {n}."))
))  # fmt: skip
#: A renamed chat with a system prompt, as exported.
PIRATE_CHAT = Chat(
    "Renamed chat", (("user", "Who are you?"), ("assistant", "A pirate, arr.")),
    system_prompt="You are a pirate. Always answer in one sentence.",
)  # fmt: skip


def _reply(qtbot, window, action):
    """Run ``action`` (which starts a reply) and wait for the reply; returns the final message."""
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
        action()
    return finished.args[0]


def _dialog(qtbot, window, name):
    qtbot.waitUntil(lambda: find_dialog(window, name) is not None, timeout=5000)
    return find_dialog(window, name)


def _answer(qtbot, window, name, button):
    box = _dialog(qtbot, window, name)
    click(qtbot, box.button(button))
    qtbot.waitUntil(lambda: find_dialog(window, name) is None, timeout=5000)


def test_composer_enter_shift_enter_and_send(qtbot, env):
    window = env["window"]
    edit = window.composer.edit
    edit.setFocus()
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    assert window.composer.error_text == "Type a message first."
    qtbot.keyClicks(edit, "First line")
    assert window.composer.error_text == ""  # typing clears the message
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "second line: say hello")
    assert window.composer.text() == "First line\nsecond line: say hello" and window.active is None
    final = _reply(qtbot, window, lambda: click(qtbot, window.composer.send_button))
    messages = window.db.messages(final.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[0].content == "First line\nsecond line: say hello" and messages[1].content == final.content
    assert final.content and final.state == "complete"


def test_typing_is_possible_while_a_reply_streams_and_send_is_refused(qtbot, env):
    window = env["window"]
    window.composer.set_text("Count from one to twenty.")
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT):
        window.composer.submit()
        assert window.active is not None and not window.composer.send_button.isEnabled()
        assert window.composer.stop_button.isEnabled()
        qtbot.keyClicks(window.composer.edit, "next question")
        qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
        assert "A reply is being generated" in window.composer.error_text
    assert window.composer.text() == "next question"  # kept for later
    assert window.composer.send_button.isEnabled() and not window.composer.stop_button.isEnabled()
    assert window.composer.error_text == ""  # the notice went with the reply (a newcomer's stayed beside Send)
    window.composer.clear()


def test_message_copy_edit_cancel_resend_and_regenerate(qtbot, make_env):
    window = make_env(TWO_EXCHANGES)["window"]
    conversation = window.chat_view.conversation_id
    user, reply = window.chat_view.message_widgets()[-2:]
    click(qtbot, user.copy_button)
    assert QGuiApplication.clipboard().text() == user.message.content
    click(qtbot, reply.copy_button)
    assert QGuiApplication.clipboard().text() == reply.message.content
    # Edit, then Cancel: nothing changes
    click(qtbot, user.edit_button)
    assert user.editing and user.editor.toPlainText() == "Count from one to twenty."
    click(qtbot, user.cancel_edit_button)
    assert not user.editing and window.db.messages(conversation)[-2].content == "Count from one to twenty."
    # Edit and resend: the message changes, the old reply is replaced
    old_reply_id = reply.message.id
    click(qtbot, user.edit_button)
    user.editor.selectAll()
    qtbot.keyClicks(user.editor, "Say the word yes.")
    final = _reply(qtbot, window, lambda: click(qtbot, user.resend_button))
    messages = window.db.messages(conversation)
    assert messages[-2].content == "Say the word yes." and messages[-1].id == final.id != old_reply_id
    assert old_reply_id not in [m.id for m in messages] and len(messages) == 4
    # Regenerate the last reply
    last = window.chat_view.message_widgets()[-1]
    assert last.regenerate_button.isVisible() and not window.chat_view.message_widgets()[1].regenerate_button.isVisible()
    again = _reply(qtbot, window, lambda: click(qtbot, last.regenerate_button))
    messages = window.db.messages(conversation)
    assert len(messages) == 4 and messages[-1].id == again.id != final.id and again.content
    # the same through the menu / keyboard: Ctrl+R, then Copy last reply (Ctrl+Shift+C)
    third = _reply(qtbot, window, window.regenerate_action.trigger)
    assert window.db.messages(conversation)[-1].id == third.id != again.id
    QGuiApplication.clipboard().clear()
    window.copy_action.trigger()
    assert QGuiApplication.clipboard().text() == third.content


def test_stop_button_and_escape_keep_the_partial_reply(qtbot, env, tmp_path):
    window = env["window"]
    window.settings_pane.max_new_tokens.setValue(400)
    for stop in ("button", "escape"):
        window.composer.set_text("Write a long story about a lighthouse keeper.")
        texts = []
        window.reply_updated.connect(texts.append)
        with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
            window.composer.submit()
            qtbot.waitUntil(lambda texts=texts: len("".join(texts[-1:])) > 20, timeout=TIMEOUT)
            if stop == "button":
                click(qtbot, window.composer.stop_button)
            else:
                activate(qtbot, window)
                qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)
        window.reply_updated.disconnect(texts.append)
        final = finished.args[0]
        assert final.state == "stopped" and final.stats["stop_reason"] == "cancelled"
        assert 20 < len(final.content) and final.stats["new_tokens"] < 400
        assert window.db.message(final.id).content == final.content
        assert window.chat_view.message_widgets()[-1].footer.text().startswith("Stopped · Auto")  # the default
    window.settings_pane.max_new_tokens.setValue(24)


def test_compare_runs_both_modes_side_by_side(qtbot, env):
    window = env["window"]
    window.composer.set_text("Repeat: red green blue. red green blue.")
    final = _reply(qtbot, window, lambda: click(qtbot, window.composer.compare_button))
    compare = final.stats["compare"]
    ar, spec = compare["ar"], compare["spec"]
    # Auto (the default) is chosen: Compare runs plain decoding against it, and says which drafters Auto used
    assert (ar["mode"], spec["mode"]) == ("ar", "auto")
    uses = spec["drafters"]
    assert sum(use["steps"] for use in uses.values()) == sum(spec["k_steps"].values()) > 0
    drafting = [(use["accepted"], use["steps"], name) for name, use in uses.items() if name != "plain" and use["accepted"]]
    assert spec["drafter"] == (max(drafting)[2] if drafting else None)  # the drafter of most accepted drafts
    assert ar["seed"] is None and spec["seed"] is None  # the user set no seed: unseeded, as a chat reply
    assert ar["text"] and final.content == spec["text"]
    assert compare["speedup"] == round(spec["tokens_per_s"] / ar["tokens_per_s"], 3)
    assert compare["identical"] is True  # greedy at the exact default precision
    assert "first_difference" not in compare
    widget = window.chat_view.message_widgets()[-1]
    assert widget.is_compare and widget.compare_box.isVisible() and not widget.body.isVisible()
    assert widget.ar_column.view.markdown == ar["text"] and widget.spec_column.view.markdown == spec["text"]
    title = widget.spec_column.title.text()
    assert title.startswith("Auto (") and all(f"{DRAFTER_NAMES[name]} {use['steps']} step" in title for name, use in uses.items())
    assert "TTFT" in widget.ar_column.metrics.text() and "tokens/s" in widget.spec_column.metrics.text()
    gained = any(use["accepted"] for name, use in uses.items() if name != "plain")
    # (greedy, Auto may stay plain on this prompt, or draft with nothing accepted: two plain runs claim no speedup;
    # a real timing may fall within the noise, or below it)
    ratio = round(compare["speedup"], 2)
    if not gained:
        speedup = "No speedup: Auto decoded plainly"
    elif TIMING_NOISE[0] <= ratio <= TIMING_NOISE[1]:
        speedup = f"About the same speed as plain decoding ({ratio:.2f}×, within timing noise)"
    else:
        speedup = f"Speedup {ratio:.2f}×" if ratio > TIMING_NOISE[1] else f"Slower than plain decoding ({ratio:.2f}×)"
    assert widget.footer.text().startswith(speedup), widget.footer.text()
    assert "texts identical" in widget.footer.text()
    assert [s.key for s in window.live_graph.series] == ["ar", "auto"]  # Auto drawn in the speculative colour
    # the precision in force, as OpenVINO reports it: in the settings pane and the status bar
    in_use = window.settings_pane.precision_in_use
    assert in_use.text().startswith("Computing: full (f32) · chat memory (KV cache): full (f32)")
    assert in_use.text().endswith(" · drafting never changes a reply (exact)") and "f32, KV cache f32, no dynamic quantization (exact)" in in_use.toolTip()
    assert window.model_label.text().endswith(" · exact")  # short; the details are in its tooltip
    assert "f32, KV cache f32, no dynamic quantization (exact)" in window.model_label.toolTip()
    assert all(s.rate for s in window.live_graph.series)
    # the comparison through the menu action (Ctrl+Shift+Enter)
    window.composer.set_text("Say OK.")
    again = _reply(qtbot, window, window.compare_action.trigger)
    assert "compare" in again.stats


def test_conversation_list_new_search_select_rename_delete(qtbot, make_env):
    window = make_env(LONG_CHAT)["window"]
    listing = window.conversation_list
    first = window.chat_view.conversation_id
    click(qtbot, listing.new_button)
    assert window.chat_view.conversation_id is None and window.chat_view.title_label.text() == "New chat"
    assert window.chat_view.empty_label.isVisible()
    _reply(qtbot, window, lambda: window.chat.send("Tell me about bananas."))
    second = window.chat_view.conversation_id
    assert second != first and listing.ids()[0] == second
    window.new_action.trigger()  # Ctrl+N
    assert window.chat_view.conversation_id is None
    # search by text in messages
    qtbot.keyClicks(listing.search, "bananas")
    qtbot.waitUntil(lambda: listing.ids() == [second], timeout=3000)
    clear = next(button for button in listing.search.findChildren(QToolButton)
                 if button.defaultAction() and button.defaultAction().text() == "Clear search")  # fmt: skip
    click(qtbot, clear)  # the search box's own clear button
    assert listing.search.text() == ""
    qtbot.waitUntil(lambda: len(listing.ids()) == 2, timeout=3000)
    activate(qtbot, window)
    window.search_action.trigger()  # Ctrl+F
    assert listing.search.hasFocus()
    # select with a click
    item = listing.item_for(first)
    rect = listing.list.visualItemRect(item)
    qtbot.mouseClick(listing.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.chat_view.conversation_id == first
    # a long conversation opens on its last messages; the earlier ones come with the button (or scrolling up)
    view = window.chat_view
    qtbot.waitUntil(lambda: view.fully_loaded, timeout=5000)
    total = len(window.db.messages(first))
    assert total > 8 and len(view.message_widgets()) == 8 and view.earlier_count == total - 8
    click(qtbot, view.earlier_button)
    qtbot.waitUntil(lambda: view.fully_loaded, timeout=5000)
    assert len(view.message_widgets()) == min(total, 16)
    shown = [w.message.id for w in view.message_widgets()]
    assert shown == [m.id for m in window.db.messages(first)][-len(shown):]  # the newest, in order
    # rename in place with the button, then with F2
    click(qtbot, listing.rename_button)
    qtbot.waitUntil(lambda: listing.list.findChild(QLineEdit) is not None and listing.list.findChild(QLineEdit).isVisible(), timeout=3000)
    editor = [e for e in listing.list.findChildren(QLineEdit) if e.isVisible()][0]
    editor.selectAll()
    qtbot.keyClicks(editor, "Renamed chat")
    qtbot.keyClick(editor, Qt.Key.Key_Return)  # the item view commits on its next event-loop turn
    qtbot.waitUntil(lambda: window.db.conversation(first).title == "Renamed chat", timeout=3000)
    assert window.chat_view.title_label.text() == "Renamed chat"
    window.rename_action.trigger()
    qtbot.waitUntil(lambda: any(e.isVisible() for e in listing.list.findChildren(QLineEdit)), timeout=3000)
    editor = [e for e in listing.list.findChildren(QLineEdit) if e.isVisible()][0]
    editor.selectAll()
    qtbot.keyClick(editor, Qt.Key.Key_Backspace)
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not any(e.isVisible() for e in listing.list.findChildren(QLineEdit)), timeout=3000)
    qtbot.wait(50)
    assert window.db.conversation(first).title == "Renamed chat"  # an empty title is refused
    assert window.windowTitle() == "Renamed chat — SpecChat"
    assert listing.item_for(first).text() == "Renamed chat"
    # delete asks first: Cancel keeps it, Delete deletes it
    listing.select(second)
    click(qtbot, listing.delete_button)
    _answer(qtbot, window, "confirmDelete", QMessageBox.StandardButton.Cancel)
    assert window.db.conversation(second) is not None
    click(qtbot, listing.delete_button)
    box = _dialog(qtbot, window, "confirmDelete")
    assert "Tell me about bananas." in box.text() and "cannot be undone" in box.informativeText()
    click(qtbot, next(button for button in box.buttons() if button.text() == "&Delete"))
    qtbot.waitUntil(lambda: window.db.conversation(second) is None, timeout=5000)
    assert window.chat_view.conversation_id == first and listing.ids() == [first]
    # the Delete action (Del key in the list), answered with Cancel
    window.delete_action.trigger()
    _answer(qtbot, window, "confirmDelete", QMessageBox.StandardButton.Cancel)
    assert window.db.conversation(first) is not None


def test_header_highlight_system_prompt_and_json_output(qtbot, make_env):
    env = make_env(Chat("A chat", (("user", "Hello."), ("assistant", "Hello! How can I help?"))))
    window = env["window"]
    view = window.chat_view
    click(qtbot, view.highlight_box)
    assert not view.highlight_box.isChecked() and not window.highlight_action.isChecked()
    qtbot.waitUntil(lambda: SettingsStore(env["folder"] / "settings.json").load().highlight_draft is False, timeout=3000)
    window.highlight_action.trigger()
    assert view.highlight_box.isChecked() and window.settings.highlight_draft
    # system prompt: shown, typed, saved with the conversation, used by the next reply
    click(qtbot, view.system_button)
    assert view.system_edit.isVisible()
    qtbot.keyClicks(view.system_edit, "You are a pirate. Always answer in one sentence.")
    qtbot.waitUntil(
        lambda: window.db.conversation(view.conversation_id).system_prompt.startswith("You are a pirate"), timeout=3000
    )
    before = window.db.messages(view.conversation_id)
    final = _reply(qtbot, window, lambda: window.chat.send("Who are you?"))
    assert final.stats["prompt_tokens"] > 0
    assert len(window.db.messages(view.conversation_id)) == len(before) + 2
    click(qtbot, view.system_button)
    assert not view.system_edit.isVisible() and view.system_button.text() == "System prompt ✓"
    # JSON output: kept with the conversation as it is clicked on and off (its replies: test_chat_end_to_end)
    click(qtbot, view.json_box)
    assert view.json_box.isChecked() and window.db.conversation(view.conversation_id).json_output is True
    click(qtbot, view.json_box)
    assert not view.json_box.isChecked() and window.db.conversation(view.conversation_id).json_output is False
    # the side panel can be hidden and shown
    window.side_panel_action.trigger()
    assert not window.right_splitter.isVisible()
    window.side_panel_action.trigger()
    assert window.right_splitter.isVisible()


def test_export_markdown_json_and_import(qtbot, make_env, tmp_path):
    window = make_env(PIRATE_CHAT)["window"]
    conversation = window.chat_view.conversation_id
    for action, suffix in ((window.export_markdown_action, ".md"), (window.export_json_action, ".json")):
        action.trigger()
        dialog = _dialog(qtbot, window, "fileDialog")
        assert isinstance(dialog, QFileDialog) and dialog.acceptMode() == QFileDialog.AcceptMode.AcceptSave
        accept_file_dialog(dialog, str(tmp_path / f"chat{suffix}"))
        qtbot.waitUntil(lambda s=suffix: (tmp_path / f"chat{s}").exists(), timeout=5000)
    markdown = (tmp_path / "chat.md").read_text()
    assert markdown.startswith("# Renamed chat") and "You are a pirate." in markdown and "## Assistant" in markdown
    data = json.loads((tmp_path / "chat.json").read_text())
    assert data["format"] == "specchat-conversation" and len(data["messages"]) == len(window.db.messages(conversation))
    # import it back through the dialog
    window.import_action.trigger()
    dialog = _dialog(qtbot, window, "fileDialog")
    accept_file_dialog(dialog, str(tmp_path / "chat.json"))
    qtbot.waitUntil(lambda: window.chat_view.conversation_id not in (None, conversation), timeout=5000)
    imported = window.chat_view.conversation_id
    assert [m.content for m in window.db.messages(imported)] == [m["content"] for m in data["messages"]]
    assert window.db.conversation(imported).system_prompt == data["system_prompt"]
    # a file that is not an export: a dialog says what is wrong, nothing is added
    (tmp_path / "bad.json").write_text('{"hello": 1}')
    count = len(window.db.conversations())
    window.import_action.trigger()
    dialog = _dialog(qtbot, window, "fileDialog")
    accept_file_dialog(dialog, str(tmp_path / "bad.json"))
    box = _dialog(qtbot, window, "importError")
    assert "not a conversation SpecChat can import" in box.informativeText()
    click(qtbot, box.button(QMessageBox.StandardButton.Ok))
    assert len(window.db.conversations()) == count


def test_settings_changes_reload_in_the_background_and_apply_to_the_next_reply(qtbot, env, int8_dir):
    window = env["window"]
    pane = window.settings_pane
    # decoding mode and K apply to the next reply without a reload
    pane.decoding.setFocus()
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_lookup"))
    pane.k.setValue(3)
    final = _reply(qtbot, window, lambda: window.chat.send("Repeat: cat dog cat dog cat dog."))
    assert (final.stats["mode"], final.stats["drafter"], final.stats["k"]) == ("spec", "lookup", 3)
    click(qtbot, pane.adaptive_k)
    assert window.settings.value("adaptive_k") and window.settings.generation_settings().speculative.adaptive
    click(qtbot, pane.adaptive_k)
    assert not window.settings.generation.speculative.adaptive
    # bit-width: the 8-bit model is loaded in the background, with the busy indicator
    assert pane.bits.isVisibleTo(pane)  # (shown while the default model is the target)
    pane.bits.setCurrentIndex(pane.bits.findData(8))
    qtbot.waitUntil(lambda: window.model_state == "loading", timeout=5000)
    assert window.busy_bar.isVisible()
    qtbot.waitUntil(lambda: window.model_state == "ready", timeout=TIMEOUT)
    assert not window.busy_bar.isVisible() and "SmolLM2-135M-Instruct · 8-bit on CPU" in window.model_label.toolTip()
    final = _reply(qtbot, window, lambda: window.chat.send("Say hi."))
    assert "int8" in final.stats["model"]
    # a draft model chosen with Browse…: reload with the draft, speculative replies use it
    pane.bits.setCurrentIndex(pane.bits.findData(4))
    pane.decoding.setCurrentIndex(pane.decoding.findData("spec_model"))
    # the smallest installed draft is taken, no error first: the default model's head (installed with the model)
    assert pane.current().draft_model == str(default_head_dir())
    assert pane.k.value() == HEAD_K  # K follows the drafter: the head's (it was 3 for prompt lookup)
    assert pane.error_labels["draft_model"].text() == "" and window.composer.send_button.isEnabled()
    pane.draft_model.setCurrentIndex(pane.draft_model.findData(""))  # "(none)"
    assert "needs a draft model" in pane.error_labels["draft_model"].text()
    assert not window.composer.send_button.isEnabled()  # invalid settings never reach the engine
    pane.draft_model.setCurrentIndex(pane.draft_model.findData(BROWSE_DRAFT))  # "Other folder…"
    dialog = _dialog(qtbot, window, "fileDialog")
    accept_file_dialog(dialog, str(int8_dir))
    qtbot.waitUntil(lambda: pane.current().draft_model == str(int8_dir), timeout=5000)
    assert window.composer.send_button.isEnabled()
    with_int8_draft = "SmolLM2-135M-Instruct · 4-bit on CPU, draft SmolLM2-135M-Instruct · 8-bit on CPU"  # (the picker's names)
    qtbot.waitUntil(lambda: window.model_state == "ready" and with_int8_draft in window.model_label.toolTip(), timeout=TIMEOUT)
    final = _reply(qtbot, window, lambda: window.chat.send("Say yes."))
    assert (final.stats["mode"], final.stats["drafter"]) == ("spec", "model") and final.stats["drafted"] > 0
    # settings persisted
    stored = SettingsStore(env["folder"] / "settings.json").load()
    general_k = SpeculativeSettings().k  # K went back to the general default when the head stopped drafting
    assert (stored.value("decoding"), stored.draft_model, stored.value("k"), stored.bits) == ("spec_model", str(int8_dir), general_k, 4)
    # Reset to defaults
    click(qtbot, pane.reset_button)
    _answer(qtbot, window, "confirmReset", QMessageBox.StandardButton.Reset)
    # the defaults, with the drafter the window preselects (the head); Auto chooses its own K: the box's default stays
    assert replace(pane.current(), highlight_draft=True) == replace(AppSettings(), draft_model=str(default_head_dir()))
    pane.max_new_tokens.setValue(24)
    # plain decoding on the default model: its head is loaded again, for Compare
    head = f"draft {readable_name(default_head_dir())}"
    qtbot.waitUntil(lambda: window.model_state == "ready" and head in window.model_label.toolTip(), timeout=TIMEOUT)


def test_models_dialog_opens_and_its_changes_reach_the_settings(qtbot, env, monkeypatch):
    window = env["window"]
    window.models_action.trigger()
    dialog = window.choice.models_dialog
    assert dialog is not None and dialog.isVisible() and dialog.windowTitle() == "Models"
    from app.gui import model_choice

    target = read_manifest(default_model_dir(window.settings.bits))
    extra = replace(target, name="Extra", bits=8, path=Path("/models/extra"))  # the target's tokenizer: a draft
    other = ModelManifest(name="Other", bits=8, tokenizer_fingerprint="0" * 64, path=Path("/models/other"))
    monkeypatch.setattr(model_choice, "_installed_models", lambda: [target, extra, other])
    dialog.models_changed.emit()  # as after an import
    assert window.settings_pane.draft_model.findData("/models/extra") >= 0
    assert window.settings_pane.draft_model.findData("/models/other") < 0  # another tokenizer cannot draft
    dialog.close()
    window.models_action.trigger()  # the same dialog again
    assert window.choice.models_dialog is dialog and dialog.isVisible()
    dialog.close()


def test_help_dialogs(qtbot, env):
    window = env["window"]
    window.shortcuts_action.trigger()
    box = _dialog(qtbot, window, "shortcuts")
    assert "Shift+Enter: new line" in box.text() and "Esc: stop" in box.text()
    click(qtbot, box.buttons.button(QDialogButtonBox.StandardButton.Ok))
    qtbot.waitUntil(lambda: find_dialog(window, "shortcuts") is None, timeout=5000)
    window.about_action.trigger()
    box = _dialog(qtbot, window, "about")
    assert "OpenVINO" in box.text()
    click(qtbot, box.button(QMessageBox.StandardButton.Ok))


def test_local_server_dialog_opens_stopped(qtbot, env):
    """Server > Local server… (its switch is tested in test_local_server.py)."""
    window = env["window"]
    window.local_server_action.trigger()
    dialog = window.server_control.dialog
    assert dialog.isVisible() and not dialog.switch.isChecked() and dialog.status.text() == "Stopped"
    assert dialog.port.value() == 8000 and not dialog.allow_other_computers.isChecked()
    dialog.close()


def test_remote_server_dialog_opens_and_cancels(qtbot, env):
    """Server > Remote server… (what it does is tested in test_remote_server.py): Cancel leaves the local model."""
    from PySide6.QtWidgets import QDialogButtonBox

    from app.gui.widgets.remote_dialog import RemoteServerDialog

    window = env["window"]
    window.remote_server_action.trigger()
    qtbot.waitUntil(lambda: any(d.isVisible() for d in window.findChildren(RemoteServerDialog)), timeout=5000)
    dialog = next(d for d in window.findChildren(RemoteServerDialog) if d.isVisible())
    click(qtbot, dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel))
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)
    assert not window.settings.use_remote


def test_the_precision_fields_fold_away_and_unfold(qtbot, env):
    pane = env["window"].settings_pane
    pane.advanced.show(False)
    assert not pane.precision.isVisibleTo(pane) and not pane.draft_device.isVisibleTo(pane)
    click(qtbot, pane.advanced.button)
    assert pane.precision.isVisibleTo(pane) and pane.kv_cache_precision.isVisibleTo(pane) and pane.draft_device.isVisibleTo(pane)
    click(qtbot, pane.advanced.button)
    assert not pane.precision.isVisibleTo(pane)
    pane.flag("precision", "inference precision bf16 is not native on CPU")  # a flagged field is never hidden
    assert pane.precision.isVisibleTo(pane)
    pane.flag("precision", None)


def test_model_picker_refresh_and_the_model_notice(qtbot, env):
    window = env["window"]
    window.choose_model_action.trigger()
    picker = window.model_picker.combo
    assert picker.view().isVisible()
    picker.hidePopup()
    assert window.focusWidget() is picker
    window.refresh_models_action.trigger()
    assert picker.currentText().startswith(f"SmolLM2-135M-Instruct · {window.settings.bits}-bit · ")
    # A chat answered with the 8-bit copy: said above the chat, with a button that switches to it.
    chat = window.db.create_conversation("Answered at 8 bits")
    window.db.add_message(chat, "assistant", "Hi", stats={"mode": "ar", "target_model": default_model_dir(8).name})
    window.conversations.open(chat)
    notice = window.model_notice
    assert notice.isVisible() and "8-bit" in notice.text.text()
    click(qtbot, notice.close_button)
    assert not notice.isVisible()
    window.conversations.new()
    window.conversations.open(chat)
    click(qtbot, notice.action)
    assert (window.settings.target_model, window.settings.bits) == ("", 8)
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=TIMEOUT)


def test_sampling_greedy_toggle_presets_and_a_sampled_compare(qtbot, env):
    window = env["window"]
    pane = window.settings_pane
    group = pane.sampling
    group.choose_preset("Model default")  # the default model has no generation_config.json: the chat defaults
    assert not group.greedy.isChecked() and pane.current().value("temperature") == 0.7
    click(qtbot, group.greedy)
    assert pane.current().generation.sampling.greedy and group.preset.currentText() == "Custom"
    click(qtbot, group.greedy)
    assert pane.current().value("temperature") == 0.7 and not pane.current().generation.sampling.greedy
    click(qtbot, group.more.button)
    assert group.seed.isVisibleTo(pane) and group.stop_strings.isVisibleTo(pane)
    group.seed.setText("")
    window.composer.set_text("Name three colours.")
    final = _reply(qtbot, window, lambda: click(qtbot, window.composer.compare_button))
    compare = final.stats["compare"]
    # no seed drawn: a seeded sampled Auto run plans from preset costs, not as the chat's unseeded Auto replies do
    assert compare["ar"]["seed"] is None and compare["spec"]["seed"] is None
    assert compare["sampled"] is True
    widget = window.chat_view.message_widgets()[-1]
    texts = "texts identical this time (sampled texts may differ)" if compare["identical"] else "texts differ by design"
    assert f"speed only: {texts}" in widget.footer.text() and "seed" not in widget.footer.text()
    group.seed.setText("11")  # a seed of the user's: both runs take it, and the footer names it
    window.composer.set_text("Name three colours.")
    final = _reply(qtbot, window, lambda: click(qtbot, window.composer.compare_button))
    compare = final.stats["compare"]
    assert compare["ar"]["seed"] == compare["spec"]["seed"] == 11
    assert "speed only: same seed 11, " in window.chat_view.message_widgets()[-1].footer.text()
    group.seed.setText("")
    click(qtbot, group.save_button)
    dialog = _dialog(qtbot, window, "presetNameDialog")
    dialog.setTextValue("Warm")
    dialog.accept()
    qtbot.waitUntil(lambda: group.preset.currentText() == "Warm", timeout=5000)
    assert json.loads((env["folder"] / "settings.json").read_text())["presets"]["Warm"]["temperature"] == 0.7
    click(qtbot, group.delete_button)
    assert group.preset.currentText() == "Custom" and not group.delete_button.isEnabled()


def test_the_view_menu_chooses_the_theme_and_the_settings_keep_it(qtbot, env):
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    from app.gui import theme

    window = env["window"]
    window.theme_actions["dark"].trigger()
    assert theme.current() is theme.DARK and window.settings.theme == "dark"
    assert QApplication.palette().color(QPalette.ColorRole.Window).name() == theme.DARK.window
    window.choice.save()
    assert SettingsStore(env["folder"] / "settings.json").load().theme == "dark"
    window.theme_actions["light"].trigger()
    assert theme.current() is theme.LIGHT and window.theme_actions["light"].isChecked()
    window.theme_actions["system"].trigger()
    assert window.settings.theme == "system" and theme.current() is theme.theme_for("system")


def test_the_graph_buttons_show_one_plot_each(qtbot, env):
    from PySide6.QtCore import Qt

    graph = env["window"].live_graph
    for key, button in graph.plot_buttons.items():
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert graph.shown_plot == key and button.isChecked()
        assert [k for k, b in graph.plot_buttons.items() if b.isChecked()] == [key]


def test_quit_closes_the_window(qtbot, make_env, used):
    """The window quits on a chat; the buttons it shows then are those every test of the file together must have
    clicked (the ``used`` fixture's teardown)."""
    env = make_env(TWO_EXCHANGES)
    window = env["window"]
    window.quit_action.trigger()
    assert not window.isVisible()
    used.controls = env["tracker"].controls()


def test_a_send_notice_goes_when_another_chat_is_shown(qtbot, env):
    """Newcomer trial: "Type a message first." stayed after switching to another chat."""
    window = env["window"]
    other = window.db.create_conversation("Another chat")
    window.conversations.refresh()
    window.conversations.new()
    window.composer.edit.setPlainText("")
    window.composer.edit.setFocus()
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    assert window.composer.error_text == "Type a message first."
    window.conversations.open(other)
    assert window.composer.error_text == ""
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    assert window.composer.error_text == "Type a message first."
    window.conversations.new()
    assert window.composer.error_text == ""
