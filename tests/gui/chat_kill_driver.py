"""A scripted chat on a history, written the way the window writes it, for test_history_kill_storm.py to SIGKILL.

It opens the history with ``open_history`` (as the app starts), then loops: a user message (``add_message``,
committed before its reply starts), an empty streaming reply row, a :class:`ReplyRecorder` fed a word every
10 ms (saving at least every half second, as in the window), and ``finish("complete")``. Each reply's text is
``reply_text(message_id)`` cut where it stopped, so a saved text can be checked against what was shown.

Prints ``<time.monotonic()> SHOWN <message id> <characters>`` each time text is shown (a user message once it is
saved, a reply after each word), ``READY`` once the history is open, and ``NOTICE <text>`` if opening it needed a
recovery (which the test treats as a failure).

Usage: python chat_kill_driver.py HISTORY
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

WORDS_PER_REPLY = 120
WORD_INTERVAL_S = 0.01


def user_text(turn: int) -> str:
    """The text of the user message of a turn."""
    return f"question {turn}: tell me about the number {turn}"


def reply_text(message_id: int) -> str:
    """The full text of the reply in row ``message_id`` (what the scripted model would say)."""
    return "".join(f"word{message_id}-{index} " for index in range(WORDS_PER_REPLY))


def main() -> int:
    from app.gui.history_recovery import open_history
    from app.gui.reply_recorder import ReplyRecorder
    from inference.events import TextDelta

    db, notice = open_history(Path(sys.argv[1]))
    if notice:
        print("NOTICE", notice.replace("\n", " "), flush=True)
    print("READY", flush=True)

    def shown(message_id: int, length: int) -> None:
        print(f"{time.monotonic():.4f} SHOWN {message_id} {length}", flush=True)

    turn = 0
    while True:
        conversation = db.create_conversation(f"kill storm {turn}")
        for _ in range(3):
            text = user_text(turn)
            shown(db.add_message(conversation, "user", text), len(text))
            reply_id = db.add_message(conversation, "assistant", "", state="streaming")
            recorder = ReplyRecorder(db, db.message(reply_id))
            recorder.begin_phase("ar")
            words = reply_text(reply_id).split(" ")[:-1]
            for index, word in enumerate(words):
                recorder.add([TextDelta(text=word + " ", token_id=index, from_draft=index % 3 == 0)])
                shown(reply_id, len(recorder.text))
                time.sleep(WORD_INTERVAL_S)
            recorder.finish("complete")
            turn += 1


if __name__ == "__main__":
    sys.exit(main())
