"""Tool calling: formats read from chat templates, calls read back from text, and calls made by a tiny random model
that carries Qwen2.5's tool template, constrained to the functions' schemas, the same in every decoding mode; then
through ``specchat serve`` with the ``openai`` client (tool calls streamed and not, tool results sent back)."""

from __future__ import annotations

import json

import openai
import pytest
from helpers import WEATHER
from server_process import ServerProcess
from tiny_models import QWEN25_TEMPLATE, write_tiny_llama

from inference.chat import ChatSession
from inference.engine import Engine
from inference.events import TextDelta, ToolCall, ToolCalls
from inference.model import load_model
from inference.precision import PrecisionSettings
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings
from inference.tools import GENERIC, HERMES, LLAMA3, MISTRAL, ToolCallReader, ToolUse, tool_call_format

TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris for three days?"}]


def _valid(call: ToolCall) -> bool:
    if call.name == "get_weather":
        return set(call.arguments) == {"city", "days"} and call.arguments["city"] in ("Paris", "Rome", "Oslo") \
            and isinstance(call.arguments["days"], int) and 1 <= call.arguments["days"] <= 7
    return call.name == "get_time" and isinstance(call.arguments.get("utc"), bool) and len(call.arguments) == 1


def test_the_tool_call_format_comes_from_the_chat_template(target):
    assert tool_call_format(QWEN25_TEMPLATE) is HERMES
    assert tool_call_format('{% if tools %}Respond in the format {"name": function name, "parameters": ...}{% endif %}') is LLAMA3
    assert tool_call_format("{% for t in tools %}{{ t }}{% endfor %}[TOOL_CALLS]") is MISTRAL
    assert tool_call_format(target.tokenizer.chat_template) is None, "SmolLM2's template renders no tools"


def test_the_reader_streams_text_and_reads_calls_whole():
    reader = ToolCallReader(HERMES)
    pieces = ["Let me check", ". <tool", "_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Rome\", ",
              "\"days\": 2}}\n</tool_call>"]
    assert [reader.push(p) for p in pieces] == ["Let me check", ". ", "", "", ""]
    assert reader.finish() == ("", [ToolCall("get_weather", {"city": "Rome", "days": 2})])
    broken = ToolCallReader(HERMES)
    assert broken.push("<tool_call>\n{\"name\": 3}") == ""
    assert broken.finish() == ("<tool_call>\n{\"name\": 3}", None), "what does not read as calls is text"
    llama = ToolCallReader(LLAMA3)
    assert llama.push(' {"name": "get_time", "parameters": {"utc": true}}') == ""
    assert llama.finish() == ("", [ToolCall("get_time", {"utc": True})])
    text = ToolCallReader(LLAMA3)
    assert text.push("Hello {world}") == "Hello {world}" and text.finish() == ("", None)
    mistral = ToolCallReader(MISTRAL)
    assert mistral.push('[TOOL_CALLS][{"name": "get_time", "arguments": {"utc": false}}]') == ""
    assert mistral.finish() == ("", [ToolCall("get_time", {"utc": False})])


@pytest.fixture(scope="module")
def tool_model(tiny_ir, tmp_path_factory):
    """A tiny random model with the default tokenizer and Qwen2.5's tool template."""
    return write_tiny_llama(tiny_ir["gguf"], tmp_path_factory.mktemp("tiny-tools") / "tiny-qwen-tools",
                            chat_template=QWEN25_TEMPLATE)


@pytest.fixture(scope="module")
def tool_engine(tool_model, tiny_ir, tmp_path_factory):
    copy = write_tiny_llama(tiny_ir["gguf"], tmp_path_factory.mktemp("tiny-tools-draft") / "copy",
                            chat_template=QWEN25_TEMPLATE)
    return Engine(load_model(tool_model, "CPU", PrecisionSettings()), load_model(copy, "CPU", PrecisionSettings()))


def _reply(engine, use: ToolUse, decoding: str = "ar", temperature: float = 0.0, seed: int | None = None):
    settings = GenerationSettings(decoding=Decoding(decoding), speculative=SpeculativeSettings(k=3),
                                  context=ContextSettings(n_ctx=1024),
                                  sampling=SamplingSettings(temperature=temperature, seed=seed, max_new_tokens=80))
    engine.reset()
    events = list(ChatSession(engine, "", ASK, use).reply(settings))
    calls = [call for event in events if isinstance(event, ToolCalls) for call in event.calls]
    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    return calls, text, events[-1].stats


@pytest.mark.parametrize("choice", ["required", "get_time"])
def test_forced_calls_follow_the_functions_schemas_in_every_mode(tool_engine, choice):
    use = ToolUse((WEATHER, TIME), choice, parallel=False)
    reference, text, stats = _reply(tool_engine, use)
    assert len(reference) == 1 and _valid(reference[0]) and text == "", stats.text
    assert stats.text.startswith("<tool_call>\n{") and stats.text.endswith("}\n</tool_call>")
    if choice == "get_time":
        assert reference[0].name == "get_time"
    for decoding in ("spec_lookup", "spec_model"):
        calls, _, candidate = _reply(tool_engine, use, decoding)
        assert candidate.token_ids == stats.token_ids, decoding
        assert calls == reference
    for seed in range(3):
        sampled, _, _ = _reply(tool_engine, use, "spec_model", temperature=1.0, seed=seed)
        assert len(sampled) == 1 and _valid(sampled[0])


def test_a_cut_reply_keeps_the_calls_written_whole_and_never_shows_the_cut_one_as_text():
    """A reply cut (max_tokens) inside its second call: the first call is kept, the second dropped; not cut, such a
    text is no calls and stays text (a newcomer's cut call came back as the format's raw JSON in ``content``)."""
    weather = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
    hermes = f'<tool_call>\n{weather}\n</tool_call>\n<tool_call>\n{{"name": "get_time", "arguments": {{"ut'
    generic = f'{{"tool_calls": [{weather}, {{"name": "get_'
    for form, text in ((HERMES, hermes), (GENERIC, generic)):
        reader = ToolCallReader(form)
        assert reader.push(text) == ""
        assert reader.finish(cut=True) == ("", [ToolCall("get_weather", {"city": "Paris", "days": 2})]), form.name
        whole = ToolCallReader(form)
        whole.push(text)
        assert whole.finish() == (text, None)
    first_cut = ToolCallReader(HERMES)
    first_cut.push('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par')
    assert first_cut.finish(cut=True) == ("", [])


def test_a_reply_cut_in_its_first_call_is_calls_and_cut_text_is_text():
    """Newcomer trial: a chat cut by max_tokens 8 answered content "" with no tool_calls, whether the model had
    begun a call or written text. The reader says which: calls (an empty list: none written whole) for a call's
    start, None (no calls) for text, which it returns."""
    for form, start in ((GENERIC, '{"tool_call": {"name": "get_weather", "arguments": {"city": "C'),
                        (HERMES, '<tool_call>\n{"name": "get_we')):
        reader = ToolCallReader(form)
        reader.push(start)
        assert reader.finish(cut=True) == ("", []), form.name
        text = ToolCallReader(form)
        shown = text.push("It is sunny in Rome")
        assert (shown, text.finish(cut=True)) == ("It is sunny in Rome", ("", None)), form.name


@pytest.mark.parametrize("parameters", [None, {}])
def test_a_function_without_parameters_is_called_with_none(tool_engine, parameters):
    """OpenAI: "Omitting parameters defines a function with an empty parameter list". A newcomer's such function was
    called with {"<argument>": "<value1234567890"} (the open object the schema was let the model copy the
    instructions' example); sampled replies of the tiny random model write only {}."""
    function = {"name": "now", "description": "The current time."}
    if parameters is not None:
        function["parameters"] = parameters
    use = ToolUse(({"type": "function", "function": function},), "now", parallel=False)
    for seed in range(8):
        calls, _, stats = _reply(tool_engine, use, temperature=1.0, seed=seed)
        assert [(call.name, call.arguments) for call in calls] == [("now", {})], stats.text


def test_auto_lets_the_model_write_text_or_valid_calls(tool_engine):
    use = ToolUse((WEATHER, TIME), "auto")
    for seed in range(4):
        calls, text, stats = _reply(tool_engine, use, temperature=1.0, seed=seed)
        assert all(_valid(call) for call in calls)
        assert calls or text == stats.text


def test_a_template_without_tools_gets_them_in_the_system_prompt(target):
    """SmolLM2's template renders no tools: the generic format (``test_server_tools``) describes them instead."""
    session = ChatSession(Engine(target), "", ASK, ToolUse((WEATHER,)))
    text = target.tokenizer.decode(session.prompt_ids(), skip_special_tokens=False)
    assert text.startswith("<|im_start|>system\nYou can call these tools") and '"name": "get_weather"' in text
    assert session.system_prompt_tokens() > 50


def test_tool_results_render_back_into_the_conversation(tool_engine):
    messages = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
        {"role": "tool", "content": '{"forecast": "sunny"}', "tool_call_id": "call_1"},
    ]
    session = ChatSession(tool_engine, "", messages, ToolUse((WEATHER,)))
    text = tool_engine.target.tokenizer.decode(session.prompt_ids(), skip_special_tokens=False)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>' in text
    assert '<tool_response>\n{"forecast": "sunny"}\n</tool_response>' in text
    assert '"name": "get_weather"' in text.split("\n</tools>")[0], "the tools are listed in the system prompt"


# --- through specchat serve ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tool_server(tool_model, data_dir):
    with ServerProcess(["--model", str(tool_model), "--n-ctx", "1024"]) as process:
        yield process


@pytest.fixture(scope="module")
def tool_client(tool_server):
    return openai.OpenAI(base_url=tool_server.url, api_key="unused", max_retries=0, timeout=120)


def test_the_server_returns_tool_calls_streamed_or_not_and_takes_results_back(tool_client):
    request = dict(model="tiny", messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                   parallel_tool_calls=False, temperature=0, max_tokens=80)
    reply = tool_client.chat.completions.create(**request)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert _valid(ToolCall(call.function.name, json.loads(call.function.arguments)))
    chunks = list(tool_client.chat.completions.create(**request, stream=True, extra_body={"specchat": {"mode": "spec_lookup"}}))
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert [(d.index, d.id, d.function.name, d.function.arguments) for d in deltas[:1]] == \
        [(0, deltas[0].id, call.function.name, "")] and deltas[0].id.startswith("call_")
    assert all(d.index == 0 and d.id is None and d.function.name is None for d in deltas[1:])
    assert "".join(d.function.arguments for d in deltas[1:]) == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude={"index"})]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny"}'},
    ]
    named = tool_client.chat.completions.create(model="tiny", messages=follow, tools=[WEATHER, TIME], max_tokens=40,
                                                tool_choice={"type": "function", "function": {"name": "get_time"}},
                                                temperature=0)
    assert [c.function.name for c in named.choices[0].message.tool_calls] == ["get_time"]
    none = tool_client.chat.completions.create(model="tiny", messages=follow, tools=[WEATHER], tool_choice="none",
                                               max_tokens=5, temperature=0)
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason == "length"


def test_a_tool_call_cut_by_max_tokens_is_not_returned_as_text(tool_client):
    """Newcomer trial: a call cut by max_tokens came back as the tool format's raw JSON in ``content`` (and, streamed,
    as content after the calls): the calls written whole come back, the cut one does not, finish_reason length."""
    request = dict(model="tiny", messages=ASK, tools=[WEATHER, TIME], tool_choice="required", temperature=0,
                   max_tokens=8)
    reply = tool_client.chat.completions.create(**request).choices[0]
    assert reply.finish_reason == "length" and not reply.message.content
    for call in reply.message.tool_calls or []:  # (the calls written whole before the cut, if any)
        assert _valid(ToolCall(call.function.name, json.loads(call.function.arguments)))
    chunks = list(tool_client.chat.completions.create(**request, stream=True))
    assert not "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"


@pytest.mark.parametrize("fields, param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "integer", "minimum": "x"}}}]},
     "tools[0].function.parameters"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{"}}]}]},
     "messages[0].tool_calls[0]"),
])
def test_bad_tools_are_a_400_naming_the_field(tool_client, fields, param):
    with pytest.raises(openai.BadRequestError) as error:
        tool_client.chat.completions.create(**{"model": "tiny", "messages": ASK, "max_tokens": 2, **fields})
    assert error.value.body["param"] == param
