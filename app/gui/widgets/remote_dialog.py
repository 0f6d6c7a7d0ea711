"""The "Remote server (OpenAI-compatible)" dialog of the model picker: base URL, API key, and a model chosen from the
server's ``/models`` list (Fetch models), every error shown in the dialog.

The API key belongs to the server it was entered or stored for: when the base URL is changed to another server
(scheme, host or port), the key field shows that server's stored key, or nothing, so that a key is never sent to a
server it was not meant for; going back to the first server brings its key back. A key that would cross the network
unencrypted (plain http to another computer) is warned about under the fields.

A base URL's secrets (``?key=...``: :func:`~app.backends.remote_errors.shown_url`) are shown as ``***`` when the
dialog opens; the base URL it opened with is the one used while the field shows it so, a URL typed over it replaces it.

Opened window-modal and awaited (:func:`ask_remote_server`), as ``widgets.dialogs`` does it: no nested event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ...backends.remote import RemoteBackend, RemoteTarget, check_base_url, plain_http_warning, with_scheme
from ...backends.remote_errors import RemoteError, shown_url
from .wrapped_label import WrappedLabel

#: Seconds Fetch models waits for a silent server (a reply may take longer: READ_TIMEOUT_S).
FETCH_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class RemoteChoice:
    """What the dialog chose.

    Attributes:
        base_url: checked by ``check_base_url``; model: the model id; api_key: "" = none;
        specchat: the server is SpecChat's (None when the models were not fetched).
    """

    base_url: str
    model: str
    api_key: str
    specchat: bool | None


class RemoteServerDialog(QDialog):
    """Base URL, API key, model; OK is refused (with a message) until the URL and a model are given.

    Args:
        spawn: runs a coroutine (the window's ``TaskSet.spawn``); url / model / api_key: shown at first (``url``
        with its secrets as ``***``, used while the field shows it so; ``api_key`` is the key of ``url``);
        stored_key: the key stored for a base URL ("" when none), asked when the URL is changed to another server.

    Attributes:
        url, api_key: the line edits; url_note: the line under the URL that gives OpenVINO Model Server's (object
        name ``hint``); models: the editable model combo box; fetch_button; error: the message line (object name
        ``remoteError``); warning: the line that warns about the key (object name ``remoteWarning``); specchat: what
        the last fetch found.
    """

    def __init__(
        self,
        parent: QWidget,
        spawn: Callable,
        url: str = "",
        model: str = "",
        api_key: str = "",
        stored_key: Callable[[str], str] = lambda url: "",
    ):
        super().__init__(parent)
        self.setObjectName("remoteServerDialog")
        self.setWindowTitle("Remote server (OpenAI-compatible)")
        self._spawn = spawn
        self._closed = threading.Event()  # a fetch still running when the dialog closes stops, touching nothing
        self.finished.connect(lambda _result: self._closed.set())
        self.specchat: bool | None = None
        self._reached: tuple[str, str] | None = None  # (base URL, key) of the last server that listed its models
        self._listed: list[str] = []  # the models it listed
        self._unlisted_said: tuple[str, str] | None = None  # (base URL, model) OK said is not listed, once
        self._listed_from = url  # the server whose models the Model box lists (the saved model's at first)
        self._opened_url = url
        self.url = QLineEdit(shown_url(url))
        self.url.setPlaceholderText("http://HOST:8000/v1")
        self.url_note = QLabel("OpenVINO Model Server: http://HOST:8000/v3")  # under the field: a longer hint was cut
        self.url_note.setObjectName("hint")
        self.api_key = QLineEdit(api_key)
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("none")
        self.api_key.setToolTip("Kept in the system keyring, or where there is none in a file only you can read")
        self._stored_key = stored_key
        self._keys: dict[str, str] = {}  # keys entered in this dialog, by server (see _server_of)
        self._key_server = _server_of(url) if api_key else ""  # the server the key field's text is for ("": none yet)
        self._syncing = False
        self.api_key.textChanged.connect(self._key_changed)
        self.url.textChanged.connect(self._warn)
        self.url.editingFinished.connect(self._sync_key)
        self.models = QComboBox()
        self.models.setEditable(True)
        self.models.setMinimumContentsLength(28)
        if model:
            self.models.addItem(model)
        self.fetch_button = QPushButton("&Fetch models")
        self.fetch_button.clicked.connect(self._fetch_clicked)
        row = QHBoxLayout()
        row.addWidget(self.models, 1)
        row.addWidget(self.fetch_button)
        form = QFormLayout()
        form.addRow("Base &URL", self.url)
        form.addRow("", self.url_note)
        form.addRow("API &key", self.api_key)
        model_label = QLabel("&Model")
        model_label.setBuddy(self.models)  # (a row of a layout gets no buddy: the label showed "&Model")
        self.models.lineEdit().setAccessibleName("Model")  # (its text field: a child of its own to a screen reader)
        form.addRow(model_label, row)
        # (a plain wrapped QLabel left the dialog its height: a three-line error squeezed the fields above it)
        self.error = WrappedLabel()
        self.error.setObjectName("remoteError")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.setVisible(False)
        self.warning = WrappedLabel()
        self.warning.setObjectName("remoteWarning")
        self.warning.setVisible(False)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self._accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(self.warning)
        layout.addWidget(self.buttons)
        self._warn()

    def _entered_url(self) -> str:
        """The base URL the field stands for: the one the dialog opened with while the field shows it (its secrets
        as ``***``), else the text typed."""
        text = self.url.text()
        return self._opened_url if text == shown_url(self._opened_url) else text

    def _say(self, text: str | None) -> None:
        self.error.setText(text or "")
        self.error.setVisible(bool(text))

    def _key_changed(self) -> None:
        """A key typed (or set) belongs to the server the URL names now, or to the next one named."""
        if not self._syncing:
            self._key_server = _server_of(self.url.text())
        self._warn()

    def _sync_key(self) -> None:
        """When the URL names another server than the key's, put that server's key in the field (typed earlier in
        this dialog, else stored, else none) and keep the previous one for its server. An empty field that belongs
        to no server yet takes the stored key of the first server named."""
        server = _server_of(self.url.text())
        if not server or server == self._key_server:
            return
        if self._key_server or not self.api_key.text():
            if self._key_server:
                self._keys[self._key_server] = self.api_key.text()
            key = self._keys.get(server)
            if key is None:
                try:
                    key = self._stored_key(check_base_url(self._entered_url()))
                except RemoteError:  # (a URL with a password: said when it is used)
                    key = ""
            self._syncing = True
            try:
                self.api_key.setText(key)
            finally:
                self._syncing = False
        self._key_server = server

    def _warn(self) -> None:
        warning = plain_http_warning(self.url.text(), self.api_key.text().strip())
        self.warning.setText(warning or "")
        self.warning.setVisible(bool(warning))

    def _fetch_clicked(self) -> None:
        self._busy(True)  # at once: a second click waits for this fetch
        self._spawn(self.fetch_models())

    def _busy(self, busy: bool) -> None:
        self.fetch_button.setEnabled(not busy)
        self.fetch_button.setText("Fetching…" if busy else "&Fetch models")

    async def fetch_models(self, list_them: bool = True) -> bool:
        """Ask the server for its models and list them in the combo box (the one typed stays chosen if listed;
        ``list_them`` False, OK's check: only check that the server answers and takes the key, saying "Checking
        HOST…" meanwhile); False on an error, which is shown in the dialog (after OK's check, as its failure)."""
        if self._closed.is_set():  # closed before this coroutine began
            return False
        self._say(None)
        self._busy(True)
        try:
            url = check_base_url(self._entered_url())
            if not list_them:
                self._say(f"Checking {RemoteTarget(url, '', '').host}…")
            self._sync_key()
            key = self.api_key.text().strip()
            backend = RemoteBackend(RemoteTarget(url, "", key), connect_timeout_s=FETCH_TIMEOUT_S,
                                    read_timeout_s=FETCH_TIMEOUT_S)  # fmt: skip
            models = await backend.list_models(self._closed)
        except RemoteError as error:
            if not self._closed.is_set():
                self._say(str(error) if list_them else _ok_check_failed(error))
                if _base_of(self._entered_url()) != _base_of(self._listed_from):  # (its path or query too)
                    self._forget_listed_models()
            return False
        finally:
            if not self._closed.is_set():
                self._busy(False)
        if self._closed.is_set():
            return False
        self._reached = (url, key)
        self._listed = [model.id for model in models]
        self.specchat = backend.specchat
        if not list_them:
            return True  # (a server may list no models and still answer a name typed by hand)
        if not models:
            self._say(f"{shown_url(url)} lists no models: load one on the server, then Fetch models again")
            return False
        typed = self.models.currentText()
        self.models.clear()
        self.models.addItems([model.id for model in models])
        self._listed_from = url
        self.models.setCurrentIndex(max(0, self.models.findText(typed)))
        return True

    def choice(self) -> RemoteChoice:
        """The values as entered.

        Raises:
            RemoteError: the base URL is not an http(s) URL.
            ValueError: no model is chosen.
        """
        url = check_base_url(self._entered_url())
        self._sync_key()
        model = self.models.currentText().strip()
        if not model:
            raise ValueError("Choose a model: press Fetch models to list the server's")
        return RemoteChoice(url, model, self.api_key.text().strip(), self.specchat)

    def _forget_listed_models(self) -> None:
        """The Model box lists the models of another base URL than the one entered now (another server, or only
        another path or query): they go (a name typed by hand, which is none of them, stays)."""
        typed = self.models.currentText()
        listed = [self.models.itemText(index) for index in range(self.models.count())]
        self.models.clear()
        if typed not in listed:
            self.models.setEditText(typed)
        self._listed_from = ""

    def _accept(self) -> None:
        """OK: the values must make a choice, and the server must answer with this key (checked now unless the
        last fetch did); a failure is said in the dialog, which stays open."""
        try:
            choice = self.choice()
        except ValueError as error:  # RemoteError is a RuntimeError: caught below
            self._say(str(error))
            return
        except RemoteError as error:
            self._say(str(error))
            return
        if self._reached == (choice.base_url, choice.api_key):
            self._accept_listed(choice)
            return
        self._spawn(self._check_then_accept())

    def _accept_listed(self, choice: RemoteChoice) -> None:
        """Accept ``choice`` (its server reached) unless its model is not among those the server lists and this is
        the first OK with that name: that is said, with the names listed (llama-server and llama-cpp-python answer
        any name with the model they serve, so a typo would go unnoticed), and the next OK takes the name."""
        asked = (choice.base_url, choice.model)
        if self._listed and choice.model not in self._listed and self._unlisted_said != asked:
            self._unlisted_said = asked
            host = RemoteTarget(choice.base_url).host
            names = ", ".join(self._listed[:8]) + (", …" if len(self._listed) > 8 else "")
            self._say(f"{host} does not list {choice.model!r} (it lists: {names}): choose one of its models, or press "
                      "OK again to ask for this name anyway (llama-server and llama-cpp-python answer any name with "
                      "the model they serve)")  # fmt: skip
            return
        self.accept()

    async def _check_then_accept(self) -> None:
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(False)  # (Cancel stays: it stops the check)
        try:
            reached = await self.fetch_models(list_them=False)
        finally:
            if not self._closed.is_set():
                ok.setEnabled(True)
        if reached and not self._closed.is_set():
            try:
                self._accept_listed(self.choice())
            except (ValueError, RemoteError) as error:  # (edited during the check)
                self._say(str(error))


def _ok_check_failed(error: RemoteError) -> str:
    """OK's check of the server failed: said as OK's (Fetch models says the same error alone), with what to do."""
    return (
        f"OK's check failed, so nothing was chosen: {str(error).rstrip('.')}. Then press OK again, or Cancel to keep "
        "the model you have now"
    )


def _base_of(url: str) -> str:
    """A base URL as :func:`check_base_url` takes it, "" for one it refuses."""
    try:
        return check_base_url(url)
    except RemoteError:
        return ""


def _server_of(url: str) -> str:
    """``scheme://host:port`` of a base URL (``http`` when it names no scheme, as :func:`check_base_url` takes it; the
    port its scheme's default when not given), "" when it names none."""
    try:
        parts = urlsplit(with_scheme(url))
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port that is not a number, an unclosed "["
        return ""
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ""
    return f"{parts.scheme}://{parts.hostname}:{port}"


async def ask_remote_server(
    parent: QWidget, spawn: Callable, url: str, model: str, api_key: str, stored_key: Callable[[str], str]
) -> RemoteChoice | None:
    """Open the dialog (window-modal) and return what was chosen, or None when it was cancelled (``api_key``: the
    key of ``url``; ``stored_key``: the key stored for a base URL)."""
    dialog = RemoteServerDialog(parent, spawn, url, model, api_key, stored_key)
    dialog.setWindowModality(Qt.WindowModality.WindowModal)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    future: asyncio.Future = asyncio.get_running_loop().create_future()

    def done(result: int) -> None:
        if not future.done():
            future.set_result(dialog.choice() if result == QDialog.DialogCode.Accepted else None)

    dialog.finished.connect(done)
    dialog.open()
    return await future
