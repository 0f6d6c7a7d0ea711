"""What the window says is recomputed from the state whenever the state changes, never left over: a settings error
is withdrawn once fixed, a remote server's refusal once the local model is chosen again, a server that does not
answer is marked in the picker until it answers, and the picker names a copy of the default model as built once it
is."""

from __future__ import annotations

import shutil
import socket
from dataclasses import replace

from conftest import FAST
from gui_helpers import send_and_wait


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens there once the probe is closed


def test_a_settings_error_said_at_send_is_withdrawn_once_fixed(qtbot, make_window):
    window = make_window(FAST.with_values(decoding="spec_lookup"), start=False)
    window.settings_pane.k.setValue(0)
    window.composer.set_text("Hello")
    window.composer.submit()  # refused: said in place
    assert window.composer.error_text.startswith("Fix the settings first:") and "K" in window.composer.error_text
    window.settings_pane.k.setValue(4)
    assert window.composer.error_text == ""  # no longer true: no longer said
    assert window.composer.send_button.isEnabled()


def test_a_remote_refusal_is_withdrawn_when_the_local_model_is_chosen_and_a_dead_server_is_marked(
    qtbot, make_window, no_user_keyring
):
    window = make_window(FAST)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    window.choice.apply(replace(window.settings, remote_url=url, remote_model="m", use_remote=True))
    reply = send_and_wait(qtbot, window, "Hello?")
    assert reply is None and "refused the connection" in window.composer.error_text
    task = window.tasks.spawn(window.choice.detect_remote())
    qtbot.waitUntil(task.done, timeout=10_000)
    combo = window.model_picker.combo
    remote = combo.findData("remote:server")
    assert combo.itemText(remote).endswith(" · not reachable")
    assert "refused the connection" in combo.itemData(remote, 3)  # the tooltip says why
    window.choice.choose_target("", window.settings.bits)  # back to the local model
    assert window.composer.error_text == ""
    assert combo.itemText(combo.findData("remote:server")).endswith(" · not reachable")  # (still true: still said)


def test_a_server_marked_not_reachable_is_unmarked_once_it_answers(qtbot, make_window, no_user_keyring):
    import http.server
    import json
    import threading

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    window = make_window(FAST)
    port = _closed_port()
    window.choice.apply(replace(window.settings, remote_url=f"http://127.0.0.1:{port}/v1", remote_model="m"))
    combo = window.model_picker.combo

    def detect() -> str:
        task = window.tasks.spawn(window.choice.detect_remote())
        qtbot.waitUntil(task.done, timeout=10_000)
        return combo.itemText(combo.findData("remote:server"))

    assert detect().endswith(" · not reachable")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert not detect().endswith(" · not reachable")  # it answers: no longer said
        assert "not reachable" not in (combo.itemData(combo.findData("remote:server"), 3) or "")
    finally:
        server.shutdown()
        server.server_close()


def test_a_reply_that_cannot_reach_its_server_marks_it_and_one_that_reaches_it_unmarks_it(
    qtbot, make_window, no_user_keyring
):
    """Newcomer trial: a reply to a server just killed failed ("refused the connection"), and the picker still
    offered the server unmarked (only a check at start or on choosing it marked one). A reply that cannot connect
    marks it "not reachable", saying why; a reply the server answers takes the mark away."""
    from remote_stub import MODEL, RemoteStub

    window = make_window(FAST)
    combo = window.model_picker.combo
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    window.choice.apply(replace(window.settings, remote_url=url, remote_model="m", use_remote=True))
    assert not combo.itemText(combo.findData("remote:server")).endswith(" · not reachable")
    assert send_and_wait(qtbot, window, "Hello?") is None
    remote = combo.findData("remote:server")
    assert combo.itemText(remote).endswith(" · not reachable")
    assert "refused the connection" in combo.itemData(remote, 3)  # the tooltip says why
    window.composer.clear()
    with RemoteStub() as stub:  # a server marked when it was down (as above), up again: its reply unmarks it
        window.choice.apply(replace(window.settings, remote_url=stub.url("ok"), remote_model=MODEL))
        window.choice.unreachable[stub.url("ok")] = "refused the connection"
        window.choice.refresh_models()
        assert combo.itemText(combo.findData("remote:server")).endswith(" · not reachable")
        assert send_and_wait(qtbot, window, "Hello again").state == "complete"
    remote = combo.findData("remote:server")
    assert not combo.itemText(remote).endswith(" · not reachable")
    assert "not reachable" not in (combo.itemData(remote, 3) or "").lower()


def test_the_picker_follows_a_copy_of_the_default_model_that_was_built(qtbot, make_window, int8_dir, tmp_path, monkeypatch):
    from inference.models.default_model import default_model_dir
    from inference.models.store import models_dir

    store = tmp_path / "data"
    (store / "models").mkdir(parents=True)
    shutil.copytree(default_model_dir(4), store / "models" / default_model_dir(4).name)
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(store))
    window = make_window(FAST)
    combo = window.model_picker.combo
    eight = combo.findData("default-model:8")
    assert combo.itemText(eight).endswith("8-bit · not built yet")

    async def build(bits, progress, cancel=None):  # what a fetch does: the copy lands in the store
        assert bits == 8
        target = models_dir() / int8_dir.name
        shutil.copytree(int8_dir, target)
        return target

    monkeypatch.setattr(window.worker, "fetch_default_model", build)
    window.choice.choose_target("", 8)
    qtbot.waitUntil(lambda: window.models.is_ready_for(window.settings), timeout=120_000)
    text = combo.itemText(combo.findData("default-model:8"))
    assert "not built yet" not in text and text.startswith("SmolLM2-135M-Instruct · 8-bit · ")
    assert combo.currentText() == text
