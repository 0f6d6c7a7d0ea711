"""The remote backend (app/backends/remote.py) against the OpenAI-compatible stub on 127.0.0.1 (tests/remote_stub.py):
the text and statistics that arrive, the SpecChat extension, and the message of every error."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from helpers import run_coroutine
from remote_stub import API_KEY, CUT_AFTER, MODEL, REPLY, REPLY_PIECES, SERVED_MODEL, SPECCHAT_STATS, RemoteStub

from app.backends.protocol import GenerationRequest
from app.backends.remote import RemoteBackend, RemoteError, RemoteModel, RemoteTarget, check_base_url
from inference.events import Finished, StepStats, TextDelta
from inference.settings import Decoding, GenerationSettings, SamplingSettings

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
    assert (stats.mode, stats.stop_reason, stats.text) == ("ar", "eos", REPLY)
    assert (stats.new_tokens, stats.prompt_tokens, stats.drafted, stats.acceptance_rate) == (
        len(REPLY_PIECES),
        21,
        0,
        None,
    )
    assert 0 < stats.ttft_ms < 5000
    # the stub sleeps 10 ms after each piece: 8 intervals after the first token take at least 80 ms
    assert 0 < stats.decode_tokens_per_s <= (len(REPLY_PIECES) - 1) / 0.08
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
        run_coroutine(RemoteBackend(RemoteTarget(stub.url("auth"))).list_models())
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
    assert events == [] and error.status == status
    assert text in str(error) and "\n" not in str(error)
    if status == 404:
        assert "choose a model with Fetch models under the model picker's Remote server… (Ctrl+L)" in str(error)


def test_a_stream_cut_mid_reply_keeps_the_partial_reply_then_says_so(stub):
    events, error, _ = collect(RemoteBackend(RemoteTarget(stub.url("cut"), MODEL)))
    assert text_of(events) == PARTIAL
    stats = finished(events)
    assert (stats.stop_reason, stats.text, stats.new_tokens) == ("interrupted", PARTIAL, CUT_AFTER)
    assert str(error) == (
        "The server closed the stream before the reply ended (the partial reply was kept): Regenerate to try again"
    )


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
    with pytest.raises(
        RemoteError, match=r"^localhost:8000 is not a server address: enter one like http://HOST:8000/v1"
    ):
        check_base_url("localhost:8000")
