"""The conversation shown in the middle of the window: its title, system prompt and messages.

A streaming reply is updated in place; the view follows it to the bottom unless the user scrolled up.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ..history_rows import Conversation, Message
from .elided_label import ElidedLabel
from .message_widget import MessageWidget

FOLLOW_MARGIN_PX = 48
POPULATE_SLICE_S = 0.004  # about one bubble per event-loop turn (creating one costs ~5 ms, laying it out ~8 ms)
RETIRE_PER_TURN = 2
PAGE_SIZE = 8  # messages shown when a conversation opens (more than fill the view); older ones come a page at a time
SYSTEM_PROMPT_DEBOUNCE_MS = 400
#: Characters of the chat title kept beside the header's controls; narrower, the controls go on a line of their own.
TITLE_MIN_CHARS = 24


class ChatView(QWidget):
    """Title bar, system prompt editor and the scrolling list of messages of one conversation.

    Signals:
        edit_submitted(message_id, text), regenerate_requested(message_id), version_chosen(message_id),
            continue_requested(message_id): from a message's actions.
        system_prompt_changed(conversation_id, text): the system prompt was edited (debounced).
        json_output_changed(conversation_id, on): the "JSON output" box was toggled (-1: no conversation yet).
        highlight_toggled(bool): the "Highlight draft tokens" box was toggled.
    """

    edit_submitted = Signal(int, str)
    regenerate_requested = Signal(int)
    version_chosen = Signal(int)
    continue_requested = Signal(int)
    system_prompt_changed = Signal(int, str)
    json_output_changed = Signal(int, bool)
    highlight_toggled = Signal(bool)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.conversation: Conversation | None = None
        self._widgets: dict[int, MessageWidget] = {}
        self._pending: list[Message] = []
        self._older: list[Message] = []
        self._population = 0
        self._anchor: tuple[MessageWidget, int] | None = None  # a bubble kept at its place on screen, and where
        #: After a version switch (show_version): the version shown, where its bubble goes on screen, and which of
        #: its switch's buttons takes the keyboard focus back (None: the focus was elsewhere), until it is added.
        self._switched: tuple[int, int, str | None] | None = None
        self._highlight = True
        self._busy = False
        self._follow = True

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)

        header = QFrame()
        header.setObjectName("chatHeader")
        header_layout = QVBoxLayout(header)
        header_layout.setContentsMargins(16, 8, 16, 8)
        self._title_row = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.title_label = ElidedLabel("New chat")
        self.title_label.setObjectName("chatTitle")
        self._title_row.addWidget(self.title_label, 1)
        top = QHBoxLayout()
        self.highlight_box = QCheckBox("Highlight draft tokens")
        self.highlight_box.setToolTip(
            "Colour the text that came from accepted draft tokens: where speculative decoding paid off"
        )
        self.highlight_box.setChecked(True)
        self.highlight_box.toggled.connect(self._on_highlight)
        top.addWidget(self.highlight_box)
        self.json_box = QCheckBox("JSON output")
        self.json_box.setToolTip(
            "Replies in this conversation are JSON objects: every token is constrained to valid JSON (structured "
            "output), in every decoding mode"
        )
        self.json_box.toggled.connect(self._on_json_output)
        top.addWidget(self.json_box)
        self.system_button = QToolButton()
        self.system_button.setObjectName("systemPromptButton")
        self.system_button.setText("System prompt")
        self.system_button.setCheckable(True)
        self.system_button.setToolTip("Show or edit this conversation's system prompt (applies to the next reply)")
        self.system_button.toggled.connect(self._toggle_system_prompt)
        top.addWidget(self.system_button)
        top.addStretch()  # (on a line of their own, the controls stay at the left)
        self._title_row.addLayout(top)
        header_layout.addLayout(self._title_row)
        self.system_edit = QPlainTextEdit()
        self.system_edit.setPlaceholderText(
            "No system prompt. Type instructions for the assistant in this conversation (applies to the next reply)."
        )
        self.system_edit.setMaximumHeight(90)
        self.system_edit.setAccessibleName("System prompt")
        self.system_edit.setTabChangesFocus(True)
        self.system_edit.setVisible(False)
        self.system_edit.textChanged.connect(self._system_prompt_edited)
        header_layout.addWidget(self.system_edit)
        layout.addWidget(header)

        self.scroll_area = QScrollArea()
        self.scroll_area.setObjectName("messagesArea")  # (a Tab stop: the arrow keys scroll it; a ring shows it)
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setAccessibleName("Messages")
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.empty_label = QLabel(
            "<h3>Start a conversation</h3><p>Type a message below. <b>Enter</b> sends, <b>Shift+Enter</b> adds a "
            "line, <b>Esc</b> stops a reply, <b>Ctrl+N</b> starts a new chat.</p><p><b>Compare</b> runs your message "
            "with plain decoding, then with Auto (or the speculative decoding you chose), and shows both replies side "
            "by side with their speeds.</p>"
        )
        self.empty_label.setObjectName("emptyLabel")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self.earlier_button = QPushButton("Show earlier messages")
        self.earlier_button.setObjectName("earlierButton")
        self.earlier_button.setToolTip("Older messages are added as you scroll up, or with this button")
        self.earlier_button.clicked.connect(self.show_earlier)
        self.earlier_button.setVisible(False)
        # the scroll area's widget stays for the view's life: a conversation's bubbles live in a page of their
        # own inside it, and opening another conversation swaps pages (re-parenting a page, as
        # QScrollArea.takeWidget does, re-polishes every bubble: 12-20 ms for two pages of bubbles)
        self._holder = QWidget()
        self._holder.setObjectName("chatContent")
        holder_layout = QVBoxLayout(self._holder)
        holder_layout.setContentsMargins(16, 12, 16, 12)
        holder_layout.setSpacing(10)
        holder_layout.addWidget(self.empty_label)
        holder_layout.addWidget(self.earlier_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self._page, self._list = self._new_page()
        holder_layout.addWidget(self._page, 1)
        self.scroll_area.setWidget(self._holder)
        layout.addWidget(self.scroll_area, 1)

        bar = self.scroll_area.verticalScrollBar()
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range_changed)
        bar.actionTriggered.connect(self._user_scrolled)

        self._retired: list[MessageWidget] = []
        self._retire_timer = QTimer(self)
        self._retire_timer.setInterval(0)
        self._retire_timer.timeout.connect(self._destroy_retired)

        self._system_timer = QTimer(self)
        self._system_timer.setSingleShot(True)
        self._system_timer.timeout.connect(self._emit_system_prompt)
        self._loading_system = False

    # --- conversation -----------------------------------------------------------------------------

    @property
    def conversation_id(self) -> int | None:
        """Id of the conversation shown (None for a new, unsaved chat)."""
        return self.conversation.id if self.conversation else None

    def show_conversation(self, conversation: Conversation | None, messages: list[Message]) -> None:
        """Replace the view's content by a conversation (None: an empty new chat)."""
        self.flush_system_prompt()
        self.conversation = conversation
        self.title_label.setText(conversation.title if conversation else "New chat")
        self._loading_system = True
        self.system_edit.setPlainText(conversation.system_prompt if conversation else "")
        self._loading_system = False
        self.json_box.blockSignals(True)
        self.json_box.setChecked(bool(conversation and conversation.json_output))
        self.json_box.blockSignals(False)
        if conversation and conversation.system_prompt and not self.system_button.isChecked():
            self.system_button.setText("System prompt ✓")
        else:
            self.system_button.setText("System prompt")
        self._older = list(messages[:-PAGE_SIZE]) if len(messages) > PAGE_SIZE else []
        self._pending = list(messages[-PAGE_SIZE:])
        self._population += 1
        self._follow = True
        self._anchor = None
        self._switched = None
        self._widgets.clear()
        self._retire_content()
        self.empty_label.setVisible(not messages)
        self._update_earlier_button()
        population = self._population
        QTimer.singleShot(0, self, lambda: self._populate(population))  # the swap above was this turn's work

    def show_version(self, conversation: Conversation, messages: list[Message], shown_id: int) -> None:
        """Show the conversation again after a version switch (``messages``: its chosen branch, which holds
        ``shown_id``, the version now chosen): that version's bubble keeps the place on screen of the bubble whose
        switch was pressed, and a switch button that had the keyboard focus has it again, on the new bubble (the
        same button, or the other one where it is now disabled at the first or the last version).

        A newcomer pressed › with the keyboard and the focus jumped to "New chat" at the top of the window (the
        pressed button was destroyed with its bubble); and the view jumped to the bottom of the chat, away from the
        message switched."""
        switched = next((w for w in self.message_widgets() if shown_id in w.message.versions), None)
        switch = None
        offset = 0
        if switched is not None:
            from PySide6.QtWidgets import QApplication

            focused = QApplication.focusWidget()
            if switched.version_switch is not None and focused is not None:
                switch = {switched.previous_version: "previous", switched.next_version: "next"}.get(focused)
            offset = self._content_y(switched) - self.scroll_area.verticalScrollBar().value()
        self.show_conversation(conversation, messages)
        older = [message.id for message in self._older]
        if shown_id in older:  # (a message of an earlier page: shown with a page before it and all after it)
            cut = max(0, older.index(shown_id) - PAGE_SIZE)
            self._pending, self._older = self._older[cut:] + self._pending, self._older[:cut]
            self._update_earlier_button()
        if switched is not None and any(message.id == shown_id for message in self._pending):
            self._switched = (shown_id, offset, switch)
            self._follow = False

    @property
    def fully_loaded(self) -> bool:
        """False while bubbles of the page being opened are still being added (see ``_populate``)."""
        return not self._pending

    @property
    def earlier_count(self) -> int:
        """Older messages of the conversation not shown yet (see :meth:`show_earlier`)."""
        return len(self._older)

    def show_earlier(self) -> None:
        """Add the previous page of older messages above the ones shown, keeping what is on screen in place."""
        if self._pending or not self._older:
            return
        page, self._older = self._older[-PAGE_SIZE:], self._older[:-PAGE_SIZE]
        bar = self.scroll_area.verticalScrollBar()
        self._follow = False
        top = next((w for w in self.message_widgets() if self._content_y(w) + w.height() > bar.value()), None)
        self._anchor = (top, self._content_y(top) - bar.value()) if top is not None else None
        self._pending = page
        self._population += 1
        self._update_earlier_button()
        self._populate(self._population)

    def _update_earlier_button(self) -> None:
        count = len(self._older)
        self.earlier_button.setText(f"Show {count} earlier message{'s' if count != 1 else ''}")
        self.earlier_button.setVisible(count > 0)

    def _populate(self, population: int) -> None:
        """Add pending bubbles newest first, for at most POPULATE_SLICE_S per event-loop turn, so that opening a
        long conversation never freezes the window; the rest follows on the next turns."""
        if population != self._population:
            return  # another conversation was opened meanwhile
        start = time.perf_counter()
        while self._pending and (time.perf_counter() - start < POPULATE_SLICE_S):
            widget = self._add_widget(self._pending.pop(), top=True)
            if self._switched is not None and widget.message.id == self._switched[0]:
                self._anchor = (widget, self._switched[1])  # (show_version: kept where the switched bubble was)
        self._refresh_actions()
        if self._switched is not None and self._anchor is not None:
            self._focus_switch(self._anchor[0], self._switched[2])
            self._switched = None
        if self._pending:
            QTimer.singleShot(0, self, lambda: self._populate(population))  # (none once the view is deleted)
        elif self._follow and self._anchor is None:
            self.scroll_to_bottom()

    @staticmethod
    def _focus_switch(widget: MessageWidget, button: str | None) -> None:
        """Give the keyboard focus to ``widget``'s ``"previous"`` or ``"next"`` version button, the other one where
        that one is disabled (None: the focus stays where it is)."""
        if button is None or widget.version_switch is None:
            return
        buttons = [widget.previous_version, widget.next_version]
        for candidate in buttons if button == "previous" else buttons[::-1]:
            if candidate.isEnabled():
                candidate.setFocus(Qt.FocusReason.TabFocusReason)
                return

    def _new_page(self) -> tuple[QWidget, QVBoxLayout]:
        """A fresh page for the bubbles of one conversation, to sit in the scroll area's widget."""
        page = QWidget(self._holder)
        page.setObjectName("chatPage")
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(10)
        layout.addStretch(1)
        return page, layout

    def _retire_content(self) -> None:
        """Swap in an empty page; the old one is hidden at once (it stays where it is, so nothing is re-parented)
        and its bubbles are destroyed a few per event-loop turn (destroying a conversation's bubbles at once would
        stall the window as much as creating them)."""
        old = self._page
        old.hide()
        holder_layout = self._holder.layout()
        holder_layout.removeWidget(old)
        self._page, self._list = self._new_page()
        holder_layout.addWidget(self._page, 1)
        bubbles = old.findChildren(MessageWidget, options=Qt.FindChildOption.FindDirectChildrenOnly)
        self._retired.extend(bubbles)
        self._retired.append(old)  # destroyed last, once its bubbles are gone
        if not self._retire_timer.isActive():
            self._retire_timer.start()

    def _retire(self, widgets: list[MessageWidget]) -> None:
        """Take bubbles out of the view now and destroy them a few per event-loop turn (destroying a long
        conversation's bubbles at once would stall the window as much as creating them)."""
        for widget in widgets:
            self._list.removeWidget(widget)
            widget.setParent(None)  # hidden at once, no longer laid out
            self._retired.append(widget)
        if self._retired and not self._retire_timer.isActive():
            self._retire_timer.start()

    def _destroy_retired(self) -> None:
        for widget in self._retired[:RETIRE_PER_TURN]:
            widget.deleteLater()
        del self._retired[:RETIRE_PER_TURN]
        if not self._retired:
            self._retire_timer.stop()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Keep ``TITLE_MIN_CHARS`` of the title readable: the header's controls go under it when the row is narrower."""
        super().resizeEvent(event)
        controls = (self.highlight_box, self.json_box, self.system_button)
        spacing = max(self._title_row.spacing(), 0)
        controls_px = sum(w.sizeHint().width() + spacing for w in controls if not w.isHidden())
        margins = self.title_label.parentWidget().layout().contentsMargins()  # the header's
        title_px = self.width() - margins.left() - margins.right() - controls_px
        wide = title_px >= self.title_label.fontMetrics().averageCharWidth() * TITLE_MIN_CHARS
        direction = QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom
        if self._title_row.direction() != direction:
            self._title_row.setDirection(direction)

    def set_title(self, title: str) -> None:
        """Show a new title for the current conversation."""
        if self.conversation:
            self.conversation.title = title
        self.title_label.setText(title)

    def system_prompt(self) -> str:
        """The system prompt in the editor."""
        return self.system_edit.toPlainText()

    def json_output(self) -> bool:
        """Whether the "JSON output" box is checked (for a conversation not created yet, too)."""
        return self.json_box.isChecked()

    def _on_json_output(self, checked: bool) -> None:
        if self.conversation:
            self.conversation.json_output = checked
        self.json_output_changed.emit(self.conversation_id or -1, checked)

    # --- messages ---------------------------------------------------------------------------------

    def widget(self, message_id: int) -> MessageWidget | None:
        """The bubble of a message shown, if any."""
        return self._widgets.get(message_id)

    def message_widgets(self) -> list[MessageWidget]:
        """The bubbles in display order.

        Ordered by their index in the layout, never read through ``itemAt``: a Python wrapper of a layout item that
        Qt later deletes stays in PySide's map of addresses, and a widget created at the same address came back as
        that QWidgetItem (a message's ``viewport()`` had no ``width``, once in a full test run)."""
        shown = [(self._list.indexOf(widget), widget) for widget in self._widgets.values()]
        return [widget for index, widget in sorted(shown, key=lambda pair: pair[0]) if index >= 0]

    def follow_bottom(self) -> None:
        """Follow the bottom of the chat from now on (a reply starts or is continued): a place held on screen (a
        version switch's, a page shown above) lets go (a newcomer's next message and its reply, sent after a
        switch, streamed below the view)."""
        self._anchor = None
        self._switched = None
        self._follow = True

    def append_message(self, message: Message, live: bool = False) -> MessageWidget:
        """Add a message at the bottom (one just sent, or a reply starting), following the bottom again
        (:meth:`follow_bottom`)."""
        self.follow_bottom()
        widget = self._add_widget(message)
        if live:
            widget.set_message(message, live=True)
        self._refresh_actions()
        return widget

    def update_message(self, message: Message, live: bool = False) -> None:
        """Show new content of a message (a streaming reply passes ``live=True``)."""
        widget = self._widgets.get(message.id)
        if widget is None:
            return
        widget.set_message(message, live=live)
        if not live:
            self._refresh_actions()

    def remove_message(self, message_id: int) -> None:
        """Remove a message's bubble."""
        widget = self._widgets.pop(message_id, None)
        if widget is not None:
            self._retire([widget])
        self._refresh_actions()

    def set_busy(self, busy: bool) -> None:
        """While a reply streams, Edit and Regenerate are disabled."""
        self._busy = busy
        self._refresh_actions()

    def set_highlight(self, highlight: bool) -> None:
        """Turn the highlighting of accepted draft tokens on or off for every message."""
        self._highlight = highlight
        if self.highlight_box.isChecked() != highlight:
            self.highlight_box.blockSignals(True)
            self.highlight_box.setChecked(highlight)
            self.highlight_box.blockSignals(False)
        for widget in self._widgets.values():
            widget.set_highlight(highlight)

    def restyle(self) -> None:
        """Render the messages again in the theme applied now (code and draft colours are drawn by them)."""
        for widget in self._widgets.values():
            widget.restyle()

    def scroll_to_bottom(self) -> None:
        """Scroll to the newest message."""
        bar = self.scroll_area.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _add_widget(self, message: Message, top: bool = False) -> MessageWidget:
        widget = MessageWidget(message, self._highlight)
        widget.edit_submitted.connect(self.edit_submitted)
        widget.regenerate_requested.connect(self.regenerate_requested)
        widget.version_chosen.connect(self.version_chosen)
        widget.continue_requested.connect(self.continue_requested)
        self._widgets[message.id] = widget
        self._list.insertWidget(0 if top else self._list.count() - 1, widget)  # the page ends with a stretch
        self.empty_label.setVisible(False)
        return widget

    def _refresh_actions(self) -> None:
        widgets = self.message_widgets()
        for index, widget in enumerate(widgets):
            widget.set_actions(self._busy, index == len(widgets) - 1)
        self.empty_label.setVisible(not widgets)

    # --- scrolling --------------------------------------------------------------------------------

    def _content_y(self, widget: MessageWidget) -> int:
        """A bubble's top in the scroll area's widget (pixels; the scroll bar's value is one of these)."""
        return self._page.y() + widget.y()

    def _on_scrolled(self, value: int) -> None:
        bar = self.scroll_area.verticalScrollBar()
        if self._anchor is None:
            self._follow = value >= bar.maximum() - FOLLOW_MARGIN_PX
        if value == 0 and bar.maximum() > 0 and self._older and not self._pending:
            self.show_earlier()  # scrolled to the top: bring the previous page

    def _user_scrolled(self, _action: int) -> None:
        """The user moved the scroll bar (wheel, drag, keys): stop holding the view in place."""
        self._anchor = None

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        bar = self.scroll_area.verticalScrollBar()
        if self._anchor is not None:
            widget, offset = self._anchor
            bar.setValue(max(0, self._content_y(widget) - offset))  # older bubbles were added above: keep it in place
        elif self._follow:
            bar.setValue(maximum)

    # --- header -----------------------------------------------------------------------------------

    def _on_highlight(self, checked: bool) -> None:
        self.set_highlight(checked)
        self.highlight_toggled.emit(checked)

    def _toggle_system_prompt(self, checked: bool) -> None:
        self.system_edit.setVisible(checked)
        if checked:
            self.system_button.setText("System prompt")
            self.system_edit.setFocus()
        else:
            self.flush_system_prompt()
            self.system_button.setText("System prompt ✓" if self.system_prompt().strip() else "System prompt")

    def _system_prompt_edited(self) -> None:
        if not self._loading_system:
            self._system_timer.start(SYSTEM_PROMPT_DEBOUNCE_MS)

    def flush_system_prompt(self) -> None:
        """Emit ``system_prompt_changed`` now for an edit still waiting for its debounce timer (before quitting)."""
        if self._system_timer.isActive():
            self._system_timer.stop()
            self._emit_system_prompt()

    def _emit_system_prompt(self) -> None:
        if self.conversation is not None:
            self.conversation.system_prompt = self.system_prompt()
        self.system_prompt_changed.emit(self.conversation_id or -1, self.system_prompt())
