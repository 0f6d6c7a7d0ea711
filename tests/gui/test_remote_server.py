"""A remote OpenAI-compatible server as the target, in the window: chosen through the picker's dialog (the key kept
out of settings.json), replies streamed into the chat view, the history and the live graph, errors said and partial
replies kept, Stop during a silent stream, Compare only on a SpecChat server, and back to the local model."""

from __future__ import annotations

import json
import re
import stat
import time
from dataclasses import replace

import pytest
from conftest import FAST
from gui_helpers import send_and_wait
from PySide6.QtWidgets import QDialogButtonBox
from remote_stub import API_KEY, CUT_AFTER, MODEL, REPLY, REPLY_PIECES, RemoteStub

from app.backends.remote_errors import SERVER_STOPPED_BEFORE_TEXT, RemoteError
from app.backends.remote_keys import keys_file
from app.gui.history_transfer import export_markdown
from app.gui.reply_format import can_continue, footer_text
from app.gui.widgets.model_picker import REMOTE_DIALOG_KEY, REMOTE_KEY
from app.gui.widgets.remote_dialog import RemoteServerDialog

PARTIAL = "".join(REPLY_PIECES[:CUT_AFTER])


@pytest.fixture(scope="module")
def stub():
    with RemoteStub() as server:
        yield server


def open_dialog(qtbot, window) -> RemoteServerDialog:
    combo = window.model_picker.combo
    index = combo.findData(REMOTE_DIALOG_KEY)
    assert combo.itemText(index) == "Remote server (OpenAI-compatible)…"
    combo.setCurrentIndex(index)
    combo.activated.emit(index)
    qtbot.waitUntil(lambda: any(d.isVisible() for d in window.findChildren(RemoteServerDialog)), timeout=5000)
    return next(d for d in window.findChildren(RemoteServerDialog) if d.isVisible())


def fetch(qtbot, dialog) -> None:
    dialog.fetch_button.click()
    qtbot.waitUntil(lambda: dialog.fetch_button.isEnabled(), timeout=10_000)


def choose_remote(window, url: str) -> None:
    window.choice.apply(replace(window.settings, remote_url=url, remote_model=MODEL, use_remote=True))


def test_a_remote_server_chosen_in_the_dialog_answers_into_the_chat_and_history(
    qtbot, make_window, stub, no_user_keyring
):
    window = make_window()
    local_name = window.settings.target_name
    dialog = open_dialog(qtbot, window)
    dialog.url.setText(stub.url("auth"))
    dialog.api_key.setText("wrong-key")
    fetch(qtbot, dialog)
    assert dialog.error.isVisible() and "refused the API key (401)" in dialog.error.text()
    dialog.api_key.setText(API_KEY)
    fetch(qtbot, dialog)
    assert not dialog.error.isVisible()
    assert [dialog.models.itemText(i) for i in range(dialog.models.count())] == [MODEL]
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: window.settings.use_remote, timeout=5000)
    assert (window.settings.remote_url, window.settings.remote_model) == (stub.url("auth"), MODEL)
    host = stub.url("ok").split("/")[2]
    label = f"{MODEL} on {host} (remote)"
    assert window.model_picker.combo.currentText() == label and window.model_picker.combo.currentData() == REMOTE_KEY

    # the key: in the fallback file, mode 600, never in settings.json
    qtbot.waitUntil(lambda: window.store.path.exists(), timeout=5000)
    assert json.loads(keys_file().read_text()) == {stub.url("auth"): API_KEY}
    assert stat.S_IMODE(keys_file().stat().st_mode) == 0o600
    assert API_KEY not in window.store.path.read_text()

    # a plain OpenAI server offers one mode: Compare is off, and says why
    assert not window.composer.compare_button.isEnabled()
    assert window.composer.compare_button.toolTip().startswith("Compare needs a server that offers plain and speculative")

    final = send_and_wait(qtbot, window, "Say hello")
    assert (final.content, final.state) == (REPLY, "complete")
    assert final.stats["target_model"] == label and final.stats["model"] == label
    assert final.stats["new_tokens"] == len(REPLY_PIECES) and final.stats["tokens_per_s"] > 0
    # the server did not say how it decoded: the footer names no local mode ("Plain decoding", "Auto"), the model does
    assert final.stats["mode"] == "remote" and final.stats["drafter"] is None
    assert re.fullmatch(rf"TTFT \S+ m?s · \d+\.\d tokens/s · {len(REPLY_PIECES)} tokens · {re.escape(label)}",
                        footer_text(final.stats, final.state))  # fmt: skip
    assert stub.requests[-1][2] == f"Bearer {API_KEY}"
    saved = window.db.messages(final.conversation_id)
    assert [(m.role, m.content, m.state) for m in saved] == [
        ("user", "Say hello", "complete"),
        ("assistant", REPLY, "complete"),
    ]
    assert window.chat_view.widget(final.id).message.content == REPLY
    markdown = export_markdown(window.db, final.conversation_id)  # exported as the window shows it, no mode either
    assert markdown.endswith(f"## Assistant\n\n{REPLY}\n\n*{footer_text(final.stats, final.state)}*\n")
    series = window.live_graph.series[-1]
    assert len(series.steps) == len(REPLY_PIECES) and series.rate and series.rate[-1][1] > 0  # client-side tokens/s
    assert re.fullmatch(r"■ Remote server: \d+\.\d tokens/s", window.live_graph.summary_text())  # nor in the panel
    assert window.live_graph.legend_names() == {"remote": "Remote server"}

    # back to the local model: the notice offers the remote server again; the local model answers, and the footer
    # names it
    window.choice.choose_target("", window.settings.bits)
    assert not window.settings.use_remote and window.composer.compare_button.isEnabled()
    notice = window.model_notice
    assert notice.isVisible() and notice.text.text() == f"This chat was answered by {label}, not the model chosen now."
    assert notice.action.text() == "Switch to it"
    notice.action.click()
    assert window.settings.use_remote and window.model_picker.combo.currentData() == REMOTE_KEY
    window.choice.choose_target("", window.settings.bits)
    final = send_and_wait(qtbot, window, "Say hello again")
    assert final.state == "complete" and final.content and final.stats["target_model"] == local_name


def test_a_key_that_cannot_be_stored_still_works_this_session(qtbot, make_window, stub, no_user_keyring):
    keys_file().mkdir(parents=True)  # a folder where the key file should be: writing it fails
    window = make_window()
    dialog = open_dialog(qtbot, window)
    dialog.url.setText(stub.url("auth"))
    dialog.api_key.setText(API_KEY)
    dialog.models.setEditText(MODEL)  # typed by hand, without Fetch models
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: window.settings.use_remote, timeout=5000)
    assert window.statusBar().currentMessage().startswith("Could not store the API key (")
    final = send_and_wait(qtbot, window, "Say hello")
    assert (final.content, final.state) == (REPLY, "complete") and stub.requests[-1][2] == f"Bearer {API_KEY}"


def test_ok_checks_the_server_and_stays_open_when_it_does_not_answer(qtbot, make_window, stub, no_user_keyring):
    from PySide6.QtWidgets import QLabel

    from app.binding import listen

    window = make_window()
    dialog = open_dialog(qtbot, window)
    label = next(w for w in dialog.findChildren(QLabel) if w.text() == "&Model")
    assert label.buddy() is dialog.models  # Alt+M reaches the model field (the label showed a literal "&Model")
    with listen("127.0.0.1", 0) as sock:
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # a port freed below: nothing listens there
    dialog.url.setText(dead)
    dialog.models.setEditText(MODEL)
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    ok.click()
    qtbot.waitUntil(lambda: dialog.error.isVisible() and ok.isEnabled(), timeout=10_000)
    assert "refused the connection" in dialog.error.text() and dialog.isVisible()
    assert not window.settings.use_remote  # nothing was chosen
    dialog.url.setText(stub.url("auth"))
    dialog.api_key.setText("wrong")
    ok.click()
    qtbot.waitUntil(lambda: "refused the API key" in dialog.error.text() and ok.isEnabled(), timeout=10_000)
    assert dialog.error.text().startswith("OK's check failed, so nothing was chosen: ") and dialog.isVisible()
    assert dialog.error.text().endswith("enter the right key in the API key field. Then press OK again, or Cancel to "
                                        "keep the model you have now")  # fmt: skip
    dialog.api_key.setText(API_KEY)
    ok.click()  # the server answers with this key: chosen, the model typed by hand kept
    qtbot.waitUntil(lambda: window.settings.use_remote, timeout=10_000)
    assert (window.settings.remote_url, window.settings.remote_model) == (stub.url("auth"), MODEL)


def test_ok_says_it_is_checking_then_that_its_check_failed_and_what_to_do(qtbot, make_window, stub, no_user_keyring):
    """Newcomer trial: base URL http://127.0.0.1:9/v1?key=abc, Fetch models, model "foo", OK: the dialog stayed open
    showing the very message Fetch models had shown, nothing said OK was tried and refused. While OK checks, the
    dialog says "Checking HOST…" with OK off (Cancel still stops it); a failed check says it was OK's and what to do."""
    from app.binding import listen

    window = make_window(wait_model=False)
    dialog = open_dialog(qtbot, window)
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    cancel = dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel)
    with listen("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]  # freed below: the connection is refused
    dialog.url.setText(f"http://127.0.0.1:{port}/v1?key=abc")
    fetch(qtbot, dialog)
    fetched = dialog.error.text()
    assert fetched == f"127.0.0.1:{port} refused the connection: check that the server is running and the port is right"
    dialog.models.setEditText("foo")
    ok.click()
    qtbot.waitUntil(lambda: dialog.error.text() != fetched and ok.isEnabled(), timeout=10_000)
    assert dialog.error.text() == (
        f"OK's check failed, so nothing was chosen: 127.0.0.1:{port} refused the connection: check that the server is "
        "running and the port is right. Then press OK again, or Cancel to keep the model you have now"
    )
    assert dialog.isVisible() and not window.settings.use_remote and "abc" not in dialog.error.text()

    # a server that does not answer yet: the check is shown, OK is off, Cancel stops it
    dialog.url.setText(stub.url("silent") + "?key=abc")
    host = stub.url("ok").split("/")[2]
    ok.click()
    qtbot.waitUntil(lambda: dialog.error.text() == f"Checking {host}…", timeout=5000)
    assert dialog.error.isVisible() and not ok.isEnabled() and cancel.isEnabled()
    cancel.click()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)
    assert not window.settings.use_remote


def test_the_model_row_and_notice_follow_where_replies_come_from(qtbot, make_window, stub, no_user_keyring):
    window = make_window()
    assert send_and_wait(qtbot, window, "Say hi").state == "complete"  # answered by the local model
    picker, notice = window.model_picker, window.model_notice
    assert picker.device.isVisibleTo(window) and picker.device.text() == "on CPU"
    choose_remote(window, stub.url("ok"))
    assert not picker.device.isVisibleTo(window)  # no "… (remote) on CPU"
    assert notice.isVisible() and notice.text.text().startswith("This chat was answered with SmolLM2")
    assert send_and_wait(qtbot, window, "Say hello").content == REPLY
    assert not notice.isVisible()  # answered by the server chosen now: the notice is past
    window.choice.apply(replace(window.settings, remote_url=stub.url("any-name"), remote_model="other-model"))
    assert notice.isVisible() and notice.text.text().endswith("(remote), a server no longer chosen.")


def test_the_status_bar_names_the_remote_server_while_it_answers(qtbot, make_window, stub, no_user_keyring):
    """Newcomer trial: with a remote server chosen, the status bar still read "SmolLM2-135M-Instruct · 4-bit ·
    exact", the local model, beside a picker naming the server: it names what the picker names while the server is
    chosen, the local model's load finishing meanwhile included, and the local model again once it is chosen."""
    window = make_window(wait_model=False)
    choose_remote(window, stub.url("ok"))
    host = stub.url("ok").split("/")[2]
    remote = f"{MODEL} on {host} (remote)"
    assert window.model_label.text() == window.model_picker.combo.currentText() == remote
    qtbot.waitUntil(lambda: window.model_state in ("ready", "error"), timeout=120_000)
    assert window.model_state == "ready" and window.model_label.text() == remote  # (the local load said nothing)
    assert window.model_label.toolTip().startswith(f"Replies come from {remote}")
    window.choice.apply(replace(window.settings, use_remote=False))
    assert window.model_label.text().endswith(" · exact") and "(remote)" not in window.model_label.text()


def test_the_footer_names_the_model_the_server_says_answered(qtbot, make_window, stub, no_user_keyring):
    """llama-server answers any model name with the one it serves: the footer named the model asked for."""
    from remote_stub import SERVED_MODEL

    window = make_window(wait_model=False)
    choose_remote(window, stub.url("any-name"))
    final = send_and_wait(qtbot, window, "Who are you?")
    host = stub.url("ok").split("/")[2]
    assert (final.content, final.state) == (REPLY, "complete")
    assert final.stats["target_model"] == f"{MODEL} on {host} (remote)"  # what the conversation asks for next time
    footer = footer_text(final.stats, final.state)
    assert footer.endswith(f"{len(REPLY_PIECES)} tokens · {SERVED_MODEL} on {host} (remote)")


def test_a_specchat_servers_reply_footer_says_only_what_the_server_reported(qtbot, make_window, stub, no_user_keyring):
    """Newcomer trial: a reply of a remote `specchat serve` read "Speculative (prompt lookup, K 4)", the K of this
    window's settings box, which the server never reported: the footer says the mode and drafter the server
    reported, and no K of this computer's."""
    from remote_stub import SPECCHAT_STATS

    window = make_window(FAST.with_values(decoding="spec_lookup", k=6), wait_model=False)
    choose_remote(window, stub.url("specchat"))
    window.choice.choose_remote()  # asks the server for its models: it is SpecChat's
    qtbot.waitUntil(lambda: any(window.replies.remote_specchat.values()), timeout=10_000)
    final = send_and_wait(qtbot, window, "Which mode?")
    assert stub.requests[-1][1]["specchat"] == {"mode": "spec_lookup", "k": 6}  # what the window asked for
    assert (final.stats["mode"], final.stats["drafter"]) == ("spec", SPECCHAT_STATS["drafter"])
    assert "k" not in final.stats
    footer = footer_text(final.stats, final.state)
    assert footer.startswith("Speculative (prompt lookup) · ") and "K 6" not in footer, footer
    # the share of drafts accepted in a local footer's words (a trial read "acceptance 75%" here, "all drafts: 31%
    # accepted" under a local reply)
    assert " · drafts: 75% accepted · " in footer and "acceptance" not in footer, footer


@pytest.mark.serial  # a wall-time bound
def test_closing_the_dialog_during_a_fetch_stops_it(qtbot, make_window, stub, no_user_keyring):
    window = make_window()
    dialog = open_dialog(qtbot, window)
    dialog.url.setText(stub.url("silent"))  # its model list never comes
    asked = len(stub.requests)
    dialog.fetch_button.click()
    qtbot.waitUntil(lambda: any(path == "/silent/v1/models" for path, _, _ in stub.requests[asked:]), timeout=5000)
    fetching = set(window.tasks._tasks)  # the fetch waits for the server now
    started = time.perf_counter()
    dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel).click()
    qtbot.waitUntil(lambda: all(task.done() for task in fetching), timeout=2000)
    assert time.perf_counter() - started < 1.0
    assert all(task.exception() is None for task in fetching)  # it touched no deleted widget
    assert not window.settings.use_remote and window.model_picker.combo.currentData() != REMOTE_DIALOG_KEY


def test_remote_errors_are_said_and_a_cut_reply_is_kept_as_stopped(qtbot, make_window, stub, no_user_keyring):
    window = make_window()
    choose_remote(window, stub.url("cut"))
    final = send_and_wait(qtbot, window, "Tell me")
    cut = "The server closed the stream before the reply ended (the partial reply was kept): Regenerate to try again"
    assert (final.content, final.state, final.stats["error"]) == (PARTIAL, "stopped", cut)
    assert window.composer.error_text == cut  # (it says itself that the reply stopped)
    saved = window.db.messages(final.conversation_id)[-1]
    assert (saved.content, saved.state, saved.stats["stop_reason"]) == (PARTIAL, "stopped", "interrupted")
    host = stub.url("ok").split("/")[2]
    footer = footer_text(saved.stats, saved.state)  # no local mode ("Plain decoding") beside a remote reply
    assert footer.startswith("Stream cut · TTFT ") and "decoding" not in footer
    assert footer.endswith(f" · {CUT_AFTER} tokens · {MODEL} on {host} (remote) · {cut}")
    markdown = export_markdown(window.db, final.conversation_id)  # the export says what the window says
    assert markdown.endswith(f"## Assistant\n\n{PARTIAL}\n\n*{footer}*\n") and "Plain decoding" not in markdown

    # refused before any text: the user message stays saved, no empty reply is left
    choose_remote(window, stub.url("busy"))
    conversation = final.conversation_id
    assert send_and_wait(qtbot, window, "Again?") is None
    assert window.composer.error_text == (
        f"Could not generate a reply: {host} is busy (429: too many requests) (the server said: queue full): retry in 7 s"
        " (your message is kept: press Send to try again)"
    )
    assert [(m.role, m.content) for m in window.db.messages(conversation)][-1] == ("user", "Again?")
    assert window.composer.text() == "Again?"  # back in the box: Send retries it...
    with qtbot.waitSignal(window.generation_finished, timeout=30_000) as retried:
        window.composer.submit()
    assert retried.args[0] is None  # (still busy)
    after = [(m.role, m.content) for m in window.db.messages(conversation)]
    assert after[-1] == ("user", "Again?") and after[-2] != ("user", "Again?")  # ...without saving it twice
    assert sum(1 for widget in window.chat_view.message_widgets() if widget.message.content == "Again?") == 1
    window.composer.clear()


def test_a_reply_cut_by_a_specchat_server_stopping_says_so_once_in_the_windows_words(
    qtbot, make_window, stub, no_user_keyring
):
    """Newcomer trial: `specchat serve` stopped (Ctrl+C) mid-reply, the window read "The reply stopped with an error:
    The server stopped the reply with an error: the server stopped before the reply ended (it is shutting down): the
    reply is incomplete; send the request again once the server runs": the stop said three times, and advice for an
    API client. The window says it once, and what to press; the text that came is kept."""
    window = make_window()
    choose_remote(window, stub.url("stopping"))
    final = send_and_wait(qtbot, window, "Tell me")
    said = ("The server stopped before the reply ended (it is shutting down). What came is kept; press Regenerate "
            "once the server runs again.")
    assert (final.content, final.state, final.stats["error"]) == (PARTIAL, "stopped", said)
    assert window.composer.error_text == said
    footer = window.chat_view.widget(final.id).footer.text()
    assert footer.startswith("Stream cut · TTFT ") and footer.endswith(f" · {said}"), footer


def test_a_503_of_a_stopping_specchat_server_says_so_once_and_keeps_the_message(
    qtbot, make_window, stub, no_user_keyring
):
    """A message sent as `specchat serve` stopped (Ctrl+C), answered with its 503 (its queue closed), read "Could
    not generate a reply: 127.0.0.1:PORT failed (503) (the server said: the server stopped before this request's turn
    came (it is shutting down): nothing was generated; send the request again once the server runs): retry, or check
    the server's log": the stop said twice, and advice for an API client. It reads as a stream stopped before its
    first token does; the message is kept, back in the box, and Send works once the server runs again (the window
    said "press Send to try again", which fails until then); so in a chat left, the status bar says."""
    window = make_window()
    choose_remote(window, stub.url("stopped"))
    assert send_and_wait(qtbot, window, "Tell me") is None
    assert window.composer.error_text == (
        "Could not generate a reply: The server stopped before the reply began (it is shutting down) (your message "
        "is kept: press Send once the server runs again)"
    )
    assert window.composer.text() == "Tell me"
    conversation = window.chat_view.conversation_id
    messages = window.db.messages(conversation)
    assert [(m.role, m.content) for m in messages] == [("user", "Tell me")]
    window.composer.clear()
    window.new_action.trigger()  # the chat left before the failure came (as a reply that waited its turn)
    assert window.chat_view.conversation_id != conversation
    window.replies.failed.emit(conversation, 0, SERVER_STOPPED_BEFORE_TEXT, "", True)
    assert window.statusBar().currentMessage() == (
        f"Could not generate the reply in “Tell me”: {SERVER_STOPPED_BEFORE_TEXT} (your message is back in its box: "
        "open it and press Send once the server runs again)"
    )


def test_a_remote_reply_cut_at_the_length_limit_offers_regenerate_not_a_continue_it_cannot_keep(
    qtbot, make_window, stub, no_user_keyring
):
    """A remote reply that stopped at max_tokens (finish reason "length") said "Continue writes more" and showed
    Continue, which then refused: servers do not all continue a partial reply (vLLM and SpecChat's own server answer
    it with a new one), so a remote reply has no Continue and its footer says what works."""
    window = make_window()
    choose_remote(window, stub.url("length"))
    final = send_and_wait(qtbot, window, "Tell me a long story")
    assert (final.content, final.state, final.stats["stop_reason"]) == (REPLY, "complete", "max_new_tokens")
    widget = window.chat_view.widget(final.id)
    host = stub.url("ok").split("/")[2]
    assert widget.footer.text().startswith("Length limit reached (raise Longest reply, then Regenerate) · TTFT ")
    assert widget.footer.text().endswith(f" · {len(REPLY_PIECES)} tokens · {MODEL} on {host} (remote)")
    assert not widget.continue_button.isVisibleTo(widget) and widget.regenerate_button.isVisibleTo(widget)
    interrupted = {**final.stats, "stop_reason": None}  # as a crash leaves a remote reply: no Continue either
    assert not can_continue(interrupted, "streaming") and can_continue({"model": "x on CPU"}, "streaming")
    assert footer_text(interrupted, "streaming") == (
        "Interrupted: SpecChat closed while this reply was being generated (the text up to then was kept)"
    )


@pytest.mark.serial  # a wall-time bound
def test_stop_during_a_silent_remote_stream_ends_the_reply_at_once(qtbot, make_window, stub, no_user_keyring):
    window = make_window()
    choose_remote(window, stub.url("silent"))
    window.composer.set_text("Wait for it")
    window.composer.submit()
    qtbot.waitUntil(lambda: window.active is not None and window.active.recorder.text == PARTIAL, timeout=10_000)
    with qtbot.waitSignal(window.generation_finished, timeout=5000) as blocker:
        started = time.perf_counter()
        window.chat.stop()
    assert time.perf_counter() - started < 1.0
    final = blocker.args[0]
    assert (final.content, final.state, final.stats["stop_reason"]) == (PARTIAL, "stopped", "cancelled")


def test_compare_runs_on_a_specchat_server_with_both_modes(qtbot, make_window, stub, no_user_keyring):
    window = make_window()
    choose_remote(window, stub.url("specchat"))
    window.choice.choose_remote()  # asks the server for its models: it is SpecChat's
    qtbot.waitUntil(lambda: window.composer.compare_button.isEnabled(), timeout=10_000)
    final = send_and_wait(qtbot, window, "Compare this", compare=True)
    compare = final.stats["compare"]
    assert final.state == "complete" and final.content == REPLY
    assert (compare["ar"]["mode"], compare["spec"]["mode"], compare["spec"]["acceptance_rate"]) == ("ar", "spec", 0.75)
    assert compare["identical"] is True and compare["speedup"] is not None
    modes = [body["specchat"]["mode"] for _, body, _ in stub.requests[-2:]]
    assert modes == ["ar", "spec_lookup"]
    # under Auto the box's K is unchecked: the Compare's prompt lookup picks its own K, never the box's
    assert window.settings.generation.decoding.value == "auto" and stub.requests[-1][1]["specchat"]["adaptive_k"] is True
    assert "k" not in stub.requests[-1][1]["specchat"] and "k" not in compare["spec"]
    assert final.draft_spans  # the SpecChat server's from_draft pieces are highlighted


@pytest.mark.parametrize(("base", "words"), [
    ("specchat", "with speculative decoding (prompt lookup)"),  # the drafter the server's statistics name
    ("specchat-unnamed", "(drafter not reported by the server)"),  # a server that does not say
])
def test_a_remote_compares_headline_says_what_drafted_as_a_local_one_does(
    qtbot, make_window, stub, no_user_keyring, base, words
):
    """Newcomer trial: a Compare against a remote server read "Speedup 1.95× over plain decoding", naming no
    drafter, where a local one read "... with Auto (draft head)": the headline names the drafter the server's
    statistics report, and says so where they report none."""
    from app.gui.reply_format import compare_headline

    window = make_window(wait_model=False)
    choose_remote(window, stub.url(base))
    window.choice.choose_remote()  # asks the server for its models: it is SpecChat's
    qtbot.waitUntil(lambda: window.composer.compare_button.isEnabled(), timeout=10_000)
    final = send_and_wait(qtbot, window, "Compare this", compare=True)
    assert final.state == "complete"
    compare = final.stats["compare"]
    # (the stub's timing decides the ratio measured, within timing noise or not: the words after it are the point)
    assert compare_headline({**compare, "speedup": 1.95}) == f"Speedup 1.95× over plain decoding {words}"
    assert compare_headline(compare).endswith(f" {words}")  # the ratio measured, said in the same words
    assert footer_text(final.stats, final.state).startswith(compare_headline(compare))


def test_a_failed_fetch_from_another_server_drops_the_models_listed_from_the_first(
    qtbot, make_window, stub, no_user_keyring
):
    """The Model box kept listing the first server's model after Fetch models failed on a new URL (a newcomer
    trial): it lists only what the URL's server listed; a name typed by hand stays."""
    from app.binding import listen

    window = make_window(wait_model=False)
    dialog = RemoteServerDialog(window, window.tasks.spawn, stub.url("ok"), "", "", lambda url: "")
    qtbot.addWidget(dialog)
    dialog.show()
    fetch(qtbot, dialog)
    assert dialog.models.count() >= 1 and dialog.models.currentText() == dialog.models.itemText(0)
    with listen("127.0.0.1", 0) as sock:
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # nothing listens there once freed
    dialog.url.setText(dead)
    fetch(qtbot, dialog)
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=10_000)
    assert dialog.models.count() == 0 and dialog.models.currentText() == ""
    dialog.models.setEditText("typed-by-hand")
    fetch(qtbot, dialog)
    qtbot.waitUntil(lambda: dialog.fetch_button.isEnabled(), timeout=10_000)
    assert dialog.models.currentText() == "typed-by-hand"


def test_a_failed_fetch_from_another_path_of_the_same_server_drops_the_models_listed(
    qtbot, make_window, stub, no_user_keyring
):
    """Only the server (scheme, host, port) was compared: a base URL whose path alone changed kept the first URL's
    model list after Fetch models failed on it."""
    window = make_window(wait_model=False)
    dialog = RemoteServerDialog(window, window.tasks.spawn, stub.url("ok"), "", "", lambda url: "")
    qtbot.addWidget(dialog)
    dialog.show()
    fetch(qtbot, dialog)
    assert [dialog.models.itemText(i) for i in range(dialog.models.count())] == [MODEL]
    dialog.url.setText(stub.url("ok").replace("/ok/v1", "/other/v1"))  # the same server: it has no such route
    fetch(qtbot, dialog)
    assert "has no model list at" in dialog.error.text()
    assert dialog.models.count() == 0 and dialog.models.currentText() == ""


def test_a_key_goes_only_to_the_server_it_was_entered_for(qtbot, make_window, stub, no_user_keyring):
    """The dialog opens with the key of the chosen server; changing the base URL to another server (another port
    here) empties the key, or shows the one stored for that server, so the first key is never sent there; going
    back brings the first key back. A key bound for another computer over plain http is warned about."""
    window = make_window(wait_model=False)
    first = stub.url("auth")  # http://127.0.0.1:PORT/auth/v1
    third = stub.url("ok").replace("127.0.0.1", "127.0.0.2")  # a third server (nothing is fetched from it)
    stored = {third: "key-of-the-third"}
    with RemoteStub() as other_stub:
        other = other_stub.url("ok")
        dialog = RemoteServerDialog(window, window.tasks.spawn, first, MODEL, API_KEY, lambda url: stored.get(url, ""))
        qtbot.addWidget(dialog)
        dialog.show()
        dialog.url.setText(other)
        fetch(qtbot, dialog)
        assert not dialog.error.isVisible() and dialog.api_key.text() == ""
        assert other_stub.requests[-1] == ("/ok/v1/models", None, None)  # no key sent to another server
    dialog.api_key.setText("typed-for-the-other")
    dialog.url.setText(third)
    dialog.url.editingFinished.emit()  # (the field loses focus)
    assert dialog.api_key.text() == "key-of-the-third"
    dialog.url.setText(other.removeprefix("http://"))  # no scheme: http://, another server than the third's
    dialog.url.editingFinished.emit()
    assert dialog.api_key.text() == "typed-for-the-other"
    dialog.url.setText(third)
    dialog.url.editingFinished.emit()
    dialog.url.setText(first)
    fetch(qtbot, dialog)
    assert dialog.api_key.text() == API_KEY and not dialog.error.isVisible()
    assert stub.requests[-1][2] == f"Bearer {API_KEY}"
    dialog.url.setText(other)
    assert dialog.choice().api_key == "typed-for-the-other"

    assert not dialog.warning.isVisible()  # the key goes to this computer
    dialog.url.setText("http://192.0.2.7:8000/v1")
    assert dialog.warning.isVisible() and "sent unencrypted to 192.0.2.7" in dialog.warning.text()
    dialog.url.setText("https://192.0.2.7:8000/v1")
    assert not dialog.warning.isVisible()
    dialog.url.setText("http://alice:s3cret@192.0.2.7:8000/v1")
    with pytest.raises(RemoteError, match="holds a user name or password"):
        dialog.choice()


def test_continue_of_a_local_reply_under_a_remote_server_says_which_model_wrote_it_and_what_to_do(
    qtbot, make_window, stub, tmp_path, no_user_keyring
):
    """A local model's reply cut at the length limit keeps its Continue; with a remote server chosen, Continue was
    refused with "Continue works with the models on this computer…", which did not say what to do (newcomer trial):
    the refusal names the local model that wrote the reply and says to choose a local model to continue it."""
    from app.gui.history_db import HistoryDB

    history = tmp_path / "history.sqlite3"
    db = HistoryDB(history)
    chat = db.create_conversation("Stories")
    db.add_message(chat, "user", "Tell me a story.")
    stats = {"mode": "ar", "ttft_ms": 40.0, "tokens_per_s": 50.0, "new_tokens": 24, "stop_reason": "max_new_tokens",
             "model": "SmolLM2-135M-Instruct-int4 on CPU", "target_label": "SmolLM2-135M-Instruct · 4-bit"}
    cut = db.add_message(chat, "assistant", "Once upon a time", stats=stats)
    db.close()
    window = make_window(history=history, start=False)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and window.chat_view.widget(cut) is not None, timeout=5000)
    choose_remote(window, stub.url("ok"))
    widget = window.chat_view.widget(cut)
    assert widget.continue_button.isVisibleTo(widget)
    widget.continue_button.click()
    assert window.active is None and window.db.message(cut).content == "Once upon a time"  # nothing was written
    assert window.composer.error_text == (
        "This reply was written by the local model SmolLM2-135M-Instruct · 4-bit: choose a model on this computer in "
        "the model picker (Ctrl+L) to continue it (a remote server cannot continue a reply; Regenerate asks it for a "
        "new one)."
    )


def test_the_longest_reply_tip_is_true_with_a_remote_server_too(qtbot, make_window, stub, no_user_keyring):
    """Its tooltip said "Continue writes more" also with a remote server chosen, whose replies have no Continue."""
    window = make_window(start=False)
    choose_remote(window, stub.url("ok"))
    tip = window.settings_pane.sampling.max_new_tokens.toolTip()
    assert "Continue writes more of a reply from a model on this computer" in tip
    assert "a remote server's: raise this, then Regenerate" in tip


def test_a_secret_in_the_base_url_is_sent_but_never_shown_nor_written_to_settings(
    qtbot, make_window, stub, no_user_keyring
):
    """A base URL with ``?key=SECRET`` was shown and kept as given (settings.json, errors in the status bar, footers
    and exports): its secret is shown as ``***`` and kept where the API key is, the requests still carry it."""
    window = make_window(wait_model=False)
    dialog = open_dialog(qtbot, window)
    dialog.url.setText(stub.url("ok").replace("/ok/", "/nowhere/") + "?key=SECRET")
    fetch(qtbot, dialog)
    assert "has no model list at" in dialog.error.text() and "SECRET" not in dialog.error.text()
    dialog.url.setText(stub.url("ok") + "?key=SECRET")
    fetch(qtbot, dialog)
    assert not dialog.error.isVisible()
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: window.settings.use_remote, timeout=5000)
    assert window.settings.remote_url == stub.url("ok") + "?key=***"
    final = send_and_wait(qtbot, window, "Say hello")
    assert final.content == REPLY and stub.requests[-1][0] == "/ok/v1/chat/completions?key=SECRET"
    assert "SECRET" not in json.dumps(final.stats) + export_markdown(window.db, final.conversation_id)
    qtbot.waitUntil(lambda: window.store.path.exists(), timeout=5000)
    assert "SECRET" not in window.store.path.read_text() and "SECRET" in keys_file().read_text()
    window.close()

    again = make_window(settings=None, wait_model=False)  # the next start sends the secret again
    assert again.settings.remote_url == stub.url("ok") + "?key=***"
    assert send_and_wait(qtbot, again, "Say hello again").content == REPLY
    assert stub.requests[-1][0] == "/ok/v1/chat/completions?key=SECRET"


def test_the_dialog_reopened_shows_the_base_url_secret_as_stars_and_still_sends_it(
    qtbot, make_window, stub, no_user_keyring
):
    """Reopened, the dialog showed the base URL's ``?key=SECRET`` in clear in its Base URL field: it shows
    ``?key=***``, and the field left so sends the secret still; a URL typed over it is the one used and kept."""
    window = make_window(wait_model=False)
    dialog = open_dialog(qtbot, window)
    dialog.url.setText(stub.url("ok") + "?key=SECRET")
    fetch(qtbot, dialog)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: window.settings.use_remote, timeout=5000)

    dialog = open_dialog(qtbot, window)
    assert dialog.url.text() == stub.url("ok") + "?key=***"
    fetch(qtbot, dialog)
    assert not dialog.error.isVisible() and stub.requests[-1][0] == "/ok/v1/models?key=SECRET"
    assert dialog.choice().base_url == stub.url("ok") + "?key=SECRET"
    dialog.url.setText(stub.url("ok") + "?key=NEW")
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: not any(d.isVisible() for d in window.findChildren(RemoteServerDialog)), timeout=5000)
    assert stub.requests[-1][0] == "/ok/v1/models?key=NEW"  # (OK checked the server first)
    assert window.settings.remote_url == stub.url("ok") + "?key=***"
    assert send_and_wait(qtbot, window, "Say hello").content == REPLY
    assert stub.requests[-1][0] == "/ok/v1/chat/completions?key=NEW"

    dialog = open_dialog(qtbot, window)
    assert dialog.url.text() == stub.url("ok") + "?key=***"
    assert dialog.choice().base_url == stub.url("ok") + "?key=NEW"
    dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel).click()


def test_a_server_listing_no_models_is_named_without_the_base_urls_secret(qtbot, make_window, stub, no_user_keyring):
    """Fetch models on a server with no model loaded said "http://…/v1?key=SECRET lists no models": the secret shows
    as ``***`` there too."""
    window = make_window(wait_model=False)
    dialog = open_dialog(qtbot, window)
    dialog.url.setText(stub.url("empty") + "?key=SECRET")
    dialog.fetch_button.click()
    qtbot.waitUntil(dialog.error.isVisible, timeout=5000)
    assert dialog.error.text().startswith(stub.url("empty") + "?key=*** lists no models: load one on the server")
    assert "SECRET" not in dialog.error.text() and stub.requests[-1][0] == "/empty/v1/models?key=SECRET"
    dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel).click()


def test_server_remote_server_opens_the_dialog_the_picker_opens(qtbot, make_window):
    """Newcomer trial: the Server menu held only "Local server…", a remote server was reachable only through the
    model picker's last entry; Server > Remote server… opens that entry's dialog, and Cancel keeps the local model."""
    from PySide6.QtWidgets import QMenu

    window = make_window(start=False)
    server_menu = next(m for m in window.menuBar().findChildren(QMenu) if m.title() == "&Server")
    assert [a.text() for a in server_menu.actions()] == ["&Local server…", "&Remote server…"]
    window.remote_server_action.trigger()
    qtbot.waitUntil(lambda: any(d.isVisible() for d in window.findChildren(RemoteServerDialog)), timeout=5000)
    dialog = next(d for d in window.findChildren(RemoteServerDialog) if d.isVisible())
    dialog.buttons.button(QDialogButtonBox.StandardButton.Cancel).click()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)
    assert not window.settings.use_remote


def test_a_long_fetch_error_makes_the_dialog_taller_and_squeezes_no_field(qtbot, make_window, stub, no_user_keyring):
    """A newcomer trial's wrong key, then a web server that is no OpenAI API: the dialog kept its height and its
    three-line message squeezed the Base URL, API key and Model fields to a few pixels each (their text cut), and
    the message's last line was cut too."""
    window = make_window(wait_model=False)
    dialog = RemoteServerDialog(window, window.tasks.spawn, stub.url("auth"), "", "wrong", lambda url: "")
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    fields = (dialog.url, dialog.api_key, dialog.models)
    heights = [field.height() for field in fields]
    assert all(height >= field.sizeHint().height() for height, field in zip(heights, fields))
    fetch(qtbot, dialog)
    qtbot.waitUntil(lambda: dialog.error.isVisible(), timeout=10_000)
    assert "refused the API key (401)" in dialog.error.text()
    qtbot.wait(50)  # the layout settles
    assert [field.height() for field in fields] == heights
    assert dialog.error.height() >= dialog.error.heightForWidth(dialog.error.width()) > dialog.fontMetrics().height()


def test_a_reply_refused_before_its_first_token_leaves_no_run_in_the_graph(qtbot, make_window, stub, no_user_keyring):
    """A newcomer trial sent to a SpecChat server just killed: the graph said "■ Auto: stopped before its first
    token" (nothing was stopped) over "One token: no speed to plot" (no token came)."""
    from app.gui.widgets.live_graph import FAILED_EARLY, NO_PLOT

    window = make_window()
    graph = window.live_graph
    choose_remote(window, stub.url("busy"))
    assert send_and_wait(qtbot, window, "Hello?") is None
    assert graph.series == [] and graph.summary.text() == FAILED_EARLY
    assert FAILED_EARLY == "Last reply: failed before its first token (nothing to measure)."
    assert graph.no_plot.text() == NO_PLOT and "One token" not in graph.no_plot.text()
    window.composer.clear()
