"""Starting the desktop application: ``run()`` is what ``specchat`` without a subcommand calls (``app.main``).

The Qt event loop runs asyncio through qasync; the history database and the settings are opened, the main
window shown, and the model prepared in the background (with a progress dialog if it must be fetched first).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

logger = logging.getLogger(__name__)

APP_NAME = "SpecChat"
#: ``1``: report the start-up on stdout and quit once the model is ready; ``window``: no model (see ``run``).
SMOKE_TEST_ENV = "SPECCHAT_SMOKE_TEST"


#: How long a thread running Python code keeps the GIL while another waits for it (CPython's default is 5 ms).
#: PySide releases the GIL around every Qt call and takes it back after, so while a worker thread runs Python code
#: (loading pygments' lexers, an engine step's sampling) each of those calls could wait a full interval: a handler
#: making ten Qt calls stalled the window 50-70 ms on 2 AVX2 cores. At 1 ms it waits a fifth as long.
GUI_SWITCH_INTERVAL_S = 0.001


def create_application(argv: list[str] | None = None) -> QApplication:
    """The QApplication (created once), with SpecChat's name, style and icon, and the GIL's switch interval set to
    ``GUI_SWITCH_INTERVAL_S``."""
    from . import theme
    from .qt_compat import protect_singletons

    protect_singletons()
    sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)
    app = QApplication.instance()
    if app is None:
        QApplication.setApplicationName("specchat")
        QApplication.setApplicationDisplayName(APP_NAME)
        QApplication.setOrganizationName("specchat")
        app = QApplication(list(argv) if argv else [sys.argv[0] if sys.argv else "specchat"])
    app.setDesktopFileName("specchat")  # matches specchat.desktop, so desktops show the right icon
    app.setStyle(theme.OutlinedIndicators())  # Fusion, whose check boxes read in both themes
    theme.remember_platform_palette()  # before SpecChat's palette replaces the platform's
    theme.apply(app, theme.current())  # the window applies the theme its settings choose
    app.setWindowIcon(theme.make_icon())
    return app


def create_main_window(
    history_path: str | Path | None = None,
    settings_path: str | Path | None = None,
    worker=None,
):
    """Open the history and the settings and build the main window (not shown yet).

    Args:
        history_path: the SQLite file (default: ``history.sqlite3`` in the data folder).
        settings_path: the settings file (default: ``settings.json`` in the config folder).
        worker: an existing ``InferenceWorker`` to share (the window then does not shut it down).
    """
    from inference.devices import available_devices

    from ..backends.worker import InferenceWorker
    from .history_recovery import open_history
    from .main_window import MainWindow
    from .settings_store import SettingsStore

    db, notice = open_history(history_path)
    store = SettingsStore(settings_path)
    owns_worker = worker is None
    worker = worker or InferenceWorker()
    try:
        devices = available_devices()
    except RuntimeError as error:  # OpenVINO could not enumerate devices: offer the CPU
        logger.warning("cannot list OpenVINO devices: %s", error)
        devices = ["CPU"]
    return MainWindow(db, store, worker, devices, history_notice=notice, owns_worker=owns_worker)


def build_tokenizers_before_event_loop(settings) -> None:
    """Build the tokenizers of the models ``settings`` ask for, and their fingerprints, before the Qt event loop
    starts.

    openvino-genai's Tokenizer constructor holds Python's GIL for 0.15-0.5 s (see
    ``inference.tokenizer_cache.shared_tokenizer``), and decoding the vocabulary for the fingerprint that a draft head's check
    compares another 50-100 ms (``inference.tokenizer_cache.tokenizer_fingerprint``); done on the inference thread they would
    freeze the window for that long. Built here, before the window shows, it only delays the first paint, and the background model load
    finds it in the process-wide cache. Models not installed yet, and tokenizers that fail to build, are left
    to the background load, which reports errors properly.

    Args:
        settings: the ``AppSettings`` the window starts with.
    """
    from inference.model import prepare_tokenizer
    from inference.models.default_model import default_model_dir

    folders = [default_model_dir(settings.bits)]
    if settings.uses_draft_model and settings.draft_model:
        folders.append(Path(settings.draft_model))
    for folder in folders:
        if (folder / "openvino_tokenizer.xml").is_file():
            try:
                prepare_tokenizer(folder)
            except (RuntimeError, OSError) as error:
                logger.warning("tokenizer of %s not built ahead: %s", folder, error)


def _quit_when_ready(window) -> list[int]:
    """Smoke-test mode: print ``main window shown`` once the window is up, then quit when the model is ready.

    Prints ``model ready: <model>`` and closes the window, or prints ``model failed: <why>`` on stderr and closes
    it with exit status 1. Returns a one-element list holding the exit status, set when the model settles.
    """
    status = [0]

    def ready(description: str) -> None:
        print(f"model ready: {description}", flush=True)
        window.close()

    def failed(message: str) -> None:
        print(f"model failed: {message}", file=sys.stderr, flush=True)
        status[0] = 1
        window.close()

    window.model_ready.connect(ready)
    window.model_failed.connect(failed)
    _say_when_shown()
    return status


def _say_when_shown() -> None:
    QTimer.singleShot(0, lambda: print("main window shown", flush=True))


def _claim_data_folder(instance) -> int | None:
    """Take the data folder for this window (``app.gui.single_instance``); the exit status if another has it."""
    from .single_instance import Claim

    claim = instance.claim()
    if claim is Claim.WINDOW:
        return None
    if claim is Claim.FORWARDED:
        logger.info("another window runs on %s: it was asked to come forward", instance.data_folder)
        print(f"SpecChat is already running on {instance.data_folder}: its window was brought forward", file=sys.stderr)
        return 0
    print(
        f"error: SpecChat is already running on {instance.data_folder} but did not answer: close it (or wait until "
        "it responds), or start this one with another --data-dir",
        file=sys.stderr,
    )
    return 1


def run(log_file: Path | None = None) -> int:
    """Open the SpecChat window and run until it is closed; returns the exit status (``app.main`` calls it).

    Logging is set up by ``app.main`` (``app.logging_setup``). Exits with status 2 before Qt starts when there is
    no display or Qt's X11 libraries are missing (``app.gui.display_check``), and with 0 when a window already runs
    on this data folder: that window is brought forward instead (``app.gui.single_instance``; 1 if it does not
    answer). Uncaught exceptions are logged and shown in a dialog (``app.gui.error_dialog``).

    ``SPECCHAT_SMOKE_TEST`` in the environment: ``1`` makes the app quit by itself once the model is ready
    (installer smoke tests; see ``_quit_when_ready``); ``window`` opens the window and its history without
    preparing any model (no download, no model load) and prints ``main window shown``; it then runs until
    closed (tests of the window's start and of two starts at once).

    Args:
        log_file: the log file unexpected errors are written to (``app.logging_setup.setup_logging``), to name
            it in the error dialog.
    """
    from .display_check import display_problem

    problem = display_problem()
    if problem:
        logger.info("cannot open a window: %s", problem)
        print(problem, file=sys.stderr)
        return 2

    import qasync

    from inference.models.store import data_dir

    from .error_dialog import ErrorReporter
    from .gc_policy import collect_on_gui_thread, freeze_startup_objects, restore_automatic_collection
    from .single_instance import SingleInstance, bring_forward

    app = create_application()
    reporter = ErrorReporter(log_file)
    reporter.install()
    instance = SingleInstance(data_dir())
    refused = _claim_data_folder(instance)
    if refused is not None:
        return refused
    smoke_test = os.environ.get(SMOKE_TEST_ENV, "")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    garbage_collector = collect_on_gui_thread()  # cycles are freed on this thread only (see app.gc_policy)
    window = create_main_window()
    instance.activation_requested.connect(lambda: bring_forward(window))  # requests are read by the event loop

    # Ctrl+C and SIGTERM close the window properly (saving a streaming reply); a timer lets Python see signals.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: QTimer.singleShot(0, window.close))
    heartbeat = QTimer()
    heartbeat.start(250)
    heartbeat.timeout.connect(lambda: None)
    if smoke_test != "window":
        build_tokenizers_before_event_loop(window.settings)
    window.show()
    status = _quit_when_ready(window) if smoke_test == "1" else [0]
    freeze_startup_objects()
    if smoke_test == "window":
        _say_when_shown()
    else:
        window.start()
    try:
        with loop:
            loop.run_forever()
    finally:
        window.shutdown()
        window.db.close()
        instance.release()
        restore_automatic_collection(garbage_collector)
        reporter.uninstall()
    return status[0]
