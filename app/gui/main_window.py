"""The main window: conversations on the left, the chat in the middle, settings and the live graph on the right.

Rules:
- The window builds the layout, the actions and menus, and wires signals; it owns the widgets and nothing else
  decides what they show.
- Loading models is :class:`~app.gui.model_loader.ModelLoader`'s state machine; generating replies (send,
  regenerate, re-send an edited message, compare, stop) is :class:`~app.gui.reply_controller.ReplyController`'s.
  The window follows their signals: it streams the reply into the view and the graph, shows the model's state,
  and turns every error into something shown in place or in a dialog that says what to do.
- Coroutines run in one :class:`~app.gui.background.TaskSet`; every dialog is awaited, never ``exec()``-ed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox, QProgressBar, QSplitter, QVBoxLayout, QWidget

from inference.models.progress import ProgressEvent
from inference.models.store import ModelManifest, installed_models

from .background import TaskSet
from .history_db import HistoryDB, Message
from .inference_worker import InferenceWorker, ModelInfo
from .model_loader import ModelLoader
from .reply_controller import ActiveReply, ReplyController
from .sampling_presets import model_default
from .settings_store import AppSettings, SettingsStore
from .widgets.chat_view import ChatView
from .widgets.composer import Composer
from .widgets.conversation_list import ConversationList
from .widgets.dialogs import ModelProgressDialog, choose_file, message_box
from .widgets.live_graph import LiveGraph
from .widgets.settings_pane import SettingsPane

logger = logging.getLogger(__name__)

SETTINGS_SAVE_DELAY_MS = 300


class MainWindow(QMainWindow):
    """SpecChat's window.

    Args:
        db: the chat history; store: the settings file; worker: the inference thread.
        devices: OpenVINO devices to offer (``inference.devices.available_devices()``).
        history_notice: a message about the history database to show at start (it was unreadable...).
        owns_worker: shut the worker down when the window closes.

    Attributes:
        models: the model-loading state machine; replies: the reply controller.

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
        self._shut_down = False
        self.tasks = TaskSet(self._unexpected_error)
        self.models = ModelLoader(worker, self.tasks, lambda: self.settings, self._ask_retry, parent=self)
        self.replies = ReplyController(db, worker, self.models, self.tasks, lambda: self.settings, parent=self)
        self.progress_dialog: ModelProgressDialog | None = None
        self.models_dialog = None

        self.setWindowTitle("SpecChat")
        self.resize(1440, 900)
        self._build_ui()
        self._build_actions()
        self._connect_models()
        self._connect_replies()
        self._restore_ui_state()
        self.refresh_list()
        conversations = self.db.conversations()
        if conversations:
            self.open_conversation(conversations[0].id)
        else:
            self.new_chat()

        self._settings_timer = QTimer(self)
        self._settings_timer.setSingleShot(True)
        self._settings_timer.timeout.connect(self._save_settings)
        for warning in store.warnings:
            self.statusBar().showMessage(warning, 10000)

    @property
    def active(self) -> ActiveReply | None:
        """The reply being generated, or None."""
        return self.replies.active

    @property
    def model_state(self) -> str:
        """``idle``, ``loading``, ``ready`` or ``error`` (:class:`~app.gui.model_loader.ModelLoader`)."""
        return self.models.state

    @property
    def model_error(self) -> str | None:
        """Why the models could not be loaded (None when they were, or while loading)."""
        return self.models.error

    # --- building ---------------------------------------------------------------------------------

    def _build_ui(self) -> None:
        self.conversation_list = ConversationList()
        self.conversation_list.selected.connect(self.open_conversation)
        self.conversation_list.new_requested.connect(self.new_chat)
        self.conversation_list.renamed.connect(self.rename_conversation)
        self.conversation_list.delete_requested.connect(lambda cid: self.tasks.spawn(self.delete_conversation(cid)))
        self.conversation_list.search_changed.connect(lambda _: self.refresh_list())

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

        self.settings_pane = SettingsPane(self.settings, self.devices, store=self.store)
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
            file_menu, "&Import conversation (JSON)…", lambda: self.tasks.spawn(self.import_dialog()), "Ctrl+O",
            "Add a conversation exported as JSON",
        )  # fmt: skip
        self.export_markdown_action = self._action(
            file_menu, "Export as &Markdown…", lambda: self.tasks.spawn(self.export_dialog("md")), "Ctrl+Shift+M",
            "Save this conversation as a Markdown document",
        )  # fmt: skip
        self.export_json_action = self._action(
            file_menu, "Export as &JSON…", lambda: self.tasks.spawn(self.export_dialog("json")), "Ctrl+Shift+J",
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
            chat_menu, "&Delete chat…", lambda: self.tasks.spawn(self.delete_conversation(self.chat_view.conversation_id)),
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
        self.shortcuts_action = self._action(help_menu, "&Keyboard shortcuts", lambda: self.tasks.spawn(self.show_shortcuts()))
        self.about_action = self._action(help_menu, "&About SpecChat", lambda: self.tasks.spawn(self.show_about()))

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

    # --- wiring -----------------------------------------------------------------------------------

    def _connect_models(self) -> None:
        models = self.models
        models.state_changed.connect(self._show_model_state)
        models.loaded.connect(self._model_loaded)
        models.ready.connect(self.model_ready)
        models.failed.connect(self.model_failed)
        models.setting_refused.connect(self.settings_pane.flag)
        models.fetch_progress.connect(self._fetch_progress)
        models.fetch_finished.connect(self._close_progress)
        models.models_installed.connect(lambda: self.settings_pane.set_models(_installed_models()))

    def _connect_replies(self) -> None:
        replies = self.replies
        replies.started.connect(self._reply_started)
        replies.updated.connect(self._reply_updated)
        replies.run_started.connect(lambda mode, keep_previous: self.live_graph.start_run(mode, keep_previous=keep_previous))
        replies.events.connect(self.live_graph.add_events)
        replies.run_finished.connect(self.live_graph.finish_run)
        replies.failed.connect(self._reply_failed)
        replies.finished.connect(self._reply_finished)

    # --- tasks ------------------------------------------------------------------------------------

    def _unexpected_error(self, error: BaseException) -> None:
        if not self._shut_down:
            self.statusBar().showMessage(f"Unexpected error: {error}", 15000)

    def start(self) -> None:
        """Show any startup notice and start preparing the model in the background."""
        if self._history_notice:
            notice, self._history_notice = self._history_notice, None
            self.tasks.spawn(
                message_box(self, QMessageBox.Icon.Warning, "SpecChat: chat history", notice, object_name="historyNotice")
            )
        self.models.load()

    # --- model ------------------------------------------------------------------------------------

    async def wait_for_model(self) -> None:
        """Wait until the models the settings ask for are loaded.

        Raises:
            ValueError: they could not be loaded (the message says why).
        """
        await self.models.wait()

    def _show_model_state(self, state: str, text: str) -> None:
        self.busy_bar.setVisible(state == "loading")
        self.model_label.setText(text)
        self.model_label.setToolTip(text)

    def _model_loaded(self, info: ModelInfo) -> None:
        self.settings_pane.sampling.set_model_defaults(model_default(info.spec.target_dir))
        self.settings_pane.set_max_position_embeddings(info.max_position_embeddings)
        self.settings_pane.set_precision_in_use(info.precision.describe())

    def _fetch_progress(self, event: ProgressEvent) -> None:
        if self.progress_dialog is None:
            self.progress_dialog = ModelProgressDialog(self, "SpecChat: preparing the model")
            self.progress_dialog.canceled.connect(self.models.cancel_fetch)
            self.progress_dialog.show()
        self.progress_dialog.show_event(event)
        self.statusBar().showMessage(event.message, 5000)

    def _close_progress(self) -> None:
        if self.progress_dialog is not None:
            self.progress_dialog.blockSignals(True)  # closing is not cancelling
            self.progress_dialog.close()
            self.progress_dialog.deleteLater()
            self.progress_dialog = None

    async def _ask_retry(self, what: str, details: str) -> bool:
        """The dialog after a failure to fetch or load the model; True if the user chose Retry."""
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
        return answer == QMessageBox.StandardButton.Retry

    # --- conversations ----------------------------------------------------------------------------

    def refresh_list(self) -> None:
        """Show the conversations matching the search box, the one shown selected."""
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
        self.settings_pane.sampling.set_conversation(None)
        self.conversation_list.list.clearSelection()
        self.composer.edit.setFocus()

    def open_conversation(self, conversation_id: int) -> None:
        """Show a conversation (a reply streaming in it keeps streaming into the view)."""
        conversation = self.db.conversation(conversation_id)
        if conversation is None:
            self.refresh_list()
            return
        if self.chat_view.conversation_id != conversation_id:
            self.chat_view.show_conversation(conversation, self.db.messages(conversation_id))
            self._update_window_title()
            self.settings_pane.sampling.set_conversation(conversation_id)
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
        self.refresh_list()

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
        await self.replies.stop_in(conversation_id)
        self.db.delete_conversation(conversation_id)
        if self.chat_view.conversation_id == conversation_id:
            remaining = self.db.conversations()
            if remaining:
                self.chat_view.show_conversation(None, [])
                self.open_conversation(remaining[0].id)
            else:
                self.new_chat()
        self.refresh_list()
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
            self.models.load_later(settings)
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
        errors = self.settings_pane.errors()
        refusal = self.replies.refusal(text) or (f"Fix the settings first: {next(iter(errors.values()))}" if errors else None)
        if refusal:
            self.composer.show_error(refusal)
            return None
        conversation_id = self.chat_view.conversation_id
        if conversation_id is None or self.db.conversation(conversation_id) is None:
            conversation_id = self.replies.new_conversation(text, self.chat_view.system_prompt())
            self.chat_view.show_conversation(self.db.conversation(conversation_id), [])
            self._update_window_title()
        message = self.replies.add_user_message(conversation_id, text)  # saved before generation starts
        self.composer.clear()
        self.composer.clear_error()
        self.chat_view.append_message(message)
        self.refresh_list()
        self.replies.start_reply(conversation_id, compare)
        return conversation_id

    def regenerate(self, message_id: int) -> None:
        """Replace a reply (the last one) by a new one."""
        discarded = self.replies.discard_reply(message_id)
        if discarded is None:
            return
        conversation_id, compare = discarded
        self.chat_view.remove_message(message_id)
        self.replies.start_reply(conversation_id, compare)

    def regenerate_last(self) -> None:
        """Regenerate the last reply of the conversation shown."""
        widgets = self.chat_view.message_widgets()
        if widgets and widgets[-1].message.role == "assistant":
            self.regenerate(widgets[-1].message.id)

    def resend_edited(self, message_id: int, text: str) -> None:
        """Replace a user message's text, drop the messages after it, and generate a new reply."""
        conversation_id = self.replies.rewrite(message_id, text)
        if conversation_id is None:
            return
        self.open_conversation(conversation_id)
        self.chat_view.show_conversation(self.db.conversation(conversation_id), self.db.messages(conversation_id))
        self.replies.start_reply(conversation_id)

    def copy_last_reply(self) -> None:
        """Copy the last reply of the conversation shown to the clipboard."""
        for widget in reversed(self.chat_view.message_widgets()):
            if widget.message.role == "assistant":
                widget.copy_text()
                self.statusBar().showMessage("Reply copied to the clipboard", 3000)
                return

    def stop(self) -> None:
        """Stop the reply being generated (its text so far is kept)."""
        if self.replies.stop():
            self.statusBar().showMessage("Stopping…", 2000)

    def _reply_started(self, reply: Message) -> None:
        if self.chat_view.conversation_id == reply.conversation_id:
            self.chat_view.append_message(reply, live=True)
        self.composer.set_generating(True)
        self.stop_action.setEnabled(True)
        self.chat_view.set_busy(True)
        self.generation_started.emit(reply.conversation_id)

    def _reply_updated(self, reply: Message, text: str) -> None:
        if self.chat_view.conversation_id == reply.conversation_id:
            self.chat_view.update_message(reply, live=True)
        self.reply_updated.emit(text)

    def _reply_failed(self, message_id: int, error: str, setting: str) -> None:
        self.chat_view.remove_message(message_id)
        self.composer.show_error(f"Could not generate a reply: {error}")
        if setting:
            self.settings_pane.flag(setting, error, blocking=False)

    def _reply_finished(self, final: Message | None) -> None:
        if final is not None:
            if final.state == "error":
                self.composer.show_error(f"The reply stopped with an error: {final.stats.get('error')}")
            if self.chat_view.conversation_id == final.conversation_id:
                self.chat_view.update_message(final)
                widget = self.chat_view.widget(final.id)
                if widget is not None:
                    widget.flush()
        self.composer.set_generating(False)
        self.stop_action.setEnabled(False)
        self.chat_view.set_busy(False)
        self.refresh_list()
        self.generation_finished.emit(final)

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
        self.refresh_list()
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
        self.chat_view.flush_system_prompt()
        self.replies.close()
        self.models.close()
        try:
            self.store.save_ui_state(self.settings, ui_state)
        except OSError as error:
            logger.warning("could not save the settings: %s", error)
        self._close_progress()
        self.tasks.cancel_all()
        if self.owns_worker:
            self.worker.shutdown(wait=True)


def _installed_models() -> list[ModelManifest]:
    try:
        return installed_models()
    except OSError:
        return []
