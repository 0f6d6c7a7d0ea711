"""The tool-call rules of a conversation, one checker (``app/server/tool_turns.py``) for both routes: each broken
conversation is sent to ``/v1/chat/completions`` as messages and to ``/v1/responses`` as input items, and both must
refuse it, each naming its own field (``messages[3].tool_call_id``, ``input[3].call_id``) before generating."""

from __future__ import annotations

import httpx
import pytest
from helpers import run_coroutine

from app.server import create_app
from app.server.tool_turns import TurnWords
from inference.events import Finished, GenerationStats, TextDelta

ASK = ("ask",)


def calls(*ids) -> tuple:
    """An assistant turn calling ``get_time`` once per id (None: a call without its id)."""
    return ("calls", *ids)


def result(made) -> tuple:
    """A tool result answering ``made`` (None: a result without its call id)."""
    return ("result", made)


def chat_messages(steps: list[tuple]) -> list[dict]:
    """``steps`` as a chat completion's messages (one message a step)."""
    messages = []
    for kind, *ids in steps:
        if kind == "ask":
            messages.append({"role": "user", "content": "What time is it?"})
        elif kind == "calls":
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "function": {"name": "get_time", "arguments": "{}"},
                 **({} if made is None else {"id": made})} for made in ids]})
        else:
            messages.append({"role": "tool", "content": "12:00", **({} if ids[0] is None else {"tool_call_id": ids[0]})})
    return messages


def input_items(steps: list[tuple]) -> list[dict]:
    """``steps`` as a Responses request's input (one function_call item a call)."""
    items = []
    for kind, *ids in steps:
        if kind == "ask":
            items.append({"role": "user", "content": "What time is it?"})
        elif kind == "calls":
            items += [{"type": "function_call", "name": "get_time", "arguments": "{}",
                       **({} if made is None else {"call_id": made})} for made in ids]
        else:
            items.append({"type": "function_call_output", "output": "12:00",
                          **({} if ids[0] is None else {"call_id": ids[0]})})
    return items


class _Backend:
    """A backend without a model that records the requests it was asked to generate."""

    def __init__(self):
        self.requests = []

    async def check_prompt(self, request):
        pass

    async def generate(self, request, cancel):
        self.requests.append(request)
        yield [TextDelta("Noon.", 1, False),
               Finished(GenerationStats(mode="ar", new_tokens=1, stop_reason="eos", text="Noon."))]


def _both(steps: list[tuple]) -> tuple[tuple[int, dict], tuple[int, dict], list]:
    """The status and body of ``steps`` sent to each route, and what the backend was asked to generate."""
    backend = _Backend()
    app = create_app(backend, model_id="m")

    async def send():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            chat = await client.post("/v1/chat/completions", json={"messages": chat_messages(steps), "max_tokens": 4})
            responses = await client.post("/v1/responses", json={"input": input_items(steps), "max_output_tokens": 4})
            return (chat.status_code, chat.json()), (responses.status_code, responses.json())

    chat, responses = run_coroutine(send())
    return chat, responses, backend.requests


#: Each rule (a method of ``TurnWords``), broken: the conversation, and the param each route's 400 names.
BROKEN = [
    ("call_id_missing", [ASK, calls("a", None), result("a")], "messages[1].tool_calls[1].id", "input[2].call_id"),
    ("call_id_missing", [ASK, calls(""), result("")], "messages[1].tool_calls[0].id", "input[1].call_id"),
    ("call_id_type", [ASK, calls(7)], "messages[1].tool_calls[0].id", "input[1].call_id"),
    ("call_twice", [ASK, calls("a", "b", "a"), result("a"), result("b")], "messages[1].tool_calls[2].id",
     "input[3].call_id"),
    ("result_id_missing", [ASK, calls("a"), result(None)], "messages[2].tool_call_id", "input[2].call_id"),
    ("result_id_type", [ASK, calls("a"), result(7)], "messages[2].tool_call_id", "input[2].call_id"),
    ("result_unknown", [ASK, calls("a"), result("z")], "messages[2].tool_call_id", "input[2].call_id"),
    ("result_elsewhere", [ASK, calls("a"), ASK, result("a")], "messages[3].tool_call_id", "input[3].call_id"),
    ("result_elsewhere", [ASK, calls("a"), result("a"), ASK, calls("b"), result("a"), result("b")],
     "messages[5].tool_call_id", "input[5].call_id"),
    ("result_twice", [ASK, calls("a"), result("a"), result("a")], "messages[3].tool_call_id", "input[3].call_id"),
    ("results_missing", [ASK, calls("a", "b"), result("a"), ASK], "messages[1].tool_calls", "input[2].call_id"),
    ("results_missing", [ASK, calls("a", "b")], "messages[1].tool_calls", "input[1].call_id"),
]


@pytest.mark.parametrize("rule, steps, chat_param, input_param", BROKEN,
                         ids=[f"{case[0]}-{index}" for index, case in enumerate(BROKEN)])
def test_both_routes_refuse_a_conversation_that_breaks_a_tool_call_rule(rule, steps, chat_param, input_param):
    """A rule checked by one route only (the two copies drifted once: a Responses function_call with ``call_id``
    "" was taken, then refused in renamed chat words, "input.tool_calls[0].id"): each broken conversation is a 400
    on both routes, each naming its own field, and neither generates."""
    chat, responses, generated = _both(steps)
    assert (chat[0], chat[1]["error"]["param"]) == (400, chat_param), chat
    assert (responses[0], responses[1]["error"]["param"]) == (400, input_param), responses
    assert chat[1]["error"]["code"] == responses[1]["error"]["code"]
    assert generated == []


def test_every_rule_has_a_broken_conversation_both_routes_refuse():
    """A rule added to the checker (a method of ``TurnWords``, which both routes must word) needs its case above."""
    assert {case[0] for case in BROKEN} == TurnWords.__abstractmethods__


def test_both_routes_take_a_conversation_that_keeps_the_rules():
    """The same shapes, kept: each call answered right after its turn (in any order), an id reused in a later turn."""
    steps = [ASK, calls("a", "b"), result("b"), result("a"), ASK, calls("a"), result("a")]
    chat, responses, generated = _both(steps)
    assert (chat[0], chat[1]["choices"][0]["message"]["content"]) == (200, "Noon."), chat
    assert (responses[0], responses[1]["output"][0]["content"][0]["text"]) == (200, "Noon."), responses
    assert [[message.get("tool_call_id") for message in request.messages] for request in generated] == \
        [[None, None, "b", "a", None, None, "a"]] * 2
