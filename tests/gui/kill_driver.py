"""Run the real application window in this process, send one long message, and report the reply as it grows.

Used by test_kill_restart.py, which kills this process mid-reply. Prints ``READY`` once the model is loaded,
then ``<time.monotonic()> <characters of the reply so far>`` after each streamed batch, ``SAVING <characters>``
just before each write of the reply to the database (before, so that a kill cannot fall between the write and its
report), and ``FINISHED`` if the reply ends before the kill.

Usage: python kill_driver.py HISTORY SETTINGS PROMPT
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import qasync

    from app.gui.application import create_application, create_main_window
    from app.gui.gc_policy import collect_on_gui_thread
    from app.gui.reply_recorder import ReplyRecorder

    save = ReplyRecorder.save

    def announced_save(recorder: ReplyRecorder) -> bool:
        print(f"SAVING {len(recorder.text)}", flush=True)
        return save(recorder)

    ReplyRecorder.save = announced_save

    history, settings, prompt = sys.argv[1], sys.argv[2], sys.argv[3]
    app = create_application()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    garbage_collector = collect_on_gui_thread()  # noqa: F841 - as gui.run() does; alive until the process is killed
    window = create_main_window(history, settings)
    window.show()

    def report(text: str) -> None:
        print(f"{time.monotonic():.4f} {len(text)}", flush=True)

    window.reply_updated.connect(report)
    window.generation_finished.connect(lambda message: print("FINISHED", flush=True))

    async def drive() -> None:
        window.start()
        await window.wait_for_model()
        print("READY", flush=True)
        window.composer.set_text(prompt)
        window.composer.submit()

    loop.create_task(drive())
    with loop:
        loop.run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
