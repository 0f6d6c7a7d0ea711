"""Killing the application mid-reply loses at most the last second of the reply; a restart shows it intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from conftest import FAST

from app.gui.history_db import HistoryDB
from app.gui.settings_store import SettingsStore

DRIVER = Path(__file__).with_name("kill_driver.py")
PROMPT = "Write a long story about a dragon who learns to cook, with many details."
STREAM_BEFORE_KILL_S = 2.0


def _read_line(process, deadline: float) -> str:
    line = process.stdout.readline()
    if not line and time.monotonic() > deadline:
        raise AssertionError("the driver stopped talking")
    return line.strip()


def test_killed_mid_reply_the_conversation_is_intact_on_restart(tmp_path, make_window, data_dir, int4_dir):
    history = tmp_path / "history.sqlite3"
    settings = tmp_path / "settings.json"
    SettingsStore(settings).save(FAST.with_values(max_new_tokens=600))
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECCHAT_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, str(DRIVER), str(history), str(settings), PROMPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []  # every line the driver printed
    reports: list[tuple[float, int]] = []  # (time, characters of the reply) at each streamed batch
    try:
        deadline = time.monotonic() + 180
        while (line := _read_line(process, deadline)) != "READY":
            assert process.poll() is None, f"the driver exited: {line}"
        while True:
            line = _read_line(process, deadline)
            lines.append(line)
            assert line != "FINISHED", "the reply ended before the kill: make it longer"
            if not line or not line[0].isdigit():
                continue
            stamp, length = line.split()
            reports.append((float(stamp), int(length)))
            if length != "0" and reports[-1][0] - reports[0][0] >= STREAM_BEFORE_KILL_S:
                break
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        process.wait(timeout=30)
        lines += process.stdout.read().split("\n")  # what the driver printed after the last line read
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    saves = [int(line.split()[1]) for line in lines if line.startswith("SAVING ")]

    # the database is intact (HistoryDB runs PRAGMA quick_check) and holds the conversation
    db = HistoryDB(history)
    [conversation] = db.conversations()
    user, reply = db.messages(conversation.id)
    assert (user.role, user.content) == ("user", PROMPT)
    assert reply.role == "assistant" and reply.state == "streaming"  # it was interrupted
    # at most the last second was lost: what was saved is at least what had streamed a second before the kill
    streamed_a_second_before = max((length for stamp, length in reports if stamp <= killed_at - 1.0), default=0)
    assert len(reply.content) >= streamed_a_second_before > 0, (len(reply.content), reports[-5:])
    # what was saved is one of the writes the driver announced, whole (the last to commit before the kill)
    assert len(reply.content) in saves, (len(reply.content), saves[-5:])
    db.close()

    # restart: the window shows the conversation with the partial reply marked as interrupted
    window = make_window(replace(FAST), history=history)
    assert window.chat_view.conversation_id == conversation.id
    user_widget, reply_widget = window.chat_view.message_widgets()
    assert user_widget.body.markdown == PROMPT and reply_widget.body.markdown == reply.content
    assert reply_widget.footer.text().startswith("Interrupted: SpecChat closed while this reply was being generated")
    assert reply_widget.regenerate_button.isVisible()  # it can be generated again
