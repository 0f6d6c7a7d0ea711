"""Run one responsiveness scenario on the real application in this (fresh) process and print the measurements.

Used by test_responsiveness.py: measuring in a process of its own keeps earlier tests' windows and objects out
of the numbers. Prints one line ``RESULT <json>``.

Usage: python stall_driver.py SCENARIO WORKDIR
    streaming          a reply streams while the user types, scrolls, resizes, switches conversations, stops
    blocked            a reply streams and the GUI thread is blocked for 100 ms once (the probe's control)
    long_conversation  open a 120-message conversation and page back through all of it
    model_load         start with nothing loaded; the model loads (and warms up) in the background
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

#: Engine calls that hold the GIL for 50-500 ms (measured): while one runs, no Python code can run in the GUI
#: thread, whatever the GUI does. The app makes them before its event loop starts, never during a model load.
GIL_HOLDING_ENGINE_CALLS = (
    ("openvino_genai", "Tokenizer"),
    ("openvino", "Model.validate_nodes_and_infer_types"),
    ("inference.tokenizer_cache", "vocabulary_fingerprint"),
)
#: The block the ``blocked`` scenario puts on the GUI thread (seconds).
BLOCK_S = 0.1


def long_conversation(db, title: str, messages: int) -> int:
    """Add a conversation of ``messages`` alternating questions and code-bearing answers."""
    conversation = db.create_conversation(title)
    for i in range(messages):
        if i % 2 == 0:
            db.add_message(conversation, "user", f"Question {i}: how do I sort a list?")
        else:
            text = f"Answer {i}: use `sorted()`.\n\n```python\nitems = sorted(items, key=len)\n```\n\n" + "More words here. " * 20
            db.add_message(conversation, "assistant", text)
    return conversation


def start_reply(window, probe, text: str) -> asyncio.Future:
    """Start the probe, then send ``text``; the future gets the reply when it has ended."""
    finished = asyncio.get_running_loop().create_future()
    window.generation_finished.connect(lambda message: finished.done() or finished.set_result(message))
    window.composer.set_text(text)
    probe.start()
    window.composer.submit()
    return finished


def stalls(probe) -> dict:
    """The longest stall, and the most CPU time the GUI thread itself spent in one (its own work per event)."""
    cpu = max((stall.cpu_ms for stall in probe.stalls), default=0.0)
    return {"max_stall_ms": probe.max_stall_ms, "max_gui_cpu_ms": cpu, "summary": probe.summary(), "ticks": probe.ticks}


async def streaming(window, app) -> dict:
    from PySide6.QtTest import QTest

    from app.gui.stall_probe import StallProbe

    await window.wait_for_model()
    other = long_conversation(window.db, "A long earlier chat", 40)
    window.conversations.refresh()
    await asyncio.sleep(0.3)
    actions = [("type", ch) for ch in "typing while it streams"]
    actions += [("scroll", v) for v in (0, 400, 0, 10_000)]
    actions += [("resize", size) for size in ((1200, 800), (1000, 700), (1440, 900))]
    actions += [("switch", other), ("scroll", 0), ("earlier", None), ("scroll", 10_000), ("switch", None), ("stop", None)]
    steps, timeline, streamed = [], [], []
    probe = StallProbe()
    finished = start_reply(window, probe, "Write a very long essay about how bicycles work, with many sections.")
    streaming_conversation = window.chat_view.conversation_id
    while actions and not finished.done():
        await asyncio.sleep(0.04)
        kind, value = actions.pop(0)
        steps.append(kind)
        timeline.append(f"{kind} at {time.perf_counter() - probe.started_at:.2f} s")
        if kind == "type":
            active = window.replies.active
            streamed.append(len(active.recorder.text) if active is not None else -1)
            QTest.keyClick(window.composer.edit, value)
        elif kind == "scroll":
            window.chat_view.scroll_area.verticalScrollBar().setValue(value)
        elif kind == "resize":
            window.resize(*value)
        elif kind == "switch":
            window.conversation_list.select(value if value is not None else streaming_conversation)
        elif kind == "earlier":
            window.chat_view.earlier_button.click()
        elif kind == "stop":
            window.composer.stop_button.click()
    final = await asyncio.wait_for(finished, 300)
    probe.stop()
    while not window.chat_view.fully_loaded:
        await asyncio.sleep(0.02)
    return {
        **stalls(probe),
        "steps": steps,
        "timeline": timeline,
        "streamed_at_keys": streamed,
        "typed": window.composer.text(),
        "state": final.state,
        "content": final.content,
        "shown_conversation": window.chat_view.conversation_id == final.conversation_id,
        "shown_content": window.chat_view.message_widgets()[-1].body.markdown,
    }


async def blocked(window, app) -> dict:
    """A reply streams; 0.3 s in, the GUI thread sleeps 100 ms: the probe must report it (a control of the probe)."""
    from PySide6.QtCore import QTimer

    from app.gui.stall_probe import StallProbe

    await window.wait_for_model()
    probe = StallProbe()
    finished = start_reply(window, probe, "Write a long essay about bicycles.")
    QTimer.singleShot(300, lambda: time.sleep(BLOCK_S))
    await asyncio.sleep(1.0)
    window.composer.stop_button.click()
    await asyncio.wait_for(finished, 120)
    probe.stop()
    return {**stalls(probe), "block_ms": BLOCK_S * 1000, "stalls": [[s.stall_ms, s.blocked_ms] for s in probe.stalls]}


async def long_conversation_scenario(window, app) -> dict:
    from app.gui.stall_probe import StallProbe

    await window.wait_for_model()  # loading is measured by its own scenario
    chat = long_conversation(window.db, "Very long chat", 120)
    window.conversations.refresh()
    await asyncio.sleep(0.3)
    view = window.chat_view
    bar = view.scroll_area.verticalScrollBar()
    probe = StallProbe()
    probe.start()
    window.conversation_list.select(chat)
    while not view.fully_loaded or bar.maximum() == 0 or bar.value() != bar.maximum():
        await asyncio.sleep(0.02)  # the bubbles get their heights when laid out, a turn after being added
    await asyncio.sleep(0.1)
    first_page = [w.message.position for w in view.message_widgets()]
    earlier_text = view.earlier_button.text()
    was_top = view.message_widgets()[0]
    on_screen_before = was_top.y()  # where it shows once scrolled to the top (value 0)
    bar.setValue(0)  # scrolling to the top brings the previous page
    while not view.fully_loaded:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    after_scroll = [w.message.position for w in view.message_widgets()]
    moved_on_screen = (was_top.y() - bar.value()) - on_screen_before
    while view.earlier_count:
        view.earlier_button.click()
        while not view.fully_loaded:
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.05)
    probe.stop()
    return {
        **stalls(probe),
        "first_page": first_page,
        "earlier_text": earlier_text,
        "after_scroll": after_scroll,
        "scroll_value": bar.value(),
        "moved_on_screen": moved_on_screen,
        "all": [w.message.position for w in view.message_widgets()],
        "earlier_visible": view.earlier_button.isVisible(),
    }


async def model_load(window, app) -> dict:
    from PySide6.QtCore import QTimer

    from app.gui.stall_probe import StallProbe

    await asyncio.sleep(0.3)  # the window's first paint is not part of the load
    probe = StallProbe()
    busy = []
    watcher = QTimer()
    watcher.timeout.connect(lambda: busy.append(window.busy_bar.isVisible()))
    watcher.start(20)
    probe.start()
    start = time.perf_counter()
    window.start()
    while window.model_state not in ("ready", "error"):
        await asyncio.sleep(0.02)
    probe.stop()
    watcher.stop()
    base = probe.started_at
    spans = {name: [(a - base, b - base) for a, b in calls] for name, calls in CALLS.items()}
    return {
        **stalls(probe),
        "state": window.model_state,
        "error": window.model_error,
        "busy_seen": any(busy),
        "busy_after": window.busy_bar.isVisible(),
        "seconds": time.perf_counter() - start,
        "stalls": [[s.at_s, s.stall_ms] for s in probe.stalls],
        "engine_calls": spans,
    }


CALLS: dict[str, list[tuple[float, float]]] = {}


def _time_engine_calls() -> None:
    def timed(name, function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                CALLS.setdefault(name, []).append((start, time.perf_counter()))

        return wrapper

    for module_name, attribute in GIL_HOLDING_ENGINE_CALLS:
        owner = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, timed(attribute, getattr(owner, name)))


SCENARIOS = {
    "streaming": streaming, "blocked": blocked, "long_conversation": long_conversation_scenario, "model_load": model_load,
}


def main() -> int:
    import qasync

    from app.gui.application import build_tokenizers_before_event_loop, create_application, create_main_window
    from app.gui.gc_policy import collect_on_gui_thread, freeze_startup_objects, restore_automatic_collection

    scenario, workdir = sys.argv[1], Path(sys.argv[2])
    if scenario == "model_load":
        _time_engine_calls()
    app = create_application()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    garbage_collector = collect_on_gui_thread()  # as gui.run() does
    window = create_main_window(workdir / "history.sqlite3", workdir / "settings.json")
    build_tokenizers_before_event_loop(window.settings)  # as gui.run() does
    window.show()
    freeze_startup_objects()

    async def run() -> dict:
        if scenario != "model_load":
            window.start()
        return await SCENARIOS[scenario](window, app)

    with loop:
        result = loop.run_until_complete(run())
    window.shutdown()
    restore_automatic_collection(garbage_collector)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
