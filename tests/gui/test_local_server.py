"""The window's local server (Server > Local server…) on the default model: the official ``openai`` client gets the
window's greedy text, a window reply and a server request take turns, switching off frees the port, a port in use
is said, other computers need a key, the server follows a reload and comes back on at start."""

from __future__ import annotations

import contextlib
import json
import threading

import httpx
import openai
import pytest
from conftest import FAST
from gui_helpers import click, reset_to_defaults, send_and_wait
from PySide6.QtGui import QGuiApplication

from app.binding import lan_address, listen
from app.gui.server_settings import ServerSettings
from app.gui.settings_store import SettingsStore
from inference.generation_config import recommended_sampling
from inference.models.default_model import default_model_dir

TIMEOUT = 120_000
PROMPT = "Name three colours."


def free_port() -> int:
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    return port


def open_dialog(window, port: int):
    window.local_server_action.trigger()
    dialog = window.server_control.dialog
    assert dialog is not None and dialog.isVisible()
    dialog.port.setValue(port)
    return dialog


def switch_on(qtbot, window, dialog, state: str = "serving"):
    click(qtbot, dialog.switch)
    qtbot.waitUntil(lambda: window.local_server.state == state, timeout=30_000)


def switch_off(qtbot, window, dialog):
    click(qtbot, dialog.switch)
    qtbot.waitUntil(lambda: window.local_server.state == "stopped", timeout=30_000)


def in_thread(qtbot, function):
    """``function()`` in a worker thread while the GUI loop keeps running; returns its result (or raises)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = function()
        except BaseException as error:  # noqa: BLE001 - raised below, on the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    qtbot.waitUntil(lambda: not thread.is_alive(), timeout=TIMEOUT)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def chat(url: str, model: str, api_key: str = "none") -> str:
    client = openai.OpenAI(base_url=url, api_key=api_key, max_retries=0, timeout=60)
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=FAST.value("max_new_tokens"),
        extra_body={"repetition_penalty": FAST.value("repetition_penalty")},  # the window's Precise preset's
    )
    return reply.choices[0].message.content


@pytest.fixture
def window(make_window):
    return make_window(FAST)


def test_the_server_gives_the_windows_greedy_text_and_switching_off_frees_the_port(qtbot, window):
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    url = f"http://127.0.0.1:{port}/v1"
    assert window.local_server.url == url and dialog.url.text() == url
    assert dialog.status.text() == f"Serving the loaded model at {url} (this computer only)"
    assert window.server_label.isVisible() and window.server_label.text() == f"Serving on port {port}"
    assert not dialog.port.isEnabled() and not dialog.api_key.isEnabled()
    click(qtbot, dialog.copy_button)
    assert QGuiApplication.clipboard().text() == url

    model = default_model_dir(4).name
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    assert [m.id for m in in_thread(qtbot, lambda: client.models.list()).data] == [model]
    served = in_thread(qtbot, lambda: chat(url, model))
    in_window = send_and_wait(qtbot, window, PROMPT)
    assert in_window.state == "complete" and served == in_window.content and served

    saved = SettingsStore(window.store.path)
    saved.load()
    assert saved.server == ServerSettings(enabled=True, port=port)
    switch_off(qtbot, window, dialog)
    assert dialog.url.text() == "" and not dialog.copy_button.isEnabled() and not window.server_label.isVisible()
    assert dialog.port.isEnabled() and dialog.status.text() == "Stopped"
    listen("127.0.0.1", port).close()  # the port is free again
    saved.load()
    assert saved.server == ServerSettings(enabled=False, port=port)


def test_a_window_reply_and_a_server_request_issued_together_both_complete(qtbot, window):
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    url = f"http://127.0.0.1:{port}/v1"
    reference = send_and_wait(qtbot, window, PROMPT).content
    result = {}
    thread = threading.Thread(target=lambda: result.update(text=chat(url, default_model_dir(4).name)), daemon=True)
    window.conversations.new()  # the same first turn again
    with qtbot.waitSignal(window.generation_finished, timeout=TIMEOUT) as finished:
        window.composer.set_text(PROMPT)
        window.composer.submit()
        assert window.active is not None
        thread.start()  # while the window's reply generates: it waits its turn
    qtbot.waitUntil(lambda: not thread.is_alive(), timeout=TIMEOUT)
    assert finished.args[0].state == "complete" and finished.args[0].content == reference
    assert result["text"] == reference
    switch_off(qtbot, window, dialog)


def test_a_port_in_use_is_said_and_the_switch_goes_off(qtbot, window):
    taken = listen("127.0.0.1", 0)
    port = taken.getsockname()[1]
    try:
        dialog = open_dialog(window, port)
        switch_on(qtbot, window, dialog, state="failed")
        text = f"Not serving: port {port} is in use by another program: choose another port, or stop that program"
        assert dialog.status.text() == text
        assert window.statusBar().currentMessage() == f"Local server: {text}"
        assert not dialog.switch.isChecked() and dialog.port.isEnabled() and dialog.url.text() == ""
        assert not window.server_label.isVisible()
    finally:
        taken.close()
    switch_on(qtbot, window, dialog)  # the same port, once freed
    assert window.model_state == "ready" and window.local_server.url == f"http://127.0.0.1:{port}/v1"
    switch_off(qtbot, window, dialog)


def test_other_computers_need_an_api_key_and_then_get_the_network_url(qtbot, window):
    port = free_port()
    dialog = open_dialog(window, port)
    click(qtbot, dialog.allow_other_computers)
    switch_on(qtbot, window, dialog, state="failed")
    assert dialog.status.text().startswith("Allowing other computers needs an API key")
    assert not dialog.switch.isChecked()
    dialog.api_key.setText("s3cret")
    switch_on(qtbot, window, dialog)
    assert dialog.url.text() == f"http://{lan_address()}:{port}/v1"
    assert dialog.status.text() == (f"Serving the loaded model at {dialog.url.text()} (this computer and the network); "
                                    "clients must send the API key as a Bearer token")
    local = f"http://127.0.0.1:{port}/v1"
    assert httpx.get(f"{local}/models", timeout=10).status_code == 401
    models = httpx.get(f"{local}/models", headers={"Authorization": "Bearer s3cret"}, timeout=10)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == default_model_dir(4).name
    switch_off(qtbot, window, dialog)


def test_a_reload_in_the_window_serves_the_new_model_from_the_next_request(qtbot, window):
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    models_url = f"http://127.0.0.1:{port}/v1/models"
    assert httpx.get(models_url, timeout=10).json()["data"][0]["id"] == default_model_dir(4).name
    with qtbot.waitSignal(window.model_ready, timeout=TIMEOUT):
        window.choice.choose_target("", 8)
    assert httpx.get(models_url, timeout=10).json()["data"][0]["id"] == default_model_dir(8).name
    text = in_thread(qtbot, lambda: chat(f"http://127.0.0.1:{port}/v1", default_model_dir(8).name))
    window.conversations.new()
    assert text == send_and_wait(qtbot, window, PROMPT).content
    switch_off(qtbot, window, dialog)
    with qtbot.waitSignal(window.model_ready, timeout=TIMEOUT):
        window.choice.choose_target("", 4)  # the shared worker goes back to the default model


def test_a_server_that_was_on_comes_back_with_the_model_and_its_key(qtbot, make_window, tmp_path):
    port = free_port()
    SettingsStore(tmp_path / "config" / "settings.json").save(FAST)
    first = make_window(settings=None)
    dialog = open_dialog(first, port)
    dialog.api_key.setText("s3cret")
    switch_on(qtbot, first, dialog)
    # a trial read only "Serving… (this computer only)": that clients need the key is said, the key never
    assert dialog.status.text() == (f"Serving the loaded model at http://127.0.0.1:{port}/v1 (this computer only); "
                                    "clients must send the API key as a Bearer token")
    first.close()  # closing stops it; it was on, so it starts again with the next window
    qtbot.waitUntil(lambda: _port_is_free(port), timeout=30_000)
    assert "s3cret" not in (tmp_path / "config" / "settings.json").read_text()  # the key is kept elsewhere
    window = make_window(settings=None)
    qtbot.waitUntil(lambda: window.local_server.state == "serving", timeout=30_000)
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()["status"] == "ok"
    models = f"http://127.0.0.1:{port}/v1/models"
    assert httpx.get(models, timeout=10).status_code == 401  # the key came back with it
    assert httpx.get(models, headers={"Authorization": "Bearer s3cret"}, timeout=10).status_code == 200
    window.local_server_action.trigger()
    assert window.server_control.dialog.api_key.text() == "s3cret"  # and shows in the dialog
    window.close()
    qtbot.waitUntil(lambda: _port_is_free(port), timeout=30_000)


def _port_is_free(port: int) -> bool:
    try:
        listen("127.0.0.1", port).close()
    except Exception:  # noqa: BLE001 - still in use
        return False
    return True


def test_a_stream_gives_the_same_text_and_a_client_that_leaves_frees_the_engine(qtbot, window):
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    url, model = f"http://127.0.0.1:{port}/v1", default_model_dir(4).name
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": PROMPT}]
    max_tokens = FAST.value("max_new_tokens")

    def streamed() -> str:
        stream = client.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
            extra_body={"repetition_penalty": FAST.value("repetition_penalty")},
        )
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

    assert in_thread(qtbot, streamed) == in_thread(qtbot, lambda: chat(url, model))

    def leave_after_the_first_chunk() -> bool:
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Count from 1 to 500."}], max_tokens=2000, stream=True
        )
        next(iter(stream))
        generating = window.worker.generating  # (a set's truth, read from this thread)
        stream.close()
        return generating

    assert in_thread(qtbot, leave_after_the_first_chunk)  # it was generating when the client left
    qtbot.waitUntil(lambda: not window.worker.generating, timeout=5000)  # cancelled, not 2000 tokens later
    assert send_and_wait(qtbot, window, PROMPT).state == "complete"  # the window's turn comes at once
    switch_off(qtbot, window, dialog)


def test_requests_without_sampling_fields_get_the_models_sampling(window):
    """As ``specchat serve`` without sampling flags: the model's generation_config.json over the chat defaults, not
    the window's preset and not OpenAI's cloud defaults."""
    served = window.server_control.served_model()
    assert served.defaults.sampling == recommended_sampling(default_model_dir(4))
    assert served.defaults.sampling.repetition_penalty == 1.1 and served.defaults.sampling.temperature == 0.7


def test_requests_get_the_windows_decoding_as_it_changes(qtbot, window):
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    body = {"model": "any", "messages": [{"role": "user", "content": PROMPT}], "temperature": 0, "max_tokens": 8}

    def served_stats() -> dict:
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        return reply.json()["specchat"]

    assert in_thread(qtbot, served_stats)["mode"] == "auto"  # the window's default
    window.settings_pane.set_settings(window.settings.with_values(decoding="spec_lookup", k=3))  # as if chosen there
    assert window.settings.generation.decoding.value == "spec_lookup"
    stats = in_thread(qtbot, served_stats)
    assert (stats["mode"], stats["drafter"]) == ("spec", "lookup")
    switch_off(qtbot, window, dialog)


def test_the_queue_outlives_a_change_of_the_served_model(qtbot, window):
    """A request still generating on the previous app (the window changed its decoding, so the server built a new
    one) keeps the server busy: /health says so, and the queue limit counts it."""
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    base = f"http://127.0.0.1:{port}"
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60)
    first_chunk = threading.Event()
    release = threading.Event()

    def long_stream() -> None:
        stream = client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "Count from 1 to 500."}], max_tokens=2000, stream=True
        )
        next(iter(stream))
        first_chunk.set()
        release.wait(60)
        stream.close()

    streaming = threading.Thread(target=long_stream, daemon=True)
    streaming.start()
    qtbot.waitUntil(first_chunk.is_set, timeout=TIMEOUT)
    app_before = window.local_server._app.current
    window.settings_pane.set_settings(window.settings.with_values(k=window.settings.value("k") + 1))
    assert window.local_server._app.current is not app_before  # the server serves a new app from now on
    health = in_thread(qtbot, lambda: httpx.get(f"{base}/health", timeout=10).json())
    assert health == {"status": "ok", "busy": True, "waiting": 0}
    release.set()
    qtbot.waitUntil(lambda: not streaming.is_alive(), timeout=TIMEOUT)
    qtbot.waitUntil(lambda: not window.worker.generating, timeout=5000)
    assert in_thread(qtbot, lambda: httpx.get(f"{base}/health", timeout=10).json())["busy"] is False
    switch_off(qtbot, window, dialog)


def test_an_invalid_setting_from_the_file_never_reaches_the_server_and_its_words_name_no_flags(qtbot, make_window):
    """``"n_ctx": -5`` in settings.json: the window flags it, and the server serves valid settings (the last valid
    ones, here the defaults), then the pane's after Reset; its n_ctx error names the window's setting, no flag."""
    window = make_window(FAST.with_values(n_ctx=-5))
    assert "n_ctx" in window.settings_pane.errors()
    served = window.server_control.served_model().defaults
    served.validate(None)  # never the file's -5
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    body = {"model": "any", "messages": [{"role": "user", "content": PROMPT}], "temperature": 0, "max_tokens": 4}

    def post(extra: dict) -> httpx.Response:
        return httpx.post(url, json={**body, **extra}, timeout=60)

    assert in_thread(qtbot, lambda: post({})).status_code == 200
    too_long = in_thread(qtbot, lambda: post({"specchat": {"n_ctx": 100_000}}))
    assert too_long.status_code == 400
    message = too_long.json()["error"]["message"]
    assert "--" not in message and "Context length" in message, message
    reset_to_defaults(window.settings_pane)
    assert window.settings_pane.errors() == {}
    assert window.server_control.served_model().defaults.context == window.settings.generation.context
    assert in_thread(qtbot, lambda: post({})).status_code == 200
    switch_off(qtbot, window, dialog)


def test_switching_off_mid_stream_ends_the_stream_with_server_stopped(qtbot, window):
    """Newcomer trial: the switch turned off while `curl -N` streamed a long reply cut the connection mid-chunk
    (curl: exit 18, the `openai` client: "peer closed connection without sending complete message body"), where
    `specchat serve` stopped by Ctrl+C ends the stream with its ``server_stopped`` error event, as the README says."""
    port = free_port()
    dialog = open_dialog(window, port)
    switch_on(qtbot, window, dialog)
    streaming, events = threading.Event(), []

    url = f"http://127.0.0.1:{port}/v1/completions"
    body = {  # counting on: far longer than the server's graceful shutdown
        "prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 2000, "stream": True, "temperature": 0,
        "repetition_penalty": 1.0,
    }

    def stream() -> None:  # (a connection cut is let through: the assertions read what arrived)
        with contextlib.suppress(httpx.HTTPError), httpx.stream("POST", url, timeout=60, json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events.append(line[5:].strip())
                    streaming.set()

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    qtbot.waitUntil(streaming.is_set, timeout=TIMEOUT)
    switch_off(qtbot, window, dialog)
    reader.join(timeout=30)
    assert not reader.is_alive() and "[DONE]" not in events
    last = json.loads(events[-1])
    assert last["error"]["code"] == "server_stopped" and "incomplete" in last["error"]["message"]

