"""Fixtures of the GUI tests: offscreen Qt, the asyncio loop on top of it, a shared inference worker, windows.

The Qt platform is ``offscreen`` (set before Qt is imported). Windows share one ``InferenceWorker`` so the
default model is loaded once per session; each window gets its own history database and settings file, and API
keys (of remote servers, of the local server) go to a file in the test's own config folder, never to the user's
keyring.
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from app.gui.qt_compat import protect_singletons  # noqa: E402
from app.gui.sampling_presets import BUILTIN_PRESETS  # noqa: E402
from app.gui.settings_store import AppSettings, SettingsStore  # noqa: E402

protect_singletons()  # PySide6 6.12.0 drops references to None/True (see app/qt_compat.py)

#: Settings of most GUI tests: greedy, short replies (the machine may be slow).
FAST = AppSettings().with_values(max_new_tokens=24, sampling_preset="Precise", **BUILTIN_PRESETS["Precise"])  # greedy


@pytest.fixture
def head_folder(tmp_path) -> str:
    """A folder that reads as a draft head (its manifest file, empty): what the settings take as one, never loaded."""
    from inference.draft_head import HEAD_MANIFEST

    folder = tmp_path / "some-head"
    folder.mkdir()
    (folder / HEAD_MANIFEST).write_text("{}")
    return str(folder)


@pytest.fixture(autouse=True)
def no_user_keyring(tmp_path, monkeypatch):
    """Keys go to the fallback file in this test's config folder, never to the user's keyring."""
    import keyring
    import keyring.backends.fail

    monkeypatch.setenv("SPECCHAT_CONFIG_DIR", str(tmp_path / "config"))
    previous = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())
    yield
    keyring.set_keyring(previous)


@pytest.fixture(scope="module", autouse=True)
def garbage_collected_on_gui_thread(qapp):
    """As in the app, cyclic garbage is collected on the GUI thread only (``app.gui.application.gc_policy``); each module ends
    with CPython's automatic collection back on, so the tests outside tests/gui run with it."""
    from app.gui.gc_policy import collect_on_gui_thread, restore_automatic_collection

    collector = collect_on_gui_thread()
    yield collector
    restore_automatic_collection(collector)


@pytest.fixture(scope="session")
def qt_asyncio_loop(qapp):
    """The asyncio loop on Qt's event loop (qtbot's waits drive both), made once a session; ``qasync_loop`` makes it
    the running loop where a test module needs it."""
    import qasync

    from app.gui.application import create_application

    create_application()  # style sheet and icon on pytest-qt's QApplication
    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.events._set_running_loop(None)  # (the constructor made it this thread's running loop)
    return loop


@pytest.fixture(scope="module")
def qasync_loop(qt_asyncio_loop):
    """Qt's asyncio loop, this thread's running (and current) loop for the module that asks for it, and no longer
    after it: tests outside tests/gui that make test's xdist workers run in the same process afterwards drive loops
    of their own (pydantic-ai's ``run_sync`` raised "Event loop already running" on Qt's)."""
    asyncio.events._set_running_loop(qt_asyncio_loop)
    asyncio.set_event_loop(qt_asyncio_loop)
    yield qt_asyncio_loop
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(None)


@pytest.fixture(scope="session")
def shared_worker(int4_dir, int8_dir):
    """One inference thread for the session (the default model stays loaded between tests)."""
    from app.backends.worker import InferenceWorker

    worker = InferenceWorker()
    yield worker
    worker.shutdown()


@pytest.fixture
def make_window(qtbot, qasync_loop, shared_worker, tmp_path):
    """Factory: a shown MainWindow on a fresh history and settings file (``settings`` saved first)."""
    from app.gui.application import create_main_window

    windows = []

    def make(settings: AppSettings | None = FAST, history=None, start: bool = True, worker=shared_worker, wait_model: bool = True):
        settings_path = tmp_path / "config" / "settings.json"
        if settings is not None:
            SettingsStore(settings_path).save(settings)
        window = create_main_window(history or tmp_path / "history.sqlite3", settings_path, worker=worker)
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        if start:
            window.start()
            if wait_model:
                qtbot.waitUntil(lambda: window.model_state in ("ready", "error"), timeout=120_000)
                assert window.model_state == "ready", window.model_error
        return window

    yield make
    for window in windows:
        window.close()
        window.db.close()



def field_geometry(pane) -> dict:
    """Where each visible field of a settings pane is: flat setting name -> its QRect in the pane's scrolled widget."""
    from PySide6.QtCore import QPoint, QRect

    inner = pane.widget()
    return {name: QRect(widget.mapTo(inner, QPoint(0, 0)), widget.size()) for name, widget in pane.fields.items()
            if widget.isVisibleTo(pane)}  # fmt: skip
