"""One SpecChat window per data folder: a second start brings the running window forward and exits.

Two windows on one data folder would both write its history and settings (and both migrate a new history at
once). The window therefore holds an operating-system file lock, ``window.lock`` in the data folder
(``filelock``: ``flock`` on POSIX, ``LockFileEx`` on Windows), for as long as it runs, and listens on a local
socket (``QLocalServer``) named after the data folder. A second start that finds the lock taken connects to that
socket, asks the running window to come forward, and exits; one that finds it free becomes the window. The
system releases the lock when its holder dies, so a window killed with ``kill -9`` never blocks the next start
(its left-over socket file is removed by the next holder). The command line (``specchat generate``, ``chat``,
``models``) never takes this lock: it runs beside the window.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import time
from pathlib import Path

from filelock import FileLock, Timeout
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket
from PySide6.QtWidgets import QWidget

logger = logging.getLogger(__name__)

LOCK_NAME = "window.lock"
#: What a second start sends, and what the window answers once it has been asked.
REQUEST, ANSWER = b"activate\n", b"ok\n"


class Claim(enum.Enum):
    """How :meth:`SingleInstance.claim` ended."""

    #: This process holds the lock (or could not take one, see :meth:`SingleInstance.claim`): it opens the window.
    WINDOW = "window"
    #: Another process holds it and answered: its window was asked to come forward.
    FORWARDED = "forwarded"
    #: Another process holds it but did not answer in time (busy or hung).
    UNANSWERED = "unanswered"


def server_name(data_folder: Path) -> str:
    """The local socket's name for ``data_folder``: ``specchat-`` and 16 hex digits of the SHA-256 of its absolute
    path (short enough for a Unix socket path, the same for every spelling of one folder)."""
    digest = hashlib.sha256(str(Path(data_folder).expanduser().resolve()).encode("utf-8")).hexdigest()
    return f"specchat-{digest[:16]}"


class SingleInstance(QObject):
    """The window's claim on a data folder (see the module). Create it after the QApplication.

    Args:
        data_folder: the folder holding the history (created if missing).
    """

    #: A second start asked this window to come forward.
    activation_requested = Signal()

    def __init__(self, data_folder: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.data_folder = Path(data_folder)
        self.lock_path = self.data_folder / LOCK_NAME
        self.name = server_name(self.data_folder)
        self._lock: FileLock | None = None
        self._server: QLocalServer | None = None

    def claim(self, timeout_s: float = 30.0) -> Claim:
        """Take the data folder for this window, or ask the window holding it to come forward.

        Tries until ``timeout_s`` seconds have passed, as a window that is still starting (it answers once its
        event loop runs, after its history and device list are open: seconds on a busy machine) or quitting may
        not answer yet: a lock freed meanwhile is taken. A data folder where no lock file can be created (read-only)
        gives :attr:`Claim.WINDOW` without a lock (logged), as the history then cannot be written either.
        Blocks the calling thread: call it before the window's event loop runs.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._take_lock():
                    self._listen()
                    return Claim.WINDOW
            except OSError as error:
                logger.warning("cannot lock %s (%s): a second window is not prevented", self.lock_path, error)
                return Claim.WINDOW
            if self._ask_to_activate(deadline):
                return Claim.FORWARDED
            if time.monotonic() >= deadline:
                return Claim.UNANSWERED
            time.sleep(0.1)

    def release(self) -> None:
        """Stop answering and free the lock (after the window has closed its history)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _take_lock(self) -> bool:
        self.data_folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.lock_path, thread_local=False)
        try:
            lock.acquire(blocking=False)
        except Timeout:
            return False
        self._lock = lock
        return True

    def _listen(self) -> None:
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        QLocalServer.removeServer(self.name)  # a killed window's socket file: this process holds the lock now
        if not server.listen(self.name):
            logger.warning("second starts cannot bring this window forward: %s", server.errorString())
            return
        server.newConnection.connect(lambda: self._answer(server))
        self._server = server

    def _answer(self, server: QLocalServer) -> None:
        while server.hasPendingConnections():
            connection = server.nextPendingConnection()
            connection.disconnected.connect(connection.deleteLater)
            connection.readyRead.connect(lambda connection=connection: self._read_request(connection))
            self._read_request(connection)

    def _read_request(self, connection: QLocalSocket) -> None:
        if not connection.canReadLine():
            return
        if bytes(connection.readLine().data()) == REQUEST:
            logger.info("a second start asked this window to come forward")
            self.activation_requested.emit()
            connection.write(ANSWER)
            connection.flush()
        connection.disconnectFromServer()

    def _ask_to_activate(self, deadline: float) -> bool:
        socket = QLocalSocket()
        socket.connectToServer(self.name)
        try:
            if not socket.waitForConnected(500):
                return False
            socket.write(REQUEST)
            socket.waitForBytesWritten(1000)
            answer = b""
            while not answer.endswith(b"\n") and time.monotonic() < deadline:
                if not socket.waitForReadyRead(max(1, int((deadline - time.monotonic()) * 1000))):
                    break
                answer += bytes(socket.readAll().data())
            return answer == ANSWER
        finally:
            socket.abort()


def bring_forward(window: QWidget) -> None:
    """Show ``window`` un-minimized (keeping it maximized or full-screen if it was), raised and activated.

    Whether it really gets the focus is the desktop's decision (focus-stealing prevention, Wayland).
    """
    state = window.windowState() & ~Qt.WindowState.WindowMinimized
    window.setWindowState(state | Qt.WindowState.WindowActive)
    window.show()
    window.raise_()
    window.activateWindow()
