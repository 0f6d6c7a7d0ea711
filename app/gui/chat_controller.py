"""What the user does in the chat, on screen: send, compare, stop, regenerate, edit and resend, copy; and how a reply
streams into the view, the composer and the live graph.

Rules:
- :class:`~app.gui.reply_controller.ReplyController` owns the data (history rows, the worker's stream); this
  controller turns the user's requests into its calls and its signals into what the widgets show.
- Nothing is sent while a reply streams, with invalid settings, or with an empty message: the reason is shown in
  the composer, and it is withdrawn as soon as it is no longer true (a fixed setting, a reply that ended).
- Every action that starts a reply leaves the focus in the message box.
- A history write the database refuses is said in place (``Conversations.write_failed``); unsaved text stays where
  it was typed, and Send, Stop and the messages' actions are reset in ``finally``.
"""

from __future__ import annotations

import sqlite3

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QStatusBar, QWidget

from ..backends.remote_errors import SAYS_REPLY_STOPPED
from .conversations import Conversations
from .draft_speed import StepRates
from .history_db import HistoryDB
from .history_rows import Message
from .model_choice import ModelChoice
from .reply_controller import ReplyController
from .widgets.chat_view import ChatView
from .widgets.composer import Composer
from .widgets.live_graph import FAILED_EARLY, LiveGraph
from .widgets.settings_pane import SettingsPane, blocked_summary

#: The status bar's line from Stop until the reply ends.
STOPPING = "Stopping…"


def stopped_unmeasured(final: Message) -> bool:
    """Whether a reply was stopped before it measured anything: no token of its own, and for a comparison (whose
    text is the second run's) no token of either run. A newcomer trial stopped a Compare during its plain run (84
    tokens) and the graph dropped that run's curve for "stopped before its first token"."""
    if final.state != "stopped":
        return False
    compare = (final.stats or {}).get("compare")
    if not isinstance(compare, dict):
        return not final.content
    runs = [compare.get("ar"), compare.get("spec")]
    return not any(isinstance(run, dict) and run.get("new_tokens") for run in runs)


class ChatController(QObject):
    """The chat's actions and the streaming reply's display (see the module doc).

    Args:
        db: the chat history; replies: the reply controller (the data: history rows, the worker's stream).
        conversations: the conversations (the list and the chat shown follow a reply; history errors are said
            there); choice: the model choice (a reply's measured speed, the notices).
        settings_pane, chat_view, composer, live_graph: the widgets it drives.
        status_bar: the window's status bar (Stopping…, Copied, Saved).
        parent: the Qt parent.

    Signals:
        generating_changed(bool): a reply started streaming (True) or no reply streams any more (False).
        generation_started(conversation_id), reply_updated(text so far), generation_finished(Message or None).
    """

    generating_changed = Signal(bool)
    generation_started = Signal(int)
    reply_updated = Signal(str)
    generation_finished = Signal(object)

    def __init__(
        self,
        db: HistoryDB,
        replies: ReplyController,
        conversations: Conversations,
        choice: ModelChoice,
        settings_pane: SettingsPane,
        chat_view: ChatView,
        composer: Composer,
        live_graph: LiveGraph,
        status_bar: QStatusBar,
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.db, self._replies, self._conversations, self._choice = db, replies, conversations, choice
        self._pane, self._view, self._composer, self._graph = settings_pane, chat_view, composer, live_graph
        self._status = status_bar
        self.step_rates = StepRates()
        replies.started.connect(self._started)
        replies.updated.connect(self._updated)
        replies.run_started.connect(self._run_started)
        replies.events.connect(live_graph.add_events)
        replies.events.connect(lambda events: self.step_rates.add(events))
        replies.run_finished.connect(live_graph.finish_run)
        replies.failed.connect(self._failed)
        replies.finished.connect(self._finished)
        replies.save_failed.connect(conversations.history_error)
        replies.saved_again.connect(self._saved_again)

    # --- requests ---------------------------------------------------------------------------------

    def send(self, text: str, compare: bool = False) -> int | None:
        """Save a user message and start the reply (or a comparison); returns the conversation id, or None when
        nothing was sent (the reason is shown in the composer)."""
        replies, view, composer, conversations = self._replies, self._view, self._composer, self._conversations
        errors = self._pane.errors(compare=compare)
        if errors:
            composer.show_blocked(blocked_summary(errors))
            return None
        refusal = replies.refusal(text)
        if refusal:
            composer.show_error(refusal)
            return None
        replies.retry_unsaved()
        message = None
        try:
            conversation_id = view.conversation_id
            if conversation_id is None or self.db.conversation(conversation_id) is None:
                conversation_id = replies.new_conversation(text, view.system_prompt(), view.json_output())
                self._pane.sampling.adopt_conversation(conversation_id)
                view.show_conversation(self.db.conversation(conversation_id), [])
                conversations.follow()
            message = replies.unanswered(conversation_id, text)  # a failed send, sent again: a retry
            if message is None:
                message = replies.add_user_message(conversation_id, text)  # saved before generation starts
                view.append_message(message)
            composer.clear()
            composer.clear_error()
            conversations.refresh()
            replies.start_reply(conversation_id, compare)
        except sqlite3.Error as error:
            if message is None:
                conversations.write_failed("your message (it is still in the box below: send it again)", error)
            else:
                conversations.write_failed("the reply (your message was saved: Edit it and Resend to try again)", error)
            return None
        finally:
            self._reset()
        return conversation_id

    def regenerate(self, message_id: int) -> None:
        """Generate a new version of a reply (the last one); the earlier one stays, a version away."""
        try:
            if self._replies.regenerate(message_id) is not None:
                self._view.remove_message(message_id)  # (the new version streams below it)
        except sqlite3.Error as error:
            self._conversations.write_failed("the new reply (press Regenerate to try again)", error)
        finally:
            self._reset()

    def continue_reply(self, message_id: int) -> None:
        """Write more of a reply that stopped at its length limit, was interrupted or was stopped
        (``reply_format.can_continue``; the reason is said when it cannot be)."""
        try:
            refusal = self._replies.continue_reply(message_id)
        except sqlite3.Error as error:
            self._conversations.write_failed("the reply (press Continue to try again)", error)
            refusal = None
        finally:
            self._reset()
        if refusal:
            self._composer.show_error(refusal)

    def choose_version(self, message_id: int) -> None:
        """Show this version of a message (and its latest continuation); a hint about the box ("Type a message
        first.") goes with the user's turn to something else."""
        self._composer.withdraw_hint()
        try:
            if self._replies.choose_version(message_id) is not None:
                self._conversations.reload(version=message_id)
        except sqlite3.Error as error:
            self._conversations.write_failed("the version chosen (the one shown stays)", error)

    def regenerate_last(self) -> None:
        """Regenerate the last reply of the conversation shown."""
        widgets = self._view.message_widgets()
        if widgets and widgets[-1].message.role == "assistant":
            self.regenerate(widgets[-1].message.id)

    def resend_edited(self, message_id: int, text: str) -> None:
        """Replace a user message's text, drop the messages after it, and generate a new reply."""
        try:
            conversation_id = self._replies.rewrite(message_id, text)
            if conversation_id is None:
                return
            self._conversations.open(conversation_id)
            self._conversations.reload()
            self._replies.start_reply(conversation_id)
        except sqlite3.Error as error:
            self._conversations.write_failed(
                "the edited message (the conversation is as it was; copy your text before leaving)", error
            )
            widget = self._view.widget(message_id)
            if widget is not None:  # the edited text goes back into its editor
                widget.start_editing()
                widget.editor.setPlainText(text)
        finally:
            self._reset()

    def copy_last_reply(self) -> None:
        """Copy the last reply of the conversation shown to the clipboard."""
        for widget in reversed(self._view.message_widgets()):
            if widget.message.role == "assistant":
                widget.copy_text()
                self._status.showMessage("Reply copied to the clipboard", 3000)
                return

    def stop(self) -> None:
        """Stop the reply being generated (its text so far is kept)."""
        if self._replies.stop():
            self._status.showMessage(STOPPING)  # until _finished clears it, however long that takes

    # --- the reply on screen ----------------------------------------------------------------------

    def _reset(self) -> None:
        """Send, Stop and the messages' actions as they are when no reply streams (after a failed start)."""
        if self._replies.active is None:
            self._set_generating(False)

    def _set_generating(self, generating: bool, conversation_id: int | None = None) -> None:
        conversation = self.db.conversation(conversation_id) if conversation_id is not None else None
        self._composer.set_generating(generating, conversation.title if conversation else "")
        self.generating_changed.emit(generating)
        self._view.set_busy(generating)

    def _started(self, reply: Message) -> None:
        view = self._view
        if view.widget(reply.id) is not None:  # a reply continued in place
            view.follow_bottom()
            view.update_message(reply, live=True)
        elif view.conversation_id == reply.conversation_id:
            view.append_message(reply, live=True)
        self._set_generating(True, reply.conversation_id)
        # the button that started it (Save & resend, Continue...) may be gone: Enter must not reach "+ New chat"
        self._composer.edit.setFocus(Qt.FocusReason.OtherFocusReason)
        self.generation_started.emit(reply.conversation_id)

    def _run_started(self, mode: str, keep_previous: bool) -> None:
        active = self._replies.active
        self._graph.start_run(
            mode,
            keep_previous=keep_previous,
            conversation_id=active.conversation_id if active else None,
            reply_id=active.recorder.message.id if active else None,
        )
        self.step_rates = StepRates()

    def _updated(self, reply: Message, text: str) -> None:
        if self._view.conversation_id == reply.conversation_id:
            self._view.update_message(reply, live=True)
        self.reply_updated.emit(text)

    def _failed(self, conversation_id: int, message_id: int, error: str, setting: str, server_stopped: bool) -> None:
        """A reply that failed before its first token: its empty bubble goes, and its run in the graph (a trial read
        "stopped before its first token" and "One token" of a server not reached); the message it answered stays saved
        and goes back where Send retries it: into the box when its chat is shown and the box is empty, else as that
        chat's unsent message (unless one was typed there), the status bar naming the chat. A remote server that
        stopped (``server_stopped``) answers Send once it runs again, which the advice says."""
        self._graph.stopped_early(conversation_id, FAILED_EARLY)
        chat_view, composer = self._view, self._composer
        chat_view.remove_message(message_id)
        try:
            messages = self.db.messages(conversation_id)
            conversation = self.db.conversation(conversation_id)
        except sqlite3.Error:  # (the history said so when it failed; the box stays as it is)
            messages, conversation = [], None
        message = messages[-1].content if messages and messages[-1].role == "user" else None
        title = conversation.title if conversation is not None else "a chat"
        if setting:  # flagged at its field, naming the chat (it stays when another is shown), and said as there:
            # its fields by their labels, ranges in words
            self._pane.flag(setting, error, blocking=False, chat=conversation.title if conversation else "")
            error = self._pane.in_words(setting, error)
        when = "once the server runs again" if server_stopped else "to try again"
        if chat_view.conversation_id == conversation_id:
            retry = ""
            if message is not None and not composer.text():
                composer.set_text(message)
                retry = f" (your message is kept: press Send {when})"
            composer.show_error(f"Could not generate a reply: {error}{retry}")
            return
        retry = ""
        if message is not None and self._conversations.put_back(conversation_id, message):
            retry = f" (your message is back in its box: open it and press Send {when})"
        self._status.showMessage(f"Could not generate the reply in “{title}”: {error}{retry}", 15000)

    def _finished(self, final: Message | None) -> None:
        view = self._view
        if final is not None:
            if final.state == "error" or final.stats.get("error"):  # (a remote reply cut mid-way is kept, stopped)
                error = final.stats.get("error")
                self._composer.show_error(error if error in SAYS_REPLY_STOPPED else
                                          f"The reply stopped with an error: {error}")
            if view.conversation_id == final.conversation_id:
                view.update_message(final)
                widget = view.widget(final.id)
                if widget is not None:
                    widget.flush()
        if final is not None and stopped_unmeasured(final):  # nothing measured: no old numbers
            self._graph.stopped_early(final.conversation_id)
        self._set_generating(False)
        if self._status.currentMessage() == STOPPING:  # the reply has ended: it is no longer stopping
            self._status.clearMessage()
        self._conversations.refresh()
        if final is not None and final.state == "complete":
            self._choice.reply_measured(final.conversation_id, final.stats, self.step_rates)
        else:
            self._choice.refresh_notices()
        self.generation_finished.emit(final)

    def _saved_again(self) -> None:
        composer = self._composer
        if composer.error_text.startswith("The reply could not be saved"):
            composer.clear_error()
        self._status.showMessage("The reply was saved to the history", 5000)
