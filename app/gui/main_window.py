"""The main window: the model picker on top, conversations on the left, the chat in the middle, settings and the
live graph on the right.

Rules:
- The window builds the layout, the actions and menus, and its controllers, and wires signals; it owns the widgets.
  What they show is decided by its controllers, each with one concern:
  :class:`~app.gui.model_loader.ModelLoader` (loading models), :class:`~app.gui.reply_controller.ReplyController`
  (generating replies into the history), :class:`~app.gui.model_choice.ModelChoice` (the settings, the model
  picker, remote servers, draft choices, the model's state and the notices above the chat),
  :class:`~app.gui.conversations.Conversations` (the list, new, open, rename, delete, search, export, import),
  :class:`~app.gui.chat_controller.ChatController` (send, compare, stop, regenerate, edit and resend, and the
  streaming reply on screen) and :class:`~app.gui.server_control.ServerControl` (the local server).
- A controller never sees the window: it is given the widgets and collaborators it drives (typed, in its
  signature), the window as its Qt parent only, and says what the window must do through its own signals (the
  title, Stop's and Compare's menu actions, the reply's progress), which the window connects
  (``tests/gui/test_controller_boundaries.py``).
- Coroutines run in one :class:`~app.background.TaskSet`; every dialog is awaited, never ``exec()``-ed.
- A history kept in memory only (newer schema, unopenable file) shows a banner all session, and quitting with
  chats in it asks first.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from PySide6.QtCore import QByteArray, Qt, Signal, SignalInstance
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..backends.remote_keys import check_keys_file
from ..backends.worker import InferenceWorker
from ..background import TaskSet
from . import theme
from .chat_controller import ChatController
from .conversations import Conversations
from .history_db import HistoryDB
from .model_choice import ModelChoice, compare_words
from .model_loader import ModelLoader
from .reply_controller import ActiveReply, ReplyController
from .server_control import ServerControl
from .settings_store import AppSettings, SettingsStore
from .side_panel_fold import SidePanelFold
from .side_panel_height import SidePanelHeight
from .side_panel_width import PANEL_PX, SidePanelWidth
from .widgets.chat_view import ChatView
from .widgets.code_block import warm_up_in
from .widgets.composer import Composer
from .widgets.conversation_list import ConversationList
from .widgets.dialogs import message_box
from .widgets.help import SHORTCUT_WORDS, show_about, show_shortcuts
from .widgets.live_graph import LiveGraph
from .widgets.model_notice import ModelNotice
from .widgets.model_picker import ModelPicker
from .widgets.settings_pane import SettingsPane, blocked_summary
from .window_geometry import default_size, fit_to_screen, restore_geometry, saved_geometry

logger = logging.getLogger(__name__)


class MainWindow(QMainWindow):
    """SpecChat's window.

    Args:
        db: the chat history; store: the settings file; worker: the inference thread.
        devices: OpenVINO devices to offer (``inference.devices.available_devices()``).
        history_notice: a message about the history database to show at start (it was unreadable...).
        owns_worker: shut the worker down when the window closes.

    Attributes:
        models, replies, choice, conversations, chat, server_control: the controllers (see the module doc);
        local_server: the local server (``server_control.server``).

    Signals:
        model_ready(description), model_failed(message) (the model loader's); the chat controller's
        ``generation_started``, ``reply_updated`` and ``generation_finished`` are the window's too (properties).
    """

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
        self._shut_down = False
        self.tasks = TaskSet(self._unexpected_error)
        say = self.statusBar().showMessage
        settings = store.load()  # (store.notice says if it could not)
        # settings.json, its entries it could not use (once, in the notice at start: a status-bar line under the
        # model's loading went unseen, and "temperature": "hot" became 0.7 without a word), the remote keys
        unused = f"{store.path} holds values SpecChat cannot use:\n" + "\n".join(f"• {w}" for w in store.warnings)
        files_notice = "\n\n".join(filter(None, [store.notice, unused if store.warnings else "", check_keys_file()]))
        self._notices = [("chat history", history_notice, "historyNotice"), ("settings", files_notice, "settingsNotice")]
        self.models = ModelLoader(
            worker, self.tasks, lambda: self.settings, lambda *asked, **how: self.choice.ask_retry(*asked, **how),
            parent=self,
        )  # (the settings and the retry dialog are the model choice's, built with the widgets below)
        self.replies = ReplyController(db, worker, self.models, self.tasks, lambda: self.settings, parent=self)

        self.setWindowTitle("SpecChat")
        self.resize(default_size(self.screen().availableGeometry()))
        self._build_ui(settings)
        self.choice = ModelChoice(
            settings, store, db, self.models, self.replies, self.tasks, self.model_picker, self.settings_pane,
            self.model_notice, self.composer, self.chat_view, self.model_label, self.busy_bar, say, parent=self,
        )  # fmt: skip
        self.conversations = Conversations(
            db, store, self.replies, self.conversation_list, self.chat_view, self.composer, self.live_graph,
            self.settings_pane.sampling, say, parent=self,
        )  # fmt: skip
        self.conversations.title_changed.connect(self.setWindowTitle)
        self.chat = ChatController(
            db, self.replies, self.conversations, self.choice, self.settings_pane, self.chat_view, self.composer,
            self.live_graph, self.statusBar(), parent=self,
        )  # fmt: skip
        self._connect()
        self.server_control = ServerControl(
            worker, self.tasks, self.models, lambda: self.settings, store, self.server_label, say, parent=self
        )
        self.settings_pane.settings_changed.connect(self.server_control.settings_edited)  # after choice.edited
        self.local_server = self.server_control.server
        self._build_actions()
        self._restore_ui_state()
        pane = self.settings_pane
        restored = self._restored_layout  # (a saved layout's panel width and graph height stand as minimums)
        self.side_panel_width = SidePanelWidth(
            self.splitter, self.right_splitter, [pane.bits, pane.decoding, pane.draft_model],
            floor=max(PANEL_PX, self.splitter.sizes()[2]) if restored else PANEL_PX,
        )  # large screens
        self.side_panel_height = SidePanelHeight(
            self.right_splitter, self.live_graph, pane, floor=self.right_splitter.sizes()[0] if restored else None
        )  # tall screens
        self.apply_theme()
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._desktop_scheme_changed)  # (bound: dropped with it)
        self.choice.refresh_models()
        self.conversations.refresh()
        self.conversations.show_first()

    @property
    def generation_started(self) -> SignalInstance:
        """``generation_started(conversation_id)``: a reply started (:class:`ChatController`)."""
        return self.chat.generation_started

    @property
    def reply_updated(self) -> SignalInstance:
        """``reply_updated(text so far)``: the reply streaming grew (:class:`ChatController`)."""
        return self.chat.reply_updated

    @property
    def generation_finished(self) -> SignalInstance:
        """``generation_finished(Message or None)``: the reply ended (:class:`ChatController`)."""
        return self.chat.generation_finished

    @property
    def settings(self) -> AppSettings:
        """The settings the window runs with (:attr:`ModelChoice.settings`)."""
        return self.choice.settings

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

    def _build_ui(self, settings: AppSettings) -> None:
        self.conversation_list = ConversationList()
        self.chat_view = ChatView()
        self.chat_view.set_highlight(settings.highlight_draft)
        self.composer = Composer()
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
        self.history_banner.setVisible(self.db.in_memory)
        middle_layout.addWidget(self.history_banner)
        self.model_notice = ModelNotice()
        middle_layout.addWidget(self.model_notice)
        middle_layout.addWidget(self.chat_view, 1)
        middle_layout.addWidget(self.composer)

        self.settings_pane = SettingsPane(settings, self.devices, store=self.store)
        self.live_graph = LiveGraph()
        self.right_splitter = QSplitter(Qt.Orientation.Vertical)
        self.right_splitter.addWidget(self.live_graph)
        self.right_splitter.addWidget(self.settings_pane)
        self.right_splitter.setStretchFactor(0, 0)
        self.right_splitter.setStretchFactor(1, 1)
        self.right_splitter.setSizes([430, 470])  # split to the settings' content when shown (SidePanelHeight)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.conversation_list)
        self.splitter.addWidget(middle)
        self.splitter.addWidget(self.right_splitter)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setStretchFactor(2, 0)
        self.splitter.setSizes([250, 800, 410])  # the graph's button row and legend need 400 px
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)
        self.model_picker = ModelPicker()
        toolbar = self.addToolBar("Model")
        toolbar.setObjectName("modelToolbar")
        toolbar.setMovable(False)
        toolbar.addWidget(self.model_picker)

        status = self.statusBar()
        self.busy_bar = QProgressBar()
        self.busy_bar.setRange(0, 0)
        self.busy_bar.setMaximumWidth(120)
        self.busy_bar.setMaximumHeight(14)
        self.busy_bar.setTextVisible(False)
        self.busy_bar.setVisible(False)
        self.model_label = QLabel("No model loaded")
        self.model_label.setObjectName("modelLabel")
        self.model_label.setAccessibleName("Model status")
        self.server_label = QLabel()
        self.server_label.setObjectName("serverLabel")
        self.server_label.setVisible(False)
        status.addPermanentWidget(self.server_label)
        status.addPermanentWidget(self.busy_bar)
        status.addPermanentWidget(self.model_label)
        errors = self.settings_pane.errors()
        self.composer.set_blocked(blocked_summary(errors) or None)

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

    def _name_compare(self, words: str) -> None:
        """Chat > Compare (and so Help > Keyboard shortcuts) says what Compare runs: ``plain vs Auto decoding``."""
        self.compare_action.setText(f"&Compare {words}")
        tip = f"Send the message twice, {words.replace(' vs ', ' decoding then ', 1)}, and compare"
        self.compare_action.setStatusTip(tip)
        self.compare_action.setToolTip(tip)

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self.new_action = self._action(file_menu, "&New chat", self.conversations.new, QKeySequence.StandardKey.New, "Start a new conversation")
        file_menu.addSeparator()
        self.import_action = self._action(
            file_menu, "&Import conversation (JSON)…", lambda: self.tasks.spawn(self.conversations.import_dialog()), "Ctrl+O",
            "Add a conversation exported as JSON",
        )  # fmt: skip
        self.export_markdown_action = self._action(
            file_menu, "Export as &Markdown…", lambda: self.tasks.spawn(self.conversations.export_dialog("md")), "Ctrl+Shift+M",
            "Save this conversation as a Markdown document",
        )  # fmt: skip
        self.export_json_action = self._action(
            file_menu, "Export as &JSON…", lambda: self.tasks.spawn(self.conversations.export_dialog("json")), "Ctrl+Shift+J",
            "Save this conversation as JSON (can be imported back)",
        )  # fmt: skip
        file_menu.addSeparator()
        self.quit_action = self._action(file_menu, "&Quit", self.request_quit, QKeySequence.StandardKey.Quit)

        chat_menu = menu.addMenu("&Chat")
        self.stop_action = self._action(chat_menu, "&Stop reply", self.chat.stop, "Esc", "Stop the reply, keeping its text")
        self.stop_action.setEnabled(False)  # only while a reply streams: otherwise Esc belongs to the focused widget
        self.chat.generating_changed.connect(self.stop_action.setEnabled)
        self.regenerate_action = self._action(
            chat_menu, "&Regenerate last reply", self.chat.regenerate_last, "Ctrl+R", "Generate the last reply again"
        )
        self.compare_action = self._action(chat_menu, "", self.composer.submit_compare, "Ctrl+Shift+Return")
        self._name_compare(compare_words(self.settings))  # (and as the settings change: compare_named)
        self.choice.compare_named.connect(self._name_compare)
        self.choice.compare_available.connect(self.compare_action.setEnabled)
        self.copy_action = self._action(chat_menu, "&Copy last reply", self.chat.copy_last_reply, "Ctrl+Shift+C")
        chat_menu.addSeparator()
        self.rename_action = self._action(chat_menu, "Re&name chat", self.conversation_list.rename_current, "F2")
        self.delete_action = self._action(
            chat_menu, "&Delete chat…", lambda: self.tasks.spawn(self.conversations.delete(self.chat_view.conversation_id)),
            QKeySequence.StandardKey.Delete,
        )  # fmt: skip
        self.delete_action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self.removeAction(self.delete_action)  # Del deletes a chat only in the conversation list
        self.delete_action.setProperty(SHORTCUT_WORDS, "delete chat (in the chat list)")
        self.conversation_list.list.addAction(self.delete_action)

        models_menu = menu.addMenu("&Models")
        self.choose_model_action = self._action(
            models_menu, "&Choose the model", self.model_picker.open_list, "Ctrl+L", "Open the model picker at the top"
        )
        self.models_action = self._action(
            models_menu, "&Manage models…", self.choice.show_models, "Ctrl+M", "Installed models: import, download, convert, remove",
        )  # fmt: skip
        self.refresh_models_action = self._action(
            models_menu, "&Refresh", self.choice.refresh_models, "F5", "Re-read the model store (models added from the command line)",
        )  # fmt: skip
        self.refresh_models_action.setProperty(SHORTCUT_WORDS, "refresh the list of models")  # ("refresh" alone in F1)

        server_menu = menu.addMenu("&Server")
        self.local_server_action = self._action(
            server_menu, "&Local server…", self.server_control.show_dialog,
            tip="Serve the loaded model to other programs (OpenAI API)",
        )  # fmt: skip
        self.remote_server_action = self._action(
            server_menu, "&Remote server…", lambda: self.tasks.spawn(self.choice.remote_dialog()),
            tip="Chat with a model on an OpenAI-compatible server (as the model picker's last entry)",
        )  # fmt: skip

        view_menu = menu.addMenu("&View")
        self.highlight_action = self._action(
            view_menu, "&Highlight draft tokens", self._highlight_toggled,
            "Ctrl+H", checkable=True,
        )  # fmt: skip
        self.highlight_action.setChecked(self.settings.highlight_draft)
        self.side_panel_action = self._action(
            view_menu, "&Settings and live graph", lambda shown: self.right_splitter.setVisible(shown), "Ctrl+,", checkable=True
        )
        self.side_panel_fold = SidePanelFold(self, self.right_splitter, self.side_panel_action)  # narrow windows
        self.search_action = self._action(view_menu, "&Find chat", self.conversations.focus_search, QKeySequence.StandardKey.Find)
        theme_menu = view_menu.addMenu("&Theme")
        group = QActionGroup(self)
        self.theme_actions = {}
        for choice, label in theme.THEME_LABELS.items():
            action = self._action(theme_menu, label, lambda _, c=choice: self.set_theme(c), checkable=True)
            action.setChecked(choice == self.settings.theme)
            group.addAction(action)
            self.theme_actions[choice] = action

        help_menu = menu.addMenu("&Help")
        self.shortcuts_action = self._action(
            help_menu, "&Keyboard shortcuts", lambda: self.tasks.spawn(show_shortcuts(self, self.actions() + [self.delete_action])),
            "F1",
        )  # fmt: skip
        self.about_action = self._action(help_menu, "&About SpecChat", lambda: self.tasks.spawn(show_about(self)))

    def _restore_ui_state(self) -> None:
        ui = self.store.ui_state
        self._restored_layout = False  # (whether the side panel's saved splits were restored)
        restored = restore_geometry(self, ui.get("window"))  # (else Qt's blob, saved by an earlier version)
        for key, widget in (("geometry", self), ("splitter", self.splitter), ("right_splitter", self.right_splitter)):
            value = ui.get(key)
            if isinstance(value, str) and not (key == "geometry" and restored):
                try:
                    data = QByteArray.fromBase64(value.encode("ascii"))
                    done = widget.restoreGeometry(data) if key == "geometry" else widget.restoreState(data)
                except (ValueError, TypeError):
                    done = False
                self._restored_layout |= key == "right_splitter" and done
        fit_to_screen(self)  # saved on a larger screen, or on one no longer attached

    def _ui_state(self) -> dict:
        return {
            "window": saved_geometry(self),
            "splitter": bytes(self.splitter.saveState().toBase64()).decode("ascii"),
            "right_splitter": bytes(self.right_splitter.saveState().toBase64()).decode("ascii"),
        }

    # --- wiring -----------------------------------------------------------------------------------

    def _connect(self) -> None:
        conversations, chat, choice, spawn = self.conversations, self.chat, self.choice, self.tasks.spawn
        listing = self.conversation_list
        listing.selected.connect(conversations.open)
        listing.new_requested.connect(conversations.new)
        listing.renamed.connect(conversations.rename)
        listing.delete_requested.connect(lambda cid: spawn(conversations.delete(cid)))
        listing.search_changed.connect(lambda _: conversations.refresh())
        conversations.shown.connect(choice.conversation_shown)
        view = self.chat_view
        view.edit_submitted.connect(chat.resend_edited)
        view.regenerate_requested.connect(chat.regenerate)
        view.version_chosen.connect(chat.choose_version)
        view.continue_requested.connect(chat.continue_reply)
        view.system_prompt_changed.connect(conversations.system_prompt_changed)
        view.json_output_changed.connect(conversations.json_output_changed)
        view.highlight_toggled.connect(self._highlight_toggled)
        self.composer.send_requested.connect(lambda text: chat.send(text))
        self.composer.compare_requested.connect(lambda text: chat.send(text, compare=True))
        self.composer.stop_requested.connect(chat.stop)
        pane = self.settings_pane
        pane.settings_changed.connect(choice.edited)
        pane.validity_changed.connect(lambda summary: self.composer.set_blocked(summary or None))
        self.model_picker.chosen.connect(choice.choose_target)
        self.model_picker.remote_chosen.connect(choice.choose_remote)
        self.model_picker.remote_requested.connect(lambda: spawn(choice.remote_dialog()))
        self.model_notice.dismissed.connect(choice.dismissed_notice)
        models = self.models
        models.state_changed.connect(choice.show_state)
        models.loaded.connect(choice.loaded)
        models.ready.connect(self.model_ready)
        models.failed.connect(self.model_failed)
        models.setting_refused.connect(choice.refused)
        models.fetch_progress.connect(choice.fetch_progress)
        models.fetch_finished.connect(choice.close_progress)
        models.models_installed.connect(choice.refresh_models)
        models.switch_cancelled.connect(choice.restore_models)

    def set_theme(self, choice: str) -> None:
        """Use the theme ``choice`` (``system``, ``light`` or ``dark``) from now on, and keep it in the settings."""
        self.choice.apply(replace(self.settings, theme=choice))
        self.theme_actions[choice].setChecked(True)
        self.apply_theme()

    def apply_theme(self) -> None:
        """Colour the window with the theme its settings choose (for ``system``, the desktop's scheme now)."""
        theme.apply(QApplication.instance(), theme.theme_for(self.settings.theme))
        self.chat_view.restyle()
        self.live_graph.restyle()

    def _desktop_scheme_changed(self, _scheme) -> None:
        if self.settings.theme == "system":
            self.apply_theme()

    def _unexpected_error(self, error: BaseException) -> None:
        if not self._shut_down:
            self.statusBar().showMessage(f"Unexpected error: {error}", 15000)

    def _highlight_toggled(self, checked: bool) -> None:
        self.chat_view.set_highlight(checked)
        self.highlight_action.setChecked(checked)
        self.settings_pane.set_highlight(checked)

    def start(self) -> None:
        """Show any startup notice and start preparing the model in the background."""
        notices, self._notices = self._notices, []
        for about, notice, name in notices:
            if notice:
                box = message_box(self, QMessageBox.Icon.Warning, f"SpecChat: {about}", notice, object_name=name)
                self.tasks.spawn(box)
        self.models.load()
        self.tasks.spawn(warm_up_in(self.worker.run))  # pygments' lexers, for code blocks, in the background
        self.choice.update_compare()
        if self.settings.remote_model:
            self.tasks.spawn(self.choice.detect_remote())

    async def wait_for_model(self) -> None:
        """Wait until the models the settings ask for are loaded.

        Raises:
            ValueError: they could not be loaded (the message says why).
        """
        await self.models.wait()

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
        # what is typed and not sent is kept with the window's state (a trial's Ctrl+Q lost it without a word): written
        # a second after typing stops and when another chat is shown (Conversations), and once more here
        self.conversations.keep_draft()
        self.hide()  # quitting looks instant even if the worker must finish loading a model first
        self.chat_view.flush_system_prompt()
        self.replies.close()
        self.models.close()
        self.local_server.close()
        try:
            self.store.save_ui_state(self.settings, ui_state)
        except OSError as error:
            logger.warning("could not save the settings: %s", error)
        self.choice.close_progress()
        self.tasks.cancel_all()
        if self.owns_worker:
            self.worker.shutdown(wait=True)

