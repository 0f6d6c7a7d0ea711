"""The remote backend against what llama.cpp's servers answer where it differs from OpenAI's API, as the stub
(tests/remote_stub.py) replays their bytes: a chat longer than the server's context, sampling options only their
extensions carry, a key asked for but not given."""

from __future__ import annotations

import threading

import pytest
from helpers import run_coroutine
from remote_stub import MODEL, RemoteStub

from app.backends.protocol import GenerationRequest
from app.backends.remote import RemoteBackend, RemoteTarget
from app.backends.remote_errors import CONTEXT_ADVICE, RemoteError
from inference.events import Finished, TextDelta
from inference.settings import GenerationSettings, SamplingSettings

REQUEST = GenerationRequest(
    messages=[{"role": "user", "content": "Tell me about Paris. " * 300}],
    system_prompt="",
    settings=GenerationSettings(sampling=SamplingSettings(max_new_tokens=8)),
)


@pytest.fixture(scope="module")
def stub():
    with RemoteStub() as server:
        yield server


def collect(backend: RemoteBackend, request: GenerationRequest = REQUEST):
    """Run one reply; returns (events, the RemoteError raised or None)."""
    events, error = [], None

    async def run():
        nonlocal error
        try:
            async for batch in backend.generate(request, threading.Event()):
                events.extend(batch)
        except RemoteError as raised:
            error = raised

    run_coroutine(run())
    return events, error


def test_a_chat_longer_than_a_llama_cpp_python_servers_context_is_said_in_its_words_not_as_a_cut_stream(stub):
    """Newcomer trial: llama_cpp.server --n_ctx 512, a chat of 1734 tokens. Its streamed answer is an empty event
    stream, which read "The server closed the stream before the reply ended (the partial reply was kept): Regenerate
    to try again": no reply was kept, and Regenerate fails the same way. An empty stream is asked once more without
    streaming, whose answer (here the server's 400) says why."""
    url = stub.url("too-long")
    host = url.split("/")[2]
    first = len(stub.requests)
    events, error = collect(RemoteBackend(RemoteTarget(url, MODEL)))
    assert events == []
    assert str(error) == (
        f"{host} cannot fit this chat in its context (400) (the server said: This model's maximum context length is "
        "512 tokens. However, you requested 1742 tokens (1734 in the messages, 8 in the completion). Please reduce the "
        f"length of the messages or completion.): {CONTEXT_ADVICE}"
    )
    assert error.status == 400
    sent = [body for _, body, _ in stub.requests[first:]]
    assert [body["stream"] for body in sent] == [True, False]
    assert "stream_options" in sent[0] and "stream_options" not in sent[1]
    assert sent[0]["messages"] == sent[1]["messages"] and sent[1]["max_tokens"] == 8


def test_a_stream_with_no_event_whose_unstreamed_answer_is_a_reply_gives_that_reply():
    """A server whose stream failed before its first event but whose second try answers: that answer is the reply."""
    from remote_stub import ScriptedServer

    whole = (b'{"object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant",'
             b'"content":"Paris."},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}')
    asked = []

    def script(method, path):
        asked.append(method)
        if len(asked) == 1:
            return 200, {"Content-Type": "text/event-stream"}, iter([])
        return 200, {"Content-Type": "application/json"}, whole

    with ScriptedServer(script) as server:
        events, error = collect(RemoteBackend(RemoteTarget(server.url, "m")))
    assert error is None and asked == ["POST", "POST"]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Paris."
    stats = events[-1].stats
    assert isinstance(events[-1], Finished) and (stats.stop_reason, stats.new_tokens) == ("eos", 2)


@pytest.mark.parametrize(
    "body",
    [
        # llama.cpp's llama-server (server-context.cpp), to a streamed request too
        b'{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), '
        b'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,"n_ctx":8192}}',
        # vLLM
        b'{"object":"error","message":"This model\'s maximum context length is 2048 tokens. However, you requested '
        b'2100 tokens (2036 in the messages, 64 in the completion). Please reduce the length of the messages or '
        b'completion.","type":"BadRequestError","param":null,"code":400}',
    ],
)
def test_a_chat_longer_than_the_servers_context_says_what_to_do(body):
    """The 400 of a prompt over the server's context read "refused the request (400)" and no more: a user did not
    learn that a new chat, a shorter reply or a larger server context helps."""
    from remote_stub import ScriptedServer

    with ScriptedServer(lambda method, path: (400, {"Content-Type": "application/json"}, body)) as server:
        events, error = collect(RemoteBackend(RemoteTarget(server.url, "m")))
    host = server.url.split("/")[2]
    assert events == [] and error.status == 400
    said = str(error)
    assert said.startswith(f"{host} cannot fit this chat in its context (400) (the server said: ")
    assert said.endswith(f"): {CONTEXT_ADVICE}")
    assert CONTEXT_ADVICE == (
        "start a new chat, or lower Longest reply; or restart the server with a larger context (llama-server -c N, "
        "vLLM --max-model-len N)"
    )


def test_another_refusal_of_a_request_is_not_said_to_be_about_the_context():
    from remote_stub import ScriptedServer

    body = b'{"error":{"message":"temperature must be at most 2","type":"invalid_request_error"}}'
    with ScriptedServer(lambda method, path: (400, {"Content-Type": "application/json"}, body)) as server:
        _, error = collect(RemoteBackend(RemoteTarget(server.url, "m")))
    host = server.url.split("/")[2]
    assert str(error) == f"{host} refused the request (400) (the server said: temperature must be at most 2)"


def test_top_k_and_min_p_are_sent_as_llama_server_and_vllm_read_them(stub):
    """Newcomer trial: Candidates (top-k) 1 at temperature 1.5 against llama_cpp.server gave a different reply each
    time: top_k was never sent, so the server sampled with its own top_k 40 and min_p 0.05 (asked with "top_k": 1
    it gave the greedy reply every time). top_k and min_p (extensions llama-server, llama-cpp-python, vLLM,
    LM Studio and SpecChat's server read) are sent when set; off (0), nothing is sent, as OpenAI's API has neither."""
    from dataclasses import replace

    def body_for(**sampling) -> dict:
        settings = replace(REQUEST.settings, sampling=replace(REQUEST.settings.sampling, **sampling))
        first = len(stub.requests)
        events, error = collect(RemoteBackend(RemoteTarget(stub.url("ok"), MODEL)), replace(REQUEST, settings=settings))
        assert error is None and len(stub.requests) == first + 1
        return stub.requests[-1][1]

    body = body_for(temperature=1.5, top_k=1, min_p=0.1)
    assert (body["temperature"], body["top_k"], body["min_p"]) == (1.5, 1, 0.1)
    body = body_for(temperature=1.5)
    assert "top_k" not in body and "min_p" not in body


def test_a_server_that_needs_a_key_none_was_given_for_says_so():
    """Newcomer trial: llama_cpp.server --api_key KEY, the API key field left empty: Fetch models said "refused the
    API key (401)", though no key had been sent. Without a key the message says the server needs one."""
    from remote_stub import ScriptedServer

    # llama_cpp.server 0.3.36 (--api_key), asked without one: HTTP/1.1 401 Unauthorized, content-type:
    # application/json, this body
    def script(method, path):
        return 401, {"Content-Type": "application/json"}, b'{"detail":"Invalid API key"}'

    with ScriptedServer(script) as server:
        host = server.url.split("/")[2]
        backend = RemoteBackend(RemoteTarget(server.url, "m"))
        with pytest.raises(RemoteError) as listing:
            run_coroutine(backend.list_models())
        _, error = collect(backend)
        _, wrong = collect(RemoteBackend(RemoteTarget(server.url, "m", "wrong-key")))
    assert str(listing.value) == (
        f"{host} needs an API key (401) (the server said: Invalid API key): enter it in the API key field"
    )
    assert str(error) == (
        f"{host} needs an API key (401) (the server said: Invalid API key): enter it under the model picker's Remote "
        "server… (Ctrl+L)"
    )
    assert str(wrong) == (
        f"{host} refused the API key (401) (the server said: Invalid API key): enter the right key under the model "
        "picker's Remote server… (Ctrl+L)"
    )


@pytest.mark.parametrize(
    "model,shown",
    [
        ("/tmp/h-rem-work/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"),  # llama_cpp.server
        ("models/qwen2.5-7b-instruct-q4_k_m.gguf", "qwen2.5-7b-instruct-q4_k_m.gguf"),  # llama-server -m models/...
        ("C:\\models\\Qwen.GGUF", "Qwen.GGUF"),
        ("/models/Qwen2.5-7B-Instruct", "Qwen2.5-7B-Instruct"),  # vLLM serving a folder
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),  # a Hugging Face id: kept whole
        ("llama3.2:latest", "llama3.2:latest"),
    ],
)
def test_a_model_served_by_its_file_path_is_named_by_its_file_name(model, shown):
    """Newcomer trial: llama_cpp.server --model /tmp/h-rem-work/SmolLM2-135M-Instruct.Q4_1.gguf lists that path as
    its model id, and the picker read "/tmp/h-rem-work/SmolLM2-135M-Instruct.Q4_1.gguf on 127.0.0.1:8088 (remo…",
    the server cut off; every footer and the status bar repeated the folder."""
    target = RemoteTarget("http://127.0.0.1:8088/v1", model)
    assert target.describe() == f"{shown} on 127.0.0.1:8088 (remote)"
    assert target.is_label(target.describe()) and target.is_label(f"{model} on 127.0.0.1:8088 (remote)")
    assert not target.is_label(f"{model} on 127.0.0.1:8089 (remote)")


def test_a_base_url_without_a_scheme_names_its_host_alone():
    """A base URL kept without its scheme (``127.0.0.1:8088/v1``, taken as http:// by every request) was named
    "127.0.0.1:8088/v1" in the picker and footers, its path with it."""
    assert RemoteTarget("127.0.0.1:8088/v1", "m").host == "127.0.0.1:8088"
    assert RemoteTarget("127.0.0.1:8088/v1", "m").describe() == "m on 127.0.0.1:8088 (remote)"
    assert RemoteTarget("https://user:pw@gpu-box:8000/v1", "m").host == "gpu-box:8000"
