"""The main window: the model picker on top, conversations on the left, the chat in the middle, settings and the
live graph on the right.

Rules:
- The window builds the layout, the actions and menus, and wires signals; it owns the widgets and nothing else
  decides what they show.
- Loading models is :class:`~app.gui.model_loader.ModelLoader`'s state machine; generating replies (send,
  regenerate, re-send an edited message, compare, stop) is :class:`~app.gui.reply_controller.ReplyController`'s.
  The window follows their signals: it streams the reply into the view and the graph, shows the model's state,
  and turns every error into something shown in place or in a dialog that says what to do.
- Coroutines run in one :class:`~app.background.TaskSet`; every dialog is awaited, never ``exec()``-ed.
- A history write the database refuses (``sqlite3.Error``: full disk, locked past the busy timeout) is said in
  the composer (what happened, what to do); unsaved text stays where it was typed, and the Send button and the
  rest of the reply UI are reset in ``finally``.
- A history kept in memory only (newer schema, unopenable file) shows a banner all session, and quitting with
  chats in it asks first.
- The model choice: the picker chooses the target (``AppSettings.target_model``, and ``bits`` for the default
  model's copies); the draft list offers the installed models with the target's tokenizer; both follow the
  store (Models > Refresh, the Models dialog, a fetch). A conversation last answered with another model, and a
  draft model that made a reply slower than plain decoding, are said in a notice above the chat.
- A remote OpenAI-compatible server is a target too (the picker's "Remote server (OpenAI-compatible)…" opens
  :mod:`~app.gui.widgets.remote_dialog`; ``AppSettings.use_remote``): replies stream from it, the local model stays
  loaded for switching back, and Compare is off (the button says why) unless the server is SpecChat's, which
  offers both modes.
- The local server (Server > Local server…) is :class:`~app.gui.local_server.LocalServer`'s: it serves the
  model the window has loaded, through the window's inference worker; the window starts it again with the model
  when it was on at the last close, and keeps its settings (``SettingsStore.server``).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import QLabel, QMainWindow, QMessageBox, QProgressBar, QSplitter, QVBoxLayout, QWidget

from inference.generation_config import recommended_sampling
from inference.models.default_model import default_model_dir
from inference.models.progress import ProgressEvent
from inference.models.store import SUPPORTED_BITS, ModelManifest, compatible_drafts, installed_models, target_models
from inference.settings import Decoding

from ..background import TaskSet
from ..inference_worker import InferenceWorker, ModelInfo
from ..remote_backend import RemoteError
from ..remote_keys import LOCAL_SERVER, check_keys_file, load_api_key, save_api_key
from .draft_speed import StepRates, draft_speed_ratio, is_slow
from .history_db import HistoryDB, Message, read_export, write_error_text
from .local_server import LocalServer, ServedModel
from .model_loader import ModelLoader
from .reply_controller import ActiveReply, ReplyController
from .reply_format import answered_with
from .sampling_presets import model_default
from .settings_store import AppSettings, SettingsStore
from .widgets.chat_view import ChatView
from .widgets.composer import Composer
from .widgets.conversation_list import ConversationList
from .widgets.dialogs import ModelProgressDialog, choose_file, message_box
from .widgets.live_graph import LiveGraph
from .widgets.model_notice import ModelNotice
from .widgets.model_picker import ModelPicker
from .widgets.settings_pane import SettingsPane
from .window_geometry import default_size, fit_to_screen

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
        self.local_server = LocalServer(worker, self.tasks, self._served_model, parent=self)
        self.server_dialog = None
        self.progress_dialog: ModelProgressDialog | None = None
        self.models_dialog = None
        self._step_rates = StepRates()
        self._slow_pairs_told: set[tuple[str, str]] = set()
        self._settings_timer = QTimer(self)
        self._settings_timer.setSingleShot(True)
        self._settings_timer.timeout.connect(self._save_settings)

        self.setWindowTitle("SpecChat")
        self.resize(default_size(self.screen().availableGeometry()))
        self._build_ui()
        self._build_actions()
        self._connect_models()
        self._connect_replies()
        self._connect_local_server()
        self._restore_ui_state()
        self.refresh_list()
        conversations = self.db.conversations()
        if conversations:
            self.open_conversation(conversations[0].id)
        else:
            self.new_chat()

        for warning in store.warnings:
            self.statusBar().showMessage(warning, 10000)
        self._files_notice = "\n\n".join(filter(None, [store.notice, check_keys_file()]))

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
        self.chat_view.json_output_changed.connect(self._json_output_changed)
        self.chat_view.highlight_toggled.connect(self._highlight_toggled)
        self.composer = Composer()
        self.composer.send_requested.connect(lambda text: self.send(text))
        self.composer.compare_requested.connect(lambda text: self.send(text, compare=True))
        self.composer.stop_requested.connect(self.stop)
        middle = QWidget()
        middle_layout = QVBoxLayout(middle)
        middle_layout.setContentsMargins(0, 0, 0, 0)
        middle_layout.setSpacing(0)
        self.history_banner = QLabel(
            "This session's chats are kept in memory only and are lost when you quit (the chat history on disk "
            "could not be used: see the notice at start). Export a chat (File > Export as JSON) to keep it."
        )
        self.history_banner.setObjectName("historyBanner")
        self.history_banner.setWordWrap(True)
        self.history_banner.setStyleSheet("background: #fff3cd; color: #664d03; padding: 6px 12px;")
        self.history_banner.setVisible(self.db.in_memory)
        middle_layout.addWidget(self.history_banner)
        self.model_notice = ModelNotice()
        middle_layout.addWidget(self.model_notice)
        middle_layout.addWidget(self.chat_view, 1)
        middle_layout.addWidget(self.composer)

        self.settings_pane = SettingsPane(self.settings, self.devices, store=self.store)
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
        self.right_splitter.setSizes([430, 470])  # fitted to the screen when first shown (showEvent)

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
        self.model_picker = ModelPicker()
        self.model_picker.chosen.connect(self.choose_target)
        self.model_picker.remote_chosen.connect(self.choose_remote)
        self.model_picker.remote_requested.connect(lambda: self.tasks.spawn(self.remote_dialog()))
        toolbar = self.addToolBar("Model")
        toolbar.setObjectName("modelToolbar")
        toolbar.setMovable(False)
        toolbar.addWidget(self.model_picker)
        self.refresh_models()

        status = self.statusBar()
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setMaximumWidth(120)
        self.busy_bar.setMaximumHeight(14)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setVisible(False)
        self.model_label = QLabel("No model loaded")
        self.model_label.setObjectName("modelLabel")
        self.server_label = QLabel()
        self.server_label.setObjectName("serverLabel")
        self.server_label.setVisible(False)
        status.addPermanentWidget(self.server_label)
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
        self.quit_action = self._action(file_menu, "&Quit", self.request_quit, QKeySequence.StandardKey.Quit)

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

        models_menu = menu.addMenu("&Models")
        self.choose_model_action = self._action(
            models_menu, "&Choose the model", self.focus_model_picker, "Ctrl+L", "Open the model picker at the top"
        )
        self.models_action = self._action(
            models_menu, "&Manage models…", self.show_models, "Ctrl+M", "Installed models: import, download, convert, remove",
        )  # fmt: skip
        self.refresh_models_action = self._action(
            models_menu, "&Refresh", self.refresh_models, "F5", "Re-read the model store (models added from the command line)",
        )  # fmt: skip

        server_menu = menu.addMenu("&Server")
        self.local_server_action = self._action(
            server_menu, "&Local server…", self.show_local_server,
            tip="Serve the loaded model to other programs (OpenAI API)",
        )  # fmt: skip

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
        self._fit_right_column = not isinstance(ui.get("right_splitter"), str)
        for key, widget in (("geometry", self), ("splitter", self.splitter), ("right_splitter", self.right_splitter)):
            value = ui.get(key)
            if isinstance(value, str):
                try:
                    data = QByteArray.fromBase64(value.encode("ascii"))
                    widget.restoreGeometry(data) if key == "geometry" else widget.restoreState(data)
                except (ValueError, TypeError):
                    pass
        fit_to_screen(self)  # saved on a larger screen, or on one no longer attached

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        """On the first show without a saved layout, give the settings the height of their content where the
        screen allows it (no scroll bar on a 1366x768 screen) and the graph the rest, up to 430 px."""
        super().showEvent(event)
        column = sum(self.right_splitter.sizes())
        if self._fit_right_column and column > 0:  # (0 while the side panel is hidden)
            self._fit_right_column = False
            graph = min(430, max(self.live_graph.minimumSizeHint().height(), column - self.settings_pane.content_height()))
            self.right_splitter.setSizes([graph, column - graph])

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
        models.setting_refused.connect(self._setting_refused)
        models.fetch_progress.connect(self._fetch_progress)
        models.fetch_finished.connect(self._close_progress)
        models.models_installed.connect(self.refresh_models)

    def _connect_replies(self) -> None:
        replies = self.replies
        replies.started.connect(self._reply_started)
        replies.updated.connect(self._reply_updated)
        replies.run_started.connect(
            lambda mode, keep_previous: self.live_graph.start_run(
                mode, keep_previous=keep_previous, conversation_id=self.active.conversation_id if self.active else None
            )
        )
        replies.run_started.connect(lambda *_: setattr(self, "_step_rates", StepRates()))
        replies.events.connect(self.live_graph.add_events)
        replies.events.connect(lambda events: self._step_rates.add(events))
        replies.run_finished.connect(self.live_graph.finish_run)
        replies.failed.connect(self._reply_failed)
        replies.finished.connect(self._reply_finished)
        replies.save_failed.connect(self._show_history_error)
        replies.saved_again.connect(self._saved_again)

    # --- tasks ------------------------------------------------------------------------------------

    def _unexpected_error(self, error: BaseException) -> None:
        if not self._shut_down:
            self.statusBar().showMessage(f"Unexpected error: {error}", 15000)

    def _show_history_error(self, text: str) -> None:
        """Say that the history refused a write (in the composer, and in the status bar while it is covered)."""
        self.composer.show_error(text)
        self.statusBar().showMessage(text, 15000)

    def _saved_again(self) -> None:
        if self.composer.error_text.startswith("The reply could not be saved"):
            self.composer.clear_error()
        self.statusBar().showMessage("The reply was saved to the history", 5000)

    def _write_failed(self, what: str, error: sqlite3.Error) -> None:
        logger.warning("history write failed (%s): %s", what, error)
        self._show_history_error(f"Could not save {what}: {write_error_text(error)}")

    def _reset_reply_ui(self) -> None:
        """Send, Stop and the messages' actions as they are when no reply streams (after a failed start)."""
        if self.active is None:
            self.composer.set_generating(False)
            self.stop_action.setEnabled(False)
            self.chat_view.set_busy(False)

    def start(self) -> None:
        """Show any startup notice and start preparing the model in the background."""
        if self._history_notice:
            notice, self._history_notice = self._history_notice, None
            self.tasks.spawn(
                message_box(self, QMessageBox.Icon.Warning, "SpecChat: chat history", notice, object_name="historyNotice")
            )
        if self._files_notice:
            notice, self._files_notice = self._files_notice, ""
            self.tasks.spawn(
                message_box(self, QMessageBox.Icon.Warning, "SpecChat: settings", notice, object_name="settingsNotice")
            )
        self.models.load()
        if self.settings.use_remote:
            self._update_compare()
            self.tasks.spawn(self.detect_remote())

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

    def _setting_refused(self, field: str, message: str) -> None:
        if field == "target_model":
            self.model_picker.flag(message)
        else:
            self.settings_pane.flag(field, message)

    # --- model choice -----------------------------------------------------------------------------

    def refresh_models(self) -> None:
        """Re-read the model store: the picker lists every installed model, the draft list those with the
        target's tokenizer (a draft-model decoding whose draft no longer fits gets the first that does)."""
        models = _installed_models()
        settings = self.settings
        remote = settings.remote_target().describe() if settings.remote_model else None
        self.model_picker.set_remote(remote, settings.use_remote)
        self.model_picker.set_models(target_models(models), settings.target_model, settings.bits)  # a draft head only drafts
        self.model_picker.set_device(None if settings.use_remote else settings.target_device)
        drafts = compatible_drafts(self._target_manifest(models), models)
        self.settings_pane.set_models(drafts)
        paths = [str(m.path) for m in drafts]
        if settings.uses_draft_model and settings.draft_model not in paths and drafts:
            if not settings.draft_model or Path(settings.draft_model).parent == drafts[0].path.parent:
                self._choose_settings(replace(settings, draft_model=paths[0]))

    def _target_manifest(self, models: list[ModelManifest]) -> ModelManifest | None:
        """The chosen target's manifest (for the default model not built yet at ``bits``: another copy's, moved to
        the folder it will have, so that the copy itself can draft for it)."""
        manifest = self.model_picker.manifest(self.settings.target_model, self.settings.bits)
        if manifest is None and not self.settings.target_model:
            copies = (self.model_picker.manifest("", bits) for bits in SUPPORTED_BITS)
            copy = next((copy for copy in copies if copy is not None), None)
            manifest = replace(copy, path=default_model_dir(self.settings.bits)) if copy is not None else None
        return manifest

    def focus_model_picker(self) -> None:
        """Put the focus on the model picker and open its list (Ctrl+L)."""
        self.model_picker.combo.setFocus()
        self.model_picker.combo.showPopup()

    def choose_target(self, target_model: str, bits: int) -> None:
        """Chat with this target from the next reply on (loaded in the background; ``target_model`` "" = the
        default model at ``bits``)."""
        self._choose_settings(replace(self.settings, target_model=target_model, bits=bits, use_remote=False))

    def choose_remote(self) -> None:
        """Chat with the remote server configured (``remote_url``, ``remote_model``) from the next reply on."""
        if self.settings.remote_model:
            self._choose_settings(replace(self.settings, use_remote=True))
            self.tasks.spawn(self.detect_remote())

    async def remote_dialog(self) -> bool:
        """Ask for a remote server (base URL, API key, model) and chat with it; True when one was chosen (its key
        is stored by ``app.remote_keys``, never in the settings file)."""
        from .widgets.remote_dialog import ask_remote_server

        settings = self.settings
        url = settings.remote_target().root
        def stored_key(url: str) -> str:
            return self.replies.remote_keys.get(url, load_api_key(url) if url else "")

        choice = await ask_remote_server(
            self, self.tasks.spawn, settings.remote_url, settings.remote_model, stored_key(url), stored_key
        )
        if choice is None:
            self.model_picker.select(self.settings.target_model, self.settings.bits)
            return False
        self.replies.remote_keys[choice.base_url] = choice.api_key
        unsaved = ""
        try:
            save_api_key(choice.base_url, choice.api_key)
        except OSError as error:
            unsaved = f"Could not store the API key ({error}): it is used this session only. "
        if choice.specchat is not None:
            self.replies.remote_specchat[choice.base_url] = choice.specchat
        self._choose_settings(replace(settings, remote_url=choice.base_url, remote_model=choice.model, use_remote=True))
        self.refresh_models()
        self._update_compare()
        if choice.specchat is None:
            self.tasks.spawn(self.detect_remote())
        self.statusBar().showMessage(f"{unsaved}Replies now come from {self.settings.target_name}", 15000)
        return True

    async def detect_remote(self) -> None:
        """Ask the remote server chosen for its models, to learn whether it is SpecChat's (Compare follows)."""
        backend = self.replies.remote_backend(self.settings)
        if backend is None:
            return
        try:
            await backend.list_models()
        except RemoteError as error:
            self.statusBar().showMessage(f"Remote server: {error}", 15000)
            return
        self.replies.remote_specchat[backend.target.root] = backend.specchat
        self._update_compare()

    def _update_compare(self) -> None:
        """Compare is off on a remote server that does not offer both decoding modes (the button says why)."""
        settings = self.settings
        reason = None
        if settings.use_remote and not self.replies.remote_specchat.get(settings.remote_target().root, False):
            reason = (
                f"Compare needs a server that offers autoregressive and speculative decoding (SpecChat's does); "
                f"{settings.remote_target().host} does not say it does"
            )
        self.composer.set_compare_unavailable(reason)
        self.compare_action.setEnabled(reason is None)

    def _choose_settings(self, settings: AppSettings) -> None:
        """Apply settings chosen outside the settings pane (the picker, a notice, the Models dialog)."""
        previous = self.settings
        if settings == previous:
            return
        self.settings = settings
        self.settings_pane.set_settings(settings)  # the pane shows them (and emits them back, unchanged)
        self._settings_applied(previous)

    def choice_for(self, name: str) -> tuple[str, int] | None:
        """The picker's choice ``(target_model, bits)`` for a model's store name; None if it is not installed."""
        for bits in SUPPORTED_BITS:
            if name == default_model_dir(bits).name:
                return ("", bits)
        if any(m.store_name == name for m in _installed_models()):
            return (name, self.settings.bits)
        return None

    def _check_conversation_model(self) -> None:
        """Say so when the conversation shown was last answered with another model than the one chosen."""
        conversation_id = self.chat_view.conversation_id
        messages = self.db.messages(conversation_id) if conversation_id is not None else []
        answered = (answered_with(m.stats) for m in reversed(messages) if m.role == "assistant")
        last = next((name for name in answered if name), "")
        current = self.settings.target_name
        if not last or last == current:
            self.model_notice.dismiss("conversation")
            return
        choice = self.choice_for(last)
        settings = self.settings
        now = settings.target_name if settings.use_remote else self.model_picker.label(settings.target_model, settings.bits)
        if choice is None and settings.remote_model and last == settings.remote_target().describe():
            text = f"This chat was answered by {last}; the model now chosen is {now}."
            self.model_notice.show_notice("conversation", text, "Switch to the remote server", self.choose_remote)
            return
        if choice is None and last.endswith(" (remote)"):  # a server chosen before (the picker keeps one)
            text = f"This chat was answered by {last}, a server no longer chosen; the model now chosen is {now}."
            self.model_notice.show_notice("conversation", text)
            return
        if choice is None:
            text = f"This chat was answered with {last}, which is no longer installed; the model now chosen is {now}."
            self.model_notice.show_notice("conversation", text)
            return
        then = self.model_picker.label(*choice)
        text = f"This chat was answered with {then}; the model now chosen is {now}."
        switch = f"Switch to {then.split(' · ')[0]}"
        self.model_notice.show_notice("conversation", text, switch, lambda: self.choose_target(*choice))

    def _check_draft_speed(self, final: Message) -> None:
        """After a reply or a comparison that measured the draft model slower than plain decoding, say so (once
        per target and draft pair) and offer prompt lookup."""
        ratio = draft_speed_ratio(final.stats, self._step_rates)
        pair = (self.settings.target_name, self.settings.draft_model)
        if not is_slow(ratio) or pair in self._slow_pairs_told:
            return
        self._slow_pairs_told.add(pair)
        text = (
            f"The draft model made this reply {ratio:.1f}x as fast as plain decoding ({Path(pair[1]).name} drafting "
            f"for {pair[0]}): it costs more than it saves here. Try Speculative (prompt lookup), or autoregressive "
            "decoding."
        )
        self.model_notice.show_notice("slow_draft", text, "Use prompt lookup", self._use_prompt_lookup)

    def _use_prompt_lookup(self) -> None:
        self._choose_settings(self.settings.with_values(decoding=Decoding.PROMPT_LOOKUP))

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
        """Called whenever the conversation shown changes: the title, and the live graph, follow it."""
        conversation = self.chat_view.conversation
        self.setWindowTitle(f"{conversation.title} — SpecChat" if conversation else "SpecChat")
        conversation_id = self.chat_view.conversation_id
        replies = [m for m in self.db.messages(conversation_id) if m.role == "assistant"] if conversation_id else []
        self.live_graph.show_conversation(conversation_id, replies[-1].stats if replies else None)

    def new_chat(self) -> None:
        """Show an empty new chat (saved when its first message is sent)."""
        self.chat_view.show_conversation(None, [])
        self._update_window_title()
        self.model_notice.dismiss("conversation")
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
            self._check_conversation_model()
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
        except sqlite3.Error as error:
            self._write_failed("the new title", error)
            self.refresh_list()  # the list shows the title that is saved
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
        try:
            self.db.delete_conversation(conversation_id)
        except sqlite3.Error as error:
            self._write_failed(f"the deletion of “{conversation.title}” (it was kept)", error)
            return False
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

    def _json_output_changed(self, conversation_id: int, on: bool) -> None:
        if conversation_id >= 0 and self.db.conversation(conversation_id) is not None:
            try:
                self.db.set_json_output(conversation_id, on)
            except sqlite3.Error as error:
                self._write_failed("the JSON output choice (toggle it again to retry)", error)

    def _system_prompt_changed(self, conversation_id: int, text: str) -> None:
        if conversation_id >= 0 and self.db.conversation(conversation_id) is not None:
            try:
                self.db.set_system_prompt(conversation_id, text)
            except sqlite3.Error as error:
                self._write_failed("the system prompt (it stays in its box: edit it again to retry)", error)
                return
            self.statusBar().showMessage("System prompt saved: it applies to the next reply", 4000)

    def _focus_search(self) -> None:
        self.conversation_list.search.setFocus()
        self.conversation_list.search.selectAll()

    # --- settings ---------------------------------------------------------------------------------

    def _settings_changed(self, settings: AppSettings) -> None:
        """The settings pane's settings changed; the target model is the picker's (a new bit-width in the pane
        chooses the default model at that bit-width)."""
        previous = self.settings
        new_bits = settings.bits != previous.bits
        self.settings = replace(
            settings,
            target_model="" if new_bits else previous.target_model,
            remote_url=previous.remote_url,
            remote_model=previous.remote_model,
            use_remote=previous.use_remote and not new_bits,
        )
        self._settings_applied(previous)

    def _settings_applied(self, previous: AppSettings) -> None:
        settings = self.settings
        self._settings_timer.start(SETTINGS_SAVE_DELAY_MS)
        if settings.model_key() != previous.model_key():
            self.models.load_later(settings)
            self.statusBar().showMessage("The model will be reloaded in the background", 3000)
        if (settings.target_name, settings.target_device) != (previous.target_name, previous.target_device):
            self.refresh_models()
            self._check_conversation_model()
        if settings.use_remote != previous.use_remote:
            self._update_compare()

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
        errors = self.settings_pane.errors(compare=compare)
        refusal = self.replies.refusal(text) or (f"Fix the settings first: {next(iter(errors.values()))}" if errors else None)
        if refusal:
            self.composer.show_error(refusal)
            return None
        self.replies.retry_unsaved()
        message = None
        try:
            conversation_id = self.chat_view.conversation_id
            if conversation_id is None or self.db.conversation(conversation_id) is None:
                conversation_id = self.replies.new_conversation(
                    text, self.chat_view.system_prompt(), self.chat_view.json_output()
                )
                self.settings_pane.sampling.adopt_conversation(conversation_id)
                self.chat_view.show_conversation(self.db.conversation(conversation_id), [])
                self._update_window_title()
            message = self.replies.add_user_message(conversation_id, text)  # saved before generation starts
            self.composer.clear()
            self.composer.clear_error()
            self.chat_view.append_message(message)
            self.refresh_list()
            self.replies.start_reply(conversation_id, compare)
        except sqlite3.Error as error:
            if message is None:
                self._write_failed("your message (it is still in the box below: send it again)", error)
            else:
                self._write_failed("the reply (your message was saved: Edit it and Resend to try again)", error)
            return None
        finally:
            self._reset_reply_ui()
        return conversation_id

    def regenerate(self, message_id: int) -> None:
        """Replace a reply (the last one) by a new one."""
        try:
            discarded = self.replies.discard_reply(message_id)
            if discarded is None:
                return
            conversation_id, compare = discarded
            self.chat_view.remove_message(message_id)
            self.replies.start_reply(conversation_id, compare)
        except sqlite3.Error as error:
            self._write_failed("the new reply (press Regenerate to try again)", error)
            self.chat_view.show_conversation(self.chat_view.conversation, self.db.messages(self.chat_view.conversation_id))
        finally:
            self._reset_reply_ui()

    def regenerate_last(self) -> None:
        """Regenerate the last reply of the conversation shown."""
        widgets = self.chat_view.message_widgets()
        if widgets and widgets[-1].message.role == "assistant":
            self.regenerate(widgets[-1].message.id)

    def resend_edited(self, message_id: int, text: str) -> None:
        """Replace a user message's text, drop the messages after it, and generate a new reply."""
        try:
            conversation_id = self.replies.rewrite(message_id, text)
            if conversation_id is None:
                return
            self.open_conversation(conversation_id)
            self.chat_view.show_conversation(self.db.conversation(conversation_id), self.db.messages(conversation_id))
            self.replies.start_reply(conversation_id)
        except sqlite3.Error as error:
            self._write_failed("the edited message (the conversation is as it was; copy your text before leaving)", error)
            widget = self.chat_view.widget(message_id)
            if widget is not None:  # the edited text goes back into its editor
                widget.start_editing()
                widget.editor.setPlainText(text)
        finally:
            self._reset_reply_ui()

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
            if final.state == "error" or final.stats.get("error"):  # (a remote reply cut mid-way is kept, stopped)
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
        if final is not None and final.state == "complete":
            self._check_draft_speed(final)
        if final is not None and self.chat_view.conversation_id == final.conversation_id:
            self._check_conversation_model()  # answered by the model chosen now: an earlier notice is past
        self.generation_finished.emit(final)

    # --- local server -----------------------------------------------------------------------------

    def _connect_local_server(self) -> None:
        self.local_server.state_changed.connect(self._server_state_changed)
        self.models.ready.connect(self.local_server.model_changed)
        self.settings_pane.settings_changed.connect(self._served_settings_changed)  # after _settings_changed
        if self.store.server.enabled:  # it was on at the last close: on again once the model is loaded
            self.models.ready.connect(self._start_saved_server)

    def _served_model(self) -> ServedModel:
        """The model loaded now, as the local server serves it: the window's decoding, rolling context and K are the
        defaults of requests that leave them out, and so is the model's recommended sampling (as ``specchat serve``
        without sampling flags)."""
        info = self.models.info
        if info is None:
            return ServedModel()
        defaults = replace(self.settings.generation, sampling=recommended_sampling(info.spec.target_dir))
        return ServedModel(info.spec.target_dir.name, info.max_position_embeddings, defaults)

    def _served_settings_changed(self, _settings: AppSettings) -> None:
        if self.models.is_ready_for(self.settings):  # (else the reload's ``ready`` updates the server)
            self.local_server.model_changed()

    def _start_saved_server(self) -> None:
        self.models.ready.disconnect(self._start_saved_server)
        server = self.store.server
        self.local_server.start(server.port, load_api_key(LOCAL_SERVER), server.allow_other_computers)

    def show_local_server(self) -> None:
        """Open the Local server dialog (not modal)."""
        from .widgets.server_dialog import LocalServerDialog

        if self.server_dialog is None:
            key = load_api_key(LOCAL_SERVER)
            self.server_dialog = LocalServerDialog(self.local_server, self.store.server, key, self)
            self.server_dialog.settings_changed.connect(
                lambda chosen: self._save_server(port=chosen.port, allow_other_computers=chosen.allow_other_computers)
            )
        self.server_dialog.show()
        self.server_dialog.raise_()
        self.server_dialog.activateWindow()

    def _server_state_changed(self, state: str, text: str) -> None:
        self.server_label.setText(f"Serving on port {self.local_server.port}")
        self.server_label.setToolTip(text)
        self.server_label.setVisible(state == "serving")
        if state == "failed":
            self.statusBar().showMessage(f"Local server: {text}", 10000)
        if state in ("serving", "stopped") and self.store.server.enabled != (state == "serving"):
            self._save_server(enabled=state == "serving")  # a failed start leaves the choice as it was
        if state == "serving":  # the key it serves with is the one it starts with next time
            try:
                save_api_key(LOCAL_SERVER, self.local_server.api_key or "")
            except OSError as error:
                self.statusBar().showMessage(f"Local server: could not store its API key ({error}): enter it again "
                                             "after a restart", 15000)  # fmt: skip

    def _save_server(self, **changes) -> None:
        try:
            self.store.save_server(replace(self.store.server, **changes))
        except OSError as error:
            logger.warning("could not save the local server's settings: %s", error)

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
            ValueError: the file is not a SpecChat conversation export (not JSON, too large or deep, a field of the
                wrong type: ``history_db.read_export``, ``HistoryDB.import_json``).
            OSError: the file cannot be read. sqlite3.Error: the history refused the write (nothing was written).
        """
        conversation_id = self.db.import_json(read_export(path))
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
        except sqlite3.Error as error:
            self._write_failed(f"the conversation imported from {path}", error)
            return
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
            self.models_dialog.models_changed.connect(self.refresh_models)
            self.models_dialog.pair_installed.connect(self.select_pair)
        self.models_dialog.show()
        self.models_dialog.raise_()
        self.models_dialog.activateWindow()

    def select_pair(self, target: str, draft: str) -> None:
        """Chat with this target and draft (folders in the store): speculative decoding with the draft model."""
        self.refresh_models()
        settings = replace(self.settings, target_model=Path(target).name, draft_model=draft)
        self._choose_settings(settings.with_values(decoding=Decoding.DRAFT_MODEL))
        self.statusBar().showMessage(f"Chatting with {Path(target).name}, drafted by {Path(draft).name}", 10000)

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
            "Ctrl+O: import · Ctrl+Shift+M / Ctrl+Shift+J: export as Markdown / JSON · Ctrl+Q: quit\n"
            "Ctrl+L: choose the model · Ctrl+M: manage models · F5: refresh the model list",
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

    def chats_would_be_lost(self) -> bool:
        """True when the history is kept in memory only and holds a chat (quitting loses it)."""
        return self.db.in_memory and bool(self.db.conversations())

    def request_quit(self) -> None:
        """Quit (File > Quit, the window's close button); with chats in an in-memory history, ask first."""
        if self.chats_would_be_lost():
            self.tasks.spawn(self.confirm_quit())
        else:
            self.close()

    async def confirm_quit(self) -> bool:
        """Ask whether to quit and lose the in-memory history's chats; closes the window and returns True if so."""
        answer = await message_box(
            self,
            QMessageBox.Icon.Warning,
            "Quit SpecChat",
            "Quit and lose this session's chats?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Cancel,
            informative="The chat history on disk could not be used, so this session's chats are kept in memory "
            "only. Export the ones you want to keep first (File > Export as JSON).",
            object_name="confirmQuitInMemory",
        )
        if answer != QMessageBox.StandardButton.Yes:
            return False
        self.close()
        return True

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        """Save the window state and any streaming reply, stop the worker, close. Closing it by the window's own
        button with chats in an in-memory history asks first (a close by the program, SIGTERM, does not)."""
        if event.spontaneous() and not self._shut_down and self.chats_would_be_lost():
            event.ignore()
            self.tasks.spawn(self.confirm_quit())
            return
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
        self.local_server.close()
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
