"""SpecChats started at the same moment on an empty data folder share one healthy history: the second one to
migrate sees the first one's schema (read again under the write lock) instead of failing with "table already
exists" and moving the first one's live database aside."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from app.gui.history_schema import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
OPENER = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
from app.gui.history_recovery import open_history
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
db, notice = open_history(sys.argv[1])
db.add_message(db.create_conversation("from " + str(sys.argv[4])), "user", "hello")
print(json.dumps({"notice": notice, "in_memory": db.in_memory}))
db.close()
"""
ROUNDS = 6
PROCESSES_PER_ROUND = 4


def test_processes_opening_an_empty_history_together_share_one_healthy_database(tmp_path):
    start_at = time.time() + 2.0  # every process imports first, then all open at this instant
    paths = [tmp_path / f"round{round_}" / "history.sqlite3" for round_ in range(ROUNDS)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(path), repr(start_at), str(REPO), str(index)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        for path in paths
        for index in range(PROCESSES_PER_ROUND)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    assert results == [{"notice": None, "in_memory": False}] * (ROUNDS * PROCESSES_PER_ROUND)
    for path in paths:
        assert [p.name for p in path.parent.iterdir() if ".unreadable-" in p.name] == []
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert raw.execute("SELECT COUNT(*) FROM messages").fetchone() == (PROCESSES_PER_ROUND,)
        raw.close()
