"""Screenshot of SpecChat running one autoregressive vs speculative comparison (or another scene), taken under Xvfb.

    python tools/screenshot.py [--output specchat.png] [--prompt TEXT] [--decoding spec_lookup|spec_model]
                               [--scene compare|chat|picker] [--model NAME]

Scenes: ``compare`` (the default) sends the prompt with Compare; ``chat`` sends it as a message and waits for the
reply; ``picker`` opens the model picker's list. ``--model`` chats with an installed model (a name of
``specchat models list``) instead of the default model.

The script re-runs itself under ``xvfb-run`` (or a private ``Xvfb`` server) so the window is drawn by a real X
server with the xcb platform plugin, as on a desktop. It uses a temporary history and settings (your chats are
not touched) and the models of the usual data folder (``$SPECCHAT_DATA_DIR`` or the platform's); the default
model is fetched first if missing. The PNG is not meant to be committed.

Needs Xvfb and the libraries of Qt's xcb plugin: ``apt-get install -y xvfb xauth libxcb-cursor0`` (Debian/Ubuntu).
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
SCREEN = "1600x1000x24"
INSIDE = "SPECCHAT_SCREENSHOT_INSIDE_XVFB"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("specchat-screenshot.png"), help="PNG to write")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="message to compare")
    parser.add_argument("--decoding", choices=("spec_lookup", "spec_model"), default="spec_lookup",
                        help="speculative side of the comparison (spec_model uses the 8-bit default as draft)")  # fmt: skip
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--precision", default="auto", help="compute precision of the target (auto, f32, bf16, f16)")
    parser.add_argument("--kv-cache-precision", default="auto", help="KV-cache precision (auto, u8, f16, f32)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before giving up")
    parser.add_argument("--scene", choices=("compare", "chat", "picker"), default="compare",
                        help="what to show: a comparison, a reply, or the model picker open")  # fmt: skip
    parser.add_argument("--model", default="", help="target model: an installed model's name (default: the default model)")
    parser.add_argument("--n-ctx", type=int, default=None, help="rolling-context size (a small model may need less)")
    parser.add_argument("--switch-to", default="", help="after the reply, choose this installed model (the chat's notice shows)")
    return parser.parse_args(argv)


def _relaunch_under_xvfb(argv: list[str]) -> int:
    """Run this script again inside a virtual X server; returns its exit status."""
    env = {**os.environ, INSIDE: "1", "QT_QPA_PLATFORM": "xcb"}
    command = [sys.executable, str(Path(__file__).resolve()), *argv]
    if shutil.which("xvfb-run"):
        return subprocess.call(["xvfb-run", "-a", "-s", f"-screen 0 {SCREEN} -nolisten tcp", *command], env=env)
    if shutil.which("Xvfb"):
        display = ":87"
        server = subprocess.Popen(["Xvfb", display, "-screen", "0", SCREEN, "-nolisten", "tcp"])
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
    from app.gui.settings_store import AppSettings, SettingsStore
    from inference.models.default_model import default_model_dir, ensure_default_model

    workdir = Path(tempfile.mkdtemp(prefix="specchat-screenshot-"))
    draft = ""
    if args.decoding == "spec_model":
        draft = str(ensure_default_model(8, progress=lambda line: print(line, file=sys.stderr)))
    settings = AppSettings(target_model=args.model).with_values(
        decoding=args.decoding, draft_model=draft, max_new_tokens=args.max_new_tokens, seed=7,
        precision=args.precision, kv_cache_precision=args.kv_cache_precision,
        **({"n_ctx": args.n_ctx} if args.n_ctx else {}),
    )
    SettingsStore(workdir / "settings.json").save(settings)
    app = create_application()
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = create_main_window(workdir / "history.sqlite3", workdir / "settings.json")
    window.resize(1440, 900)
    window.move(0, 0)
    window.show()
    print(f"platform {QGuiApplication.platformName()}, model folder {default_model_dir(4)}", file=sys.stderr)

    async def run() -> int:
        window.start()
        await window.wait_for_model()
        if args.scene == "picker":
            window.focus_model_picker()
            await asyncio.sleep(0.8)  # the list opens and paints
        else:
            status = await _reply(window, args)
            if status:
                return status
            if args.switch_to:
                window.choose_target(*window.choice_for(args.switch_to))
                await window.wait_for_model()
                await asyncio.sleep(0.8)
        screen = window.screen()
        picture = screen.grabWindow(0, 0, 0, window.frameGeometry().width(), window.frameGeometry().height())
        if picture.isNull():
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


def main(argv: list[str] | None = None) -> int:
    """Entry point: relaunch under Xvfb, or (inside it) take the screenshot."""
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    args.output = args.output.resolve()
    if os.environ.get(INSIDE) != "1":
        return _relaunch_under_xvfb([*argv[:0], "--output", str(args.output), "--prompt", args.prompt,
                                     "--decoding", args.decoding, "--max-new-tokens", str(args.max_new_tokens),
                                     "--precision", args.precision, "--kv-cache-precision", args.kv_cache_precision,
                                     "--timeout", str(args.timeout), "--scene", args.scene, "--model", args.model,
                                     "--switch-to", args.switch_to,
                                     *(["--n-ctx", str(args.n_ctx)] if args.n_ctx else [])])  # fmt: skip
    return _take(args)


if __name__ == "__main__":
    sys.exit(main())
