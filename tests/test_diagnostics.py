"""Diagnosability: the log files (folder, rotation, crash tracebacks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import platformdirs

from app.logging_setup import BACKUP_COUNT, LOG_DIR_ENV, log_dir

REPO = Path(__file__).resolve().parent.parent


def _child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPECCHAT_")}
    env.update(SPECCHAT_DATA_DIR=str(tmp_path / "data"), SPECCHAT_CONFIG_DIR=str(tmp_path / "config"), **extra)
    return env


def _run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


# --- the log folder and files -------------------------------------------------------------------------------


def test_log_folder_is_the_override_then_the_data_folder_then_the_platforms(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LOG_DIR_ENV, str(tmp_path / "logs-here"))
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "data"))
    assert log_dir() == tmp_path / "logs-here"
    monkeypatch.delenv(LOG_DIR_ENV)
    assert log_dir() == tmp_path / "data" / "logs"
    monkeypatch.delenv("SPECCHAT_DATA_DIR")
    assert log_dir() == Path(platformdirs.user_log_dir("specchat"))


def test_log_file_rotates_and_keeps_three_old_files(tmp_path: Path) -> None:
    result = _run_python(
        """
        import logging
        from app.logging_setup import setup_logging
        print(setup_logging("cli"))
        for i in range(5000):
            logging.getLogger("test").info("line %05d %s", i, "x" * 1000)  # about 5 MB
        logging.getLogger("test").warning("the last line")
        """,
        _child_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    logs = tmp_path / "data" / "logs"
    assert result.stdout.strip() == str(logs / "cli.log")
    assert result.stderr == "the last line\n"  # warnings still reach stderr, in the command line's plain format
    names = sorted(path.name for path in logs.iterdir())
    assert names == ["cli.log"] + [f"cli.log.{n}" for n in range(1, BACKUP_COUNT + 1)]
    assert all(path.stat().st_size <= 1_000_000 for path in logs.iterdir())
    current = (logs / "cli.log").read_text(encoding="utf-8")
    assert "line 04999" in current and current.rstrip().endswith("WARNING test: the last line")


def test_a_crash_leaves_its_traceback_in_the_log_also_after_a_rotation(tmp_path: Path) -> None:
    result = _run_python(
        """
        import faulthandler, logging
        import app.logging_setup as logging_setup
        logging_setup.MAX_BYTES = 20_000
        logging_setup.setup_logging("window")
        for i in range(100):
            logging.getLogger("test").info("filler %s", "x" * 500)
        def crashing_function():
            faulthandler._sigsegv()
        crashing_function()
        """,
        _child_env(tmp_path),
    )
    assert result.returncode == -signal.SIGSEGV
    logs = tmp_path / "data" / "logs"
    assert (logs / "window.log.1").is_file(), "the log was not rotated before the crash"
    log = (logs / "window.log").read_text(encoding="utf-8", errors="replace")
    assert "Fatal Python error: Segmentation fault" in log
    assert "crashing_function" in log  # the Python traceback, not just the signal


def test_unwritable_log_folder_leaves_the_command_line_quiet(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the data folder should be")
    result = _run_python(
        """
        from app.logging_setup import setup_logging
        print(setup_logging("cli"))
        """,
        _child_env(tmp_path),
    )
    assert result.returncode == 0 and result.stdout.strip() == "None" and result.stderr == ""


def test_version_still_prints() -> None:
    from app import __version__

    result = subprocess.run([sys.executable, "-m", "app", "--version"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout.strip()) == (0, f"specchat {__version__}")
