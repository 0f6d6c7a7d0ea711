"""The Responses API (``POST /v1/responses``): its mapping onto the chat path and its store without a model, then
through the official ``openai`` client (``client.responses.create``) against ``specchat serve`` on the default
model: text equal to the chat completion of the same conversation, streamed events that add up to the response,
instructions, json_schema output, a function tool round trip, ``previous_response_id`` and its 400, a
stored response retrieved and deleted by its id."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import openai
import pytest
from helpers import WEATHER as CHAT_WEATHER
from helpers import run_coroutine

from app.server import create_app
from app.server.errors import APIError
from app.server.response_store import MAX_UNSTORED_IDS, ResponseStore
from app.server.responses import input_messages
from inference.events import Finished, GenerationStats, TextDelta, ToolCallDelta, ToolCalls
from inference.events import ToolCall as EngineCall

WEATHER = {"type": "function", **CHAT_WEATHER["function"]}  # the Responses API's flat shape


# --- without a model -----------------------------------------------------------------------------------------------


def test_input_items_become_chat_messages():
    assert input_messages("Hi") == [{"role": "user", "content": "Hi"}]
    messages = input_messages([
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                          {"type": "input_text", "text": "in Rome?"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Rome", "days": 1}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ])
    assert messages == [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Rome", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]


@pytest.mark.parametrize("value, param, code", [
    ([], "input", "invalid_value"),
    ([5], "input[0]", "invalid_type"),
    ([{"role": "critic", "content": "x"}], "input[0].role", "invalid_value"),
    ([{"role": "user"}], "input[0].content", "invalid_type"),
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}], "input[0].content[0].type", "unsupported"),
    ([{"role": "user", "content": [{"type": "input_text"}]}], "input[0].content[0].text", "missing_required_parameter"),
    ([{"type": "function_call", "name": "f"}], "input[0]", "invalid_value"),
    ([{"type": "function_call_output", "output": "x"}], "input[0].call_id", "missing_required_parameter"),
    ([{"type": "web_search_call"}], "input[0].type", "unsupported"),
])
def test_bad_input_items_are_named(value, param, code):
    """Each with its code (newcomer trial: some refusals had `code` null)."""
    with pytest.raises(APIError) as refused:
        input_messages(value)
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, code)
    assert param.rsplit(".", 1)[0] in refused.value.message


def test_the_store_keeps_the_most_recent_responses_within_its_bounds():
    store = ResponseStore(max_responses=2, max_chars=200)
    store.put("a", [{"role": "user", "content": "1"}])
    store.put("b", [{"role": "user", "content": "2"}])
    assert store.get("a") == [{"role": "user", "content": "1"}]  # now the most recent
    store.put("c", [{"role": "user", "content": "3"}])
    assert len(store) == 2 and store.get("c") and store.get("a")
    with pytest.raises(APIError) as dropped:
        store.get("b")
    assert dropped.value.param == "previous_response_id" and "'b'" in dropped.value.message
    store.put("d", [{"role": "user", "content": "x" * 150}])  # the characters' bound drops the others
    assert len(store) == 1 and store.get("d")
    store.put("e", [{"role": "user", "content": "x" * 300}])  # larger than the bound alone: not kept
    with pytest.raises(APIError):
        store.get("e")
    assert store.delete("d") == {"id": "d", "object": "response.deleted", "deleted": True} and len(store) == 0
    store.put("f", [{"role": "user", "content": "y" * 120}], {"id": "f"})  # its characters were given back
    store.put("g", [{"role": "user", "content": "z"}])  # kept for previous_response_id without its object
    assert store.response("f") == {"id": "f"} and len(store) == 2
    with pytest.raises(APIError) as unretrievable:
        store.response("g")
    assert (unretrievable.value.status, unretrievable.value.code) == (404, "response_not_found")


class Scripted:
    """A backend without a model: records each request, replies with ``batches``."""

    def __init__(self, *batches):
        self.batches, self.requests = batches, []

    async def generate(self, request, cancel):
        self.requests.append(request)
        for batch in self.batches:
            yield batch


def post(app, body: dict) -> httpx.Response:
    async def send():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.post("/v1/responses", json=body)
    return run_coroutine(send())


def test_a_call_streams_as_a_function_call_item_and_is_kept_for_the_next_turn():
    stats = GenerationStats(mode="ar", new_tokens=9, prompt_tokens=20, stop_reason="eos")
    backend = Scripted([ToolCallDelta(0, "get_weather", '{"city": "Ro')],
                       [ToolCalls((EngineCall("get_weather", {"city": "Rome", "days": 2}, '{"city": "Rome", "days": 2}'),)),
                        Finished(stats)])
    app = create_app(backend, model_id="m")
    streamed = post(app, {"input": "Weather in Rome?", "tools": [WEATHER], "stream": True, "max_output_tokens": 30})
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    kinds = [event["type"] for event in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.delta",
                     "response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert "".join(e["delta"] for e in events if e["type"].endswith("arguments.delta")) == '{"city": "Rome", "days": 2}'
    done = events[-1]["response"]
    call = done["output"][0]
    assert (call["type"], call["name"], call["status"]) == ("function_call", "get_weather", "completed")
    assert done["usage"]["input_tokens"] == 20 and done["usage"]["output_tokens"] == 9
    assert backend.requests[0].settings.sampling.max_new_tokens == 30
    assert backend.requests[0].tools.tools[0]["function"]["name"] == "get_weather"
    follow = post(app, {"previous_response_id": done["id"], "input": [
        {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]})
    assert follow.status_code == 200
    assert backend.requests[1].messages == [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": call["call_id"], "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Rome", "days": 2}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": call["call_id"]},
    ]


def test_a_function_call_output_must_answer_a_call_of_the_previous_response_or_the_input():
    """Newcomer trial: with ``previous_response_id``, a ``function_call_output`` whose ``call_id`` no call had was
    taken; OpenAI answers 400 "No tool call found for function call output with call_id ...", as now."""
    stats = GenerationStats(mode="ar", new_tokens=9, prompt_tokens=20, stop_reason="eos")
    backend = Scripted([ToolCalls((EngineCall("get_weather", {"city": "Rome"}, '{"city": "Rome"}'),)), Finished(stats)])
    app = create_app(backend, model_id="m")
    called = post(app, {"input": "Weather in Rome?", "tools": [WEATHER]}).json()
    call_id = called["output"][0]["call_id"]
    own_call = {"type": "function_call", "call_id": "call_mine", "name": "get_weather", "arguments": "{}"}
    for body, at in [
        ({"previous_response_id": called["id"], "input": [
            {"type": "message", "role": "user", "content": "Here:"},
            {"type": "function_call_output", "call_id": "call_nope", "output": "sunny"}]}, "input[1]"),
        ({"input": [{"type": "function_call_output", "call_id": "call_mine", "output": "sunny"}, own_call]}, "input[0]"),
    ]:
        refused = post(app, body)
        error = refused.json()["error"]
        assert (refused.status_code, error["param"], error["code"]) == (400, f"{at}.call_id", "invalid_value"), error
        wrong = body["input"][int(at[6])]["call_id"]
        assert error["message"] == (
            f"No tool call found for function call output with call_id {wrong!r}: {at}.call_id must be the call_id of "
            "a function_call before it in input, or in the response previous_response_id names")
    for body in ({"previous_response_id": called["id"], "input": [
                     {"type": "function_call_output", "call_id": call_id, "output": "sunny"}]},
                 {"input": [own_call, {"type": "function_call_output", "call_id": "call_mine", "output": "sunny"}]}):
        assert post(app, body).status_code == 200
    assert len(backend.requests) == 3
    # a message between a call and its output: a chat completion's tool result must follow its call's message
    for body in ({"previous_response_id": called["id"], "input": [
                     {"type": "message", "role": "user", "content": "Here:"},
                     {"type": "function_call_output", "call_id": call_id, "output": "sunny"}]},
                 {"input": [own_call, {"type": "message", "role": "user", "content": "Here:"},
                            {"type": "function_call_output", "call_id": "call_mine", "output": "sunny"}]}):
        refused = post(app, body)
        at = f"input[{len(body['input']) - 1}]"
        assert (refused.status_code, refused.json()["error"]) == (400, {
            "message": f"{at}.call_id {body['input'][-1]['call_id']!r} answers a function_call that is not right "
                       "before it: send each function_call_output right after the function_call items of its turn "
                       "(or after the other outputs of that turn), with no message between",
            "type": "invalid_request_error", "param": f"{at}.call_id", "code": "invalid_value"})
    assert len(backend.requests) == 3


def _call(call_id: str) -> dict:
    """A function_call input item calling ``get_weather`` for Rome."""
    return {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": '{"city": "Rome"}'}


def _output(call_id: str) -> dict:
    """A function_call_output input item answering ``call_id``."""
    return {"type": "function_call_output", "call_id": call_id, "output": "sunny"}


ASK = {"role": "user", "content": "Weather in Rome?"}
#: What the refusal of calls without outputs asks for.
SEND_OUTPUTS = "send a function_call_output item for each (its call_id and output) right after the function_call "


@pytest.mark.parametrize("items, param, message", [
    ([ASK, _call("a"), _call("b"), _output("a"), {"role": "user", "content": "Well?"}], "input[2].call_id",
     "No tool output found for function call b: " + SEND_OUTPUTS + "items of its turn, with no message between"),
    ([ASK, _call("a"), _call("b")], "input[1].call_id",
     "No tool output found for function calls a, b: " + SEND_OUTPUTS + "items of their turn, with no message "
     "between (input cannot end with calls: the response to them reads their outputs)"),
    ([ASK, _call("a"), _call("b"), _call("a"), _output("a"), _output("b")], "input[3].call_id",
     "input[3].call_id 'a' is also the call_id of input[1], a function_call of the same turn: give each call its "
     "own call_id (the one the response gave it)"),
    ([ASK, _call("a"), _output("a"), _output("a")], "input[3].call_id",
     "input[3].call_id 'a' has its function_call_output already, input[2]: send one function_call_output per "
     "function_call"),
])
def test_each_function_call_has_one_output_said_in_responses_words(items, param, message):
    """Newcomer trial: a function_call without its output (one of two answered, then a message; calls last) got a
    200 before the chat mapping refused it; then, as two outputs of one call or two calls with one call_id, the
    refusal came in chat words renamed ("input.tool_calls: ... tool input responding to each tool_call_id").
    OpenAI refuses each ("No tool output found for function call b"); the 400 names the item and says what to
    send, in Responses' words."""
    backend = Scripted()
    refused = post(create_app(backend, model_id="m"), {"input": items})
    assert (refused.status_code, refused.json()["error"]) == (400, {
        "message": message, "type": "invalid_request_error", "param": param, "code": "invalid_value"})
    assert backend.requests == []


def test_a_previous_responses_calls_need_their_outputs_first():
    """Newcomer trial: continuing a response that called a tool with a message instead of the call's output got a
    200; OpenAI refuses it: "No tool output found for function call ..."."""
    stats = GenerationStats(mode="ar", new_tokens=9, prompt_tokens=20, stop_reason="eos")
    backend = Scripted([ToolCalls((EngineCall("get_weather", {"city": "Rome"}, '{"city": "Rome"}'),)), Finished(stats)])
    app = create_app(backend, model_id="m")
    called = post(app, {"input": "Weather in Rome?", "tools": [WEATHER]}).json()
    call_id = called["output"][0]["call_id"]
    for later in ("Thanks!", [{"role": "user", "content": "Thanks!"}], [_call("c"), _output("c")]):
        refused = post(app, {"previous_response_id": called["id"], "input": later})
        assert (refused.status_code, refused.json()["error"]) == (400, {
            "message": f"No tool output found for function call {call_id}: " + SEND_OUTPUTS + "items of its turn, "
                       "with no message between (the response previous_response_id names ended with this call, so "
                       "input starts with its output)",
            "type": "invalid_request_error", "param": "input", "code": "invalid_value"})
    assert len(backend.requests) == 1


def test_a_call_cut_by_max_output_tokens_is_left_out_of_the_output_and_not_kept_as_a_call():
    stats = GenerationStats(mode="ar", new_tokens=6, prompt_tokens=20, stop_reason="max_new_tokens")
    backend = Scripted([ToolCallDelta(0, "get_weather", '{"city": "Ro')], [Finished(stats)])
    app = create_app(backend, model_id="m")
    body = post(app, {"input": "Weather in Rome?", "tools": [WEATHER], "max_output_tokens": 6}).json()
    assert body["status"] == "incomplete" and body["output"] == []
    assert post(app, {"previous_response_id": body["id"], "input": "And in Oslo?"}).status_code == 200
    assert backend.requests[1].messages[1] == {"role": "assistant", "content": ""}  # no call the reply did not finish


def test_a_call_cut_after_a_whole_one_leaves_the_whole_one_alone_in_the_output():
    """Newcomer trial: ``tool_choice`` "required" and ``max_output_tokens`` 40 gave a whole function_call and a cut
    one, ``{"arguments": "{\\"city\\": \\"C", "status": "incomplete"}``, which an agent loop's ``json.loads``
    fails on. The output holds the calls written whole, as a chat completion's ``tool_calls`` do, and says why it
    is incomplete; streamed, the cut call's events went out as it was written, and the final response leaves it out."""
    stats = GenerationStats(mode="ar", new_tokens=40, prompt_tokens=20, stop_reason="max_new_tokens")
    whole = EngineCall("get_weather", {"city": "Rome"}, '{"city": "Rome"}')
    batches = ([ToolCallDelta(0, "get_weather", '{"city": "Rome"}'), ToolCallDelta(1, "get_weather", '{"city": "C')],
               [ToolCalls((whole,)), Finished(stats)])
    request = {"input": "Weather in Rome?", "tools": [WEATHER], "tool_choice": "required", "max_output_tokens": 40,
               "temperature": 0}
    body = post(create_app(Scripted(*batches), model_id="m"), request).json()
    streamed = post(create_app(Scripted(*batches), model_id="m"), {**request, "stream": True})
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.incomplete"
    for response in (body, events[-1]["response"]):
        assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}
        assert [(item["type"], json.loads(item["arguments"]), item["status"]) for item in response["output"]] == [
            ("function_call", {"city": "Rome"}, "completed")]
    cut = [event["item"] for event in events if event["type"] == "response.output_item.done"][-1]
    assert (cut["arguments"], cut["status"]) == ('{"city": "C', "incomplete")


def test_a_tool_choice_left_out_is_echoed_as_the_servers_default_made_it():
    """Under ``--tool-choice-default call-then-answer`` the question gets "required" and the call's result "none"
    (the engine then gets no tools), and the Response says so; a default server says "auto"."""
    stats = GenerationStats(mode="ar", new_tokens=9, prompt_tokens=20, stop_reason="eos")
    backend = Scripted([ToolCalls((EngineCall("get_weather", {"city": "Rome"}, '{"city": "Rome"}'),)), Finished(stats)])
    app = create_app(backend, model_id="m", tool_choice_default="call-then-answer")
    asked = post(app, {"input": "Weather in Rome?", "tools": [WEATHER]}).json()
    answered = post(app, {"previous_response_id": asked["id"], "tools": [WEATHER], "input": [
        {"type": "function_call_output", "call_id": asked["output"][0]["call_id"], "output": "sunny"}]}).json()
    assert (asked["tool_choice"], answered["tool_choice"]) == ("required", "none")
    assert backend.requests[0].tools.choice == "required" and backend.requests[1].tools is None
    plain = post(create_app(backend, model_id="m"), {"input": "Weather in Rome?", "tools": [WEATHER]}).json()
    assert plain["tool_choice"] == "auto" and backend.requests[2].tools.choice == "auto"


@pytest.mark.parametrize("body, status, param", [
    ({"input": "Hi", "previous_response_id": "resp_unknown"}, 400, "previous_response_id"),
    ({"input": "Hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"input": "Hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nope"}}}}, 400,
     "text.format.schema"),
    ({"input": "Hi", "tools": [{"type": "web_search"}]}, 400, "tools[0]"),
    ({"input": "Hi", "tools": [{**WEATHER, "name": "bad name"}]}, 400, "tools[0].name"),
    ({"input": "Hi", "tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, 400, "tool_choice"),
    ({"input": 5}, 400, "input"),
    ({"input": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": '{"a": '}],
      "text": {"format": {"type": "json_object"}}}, 400, "text.format"),  # a prefill the grammar would start over
])
def test_refusals_name_the_responses_field(body, status, param):
    response = post(create_app(Scripted(), model_id="m"), body)
    error = response.json()["error"]
    assert (response.status_code, error["param"]) == (status, param)
    assert param.split("[")[0] in error["message"]
    assert "messages" not in error["message"] and "max_completion_tokens" not in error["message"]
    if param == "previous_response_id":
        assert "resp_unknown" in error["message"] and error["code"] == "previous_response_not_found"
    if "assistant prefill" in error["message"]:  # the chat's words, read as the Responses request's ("input end with")
        assert error["message"].startswith("the last message is an assistant message") and error["message"].endswith(
            "or send a user message last"), error["message"]


def test_an_empty_input_is_refused_as_an_empty_prompt_is():
    """Newcomer trial: ``{"input": ""}`` generated a reply where ``/v1/completions`` refuses ``"prompt": ""`` (400);
    both are refused now, before any generation, as an empty list of input items is."""
    backend = Scripted()
    for body in ({"input": ""}, {"input": "", "stream": True}):
        response = post(create_app(backend, model_id="m"), body)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == {
            "message": "input is empty: send the user's message as a string, or at least one message",
            "type": "invalid_request_error", "param": "input", "code": "invalid_value"}
    assert backend.requests == []


def test_text_with_instructions_and_an_engine_reply():
    stats = GenerationStats(mode="ar", new_tokens=2, prompt_tokens=7, stop_reason="max_new_tokens")
    backend = Scripted([TextDelta("Bon", 1, False), TextDelta("jour", 2, False), Finished(stats)])
    response = post(create_app(backend, model_id="m"), {"instructions": "Answer in French.", "input": "Hello",
                                                         "temperature": 0, "max_output_tokens": 2, "store": False})
    body = response.json()
    assert body["object"] == "response" and body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"} and body["temperature"] == 0
    assert body["output"][0]["content"][0] == {"type": "output_text", "text": "Bonjour", "annotations": [], "logprobs": []}
    assert body["output"][0]["status"] == "incomplete"  # the message cut (a newcomer's said completed)
    assert backend.requests[0].system_prompt == "Answer in French."
    assert backend.requests[0].messages == [{"role": "user", "content": "Hello"}]
    refused = post(create_app(backend, model_id="m"), {"input": "Again", "previous_response_id": body["id"]})
    assert refused.status_code == 400, "store false keeps nothing"


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_not_stored_is_named_as_such_when_continued(stream):
    """Newcomer trial: naming a response created with ``store: false`` as ``previous_response_id`` was answered
    "is not kept by this server (it keeps the last 256 responses ...)", as if it had been dropped."""
    backend = Scripted([TextDelta("Hi", 1, False), Finished(GenerationStats(mode="ar", new_tokens=1, stop_reason="eos"))])
    app = create_app(backend, model_id="m")
    created = post(app, {"input": "Hello", "store": False, "stream": stream})
    response_id = re.search(r'"id":"(resp_\w+)"', created.text.replace(" ", "")).group(1)
    error = post(app, {"input": "Again", "previous_response_id": response_id}).json()["error"]
    assert error == {
        "message": f"previous_response_id {response_id!r} was created with store false, so this server did not keep "
                   "it: send the whole conversation in input instead, or create responses with store true (the "
                   "default) to continue them",
        "type": "invalid_request_error", "param": "previous_response_id", "code": "previous_response_not_found"}
    assert "is not kept by this server" in post(app, {"input": "x", "previous_response_id": "resp_0"}).text
    store = ResponseStore()
    for index in range(MAX_UNSTORED_IDS + 1):  # a bounded memory: the oldest id is forgotten
        store.not_stored(f"resp_{index}")
    for response_id, words in (("resp_0", "is not kept by this server"), ("resp_1", "was created with store false")):
        with pytest.raises(APIError, match=words):
            store.get(response_id)


def get(app, path: str, **params) -> httpx.Response:
    """``GET path`` of ``app`` in-process, with query ``params``."""
    async def send():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get(path, params=params)
    return run_coroutine(send())


def test_a_stored_responses_input_items_are_listed_as_openai_lists_them():
    """Trial: ``client.responses.input_items.list(id)`` (``GET /v1/responses/{id}/input_items``) was a 404
    ``unknown_route``. It lists the items of the response's ``input`` as OpenAI's item objects (each with an id,
    text as ``input_text`` parts, an assistant's as ``output_text``), newest first unless ``order`` is asc, pages of
    ``limit`` after the item ``after`` names; an unknown id, or a bad parameter, is an error naming it."""
    from openai.types.responses import ResponseItem
    from pydantic import TypeAdapter

    stats = GenerationStats(mode="ar", new_tokens=1, prompt_tokens=30, stop_reason="eos")
    app = create_app(Scripted([TextDelta("Sunny.", 1, False), Finished(stats)]), model_id="m")
    items = [{"role": "developer", "content": "Be brief."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                               {"type": "input_text", "text": "in Rome?"}]},
             {"role": "assistant", "content": "Let me look.", "id": "msg_mine"},
             _call("call_1"), _output("call_1")]
    created = post(app, {"input": items, "instructions": "Answer in English."}).json()
    listed = get(app, f"/v1/responses/{created['id']}/input_items").json()
    data = listed["data"]
    ids = [item["id"] for item in data]
    assert listed == {"object": "list", "data": data, "first_id": ids[0], "last_id": ids[-1], "has_more": False}
    assert [{key: value for key, value in item.items() if key != "id"} for item in reversed(data)] == [
        {"type": "message", "role": "developer", "status": "completed",
         "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "user", "status": "completed",
         "content": [{"type": "input_text", "text": "Weather "}, {"type": "input_text", "text": "in Rome?"}]},
        {"type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "status": "completed", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "status": "completed", "call_id": "call_1", "output": "sunny"},
    ]
    assert ids[2] == "msg_mine" and len(set(ids)) == 5 and ids[0].startswith("fco_") and ids[1].startswith("fc_")
    assert [type(TypeAdapter(ResponseItem).validate_python(item)).__name__ for item in data] == [
        "ResponseFunctionToolCallOutputItem", "ResponseFunctionToolCallItem", "ResponseOutputMessage",
        "ResponseInputMessageItem", "ResponseInputMessageItem"]  # as the openai client reads them
    path = f"/v1/responses/{created['id']}/input_items"
    first = get(app, path, order="asc", limit=2).json()
    assert ([item["id"] for item in first["data"]], first["first_id"], first["last_id"], first["has_more"]) == (
        ids[::-1][:2], ids[-1], ids[-2], True)
    rest = get(app, path, order="asc", limit=2, after=first["last_id"]).json()
    last = get(app, path, order="asc", limit=2, after=rest["last_id"]).json()
    assert [item["id"] for item in rest["data"] + last["data"]] == ids[::-1][2:]
    assert (rest["has_more"], last["has_more"]) == (True, False)
    assert [item["id"] for item in get(app, path, limit=1, after=ids[3]).json()["data"]] == [ids[4]]
    text_input = post(app, {"input": "Hello"}).json()
    assert [(item["role"], item["content"]) for item in get(
        app, f"/v1/responses/{text_input['id']}/input_items").json()["data"]] == [
            ("user", [{"type": "input_text", "text": "Hello"}])]  # a string is one user message
    for params, param, words in (({"order": "up"}, "order", "order must be asc or desc, got 'up'"),
                                 ({"limit": 0}, "limit", "limit must be an integer from 1 to 100, got '0'"),
                                 ({"limit": "x"}, "limit", "limit must be an integer from 1 to 100, got 'x'"),
                                 ({"after": "msg_nope"}, "after", "after is 'msg_nope', which is not an input item of response")):
        refused = get(app, path, **params)
        error = refused.json()["error"]
        assert (refused.status_code, error["param"], error["code"]) == (400, param, "invalid_value"), error
        assert words in error["message"]
    missing = get(app, "/v1/responses/resp_never/input_items")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "response_not_found")
    assert missing.json()["error"]["message"].startswith("Response with id 'resp_never' not found")
    unstored = post(app, {"input": "Hello", "store": False}).json()
    assert "created with store false" in get(app, f"/v1/responses/{unstored['id']}/input_items").text


def _events(text: str) -> list[dict]:
    """The data of each event of a Responses stream."""
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("batches", [
    [[TextDelta("Bonjour.", 1, False), Finished(GenerationStats(mode="ar", new_tokens=2, stop_reason="eos"))]],
    [[TextDelta("Let me look.", 1, False), ToolCalls((EngineCall("get_weather", {"city": "Rome"}, '{"city": "Rome"}'),)),
      Finished(GenerationStats(mode="ar", new_tokens=9, stop_reason="eos"))]],
    [[TextDelta("Bon", 1, False)], [TextDelta("jour", 2, False), Finished(
        GenerationStats(mode="ar", new_tokens=2, stop_reason="max_new_tokens"))]],
], ids=["text", "text-and-call", "two-deltas-cut"])
def test_a_stored_response_retrieved_with_stream_true_is_replayed_as_its_events(batches):
    """Trial: ``GET /v1/responses/{id}?stream=true`` (``client.responses.retrieve(id, stream=True)``) answered the
    plain JSON object, which the client's stream reader cannot read. It replays the stored response as the events its
    streaming create sent (OpenAI does so): the same bytes where each item came in one delta, else the same events
    with each item's text in one delta; ``starting_after`` skips the events up to that sequence number."""
    app = create_app(Scripted(*batches), model_id="m")
    request = {"input": "Weather in Rome?", "tools": [WEATHER], "max_output_tokens": 9}
    streamed = post(app, {**request, "stream": True})
    response_id = _events(streamed.text)[0]["response"]["id"]
    replayed = get(app, f"/v1/responses/{response_id}", stream="true")
    assert (replayed.status_code, replayed.headers["content-type"].split(";")[0]) == (200, "text/event-stream")
    original, events = _events(streamed.text), _events(replayed.text)
    if len(batches) == 1:
        assert replayed.text == streamed.text
    else:
        assert [event["type"] for event in events] == [
            "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
            "response.output_text.delta", "response.output_text.done", "response.content_part.done",
            "response.output_item.done", "response.incomplete"]
        assert [event["delta"] for event in events if event["type"].endswith(".delta")] == ["Bonjour"]
        assert events[:2] == original[:2] and events[-4:-1] == [
            {**event, "sequence_number": event["sequence_number"] - 1} for event in original[-4:-1]]
        assert events[-1]["response"] == original[-1]["response"]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert events[-1]["response"] == get(app, f"/v1/responses/{response_id}").json()
    assert _events(get(app, f"/v1/responses/{response_id}", stream="true", starting_after=3).text) == events[4:]
    for stream in ("false", "0"):
        assert get(app, f"/v1/responses/{response_id}", stream=stream).json() == events[-1]["response"]
    # a response created without streaming replays alike: its ids are those the create call returned
    created = post(app, request).json()
    replayed = _events(get(app, f"/v1/responses/{created['id']}", stream="1").text)
    assert replayed[-1]["response"] == created and replayed[0]["response"]["id"] == created["id"]
    assert [event["item"] for event in replayed if event["type"] == "response.output_item.done"] == created["output"]
    for params, param in (({"stream": "yes please"}, "stream"), ({"stream": "true", "starting_after": "x"},
                                                                "starting_after")):
        refused = get(app, f"/v1/responses/{created['id']}", **params)
        assert (refused.status_code, refused.json()["error"]["param"]) == (400, param), refused.text
    missing = get(app, "/v1/responses/resp_never", stream="true")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "response_not_found")


class Paused:
    """A backend whose reply sends ``first``, then waits until ``release`` is set (or the request is cancelled)
    before it sends ``rest``; ``paused`` is set while it waits."""

    def __init__(self, first: list, rest: list):
        self.first, self.rest = first, rest
        self.paused, self.release = asyncio.Event(), asyncio.Event()

    async def generate(self, request, cancel):
        yield self.first
        self.paused.set()
        while not (self.release.is_set() or cancel.is_set()):
            await asyncio.sleep(0.01)
        yield self.rest


async def _open_stream(app, body: dict, leave: asyncio.Event):
    """``POST /v1/responses`` of ``body`` on ``app`` as a running task, whose bytes arrive in the queue it returns
    as they are sent (httpx's ASGI transport hands a body over once whole); the client leaves when ``leave`` is
    set."""
    sent, received = asyncio.Queue(), []

    async def receive():
        if not received:
            received.append(True)
            return {"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body":
            await sent.put(message.get("body", b""))

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/responses", "raw_path": b"/v1/responses", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    return asyncio.ensure_future(app(scope, receive, send)), sent


def _drained(queue: asyncio.Queue) -> str:
    """The bytes the queue holds now, as text."""
    parts = []
    while not queue.empty():
        parts.append(queue.get_nowait())
    return b"".join(parts).decode()


def test_a_response_still_streaming_is_retrieved_in_progress_with_what_it_has_so_far():
    """Trial: ``GET /v1/responses/{id}`` of a response whose stream still ran was a 404 ("not kept by this server")
    though the client had its id from ``response.created``. OpenAI answers it ``in_progress`` with its output so far,
    as now; its input items are listed; what needs it whole (a replay, a delete, a continuation) is refused saying it
    is still generating. Once ended it is the stored response; a stream its client left is not kept."""
    stats = GenerationStats(mode="ar", new_tokens=2, prompt_tokens=7, stop_reason="eos")

    async def scenario(leaves: bool):
        backend = Paused([TextDelta("Bon", 1, False)], [TextDelta("jour", 2, False), Finished(stats)])
        app = create_app(backend, model_id="m")
        leave = asyncio.Event()
        stream, sent = await _open_stream(app, {"input": "Hello", "stream": True}, leave)
        await asyncio.wait_for(backend.paused.wait(), 30)
        began = _events(_drained(sent))
        response_id = began[0]["response"]["id"]
        path = f"/v1/responses/{response_id}"
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            during = [await client.get(path), await client.get(f"{path}/input_items"),
                      await client.get(path, params={"stream": "true"}), await client.delete(path),
                      await client.post("/v1/responses", json={"input": "More", "previous_response_id": response_id})]
            (leave if leaves else backend.release).set()
            await asyncio.wait_for(stream, 30)
            after = await client.get(path)
        return began, during, _events(_drained(sent)), after

    began, (during, items, replay, delete, continued), ended, after = run_coroutine(scenario(leaves=False))
    assert during.status_code == 200 and during.json() == {**began[0]["response"], "output": [
        {"type": "message", "id": began[2]["item"]["id"], "status": "in_progress", "role": "assistant",
         "content": [{"type": "output_text", "text": "Bon", "annotations": [], "logprobs": []}]}]}
    assert [item["content"] for item in items.json()["data"]] == [[{"type": "input_text", "text": "Hello"}]]
    for refused, words in ((replay, "is still being generated: retrieve it without stream"),
                           (delete, "is still being generated: delete it once its stream ended"),
                           (continued, "is still being generated: continue it once its stream ended")):
        error = refused.json()["error"]
        assert (refused.status_code, error["code"]) == (409, "response_in_progress"), refused.text
        assert error["message"].startswith(f"Response {began[0]['response']['id']!r} {words}"), error["message"]
    assert ended[-1]["type"] == "response.completed" and after.json() == ended[-1]["response"]
    assert after.json()["output"][0]["content"][0]["text"] == "Bonjour"
    _, (during, *_), _, after = run_coroutine(scenario(leaves=True))
    assert during.json()["status"] == "in_progress"
    assert (after.status_code, after.json()["error"]["code"]) == (404, "response_not_found")


# --- through the openai client on the default model ----------------------------------------------------------------


def test_a_response_is_the_chat_reply_and_its_stream_adds_up_to_it(client):
    asked = dict(model="any", instructions="Answer in one sentence.", temperature=0, max_output_tokens=24)
    response = client.responses.create(input="What is the capital of France?", **asked)
    chat = client.chat.completions.create(model="any", temperature=0, max_completion_tokens=24, messages=[
        {"role": "system", "content": "Answer in one sentence."}, {"role": "user", "content": "What is the capital of France?"}])
    assert response.output_text and response.output_text == chat.choices[0].message.content
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    events = list(client.responses.create(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is the capital of France?"}]}], stream=True, **asked))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] in ("response.completed",
                                                                                     "response.incomplete")
    deltas = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    done = next(event.text for event in events if event.type == "response.output_text.done")
    assert deltas == done == response.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == response.usage.output_tokens


def test_json_schema_output(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    response = client.responses.create(model="any", input="Name a city in Italy as JSON.", temperature=0,
                                       max_output_tokens=60, text={"format": {"type": "json_schema", "name": "place",
                                                                              "schema": schema, "strict": True}})
    value = json.loads(response.output_text)
    assert set(value) == {"city", "country"} and all(isinstance(v, str) for v in value.values())


def test_a_function_tool_round_trip_and_previous_response_id(client):
    first = client.responses.create(model="any", input="What is the weather in Paris for three days?", tools=[WEATHER],
                                    tool_choice="required", parallel_tool_calls=False, temperature=0,
                                    max_output_tokens=60)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    arguments = json.loads(calls[0].arguments)
    assert arguments["city"] in ("Paris", "Rome", "Oslo") and 1 <= arguments["days"] <= 7
    # "none" for the answer: shown its call and the result under "auto", the tiny model calls again
    result = {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 24 degrees."}
    second = client.responses.create(model="any", previous_response_id=first.id, tools=[WEATHER], tool_choice="none",
                                     temperature=0, max_output_tokens=40, input=[result])
    assert second.output_text and second.previous_response_id == first.id
    whole = client.responses.create(model="any", tools=[WEATHER], tool_choice="none", temperature=0,
                                    max_output_tokens=40, input=[
                                        {"role": "user", "content": "What is the weather in Paris for three days?"},
                                        {"type": "function_call", "call_id": calls[0].call_id, "name": calls[0].name,
                                         "arguments": calls[0].arguments}, result])
    assert (second.usage.input_tokens, second.output_text) == (whole.usage.input_tokens, whole.output_text)
    third = client.responses.create(model="any", previous_response_id=second.id, input="Thanks!", tools=[WEATHER],
                                    temperature=0, max_output_tokens=8)
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="any", previous_response_id="resp_not_kept", input="Hi")
    assert refused.value.body["param"] == "previous_response_id" and "resp_not_kept" in refused.value.body["message"]


def test_a_stored_response_is_retrieved_and_deleted_by_its_id(client):
    """Trial: ``client.responses.retrieve(id)`` and ``client.responses.delete(id)`` were a 404 ``unknown_route``,
    though the server keeps the last responses. A stored response is retrieved as created (streamed too), deleted
    with OpenAI's ``response.deleted`` object, then gone (404 naming it, and no longer a previous_response_id); one
    created with store false, or never, is a 404 naming its id."""
    asked = dict(model="any", input="Say hello.", temperature=0, max_output_tokens=6)
    created = client.responses.create(**asked)
    assert created.output_text and created.store
    assert client.responses.retrieve(created.id).model_dump() == created.model_dump()
    streamed = list(client.responses.create(stream=True, **asked))[-1].response
    assert client.responses.retrieve(streamed.id).model_dump() == streamed.model_dump()
    deleted = client.responses.with_raw_response.delete(created.id)
    assert (deleted.status_code, json.loads(deleted.text)) == (
        200, {"id": created.id, "object": "response.deleted", "deleted": True})
    for gone in (lambda: client.responses.retrieve(created.id), lambda: client.responses.delete(created.id)):
        with pytest.raises(openai.NotFoundError) as missing:
            gone()
        assert (missing.value.body["code"], missing.value.body["param"]) == ("response_not_found", "response_id")
        assert missing.value.body["message"].startswith(f"Response with id {created.id!r} not found")
    with pytest.raises(openai.BadRequestError, match="is not kept by this server"):
        client.responses.create(model="any", previous_response_id=created.id, input="Again", max_output_tokens=2)
    unstored = client.responses.create(store=False, **asked)
    for response_id, why in ((unstored.id, "was created with store false"), ("resp_never", "is not kept")):
        with pytest.raises(openai.NotFoundError) as missing:
            client.responses.retrieve(response_id)
        assert f"Response with id {response_id!r} not found" in missing.value.body["message"]
        assert why in missing.value.body["message"]
    assert client.responses.retrieve(streamed.id).id == streamed.id  # the other one is still kept


def test_the_clients_input_items_list_pages_through_a_stored_responses_input(client):
    """``client.responses.input_items.list`` reads the items of a stored response's input (a 404 before), and its
    pages follow one another by ``after`` (the client's auto-pagination)."""
    sent = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
    created = client.responses.create(model="any", input=sent, temperature=0, max_output_tokens=2)
    paged = list(client.responses.input_items.list(created.id, limit=1, order="asc"))
    assert [(item.type, item.role, [part.text for part in item.content]) for item in paged] == [
        ("message", "developer", ["Be brief."]), ("message", "user", ["Say hello."])]
    newest_first = client.responses.input_items.list(created.id)
    assert [item.id for item in newest_first.data] == [item.id for item in reversed(paged)]
    assert newest_first.has_more is False
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.input_items.list("resp_never")
    assert missing.value.body["code"] == "response_not_found"


def test_the_client_retrieves_a_stored_response_as_a_stream(client):
    """``client.responses.retrieve(id, stream=True)`` got the plain JSON object, which its stream reader parsed as no
    event at all; it reads the replayed events now: the streamed create's, each item's text in one delta."""
    asked = dict(model="any", input="Say hello.", temperature=0, max_output_tokens=8)
    created = list(client.responses.create(stream=True, **asked))
    replayed = list(client.responses.retrieve(created[-1].response.id, stream=True))
    assert [event.type for event in replayed] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", created[-1].type]
    assert replayed[4].delta == created[-1].response.output_text and replayed[4].delta
    assert replayed[-1].response.model_dump() == created[-1].response.model_dump()
    assert [event.sequence_number for event in replayed] == list(range(9))


def test_the_clients_stream_helper_accumulates_streamed_calls_and_text(client):
    """``client.responses.stream`` rebuilds the response from the events and checks their order (an item added
    before its deltas, a content part before its text)."""
    with client.responses.stream(model="any", input="What is the weather in Rome for two days?", tools=[WEATHER],
                                 tool_choice="required", temperature=0, max_output_tokens=60) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    call = next(item for item in final.output if item.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] in ("Paris", "Rome", "Oslo")
    with client.responses.stream(model="any", input="Say hello in three words.", temperature=0, max_output_tokens=80) as stream:
        deltas = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas and final.output_text == deltas


def test_a_continued_assistant_item_is_kept_as_one_message_with_its_continuation():
    """Trial: an input ending with an assistant item is continued (assistant prefill), but the kept conversation
    held the prefill and the continuation as two assistant messages, so a later turn with previous_response_id
    rendered two assistant turns. It holds one now: the follow-up's request is the one sent whole by hand."""
    stats = GenerationStats(mode="ar", new_tokens=1, prompt_tokens=9, stop_reason="eos")
    backend = Scripted([TextDelta(" blue.", 1, False), Finished(stats)])
    app = create_app(backend, model_id="m")
    prefill = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "The colour is"}]
    first = post(app, {"input": prefill, "instructions": "Be brief."}).json()
    assert backend.requests[0].continue_text == "The colour is"
    assert first["output"][0]["content"][0]["text"] == " blue."  # the continuation alone, as a chat's reply
    post(app, {"previous_response_id": first["id"], "input": "Another?", "instructions": "Be brief."})
    whole = [prefill[0], {"role": "assistant", "content": "The colour is blue."}, {"role": "user", "content": "Another?"}]
    post(app, {"input": whole, "instructions": "Be brief."})
    followed, by_hand = backend.requests[1], backend.requests[2]
    assert followed.messages == by_hand.messages == whole
    assert (followed.system_prompt, followed.continue_text) == (by_hand.system_prompt, by_hand.continue_text) == \
        ("Be brief.", "")
