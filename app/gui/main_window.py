"""The main window: conversations on the left, the chat in the middle, settings and the live graph on the right.

It ties the widgets to the history database and to the inference worker: it saves each user message before
generating, streams the reply into the view, the graph and the database, prepares and reloads models in the
background, and turns every error into something shown in place or in a dialog that says what to do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from inference.model import ModelLoadError, TokenizerMismatchError
from inference.models.store import ModelFetchError, list_models
from inference.precision import PrecisionError
from inference.rope import RopeUnsupportedError
from inference.settings import Decoding

from .gc_policy import freeze_startup_objects
from .history_db import HistoryDB
from .inference_worker import GenerationRequest, InferenceWorker, ModelInfo, ModelSpec
from .reply_recorder import ReplyRecorder
from .settings_store import AppSettings, SettingsStore
from .widgets.chat_view import ChatView
from .widgets.composer import Composer
from .widgets.conversation_list import ConversationList
from .widgets.dialogs import ModelProgressDialog, choose_file, message_box
from .widgets.live_graph import LiveGraph
from .widgets.settings_pane import SettingsPane

logger = logging.getLogger(__name__)

TITLE_LENGTH = 48
MODEL_RELOAD_DELAY_MS = 400
SETTINGS_SAVE_DELAY_MS = 300
#: Errors of one reply that are shown in place (the conversation stays as it was saved).
GENERATION_ERRORS = (ValueError, RuntimeError, RopeUnsupportedError, ModelLoadError)


def title_from(text: str) -> str:
    """A conversation title from the first user message: its first line, shortened."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "New chat")
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


@dataclass
class ActiveReply:
    """The reply being generated (at most one at a time)."""

    conversation_id: int
    recorder: ReplyRecorder
    compare: bool
    cancel: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task | None = None
    closed: bool = False


class MainWindow(QMainWindow):
    """SpecChat's window.

    Args:
        db: the chat history; store: the settings file; worker: the inference thread.
        devices: OpenVINO devices to offer (``inference.devices.available_devices()``).
        history_notice: a message about the history database to show at start (it was unreadable...).
        owns_worker: shut the worker down when the window closes.

    Signals:
        generation_started(conversation_id), reply_updated(text so far), generation_finished(Message),
        model_ready(description), model_failed(message).
    """

    generation_started = Signal(int)
    reply_updated = Signal(str)
    generation_finished = Signal(object)
    model_ready = Signal(str)
    model_failed = Signal(str)

    def __init__(
        self,
        db: HistoryDB,
        store: SettingsStore,
        worker: InferenceWorker,
        devices: list[str],
        history_notice: str | None = None,
        owns_worker: bool = True,
    ):
        super().__init__()
        self.db = db
        self.store = store
        self.worker = worker
        self.devices = devices
        self.owns_worker = owns_worker
        self._history_notice = history_notice
        self.settings: AppSettings = store.load()
        self.active: ActiveReply | None = None
        self.model_info: ModelInfo | None = None
        self.model_error: str | None = None
        self.model_state = "idle"  # idle, loading, ready, error
        self._loaded_key: tuple | None = None
        self._wanted_key: tuple | None = None
        self._model_task: asyncio.Task | None = None
        self._model_settled = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._shut_down = False
        self.progress_dialog: ModelProgressDialog | None = None
        self.models_dialog = None

        self.setWindowTitle("SpecChat")
        self.resize(1440, 900)
        self._build_ui()
        self._build_actions()
        self._restore_ui_state()
        self._refresh_list()
        conversations = self.db.conversations()
        if conversations:
            self.open_conversation(conversations[0].id)
        else:
            self.new_chat()

        self._settings_timer = QTimer(self)
        self._settings_timer.setSingleShot(True)
        self._settings_timer.timeout.connect(self._save_settings)
        self._reload_timer = QTimer(self)
        self._reload_timer.setSingleShot(True)
        self._reload_timer.timeout.connect(self._schedule_model_load)
        for warning in store.warnings:
            self.statusBar().showMessage(warning, 10000)

    # --- building ---------------------------------------------------------------------------------

    def _build_ui(self) -> None:
        self.conversation_list = ConversationList()
        self.conversation_list.selected.connect(self.open_conversation)
        self.conversation_list.new_requested.connect(self.new_chat)
        self.conversation_list.renamed.connect(self.rename_conversation)
        self.conversation_list.delete_requested.connect(lambda cid: self._spawn(self.delete_conversation(cid)))
        self.conversation_list.search_changed.connect(lambda _: self._refresh_list())

        self.chat_view = ChatView()
        self.chat_view.set_highlight(self.settings.highlight_draft)
        self.chat_view.edit_submitted.connect(self.resend_edited)
        self.chat_view.regenerate_requested.connect(self.regenerate)
        self.chat_view.system_prompt_changed.connect(self._system_prompt_changed)
        self.chat_view.highlight_toggled.connect(self._highlight_toggled)
        self.composer = Composer()
        self.composer.send_requested.connect(lambda text: self.send(text))
        self.composer.compare_requested.connect(lambda text: self.send(text, compare=True))
        self.composer.stop_requested.connect(self.stop)
        middle = QWidget()
        middle_layout = QVBoxLayout(middle)
        middle_layout.setContentsMargins(0, 0, 0, 0)
        middle_layout.setSpacing(0)
        middle_layout.addWidget(self.chat_view, 1)
        middle_layout.addWidget(self.composer)

        self.settings_pane = SettingsPane(self.settings, self.devices)
        self.settings_pane.set_models(_installed_models())
        self.settings_pane.settings_changed.connect(self._settings_changed)
        self.settings_pane.validity_changed.connect(lambda summary: self.composer.set_blocked(summary or None))
        self.live_graph = LiveGraph()
        # The graph keeps its size when the window is resized (the settings list takes the difference): redrawing
        # the plots at a new size costs ~30 ms, which made resizing stutter.
        self.right_splitter = QSplitter(Qt.Orientation.Vertical)
        self.right_splitter.addWidget(self.live_graph)
        self.right_splitter.addWidget(self.settings_pane)
        self.right_splitter.setStretchFactor(0, 0)
        self.right_splitter.setStretchFactor(1, 1)
        self.right_splitter.setSizes([430, 470])

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.conversation_list)
        self.splitter.addWidget(middle)
        self.splitter.addWidget(self.right_splitter)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        self.splitter.setSizes([250, 800, 390])
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)

        status = self.statusBar()
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setMaximumWidth(120)
        self.busy_bar.setMaximumHeight(14)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setVisible(False)
        self.model_label = QLabel("No model loaded")
        self.model_label.setObjectName("modelLabel")
        status.addPermanentWidget(self.busy_bar)
        status.addPermanentWidget(self.model_label)
        errors = self.settings_pane.errors()
        self.composer.set_blocked(f"Fix the settings first: {next(iter(errors.values()))}" if errors else None)

    def _action(self, menu, text: str, slot, shortcut=None, tip: str = "", checkable: bool = False) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if tip:
            action.setStatusTip(tip)
            action.setToolTip(tip)
        action.setCheckable(checkable)
        action.triggered.connect(slot)
        menu.addAction(action)
        self.addAction(action)
        return action

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.new_action = self._action(file_menu, "&New chat", self.new_chat, QKeySequence.StandardKey.New, "Start a new conversation")
        file_menu.addSeparator()
        self.import_action = self._action(
            file_menu, "&Import conversation (JSON)…", lambda: self._spawn(self.import_dialog()), "Ctrl+O",
            "Add a conversation exported as JSON",
        )  # fmt: skip
        self.export_markdown_action = self._action(
            file_menu, "Export as &Markdown…", lambda: self._spawn(self.export_dialog("md")), "Ctrl+Shift+M",
            "Save this conversation as a Markdown document",
        )  # fmt: skip
        self.export_json_action = self._action(
            file_menu, "Export as &JSON…", lambda: self._spawn(self.export_dialog("json")), "Ctrl+Shift+J",
            "Save this conversation as JSON (can be imported back)",
        )  # fmt: skip
        file_menu.addSeparator()
        self.models_action = self._action(
            file_menu, "&Models…", self.show_models, "Ctrl+M", "Installed models: import, download, convert, remove"
        )
        file_menu.addSeparator()
        self.quit_action = self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)

        chat_menu = menu.addMenu("&Chat")
        self.stop_action = self._action(chat_menu, "&Stop reply", self.stop, "Esc", "Stop the reply, keeping its text")
        self.stop_action.setEnabled(False)  # only while a reply streams: otherwise Esc belongs to the focused widget
        self.regenerate_action = self._action(
            chat_menu, "&Regenerate last reply", self.regenerate_last, "Ctrl+R", "Generate the last reply again"
        )
        self.compare_action = self._action(
            chat_menu, "&Compare autoregressive vs speculative", self.composer.submit_compare, "Ctrl+Shift+Return",
            "Send the message twice, autoregressive then speculative, and compare",
        )  # fmt: skip
        self.copy_action = self._action(chat_menu, "&Copy last reply", self.copy_last_reply, "Ctrl+Shift+C")
        chat_menu.addSeparator()
        self.rename_action = self._action(chat_menu, "Re&name chat", self.conversation_list.rename_current, "F2")
        self.delete_action = self._action(
            chat_menu, "&Delete chat…", lambda: self._spawn(self.delete_conversation(self.chat_view.conversation_id)),
            QKeySequence.StandardKey.Delete,
        )  # fmt: skip
        self.delete_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.removeAction(self.delete_action)  # Del deletes a chat only in the conversation list
        self.conversation_list.list.addAction(self.delete_action)

        view_menu = menu.addMenu("&View")
        self.highlight_action = self._action(
            view_menu, "&Highlight draft tokens", lambda checked: self.chat_view.set_highlight(checked) or self._highlight_toggled(checked),
            "Ctrl+H", checkable=True,
        )  # fmt: skip
        self.highlight_action.setChecked(self.settings.highlight_draft)
        self.side_panel_action = self._action(
            view_menu, "&Settings and live graph", lambda checked: self.right_splitter.setVisible(checked), "Ctrl+,",
            checkable=True,
        )
        self.side_panel_action.setChecked(True)
        self.search_action = self._action(view_menu, "&Find chat", self._focus_search, QKeySequence.StandardKey.Find)

        help_menu = menu.addMenu("&Help")
        self.shortcuts_action = self._action(help_menu, "&Keyboard shortcuts", lambda: self._spawn(self.show_shortcuts()))
        self.about_action = self._action(help_menu, "&About SpecChat", lambda: self._spawn(self.show_about()))

    def _restore_ui_state(self) -> None:
        ui = self.store.ui_state
        for key, widget in (("geometry", self), ("splitter", self.splitter), ("right_splitter", self.right_splitter)):
            value = ui.get(key)
            if isinstance(value, str):
                try:
                    data = QByteArray.fromBase64(value.encode("ascii"))
                    widget.restoreGeometry(data) if key == "geometry" else widget.restoreState(data)
                except (ValueError, TypeError):
                    pass

    def _ui_state(self) -> dict:
        return {
            "geometry": bytes(self.saveGeometry().toBase64()).decode("ascii"),
            "splitter": bytes(self.splitter.saveState().toBase64()).decode("ascii"),
            "right_splitter": bytes(self.right_splitter.saveState().toBase64()).decode("ascii"),
        }

    # --- tasks ------------------------------------------------------------------------------------

    def _spawn(self, coroutine) -> asyncio.Task:
        """Run a coroutine on the Qt/asyncio loop; unexpected errors are logged and shown in the status bar."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)

        def done(finished: asyncio.Task) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                error = finished.exception()
                logger.error("unexpected error", exc_info=error)
                if not self._shut_down:
                    self.statusBar().showMessage(f"Unexpected error: {error}", 15000)

        task.add_done_callback(done)
        return task

    def start(self) -> None:
        """Show any startup notice and start preparing the model in the background."""
        if self._history_notice:
            notice, self._history_notice = self._history_notice, None
            self._spawn(
                message_box(self, QMessageBox.Icon.Warning, "SpecChat: chat history", notice, object_name="historyNotice")
            )
        self._schedule_model_load()

    # --- model ------------------------------------------------------------------------------------

    def _set_model_state(self, state: str, text: str) -> None:
        self.model_state = state
        self.busy_bar.setVisible(state == "loading")
        self.model_label.setText(text)
        self.model_label.setToolTip(text)

    def _schedule_model_load(self) -> None:
        """Load the models the settings ask for, in the background (after the reply streaming now, if any)."""
        self._wanted_key = self.settings.model_key()
        if self._wanted_key != self._loaded_key:
            self._model_settled.clear()
        if self._model_task is None or self._model_task.done():
            self._model_task = self._spawn(self._model_loop())

    async def _model_loop(self) -> None:
        while self._wanted_key != self._loaded_key:
            key = self._wanted_key
            ok = await self._load_models(self.settings)
            if not ok and key == self._wanted_key:
                break
        if self._wanted_key == self._loaded_key and self.model_info is not None and self.model_state != "ready":
            # back to the models still loaded (e.g. after a refused draft): nothing to load
            self.model_error = None
            self._set_model_state("ready", f"{self.model_info.spec.describe()} · {self.model_info.precision.describe()}")
        self._model_settled.set()

    async def wait_for_model(self) -> None:
        """Wait until the models the settings ask for are loaded.

        Raises:
            ValueError: they could not be loaded (the message says why).
        """
        await self._model_settled.wait()
        if self._loaded_key != self.settings.model_key() or self.model_info is None:
            raise ValueError(f"no model is loaded: {self.model_error or 'the model could not be loaded'}")

    def retry_model(self) -> None:
        """Try loading the models again (after an error)."""
        self._loaded_key = None
        self._schedule_model_load()

    async def _load_models(self, settings: AppSettings) -> bool:
        key = settings.model_key()
        self.model_error = None
        self._set_model_state("loading", f"Preparing the {settings.bits}-bit model…")

        def on_progress(line: str) -> None:
            if self.progress_dialog is None:
                self.progress_dialog = ModelProgressDialog(self, "SpecChat: preparing the model")
                self.progress_dialog.show()
            self.progress_dialog.add_line(line)
            self.statusBar().showMessage(line, 5000)

        try:
            target_dir = await self.worker.fetch_default_model(settings.bits, on_progress)
        except Exception as error:  # noqa: BLE001 - ModelFetchError says what to do; anything else is shown too
            self._close_progress()
            return await self._model_error_dialog(settings, error, fetching=True)
        self._close_progress()
        self.settings_pane.set_models(_installed_models())
        if settings.model_key() != self.settings.model_key():
            return False  # the settings changed meanwhile: the loop loads the new ones
        spec = ModelSpec(
            target_dir=target_dir,
            target_device=settings.target_device,
            draft_dir=Path(settings.draft_model) if settings.uses_draft_model else None,
            draft_device=settings.draft_device,
            precision=settings.precision_settings(),
        )
        self._set_model_state("loading", f"Loading {spec.describe()}…")
        try:
            info = await self.worker.load(spec)
        except TokenizerMismatchError as error:
            self.settings_pane.flag("draft_model", str(error))
            return self._model_refused(str(error))
        except PrecisionError as error:
            self.settings_pane.flag("precision", str(error))
            return self._model_refused(str(error))
        except ValueError as error:
            field = "draft_device" if settings.uses_draft_model and settings.draft_device in str(error) else "target_device"
            self.settings_pane.flag(field, str(error))
            return self._model_refused(str(error))
        except Exception as error:  # noqa: BLE001 - ModelLoadError and the unexpected
            return await self._model_error_dialog(settings, error, fetching=False)
        self.model_info = info
        self._loaded_key = key
        freeze_startup_objects()
        self.settings_pane.set_max_position_embeddings(info.max_position_embeddings)
        self.settings_pane.set_precision_in_use(info.precision.describe())
        seconds = f" (loaded in {info.load_seconds + info.warm_up_seconds:.1f} s)" if info.load_seconds else ""
        self._set_model_state("ready", f"{spec.describe()} · {info.precision.describe()}{seconds}")
        self.model_ready.emit(spec.describe())
        return True

    def _model_refused(self, message: str) -> bool:
        self.model_error = message
        loaded = f"; still using {self.worker.spec.describe()}" if self.worker.spec else ""
        self._set_model_state("error", f"Model not changed: see the settings{loaded}")
        self.model_failed.emit(message)
        return False

    def _close_progress(self) -> None:
        if self.progress_dialog is not None:
            self.progress_dialog.close()
            self.progress_dialog.deleteLater()
            self.progress_dialog = None

    async def _model_error_dialog(self, settings: AppSettings, error: Exception, fetching: bool) -> bool:
        self.model_error = str(error)
        known = isinstance(error, (ModelFetchError, ModelLoadError))
        what = "fetch and prepare its default model" if fetching else "load the model"
        self._set_model_state("error", "No model loaded: " + ("fetching failed" if fetching else "loading failed"))
        self.model_failed.emit(str(error))
        details = str(error) if known else f"{type(error).__name__}: {error}"
        answer = await message_box(
            self,
            QMessageBox.Icon.Critical,
            "SpecChat: no model",
            f"SpecChat could not {what}.",
            QMessageBox.StandardButton.Retry | QMessageBox.StandardButton.Close,
            QMessageBox.StandardButton.Retry,
            informative=f"{details}\n\nYour chats are safe: you can read and export them without a model. "
            "Fix the problem, then choose Retry (or change the model settings).",
            object_name="modelError",
        )
        if answer == QMessageBox.StandardButton.Retry and not self._shut_down:
            return await self._load_models(self.settings)
        return False

    # --- conversations ----------------------------------------------------------------------------

    def _refresh_list(self) -> None:
        self.conversation_list.set_conversations(
            self.db.conversations(self.conversation_list.search.text()), self.chat_view.conversation_id
        )

    def _update_window_title(self) -> None:
        conversation = self.chat_view.conversation
        self.setWindowTitle(f"{conversation.title} — SpecChat" if conversation else "SpecChat")

    def new_chat(self) -> None:
        """Show an empty new chat (saved when its first message is sent)."""
        self.chat_view.show_conversation(None, [])
        self._update_window_title()
        self.conversation_list.list.clearSelection()
        self.composer.edit.setFocus()

    def open_conversation(self, conversation_id: int) -> None:
        """Show a conversation (a reply streaming in it keeps streaming into the view)."""
        conversation = self.db.conversation(conversation_id)
        if conversation is None:
            self._refresh_list()
            return
        if self.chat_view.conversation_id != conversation_id:
            self.chat_view.show_conversation(conversation, self.db.messages(conversation_id))
            self._update_window_title()
        if self.active and self.active.conversation_id == conversation_id:
            self.chat_view.update_message(self.active.recorder.snapshot(), live=True)
        self.chat_view.set_busy(self.active is not None)
        if self.conversation_list.current_id() != conversation_id:
            self.conversation_list.select(conversation_id)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Rename a conversation."""
        try:
            self.db.rename_conversation(conversation_id, title)
        except ValueError as error:
            self.statusBar().showMessage(str(error), 5000)
            return
        if self.chat_view.conversation_id == conversation_id:
            self.chat_view.set_title(title.strip())
            self._update_window_title()
        self._refresh_list()

    async def delete_conversation(self, conversation_id: int | None) -> bool:
        """Ask, then delete a conversation (stopping its reply first); returns True if deleted."""
        if conversation_id is None:
            return False
        conversation = self.db.conversation(conversation_id)
        if conversation is None:
            return False
        answer = await message_box(
            self,
            QMessageBox.Icon.Question,
            "Delete chat",
            f"Delete “{conversation.title}” and its {conversation.message_count} messages?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
            informative="This cannot be undone. Export it first if you want to keep a copy.",
            object_name="confirmDelete",
        )
        if answer != QMessageBox.StandardButton.Yes:
            return False
        if self.active and self.active.conversation_id == conversation_id:
            self.active.cancel.set()
            if self.active.task is not None:
                await asyncio.wait([self.active.task])
        self.db.delete_conversation(conversation_id)
        if self.chat_view.conversation_id == conversation_id:
            remaining = self.db.conversations()
            if remaining:
                self.chat_view.show_conversation(None, [])
                self.open_conversation(remaining[0].id)
            else:
                self.new_chat()
        self._refresh_list()
        self.statusBar().showMessage(f"Deleted “{conversation.title}”", 5000)
        return True

    def _system_prompt_changed(self, conversation_id: int, text: str) -> None:
        if conversation_id >= 0 and self.db.conversation(conversation_id) is not None:
            self.db.set_system_prompt(conversation_id, text)
            self.statusBar().showMessage("System prompt saved: it applies to the next reply", 4000)

    def _focus_search(self) -> None:
        self.conversation_list.search.setFocus()
        self.conversation_list.search.selectAll()

    # --- settings ---------------------------------------------------------------------------------

    def _settings_changed(self, settings: AppSettings) -> None:
        previous = self.settings
        self.settings = settings
        self._settings_timer.start(SETTINGS_SAVE_DELAY_MS)
        if settings.model_key() != previous.model_key():
            if settings.model_key() != self._loaded_key:
                self._model_settled.clear()
            self._reload_timer.start(MODEL_RELOAD_DELAY_MS)
            self.statusBar().showMessage("The model will be reloaded in the background", 3000)

    def _save_settings(self) -> None:
        try:
            self.store.save(self.settings)
        except OSError as error:
            self.statusBar().showMessage(f"Could not save the settings to {self.store.path}: {error}", 10000)

    def _highlight_toggled(self, checked: bool) -> None:
        self.highlight_action.setChecked(checked)
        self.settings_pane.set_highlight(checked)

    # --- sending and generating -------------------------------------------------------------------

    def send(self, text: str, compare: bool = False) -> int | None:
        """Save a user message and start the reply (or a comparison); returns the conversation id.

        Nothing is sent (and the reason shown in place) while a reply streams, with invalid settings, or with
        an empty message.
        """
        if self.active is not None:
            self.composer.show_error("A reply is being generated: wait for it, or press Stop (Esc).")
            return None
        if not text.strip():
            self.composer.show_error("Type a message first.")
            return None
        errors = self.settings_pane.errors()
        if errors:
            self.composer.show_error(f"Fix the settings first: {next(iter(errors.values()))}")
            return None
        conversation_id = self.chat_view.conversation_id
        if conversation_id is None or self.db.conversation(conversation_id) is None:
            conversation_id = self.db.create_conversation(title_from(text), self.chat_view.system_prompt())
            self.chat_view.show_conversation(self.db.conversation(conversation_id), [])
            self._update_window_title()
        message_id = self.db.add_message(conversation_id, "user", text)  # saved before generation starts
        self.composer.clear()
        self.composer.clear_error()
        self.chat_view.append_message(self.db.message(message_id))
        self._refresh_list()
        self._start_reply(conversation_id, compare)
        return conversation_id

    def regenerate(self, message_id: int) -> None:
        """Replace a reply (the last one) by a new one."""
        message = self.db.message(message_id)
        if message is None or self.active is not None:
            return
        self.db.delete_messages_from(message.conversation_id, message.position)
        self.chat_view.remove_message(message_id)
        self._start_reply(message.conversation_id, compare="compare" in message.stats)

    def regenerate_last(self) -> None:
        """Regenerate the last reply of the conversation shown."""
        widgets = self.chat_view.message_widgets()
        if widgets and widgets[-1].message.role == "assistant":
            self.regenerate(widgets[-1].message.id)

    def resend_edited(self, message_id: int, text: str) -> None:
        """Replace a user message's text, drop the messages after it, and generate a new reply."""
        message = self.db.message(message_id)
        if message is None or self.active is not None:
            return
        self.db.update_message(message_id, content=text)
        self.db.delete_messages_from(message.conversation_id, message.position + 1)
        self.open_conversation(message.conversation_id)
        self.chat_view.show_conversation(
            self.db.conversation(message.conversation_id), self.db.messages(message.conversation_id)
        )
        self._start_reply(message.conversation_id, compare=False)

    def copy_last_reply(self) -> None:
        """Copy the last reply of the conversation shown to the clipboard."""
        for widget in reversed(self.chat_view.message_widgets()):
            if widget.message.role == "assistant":
                widget.copy_text()
                self.statusBar().showMessage("Reply copied to the clipboard", 3000)
                return

    def stop(self) -> None:
        """Stop the reply being generated (its text so far is kept)."""
        if self.active is not None:
            self.active.cancel.set()
            self.statusBar().showMessage("Stopping…", 2000)

    def _start_reply(self, conversation_id: int, compare: bool) -> None:
        settings = self.settings
        seed = settings.seed
        if compare and seed is None:
            seed = random.randrange(2**31)  # both runs use the same seed
        extra = {"model": self.worker.spec.describe() if self.worker.spec else "", "seed": seed}
        message_id = self.db.add_message(conversation_id, "assistant", "", state="streaming")
        recorder = ReplyRecorder(self.db, self.db.message(message_id), compare=compare, extra=extra)
        self.active = ActiveReply(conversation_id, recorder, compare)
        if self.chat_view.conversation_id == conversation_id:
            self.chat_view.append_message(recorder.snapshot(), live=True)
        self.composer.set_generating(True)
        self.stop_action.setEnabled(True)
        self.chat_view.set_busy(True)
        self.generation_started.emit(conversation_id)
        self.active.task = self._spawn(self._generate(self.active, settings, seed))

    def _history(self, conversation_id: int, exclude: int) -> list[dict]:
        """Messages to send to the model: everything before the new reply, minus empty replies."""
        return [
            {"role": m.role, "content": m.content}
            for m in self.db.messages(conversation_id)
            if m.id != exclude and (m.role == "user" or m.content)
        ]

    async def _generate(self, active: ActiveReply, settings: AppSettings, seed: int | None) -> None:
        recorder = active.recorder
        conversation = self.db.conversation(active.conversation_id)
        history = self._history(active.conversation_id, recorder.message_id)
        if active.compare:
            runs = [Decoding.AUTOREGRESSIVE, Decoding.DRAFT_MODEL if settings.uses_draft_model else Decoding.PROMPT_LOOKUP]
        else:
            runs = [Decoding(settings.decoding)]
        state, error_text = "complete", None
        try:
            if self.model_state != "ready" or self._loaded_key != settings.model_key():
                self._update_live(active, "Waiting for the model to load…")
            await self.wait_for_model()
            for index, decoding in enumerate(runs):
                if active.cancel.is_set():
                    break
                phase_extra = {"drafter": decoding.drafter, "k": settings.k} if decoding.speculative else {}
                recorder.begin_phase(decoding.mode, **phase_extra)
                self.live_graph.start_run(decoding.mode, keep_previous=index > 0)
                request = GenerationRequest(
                    messages=history,
                    system_prompt=conversation.system_prompt if conversation else "",
                    settings=settings.generation_settings(decoding, seed=seed),
                    fresh_cache=active.compare,
                )
                try:
                    async for events in self.worker.generate(request, active.cancel):
                        if active.closed:
                            return
                        recorder.add(events)
                        self.live_graph.add_events(events)
                        self._update_live(active)
                finally:
                    self.live_graph.finish_run()
            if active.compare and not active.cancel.is_set():
                await self._explain_compare(active, request, settings)
            if active.cancel.is_set():
                state = "stopped"
        except GENERATION_ERRORS as error:
            state, error_text = "error", str(error)
        except asyncio.CancelledError:
            state = "stopped"
        except Exception as error:  # noqa: BLE001 - a bug must not lose the reply or the window
            logger.exception("reply failed")
            state, error_text = "error", f"internal error: {type(error).__name__}: {error}"
        finally:
            if not active.closed:
                self._reply_ended(active, state, error_text)

    async def _explain_compare(self, active: ActiveReply, request: GenerationRequest, settings: AppSettings) -> None:
        """Say why a comparison's texts differ: by design when sampling, else where and whether it is a near-tie."""
        recorder = active.recorder
        if recorder.compare_data.get("identical") is not False:
            return
        if settings.temperature > 0:
            recorder.set_difference(None, sampled=True)
            return
        self._update_live(active, "Texts differ: measuring the numerical noise where they part…")
        difference = await self.worker.explain_difference(request, recorder.ar_token_ids, recorder.spec_token_ids)
        recorder.set_difference(difference.as_dict() if difference else None, sampled=False)

    def _update_live(self, active: ActiveReply, note: str | None = None) -> None:
        snapshot = active.recorder.snapshot()
        if note:
            snapshot.stats = {**snapshot.stats, "live": note}
        if self.chat_view.conversation_id == active.conversation_id:
            self.chat_view.update_message(snapshot, live=True)
        self.reply_updated.emit(active.recorder.text or active.recorder.compare_data.get("ar", {}).get("text", ""))

    def _reply_ended(self, active: ActiveReply, state: str, error: str | None) -> None:
        recorder = active.recorder
        self.active = None
        if state == "error" and not recorder.has_text:
            self.db.delete_message(recorder.message_id)  # nothing to keep; the user message stays saved
            self.chat_view.remove_message(recorder.message_id)
            self.composer.show_error(f"Could not generate a reply: {error}")
            self._flag_setting_error(error or "")
            final = None
        else:
            final = recorder.finish(state, error)
            if state == "error":
                self.composer.show_error(f"The reply stopped with an error: {error}")
            if self.chat_view.conversation_id == active.conversation_id:
                self.chat_view.update_message(final)
                widget = self.chat_view.widget(final.id)
                if widget is not None:
                    widget.flush()
        self.composer.set_generating(False)
        self.stop_action.setEnabled(False)
        self.chat_view.set_busy(False)
        self._refresh_list()
        self.generation_finished.emit(final)

    def _flag_setting_error(self, error: str) -> None:
        for name in ("n_ctx", "n_keep", "n_discard", "temperature", "top_p", "top_k", "seed", "max_new_tokens"):
            if error.startswith(name):
                self.settings_pane.flag(name, error, blocking=False)
                return
        if error.startswith("K "):
            self.settings_pane.flag("k", error, blocking=False)

    # --- export / import --------------------------------------------------------------------------

    def export_conversation(self, path: str | Path, fmt: str) -> Path:
        """Write the conversation shown to ``path`` as Markdown (``md``) or JSON (``json``)."""
        conversation_id = self.chat_view.conversation_id
        if conversation_id is None:
            raise ValueError("this chat is empty: there is nothing to export yet")
        path = Path(path)
        if fmt == "md":
            path.write_text(self.db.export_markdown(conversation_id), encoding="utf-8")
        else:
            path.write_text(json.dumps(self.db.export_json(conversation_id), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def import_conversation(self, path: str | Path) -> int:
        """Add a conversation from a JSON export and show it; returns its id.

        Raises:
            ValueError: the file is not a SpecChat conversation export (or not JSON).
            OSError: the file cannot be read.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except UnicodeDecodeError as error:
            raise ValueError(f"{path} is not a text file: {error}") from error
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from error
        conversation_id = self.db.import_json(data)
        self._refresh_list()
        self.open_conversation(conversation_id)
        return conversation_id

    async def export_dialog(self, fmt: str) -> None:
        """Ask where to save the conversation shown, then export it."""
        conversation = self.db.conversation(self.chat_view.conversation_id) if self.chat_view.conversation_id else None
        if conversation is None:
            self.statusBar().showMessage("This chat is empty: there is nothing to export yet", 5000)
            return
        suffix = ".md" if fmt == "md" else ".json"
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in conversation.title).strip() or "chat"
        path = await choose_file(
            self, "Export conversation", save=True,
            name_filter="Markdown (*.md)" if fmt == "md" else "JSON (*.json)", suggested=name + suffix,
        )  # fmt: skip
        if not path:
            return
        if not path.endswith(suffix):
            path += suffix
        try:
            written = self.export_conversation(path, fmt)
        except (OSError, ValueError) as error:
            await message_box(self, QMessageBox.Icon.Warning, "Export failed", f"Could not write {path}.", informative=str(error))
            return
        self.statusBar().showMessage(f"Exported to {written}", 5000)

    async def import_dialog(self) -> None:
        """Ask for a JSON export, then import it."""
        path = await choose_file(self, "Import conversation", name_filter="SpecChat JSON export (*.json)")
        if not path:
            return
        try:
            self.import_conversation(path)
        except (OSError, ValueError) as error:
            await message_box(
                self, QMessageBox.Icon.Warning, "Import failed", f"Could not import {path}.",
                informative=f"{error}\n\nChoose a file written by File > Export as JSON.", object_name="importError",
            )  # fmt: skip
            return
        self.statusBar().showMessage(f"Imported {path}", 5000)

    def show_models(self) -> None:
        """Open the Models dialog (not modal); the draft-model choices follow what it adds or removes."""
        from .widgets.models_dialog import ModelsDialog

        if self.models_dialog is None:
            self.models_dialog = ModelsDialog(self)
            self.models_dialog.models_changed.connect(lambda: self.settings_pane.set_models(_installed_models()))
        self.models_dialog.show()
        self.models_dialog.raise_()
        self.models_dialog.activateWindow()

    # --- help -------------------------------------------------------------------------------------

    async def show_shortcuts(self) -> None:
        """List the keyboard shortcuts."""
        await message_box(
            self,
            QMessageBox.Icon.Information,
            "Keyboard shortcuts",
            "Enter: send · Shift+Enter: new line · Esc: stop the reply\n"
            "Ctrl+N: new chat · Ctrl+Shift+Enter: compare · Ctrl+R: regenerate · Ctrl+Shift+C: copy the last reply\n"
            "F2: rename chat · Del: delete chat · Ctrl+F: find chat · Ctrl+H: highlight draft tokens\n"
            "Ctrl+O: import · Ctrl+Shift+M / Ctrl+Shift+J: export as Markdown / JSON · Ctrl+M: models · Ctrl+Q: quit",
            object_name="shortcuts",
        )

    async def show_about(self) -> None:
        """Say what SpecChat is."""
        await message_box(
            self,
            QMessageBox.Icon.Information,
            "About SpecChat",
            "SpecChat: chat with local LLMs on OpenVINO.\n\nINT4 weights, speculative decoding (draft model or "
            "prompt lookup) and an attention-sink rolling context. Replies are generated on this computer; "
            "nothing is sent anywhere.",
            object_name="about",
        )

    # --- closing ----------------------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        """Save the window state and any streaming reply, stop the worker, close."""
        self.shutdown()
        event.accept()

    def shutdown(self) -> None:
        """Stop generating (saving the reply as stopped), save settings and window state, stop the worker."""
        if self._shut_down:
            return
        self._shut_down = True
        ui_state = self._ui_state()
        self.hide()  # quitting looks instant even if the worker must finish loading a model first
        self.chat_view._flush_system_prompt()
        if self.active is not None:
            active, self.active = self.active, None
            active.closed = True
            active.cancel.set()
            active.recorder.finish("stopped")
        try:
            self.store.save_ui_state(self.settings, ui_state)
        except OSError as error:
            logger.warning("could not save the settings: %s", error)
        self._close_progress()
        for task in list(self._tasks):
            task.cancel()
        if self.owns_worker:
            self.worker.shutdown(wait=True)


def _installed_models() -> list[dict]:
    try:
        return list_models()
    except OSError:
        return []

