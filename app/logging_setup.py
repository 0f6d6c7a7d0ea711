"""SpecChat's log files: one for the window, one for the command line, rotated, with crash tracebacks in them.

The windowed builds on Windows and macOS have no stderr, so what goes wrong must land in a file a user can send.
:func:`setup_logging` (called by ``app.main`` before anything else runs) sends the process's log records to
``window.log`` or ``cli.log`` in :func:`log_dir`, rotated at :data:`MAX_BYTES` with :data:`BACKUP_COUNT` old
files kept, and points :mod:`faulthandler` at the same file, so a hard crash (a segfault in a native library, a
fatal error) leaves the Python traceback of every thread there, unless faulthandler was already on (``python -X
faulthandler``, ``PYTHONFAULTHANDLER``, pytest): then it keeps writing where it was asked to. Warnings and errors
also go to stderr, where there is one, as before.

The window and the command line write separate files because a file rotated by one process while another
writes it cannot be renamed on Windows; a rotation that fails for that reason is retried at the next record.

A log file holds what a user may not want others to read (the server's prompts with ``--log-prompts``, errors
quoting a reply), so it is created readable by its owner only. HTTP clients' request lines stay out of it
(:data:`QUIET_LOGGERS`): httpx logged every request's URL at INFO, a remote server's ``?key=`` secret included,
which the window shows and stores only as ``***`` (a newcomer trial found it in ``window.log``, mode 644).
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import os
import sys
from pathlib import Path

import platformdirs

from app import __version__
from inference.models.store import user_dir

#: Environment variable naming the log folder (it wins over the data folder, see :func:`log_dir`).
LOG_DIR_ENV = "SPECCHAT_LOG_DIR"
#: A log file is rotated when it would grow past this many bytes.
MAX_BYTES = 1_000_000
#: Rotated files kept next to the current one (``window.log.1`` ... ``window.log.3``).
BACKUP_COUNT = 3
FILE_FORMAT = "%(asctime)s %(process)d %(threadName)s %(levelname)s %(name)s: %(message)s"
#: Loggers whose INFO records are left out (WARNING and up kept): httpx and httpcore log each request's URL, whose
#: query may hold a secret, and the hub downloads' every request.
QUIET_LOGGERS = ("httpx", "httpcore")
#: Permissions of a log file when it is created: its owner's only.
FILE_MODE = 0o600
#: What each kind of process printed on stderr before there was a log file (kept as it was).
STDERR_FORMATS = {"window": "%(levelname)s %(name)s: %(message)s", "cli": "%(message)s"}

logger = logging.getLogger(__name__)


def log_dir() -> Path:
    """SpecChat's log folder (not created).

    ``$SPECCHAT_LOG_DIR`` if set; else ``logs`` inside ``$SPECCHAT_DATA_DIR`` when that is set (``--data-dir``
    sets it: a data folder given by hand keeps its own logs, and tests on temporary data folders never write
    to the user's); else ``platformdirs.user_log_dir("specchat")`` (``~/.local/state/specchat/log`` on Linux,
    ``~/Library/Logs/specchat`` on macOS, ``%LOCALAPPDATA%\\specchat\\specchat\\Logs`` on Windows).
    """
    if os.environ.get(LOG_DIR_ENV):
        return user_dir(LOG_DIR_ENV, platformdirs.user_log_dir)
    if os.environ.get("SPECCHAT_DATA_DIR"):
        return user_dir("SPECCHAT_DATA_DIR", platformdirs.user_data_dir) / "logs"
    return Path(platformdirs.user_log_dir("specchat"))


def log_path(kind: str) -> Path:
    """The current log file of ``kind`` (``"window"`` or ``"cli"``): ``log_dir() / f"{kind}.log"``."""
    return log_dir() / f"{kind}.log"


class _RotatingLog(logging.handlers.RotatingFileHandler):
    """A rotating log file; :mod:`faulthandler` writes into it too when ``crashes``, also after each rotation."""

    crashes = False

    def _open(self):
        """Open the file as the handler does, created with :data:`FILE_MODE` (an existing one is made so too)."""
        stream = super()._open()
        os.chmod(self.baseFilename, FILE_MODE)
        return stream

    def doRollover(self) -> None:  # noqa: N802 - logging's name
        try:
            super().doRollover()
        except OSError:  # another process holds a file open (Windows): keep this one, try again next record
            if self.stream is None:
                self.stream = self._open()
        if self.crashes:
            faulthandler.enable(self.stream, all_threads=True)


def setup_logging(kind: str) -> Path | None:
    """Send this process's log records to its log file (INFO and up) and to stderr (WARNING and up).

    Also points :mod:`faulthandler` at the log file, unless it is on already (all threads; the handler keeps the
    file object open for as long as the process lives), and writes one line saying which SpecChat started.
    Calling it again (the tests run ``app.main.main`` in one process many times) replaces the handlers it added.

    Args:
        kind: ``"window"`` or ``"cli"``: names the file (:func:`log_path`) and the stderr format.

    Returns:
        The log file, or None when it cannot be created or written (read-only or full disk...): the process then
        logs to stderr only, and the caller decides whether to say so.

    Raises:
        ValueError: ``kind`` is neither.
    """
    if kind not in STDERR_FORMATS:
        raise ValueError(f"kind must be one of {', '.join(STDERR_FORMATS)} (got {kind!r})")
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, (_RotatingLog, _Stderr))]:
        if isinstance(handler, _RotatingLog) and handler.crashes:
            faulthandler.disable()  # it writes to this file's descriptor, about to be closed
        root.removeHandler(handler)
        handler.close()
    root.setLevel(logging.INFO)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    console = _Stderr()
    console.setLevel(logging.WARNING)
    console.setFormatter(logging.Formatter(STDERR_FORMATS[kind]))
    root.addHandler(console)
    path = log_path(kind)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log_file = _RotatingLog(path, maxBytes=MAX_BYTES, backupCount=BACKUP_COUNT, encoding="utf-8")
    except OSError as error:
        logger.info("no log file (%s): %s", path, error)
        return None
    log_file.setLevel(logging.INFO)
    log_file.setFormatter(logging.Formatter(FILE_FORMAT))
    root.addHandler(log_file)
    if not faulthandler.is_enabled():
        faulthandler.enable(log_file.stream, all_threads=True)
        log_file.crashes = True
    logger.info("SpecChat %s (%s) started: Python %s on %s", __version__, kind, sys.version.split()[0], sys.platform)
    return path


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (nothing when there is none: a windowed build)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if sys.stderr is not None:
            super().emit(record)
