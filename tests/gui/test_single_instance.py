"""One window per data folder: a second start brings the first forward, a killed window blocks nothing, two starts
at once open one window on one healthy history, and the command line runs beside the window."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock
from PySide6.QtCore import QDir
from PySide6.QtWidgets import QWidget

from app.gui.single_instance import LOCK_NAME, Claim, SingleInstance, bring_forward, server_name

REPO = Path(__file__).resolve().parents[2]
SHOWN = "main window shown"
FORWARDED = "SpecChat is already running on {}: its window was brought forward"


class App:
    """``python -m app`` (the window, or a subcommand) on tmp data and config folders, offscreen, its output read
    by threads so that nothing blocks."""

    def __init__(self, tmp_path: Path, *arguments: str):
        env = {key: value for key, value in os.environ.items() if not key.startswith("SPECCHAT_")}
        env.update(QT_QPA_PLATFORM="offscreen", SPECCHAT_SMOKE_TEST="window")
        folders = ["--data-dir", str(tmp_path / "data"), "--config-dir", str(tmp_path / "config")]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app", *folders, *arguments],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=lambda: self.stdout.extend(self.process.stdout), daemon=True),
            threading.Thread(target=lambda: self.stderr.extend(self.process.stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def shown(self) -> bool:
        return SHOWN + "\n" in self.stdout

    def wait_until(self, condition, timeout: float = 120.0, qtbot=None) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; stdout {self.stdout}, stderr {''.join(self.stderr)[-3000:]}")
            if qtbot is not None:
                qtbot.wait(50)  # the test's own window answers meanwhile
            else:
                time.sleep(0.05)

    def finish(self, timeout: float = 60.0) -> int:
        returncode = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        return returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture
def apps():
    started: list[App] = []
    yield started
    for app in started:
        app.kill()


def _start(apps: list[App], tmp_path: Path, *arguments: str) -> App:
    app = App(tmp_path, *arguments)
    apps.append(app)
    return app


def test_server_name_is_one_per_data_folder(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert server_name(tmp_path / "a") == server_name(tmp_path / "a" / ".." / "a")
    assert server_name(tmp_path / "a") != server_name(tmp_path / "b")
    assert server_name(tmp_path / "a").startswith("specchat-") and len(server_name(tmp_path / "a")) == 25


def test_second_start_brings_the_minimized_window_forward_and_exits_0(qtbot, tmp_path: Path, apps) -> None:
    instance = SingleInstance(tmp_path / "data")
    assert instance.claim(timeout_s=1) is Claim.WINDOW
    window = QWidget()
    qtbot.addWidget(window)
    instance.activation_requested.connect(lambda: bring_forward(window))
    window.showMinimized()
    qtbot.waitUntil(window.isMinimized)
    try:
        second = _start(apps, tmp_path)
        second.wait_until(lambda: second.process.poll() is not None, qtbot=qtbot)
        assert second.finish() == 0, "".join(second.stderr)
        assert FORWARDED.format(tmp_path / "data") + "\n" in second.stderr
        assert not second.shown
        qtbot.waitUntil(lambda: not window.isMinimized() and window.isVisible(), timeout=5000)
    finally:
        instance.release()


def test_a_window_that_does_not_answer_is_reported_after_the_timeout(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    held = FileLock(tmp_path / "data" / LOCK_NAME, thread_local=False)
    held.acquire()  # a live holder that never listens (a hung window)
    try:
        started = time.monotonic()
        assert SingleInstance(tmp_path / "data").claim(timeout_s=0.5) is Claim.UNANSWERED
        assert time.monotonic() - started >= 0.5
    finally:
        held.release()
    instance = SingleInstance(tmp_path / "data")
    assert instance.claim(timeout_s=0.5) is Claim.WINDOW  # freed: the next start takes it
    instance.release()


def test_command_line_runs_beside_the_window(qtbot, tmp_path: Path, apps) -> None:
    instance = SingleInstance(tmp_path / "data")
    assert instance.claim(timeout_s=1) is Claim.WINDOW
    try:
        cli = _start(apps, tmp_path, "models", "list")
        cli.wait_until(lambda: cli.process.poll() is not None, qtbot=qtbot)
        assert cli.finish() == 0
        assert "no models installed" in "".join(cli.stderr)
    finally:
        instance.release()


def test_killed_window_does_not_block_the_next_start(tmp_path: Path, apps) -> None:
    first = _start(apps, tmp_path)
    first.wait_until(lambda: first.shown)
    socket_file = Path(QDir.tempPath()) / server_name(tmp_path / "data")
    assert socket_file.exists()
    first.process.send_signal(signal.SIGKILL)
    assert first.finish() == -signal.SIGKILL
    assert (tmp_path / "data" / LOCK_NAME).exists() and socket_file.exists()  # both left behind by kill -9

    second = _start(apps, tmp_path)
    second.wait_until(lambda: second.shown or second.process.poll() is not None)
    assert second.shown, "".join(second.stderr)
    second.process.send_signal(signal.SIGTERM)
    assert second.finish() == 0, "".join(second.stderr)
    assert not socket_file.exists()


def test_two_starts_at_once_on_an_empty_data_folder_open_one_window_on_one_healthy_history(tmp_path: Path, apps) -> None:
    both = [_start(apps, tmp_path), _start(apps, tmp_path)]
    for app in both:
        app.wait_until(lambda app=app: app.shown or app.process.poll() is not None)
    windows = [app for app in both if app.shown]
    assert len(windows) == 1, [(app.stdout, "".join(app.stderr)) for app in both]
    window, forwarded = windows[0], next(app for app in both if not app.shown)
    assert forwarded.finish() == 0, "".join(forwarded.stderr)
    assert FORWARDED.format(tmp_path / "data") + "\n" in forwarded.stderr
    window.process.send_signal(signal.SIGTERM)
    assert window.finish() == 0, "".join(window.stderr)

    data = tmp_path / "data"
    assert sorted(path.name for path in data.iterdir() if "history" in path.name) == ["history.sqlite3"]
    with sqlite3.connect(data / "history.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA user_version").fetchone()[0] > 0
    log = (data / "logs" / "window.log").read_text(encoding="utf-8")
    assert log.count("a second start asked this window to come forward") == 1
