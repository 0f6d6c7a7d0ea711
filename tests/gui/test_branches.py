"""Chat branches in the window: Regenerate and edit-and-resend keep the earlier version, a "‹ 2/3 ›" switch on the
message moves between versions, and export writes the branch shown."""

from __future__ import annotations

import json

from conftest import FAST
from gui_helpers import click, send_and_wait

from app.gui.reply_format import metrics_text


def _shown(window) -> list[tuple[str, str]]:
    return [(w.message.role, w.message.content) for w in window.chat_view.message_widgets()]


def test_regenerate_and_edit_keep_every_version_and_the_switch_moves_between_them(qtbot, make_window, tmp_path):
    window = make_window(FAST.with_values(temperature=0.9, top_p=0.95, seed=None, sampling_preset=""))
    first = send_and_wait(qtbot, window, "Name a colour.")
    conversation_id = first.conversation_id
    with qtbot.waitSignal(window.generation_finished, timeout=120_000) as done:
        click(qtbot, window.chat_view.message_widgets()[-1].regenerate_button)
    second = done.args[0]
    reply = window.chat_view.message_widgets()[-1]
    qtbot.waitUntil(lambda: reply.version_switch is not None and reply.version_switch.isVisible(), timeout=3000)
    assert reply.message.id == second.id and reply.version_label.text() == "2/2"
    assert not reply.next_version.isEnabled() and reply.previous_version.isEnabled()
    click(qtbot, reply.previous_version)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and window.chat_view.message_widgets()[-1].message.id == first.id, timeout=3000)
    reply = window.chat_view.message_widgets()[-1]
    assert reply.version_label.text() == "1/2" and reply.body.markdown == first.content  # the earlier reply, kept
    assert [m.id for m in window.db.messages(conversation_id)][-1] == first.id  # the branch shown is saved
    # the live graph speaks of the reply shown, not of the version switched away from (newcomer trial)
    graph = window.live_graph
    assert graph.series == [] and graph.summary.text().startswith(f"Last reply: {metrics_text(first.stats)}.")
    qtbot.waitUntil(reply.next_version.isVisible, timeout=3000)
    click(qtbot, reply.next_version)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and window.chat_view.message_widgets()[-1].message.id == second.id, timeout=3000)
    assert [s.reply_id for s in graph.series] == [second.id]  # its runs, drawn again
    back = window.chat_view.message_widgets()[-1]
    qtbot.waitUntil(back.previous_version.isVisible, timeout=3000)
    click(qtbot, back.previous_version)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and window.chat_view.message_widgets()[-1].message.id == first.id, timeout=3000)

    # edit and resend the question: a new branch; the first question, with both its replies, stays a version away
    user = window.chat_view.message_widgets()[0]
    qtbot.waitUntil(user.isVisible, timeout=3000)
    user.start_editing()
    user.editor.setPlainText("Name a fruit.")
    with qtbot.waitSignal(window.generation_finished, timeout=120_000):
        click(qtbot, user.resend_button)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and len(window.chat_view.message_widgets()) == 2, timeout=3000)
    assert _shown(window)[0] == ("user", "Name a fruit.")
    user = window.chat_view.message_widgets()[0]
    qtbot.waitUntil(user.isVisible, timeout=3000)
    assert user.version_label.text() == "2/2"
    # the chat was titled after its first message: the title follows the edit (issue 35 item 6)
    assert window.db.conversation(conversation_id).title == "Name a fruit."
    assert window.chat_view.title_label.text() == "Name a fruit." and window.windowTitle().startswith("Name a fruit.")
    assert window.conversation_list.item_for(conversation_id).text() == "Name a fruit."
    exported = tmp_path / "branch.json"
    window.conversations.export(exported, "json")
    assert [m["content"] for m in json.loads(exported.read_text())["messages"]][0] == "Name a fruit."
    click(qtbot, user.previous_version)
    qtbot.waitUntil(lambda: window.chat_view.fully_loaded and _shown(window)[0] == ("user", "Name a colour."), timeout=3000)
    # with the reply chosen under it (1/2, switched to above), not the latest (issue 35 item 6)
    assert _shown(window)[1] == ("assistant", first.content)
    assert window.chat_view.message_widgets()[-1].version_label.text() == "1/2"
    window.conversations.export(exported, "json")
    assert [m["content"] for m in json.loads(exported.read_text())["messages"]] == ["Name a colour.", first.content]
    assert window.db.conversation(conversation_id).message_count == 5  # 2 questions, 3 replies: nothing lost
