"""OpenAI's Responses API (``POST /v1/responses``) on the chat completion path: a Responses request is validated here
and turned into the chat completion request it means (:func:`chat_completion`), which ``chat_request.chat_request``
maps to the engine as any chat; the reply's events become a Response object or its streamed events
(:class:`ResponseBuilder`).

Shapes follow OpenAI's API reference (https://platform.openai.com/docs/api-reference/responses) as the ``openai``
client reads them: ``input`` as a string or a list of items (messages of role user, assistant, system or developer
with text or ``input_text``/``output_text`` parts; ``function_call`` and ``function_call_output`` items),
``instructions`` (the system prompt of this response only, as OpenAI keeps it), ``text.format`` (``text``,
``json_object``, ``json_schema``), function tools (``{"type": "function", "name", "description", "parameters"}``),
``tool_choice``, ``max_output_tokens``, ``temperature``, ``top_p``, ``usage``, and SpecChat's ``specchat`` field
both ways as in a chat completion.

``previous_response_id`` continues a conversation the server still keeps (``response_store``).
"""

from __future__ import annotations

import copy
import json
import re
import time
import uuid
from collections.abc import Sequence
from typing import Any

from app.backends.protocol import GenerationRequest
from inference.events import Event, Finished, GenerationStats, TextDelta, ToolCallDelta, ToolCalls

from .chat_request import ChatCompletionRequest
from .errors import APIError
from .input_items import input_items
from .replies import StreamedCalls, new_call_id, stats_object
from .request_common import SpecChatOptions, Strict, json_value, unused_options
from .tool_turns import ToolTurns, Turn, TurnWords

#: Roles an input message may have.
INPUT_ROLES = ("user", "assistant", "system", "developer")
#: Content part types read as text.
TEXT_PARTS = ("input_text", "output_text", "text")


class ResponsesRequest(Strict):
    """``POST /v1/responses`` (fields OpenAI defines that change nothing here, such as ``metadata``, are ignored)."""

    model: str | None = None
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = False
    text: Any = None
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    previous_response_id: str | None = None
    store: bool = True
    user: str | None = None
    specchat: SpecChatOptions | None = None


def input_messages(value: str | list[Any], earlier: Sequence[dict] = ()) -> list[dict]:
    """A request's ``input`` as chat messages: a string is one user message; ``function_call`` items join the
    assistant message before them (or make one), ``function_call_output`` items become ``tool`` messages.
    ``earlier``: the kept conversation the input continues (``previous_response_id``'s), whose calls an output may
    answer.

    Raises:
        APIError: 400 naming the item at fault (``input[2].content[0].type``): an empty string or list (as
            ``/v1/completions`` refuses an empty prompt), an unknown item type or role, content that is not text, a
            call or output without its ``call_id``, a call with the ``call_id`` of another call of its turn, an
            output whose ``call_id`` no call before it had (in OpenAI's words: "No tool call found for function call
            output with call_id ..."), one whose call is not right before it (a message between them), a second
            output of a call, or a call without its output (OpenAI's "No tool output found for function call ...",
            on ``input`` for a call of the previous response).
    """
    if not value:
        raise APIError(400, "input is empty: send the user's message as a string, or at least one message",
                       param="input", code="invalid_value")
    items = [{"role": "user", "content": value}] if isinstance(value, str) else value
    messages: list[dict] = []
    turns = ToolTurns(_InputWords(), pending=[call["id"] for call in (earlier and earlier[-1].get("tool_calls") or ())],
                      known=[call["id"] for message in earlier for call in message.get("tool_calls") or ()])
    for index, item in enumerate(items):
        at = f"input[{index}]"
        if not isinstance(item, dict):
            raise APIError(400, f'{at} must be an object: a message ({{"role", "content"}}), a function_call or a '
                           "function_call_output", param=at, code="invalid_type")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in INPUT_ROLES:
                raise APIError(400, f"{at}.role is {json.dumps(role)}: send user, assistant, system or developer",
                               param=f"{at}.role", code="invalid_value")
            turns.open(index)
            messages.append({"role": role, "content": _text(item.get("content"), f"{at}.content")})
        elif kind == "function_call":
            name, arguments = item.get("name"), item.get("arguments")
            if not all(isinstance(field, str) for field in (name, arguments)):
                raise APIError(400, f'{at} must be {{"type": "function_call", "call_id", "name", "arguments": a JSON '
                               "object as a string}", param=at, code="invalid_value")
            if not messages or messages[-1]["role"] != "assistant":
                turns.open(index)
                messages.append({"role": "assistant", "content": None})
            call = {"id": turns.call(item.get("call_id"), index), "type": "function",
                    "function": {"name": name, "arguments": arguments}}
            messages[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": turns.result(item.get("call_id"), index),
                             "content": _text(item.get("output"), f"{at}.output")})
        else:
            raise APIError(400, f"{at}.type is {json.dumps(kind)}: SpecChat's server takes message, function_call and "
                           "function_call_output items", param=f"{at}.type", code="unsupported")
    turns.finish()
    return messages


class _InputWords(TurnWords):
    """The tool-call refusals of a Responses request, naming its ``input`` items (``input[2].call_id``), in
    OpenAI's words where it has them. An item stands at its index; a call of the previous response at None."""

    def call_id_missing(self, where: int) -> APIError:
        """A function_call without its call_id."""
        return APIError(400, f"input[{where}].call_id is missing: give each function_call the call_id the response "
                        "gave it, which its function_call_output names", param=f"input[{where}].call_id",
                        code="missing_required_parameter")

    def call_id_type(self, where: int, value: Any) -> APIError:
        """A function_call whose call_id is not a string."""
        return APIError(400, f"input[{where}].call_id must be a string, not {json_value(value)}: give each "
                        "function_call the call_id the response gave it", param=f"input[{where}].call_id",
                        code="invalid_type")

    def call_twice(self, where: int, call_id: str, twin: int) -> APIError:
        """A function_call with the call_id of another call of its turn."""
        return APIError(400, f"input[{where}].call_id {call_id!r} is also the call_id of input[{twin}], a "
                        "function_call of the same turn: give each call its own call_id (the one the response gave "
                        "it)", param=f"input[{where}].call_id", code="invalid_value")

    def result_id_missing(self, where: int, turn: Turn) -> APIError:
        """A function_call_output without its call_id."""
        return APIError(400, f"input[{where}].call_id is missing: give the call_id of the function_call it answers",
                        param=f"input[{where}].call_id", code="missing_required_parameter")

    def result_id_type(self, where: int, value: Any, turn: Turn) -> APIError:
        """A function_call_output whose call_id is not a string."""
        return APIError(400, f"input[{where}].call_id must be a string, not {json_value(value)}: give the call_id of "
                        "the function_call it answers", param=f"input[{where}].call_id", code="invalid_type")

    def result_unknown(self, where: int, call_id: str, turn: Turn) -> APIError:
        """An output whose call_id no call before it had (OpenAI's words)."""
        return APIError(400, f"No tool call found for function call output with call_id {call_id!r}: "
                        f"input[{where}].call_id must be the call_id of a function_call before it in input, or in the "
                        "response previous_response_id names", param=f"input[{where}].call_id", code="invalid_value")

    def result_elsewhere(self, where: int, call_id: str, turn: Turn, owner: Any) -> APIError:
        """An output whose function_call is not right before it."""
        return APIError(400, f"input[{where}].call_id {call_id!r} answers a function_call that is not right before "
                        "it: send each function_call_output right after the function_call items of its turn (or after "
                        "the other outputs of that turn), with no message between", param=f"input[{where}].call_id",
                        code="invalid_value")

    def result_twice(self, where: int, call_id: str, turn: Turn) -> APIError:
        """A second output of one call."""
        return APIError(400, f"input[{where}].call_id {call_id!r} has its function_call_output already, "
                        f"input[{turn.results[call_id]}]: send one function_call_output per function_call",
                        param=f"input[{where}].call_id", code="invalid_value")

    def results_missing(self, turn: Turn, missing: list[str], after: int | None) -> APIError:
        """A turn's calls without their outputs, in OpenAI's words."""
        one = len(missing) == 1
        first = turn.calls[missing[0]]
        why = ("the response previous_response_id names ended with " + ("this call, so input starts with its output"
               if one else "these calls, so input starts with their outputs") if first is None else
               "input cannot end with calls: the response to them reads their outputs" if after is None else None)
        return APIError(400, f"No tool output found for function call{'' if one else 's'} {', '.join(missing)}: send "
                        "a function_call_output item for each (its call_id and output) right after the function_call "
                        f"items of {'its' if one else 'their'} turn, with no message between"
                        + (f" ({why})" if why else ""),
                        param="input" if first is None else f"input[{first}].call_id", code="invalid_value")


def _text(content: Any, param: str) -> str:
    """The text of a message's content (a string, or text parts joined).

    Raises:
        APIError: 400: missing content, a part that is not text (an image, a file) or has no text.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{param} is missing or not text: send a string or a list of input_text parts",
                       param=param, code="invalid_type")
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in TEXT_PARTS:
            raise APIError(400, f"{param}[{index}] is of type {json.dumps(kind)}: SpecChat's models read text only (no "
                           "images, audio or files); send input_text parts", param=f"{param}[{index}].type",
                           code="unsupported")
        if not isinstance(part.get("text"), str):
            raise APIError(400, f'{param}[{index}] is a text part without its text: add "text": "..." to it',
                           param=f"{param}[{index}].text", code="missing_required_parameter")
        texts.append(part["text"])
    return "".join(texts)


def _tools(tools: Any) -> list[dict] | None:
    """Responses function tools as chat tools (``{"type": "function", "function": {...}}``).

    Raises:
        APIError: 400: not a list, or a tool of another type (web search, files...), which SpecChat does not run.
    """
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be a list of function tools", param="tools", code="invalid_type")
    converted = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise APIError(400, f'tools[{index}] is of type {json.dumps(kind)}: SpecChat\'s server runs function tools '
                           'only ({"type": "function", "name", "description", "parameters"})', param=f"tools[{index}]",
                           code="unsupported")
        converted.append({"type": "function", "function": {
            key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}})
    return converted


def _tool_choice(choice: Any) -> Any:
    """A Responses ``tool_choice`` as a chat's: ``{"type": "function", "name"}`` names the function.

    Raises:
        APIError: 400: none of "none", "auto", "required" or a named function.
    """
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise APIError(400, 'tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...} naming '
                   "one of the tools", param="tool_choice", code="invalid_value")


def _response_format(text: Any) -> dict | None:
    """``text.format`` as a chat's ``response_format`` (a json_schema's ``name``, ``schema``, ``strict`` move into
    ``json_schema``).

    Raises:
        APIError: 400: ``text`` or its format is not an object.
    """
    if text is None or (isinstance(text, dict) and text.get("format") is None):
        return None
    if not isinstance(text, dict) or not isinstance(text["format"], dict):
        raise APIError(400, 'text must be {"format": {"type": "text" | "json_object" | "json_schema", ...}}',
                       param="text.format", code="invalid_type")
    spec = text["format"]
    if spec.get("type") != "json_schema":
        return spec
    return {"type": "json_schema", "json_schema": {key: value for key, value in spec.items() if key != "type"}}


#: A chat request's field names as a Responses request names them (in a refusal's param and message).
_RENAMED = (
    (re.compile(r"\bmax_completion_tokens\b"), "max_output_tokens"),
    (re.compile(r"\bresponse_format\.json_schema\b"), "text.format"),
    (re.compile(r"\bresponse_format\b"), "text.format"),
    (re.compile(r"\btools\[(\d+)\]\.function\b"), r"tools[\1]"),
    (re.compile(r"\bmessages\[\d+\]"), "input"),
    (re.compile(r"\bmessages\b"), "input"),
)


def _renamed(error: APIError) -> APIError:
    """A chat request's refusal with its fields named as the Responses request names them."""
    def rename(text: str) -> str:
        for pattern, name in _RENAMED:
            text = pattern.sub(name, text)
        return text

    return APIError(error.status, rename(error.message), type=error.type,
                    param=None if error.param is None else rename(error.param), code=error.code, headers=error.headers)


def chat_completion(body: ResponsesRequest, conversation: list[dict]) -> ChatCompletionRequest:
    """The chat completion a Responses request asks for: ``instructions`` as a leading system message, then
    ``conversation`` (the kept one and this request's ``input``, :func:`input_messages`), and the settings.

    Raises:
        APIError: 400 naming the Responses field at fault.
    """
    messages = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + conversation
    fields = {
        "messages": messages,
        "max_completion_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "response_format": _response_format(body.text),
        "tools": _tools(body.tools),
        "tool_choice": _tool_choice(body.tool_choice),
        "parallel_tool_calls": body.parallel_tool_calls,
        "specchat": body.specchat.model_dump(exclude_none=True) if body.specchat else None,
    }
    try:
        return ChatCompletionRequest.model_validate({key: value for key, value in fields.items() if value is not None})
    except ValueError as error:  # not expected: every field was checked above
        raise APIError(400, f"the request cannot be read as a conversation: {error}", param="input",
                       code="invalid_value") from None


def renamed_errors(mapping):
    """``mapping()`` (a chat request's mapping to the engine), its refusals named as the Responses request names
    its fields (``max_output_tokens``, ``text.format``, ``tools[0].parameters``)."""
    try:
        return mapping()
    except APIError as error:
        raise _renamed(error) from None


def usage(stats: GenerationStats) -> dict:
    """The Responses usage object (``input_tokens_details.cached_tokens``: prompt tokens the KV cache held)."""
    return {
        "input_tokens": stats.prompt_tokens,
        "input_tokens_details": {"cached_tokens": stats.reused_tokens},
        "output_tokens": stats.new_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": stats.prompt_tokens + stats.new_tokens,
    }


class ResponseBuilder:
    """One response: its id, the Response object and the streamed events its reply's engine events make.

    Args:
        model: the served model's id; body: the request; request: its engine request (the sampling and the tool
            choice it got: a ``tool_choice`` left out is echoed as the server's default made it);
        conversation: the kept conversation and this request's input (chat messages), which the reply extends for
            :class:`~app.server.response_store.ResponseStore`.
    """

    def __init__(self, model: str, body: ResponsesRequest, request: GenerationRequest, conversation: list[dict]):
        self.id = f"resp_{uuid.uuid4().hex}"
        self._model, self._body, self._sampling = model, body, request.settings.sampling
        self._unused = unused_options(body, request.settings)
        # the tool choice applied where the request sent none (``--tool-choice-default``); "none" leaves the tools out
        self._tool_choice = body.tool_choice or (request.tools.choice if request.tools else "none" if body.tools else "auto")
        self._created = int(time.time())
        self._conversation = conversation
        self.inputs = input_items(body.input)  # the request's input as item objects, for ``input_items``
        self._sequence = 0
        self.output: list[dict] = []  # the output items, as opened
        self._message: dict | None = None  # the message item, once text came
        self._calls: list[dict] = []  # the function_call items, in the reply's order
        self._streamed = StreamedCalls()  # their arguments, and which the reply wrote whole
        self.stats: GenerationStats | None = None

    def response(self) -> dict:
        """The Response object as it stands: ``in_progress`` until the reply finished, its ``output`` the items so
        far as they stand (a copy), then ``completed`` (or ``incomplete`` with ``incomplete_details.reason``
        ``max_output_tokens``), with its usage. Its finished ``output`` holds the calls the reply wrote whole (its ``ToolCalls``, as a chat completion's ``tool_calls``), never one that
        max_output_tokens cut: an agent reads every function_call's arguments as JSON."""
        body, stats = self._body, self.stats
        status = "in_progress" if stats is None else (
            "incomplete" if stats.stop_reason == "max_new_tokens" else "completed")
        response = {
            "id": self.id, "object": "response", "created_at": self._created, "status": status, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": body.instructions, "max_output_tokens": body.max_output_tokens, "model": self._model,
            "output": [item for item in self.output if not self._cut_call(item)] if stats is not None else
            copy.deepcopy(self.output), "parallel_tool_calls": body.parallel_tool_calls is not False,
            "previous_response_id": body.previous_response_id, "temperature": self._sampling.temperature,
            "top_p": self._sampling.top_p, "tool_choice": self._tool_choice, "tools": body.tools or [],
            "text": {"format": (body.text or {}).get("format") or {"type": "text"}}, "store": body.store,
            "metadata": {}, "usage": usage(stats) if stats is not None else None,
        }
        if stats is not None:
            response["specchat"] = stats_object(stats, self._unused)
        return response

    def conversation(self) -> list[dict]:
        """The conversation with this response's reply (chat messages; for :class:`~app.server.response_store.ResponseStore`). A reply that
        continued the input's final assistant message (assistant prefill, ``chat_request``) is kept in it, as one
        message: a later turn renders it as the one assistant turn it is."""
        text = self._message["content"][0]["text"] if self._message else ""
        last = self._conversation[-1]
        if last["role"] == "assistant" and "tool_calls" not in last:  # continued: a continuation makes no calls
            return [*self._conversation[:-1], {**last, "content": last["content"] + text}]
        calls = [call for index, call in enumerate(self._calls) if self._streamed.is_whole(index)]  # (none cut)
        reply = {"role": "assistant", "content": text or (None if calls else "")}
        if calls:
            reply["tool_calls"] = [{"id": call["call_id"], "type": "function",
                                    "function": {"name": call["name"], "arguments": call["arguments"]}}
                                   for call in calls]
        return [*self._conversation, reply]

    def opening(self) -> list[dict]:
        """The stream's first events: ``response.created`` and ``response.in_progress``."""
        return [self._event("response.created", response=self.response()),
                self._event("response.in_progress", response=self.response())]

    def take(self, batch: list[Event]) -> list[dict]:
        """The streamed events of a batch of engine events (the whole reply's, for a response not streamed, whose
        events are then dropped); ``Finished`` closes every item and ends with ``response.completed`` (or
        ``response.incomplete``)."""
        events: list[dict] = []
        for event in batch:
            if isinstance(event, TextDelta) and event.text:
                events += self._text(event.text)
            elif isinstance(event, (ToolCallDelta, ToolCalls)):
                for delta in self._streamed.deltas(event):
                    if delta.name is not None:
                        events += self._open_call(delta.name)
                    if delta.arguments:
                        events += self._arguments(delta.index, delta.arguments)
                for call, arguments in zip(self._calls, self._streamed.arguments):
                    call["arguments"] = arguments
            elif isinstance(event, Finished):
                self.stats = event.stats
                events += self._close()
        return events

    def error(self, error: APIError) -> dict:
        """The stream's ``error`` event (OpenAI's shape: ``code``, ``message``, ``param``) for a reply cut short."""
        return self._event("error", code=error.code, message=error.message, param=error.param)

    def _event(self, kind: str, **fields) -> dict:
        self._sequence += 1
        return {"type": kind, "sequence_number": self._sequence - 1, **fields}

    def _text(self, text: str) -> list[dict]:
        events = []
        if self._message is None:
            self._message = {"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "in_progress",
                             "role": "assistant", "content": []}
            self.output.append(self._message)
            events.append(self._event("response.output_item.added", output_index=len(self.output) - 1,
                                      item={**self._message, "content": []}))
            self._message["content"].append({"type": "output_text", "text": "", "annotations": [], "logprobs": []})
            events.append(self._event("response.content_part.added", item_id=self._message["id"],
                                      output_index=len(self.output) - 1, content_index=0,
                                      part={"type": "output_text", "text": "", "annotations": [], "logprobs": []}))
        self._message["content"][0]["text"] += text
        events.append(self._event("response.output_text.delta", item_id=self._message["id"],
                                  output_index=self.output.index(self._message), content_index=0, delta=text,
                                  logprobs=[]))
        return events

    def _open_call(self, name: str) -> list[dict]:
        call = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": new_call_id(), "name": name,
                "arguments": "", "status": "in_progress"}
        self._calls.append(call)
        self.output.append(call)
        return [self._event("response.output_item.added", output_index=len(self.output) - 1, item=dict(call))]

    def _arguments(self, index: int, text: str) -> list[dict]:
        call = self._calls[index]
        return [self._event("response.function_call_arguments.delta", item_id=call["id"],
                            output_index=self.output.index(call), delta=text)]

    def _cut_call(self, item: dict) -> bool:
        """``item`` is a function_call the reply did not write whole (streamed as it was written, then cut)."""
        return any(item is call and not self._streamed.is_whole(index) for index, call in enumerate(self._calls))

    def _close(self) -> list[dict]:
        """Every item's done events; the item max_output_tokens cut (the last, unless a call written whole) is
        ``incomplete``, as OpenAI marks it, the others ``completed``."""
        events = []
        cut = self.stats.stop_reason == "max_new_tokens"
        for output_index, item in enumerate(self.output):
            whole_call = any(item is call and self._streamed.is_whole(index) for index, call in enumerate(self._calls))
            item["status"] = "incomplete" if cut and item is self.output[-1] and not whole_call else "completed"
            if item is self._message:
                part = item["content"][0]
                events += [
                    self._event("response.output_text.done", item_id=item["id"], output_index=output_index,
                                content_index=0, text=part["text"], logprobs=[]),
                    self._event("response.content_part.done", item_id=item["id"], output_index=output_index,
                                content_index=0, part=dict(part)),
                ]
            else:
                events.append(self._event("response.function_call_arguments.done", item_id=item["id"],
                                          output_index=output_index, name=item["name"], arguments=item["arguments"]))
            events.append(self._event("response.output_item.done", output_index=output_index, item=dict(item)))
        ended = "response.incomplete" if self.stats.stop_reason == "max_new_tokens" else "response.completed"
        return events + [self._event(ended, response=self.response())]


def sse_event(event: dict) -> bytes:
    """One server-sent event of the Responses stream: ``event: <type>`` and ``data: <json>``."""
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()
