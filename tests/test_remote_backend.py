"""The remote backend (app/backends/remote.py) against the OpenAI-compatible stub on 127.0.0.1 (tests/remote_stub.py):
the text and statistics that arrive, the SpecChat extension, and the message of every error."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from helpers import run_coroutine
from remote_stub import (
    API_KEY,
    CUT_AFTER,
    MODEL,
    REPLY,
    REPLY_PIECES,
    SERVED_MODEL,
    SPECCHAT_STATS,
    RemoteStub,
    ScriptedServer,
)

from app.backends.protocol import GenerationRequest
from app.backends.remote import (
    RemoteBackend,
    RemoteModel,
    RemoteTarget,
    check_base_url,
    plain_http_warning,
    specchat_options,
)
from app.backends.remote_errors import RemoteError
from app.backends.remote_io import MAX_ERROR_BYTES, MAX_LINE_BYTES
from app.backends.remote_stream import reply_limits
from app.server.errors import server_stopped
from inference.events import Finished, StepStats, TextDelta
from inference.settings import Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings

REQUEST = GenerationRequest(
    messages=[{"role": "user", "content": "Say hello"}],
    system_prompt="Be brief.",
    settings=GenerationSettings(decoding=Decoding.PROMPT_LOOKUP, sampling=SamplingSettings(max_new_tokens=32, seed=3)),
)
PARTIAL = "".join(REPLY_PIECES[:CUT_AFTER])


@pytest.fixture(scope="module")
def stub():
    with RemoteStub() as server:
        yield server


def collect(
    backend: RemoteBackend, cancel: threading.Event | None = None, cancel_after_s: float | None = None, request=None
):
    """Run one reply; returns (events, the RemoteError raised or None, seconds from cancel to the end or None)."""
    cancel = cancel or threading.Event()
    events, error, stopped = [], None, {}

    async def run():
        nonlocal error
        if cancel_after_s is not None:
            asyncio.get_running_loop().call_later(
                cancel_after_s, lambda: (stopped.setdefault("at", time.perf_counter()), cancel.set())
            )
        try:
            async for batch in backend.generate(request or REQUEST, cancel):
                events.extend(batch)
        except RemoteError as raised:
            error = raised

    run_coroutine(run())
    return events, error, (time.perf_counter() - stopped["at"]) if "at" in stopped else None


def text_of(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def finished(events):
    ends = [e for e in events if isinstance(e, Finished)]
    assert len(ends) == 1 and events[-1] is ends[0]
    return ends[0].stats


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_reply_streams_with_client_side_timing_and_the_servers_usage(stub):
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("ok"), MODEL)))
    assert error is None
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [d.text for d in deltas] == REPLY_PIECES and text_of(events) == REPLY
    assert {(d.token_id, d.from_draft) for d in deltas} == {(-1, False)}
    steps = [e for e in events if isinstance(e, StepStats)]
    assert [s.generated for s in steps] == list(range(1, len(REPLY_PIECES) + 1))
    assert all(b.elapsed_s > a.elapsed_s for a, b in zip(steps, steps[1:]))
    assert {(s.cache_len, s.n_ctx) for s in steps} == {(0, 0)}  # the server's context is unknown here
    stats = finished(events)
    assert (stats.mode, stats.stop_reason, stats.text) == ("remote", "eos", REPLY)
    assert (stats.new_tokens, stats.prompt_tokens, stats.drafted, stats.acceptance_rate) == (
        len(REPLY_PIECES),
        21,
        0,
        None,
    )
    assert 0 < stats.ttft_ms < 5000
    # the decode rate counts the tokens after the first over the time from the first to the last, as received
    span = steps[-1].elapsed_s - steps[0].elapsed_s
    assert stats.decode_tokens_per_s == pytest.approx((len(REPLY_PIECES) - 1) / span, rel=1e-9)
    # the stub sleeps 10 ms after each piece, 80 ms from the first to the last; the first may be read up to 20 ms
    # late on a busy machine (the bound without that margin failed once at 100.5, the last pieces read on time)
    assert 0 < stats.decode_tokens_per_s <= (len(REPLY_PIECES) - 1) / 0.06
    path, body, auth = stub.requests[-1]
    assert path == "/ok/v1/chat/completions" and auth is None
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    assert (body["stream"], body["stream_options"], body["max_tokens"], body["seed"]) == (
        True,
        {"include_usage": True},
        32,
        3,
    )
    assert "specchat" not in body  # only a SpecChat server gets the extension


def test_the_reply_is_credited_to_the_model_the_server_says_answered(stub):
    """A server that answers any model name (llama-server, specchat serve) says in its chunks which model did."""
    ok = RemoteBackend(RemoteTarget(stub.url("ok"), MODEL))
    collect(ok)
    assert ok.answered_by is None and ok.describe_answer() == f"{MODEL} on {ok.target.host} (remote)"
    typed = RemoteBackend(RemoteTarget(stub.url("any-name"), "gpt-4"))  # a name typed by hand
    events, error, _ = collect(typed)
    assert error is None and text_of(events) == REPLY
    assert typed.answered_by == SERVED_MODEL
    assert typed.describe_answer() == f"{SERVED_MODEL} on {typed.target.host} (remote)"


def test_the_repetition_penalty_is_sent_under_the_names_servers_read(stub):
    from dataclasses import replace

    assert "repetition_penalty" not in stub_body(stub, REQUEST)  # 1.0: off, nothing sent
    sampling = replace(REQUEST.settings.sampling, repetition_penalty=1.1, repeat_last_n=48)
    body = stub_body(stub, replace(REQUEST, settings=replace(REQUEST.settings, sampling=sampling)))
    assert (body["repetition_penalty"], body["repeat_penalty"], body["repeat_last_n"]) == (1.1, 1.1, 48)


def stub_body(stub, request) -> dict:
    """The JSON body the backend sent to the stub for ``request``."""
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("ok"), MODEL)), request=request)
    assert error is None and text_of(events) == REPLY
    return stub.requests[-1][1]


def test_models_are_listed_and_a_specchat_server_is_recognised(stub):
    plain = RemoteBackend(RemoteTarget(stub.url("ok") + "/"))
    assert run_coroutine(plain.list_models()) == [RemoteModel(MODEL, False)] and plain.specchat is False
    spec = RemoteBackend(RemoteTarget(stub.url("specchat"), MODEL))
    assert run_coroutine(spec.list_models()) == [RemoteModel(MODEL, True)] and spec.specchat is True


def test_a_specchat_server_gets_the_mode_and_fills_the_acceptance_statistics(stub):
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("specchat"), MODEL), specchat=True))
    assert error is None and text_of(events) == REPLY
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [d.from_draft for d in deltas] == [i % 2 == 1 for i in range(len(REPLY_PIECES))]  # the draft highlighting
    drafting = [(s.drafted, s.accepted, s.k, s.generated) for s in events if isinstance(s, StepStats) and s.drafted]
    assert drafting == [(4, 3, 4, 4), (4, 3, 4, 8)]  # the acceptance graph's points; the totals (8, 6) add none
    stats = finished(events)
    assert (stats.mode, stats.drafter, stats.drafted, stats.accepted) == ("spec", "lookup", 8, 6)
    assert stats.acceptance_rate == SPECCHAT_STATS["acceptance_rate"]
    assert (stats.discarded_tokens, stats.rolls, stats.prefilled_tokens) == (3, 1, 5)
    assert (stats.prompt_tokens, stats.reused_tokens) == (21, 16)  # OpenAI's usage.prompt_tokens_details.cached_tokens
    assert stub.requests[-1][1]["specchat"] == {"mode": "spec_lookup", "k": REQUEST.settings.speculative.k}


def test_the_api_key_is_sent_and_a_wrong_one_is_said(stub):
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("auth"), MODEL, API_KEY)))
    assert error is None and text_of(events) == REPLY
    assert stub.requests[-1][2] == f"Bearer {API_KEY}"
    host = stub.url("ok").split("/")[2]
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("auth"), MODEL, "wrong")))
    assert events == [] and error.status == 401
    assert str(error) == (
        f"{host} refused the API key (401) (the server said: Invalid API key): enter the right key under "
        "the model picker's Remote server… (Ctrl+L)"
    )
    with pytest.raises(RemoteError) as listing:  # asked from the remote server dialog: its field is named
        run_coroutine(RemoteBackend(RemoteTarget(stub.url("auth"), api_key="wrong")).list_models())
    assert str(listing.value).endswith("refused the API key (401) (the server said: Invalid API key): enter the right "
                                       "key in the API key field")
    with pytest.raises(RemoteError) as no_list:  # a base URL without /v1
        run_coroutine(RemoteBackend(RemoteTarget(stub.url("ok").removesuffix("/v1") + "/v2")).list_models())
    assert "has no model list at" in str(no_list.value) and "check the base URL (usually …/v1" in str(no_list.value)
    assert "Ctrl+L" not in str(no_list.value) and "model ''" not in str(no_list.value)


@pytest.mark.parametrize(
    "behaviour, model, status, text",
    [
        ("ok", "no-such-model", 404, "has no model 'no-such-model' or no such API route (404 for "),
        ("busy", MODEL, 429, "is busy (429: too many requests) (the server said: queue full): retry in 7 s"),
        ("broken", MODEL, 500, "failed (500) (the server said: engine crashed): retry, or check the server's log"),
    ],
)
def test_refusals_are_said_with_what_to_do(stub, behaviour, model, status, text):
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url(behaviour), model)))
    assert events == [] and error.status == status and not error.server_stopped
    assert text in str(error) and "\n" not in str(error)
    if status == 404:
        assert "choose a model with Fetch models under the model picker's Remote server… (Ctrl+L)" in str(error)



def test_a_request_a_stopping_specchat_server_answers_with_its_503_is_said_once_in_the_windows_words(stub):
    """A request `specchat serve` answered with its 503 as it stopped (one that came once its queue had closed) read
    "127.0.0.1:PORT failed (503) (the server said: the server stopped before this request's turn came (it is
    shutting down): nothing was generated; send the request again once the server runs): retry, or check the
    server's log": the stop said twice, with advice for an API client. It reads as the same stop before the first
    token in a stream does."""
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("stopped"), MODEL)))
    assert events == [] and error.status == 503 and not error.unreachable
    assert error.server_stopped  # (the window's advice: send once the server runs again)
    assert str(error) == "The server stopped before the reply began (it is shutting down)"
    assert [model.id for model in run_coroutine(RemoteBackend(RemoteTarget(stub.url("stopped"))).list_models())] == [
        MODEL]  # (its model list is answered as before)

# the 404 page of `python3 -m http.server`, as a trial pointed the window at it
HTML_404 = b"""<!DOCTYPE HTML>
<html lang="en">
    <head>
        <meta charset="utf-8">
        <title>Error response</title>
    </head>
    <body>
        <h1>Error response</h1>
        <p>Error code: 404</p>
        <p>Message: File not found.</p>
    </body>
</html>
"""


def test_a_web_page_that_answers_is_said_as_one_not_quoted_as_html():
    """A newcomer trial pointed the dialog at `python3 -m http.server`: Fetch models quoted its page's markup
    ("the server said: <!DOCTYPE HTML> <html lang="en"> <head> <meta charset=...") in the dialog."""

    def script(method, path):
        return 404, {"Content-Type": "text/html;charset=utf-8"}, HTML_404

    with ScriptedServer(script) as server:
        host = server.url.split("/")[2]
        with pytest.raises(RemoteError) as listing:
            run_coroutine(RemoteBackend(RemoteTarget(server.url)).list_models())
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert str(listing.value) == (
        f"{host} has no model list at {server.url}/models (404) (the server sent a web page, 'Error response', "
        "not an OpenAI-compatible API's answer): check the base URL (usually …/v1; OpenVINO Model Server: …/v3)"
    )
    assert events == [] and "<" not in str(error) and "(the server sent a web page, 'Error response'," in str(error)


def test_a_stream_cut_mid_reply_keeps_the_partial_reply_then_says_so(stub):
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("cut"), MODEL)))
    assert text_of(events) == PARTIAL
    stats = finished(events)
    assert (stats.stop_reason, stats.text, stats.new_tokens) == ("interrupted", PARTIAL, CUT_AFTER)
    assert str(error) == (
        "The server closed the stream before the reply ended (the partial reply was kept): Regenerate to try again"
    )


@pytest.mark.serial  # a wall-time bound
def test_a_server_that_stops_sending_times_out_keeping_the_partial_reply(stub):
    started = time.perf_counter()
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("silent"), MODEL), read_timeout_s=1.0))
    assert 1.0 <= time.perf_counter() - started < 5.0
    assert text_of(events) == PARTIAL and finished(events).stop_reason == "interrupted"
    host = stub.url("ok").split("/")[2]
    assert str(error) == (
        f"{host} sent nothing for 1 s (the partial reply was kept): check that the server still runs, then Regenerate"
    )


def test_stop_during_a_silent_stream_returns_at_once(stub):
    events, error, stop_s = collect(
        RemoteBackend(RemoteTarget(stub.url("silent"), MODEL), read_timeout_s=60), cancel_after_s=0.5
    )
    assert error is None and stop_s < 1.0, stop_s
    assert text_of(events) == PARTIAL
    assert finished(events).stop_reason == "cancelled"


@pytest.mark.serial  # a wall-time bound
def test_cancelling_the_consumer_during_a_silent_stream_leaves_no_task_behind(stub):
    backend = RemoteBackend(RemoteTarget(stub.url("silent"), MODEL), read_timeout_s=60)
    texts = []

    async def consume():
        async for batch in backend.generate(REQUEST, threading.Event()):
            texts.extend(e.text for e in batch if isinstance(e, TextDelta))

    async def run():
        task = asyncio.ensure_future(consume())
        while "".join(texts) != PARTIAL:
            await asyncio.sleep(0.02)
        started = time.perf_counter()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.perf_counter() - started, asyncio.all_tasks() - {asyncio.current_task()}

    seconds, left = run_coroutine(run())
    assert seconds < 1.0 and left == set()


def test_connection_refused_dns_failure_and_tls_error_are_said(stub):
    port = free_port()
    _, error, _ = collect(RemoteBackend(RemoteTarget(f"http://127.0.0.1:{port}/v1", MODEL)))
    assert (
        str(error) == f"127.0.0.1:{port} refused the connection: check that the server is running and the port is right"
    )
    _, error, _ = collect(RemoteBackend(RemoteTarget("http://specchat-test.invalid:8000/v1", MODEL)))
    assert str(error) == "The server name specchat-test.invalid was not found (DNS lookup failed): check the base URL"
    https = stub.url("ok").replace("http://", "https://")  # TLS to a plain-HTTP port
    with pytest.raises(RemoteError, match=r"^TLS error with 127\.0\.0\.1:\d+ \(.+\): check the server's certificate"):
        run_coroutine(RemoteBackend(RemoteTarget(https, MODEL)).list_models())


def test_a_v3_base_url_is_used_as_given(stub):
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("ok", "v3"), MODEL)))
    assert error is None and text_of(events) == REPLY
    assert stub.requests[-1][0] == "/ok/v3/chat/completions"


def test_a_base_url_is_checked_and_taken_as_given():
    assert check_base_url(" http://host:8000/v3/ ") == "http://host:8000/v3"
    with pytest.raises(RemoteError, match=r"^not a url is not a server address: enter one like http://HOST:8000/v1"):
        check_base_url("not a url")
    with pytest.raises(RemoteError, match=r"^ftp://host/v1 is not a server address"):
        check_base_url("ftp://host/v1")
    for empty in ("", "  "):  # a trial's OK on an empty field read "the base URL is not a server address: …"
        with pytest.raises(RemoteError, match=r"^The base URL is empty: enter one like http://HOST:8000/v1 "):
            check_base_url(empty)
    for broken in ("http://[::1:8000/v1", "http://host:80a/v1"):  # urllib raises ValueError for these
        with pytest.raises(RemoteError, match="is not a server address"):
            check_base_url(broken)
        assert plain_http_warning(broken, "key") is None


def test_a_base_url_without_a_scheme_is_taken_as_http(stub):
    """LM Studio and Jan take ``localhost:1234/v1``; it was refused as "not a server address"."""
    assert check_base_url(" localhost:8080/v1/ ") == "http://localhost:8080/v1"
    bare = stub.url("ok").removeprefix("http://")  # 127.0.0.1:PORT/ok/v1
    backend = RemoteBackend(RemoteTarget(bare, MODEL))
    assert run_coroutine(backend.list_models()) == [RemoteModel(MODEL, False)]
    events, error, _ = collect(backend)
    assert error is None and text_of(events) == REPLY
    assert "sent unencrypted to gpu-box" in plain_http_warning("gpu-box:8000/v1", "sk-1")  # http: the key is warned of


def test_the_query_of_a_base_url_is_kept_on_every_request():
    """Azure's base URLs carry ``?api-version=...``; the routes were appended after the query."""
    asked = []

    def script(method, path):
        asked.append(path)
        if path == "/v1/models?api-version=2024-02-01":
            return 200, {"Content-Type": "application/json"}, json.dumps({"data": [{"id": MODEL}]}).encode()
        if path == "/v1/chat/completions?api-version=2024-02-01":
            return 200, {"Content-Type": "text/event-stream"}, events_of(delta("Hi", "stop"))
        return 404, {"Content-Type": "text/plain"}, b"no such route"

    with ScriptedServer(script) as server:
        backend = RemoteBackend(RemoteTarget(server.url + "/?api-version=2024-02-01", MODEL))
        assert run_coroutine(backend.list_models()) == [RemoteModel(MODEL, False)]
        events, error, _ = collect(backend, request=SMALL)
    assert error is None and text_of(events) == "Hi"
    assert asked == ["/v1/models?api-version=2024-02-01", "/v1/chat/completions?api-version=2024-02-01"]


def test_a_base_url_with_a_password_is_refused_without_repeating_it():
    with pytest.raises(RemoteError) as refused:
        check_base_url("http://alice:s3cret@gpu-box:8000/v1")
    message = str(refused.value)
    assert "s3cret" not in message and "alice" not in message
    assert "holds a user name or password" in message and "enter http://gpu-box:8000/v1" in message
    assert "API key field" in message
    assert RemoteTarget("http://alice:s3cret@gpu-box:8000/v1", "m").describe() == "m on gpu-box:8000 (remote)"


def test_a_key_sent_over_plain_http_to_another_computer_is_warned_about():
    assert "sent unencrypted to gpu-box" in plain_http_warning("http://gpu-box:8000/v1", "sk-1")
    assert "sent unencrypted to 192.0.2.7" in plain_http_warning(" http://192.0.2.7/v1", "sk-1")
    for url, key in (("https://gpu-box/v1", "sk-1"), ("http://gpu-box:8000/v1", ""), ("http://127.0.0.1:8000/v1", "k"),
                     ("http://localhost:8000/v1", "k"), ("http://[::1]:8000/v1", "k"), ("not a url", "k")):
        assert plain_http_warning(url, key) is None, url


# --- servers that do not play by the rules (tests/remote_stub.py's ScriptedServer) ----------------------------------

SMALL = GenerationRequest(messages=[{"role": "user", "content": "Hi"}], system_prompt="",
                          settings=GenerationSettings(sampling=SamplingSettings(max_new_tokens=16)))


def events_of(*chunks: dict | bytes) -> list[bytes]:
    """Server-sent events of ``chunks`` (a dict as JSON with raw UTF-8, bytes as they are), then ``[DONE]``."""
    return [c if isinstance(c, bytes) else b"data: " + json.dumps(c, ensure_ascii=False).encode() + b"\n\n"
            for c in chunks] + [b"data: [DONE]\n\n"]


def stream(body) -> ScriptedServer:
    """A server whose chat completions stream ``body`` (its model list: one model)."""
    def script(method, path):
        if path.endswith("/models"):
            return 200, {"Content-Type": "application/json"}, json.dumps({"data": [{"id": MODEL}]}).encode()
        return 200, {"Content-Type": "text/event-stream"}, body
    return ScriptedServer(script)


def delta(text: str, finish=None) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def test_events_are_split_at_cr_and_lf_only_so_raw_unicode_line_separators_arrive_whole():
    """JSON may carry U+2028, U+2029 and U+0085 unescaped; httpx's aiter_lines() broke lines at them too. Events
    end in LF, CRLF (here split between two network chunks) or CR."""
    pieces = ["one\u2028two", " three\u2029four", " five\x85six"]
    body = [b"data: " + json.dumps(delta(pieces[0]), ensure_ascii=False).encode() + b"\r",
            b"\n\r\n",  # the CRLF of the line above split across chunks, then a blank line
            b"data: " + json.dumps(delta(pieces[1]), ensure_ascii=False).encode() + b"\r\r",
            *events_of(delta(pieces[2]), delta("", "stop"))]
    with stream(body) as server:
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert error is None and text_of(events) == "".join(pieces)
    assert finished(events).stop_reason == "eos"


def json_answer(answer: dict) -> ScriptedServer:
    """A server whose chat completions answer the streamed request with ``answer`` as a plain JSON body."""
    def script(method, path):
        if path == "/v1/chat/completions":
            return 200, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(answer).encode()
        return 404, {"Content-Type": "text/plain"}, b"no such route"
    return ScriptedServer(script)


def test_a_whole_completion_answered_to_a_streamed_request_is_the_reply():
    """llama-server and some proxies answer ``stream: true`` with one chat.completion in JSON; that was "the server
    closed the stream"."""
    completion = {"object": "chat.completion", "model": "served-model",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello whole"},
                               "finish_reason": "length"}],
                  "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}
    with json_answer(completion) as server:
        backend = RemoteBackend(RemoteTarget(server.url, MODEL))
        events, error, _ = collect(backend, request=SMALL)
    assert error is None and text_of(events) == "Hello whole"
    stats = finished(events)
    assert (stats.stop_reason, stats.new_tokens, stats.prompt_tokens) == ("max_new_tokens", 3, 7)
    assert backend.answered_by == "served-model"


def test_a_json_error_answered_to_a_streamed_request_is_said():
    with json_answer({"error": {"message": "the context is too long", "type": "invalid_request_error"}}) as server:
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert events == []
    assert str(error) == "The server stopped the reply with an error: the context is too long"
    assert not error.server_stopped
    # a SpecChat server stopping before the reply began: once, in the window's words (not its advice to API clients)
    with json_answer(server_stopped().body()) as server:
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert events == [] and str(error) == "The server stopped before the reply began (it is shutting down)"
    assert error.server_stopped
    with json_answer({"detail": "nothing here"}) as server:
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert events == [] and str(error) == (
        f"{server.url}/chat/completions answered with JSON that is not a chat completion "
        "('{\"detail\": \"nothing here\"}'): check the base URL"
    )


def endless(piece: bytes, total: int, sent: list[int]):
    """``piece`` again and again up to ``total`` bytes, counting in ``sent`` what was handed to the socket."""
    while sent[0] < total:
        sent[0] += len(piece)
        yield piece


def test_a_line_without_an_end_is_refused_once_it_passes_the_line_limit():
    sent = [0]
    with stream(endless(b"data: " + b"x" * 65536, 64 * 1024 * 1024, sent)) as server:
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert MAX_LINE_BYTES == 4 * 2**20 and events == [] and "sent a line longer than 4 MiB: not an OpenAI stream" in str(error)
    assert sent[0] < 24 * 1024 * 1024  # the client left after about 4 MB (the rest: socket buffers)


def test_a_reply_is_cut_once_it_passes_its_max_new_tokens_keeping_what_came():
    """A server that ignores max_tokens (or a man in the middle) cannot fill the window's memory."""
    sent = [0]
    with stream(endless(events_of(delta("word "))[0], 10_000_000, sent)) as server:
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    max_events, _ = reply_limits(16)
    stats = finished(events)
    assert stats.stop_reason == "interrupted" and stats.new_tokens == max_events
    assert text_of(events) == "word " * max_events
    assert str(error).startswith("The server sent more than a reply of at most 16 new tokens can hold (the partial "
                                 "reply was kept)")
    with stream(events_of(delta("x" * 100_000), delta("y"))) as server:  # a "token" of 100,000 characters, then more
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert "does not respect max_tokens" in str(error) and len(text_of(events)) == 100_000


def test_a_model_list_and_an_error_body_are_read_within_bounds():
    sent = [0]

    def script(method, path):
        if path.endswith("/models"):
            return 200, {}, b'{"data": [' + b'{"id": "m"}, ' * 500_000 + b'{"id": "last"}]}'  # 6.5 MB of models
        return 500, {"Content-Type": "text/plain"}, endless(b"engine crashed. " * 4096, 64 * 1024 * 1024, sent)

    with ScriptedServer(script) as server:
        with pytest.raises(RemoteError, match=r"/models sent a model list larger than 4 MiB: check the base URL"):
            run_coroutine(RemoteBackend(RemoteTarget(server.url)).list_models())
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert events == [] and error.status == 500
    assert "failed (500) (the server said: engine crashed. engine crashed." in str(error) and len(str(error)) < 400
    assert MAX_ERROR_BYTES <= sent[0] < 24 * 1024 * 1024  # the client read the first 64 KiB, and left


WRONG_CHUNKS = [
    ({"choices": {"0": {"delta": {"content": "x"}}}}, "choices is not a list"),
    ({"choices": ["x"]}, "choice is not an object"),
    ({"choices": [{"delta": "hello"}]}, "delta is not an object"),
    ({"choices": [{"delta": {"content": 5}}]}, "content is not text"),
    ({"choices": [{"delta": {"content": ["a"]}}]}, "content is not text"),
    ({"choices": [{"delta": {}, "finish_reason": 1}]}, "finish_reason is not text"),
    ({"choices": [], "usage": [21, 9]}, "usage is not an object"),
    (b"data: " + b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n\n", "not an OpenAI stream"),
    (b"data: " + b'{"choices": [], "x": ' + b"[" * 40 + b"]" * 40 + b"}\n\n", "not an OpenAI stream"),
]


@pytest.mark.parametrize("chunk, said", WRONG_CHUNKS, ids=[said + str(i) for i, (_, said) in enumerate(WRONG_CHUNKS)])
def test_json_of_another_shape_than_openais_is_a_remote_error_keeping_the_partial_reply(chunk, said):
    with stream(events_of(delta("Hello"), chunk)) as server:
        events, error, _ = collect(RemoteBackend(RemoteTarget(server.url, MODEL)), request=SMALL)
    assert isinstance(error, RemoteError) and said in str(error) and "check the base URL" in str(error)
    assert text_of(events) == "Hello" and finished(events).stop_reason == "interrupted"


@pytest.mark.parametrize("body", [
    b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"data": {"id": "m"}}',
    b'["m"]',
])
def test_a_model_list_of_another_shape_is_a_remote_error(body):
    with ScriptedServer(lambda method, path: (200, {"Content-Type": "application/json"}, body)) as server:
        with pytest.raises(RemoteError, match="did not answer with a model list: check that the base URL"):
            run_coroutine(RemoteBackend(RemoteTarget(server.url)).list_models())


def test_odd_entries_of_a_model_list_are_skipped_and_said_only_when_none_is_left():
    """One entry without a string id refused the whole list (a newcomer trial)."""
    odd = [{"object": "model"}, {"id": 5}, {"id": {"name": "m"}}, {"id": ""}, None, "m"]
    bodies = {"/v1/models": {"data": [{"id": "a"}, *odd, {"id": "b", "owned_by": "specchat"}]},
              "/odd/v1/models": {"data": odd}, "/none/v1/models": {"data": []}}

    def script(method, path):
        if path in bodies:
            return 200, {"Content-Type": "application/json"}, json.dumps(bodies[path]).encode()
        return 404, {"Content-Type": "text/plain"}, b"no such route"

    with ScriptedServer(script) as server:
        backend = RemoteBackend(RemoteTarget(server.url))
        assert run_coroutine(backend.list_models()) == [RemoteModel("a", False), RemoteModel("b", True)]
        assert backend.specchat is True
        odd_url = server.url.replace("/v1", "/odd/v1")
        with pytest.raises(RemoteError) as refused:
            run_coroutine(RemoteBackend(RemoteTarget(odd_url)).list_models())
        assert str(refused.value) == (
            f"{odd_url}/models listed 6 entries, none with a model id to ask for: check that the base URL is the API's "
            "(it usually ends in /v1; OpenVINO Model Server's in /v3)"
        )
        assert run_coroutine(RemoteBackend(RemoteTarget(server.url.replace("/v1", "/none/v1"))).list_models()) == []


def test_a_specchat_server_gets_only_the_options_its_mode_uses():
    """Auto and plain decoding get no K (the server would name it unused: Auto chooses its own); a fixed mode its K,
    or adaptive_k where K is chosen per step."""
    def sent(decoding, **speculative):
        return specchat_options(GenerationSettings(decoding=decoding, speculative=SpeculativeSettings(k=5, **speculative)))

    assert sent(Decoding.AUTO) == {"mode": "auto"} and sent(Decoding.AUTOREGRESSIVE) == {"mode": "ar"}
    assert sent(Decoding.DRAFT_MODEL) == {"mode": "spec_model", "k": 5}
    assert sent(Decoding.PROMPT_LOOKUP, adaptive=True) == {"mode": "spec_lookup", "adaptive_k": True}


def test_the_secrets_of_a_base_url_are_never_in_what_is_said_but_are_sent():
    """A base URL may carry its credentials in its query (``?api_key=``, ``?key=``, ``?token=``): errors quoted the
    URL whole, so the secret showed in the status bar, reply footers and exports."""
    from app.backends.remote_errors import shown_url

    assert shown_url("https://gpu-box/v1?api-version=2024-02-01&api_key=SECRET&token=T0K&Key=K") == (
        "https://gpu-box/v1?api-version=2024-02-01&api_key=***&token=***&Key=***"
    )
    assert shown_url("http://alice:s3cret@gpu-box:8000/v1") == "http://alice:***@gpu-box:8000/v1"
    assert shown_url("http://gpu-box:8000/v1") == "http://gpu-box:8000/v1"
    asked = []

    def script(method, path):
        asked.append(path)
        if path.startswith("/v1/chat/completions"):
            return 200, {"Content-Type": "text/event-stream"}, [b"data: not json\n\n"]
        return 404, {"Content-Type": "text/plain"}, b"no such route"

    with ScriptedServer(script) as server:
        backend = RemoteBackend(RemoteTarget(server.url + "?key=SECRET", MODEL))
        with pytest.raises(RemoteError) as listing:
            run_coroutine(backend.list_models())
        _, error, _ = collect(backend, request=SMALL)
    assert asked == ["/v1/models?key=SECRET", "/v1/chat/completions?key=SECRET"]  # the requests carry it
    assert "has no model list at" in str(listing.value) and "?key=***" in str(listing.value)
    assert "not an OpenAI stream" in str(error) and "?key=***" in str(error)
    assert "SECRET" not in str(listing.value) + str(error)
    with pytest.raises(RemoteError) as refused:
        check_base_url("ftp://gpu-box/v1?token=SECRET")
    assert "SECRET" not in str(refused.value) and "token=***" in str(refused.value)


def test_a_specchat_servers_drafter_statistics_name_autos_drafters_in_the_footer_as_a_local_replys():
    """A remote Auto reply from ``specchat serve`` read the server's mode and drafter but not its ``drafters``: the
    footer said "Auto decoding" where the local reply's says what Auto drafted with. The server's statistics, read
    back through JSON, give the footer the local reply's words; names and counts a server should not send are read
    as absent."""
    from app.backends.remote_stream import ReplyClock
    from app.gui.reply_format import footer_text, mode_text, stats_dict
    from app.server.replies import stats_object
    from inference.events import DrafterUse, GenerationStats

    local = GenerationStats(
        mode="auto", drafter="lookup", new_tokens=46, drafted=76, accepted=30, fallback_tokens=1, final_k=2,
        by_drafter={"head": DrafterUse(30, 60, 20, 2), "lookup": DrafterUse(4, 16, 10, 4), "plain": DrafterUse(1)},
        k_steps={0: 1, 1: 10, 2: 20, 4: 4},
    )  # fmt: skip
    extension = json.loads(json.dumps(stats_object(local)))
    clock = ReplyClock()
    clock.delta("Hi")
    remote = clock.stats(extension, {"completion_tokens": 46}, "eos")
    assert (remote.by_drafter, remote.k_steps) == (local.by_drafter, local.k_steps)
    assert (remote.fallback_tokens, remote.final_k) == (1, 2)
    words = mode_text(stats_dict(local))
    assert words == ("Auto (draft head 30 steps at K up to 2, 33% accepted; prompt lookup 4 steps at K up to 4, "
                     "62% accepted; plain 1 step)"), words
    assert mode_text(stats_dict(remote)) == words and words in footer_text(stats_dict(remote))
    odd = {**extension, "drafters": {"head": {"steps": "30", "drafted": -4}, "<b>server</b>": {"steps": 3}, "plain": 7},
           "k_steps": {"2": 20, "99": 1, "x": 2, "1": -3, "²": 1}}
    hostile = ReplyClock().stats(odd, {}, "eos")
    assert (hostile.by_drafter, hostile.k_steps) == ({"head": DrafterUse()}, {2: 20})
    assert ReplyClock().stats({**extension, "drafters": [1], "k_steps": "2"}, {}, "eos").by_drafter == {}


def test_a_specchat_servers_spec_reply_without_a_drafter_is_named_no_drafter_of_this_computers():
    """A SpecChat server's statistics that say mode spec and name no drafter were given the drafter this window asked
    for (the request's prompt lookup), a word of this computer's the server never reported: the drafter is left out,
    and the footer says only "Speculative"."""
    from app.backends.remote_stream import ReplyClock
    from app.gui.reply_format import export_footer_text, footer_text, mode_text, stats_dict

    assert REQUEST.settings.decoding is Decoding.PROMPT_LOOKUP  # what the window asked for
    clock = ReplyClock()
    clock.delta("Hi")
    stats = clock.stats({"mode": "spec", "drafter": None, "drafted": 4, "accepted": 2}, {}, "eos")
    assert (stats.mode, stats.drafter) == ("spec", None)
    assert mode_text(stats_dict(stats)) == "Speculative"
    assert footer_text(stats_dict(stats)).startswith("Speculative · ")
    assert export_footer_text(stats_dict(stats)).startswith("Speculative decoding · ")
    named = clock.stats({"mode": "spec", "drafter": "head"}, {}, "eos")
    assert named.drafter == "head" and mode_text(stats_dict(named)) == "Speculative (draft head)"
    # a word of the server's that is no mode or drafter of SpecChat's never reaches a footer (helper's finding: a
    # drafter "<b>x</b>" read "Speculative (<b>x</b>)")
    odd = clock.stats({"mode": "<b>x</b>", "drafter": "<b>x</b>"}, {}, "eos")
    assert (odd.mode, odd.drafter) == ("remote", None)
    unknown = clock.stats({"mode": "spec", "drafter": "oracle"}, {}, "eos")
    assert (unknown.mode, unknown.drafter) == ("spec", None)
    assert "oracle" not in footer_text(stats_dict(unknown)) and "<b>" not in footer_text(stats_dict(odd))
