"""Diagnosability: the log files (folder, rotation, crash tracebacks) and the checks before Qt starts on Linux."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import platformdirs
import pytest

from app.gui.display_check import (
    EMOJI_FONT_PACKAGE,
    XCB_LIBRARIES,
    display_problem,
    missing_xcb_libraries,
    xcb_packages,
)
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


def test_the_log_is_its_owner_s_and_holds_no_request_url(tmp_path: Path) -> None:
    """A newcomer trial found a remote server's ``?key=SECRET123`` in ``window.log`` (mode 644): httpx logs every
    request's URL at INFO. The log file is created readable by its owner only, and keeps no request line."""
    result = _run_python(
        """
        import logging
        import httpx
        from app.logging_setup import setup_logging
        print(setup_logging("window"))
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"data": []}))
        with httpx.Client(transport=transport) as client:
            client.get("http://127.0.0.1:8765/v1/models?key=SECRET123")
        logging.getLogger("test").info("after the request")
        """,
        _child_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    log = tmp_path / "data" / "logs" / "window.log"
    text = log.read_text(encoding="utf-8")
    assert "after the request" in text  # (INFO records are written, as the README says: the start line too)
    assert "INFO app.logging_setup: SpecChat " in text and " (window) started: Python " in text
    assert "SECRET123" not in text and "HTTP Request" not in text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


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


def test_a_faulthandler_already_on_keeps_writing_where_it_was_asked(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", "import faulthandler, app.logging_setup as s; "
         "s.setup_logging('cli'); faulthandler._sigsegv()"],
        cwd=REPO, env=_child_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in result.stderr
    assert "Fatal Python error" not in (tmp_path / "data" / "logs" / "cli.log").read_text(encoding="utf-8")


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


# --- before Qt starts: a display, and the X11 plugin's libraries ----------------------------------------------


def _loader(missing: set[str]):
    """A stand-in for ctypes.CDLL that cannot open the libraries named in ``missing`` (or paths ending so)."""
    opened = []

    def load(name: str) -> None:
        opened.append(name)
        if any(name.endswith(gone) for gone in missing):
            raise OSError(f"{Path(name).name}: cannot open shared object file: No such file or directory")

    load.opened = opened
    return load


def test_missing_xcb_libraries_give_the_apt_line_that_installs_them(tmp_path: Path) -> None:
    plugin = tmp_path / "libqxcb.so"
    plugin.write_bytes(b"")
    load = _loader({"libqxcb.so", "libxcb-cursor.so.0", "libxcb-icccm.so.4"})
    problem = display_problem({"DISPLAY": ":0"}, "linux", load, plugin)
    assert problem == (
        "error: the window needs X11 libraries that are not installed (libxcb-cursor.so.0, libxcb-icccm.so.4); "
        "install them with: sudo apt-get install libxcb-cursor0 libxcb-icccm4"
    )
    assert missing_xcb_libraries(load) == ["libxcb-cursor.so.0", "libxcb-icccm.so.4"]


def test_an_xcb_plugin_that_loads_needs_nothing_more(tmp_path: Path) -> None:
    plugin = tmp_path / "libqxcb.so"
    plugin.write_bytes(b"")
    load = _loader(set())
    assert display_problem({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, "linux", load, plugin) is None
    assert load.opened == [str(plugin)]  # the sonames are tried only to explain a failure


def test_plugin_failing_for_another_library_names_the_loaders_reason(tmp_path: Path) -> None:
    plugin = tmp_path / "libqxcb.so"
    plugin.write_bytes(b"")
    problem = display_problem({"DISPLAY": ":0"}, "linux", _loader({"libqxcb.so"}), plugin)
    assert problem == "error: Qt's X11 platform plugin cannot be loaded: libqxcb.so: cannot open shared object file: No such file or directory"


@pytest.mark.parametrize(
    "environ, platform",
    [
        ({"QT_QPA_PLATFORM": "offscreen"}, "linux"),
        ({"WAYLAND_DISPLAY": "wayland-0"}, "linux"),
        ({"WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"}, "linux"),
        ({"QT_QPA_PLATFORM": "wayland"}, "linux"),
        ({}, "win32"),
        ({}, "darwin"),
    ],
)
def test_other_platforms_are_left_to_qt(environ: dict, platform: str, tmp_path: Path) -> None:
    load = _loader({"libqxcb.so", *XCB_LIBRARIES})
    assert display_problem(environ, platform, load, tmp_path / "libqxcb.so") is None
    assert load.opened == []


@pytest.mark.parametrize("environ", [{}, {"QT_QPA_PLATFORM": "xcb"}, {"DISPLAY": ""}])
def test_no_display_is_said_plainly(environ: dict) -> None:
    problem = display_problem(environ, "linux", _loader(set()))
    assert problem.startswith("error: no display (")
    assert "run SpecChat in a desktop session, or set QT_QPA_PLATFORM=offscreen" in problem


def test_window_without_a_display_exits_2_with_one_clear_line(tmp_path: Path) -> None:
    env = _child_env(tmp_path)
    for variable in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        env.pop(variable, None)
    result = subprocess.run([sys.executable, "-m", "app"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: no display (neither DISPLAY nor WAYLAND_DISPLAY is set): run SpecChat in a desktop session, or set "
        "QT_QPA_PLATFORM=offscreen to run it without one (the command line, `specchat generate|chat|serve|models`, needs no display)"
    ]
    assert "no display" in (tmp_path / "data" / "logs" / "window.log").read_text(encoding="utf-8")
    assert not (tmp_path / "data" / "history.sqlite3").exists()  # it stopped before opening anything


def test_readme_and_deb_name_every_xcb_package_and_the_emoji_font() -> None:
    line = "sudo apt-get install " + " ".join(xcb_packages()) + " " + EMOJI_FONT_PACKAGE + "\n"
    assert line in (REPO / "README.md").read_text(encoding="utf-8")
    build = (REPO / "packaging" / "build_linux.sh").read_text()
    assert "from app.gui.display_check import xcb_packages" in build
    assert "Recommends: $EMOJI_FONT" in build and "import EMOJI_FONT_PACKAGE" in build
