"""``specchat generate`` and ``specchat chat`` with ``--remote URL``: a model on an OpenAI-compatible server, run as a
user would (a subprocess) against the stub (tests/remote_stub.py); no local model is loaded."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from remote_stub import API_KEY, CUT_AFTER, MODEL, REPLY, REPLY_PIECES, RemoteStub

from app.backends.remote_errors import CONTEXT_ADVICE


@pytest.fixture(scope="module")
def stub():
    with RemoteStub() as server:
        yield server


def specchat(*args, tmp_path, stdin: str | None = None, env: dict | None = None):
    environment = {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path / "data"),
                   "SPECCHAT_CONFIG_DIR": str(tmp_path / "config"), **(env or {})}  # fmt: skip
    environment.pop("SPECCHAT_API_KEY", None) if "SPECCHAT_API_KEY" not in (env or {}) else None
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, env=environment,
                          input=stdin, timeout=120)  # fmt: skip


def test_generate_streams_a_remote_servers_reply(stub, tmp_path):
    """Newcomer trial: a model too large for this machine served by llama-server elsewhere; the README's remote
    servers were the window's only, and `specchat generate` had no option for one."""
    result = specchat("generate", "Say hello", "--remote", stub.url("ok"), "--system", "Be brief.",
                      "--temperature", "0.5", "--top-k", "5", "--max-new-tokens", "32", tmp_path=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == REPLY + "\n"
    host = stub.url("ok").split("/")[2]
    lines = result.stderr.splitlines()
    assert lines[0] == f"{MODEL} on {host} (remote)"
    assert lines[-1].startswith("[remote] 9 tokens, TTFT ") and lines[-1].endswith(", prompt 21 tokens, stop: eos")
    path, body, authorization = stub.requests[-1]
    assert path.endswith("/ok/v1/chat/completions") and authorization is None
    assert body["model"] == MODEL  # the first the server lists, none being given
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    assert (body["temperature"], body["top_k"], body["max_tokens"]) == (0.5, 5, 32)


def test_chat_keeps_the_conversation_on_the_remote_server(stub, tmp_path):
    result = specchat("chat", "--remote", stub.url("ok"), "--remote-model", MODEL, tmp_path=tmp_path,
                      stdin="Say hello\nAgain\n/exit\n")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{REPLY}\n{REPLY}\n"
    assert stub.requests[-1][1]["messages"] == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "Again"},
    ]


def test_a_key_comes_from_the_option_or_the_environment_and_errors_say_what_to_do(stub, tmp_path):
    host = stub.url("ok").split("/")[2]
    result = specchat("generate", "Say hello", "--remote", stub.url("auth"), tmp_path=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (f"error: {host} needs an API key (401) (the server said: Invalid API key): give it with "
                             "--api-key KEY or in $SPECCHAT_API_KEY\n")  # fmt: skip
    result = specchat("generate", "Say hello", "--remote", stub.url("auth"), "--api-key", "wrong", tmp_path=tmp_path)
    assert result.stderr == (f"error: {host} refused the API key (401) (the server said: Invalid API key): give the "
                             "right key with --api-key KEY or in $SPECCHAT_API_KEY\n")  # fmt: skip
    for given in (["--api-key", API_KEY], []):
        result = specchat("generate", "Say hello", "--remote", stub.url("auth"), *given, tmp_path=tmp_path,
                          env={} if given else {"SPECCHAT_API_KEY": API_KEY})  # fmt: skip
        assert (result.returncode, result.stdout) == (0, REPLY + "\n"), result.stderr
        assert stub.requests[-1][2] == f"Bearer {API_KEY}"
    result = specchat("generate", "Say hello", "--remote", stub.url("ok"), "--remote-model", "nope", tmp_path=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith(f"nope on {host} (remote)\nerror: {host} has no model "
                                                               "'nope'")  # fmt: skip
    assert result.stderr.endswith(": choose one of the server's models with --remote-model (it lists: stub-model), "
                                  "and check the base URL (usually …/v1; OpenVINO Model Server: …/v3)\n")
    result = specchat("generate", "Hello", "--remote", stub.url("too-long"), "--remote-model", MODEL, tmp_path=tmp_path)
    assert result.returncode == 2 and result.stderr.startswith(f"{MODEL} on {host} (remote)\nerror: {host} cannot fit "
                                                               "this chat in its context")  # fmt: skip
    assert result.stderr.endswith(f": {CONTEXT_ADVICE.replace('Longest reply', '--max-new-tokens')}\n")
    result = specchat("generate", "Hello", "--remote", stub.url("ok"), "--mode", "compare", tmp_path=tmp_path)
    assert (result.returncode, result.stderr) == (
        2, "error: --mode compare runs on a model on this computer: leave out --remote\n")


def test_a_reply_cut_mid_way_is_kept_in_the_chat_and_said(stub, tmp_path):
    partial = "".join(REPLY_PIECES[:CUT_AFTER])
    result = specchat("chat", "--remote", stub.url("cut"), tmp_path=tmp_path, stdin="Say hello\nAgain\n/exit\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{partial}\n{partial}\n"
    said = "error: The server closed the stream before the reply ended (the partial reply was kept): try again"
    assert result.stderr.splitlines()[-2:] == [said, said]
    assert stub.requests[-1][1]["messages"] == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": partial},
        {"role": "user", "content": "Again"},
    ]


def test_options_of_this_computers_models_are_named_unused_with_remote(stub, tmp_path):
    from app.cli.commands import build_parser
    from app.cli.options import unused_options

    result = specchat("generate", "Say hello", "--remote", stub.url("ok"), "--n-ctx", "256", "--mode", "spec",
                      "--model", "Big", tmp_path=tmp_path)  # fmt: skip
    assert result.returncode == 0 and result.stdout == REPLY + "\n"
    assert result.stderr.splitlines()[:3] == [
        "note: --model is unused with --remote (the server runs its own model, with its own context and devices)",
        "note: --n-ctx is unused with --remote (the server runs its own model, with its own context and devices)",
        "note: --mode spec is unused: the server decodes as it does (only SpecChat's server takes a decoding mode)",
    ]
    notes = unused_options(build_parser().parse_args(["chat", "--api-key", "k", "--remote-model", "m"]))
    assert notes == ["--remote-model is unused without --remote", "--api-key is unused without --remote"]


def test_a_specchat_server_gets_the_mode_and_its_statistics_are_said(stub, tmp_path):
    result = specchat("generate", "Say hello", "--remote", stub.url("specchat"), "--mode", "ar", tmp_path=tmp_path)
    assert result.returncode == 0 and result.stdout == REPLY + "\n", result.stderr
    assert stub.requests[-1][1]["specchat"] == {"mode": "ar"}
    line = result.stderr.splitlines()[-1]  # SpecChat's server says how it decoded: the local line, no precision
    assert line.startswith("[ar] 9 tokens, TTFT ") and line.endswith(", prefilled 5/21, discarded 3 (1 roll), stop: eos")


def test_ctrl_c_during_a_remote_reply_keeps_what_came(tmp_path):
    """A remote reply carries text, not token ids: Ctrl+C after its first words said "stopped before the reply
    began: the message was not kept", though the words were shown and kept."""
    import json
    import signal
    import threading
    import time

    from remote_stub import ScriptedServer

    began, release = threading.Event(), threading.Event()

    def pieces():
        for piece in ("Hello", " there"):
            chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        began.set()
        release.wait(30)  # then silent

    def script(method, path):
        if method == "GET":
            return 200, {"Content-Type": "application/json"}, b'{"data": [{"id": "m"}]}'
        return 200, {"Content-Type": "text/event-stream"}, pieces()

    environment = {**os.environ, "SPECCHAT_DATA_DIR": str(tmp_path / "data"),
                   "SPECCHAT_CONFIG_DIR": str(tmp_path / "config")}  # fmt: skip
    with ScriptedServer(script) as server:
        process = subprocess.Popen([sys.executable, "-m", "app", "chat", "--remote", server.url],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=environment)  # fmt: skip
        process.stdin.write("Say hello\n")
        process.stdin.flush()
        assert began.wait(60)
        time.sleep(0.5)  # (the pieces reach the chat)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        release.set()
    assert process.returncode == 130 and out == "Hello there\n", err
    assert "stop: cancelled" in err.splitlines()[-1] and "not kept" not in err, err
