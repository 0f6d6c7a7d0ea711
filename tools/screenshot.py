"""Screenshots of SpecChat, taken under Xvfb: a comparison, a reply, the model picker, the settings pane, a haiku, the
remote server dialog.

    python tools/screenshot.py [--scene compare|chat|picker|settings|haiku|remote] [--output specchat.png]
                               [--size 1366x768] [--prompt TEXT] [--decoding auto|spec_lookup|spec_model]
                               [--draft window|8-bit]
                               [--model NAME] [--switch-to NAME] [--n-ctx N] [--theme light|dark|system]

``compare`` (the default) runs one comparison, plain decoding against Auto (or the ``--decoding`` chosen); ``chat`` sends the prompt as a message
and waits for the reply; ``picker`` opens the model picker's list. ``--model`` chats with an installed model (a
name of ``specchat models list``) instead of the default model. ``settings`` shows the window without generating
anything (the settings pane as a 1366x768 laptop screen shows it); ``haiku`` shows a stored conversation whose user
message and reply have several lines (line breaks as rendered); ``remote`` opens the remote server dialog over the
window, a key typed for a server on another computer over plain http (its warning shows). The window loads its model
as it opens, so ``settings`` and ``haiku`` wait for it, as a user would see them, the model ready in the status bar
(they showed "Loading ..." with its busy bar); ``remote`` shows the remote model there and waits for nothing. It
prints the status bar's text on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROMPT = (
    "Rewrite this paragraph in simpler words: The committee convened to deliberate on the proposal, and after "
    "extensive discussion, it was resolved that the matter would be postponed until further notice."
)
INSIDE = "SPECCHAT_SCREENSHOT_INSIDE_XVFB"
HAIKU_PROMPT = "Write a haiku about autumn.\nThree lines, please."
HAIKU_REPLY = "Crimson leaves drift down\nwhispering to the cold earth\nsummer says goodbye"
#: The server the ``remote`` scene's dialog shows: another computer (TEST-NET-1, RFC 5737) over plain http.
REMOTE_URL = "http://192.0.2.7:8000/v1"
REMOTE_MODEL = "qwen2.5-7b-instruct"


def _size(text: str) -> str:
    """``--size``: ``WIDTHxHEIGHT`` in pixels, each at least 1 (returned as given, for the relaunch under Xvfb).

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    if re.fullmatch(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}", text) is None:
        raise argparse.ArgumentTypeError(f"must be WIDTHxHEIGHT (e.g. 1920x1080), got {text!r}")
    return text


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", choices=("compare", "chat", "picker", "settings", "haiku", "remote"), default="compare",
                        help="what to show: a comparison, a reply, the model picker open, the settings, a haiku chat, "
                             "the remote server dialog")  # fmt: skip
    parser.add_argument("--size", type=_size, default="1440x900",
                        help="screen and window size WIDTHxHEIGHT, the picture's size too")  # fmt: skip
    parser.add_argument("--output", type=Path, default=Path("specchat-screenshot.png"), help="PNG to write")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="message to compare")
    parser.add_argument("--decoding", choices=("auto", "spec_lookup", "spec_model"), default="auto",
                        help="second side of the comparison (default: Auto, a new user's decoding and Compare; "
                             "spec_model: the window's draft model, the draft head on the default model)")  # fmt: skip
    parser.add_argument("--draft", choices=("window", "8-bit"), default="window",
                        help="spec_model's draft: the window's own choice (the draft head on the default model) "
                             "or the 8-bit default model")  # fmt: skip
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--precision", default="auto", help="compute precision of the target (auto, f32, bf16, f16)")
    parser.add_argument("--kv-cache-precision", default="auto", help="KV-cache precision (auto, u8, f16, f32)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before giving up")
    parser.add_argument("--model", default="", help="target model: an installed model's name (default: the default model)")
    parser.add_argument("--n-ctx", type=int, default=None, help="rolling-context size (a small model may need less)")
    parser.add_argument("--switch-to", default="", help="after the reply, choose this installed model (the chat's notice shows)")
    parser.add_argument("--theme", choices=("system", "light", "dark"), default="light", help="the window's theme (View > Theme)")
    return parser.parse_args(argv)


def _relaunch_under_xvfb(argv: list[str], size: str) -> int:
    """Run this script again inside a virtual X server of ``size`` (``WIDTHxHEIGHT``); returns its exit status."""
    env = {**os.environ, INSIDE: "1", "QT_QPA_PLATFORM": "xcb"}
    command = [sys.executable, str(Path(__file__).resolve()), *argv]
    screen = f"{size}x24"
    if shutil.which("xvfb-run"):
        return subprocess.call(["xvfb-run", "-a", "-s", f"-screen 0 {screen} -nolisten tcp", *command], env=env)
    if shutil.which("Xvfb"):
        display = ":87"
        server = subprocess.Popen(["Xvfb", display, "-screen", "0", screen, "-nolisten", "tcp"])
        try:
            time.sleep(1.0)
            if server.poll() is not None:
                print(f"Xvfb could not start on display {display}", file=sys.stderr)
                return 2
            return subprocess.call(command, env={**env, "DISPLAY": display})
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(
        "Xvfb is missing: this script draws the window on a virtual X server. Install it (Debian/Ubuntu: "
        "`sudo apt-get install -y xvfb xauth libxcb-cursor0`), then run this script again.",
        file=sys.stderr,
    )
    return 2


def _take(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO))
    import qasync
    from PySide6.QtGui import QGuiApplication

    from app.gui.application import create_application, create_main_window
    from app.gui.history_db import HistoryDB
    from app.gui.settings_store import AppSettings, SettingsStore
    from inference.models.default_model import default_model_dir, ensure_default_model

    workdir = Path(tempfile.mkdtemp(prefix="specchat-screenshot-"))
    draft = ""
    if args.scene in ("compare", "chat") and args.decoding == "spec_model" and args.draft == "8-bit":
        draft = str(ensure_default_model(8, progress=lambda line: print(line, file=sys.stderr)))
    remote = {"remote_url": REMOTE_URL, "remote_model": REMOTE_MODEL} if args.scene == "remote" else {}
    settings = AppSettings(target_model=args.model, **remote).with_values(
        decoding=args.decoding, draft_model=draft, max_new_tokens=args.max_new_tokens,
        precision=args.precision, kv_cache_precision=args.kv_cache_precision, theme=args.theme,
        **({"n_ctx": args.n_ctx} if args.n_ctx else {}),
    )  # fmt: skip
    SettingsStore(workdir / "settings.json").save(settings)
    if args.scene == "haiku":
        _store_haiku_chat(HistoryDB(workdir / "history.sqlite3"))
    app = create_application()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = create_main_window(workdir / "history.sqlite3", workdir / "settings.json")
    window.move(0, 0)
    window.resize(*map(int, args.size.split("x")))  # its default is 1440x900 at most, whatever the screen's size
    window.show()
    print(f"platform {QGuiApplication.platformName()}, screen {window.screen().availableGeometry().size().toTuple()}, "
          f"window {window.size().toTuple()}, model folder {default_model_dir(4)}", file=sys.stderr)  # fmt: skip

    async def scene() -> int:
        if args.scene == "remote":
            await _open_remote_dialog(window)
            return 0
        window.start()
        await window.wait_for_model()
        if args.scene in ("settings", "haiku"):
            return 0
        if args.scene == "picker":
            window.model_picker.open_list()
            await asyncio.sleep(0.8)  # the list opens and paints
            return 0
        status = await _reply(window, args)
        if status == 0 and args.switch_to:
            window.choice.choose_target(*window.choice.choice_for(args.switch_to))
            await window.wait_for_model()
            await asyncio.sleep(0.8)
        return status

    async def run() -> int:
        status = await scene()
        await asyncio.sleep(0.5)  # layout and paint
        pane = window.settings_pane
        bar = pane.verticalScrollBar()
        print(f"settings pane: viewport {pane.viewport().height()} px, content {pane.widget().sizeHint().height()} px, "
              f"scroll bar {'shown' if bar.isVisible() else 'hidden'} (range {bar.maximum()})", file=sys.stderr)  # fmt: skip
        print(f"status bar: {window.model_label.text()}", file=sys.stderr)
        if status:
            return status
        screen = window.screen()  # (the screen's pixels: a popup over the window, the picker's list, shows too)
        area = window.geometry()
        picture = screen.grabWindow(0, area.x(), area.y(), area.width(), area.height())
        if picture.isNull() or picture.size() != window.size():  # (no such screen: offscreen, a smaller one)
            picture = window.grab()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        if not picture.save(str(args.output), "PNG"):
            print(f"could not write {args.output}", file=sys.stderr)
            return 1
        print(f"wrote {args.output} ({picture.width()}x{picture.height()})", file=sys.stderr)
        return 0

    try:
        with loop:
            status = loop.run_until_complete(run())
    finally:
        window.shutdown()
        window.db.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return status


async def _reply(window, args: argparse.Namespace) -> int:
    """Send the prompt (with Compare in the ``compare`` scene) and wait for the reply; 1 if it failed."""
    window.composer.set_text(args.prompt)
    finished = asyncio.get_running_loop().create_future()
    window.generation_finished.connect(lambda message: finished.done() or finished.set_result(message))
    (window.composer.compare_button if args.scene == "compare" else window.composer.send_button).click()
    message = await asyncio.wait_for(finished, args.timeout)
    await asyncio.sleep(0.8)  # the last graph refresh and repaint
    if message is None or message.state == "error":
        print(f"the reply failed: {window.composer.error_text}", file=sys.stderr)
        return 1
    if args.scene == "compare":
        compare = message.stats["compare"]
        print(
            f"autoregressive {compare['ar']['tokens_per_s']:.1f} tokens/s, speculative {compare['spec']['tokens_per_s']:.1f} "
            f"tokens/s, speedup {compare['speedup']:.2f}x, identical: {compare['identical']}",
            file=sys.stderr,
        )
    else:
        print(f"{message.stats.get('target_model')}: {message.stats.get('tokens_per_s')} tokens/s", file=sys.stderr)
    return 0


async def _open_remote_dialog(window) -> None:
    """Open Remote server… as the picker's entry does, and type an API key (the plain-http warning shows)."""
    from PySide6.QtWidgets import QApplication

    from app.gui.widgets.remote_dialog import RemoteServerDialog

    window.tasks.spawn(window.choice.remote_dialog())
    await asyncio.sleep(0.5)
    dialog = next(w for w in QApplication.topLevelWidgets() if isinstance(w, RemoteServerDialog) and w.isVisible())
    dialog.api_key.setText("sk-example-key")
    await asyncio.sleep(0.8)  # the warning lays out and paints


def _store_haiku_chat(db) -> None:
    """A conversation with a two-line user message and a three-line reply, as a real one is stored."""
    conversation = db.create_conversation("Autumn haiku")
    db.add_message(conversation, "user", HAIKU_PROMPT)
    stats = {"mode": "ar", "drafter": None, "ttft_ms": 21.4, "tokens_per_s": 118.2, "acceptance_rate": None,
             "new_tokens": 17, "discarded_tokens": 0, "rolls": 0, "stop_reason": "eos", "seed": 7}  # fmt: skip
    db.add_message(conversation, "assistant", HAIKU_REPLY, stats=stats)
    db.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point: relaunch under Xvfb, or (inside it) take the screenshot."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    args.output = args.output.resolve()
    if os.environ.get(INSIDE) != "1":
        return _relaunch_under_xvfb([*argv, "--output", str(args.output)], args.size)  # every option, as given
    return _take(args)


if __name__ == "__main__":
    sys.exit(main())
