"""Tool calls on the default model, whose chat template renders no tools (SmolLM2): ``specchat serve`` describes the
tools in the system prompt and constrains the reply to plain text or a JSON call (llama-server's generic format),
through the official ``openai`` client: each ``tool_choice``, parallel calls, a two-step round trip with a ``tool``
result, streamed deltas that add up to the non-streamed call, the same greedy calls under speculative decoding, and
the 400s of bad tools."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from helpers import WEATHER, run_coroutine

from app.server import create_app
from inference.events import Finished, GenerationStats, TextDelta, ToolCall, ToolCallDelta, ToolCalls
from inference.tools import (
    GENERIC,
    HERMES,
    ToolCallReader,
    ToolUse,
    generic_conversation,
    generic_instructions,
    written_calls,
)

TIME = {"type": "function", "function": {"name": "get_time", "description": "The time now.", "parameters": {
    "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris for three days?"}]
SPEC = {"specchat": {"mode": "spec_lookup", "k": 4}}


def _valid(name: str, arguments: str) -> bool:
    """A call of one of the declared tools whose arguments parse and match its schema."""
    values = json.loads(arguments)
    if name == "get_weather":
        return set(values) == {"city", "days"} and values["city"] in ("Paris", "Rome", "Oslo") \
            and isinstance(values["days"], int) and 1 <= values["days"] <= 7
    return name == "get_time" and set(values) == {"utc"} and isinstance(values["utc"], bool)


def _reassembled(chunks) -> list[tuple[str, str]]:
    """The ``(name, arguments)`` of the calls in a stream's ``delta.tool_calls``, checking OpenAI's shape: a call's
    first delta has its index (0, 1, ... in order), id, type and name, the next ones fragments of its arguments."""
    calls: dict[int, list] = {}
    for delta in [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]:
        if delta.id is not None:
            assert delta.index == len(calls) and delta.type == "function" and delta.function.arguments == ""
            assert delta.id.startswith("call_") and delta.function.name
            calls[delta.index] = [delta.function.name, ""]
        else:
            assert delta.function.name is None and delta.function.arguments
            calls[delta.index][1] += delta.function.arguments
    return [tuple(call) for call in calls.values()]


# --- the generic format, without a model ---------------------------------------------------------------------------


def test_the_generic_reader_reads_one_call_a_list_or_text():
    single = ToolCallReader(GENERIC)
    assert single.push('{"tool_call": {"name": "get_time", ') == ""
    assert single.push('"arguments": {"utc": true}}}') == ""
    assert single.finish() == ("", [ToolCall("get_time", {"utc": True})])
    several = ToolCallReader(GENERIC)
    several.push('{"tool_calls": [{"name": "get_time", "arguments": {"utc": true}}, '
                 '{"name": "get_weather", "arguments": {"city": "Rome", "days": 2}}]}')
    assert several.finish() == ("", [ToolCall("get_time", {"utc": True}), ToolCall("get_weather", {"city": "Rome", "days": 2})])
    text = ToolCallReader(GENERIC)
    assert text.push("It is sunny {mostly}.") == "It is sunny {mostly}." and text.finish() == ("", None)
    other = ToolCallReader(GENERIC)
    other.push('{"response": "hello"}')
    assert other.finish() == ('{"response": "hello"}', None), "JSON that holds no calls is text"


def test_calls_stream_as_they_are_written():
    text = ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Ro}m\\"e", "n": {"name": "x", "arguments": '
            '{}}, "days": 2}}, {"name": "get_time", "arguments": {"utc": true}}]}')
    first = '{"city": "Ro}m\\"e", "n": {"name": "x", "arguments": {}}, "days": 2}'
    assert written_calls(text, "arguments") == [("get_weather", first, True), ("get_time", '{"utc": true}', True)]
    cut = text.index("Ro}") + 1
    assert written_calls(text[:cut], "arguments") == [("get_weather", '{"city": "R', False)], "strings stream too"
    assert written_calls(text[: text.index("{", 20)], "arguments") == [], "a call is listed once its arguments open"
    reader, deltas = ToolCallReader(GENERIC), []
    for start in range(0, len(text), 7):
        assert reader.push(text[start : start + 7]) == ""
        deltas += reader.deltas()
    assert [(d.index, d.name) for d in deltas if d.name] == [(0, "get_weather"), (1, "get_time")]
    assert "".join(d.arguments for d in deltas if d.index == 0) == first and len(deltas) > 4
    _, calls = reader.finish()
    assert [call.arguments_json for call in calls] == [first, '{"utc": true}']
    hermes = ToolCallReader(HERMES)
    hermes.push('Sure. <tool_call>\n{"name": "get_time", "arguments": {"utc": ')
    assert hermes.deltas() == [ToolCallDelta(0, "get_time", '{"utc": ')]
    hermes.push('true}}\n</tool_call>')
    assert hermes.deltas() == [ToolCallDelta(0, None, "true}")]


class CutAtEight:
    """A backend without a model whose reply is ``events`` cut by max_tokens 8."""

    def __init__(self, *events):
        self.events = events

    async def generate(self, request, cancel):
        yield [*self.events, Finished(GenerationStats(mode="ar", prompt_tokens=30, new_tokens=8,
                                                      stop_reason="max_new_tokens"))]


def test_a_reply_cut_in_its_first_call_has_content_null_and_cut_text_is_its_content():
    """Newcomer trial: cut by max_tokens 8 in a call it had begun, a reply read ``"content": ""``. With no text it
    is null (OpenAI's shape for a message without text), as for a reply of calls; cut text is the content."""
    def choice(*events) -> dict:
        async def send():
            transport = httpx.ASGITransport(app=create_app(CutAtEight(*events), model_id="m"))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
                return await http.post("/v1/chat/completions", json={"messages": ASK, "tools": [WEATHER], "max_tokens": 8})
        return run_coroutine(send()).json()["choices"][0]

    cut_call = choice(TextDelta("", 1, False), ToolCallDelta(0, "get_weather", '{"city": "C'), ToolCalls(()))
    assert (cut_call["message"], cut_call["finish_reason"]) == ({"role": "assistant", "content": None}, "length")
    cut_text = choice(TextDelta("It is sunny", 1, False))
    assert (cut_text["message"], cut_text["finish_reason"]) == ({"role": "assistant", "content": "It is sunny"}, "length")


def test_only_streamed_tool_calls_carry_an_index():
    """Newcomer trial: a non-streamed reply's ``message.tool_calls[i]`` carried an ``index``, which OpenAI's
    non-streamed shape lacks (only a stream's deltas have it, to say which call a fragment extends)."""
    calls = ToolCalls((ToolCall("get_weather", {"city": "Paris"}, '{"city": "Paris"}'), ToolCall("get_time", {}, "{}")))

    class Calling:
        async def generate(self, request, cancel):
            yield [calls, Finished(GenerationStats(mode="ar", prompt_tokens=30, new_tokens=12, stop_reason="eos"))]

    def post(stream: bool) -> httpx.Response:
        async def send():
            transport = httpx.ASGITransport(app=create_app(Calling(), model_id="m"))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
                return await http.post("/v1/chat/completions", json={"messages": ASK, "tools": [WEATHER, TIME],
                                                                      "stream": stream})
        return run_coroutine(send())

    whole = post(False).json()["choices"][0]["message"]["tool_calls"]
    assert [sorted(call) for call in whole] == [["function", "id", "type"]] * 2
    assert [call["function"] for call in whole] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'},
                                                    {"name": "get_time", "arguments": "{}"}]
    chunks = [json.loads(line[6:]) for line in post(True).text.splitlines() if line.startswith("data: {")]
    deltas = [call for chunk in chunks for call in chunk["choices"][0]["delta"].get("tool_calls", [])]
    assert [delta["index"] for delta in deltas] == [0, 0, 1, 1]


def test_the_generic_conversation_describes_the_tools_and_writes_calls_and_results_as_json():
    messages = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {"utc": True}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        {"role": "tool", "content": "12:00", "tool_call_id": "call_2"},
    ]
    use = ToolUse((WEATHER, TIME), "auto", parallel=True)
    system, rendered = generic_conversation("Be brief.", messages, use)
    assert system == "Be brief.\n\n" + generic_instructions(use)
    assert '{"name": "get_weather", "description": "The weather in a city over the next days.", "parameters": ' in system
    assert '{"tool_calls": [{"name": "<tool name>", "arguments": {"<argument>": "<value>"}}]}' in system
    assert rendered == [
        ASK[0],
        {"role": "assistant", "content": '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": '
                                         '3}}, {"name": "get_time", "arguments": {"utc": true}}]}'},
        {"role": "user", "content": '{"tool_response": {"tool": "get_weather", "content": "sunny"}}\n'
                                    '{"tool_response": {"tool": "get_time", "content": "12:00"}}'},
    ]
    single = ToolUse((WEATHER,), "get_weather", parallel=False)
    one_call = [ASK[0], {**messages[1], "tool_calls": messages[1]["tool_calls"][:1]}, messages[2]]
    system, rendered = generic_conversation("", one_call, single)
    assert system.startswith("You can call these tools") and "Call the tool get_weather now" in system
    assert '"name": "get_time"' not in system and '{"tool_call": {"name": "<tool name>"' in system
    assert rendered[1]["content"] == '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}'
    assert generic_conversation("", messages, None)[0] == "", "without tools for this reply, none are described"


# --- through specchat serve on the default model -------------------------------------------------------------------


def _ask(client, **fields):
    return client.chat.completions.create(**{"model": "specchat", "messages": ASK, "tools": [WEATHER, TIME],
                                             "temperature": 0, "max_tokens": 80, **fields})


def test_a_two_step_round_trip_calls_a_tool_then_answers_from_its_result(client):
    first = _ask(client, tool_choice="required", parallel_tool_calls=False)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 degrees, for the three days."},
    ]
    # the answer with tool_choice "none": left to choose ("auto"), the default model calls get_time twice more at
    # temperature 0, cut by max_tokens; that reply's raw calls JSON used to come back as content, which this test
    # took for an answer
    answer = _ask(client, messages=follow, max_tokens=60, tool_choice="none")
    assert answer.choices[0].message.tool_calls is None and answer.choices[0].finish_reason in ("stop", "length")
    assert answer.choices[0].message.content.strip() and "tool_call" not in answer.choices[0].message.content
    question_only = _ask(client, max_tokens=1, tool_choice="none")  # (tool_choice none: no tools in the prompt)
    assert answer.usage.prompt_tokens > question_only.usage.prompt_tokens + 20, "the call and its result are in the prompt"
    # the same call with an empty result (a call without its result is a 400, as OpenAI answers)
    empty_result = _ask(client, messages=follow[:2] + [{**follow[2], "content": ""}], max_tokens=60,
                        tool_choice="none")
    assert empty_result.usage.prompt_tokens < answer.usage.prompt_tokens


def test_a_reply_to_a_tool_result_cut_at_eight_tokens_is_never_empty_text(client):
    """Newcomer trial: after a ``tool`` result, max_tokens 8 at temperature 0 answered ``"content": ""`` and no
    tool_calls: the model had begun another call, cut. The content is null then, or the text the model wrote."""
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees, for the three days."},
    ]
    choice = _ask(client, messages=follow, max_tokens=8).choices[0]
    assert choice.finish_reason == "length" and choice.message.tool_calls is None
    assert choice.message.content is None or choice.message.content.strip(), choice.message


@pytest.mark.parametrize("extra", [{}, SPEC], ids=["ar", "spec_lookup"])
def test_each_tool_choice(client, extra):
    required = _ask(client, tool_choice="required", parallel_tool_calls=False, extra_body=extra).choices[0]
    assert required.finish_reason == "tool_calls" and len(required.message.tool_calls) == 1
    assert _valid(required.message.tool_calls[0].function.name, required.message.tool_calls[0].function.arguments)
    named = _ask(client, tool_choice={"type": "function", "function": {"name": "get_time"}}, extra_body=extra).choices[0]
    assert [c.function.name for c in named.message.tool_calls] == ["get_time"]
    assert _valid("get_time", named.message.tool_calls[0].function.arguments)
    auto = _ask(client, extra_body=extra).choices[0]
    if auto.message.tool_calls:
        assert auto.finish_reason == "tool_calls" and all(_valid(c.function.name, c.function.arguments)
                                                           for c in auto.message.tool_calls)
    else:
        assert auto.message.content and not auto.message.content.lstrip().startswith("{")
    none = _ask(client, tool_choice="none", max_tokens=20, extra_body=extra)
    assert none.choices[0].message.tool_calls is None and none.choices[0].message.content
    with_tools = _ask(client, tool_choice="required", max_tokens=1)
    assert none.usage.prompt_tokens + 100 < with_tools.usage.prompt_tokens, "with none, the tools are not described"


def test_parallel_calls_come_as_a_list_and_one_call_when_not_allowed(client):
    parallel = _ask(client, tool_choice="required", parallel_tool_calls=True).choices[0].message.tool_calls
    assert len(parallel) >= 1 and all(_valid(c.function.name, c.function.arguments) for c in parallel)
    assert len({c.id for c in parallel}) == len(parallel)
    ask_both = [{"role": "user", "content": "Tell me the UTC time, and the weather in Rome for two days."}]
    both = _ask(client, messages=ask_both, tool_choice="required", max_tokens=120).choices[0].message.tool_calls
    assert sorted(c.function.name for c in both) == ["get_time", "get_weather"], "the model asks for both"
    assert all(_valid(c.function.name, c.function.arguments) for c in both) and len({c.id for c in both}) == 2
    chunks = list(_ask(client, messages=ask_both, tool_choice="required", max_tokens=120, stream=True))
    assert _reassembled(chunks) == [(c.function.name, c.function.arguments) for c in both]
    single = _ask(client, messages=ask_both, tool_choice="required", parallel_tool_calls=False).choices[0]
    assert len(single.message.tool_calls) == 1 and single.finish_reason == "tool_calls"


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}],
                         ids=["required", "named"])
def test_streamed_deltas_add_up_to_the_call_and_speculative_calls_equal_greedy_ones(client, choice):
    whole = _ask(client, tool_choice=choice).choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in _ask(client, tool_choice=choice, extra_body=SPEC)
            .choices[0].message.tool_calls] == [(c.function.name, c.function.arguments) for c in whole]
    for extra in ({}, SPEC):
        chunks = list(_ask(client, tool_choice=choice, stream=True, extra_body=extra))
        assert _reassembled(chunks) == [(c.function.name, c.function.arguments) for c in whole]
        fragments = [c for c in chunks if c.choices and c.choices[0].delta.tool_calls
                     and c.choices[0].delta.tool_calls[0].id is None]
        assert len(fragments) >= 3, "the arguments stream as the model writes them"
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        assert all(not c.choices[0].delta.content for c in chunks if c.choices)


@pytest.mark.parametrize("fields, param", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "integer", "minimum": "x"}}}]},
     "tools[0].function.parameters"),
    ({"tools": "get_weather"}, "tools"),
])
def test_unknown_named_tools_and_invalid_tools_are_400s(client, fields, param):
    with pytest.raises(openai.BadRequestError) as error:
        _ask(client, max_tokens=2, **fields)
    assert error.value.body["param"] == param


def test_streamed_calls_send_what_the_stream_lacks_and_know_the_cut_call():
    """Both streaming endpoints (chat completions' Transcript, the Responses API's ResponseBuilder) decide through
    StreamedCalls which calls were written whole: here the second was cut, and the first's arguments were streamed
    in part."""
    from app.server.replies import StreamedCalls

    calls = StreamedCalls()
    assert calls.deltas(ToolCallDelta(0, "get_weather", '{"city": "Pa')) == [ToolCallDelta(0, "get_weather", '{"city": "Pa')]
    calls.deltas(ToolCallDelta(1, "get_time", '{"zone'))  # cut here by max_tokens
    whole = ToolCalls((ToolCall("get_weather", {"city": "Paris"}, arguments_json='{"city": "Paris"}'),))
    assert calls.deltas(whole) == [ToolCallDelta(0, None, 'ris"}')]
    assert (calls.is_whole(0), calls.is_whole(1), calls.arguments) == (True, False, ['{"city": "Paris"}', '{"zone'])

    unstreamed = StreamedCalls()  # calls read at the end only (arguments written as a JSON string)
    assert unstreamed.deltas(ToolCalls((ToolCall("f", {"a": 1}),))) == [ToolCallDelta(0, "f", '{"a": 1}')]
    assert unstreamed.is_whole(0) and not StreamedCalls().is_whole(0)


@pytest.mark.parametrize("parameters", [{"type": "string"}, {"type": "array", "items": {"type": "integer"}},
                                        {"type": ["string", "null"]}])
def test_parameters_that_are_not_an_object_schema_are_a_400_as_openai_answers(client, parameters):
    """Newcomer trial: ``"parameters": {"type": "string"}`` under ``tool_choice`` "required" got no call at all but
    the text ``{"tool_calls": [{"name": "a", "arguments": "]["}]}`` with finish_reason stop (a call's arguments are a
    JSON object; OpenAI refuses such a schema)."""
    tools = [{"type": "function", "function": {"name": "a", "parameters": parameters}}]
    with pytest.raises(openai.BadRequestError) as error:
        _ask(client, max_tokens=2, tools=tools, tool_choice="required")
    body = error.value.body
    assert (body["param"], body["code"]) == ("tools[0].function.parameters", "invalid_schema")
    assert body["message"] == ('tools[0].function.parameters must be a JSON schema of "type": "object" (a call\'s '
                               f'arguments are a JSON object), got "type": {json.dumps(parameters["type"])}')


def test_two_tools_of_one_name_are_a_400_naming_the_second(client):
    """Newcomer trial: two tools named "a" (one without parameters, one taking an integer x) were taken, and the
    call ``tool_choice`` named "a" got arguments ``{"x": 10, "type": "integer"}``, fitting neither: a client runs a
    function by its name, which must say which one."""
    tools = [{"type": "function", "function": {"name": "a"}},
             {"type": "function", "function": {"name": "a", "parameters": {
                 "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]
    with pytest.raises(openai.BadRequestError) as error:
        _ask(client, max_tokens=2, tools=tools, tool_choice={"type": "function", "function": {"name": "a"}})
    body = error.value.body
    assert (body["param"], body["code"]) == ("tools[1].function.name", "invalid_value")
    assert body["message"] == ('tools[1].function.name is "a", the name of tools[0] too: give each function its '
                               'own name (a call names the function it runs)')
