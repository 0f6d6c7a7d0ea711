"""20 SIGKILLs at random moments of a scripted chat (chat_kill_driver.py, which writes the history the way the
window does): after each restart, every message shown more than a second before the kill is in the history,
with at least the text shown then (and still is after the later kills), and the database passes PRAGMA integrity_check and is never moved aside."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from chat_kill_driver import reply_text

from app.gui.history_db import HistoryDB

DRIVER = Path(__file__).with_name("chat_kill_driver.py")
KILLS = 20
SHOWN_BEFORE_KILL_S = 1.0


def _run_and_kill(history: Path, log: Path, after_s: float) -> tuple[float, list[str]]:
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, str(DRIVER), str(history)], stdout=out, stderr=subprocess.STDOUT)
        try:
            time.sleep(after_s)
            killed_at = time.monotonic()
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return killed_at, log.read_text().splitlines()


def test_twenty_kills_at_random_moments_lose_nothing_shown_a_second_before(tmp_path):
    history = tmp_path / "history.sqlite3"
    rng = random.Random(int(os.environ.get("SPECCHAT_KILL_SEED", "17")))
    shown: dict[int, int] = {}  # message id -> characters shown a second before a kill, over all runs
    for kill in range(KILLS):
        # early kills hit the start (creating and migrating the database), later ones the chat itself
        after_s = rng.uniform(0.05, 0.6) if kill < 3 else rng.uniform(0.6, 3.0)
        killed_at, lines = _run_and_kill(history, tmp_path / f"driver-{kill}.log", after_s)
        assert not [line for line in lines if line.startswith(("NOTICE", "Traceback"))], lines[:5]
        for line in lines:
            parts = line.split()
            if len(parts) == 4 and parts[1] == "SHOWN" and float(parts[0]) <= killed_at - SHOWN_BEFORE_KILL_S:
                shown[int(parts[2])] = max(shown.get(int(parts[2]), 0), int(parts[3]))

        raw = sqlite3.connect(history)
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",), f"kill {kill}"
        raw.close()
        db = HistoryDB(history)
        try:
            for message_id, length in shown.items():  # this run's messages, and every earlier run's still intact
                message = db.message(message_id)
                assert message is not None, f"kill {kill} after {after_s:.2f} s: message {message_id} was lost"
                assert len(message.content) >= length, (kill, message_id, len(message.content), length)
                if message.role == "assistant":
                    assert reply_text(message_id).startswith(message.content), (kill, message_id)
        finally:
            db.close()
    assert not [p for p in tmp_path.iterdir() if ".unreadable-" in p.name]
    assert len(shown) >= KILLS, f"only {len(shown)} messages were checked: the kills came too early"
