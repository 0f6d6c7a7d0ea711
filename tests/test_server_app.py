"""The server application in-process: request mapping (``app.server.protocol``, no model needed) and the queue
(``create_app`` on a real ``InferenceWorker`` with the default model, through httpx's ASGI transport)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from helpers import run_coroutine

from app.backends.worker import InferenceWorker, ModelSpec
from app.server import create_app
from app.server.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    chat_request,
    completion_request,
    parse,
)
from inference.settings import ContextSettings, Decoding, GenerationSettings, SpeculativeSettings

DEFAULTS = GenerationSettings(
    decoding=Decoding.PROMPT_LOOKUP, context=ContextSettings(n_ctx=1024, n_keep="auto"), speculative=SpeculativeSettings(k=6)
)


def chat(**fields):
    body = {"messages": [{"role": "user", "content": "Hi"}], **fields}
    return chat_request(parse(ChatCompletionRequest, json.dumps(body).encode()), DEFAULTS, 8192)


def test_leading_system_messages_become_the_system_prompt():
    request = chat(messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "who are you?"}]},
        {"role": "assistant", "content": "Je suis..."},
        {"role": "system", "content": "Now in English."},
        {"role": "user", "content": "Again?"},
    ])
    assert request.system_prompt == "Be brief.\n\nAnswer in French."
    assert request.messages == [
        {"role": "user", "content": "Hello, who are you?"},
        {"role": "assistant", "content": "Je suis..."},
        {"role": "system", "content": "Now in English."},
        {"role": "user", "content": "Again?"},
    ]
    assert request.prompt is None


def test_omitted_fields_take_openai_sampling_and_the_servers_decoding():
    settings = chat().settings
    assert settings.sampling.temperature == 1.0 and settings.sampling.top_p == 1.0 and settings.sampling.seed is None
    assert settings.sampling.max_new_tokens == 512 and settings.sampling.stop_strings == ()
    assert settings.decoding is Decoding.PROMPT_LOOKUP and settings.speculative.k == 6
    assert settings.context == ContextSettings(n_ctx=1024, n_keep="auto")


def test_request_fields_and_the_extension_map_to_engine_settings():
    settings = chat(
        temperature=0, top_p=0.5, max_tokens=7, max_completion_tokens=9, stop="END", seed=3, presence_penalty=0.5,
        frequency_penalty=-0.5, user="someone", metadata={"x": 1},
        specchat={"mode": "ar", "k": 2, "adaptive_k": True, "n_ctx": 256, "n_keep": 8, "n_discard": 16},
    ).settings
    sampling = settings.sampling
    assert (sampling.temperature, sampling.top_p, sampling.max_new_tokens, sampling.seed) == (0.0, 0.5, 9, 3)
    assert sampling.stop_strings == ("END",) and (sampling.presence_penalty, sampling.frequency_penalty) == (0.5, -0.5)
    assert settings.decoding is Decoding.AUTOREGRESSIVE
    assert settings.speculative == SpeculativeSettings(k=2, adaptive=True)
    assert settings.context == ContextSettings(n_ctx=256, n_keep=8, n_discard=16)
    assert chat(stop=["a", "b"]).settings.sampling.stop_strings == ("a", "b")


def test_the_repetition_penalty_is_read_under_vllms_and_llama_cpps_names():
    assert chat().settings.sampling.repetition_penalty == 1.0  # the server's defaults: off
    vllm = chat(repetition_penalty=1.1, repeat_last_n=32).settings.sampling
    assert (vllm.repetition_penalty, vllm.repeat_last_n) == (1.1, 32)
    assert chat(repeat_penalty=1.2).settings.sampling.repetition_penalty == 1.2
    assert chat(repetition_penalty=1.3, repeat_penalty=1.2).settings.sampling.repetition_penalty == 1.3


def test_a_completion_is_the_raw_prompt():
    request = completion_request(parse(CompletionRequest, b'{"prompt": ["Once upon"], "max_tokens": 3}'), DEFAULTS, None)
    assert request.prompt == "Once upon" and request.messages == [] and request.settings.sampling.max_new_tokens == 3


@pytest.mark.parametrize("fields, param", [
    ({"max_completion_tokens": 0, "max_tokens": 5}, "max_completion_tokens"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [{"id": "1"}]}]}, "messages[0].tool_calls"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"logprobs": True}, "logprobs"),
    ({"specchat": {"n_keep": "all"}}, "specchat.n_keep"),
    ({"stop": ["a", 1]}, "stop"),
])
def test_refusals_name_the_field(fields, param):
    with pytest.raises(APIError) as refused:
        chat(**fields)
    assert refused.value.status == 400 and refused.value.param == param
    assert refused.value.body()["error"]["param"] == param


@pytest.mark.parametrize("fields, message", [
    ({"max_tokens": -5}, "max_tokens must be >= 1, got -5"),
    ({"max_completion_tokens": 0}, "max_completion_tokens must be >= 1, got 0"),
    ({"stop": [""]}, "stop must not contain an empty string"),
    ({"specchat": {"n_ctx": 8}}, "specchat.n_ctx must be in [16, 8192], got 8"),
    ({"specchat": {"mode": "spec_lookup", "k": 99}}, "specchat.k: K (draft tokens per step) must be in [1, 16], got 99"),
])
def test_refusals_say_the_fields_name_not_the_engines(fields, message):
    with pytest.raises(APIError) as refused:
        chat(**fields)
    assert refused.value.message == message


def test_values_that_ask_for_nothing_are_no_refusal():
    request = chat(tools=[], tool_choice="none", response_format={"type": "text"}, top_logprobs=0,
                   parallel_tool_calls=False, functions=[], logit_bias={})
    assert request.messages
    for fields in ({"tool_choice": "required"}, {"top_logprobs": True}, {"parallel_tool_calls": "yes"}):
        with pytest.raises(APIError):
            chat(**fields)


@pytest.fixture(scope="module")
def worker(int4_dir):
    worker = InferenceWorker()
    run_coroutine(worker.load(ModelSpec(int4_dir)))
    yield worker
    worker.shutdown()


def test_a_full_queue_answers_429_with_retry_after(worker):
    app = create_app(worker, model_id="m", max_queue=1)
    long = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 40, "temperature": 0}

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=120) as client:
            running = asyncio.ensure_future(client.post("/v1/chat/completions", json=long))
            while not app.state.gate.busy:
                await asyncio.sleep(0.01)
            waiting = asyncio.ensure_future(client.post("/v1/chat/completions", json={**long, "max_tokens": 2}))
            while app.state.gate.waiting < 1:
                await asyncio.sleep(0.01)
            refused = await client.post("/v1/chat/completions", json=long)
            health = (await client.get("/health")).json()
            return refused, health, await running, await waiting

    refused, health, running, waiting = run_coroutine(scenario())
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert health == {"status": "ok", "busy": True, "waiting": 1}
    assert running.status_code == 200 and running.json()["usage"]["completion_tokens"] > 0
    assert waiting.status_code == 200 and waiting.json()["usage"]["completion_tokens"] > 0
    assert not app.state.gate.busy and app.state.gate.waiting == 0


def test_an_empty_api_key_is_refused(worker):
    with pytest.raises(ValueError, match="empty"):
        create_app(worker, model_id="m", api_key="")
