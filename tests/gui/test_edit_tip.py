"""Edit's tooltip says what happens to the later messages: they stay, as the earlier version."""

from __future__ import annotations

from app.gui.history_db import Message
from app.gui.widgets.message_widget import MessageWidget


def test_edit_says_the_later_messages_stay_as_the_earlier_version(qtbot):
    """Newcomer trial (a chat rolled at n_ctx 256): Edit on its first message said "later messages are replaced",
    and a user who wanted to keep the long conversation would not try it; Save & resend keeps them, as version 1/2
    of that message, which ‹ › shows again."""
    widget = MessageWidget(Message(id=1, conversation_id=1, position=0, role="user", content="Hi", created_at=0.0))
    qtbot.addWidget(widget)
    tip = widget.edit_button.toolTip()
    assert tip == "Edit this message and resend it (the later messages stay in its earlier version: ‹ › switches)"
    assert "replaced" not in tip
