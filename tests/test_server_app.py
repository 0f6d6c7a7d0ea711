"""The server application in-process: request mapping (``app.server.chat_request``, ``completion_request``, no
model needed) and the queue (``create_app`` on a real ``InferenceWorker`` with the default model, through httpx's ASGI transport)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading

import httpx
import pytest
from helpers import run_coroutine

from app.backends.protocol import GenerationRequest
from app.backends.worker import InferenceWorker, ModelSpec
from app.cli.serve import api_key_of
from app.server import create_app
from app.server.chat_request import ChatCompletionRequest, chat_request
from app.server.completion_request import MAX_PROMPTS, CompletionRequest, completion_requests
from app.server.errors import APIError
from app.server.request_common import ServerLimits, parse
from inference.constraints import json_object_grammar, json_schema_grammar
from inference.events import Finished, GenerationStats, StepStats, TextDelta, TokenLogprob
from inference.rope import RopeUnsupportedError
from inference.settings import (
    ContextSettings,
    Decoding,
    GenerationSettings,
    SamplingSettings,
    SettingError,
    SpeculativeSettings,
)

#: A server's defaults: as if the model recommended temperature 0.6 and top-k 20 over the chat defaults.
MODEL_SAMPLING = SamplingSettings(temperature=0.6, top_p=0.9, top_k=20, repetition_penalty=1.1)
DEFAULTS = GenerationSettings(
    decoding=Decoding.PROMPT_LOOKUP, context=ContextSettings(n_ctx=1024, n_keep="auto"), speculative=SpeculativeSettings(k=6),
    sampling=MODEL_SAMPLING,
)


def chat(cap=None, **fields):
    """The engine request of a chat request with ``fields`` (``cap``: the server's most new tokens per reply)."""
    body = {"messages": [{"role": "user", "content": "Hi"}], **fields}
    return chat_request(parse(ChatCompletionRequest, json.dumps(body).encode()), ServerLimits(DEFAULTS, 8192, cap))


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


def test_omitted_fields_take_the_servers_sampling_and_decoding():
    """Not OpenAI's cloud defaults (temperature 1, top_p 1): the model's recommended sampling, as Ollama applies."""
    settings = chat().settings
    assert settings.sampling == MODEL_SAMPLING and settings.output.grammar is None and settings.output.logprobs is None
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


def test_a_seed_of_minus_one_is_a_random_seed_as_llama_server_reads_it():
    """llama.cpp's clients send ``seed: -1`` for "random" (the command line's ``--seed -1`` too); it was refused
    (newcomer trial, 2026-12-06)."""
    assert chat(seed=-1).settings.sampling.seed is None
    assert chat(seed=0).settings.sampling.seed == 0


def test_a_seed_out_of_range_is_told_that_minus_one_is_random():
    """Newcomer trial: ``seed: -2`` was answered "seed must be in [0, 2^63), got -2", leaving out the -1 taken as a
    random seed."""
    for seed in (-2, 2**63):
        with pytest.raises(APIError) as refused:
            chat(seed=seed)
        assert (refused.value.param, refused.value.code, refused.value.message) == \
            ("seed", "invalid_value", f"seed must be -1 (random) or in [0, 2^63), got {seed}")


def test_top_k_and_min_p_are_read_as_llama_server_and_vllm_send_them():
    sampling = chat(top_k=5, min_p=0.05, temperature=0.8).settings.sampling
    assert (sampling.top_k, sampling.min_p, sampling.temperature, sampling.top_p) == (5, 0.05, 0.8, 0.9)
    assert chat(top_k=-1).settings.sampling.top_k == 0, "-1 means off, as in vLLM"
    assert completion_requests(parse(CompletionRequest, b'{"prompt": "x", "min_p": 0.1}'), ServerLimits(DEFAULTS))[0].settings.sampling.min_p == 0.1


def test_a_top_k_below_minus_one_is_told_that_minus_one_is_off_too():
    """Newcomer trial: ``top_k: -5`` was answered "top_k must be >= 0 (0 = disabled)", though -1 is taken as off
    (README); the engine, which takes no -1, keeps its words (the command line takes -1 as the server does)."""
    with pytest.raises(APIError) as refused:
        chat(top_k=-5)
    assert (refused.value.param, refused.value.code, refused.value.message) == \
        ("top_k", "invalid_value", "top_k must be >= 0 (0 or -1 = disabled), got -5")
    with pytest.raises(APIError, match="top_k must be >= 0 \\(0 or -1 = disabled\\), got -5"):
        completion_requests(parse(CompletionRequest, b'{"prompt": "x", "top_k": -5}'), ServerLimits(DEFAULTS))[0]
    with pytest.raises(SettingError, match="top_k must be >= 0 \\(0 = disabled\\), got -1"):
        SamplingSettings(top_k=-1).validate()


def test_response_format_constrains_the_reply_with_a_grammar():
    assert chat(response_format={"type": "json_object"}).settings.output.grammar == json_object_grammar()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    wrapped = {"type": "json_schema", "json_schema": {"name": "thing", "strict": True, "schema": schema}}
    assert chat(response_format=wrapped).settings.output.grammar == json_schema_grammar(schema)
    llama_server = {"type": "json_object", "schema": schema}  # llama-server's extension
    assert chat(response_format=llama_server).settings.output.grammar == json_schema_grammar(schema)
    assert chat(response_format={"type": "text"}).settings.output.grammar is None


def test_a_completion_takes_response_format_as_a_chat_does():
    """``/v1/completions`` constrains the continuation with the same grammar (it was ignored, found by a newcomer)."""
    def completion(response_format):
        body = json.dumps({"prompt": "x", "response_format": response_format}).encode()
        return completion_requests(parse(CompletionRequest, body), ServerLimits(DEFAULTS))[0]

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    wrapped = {"type": "json_schema", "json_schema": {"name": "thing", "schema": schema}}
    assert completion(wrapped).settings.output.grammar == json_schema_grammar(schema)
    assert completion({"type": "json_object"}).settings.output.grammar == json_object_grammar()
    assert completion({"type": "text"}).settings.output.grammar is None
    with pytest.raises(APIError) as refused:
        completion({"type": "yaml"})
    assert (refused.value.status, refused.value.param) == (400, "response_format.type")
    assert refused.value.message == "response_format.type is 'yaml': use text, json_object or json_schema"


def test_log_probabilities_are_asked_as_openai_asks_them():
    assert chat(logprobs=True).settings.output.logprobs == 0
    assert chat(logprobs=True, top_logprobs=20).settings.output.logprobs == 20
    assert chat(logprobs=False, top_logprobs=0).settings.output.logprobs is None
    completion = completion_requests(parse(CompletionRequest, b'{"prompt": "x", "logprobs": 2, "echo": true}'), ServerLimits(DEFAULTS))[0]
    assert completion.settings.output.logprobs == 2 and completion.echo


def test_the_repetition_penalty_is_read_under_vllms_and_llama_cpps_names():
    assert chat().settings.sampling.repetition_penalty == 1.1  # the server's defaults
    vllm = chat(repetition_penalty=1.1, repeat_last_n=32).settings.sampling
    assert (vllm.repetition_penalty, vllm.repeat_last_n) == (1.1, 32)
    assert chat(repeat_penalty=1.2).settings.sampling.repetition_penalty == 1.2
    assert chat(repetition_penalty=1.3, repeat_penalty=1.2).settings.sampling.repetition_penalty == 1.3


def test_serve_sampling_flags_go_over_the_models_recommended_sampling(tmp_path):
    from dataclasses import replace

    from app.cli.commands import build_parser
    from app.cli.serve import sampling_flags
    from inference.generation_config import recommended_sampling

    (tmp_path / "generation_config.json").write_text('{"temperature": 0.6, "top_k": 20, "do_sample": true}')
    args = build_parser().parse_args(["serve", "--top-p", "0.8", "--repeat-penalty", "1.3", "--min-p", "0.05"])
    sampling = replace(recommended_sampling(tmp_path), **sampling_flags(args))
    assert (sampling.temperature, sampling.top_k, sampling.top_p, sampling.repetition_penalty, sampling.min_p) == \
        (0.6, 20, 0.8, 1.3, 0.05)
    assert sampling_flags(build_parser().parse_args(["serve"])) == {}
    assert recommended_sampling(None) == recommended_sampling(tmp_path / "none") == \
        SamplingSettings(temperature=0.7, top_p=0.9, repetition_penalty=1.1)


def test_a_completion_is_the_raw_prompt():
    request = completion_requests(parse(CompletionRequest, b'{"prompt": ["Once upon"], "max_tokens": 3}'), ServerLimits(DEFAULTS))[0]
    assert request.prompt == "Once upon" and request.messages == [] and request.settings.sampling.max_new_tokens == 3


def test_a_completions_prompt_may_be_token_ids():
    """lm-eval (``local-completions``) sends token ids by default, a list of them per prompt, as llama-server and vLLM
    take them: they were answered 400 "send a string". A list of ints is one prompt, and a list of one such list (or
    of one string) too (several: ``test_several_prompts_are_bounded_and_each_checked``)."""
    assert completion(prompt=[1, 2, 3]).prompt == (1, 2, 3)
    assert completion(prompt=[[5, 6]], max_tokens=0, echo=True, logprobs=0).prompt == (5, 6)
    for prompt, message in (
        ([], "prompt is empty: send the text to continue, or its token ids"),
        ([[]], "prompt[0] is empty: send the text to continue, or its token ids"),
        ([3, -1], "prompt holds the token id -1 at index 1, which no token has: token ids are 0 or more"),
        ([[3, -7]], "prompt[0] holds the token id -7 at index 1, which no token has: token ids are 0 or more"),
    ):
        with pytest.raises(APIError) as refused:
            completion(prompt=prompt)
        assert (refused.value.status, refused.value.message, refused.value.code) == (400, message, "invalid_value")
    with pytest.raises(APIError) as refused:
        completion(prompt=[1, 2], echo=True)
    assert refused.value.param == "echo" and refused.value.message == (
        "echo of a prompt of token ids needs logprobs (its text comes from its scored tokens): send logprobs (0 or "
        "more), or the prompt as text")
    with pytest.raises(APIError) as refused:
        completion(prompt=[1, "a"])
    assert (refused.value.status, refused.value.param) == (400, "prompt[1]")


def test_max_tokens_0_with_echo_asks_for_the_prompt_alone():
    """lm-eval's loglikelihood requests (``local-completions``) send ``max_tokens`` 0 with ``echo`` and ``logprobs``,
    as OpenAI's legacy completions took them to score a prompt without generating: they were refused ("max_tokens
    must be >= 1"). Without ``echo``, 0 asks for nothing and is refused, saying why."""
    request = completion(max_tokens=0, echo=True, logprobs=1)
    assert (request.prompt, request.echo, request.echo_only, request.settings.output.logprobs) == ("x", True, True, 1)
    assert not completion(max_tokens=1, echo=True).echo_only
    with pytest.raises(APIError) as refused:
        completion(max_tokens=0)
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, "max_tokens", "invalid_value")
    assert refused.value.message == ("max_tokens is 0, which generates nothing: send 1 or more, or 0 with echo: true "
                                     "to have the prompt alone back (with logprobs, its tokens' log-probabilities)")
    with pytest.raises(APIError) as refused:
        completion(max_tokens=-1, echo=True)
    assert refused.value.message == "max_tokens must be >= 1, got -1"


@pytest.mark.parametrize("fields, param", [
    ({"max_completion_tokens": 0, "max_tokens": 5}, "max_completion_tokens"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [{"id": "1"}]}]}, "messages[0].tool_calls"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": "zero"}}}},
     "response_format.json_schema.schema"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": 1}, "logprobs"),
    ({"top_k": -2}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"specchat": {"n_keep": "all"}}, "specchat.n_keep"),
    ({"stop": ["a", 1]}, "stop[1]"),
])
def test_refusals_name_the_field(fields, param):
    with pytest.raises(APIError) as refused:
        chat(**fields)
    assert refused.value.status == 400 and refused.value.param == param
    assert refused.value.body()["error"]["param"] == param


@pytest.mark.parametrize("temperature, refused", [(0, False), (2, False), (2.01, True), (5, True), (-0.1, True)])
def test_temperature_is_held_to_openais_range(temperature, refused):
    """OpenAI refuses a temperature past 2, and so does the engine (past it a small model writes gibberish for 512
    tokens): the server says so, naming the field."""
    if not refused:
        assert chat(temperature=temperature).settings.sampling.temperature == temperature
        return
    with pytest.raises(APIError) as error:
        chat(temperature=temperature)
    assert (error.value.status, error.value.param) == (400, "temperature")
    assert str(error.value.body()["error"]["message"]) == (
        f"temperature must be in [0, 2] (0 = greedy; OpenAI's range), got {temperature:g}"
    )


FUNCTION = {"type": "function", "function": {"name": "get_time"}}
TOOL_CHOICES = '"none", "auto", "required" or {"type": "function", "function": {"name": ...}} naming one of the tools'


@pytest.mark.parametrize("fields, message", [
    ({"tool_choice": "sometimes"}, f'tool_choice is the string "sometimes": use {TOOL_CHOICES}'),
    ({"tools": [FUNCTION], "tool_choice": "sometimes"}, f'tool_choice is the string "sometimes": use {TOOL_CHOICES}'),
    ({"tools": [FUNCTION], "tool_choice": {"type": "function", "name": "get_time"}},
     f"tool_choice is an object: use {TOOL_CHOICES}"),
    ({"tools": [FUNCTION], "tool_choice": {"type": "function", "function": {"name": "get_date"}}},
     'tool_choice names the function "get_date", which is not among the tools: name one of "get_time", or use '
     '"none", "auto" or "required"'),
    ({"tool_choice": "required"},
     'tool_choice is the string "required", which needs tools: send the tools the model may call, or leave '
     "tool_choice out"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}, "tools": []},
     "tool_choice is an object, which needs tools: send the tools the model may call, or leave tool_choice out"),
])
def test_an_invalid_tool_choice_is_refused_with_the_values_allowed(fields, message):
    """As OpenAI does, whether tools are given or not (without tools, "sometimes" was said to need tools)."""
    with pytest.raises(APIError) as refused:
        chat(**fields)
    error = refused.value.body()["error"]
    assert (refused.value.status, error["param"], error["code"], error["message"]) == \
        (400, "tool_choice", "invalid_value", message)


def _choice_under(default: str, messages: list[dict], **fields) -> str | None:
    """The tool choice the engine gets for ``messages`` with ``FUNCTION`` offered, on a server whose
    ``--tool-choice-default`` is ``default`` (None: tools left out, as for "none")."""
    body = {"messages": messages, "tools": [FUNCTION], **fields}
    limits = ServerLimits(DEFAULTS, tool_choice_default=default)
    tools = chat_request(parse(ChatCompletionRequest, json.dumps(body).encode()), limits).tools
    return tools and tools.choice


def test_call_then_answer_requires_a_call_until_a_result_follows_the_last_user_message():
    """``--tool-choice-default call-then-answer``: required for the question, none once its result came back, required
    again for the next question; a request's own tool_choice and the default ``auto`` are kept as sent."""
    question = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What time is it?"}]
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}
    answered = [*question, call, {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
    again = [*answered, {"role": "assistant", "content": "Noon."}, {"role": "user", "content": "And now?"}]
    assert [_choice_under("call-then-answer", messages) for messages in (question, answered, again)] == \
        ["required", None, "required"]
    assert [_choice_under("auto", messages) for messages in (question, answered, again)] == ["auto"] * 3
    assert _choice_under("call-then-answer", question, tool_choice="auto") == "auto"
    assert _choice_under("call-then-answer", answered, tool_choice="required") == "required"
    with pytest.raises(ValueError, match="the default tool_choice is 'always': use one of auto, call-then-answer"):
        create_app(object(), model_id="m", tool_choice_default="always")


COLOUR = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "The colour is"}]


def test_a_final_assistant_message_is_continued():
    """Assistant prefill, as llama-server does it: a conversation ending with an assistant message started a new
    assistant turn; its text is now the start of the reply, continued (the window's Continue)."""
    request = chat(messages=[{"role": "system", "content": "Be brief."}, *COLOUR])
    assert (request.system_prompt, request.messages, request.continue_text) == ("Be brief.", COLOUR[:1], "The colour is")
    assert chat(messages=[*COLOUR, {"role": "user", "content": "Another?"}]).continue_text == ""
    with pytest.raises(APIError) as refused:
        chat(messages=COLOUR, tools=[WEATHER_TOOL])
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, "tools", "invalid_value")
    assert refused.value.message == (
        "the last message is an assistant message, whose text SpecChat continues (assistant prefill), and a continued "
        "reply cannot call tools: leave tools out (or send tool_choice none), or send a user message last")
    assert chat(messages=COLOUR, tools=[WEATHER_TOOL], tool_choice="none").continue_text == "The colour is"


@pytest.mark.parametrize("response_format", [
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
])
def test_a_final_assistant_message_with_a_response_format_is_refused(response_format):
    """The grammar constrains a reply from its first token, so the continuation of a prefill such as ``{"name": ``
    would have been forced to start a new JSON value: a 400, as with tools; ``{"type": "text"}`` asks for none."""
    prefill = [COLOUR[0], {"role": "assistant", "content": '{"name": '}]
    with pytest.raises(APIError) as refused:
        chat(messages=prefill, response_format=response_format)
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, "response_format", "invalid_value")
    assert refused.value.message == (
        "the last message is an assistant message, whose text SpecChat continues (assistant prefill), and "
        "response_format constrains a reply from its first token, not a continuation: leave response_format out "
        "(or send type text), or send a user message last")
    assert chat(messages=prefill, response_format={"type": "text"}).continue_text == '{"name": '


_CALLED = [{"role": "user", "content": "What time is it?"}, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}]


@pytest.mark.parametrize("result, code, message", [
    ({"role": "tool", "content": "12:00"}, "missing_required_parameter",
     "messages[2].tool_call_id is missing: give the id of the assistant's tool call this result answers (the calls of "
     "messages[1], the assistant message before it: call_1)"),
    ({"role": "tool", "content": "12:00", "tool_call_id": 1}, "invalid_type",
     "messages[2].tool_call_id must be a string: the id of the assistant's tool call this result answers (the calls "
     "of messages[1], the assistant message before it: call_1)"),
    ({"role": "tool", "content": "12:00", "tool_call_id": "call_9"}, "invalid_value",
     "messages[2].tool_call_id 'call_9' is no call of messages[1], the assistant message right before the tool "
     "messages (its calls: call_1): give the id of the call this result answers"),
])
def test_a_tool_result_must_name_an_earlier_call(result, code, message):
    """Newcomer trial: a ``tool`` message without ``tool_call_id``, or with one no assistant tool call had, was
    taken (its result then named no tool in the generic format); OpenAI refuses both with a 400, as now."""
    with pytest.raises(APIError) as refused:
        chat(messages=[*_CALLED, result])
    error = refused.value.body()["error"]
    assert (refused.value.status, error["param"], error["code"], error["message"]) == \
        (400, "messages[2].tool_call_id", code, message)
    answered = chat(messages=[*_CALLED, {**result, "tool_call_id": "call_1"}]).messages
    assert answered[-1] == {"role": "tool", "content": "12:00", "tool_call_id": "call_1"}
    with pytest.raises(APIError) as refused:
        chat(messages=[{"role": "tool", "content": "12:00", "tool_call_id": "call_1"}, *_CALLED])
    assert refused.value.message == (
        "messages[0].tool_call_id 'call_1' answers no call right before it: a tool message comes right after the "
        "assistant message whose call it answers (or after the other results of its calls): give the id of the call "
        "this result answers")


def _calls(*ids: str) -> dict:
    """An assistant message calling ``get_time`` once per id of ``ids``."""
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": made, "type": "function", "function": {"name": "get_time", "arguments": "{}"}} for made in ids]}


def test_a_tool_result_answers_a_call_of_the_assistant_message_right_before_its_tool_messages():
    """Newcomer trial: a tool result naming the call of any earlier assistant message was taken, wherever it stood
    (after a user message, or after a later assistant message's calls); OpenAI takes only the calls of the assistant
    message right before the run of tool messages. A 400 names the id and where its result belongs; the results of
    one message's calls in a row, each turn's after its own calls, still pass."""
    def result(made):
        return {"role": "tool", "content": "12:00", "tool_call_id": made}

    first = [{"role": "user", "content": "What time is it?"}, _calls("call_1", "call_2")]
    second = [{"role": "user", "content": "And now?"}, _calls("call_3")]
    taken = chat(messages=[*first, result("call_2"), result("call_1"), *second, result("call_3")]).messages
    assert [m.get("tool_call_id") for m in taken] == [None, None, "call_2", "call_1", None, None, "call_3"]
    for messages, message in (
        ([*first, result("call_1"), *second, result("call_2")],
         "messages[5].tool_call_id 'call_2' is no call of messages[4], the assistant message right before the tool "
         "messages (its calls: call_3); 'call_2' is a call of messages[1]: send its result right after that message, "
         "with the results of its other calls"),
        ([*first, {"role": "user", "content": "Well?"}, result("call_1")],
         "messages[3].tool_call_id 'call_1' answers no call right before it: a tool message comes right after the "
         "assistant message whose call it answers (or after the other results of its calls); 'call_1' is a call of "
         "messages[1]: send its result right after that message, with the results of its other calls"),
    ):
        with pytest.raises(APIError) as refused:
            chat(messages=messages)
        at = len(messages) - 1
        assert (refused.value.status, refused.value.param, refused.value.code, refused.value.message) == (
            400, f"messages[{at}].tool_call_id", "invalid_value", message)


@pytest.mark.parametrize("its_id, code, wrong", [
    ({}, "missing_required_parameter", "is missing"),
    ({"id": ""}, "missing_required_parameter", "is missing"),
    ({"id": 7}, "invalid_type", "must be a string, not the number 7"),
])
def test_a_tool_call_without_its_id_is_a_400(its_id, code, wrong):
    """Newcomer trial: an assistant message's call without ``id`` was taken, stored with the id "" (which a tool
    result could then answer); OpenAI requires the id: a 400 naming the call's ``id``."""
    called = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        {"type": "function", "function": {"name": "get_time", "arguments": "{}"}, **its_id}]}
    body = {"messages": [{"role": "user", "content": "What time is it?"}, called], "max_tokens": 1}
    response = call(create_app(ScriptedBackend(), model_id="m"), "POST", "/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": f'messages[1].tool_calls[1].id {wrong}: send each call with the id the reply gave it ("call_..."), '
                   "which its tool message names in tool_call_id, as OpenAI requires",
        "type": "invalid_request_error", "param": "messages[1].tool_calls[1].id", "code": code}


def _result(made: str, content: str = "12:00") -> dict:
    """A tool message answering the call ``made``."""
    return {"role": "tool", "content": content, "tool_call_id": made}


@pytest.mark.parametrize("messages, param, message", [
    ([{"role": "user", "content": "What time is it?"}, _calls("a", "b"), _result("a"),
      {"role": "user", "content": "Well?"}], "messages[1].tool_calls",
     "messages[1].tool_calls: an assistant message with tool_calls must be followed by tool messages responding to "
     "each tool_call_id, and these had none: b. Send each call's result as a tool message whose tool_call_id is the "
     "call's id, right after messages[1] with the results of its other calls (before messages[3])"),
    ([{"role": "user", "content": "What time is it?"}, _calls("a", "b")], "messages[1].tool_calls",
     "messages[1].tool_calls: an assistant message with tool_calls must be followed by tool messages responding to "
     "each tool_call_id, and these had none: a, b. Send each call's result as a tool message whose tool_call_id is "
     "the call's id, right after messages[1] with the results of its other calls (as the request's last messages: a "
     "request cannot end with calls, since the reply to them reads their results)"),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What time is it?"}, _calls("a"),
      {"role": "assistant", "content": "Noon."}, {"role": "user", "content": "And now?"}, _calls("c"), _result("c")],
     "messages[2].tool_calls",
     "messages[2].tool_calls: an assistant message with tool_calls must be followed by tool messages responding to "
     "each tool_call_id, and these had none: a. Send each call's result as a tool message whose tool_call_id is the "
     "call's id, right after messages[2] with the results of its other calls (before messages[3])"),
])
def test_every_call_of_an_assistant_message_needs_its_result(messages, param, message):
    """Newcomer trial: an assistant message whose calls were not all answered by the tool messages after it (one of
    two answered, then a user message; none, the calls last) got a 200, the model reading a conversation with a call
    and no result; OpenAI answers 400 "An assistant message with 'tool_calls' must be followed by tool messages
    responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: b", as now,
    naming the calls and where their results go."""
    backend = ScriptedBackend()
    response = call(create_app(backend, model_id="m"), "POST", "/v1/chat/completions", json={"messages": messages})
    assert (response.status_code, response.json()["error"]) == (400, {
        "message": message, "type": "invalid_request_error", "param": param, "code": "invalid_value"})
    assert backend.requests == []
    answered = [{"role": "user", "content": "What time is it?"}, _calls("a", "b"), _result("b"), _result("a"),
                {"role": "user", "content": "Well?"}]
    assert [m.get("tool_call_id") for m in chat(messages=answered).messages] == [None, None, "b", "a", None]


def _refused_chat(messages: list[dict]) -> tuple[int, dict]:
    """The status and error of a chat request of ``messages`` to a server without a model, which must not have
    generated."""
    backend = ScriptedBackend()
    response = call(create_app(backend, model_id="m"), "POST", "/v1/chat/completions", json={"messages": messages})
    assert backend.requests == []
    return response.status_code, response.json()["error"]


ASK = {"role": "user", "content": "What time is it?"}


def test_a_call_id_twice_in_one_message_is_a_400():
    """Newcomer trial: an assistant message whose two calls had the same id got a 200 (which call a result
    answered was then a guess); OpenAI refuses it, as now: a 400 on the second id, naming the first. The same id
    in two turns stays fine (each result follows its own message's calls)."""
    assert _refused_chat([ASK, _calls("a", "b", "a"), _result("a"), _result("b")]) == (400, {
        "message": "messages[1].tool_calls[2].id 'a' is also the id of messages[1].tool_calls[0]: give each call of a "
                   "message its own id (the one the reply gave it), which its tool message names in tool_call_id",
        "type": "invalid_request_error", "param": "messages[1].tool_calls[2].id", "code": "invalid_value"})
    again = [ASK, _calls("a"), _result("a"), {"role": "user", "content": "And now?"}, _calls("a"), _result("a")]
    assert [m.get("tool_call_id") for m in chat(messages=again).messages] == [None, None, "a", None, None, "a"]


def test_a_call_answered_twice_is_a_400():
    """Newcomer trial: two tool messages answering one call got a 200, the model reading two results of one call;
    OpenAI refuses it, as now: a 400 on the second result, naming the first."""
    assert _refused_chat([ASK, _calls("a", "b"), _result("a"), _result("b"), _result("a", "13:00")]) == (400, {
        "message": "messages[4].tool_call_id 'a' answers a call that messages[2] answered already: send one tool "
                   "message per call of messages[1], with that call's result",
        "type": "invalid_request_error", "param": "messages[4].tool_call_id", "code": "invalid_value"})


@pytest.mark.parametrize("fields, message", [
    ({"tools": [{"type": "retrieval"}]},
     'tools[0] must be {"type": "function", "function": {"name", "description", "parameters"}}'),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]},
     'messages[0].tool_calls[0] must be {"id", "type": "function", "function": {"name", "arguments": a JSON object '
     'as a string}}'),
])
def test_the_shapes_tools_must_have_are_written_as_json(fields, message):
    with pytest.raises(APIError) as refused:
        chat(**fields)
    assert refused.value.message == message


@pytest.mark.parametrize("fields, message", [
    ({"max_tokens": -5}, "max_tokens must be >= 1, got -5"),
    ({"max_completion_tokens": 0}, "max_completion_tokens must be >= 1, got 0"),
    ({"stop": [""]}, "stop must not contain an empty string"),
    ({"specchat": {"n_ctx": 8}}, "specchat.n_ctx must be in [16, 1024], got 8"),
    ({"specchat": {"mode": "spec_lookup", "k": 99}}, "specchat.k: K (draft tokens per step) must be in [1, 16], got 99"),
])
def test_refusals_say_the_fields_name_not_the_engines(fields, message):
    with pytest.raises(APIError) as refused:
        chat(**fields)
    assert refused.value.message == message


def test_the_servers_caps_bound_what_a_request_may_cost():
    """max_tokens is lowered to the server's cap (as llama-server's -n), whichever name it comes under; the server's
    n_ctx is the most a request may ask; stop strings are bounded in number (OpenAI's 4) and length."""
    assert chat(cap=300, max_tokens=1_000_000).settings.sampling.max_new_tokens == 300
    assert chat(cap=300, max_completion_tokens=10**9).settings.sampling.max_new_tokens == 300
    assert chat(cap=300).settings.sampling.max_new_tokens == 300  # left out: the default (512), capped
    assert chat(cap=300, max_tokens=7).settings.sampling.max_new_tokens == 7
    prompt = parse(CompletionRequest, b'{"prompt": "Once", "max_tokens": 100000}')
    assert completion_requests(prompt, ServerLimits(DEFAULTS, max_tokens=64))[0].settings.sampling.max_new_tokens == 64
    assert chat(specchat={"n_ctx": 1024}).settings.context.n_ctx == 1024
    with pytest.raises(APIError) as refused:
        chat(specchat={"n_ctx": 2048})  # the model could (8192), the server's --n-ctx (1024) says no
    assert (refused.value.status, refused.value.param) == (400, "specchat.n_ctx")
    assert refused.value.message.startswith("specchat.n_ctx must be at most 1024, this server's n_ctx: ask for less")
    assert chat(stop=["a", "b", "c", "d" * 256]).settings.sampling.stop_strings == ("a", "b", "c", "d" * 256)
    for stop, said in ((["a", "b", "c", "d", "e"], "stop holds 5 strings: send at most 4"),
                       ("x" * 257, "stop holds a string of 257 characters: each may have at most 256"),
                       (["ok", "y" * 4_000_000], "stop holds a string of 4000000 characters")):
        with pytest.raises(APIError) as refused:
            chat(stop=stop)
        assert (refused.value.status, refused.value.param) == (400, "stop") and refused.value.message.startswith(said)


TWO_PARTS = [{"type": "text", "text": "Hi"}, {"type": "text", "text": 5}]


@pytest.mark.parametrize("fields, param, code, message", [
    ({"messages": [{"role": "user", "content": TWO_PARTS}]}, "messages[0].content[1].text", "invalid_type",
     "messages[0].content[1].text is the number 5: send a string"),
    ({"messages": [5]}, "messages[0]", "invalid_type",
     'messages[0] is the number 5: send a message object ({"role": ..., "content": ...})'),
    ({"messages": [{"role": "user", "content": ["Hi"]}]}, "messages[0].content[0]", "invalid_type",
     'messages[0].content[0] is the string "Hi": send a content part ({"type": "text", "text": ...})'),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type",
     "messages[0].content is the number 5: send a string or a list"),
    ({"messages": [{"role": "user", "content": [{"text": "Hi"}]}]}, "messages[0].content[0].type",
     "missing_required_parameter", "messages[0].content[0].type is missing: add it"),
    ({"messages": [{"content": "Hi"}]}, "messages[0].role", "missing_required_parameter",
     "messages[0].role is missing: add it"),
    ({"temperature": "hot"}, "temperature", "invalid_type", 'temperature is the string "hot": send a number'),
    ({"max_tokens": True}, "max_tokens", "invalid_type", "max_tokens is true: send an integer"),
    ({"stop": ["a", None]}, "stop[1]", "invalid_type", "stop[1] is null: send a string"),
    ({"stream_options": "usage"}, "stream_options", "invalid_type",
     'stream_options is the string "usage": send an object'),
    ({"specchat": {"mode": "fast"}}, "specchat.mode", "invalid_value",
     'specchat.mode is the string "fast": send "auto", "ar", "spec_model" or "spec_lookup"'),
    ({"specchat": {"n_keep": ["all"]}}, "specchat.n_keep", "invalid_type",
     'specchat.n_keep is a list: send an integer or "auto"'),
    ({"specchat": {"typo": 1}}, "specchat.typo", "unknown_parameter",
     "specchat.typo is not a SpecChat option: specchat takes mode, k, adaptive_k, n_ctx, n_keep and n_discard"),
])
def test_type_errors_name_the_json_field_and_what_to_send(fields, param, code, message):
    """In JSON's words and the request's field paths, as OpenAI's errors are: never pydantic's class names
    (``Message``, ``ContentPart``...) or its "Input should be" (found by a newcomer trial)."""
    with pytest.raises(APIError) as refused:
        chat(**fields)
    error = refused.value.body()["error"]
    assert (refused.value.status, error["param"], error["code"], error["message"]) == (400, param, code, message)


def completion(**fields):
    """The engine request of a text completion with ``fields``."""
    return completion_requests(parse(CompletionRequest, json.dumps({"prompt": "x", **fields}).encode()), ServerLimits(DEFAULTS))[0]


WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("endpoint, fields, param, code", [
    (chat, {"n": 2}, "n", "invalid_value"),
    (chat, {"messages": []}, "messages", "invalid_value"),
    (chat, {"messages": [{"role": "robot", "content": "Hi"}]}, "messages[0].role", "invalid_value"),
    (chat, {"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
    (chat, {"messages": [{"role": "user", "content": "Hi", "tool_calls": [{"id": "1"}]}]}, "messages[0].tool_calls",
     "invalid_value"),
    (chat, {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}]},
     "messages[0].tool_calls[0]", "invalid_value"),
    (chat, {"top_logprobs": 2}, "top_logprobs", "invalid_value"),
    (chat, {"response_format": "json"}, "response_format", "invalid_type"),
    (chat, {"response_format": {}}, "response_format", "missing_required_parameter"),
    (chat, {"response_format": {"type": "xml"}}, "response_format.type", "invalid_value"),
    (chat, {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema",
     "missing_required_parameter"),
    (chat, {"tools": {"get_weather": {}}}, "tools", "invalid_type"),
    (chat, {"tools": [5]}, "tools[0]", "invalid_type"),
    (chat, {"tools": [{"type": "retrieval"}]}, "tools[0]", "invalid_value"),
    (chat, {"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name",
     "invalid_value"),
    (chat, {"tools": [WEATHER_TOOL], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "invalid_type"),
    (completion, {"best_of": 2}, "best_of", "invalid_value"),
    (completion, {"prompt": ""}, "prompt", "invalid_value"),
    (completion, {"prompt": [[1]] * (MAX_PROMPTS + 1)}, "prompt", "invalid_value"),
])  # fmt: skip
def test_every_refusal_has_a_code(endpoint, fields, param, code):
    """Newcomer trial: `n: 2`, `messages: []`, `role: "robot"`, `response_format.type: "xml"`, `json_schema` without
    `schema`, `tools` not a list, a bad tool name, `best_of` and an empty prompt were answered with `code` null,
    where similar refusals said `invalid_value` or `invalid_type` (OpenAI's API gives each a code)."""
    with pytest.raises(APIError) as refused:
        endpoint(**fields)
    error = refused.value.body()["error"]
    assert (refused.value.status, error["type"], error["param"], error["code"]) == (400, "invalid_request_error", param, code)


@pytest.mark.parametrize("part", [{"type": "text"}, {"type": "text", "text": None}])
def test_a_text_part_without_its_text_is_named(part):
    with pytest.raises(APIError) as refused:
        chat(messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}, part]}])
    error = refused.value.body()["error"]
    assert (error["param"], error["code"]) == ("messages[0].content[1].text", "missing_required_parameter")
    assert error["message"] == 'messages[0].content[1] is a text part without its text: add "text": "..." to it'


def test_a_completions_prompt_of_the_wrong_type_says_what_to_send():
    with pytest.raises(APIError) as refused:
        parse(CompletionRequest, b'{"prompt": null}')
    assert (refused.value.param, refused.value.message) == ("prompt", "prompt is null: send a string or a list")


@pytest.mark.parametrize("body", [
    b'{"messages": [{"role": "user", "content": "Hi"}], "metadata": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"messages": [{"role": "user", "content": "Hi"}], "metadata": ' + b'{"a": ' * 65 + b"1" + b"}" * 65 + b"}",
])
def test_a_deeply_nested_body_is_a_400_that_names_the_limit(body):
    with pytest.raises(APIError) as refused:
        parse(ChatCompletionRequest, body)
    assert refused.value.status == 400 and refused.value.code == "too_deep"
    assert refused.value.message == ("the request body nests lists and objects more than 64 levels deep, SpecChat's "
                                     "limit: send at most 64 levels")
    assert "not valid JSON" not in refused.value.message


def test_values_that_ask_for_nothing_are_no_refusal():
    request = chat(tools=[], tool_choice="none", response_format={"type": "text"}, top_logprobs=0, logprobs=False,
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


def test_a_closed_gate_answers_the_queued_requests_503_and_lets_the_running_one_end(worker):
    """What a stopping server does with its queue (``GenerationGate.close``): the two requests waiting get a 503
    ``server_stopped`` as soon as the running reply ends, never a reply of their own; a later request too."""
    app = create_app(worker, model_id="m", max_queue=2)
    long = {"messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 24, "temperature": 0}

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=120) as client:
            running = asyncio.ensure_future(client.post("/v1/chat/completions", json=long))
            while not app.state.gate.busy:
                await asyncio.sleep(0.01)
            queued = [asyncio.ensure_future(client.post("/v1/chat/completions", json=long)) for _ in range(2)]
            while app.state.gate.waiting < 2:
                await asyncio.sleep(0.01)
            app.state.gate.close()
            answers = [await running] + [await request for request in queued]
            return answers, await client.post("/v1/chat/completions", json=long)

    (running, *queued), later = run_coroutine(scenario())
    assert running.status_code == 200 and running.json()["usage"]["completion_tokens"] == 24  # not cut by close
    for response in [*queued, later]:
        assert response.status_code == 503 and response.json()["error"]["code"] == "server_stopped"
        # their replies never began (newcomer trial: they were told "the server stopped before the reply ended")
        assert response.json()["error"]["message"] == (
            "the server stopped before this request's turn came (it is shutting down): nothing was generated; send "
            "the request again once the server runs")
    assert worker.spec is not None and not app.state.gate.busy and app.state.gate.waiting == 0


def test_a_chat_of_system_messages_alone_is_answered_streamed_or_not(worker):
    """A chat whose messages are all system (or developer) ones has them as its system prompt and no message: it
    was a 500 (an IndexError reading the last message for the request log; newcomer trial, 2026-12-06)."""
    app = create_app(worker, model_id="m", max_queue=1)
    body = {"messages": [{"role": "system", "content": "Be nice."}, {"role": "developer", "content": "Be brief."}],
            "max_tokens": 4, "temperature": 0}

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=120) as client:
            whole = await client.post("/v1/chat/completions", json=body)
            streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
            return whole, streamed

    whole, streamed = run_coroutine(scenario())
    assert whole.status_code == 200, whole.text
    assert whole.json()["usage"]["completion_tokens"] == 4 and whole.json()["choices"][0]["message"]["content"]
    assert streamed.status_code == 200, streamed.text
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == whole.json()["choices"][0]["message"]["content"]


def test_an_empty_api_key_is_refused(worker):
    with pytest.raises(ValueError, match="empty"):
        create_app(worker, model_id="m", api_key="")


class ScriptedBackend:
    """A generation backend without a model: records each request, then raises ``failure`` or replies ``events``
    (default: "Hi") in one batch."""

    def __init__(self, failure: Exception | None = None, events: list | None = None):
        self.failure = failure
        self.requests = []
        self.events = events or [TextDelta("Hi", 1, False),
                                 Finished(GenerationStats(mode="ar", new_tokens=1, stop_reason="eos", text="Hi"))]

    async def check_prompt(self, request):
        pass

    async def generate(self, request, cancel):
        self.requests.append(request)
        if self.failure is not None:
            raise self.failure
        yield list(self.events)


def call(app, method: str, path: str, **kwargs) -> httpx.Response:
    """One request to ``app`` in-process (an unexpected exception answered as the server does: a 500)."""
    async def send():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=30) as client:
            return await client.request(method, path, **kwargs)
    return run_coroutine(send())


HELLO = {"messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize("failure, status, param", [
    (ValueError("/home/someone/models/secret-model/openvino_model.xml: shape mismatch"), 500, None),
    (RuntimeError("Exception from src/inference/src/cpp/infer_request.cpp:223: secret internals"), 500, None),
    (SettingError("n_keep", "n_keep must be in [0, 16), got 20"), 400, "specchat.n_keep"),
    (RopeUnsupportedError("the conversation needs more than n_ctx tokens, but M cannot be rolled: it has no RoPE"),
     400, "messages"),
])
def test_errors_say_what_the_client_did_wrong_and_log_the_rest(failure, status, param, caplog):
    caplog.set_level(logging.ERROR, logger="app.server.generation")
    response = call(create_app(ScriptedBackend(failure), model_id="m"), "POST", "/v1/chat/completions", json=HELLO)
    error = response.json()["error"]
    assert (response.status_code, error["param"]) == (status, param)
    if status == 500:
        assert "secret" not in error["message"] and error["message"].startswith("the generation failed (an internal")
        assert "the server's log has the details" in error["message"] and error["code"] == "internal_error"
        assert "secret" in caplog.text  # the details are in the log
    else:
        assert str(failure) in error["message"] or failure.renamed(param) in error["message"]


def test_the_windows_server_says_where_to_choose_a_draft_model():
    """The window's server is not restarted with flags: its advice names the window's setting."""
    from app.gui.local_server import ServedModel, default_app_factory
    from app.server.gate import GenerationGate

    no_draft = SettingError("decoding", "speculative decoding with a draft model needs a draft model: load one")
    app = default_app_factory(ScriptedBackend(no_draft), None, ServedModel(), GenerationGate(1))
    response = call(app, "POST", "/v1/chat/completions", json={**HELLO, "specchat": {"mode": "spec_model"}})
    error = response.json()["error"]
    assert (response.status_code, error["param"], error["code"]) == (400, "specchat.mode", "no_draft_model")
    assert "choose a draft model as the Drafter in the window's Model and decoding settings" in error["message"]
    assert "specchat serve" not in error["message"]


def test_an_unexpected_failure_outside_a_generation_is_a_500_that_says_nothing_of_it(monkeypatch, caplog):
    caplog.set_level(logging.ERROR, logger="app.server.app")
    monkeypatch.setattr("app.server.app.Reply.new", lambda *args: (_ for _ in ()).throw(KeyError("secret-key")))
    response = call(create_app(ScriptedBackend(), model_id="m"), "POST", "/v1/chat/completions", json=HELLO)
    assert response.status_code == 500 and "secret" not in response.text
    assert response.json()["error"]["message"].startswith("the server failed (an internal error")
    assert "secret-key" in caplog.text


def test_a_trailing_slash_reaches_the_same_endpoint():
    """Some clients add a slash to every path: ``/v1/models/`` was a 404 (the route of one model, named "")."""
    app = create_app(ScriptedBackend(), model_id="m")
    listed = call(app, "GET", "/v1/models")
    assert listed.status_code == 200 and [model["id"] for model in listed.json()["data"]] == ["m"]
    for path in ("/v1/models/", "/v1/models//"):
        response = call(app, "GET", path)
        assert (response.status_code, response.json()) == (200, listed.json()), path
    assert call(app, "GET", "/v1/models/m/").json()["id"] == "m"
    assert call(app, "GET", "/health/").json() == {"status": "ok", "busy": False, "waiting": 0}
    reply = call(app, "POST", "/v1/chat/completions/", json=HELLO)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "Hi"
    assert call(app, "GET", "/v1/nowhere/").json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("status, kind, code", [
    (413, "invalid_request_error", "request_too_large"),  # as the server's own 413 names it
    (415, "invalid_request_error", "unsupported_media_type"),
    (418, "invalid_request_error", "i_m_a_teapot"),
    (429, "rate_limit_error", "too_many_requests"),
    (503, "server_error", "service_unavailable"),
    (599, "server_error", "http_599"),  # a status HTTP does not name
])
def test_a_framework_error_has_a_code_as_every_refusal_of_the_servers_own(status, kind, code):
    """Every 400 of the server has a code, but a framework's HTTPException other than 404 or 405 (a 413, a 415) was
    answered with ``code`` null and, for a 5xx, ``type`` invalid_request_error: the status names both."""
    from starlette.exceptions import HTTPException

    app = create_app(ScriptedBackend(), model_id="m")

    @app.get("/v1/raises")
    async def raises():
        raise HTTPException(status, "what the framework said")

    answer = call(app, "GET", "/v1/raises")
    assert answer.status_code == status
    assert answer.json() == {"error": {"message": "what the framework said", "type": kind, "param": None, "code": code}}


def test_a_key_from_an_env_file_is_stripped_and_then_matches(monkeypatch):
    monkeypatch.setenv("SPECCHAT_API_KEY", " s3cret\r\n")
    key = api_key_of(argparse.Namespace(api_key=None))
    assert key == "s3cret"
    app = create_app(ScriptedBackend(), model_id="m", api_key=key)
    assert call(app, "GET", "/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert call(app, "GET", "/v1/models", headers={"Authorization": "Bearer other"}).status_code == 401
    with pytest.raises(ValueError, match="spaces or line breaks around it"):
        create_app(ScriptedBackend(), model_id="m", api_key="s3cret\n")


def test_the_key_is_taken_from_x_api_key_too_as_llama_server_takes_it():
    """Trial: ``X-Api-Key: KEY`` (llama-server's other header, the one Anthropic-style clients send) got a 401 from a
    keyed server. Either header passes with the key; a wrong key in either (or a right one beside a wrong one) is the
    same 401, which names both headers."""
    backend = ScriptedBackend()
    app = create_app(backend, model_id="m", api_key="s3cret")
    for headers in ({"X-Api-Key": "s3cret"}, {"x-api-key": "s3cret"}, {"Authorization": "Bearer s3cret"},
                    {"Authorization": "Bearer s3cret", "X-Api-Key": "s3cret"}):
        assert call(app, "GET", "/v1/models", headers=headers).status_code == 200, headers
    assert call(app, "POST", "/v1/chat/completions", json=HELLO, headers={"X-Api-Key": "s3cret"}).status_code == 200
    assert len(backend.requests) == 1
    refusal = {"error": {"message": "missing or wrong API key: send the server's key as 'Authorization: Bearer KEY' "
                                    "or 'X-Api-Key: KEY'",
                         "type": "authentication_error", "param": None, "code": "invalid_api_key"}}
    for headers in ({}, {"X-Api-Key": "other"}, {"X-Api-Key": ""},
                    {"Authorization": "Bearer other"}, {"Authorization": "Bearer s3cret", "X-Api-Key": "other"},
                    {"Authorization": "Bearer other", "X-Api-Key": "s3cret"}):
        refused = call(app, "POST", "/v1/chat/completions", json=HELLO, headers=headers)
        assert (refused.status_code, refused.json()) == (401, refusal), headers
    assert len(backend.requests) == 1


def test_max_tokens_is_capped_by_the_server_before_the_engine_sees_it():
    backend = ScriptedBackend()
    capped = create_app(backend, model_id="m", max_tokens=50)
    assert call(capped, "POST", "/v1/chat/completions", json={**HELLO, "max_tokens": 10**9}).status_code == 200
    assert backend.requests[-1].settings.sampling.max_new_tokens == 50
    default = create_app(backend, model_id="m", defaults=GenerationSettings(context=ContextSettings(n_ctx=2048)))
    assert call(default, "POST", "/v1/completions", json={"prompt": "x", "max_tokens": 10**9}).status_code == 200
    assert backend.requests[-1].settings.sampling.max_new_tokens == 2048  # no cap given: the server's n_ctx


def test_serve_takes_a_max_tokens_cap(monkeypatch):
    from app.cli.commands import build_parser
    from app.cli.serve import run_serve

    monkeypatch.delenv("SPECCHAT_API_KEY", raising=False)
    assert build_parser().parse_args(["serve"]).max_tokens is None  # the server's n_ctx
    assert build_parser().parse_args(["serve", "--max-tokens", "100"]).max_tokens == 100
    with pytest.raises(ValueError, match="--max-tokens must be >= 1, got 0"):
        run_serve(build_parser().parse_args(["serve", "--max-tokens", "0"]))


@pytest.mark.parametrize("specchat, unused", [
    ({"mode": "auto", "k": 4}, {"k"}),
    ({"k": 4, "adaptive_k": True}, {"k", "adaptive_k"}),  # the server's default decoding here: Auto
    ({"mode": "ar", "k": 2, "adaptive_k": False}, {"k"}),  # adaptive_k false asks for nothing
    ({"mode": "spec_lookup", "k": 4, "adaptive_k": True}, {"k"}),  # adaptive_k chooses K per step
    ({"mode": "spec_lookup", "k": 4}, set()),
    ({"mode": "auto", "n_ctx": 512}, set()),
])
def test_specchat_options_the_decoding_does_not_use_are_named_in_the_response(specchat, unused):
    """A request's ``specchat.k`` with ``mode`` auto was taken silently (Auto chooses its own K), where the command
    line notes a flag its mode does not use: the reply's ``specchat.unused`` names each such option and why, in a
    whole response, the stream's finish chunk and a Responses reply; a request whose options are all used has none.
    Not a 400: clients send one ``k`` whatever the mode (the window's remote model does)."""
    app = create_app(ScriptedBackend(), model_id="m", defaults=GenerationSettings(decoding=Decoding.AUTO))
    whole = call(app, "POST", "/v1/chat/completions", json={**HELLO, "specchat": specchat}).json()["specchat"]
    assert set(whole.get("unused", {})) == unused and whole["mode"] == "ar"  # (the scripted backend's statistics)
    if "k" in unused and specchat.get("mode", "auto") == "auto":
        assert whole["unused"]["k"] == ("Auto chooses K per step (0 to 16): k is the K of mode spec_lookup or "
                                        "spec_model, send one of them to use it")
    body = call(app, "POST", "/v1/chat/completions", json={**HELLO, "specchat": specchat, "stream": True}).text
    chunks = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    finish = next(chunk for chunk in chunks if chunk["choices"][0]["finish_reason"])
    assert finish["specchat"].get("unused", {}) == whole.get("unused", {})
    response = call(app, "POST", "/v1/responses", json={"input": "Hi", "specchat": specchat}).json()
    assert response["specchat"].get("unused", {}) == whole.get("unused", {})


def test_sampling_fields_greedy_decoding_does_not_use_are_named_as_the_command_line_names_them():
    """The command line notes `--top-p` with greedy decoding; a request with temperature 0 and ``top_p`` was taken
    silently. Its ``specchat.unused`` names each of ``GREEDY_UNUSED`` the request sent, beside a ``specchat`` option
    its mode does not use, with the command line's reason; temperature 0 from the server's default counts too. A
    sampled reply, and the penalties (which change the logits greedy decoding takes the likeliest of), have none."""
    from inference.settings import GREEDY_UNUSED

    assert GREEDY_UNUSED == ("top_p", "top_k", "min_p", "seed")
    why = ("greedy decoding (temperature 0 takes the likeliest token at each step) does not sample: send temperature "
           "above 0 to use it")
    app = create_app(ScriptedBackend(), model_id="m", defaults=GenerationSettings(decoding=Decoding.AUTO))
    sampling = {"top_p": 0.5, "top_k": -1, "min_p": 0.1, "seed": 5, "presence_penalty": 0.5, "repeat_penalty": 1.1}
    greedy = {**HELLO, **sampling, "temperature": 0, "specchat": {"k": 4}}
    whole = call(app, "POST", "/v1/chat/completions", json=greedy).json()["specchat"]
    assert whole["unused"] == {"top_p": why, "top_k": why, "min_p": why, "seed": why, "k": whole["unused"]["k"]}, whole
    text = call(app, "POST", "/v1/completions", json={"prompt": "x", "top_p": 0.5}).json()["specchat"]  # the default: greedy
    assert text["unused"] == {"top_p": why}, text
    response = call(app, "POST", "/v1/responses", json={"input": "Hi", "top_p": 0.5, "temperature": 0}).json()
    assert response["specchat"]["unused"] == {"top_p": why}, response
    sampled = call(app, "POST", "/v1/chat/completions", json={**HELLO, **sampling, "temperature": 0.7}).json()
    assert "unused" not in sampled["specchat"], sampled


def test_health_answers_as_llama_server_users_check_it():
    """Newcomer trial: a llama-server user's health check got a 404 on ``GET /v1/health`` (llama-server serves it
    beside ``/health``) and a 405 on ``HEAD /health`` (``wget --spider`` and ``curl -I`` in container health
    checks). Both answer 200 now, without a key as ``/health`` does; the 404's list of routes names them."""
    app = create_app(ScriptedBackend(), model_id="m", api_key="s3cret")
    assert call(app, "GET", "/v1/health").json() == {"status": "ok", "busy": False, "waiting": 0}
    for path in ("/health", "/v1/health"):
        head = call(app, "HEAD", path)
        assert (head.status_code, head.content) == (200, b""), path
    assert "GET /v1/health" in call(app, "GET", "/nowhere").json()["error"]["message"]
    assert call(app, "GET", "/v1/models").status_code == 401  # the rest still needs the key


def test_the_server_continues_a_final_assistant_message_as_the_windows_continue_does(worker):
    """The reply's content is the continuation alone, the one the window's Continue writes, streamed or not; not the
    new turn the server wrote before."""
    app = create_app(worker, model_id="m")
    body = {"messages": COLOUR, "max_tokens": 8, "temperature": 0}
    settings = GenerationSettings(decoding=Decoding.AUTOREGRESSIVE, sampling=SamplingSettings(temperature=0,
                                                                                              max_new_tokens=8))

    async def scenario():
        async def text_of(request):
            events = [e for batch in [b async for b in worker.generate(request, threading.Event())] for e in batch]
            return events[-1].stats.text
        continued = await text_of(GenerationRequest(COLOUR[:1], "", settings, continue_text="The colour is"))
        new_turn = await text_of(GenerationRequest(COLOUR[:1], "", settings))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=120) as client:
            whole = await client.post("/v1/chat/completions", json=body)
            streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
        return continued, new_turn, whole, streamed

    continued, new_turn, whole, streamed = run_coroutine(scenario())
    assert whole.status_code == 200, whole.text
    content = whole.json()["choices"][0]["message"]["content"]
    assert content == continued and content != new_turn[:len(content)]
    assert whole.json()["usage"]["completion_tokens"] == 8
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == content


def test_a_streamed_chunk_without_tokens_has_null_logprobs():
    """Newcomer trial: with ``logprobs`` and ``stream``, the finish chunk carried ``"logprobs": {"content": []}``;
    OpenAI sends ``"logprobs": null`` on a chunk without tokens, and the content chunk keeps its token's."""
    token = TokenLogprob(1, b"Hi", -0.25)
    events = [TextDelta("Hi", 1, False, token),
              Finished(GenerationStats(mode="ar", new_tokens=1, stop_reason="eos", text="Hi"))]
    app = create_app(ScriptedBackend(events=events), model_id="m")
    body = call(app, "POST", "/v1/chat/completions", json={**HELLO, "logprobs": True, "stream": True}).text
    chunks = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    choices = [chunk["choices"][0] for chunk in chunks]
    assert [choice["delta"].get("content") for choice in choices] == ["", "Hi", None]
    assert [choice["logprobs"] for choice in choices] == [
        None, {"content": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": []}], "refusal": None},
        None]
    assert choices[-1]["finish_reason"] == "stop"


SEVERAL = GenerationStats(mode="ar", prompt_tokens=3, reused_tokens=1, new_tokens=1, stop_reason="eos", text="Hi")


def test_several_prompts_get_a_choice_each_in_order_streamed_or_not():
    """lm-eval with ``batch_size`` > 1 sends several prompts in one request, which was refused ("send one"): each
    prompt gets its own choice (``index`` its place), echo and finish_reason, one after another; the usage is their
    sum; each choice has its own statistics. Streamed: each prompt's chunks carry its index, one prompt after
    another, the usage chunk and one ``[DONE]`` after the last."""
    backend = ScriptedBackend(events=[TextDelta("Hi", 1, False), Finished(SEVERAL)])
    app = create_app(backend, model_id="m")
    body = {"prompt": ["Once", "Twice", "Thrice"], "max_tokens": 1, "echo": True}
    whole = call(app, "POST", "/v1/completions", json=body)
    assert whole.status_code == 200, whole.text
    reply = whole.json()
    assert [(c["index"], c["text"], c["finish_reason"]) for c in reply["choices"]] == [
        (0, "OnceHi", "stop"), (1, "TwiceHi", "stop"), (2, "ThriceHi", "stop")]
    assert reply["usage"] == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12,
                              "prompt_tokens_details": {"cached_tokens": 3}}
    assert [c["specchat"]["stop_reason"] for c in reply["choices"]] == ["eos"] * 3 and "specchat" not in reply
    assert [request.prompt for request in backend.requests] == ["Once", "Twice", "Thrice"]
    streamed = call(app, "POST", "/v1/completions",
                    json={**body, "stream": True, "stream_options": {"include_usage": True}})
    assert streamed.status_code == 200, streamed.text
    events = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [json.loads(event) for event in events[:-1]]
    assert [(c["choices"][0]["index"], c["choices"][0]["text"], c["choices"][0]["finish_reason"])
            for c in chunks[:-1]] == [(0, "OnceHi", None), (0, "", "stop"), (1, "TwiceHi", None), (1, "", "stop"),
                                      (2, "ThriceHi", None), (2, "", "stop")]
    assert [c["specchat"]["stop_reason"] for c in chunks[:-1] if c["choices"][0]["finish_reason"]] == ["eos"] * 3
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == reply["usage"]
    assert len({chunk["id"] for chunk in chunks}) == 1
    one = call(app, "POST", "/v1/completions", json={**body, "prompt": ["Once"]}).json()  # one prompt: as before
    assert [c["index"] for c in one["choices"]] == [0] and one["specchat"]["stop_reason"] == "eos"
    assert "specchat" not in one["choices"][0]


def test_several_prompts_are_bounded_and_each_checked():
    requests = completion_requests(parse(CompletionRequest, json.dumps(
        {"prompt": [[1, 2], [3, 4]], "max_tokens": 1, "echo": True, "logprobs": 1}).encode()), ServerLimits(DEFAULTS))
    assert [r.prompt for r in requests] == [(1, 2), (3, 4)] and all(r.echo and r.settings.output.logprobs == 1
                                                                   for r in requests)
    assert [r.prompt for r in completions(prompt=["a", "b"])] == ["a", "b"]
    assert len(completions(prompt=[[1]] * MAX_PROMPTS)) == MAX_PROMPTS
    for prompt, param, message in (
        ([[1]] * (MAX_PROMPTS + 1), "prompt", f"prompt holds {MAX_PROMPTS + 1} prompts: send at most {MAX_PROMPTS} "
         "per request (SpecChat's limit), or split them over several requests"),
        ([[1], []], "prompt[1]", "prompt[1] is empty: send the text to continue, or its token ids"),
        (["a", ""], "prompt[1]", "prompt[1] is empty: send the text to continue, or its token ids"),
        ([[1], [2, -1]], "prompt[1]", "prompt[1] holds the token id -1 at index 1, which no token has: token ids are 0 "
         "or more"),
    ):
        with pytest.raises(APIError) as refused:
            completions(prompt=prompt)
        assert (refused.value.status, refused.value.param, refused.value.message) == (400, param, message)
    with pytest.raises(APIError) as refused:
        completions(prompt=["a", [1]])
    assert (refused.value.status, refused.value.param) == (400, "prompt[1]")
    with pytest.raises(APIError) as refused:
        completions(prompt=[[1], [2]], echo=True)
    assert refused.value.param == "echo"


class RefusesPrompt(ScriptedBackend):
    """Replies "Hi" to every prompt but ``bad``, which it refuses as the worker refuses a token id past the
    vocabulary; records the prompts it generated."""

    async def check_prompt(self, request):
        if request.prompt == "bad":
            raise SettingError("prompt", "prompt holds the token id 99 at index 0, which is not in the model's "
                               "vocabulary: its ids are 0 to 9")

    async def generate(self, request, cancel):
        await self.check_prompt(request)
        async for batch in super().generate(request, cancel):
            yield batch


def test_a_prompt_the_model_refuses_is_a_400_before_any_prompt_of_the_request_is_generated():
    """lm-eval's batch of prompts of which the third is refused (too long to score, a token id past the vocabulary):
    the two before it were generated, then the request answered 400 and threw their choices away (streamed, they
    came, then an error event). Every prompt is checked first: a 400 naming ``prompt[2]``, nothing generated, in
    both modes."""
    backend = RefusesPrompt(events=[TextDelta("Hi", 1, False), Finished(SEVERAL)])
    app = create_app(backend, model_id="m")
    body = {"prompt": ["Once", "Twice", "bad", "Thrice"], "max_tokens": 1, "echo": True}
    message = ("prompt[2] holds the token id 99 at index 0, which is not in the model's vocabulary: its ids are 0 "
               "to 9")
    for stream in (False, True):
        response = call(app, "POST", "/v1/completions", json={**body, "stream": stream})
        assert response.status_code == 400, response.text
        assert response.json()["error"] == {"message": message, "type": "invalid_request_error", "param": "prompt[2]",
                                            "code": "invalid_value"}
        assert backend.requests == []
    assert call(app, "POST", "/v1/completions", json={**body, "prompt": ["Once", "Twice"]}).status_code == 200
    assert [request.prompt for request in backend.requests] == ["Once", "Twice"]
    assert not app.state.gate.busy


def completions(**fields):
    """The engine requests of a text completion with ``fields``."""
    return completion_requests(parse(CompletionRequest, json.dumps({"prompt": "x", **fields}).encode()),
                               ServerLimits(DEFAULTS))


def test_a_request_of_several_prompts_lets_the_waiting_requests_go_between_them():
    """Each prompt takes its own turn at the queue, behind the requests that came meanwhile, so that 64 prompts do
    not hold every other client back; a full queue does not refuse the request's next prompt (it was let in)."""
    order = []

    class Waits:
        async def check_prompt(self, request):
            pass

        async def generate(self, request, cancel):
            order.append(request.prompt or "chat")
            while request.prompt == "a0" and app.state.gate.waiting < 1:  # another request comes meanwhile
                await asyncio.sleep(0.01)
            yield [TextDelta("Hi", 1, False), Finished(SEVERAL)]

    app = create_app(Waits(), model_id="m", max_queue=1)

    async def scenario():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            several = asyncio.ensure_future(client.post("/v1/completions", json={"prompt": ["a0", "a1", "a2"]}))
            while not order and not several.done():
                await asyncio.sleep(0.01)
            other = await client.post("/v1/chat/completions", json=HELLO)
            return await several, other

    several, other = run_coroutine(scenario())
    assert (several.status_code, other.status_code) == (200, 200), several.text
    assert [c["text"] for c in several.json()["choices"]] == ["Hi"] * 3
    assert order == ["a0", "chat", "a1", "a2"]


def test_a_client_that_leaves_a_stream_of_several_prompts_cancels_the_rest():
    """The client leaves during the first prompt's reply: it is cancelled and the other prompts never start."""
    cancels = []

    class Endless:
        async def check_prompt(self, request):
            pass

        async def generate(self, request, cancel):
            cancels.append((request.prompt, cancel))
            while not cancel.is_set():
                yield [TextDelta("Hi", 1, False), StepStats(0, 0, 1, 0.0, 0.0, 0.0, 0, 0, 0, 0.0, 1)]
                await asyncio.sleep(0.01)

    app = create_app(Endless(), model_id="m")
    body = json.dumps({"prompt": ["a", "b", "c"], "max_tokens": 100, "stream": True}).encode()

    async def scenario():
        left, read, sent = asyncio.Event(), [], []

        async def receive():
            if not read:
                read.append(True)
                return {"type": "http.request", "body": body, "more_body": False}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)
            if b"data:" in message.get("body", b""):
                left.set()

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/v1/completions", "raw_path": b"/v1/completions", "query_string": b"",
                 "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
                 "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]}
        await asyncio.wait_for(app(scope, receive, send), 30)
        return sent

    sent = run_coroutine(scenario())
    assert sent[0]["status"] == 200 and b"[DONE]" not in b"".join(m.get("body", b"") for m in sent)
    assert [prompt for prompt, _ in cancels] == ["a"] and cancels[0][1].is_set()
    assert not app.state.gate.busy


@pytest.mark.parametrize("new_tokens, says", [(0, "nothing was generated"), (3, "the reply is incomplete")])
@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_the_stopping_server_cancelled_says_whether_anything_was_generated(new_tokens, says, stream):
    """A reply cancelled because the server stops (stop_reason "cancelled") said "the server stopped before the reply
    ended ...: the reply is incomplete" even when it was cancelled before its first token (a streamed request that
    waited its turn as the server stopped: nothing was generated); it says which."""
    text = "Hi there" if new_tokens else ""
    events = ([TextDelta(text, 1, False)] if new_tokens else []) + [
        Finished(GenerationStats(mode="ar", new_tokens=new_tokens, stop_reason="cancelled", text=text))]
    app = create_app(ScriptedBackend(events=events), model_id="m")
    response = call(app, "POST", "/v1/chat/completions", json={**HELLO, "stream": stream})
    if stream:
        last = json.loads([line for line in response.text.splitlines() if line.startswith("data:")][-1][5:])
        error = last["error"]
    else:
        assert response.status_code == 503
        error = response.json()["error"]
    assert error["code"] == "server_stopped" and says in error["message"], error
