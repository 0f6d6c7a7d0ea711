"""``POST /v1/chat/completions``'s request: its model (:class:`ChatCompletionRequest`) and its mapping to an engine
request (:func:`chat_request`): messages and their text (a final assistant message continued), tools
(``tool_choice``, parallel calls, earlier calls and their results), on the fields every completion shares
(``request_common``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from app.backends.protocol import GenerationRequest
from inference.constraints import GrammarError, json_schema_grammar
from inference.settings import OutputSettings
from inference.tools import ToolUse

from .errors import APIError
from .request_common import (
    GenerationFields,
    ServerLimits,
    check_bounds,
    generation_settings,
    json_value,
    refuse_unsupported,
    response_format_grammar,
)
from .tool_turns import ToolTurns, Turn, TurnWords

#: Roles a message may have; ``developer`` is OpenAI's newer name for ``system``.
SYSTEM_ROLES = ("system", "developer")


class ContentPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    role: str
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(GenerationFields):
    """``POST /v1/chat/completions``."""

    messages: list[Message]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    parallel_tool_calls: Any = None


def _message_text(message: Message, index: int) -> str:
    """The text of a message (its text parts joined); images, audio, files and a text part without its text are
    refused."""
    content = message.content
    if content is None:
        raise APIError(400, f"messages[{index}].content is missing: give the message's text", param=f"messages[{index}].content",
                       code="missing_required_parameter")
    if isinstance(content, str):
        return content
    texts = []
    for part_index, part in enumerate(content):
        if part.type == "text" and part.text is None:
            raise APIError(
                400,
                f'messages[{index}].content[{part_index}] is a text part without its text: add "text": "..." to it',
                param=f"messages[{index}].content[{part_index}].text",
                code="missing_required_parameter",
            )
        if part.type != "text":
            raise APIError(
                400,
                f"messages[{index}].content[{part_index}] is of type {part.type!r}: SpecChat's models read text only "
                "(no images, audio or files); send text parts",
                param=f"messages[{index}].content[{part_index}].type",
                code="unsupported",
            )
        texts.append(part.text)
    return "".join(texts)


def chat_request(body: ChatCompletionRequest, limits: ServerLimits) -> GenerationRequest:
    """The engine request of a chat completion: leading system (or developer) messages become the system prompt,
    the others the conversation, in order (assistant tool calls and ``tool`` results included), within what the
    server sets (``limits``). A final assistant message (text: calls need their results after them) is continued
    (assistant prefill, as llama-server does it; the window's Continue): its text is the request's
    ``continue_text``, and the reply is the continuation alone.

    Raises:
        APIError: 400 naming the field: empty messages, an unknown role, non-text content, invalid tools or tool
            calls, a tool result whose ``tool_call_id`` names no call of the assistant message right before its run of
            tool messages or answers a call a tool message before it answered, an assistant message with a call no
            tool message after it answers (the last message included), more than :data:`MAX_TOOLS` tools or
            :data:`MAX_SCHEMA_BYTES` of schemas, tools or a JSON ``response_format`` with a final assistant message
            to continue, ``n`` other than 1, a setting out of range.
    """
    check_bounds(body.response_format, body.tools)
    refuse_unsupported(body, ("functions", "function_call", "logit_bias"))
    if not body.messages:
        raise APIError(400, "messages is empty: send at least one message", param="messages", code="invalid_value")
    system, messages = [], []
    turns = ToolTurns(_ChatWords())
    for index, message in enumerate(body.messages):
        if message.role not in SYSTEM_ROLES + ("user", "assistant", "tool"):
            raise APIError(
                400,
                f"messages[{index}].role is {message.role!r}: SpecChat's server takes system, developer, user, "
                "assistant and tool messages",
                param=f"messages[{index}].role",
                code="invalid_value",
            )
        calls = getattr(message, "tool_calls", None)
        if calls and message.role != "assistant":
            raise APIError(400, f"messages[{index}].tool_calls: only assistant messages make tool calls",
                           param=f"messages[{index}].tool_calls", code="invalid_value")
        text = "" if calls and message.content is None else _message_text(message, index)
        if message.role in SYSTEM_ROLES and not messages:
            system.append(text)
            continue
        entry = {"role": "system" if message.role in SYSTEM_ROLES else message.role, "content": text}
        if message.role == "tool":
            entry["tool_call_id"] = turns.result(getattr(message, "tool_call_id", None), index)
        else:
            turns.open(index)
        if calls:
            entry["tool_calls"] = _tool_calls(calls, index, turns)
        messages.append(entry)
    turns.finish()
    asked = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    max_param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    if body.top_logprobs and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
    top = (body.top_logprobs or 0) if body.logprobs else None
    output = OutputSettings(grammar=response_format_grammar(body.response_format, limits.schema_grammar), logprobs=top)
    settings = generation_settings(body, asked, max_param, limits, output, "top_logprobs")
    choice = body.tool_choice
    if choice is None and body.tools:
        choice = omitted_tool_choice(limits.tool_choice_default, messages)
    tools = tool_use(body.tools, choice, body.parallel_tool_calls, limits.schema_grammar)
    prefill = ""
    if messages and messages[-1]["role"] == "assistant":  # text: one with calls waits for their results (above)
        prefill = messages.pop()["content"]
        if tools is not None:
            raise APIError(400, "the last message is an assistant message, whose text SpecChat continues (assistant "
                           "prefill), and a continued reply cannot call tools: leave tools out (or send tool_choice "
                           "none), or send a user message last", param="tools", code="invalid_value")
        if output.grammar is not None:  # its mask would start the JSON again where the prefill left it
            raise APIError(400, "the last message is an assistant message, whose text SpecChat continues (assistant "
                           "prefill), and response_format constrains a reply from its first token, not a "
                           "continuation: leave response_format out (or send type text), or send a user message last",
                           param="response_format", code="invalid_value")
    return GenerationRequest(messages=messages, system_prompt="\n\n".join(system), settings=settings, tools=tools,
                             continue_text=prefill)


def omitted_tool_choice(default: str, messages: list[dict]) -> str:
    """The ``tool_choice`` of a request that offers tools and sends none, under the server's ``default`` (``specchat
    serve --tool-choice-default``): ``auto`` is OpenAI's; ``call-then-answer`` is ``required`` while no ``tool``
    result follows the conversation's last user message, then ``none``, so that the model calls once per user
    message and then answers from the results. It is for clients that send no ``tool_choice`` (``llm``) with a model
    too small to choose a call under ``auto`` (the default SmolLM2 answers in text: README's Tools), which under
    ``required`` alone would call again after every result.

    Args:
        default: one of ``request_common.TOOL_CHOICE_DEFAULTS`` (``create_app`` checks it); messages: the
            conversation, as ``chat_request`` builds it (roles system, user, assistant, tool).
    """
    if default != "call-then-answer":
        return "auto"
    last_user = max((index for index, message in enumerate(messages) if message["role"] == "user"), default=-1)
    answered = any(message["role"] == "tool" for message in messages[last_user + 1:])
    return "none" if answered else "required"


#: What a function's name may be (OpenAI's rule).
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def tool_use(
    tools: Any, choice: Any, parallel: Any, schema_grammar: Callable[[Any], str] = json_schema_grammar
) -> ToolUse | None:
    """The tools of a chat request (``tools``, ``tool_choice``, ``parallel_tool_calls``): None without tools or
    with ``tool_choice`` "none" (the model is then not told about them). ``schema_grammar`` compiles each
    function's ``parameters`` (to refuse what cannot be enforced).

    Raises:
        APIError: 400 naming the field: a tool that is not ``{"type": "function", "function": {"name", ...}}``,
            parameters that are not a JSON schema SpecChat can enforce or not one of an object (as OpenAI refuses
            them: a call's arguments are an object), a function named as an earlier one, a
            ``tool_choice`` that is none of its values (the message lists them) or names no given tool.
    """
    if parallel is not None and not isinstance(parallel, bool):
        raise APIError(400, "parallel_tool_calls must be true or false", param="parallel_tool_calls", code="invalid_type")
    named = _named_function(choice)
    if choice not in (None, "none", "auto", "required") and named is None:
        raise APIError(400, f'tool_choice is {json_value(choice)}: use "none", "auto", "required" or {{"type": '
                       '"function", "function": {"name": ...}} naming one of the tools', param="tool_choice",
                       code="invalid_value")
    if tools is None or tools == []:
        if choice not in (None, "none", "auto"):
            raise APIError(400, f"tool_choice is {json_value(choice)}, which needs tools: send the tools the model may "
                           "call, or leave tool_choice out", param="tool_choice", code="invalid_value")
        return None
    if not isinstance(tools, list):
        raise APIError(400, "tools must be a list of functions", param="tools", code="invalid_type")
    first_of: dict[str, int] = {}  # each function's name: the index of its tool
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise APIError(400, f'tools[{index}] must be {{"type": "function", "function": {{"name", "description", '
                           '"parameters"}}', param=f"tools[{index}]",
                           code="invalid_value" if isinstance(tool, dict) else "invalid_type")
        if not isinstance(function.get("name"), str) or not _FUNCTION_NAME.fullmatch(function["name"]):
            raise APIError(400, f"tools[{index}].function.name must be 1 to 64 letters, digits, _ or -",
                           param=f"tools[{index}].function.name", code="invalid_value")
        earlier = first_of.setdefault(function["name"], index)
        if earlier != index:
            raise APIError(400, f"tools[{index}].function.name is {json.dumps(function['name'])}, the name of "
                           f"tools[{earlier}] too: give each function its own name (a call names the function it "
                           "runs)", param=f"tools[{index}].function.name", code="invalid_value")
        parameters = function.get("parameters")
        if parameters is not None:
            param = f"tools[{index}].function.parameters"
            try:
                schema_grammar(parameters)
            except GrammarError as error:
                raise APIError(400, f"{param}: {error}", param=param, code="invalid_schema") from None
            kind = parameters.get("type", "object") if isinstance(parameters, dict) else "object"
            if kind != "object" and not (isinstance(kind, list) and kind == ["object"]):
                raise APIError(400, f'{param} must be a JSON schema of "type": "object" (a call\'s arguments are a '
                               f'JSON object), got "type": {json.dumps(kind)}', param=param, code="invalid_schema")
    if choice == "none":
        return None
    names = [tool["function"]["name"] for tool in tools]
    if named is not None and named not in names:
        listed = ", ".join(json.dumps(name) for name in names)
        raise APIError(400, f"tool_choice names the function {json.dumps(named)}, which is not among the tools: name "
                       f'one of {listed}, or use "none", "auto" or "required"', param="tool_choice",
                       code="invalid_value")
    return ToolUse(tuple(tools), named or choice or "auto", parallel is not False)


def _named_function(choice: Any) -> str | None:
    """The function a ``tool_choice`` of ``{"type": "function", "function": {"name": NAME}}`` names, else None."""
    function = choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


class _ChatWords(TurnWords):
    """The tool-call refusals of a chat completion, naming its messages (``messages[3].tool_call_id``). A call
    stands at ``(message index, call index)``, a message at its index."""

    def call_id_missing(self, where: tuple[int, int]) -> APIError:
        """A call without its id."""
        return self._call_id(where, "is missing", "missing_required_parameter")

    def call_id_type(self, where: tuple[int, int], value: Any) -> APIError:
        """A call whose id is not a string."""
        return self._call_id(where, f"must be a string, not {json_value(value)}", "invalid_type")

    @staticmethod
    def _call_id(where: tuple[int, int], wrong: str, code: str) -> APIError:
        at = f"messages[{where[0]}].tool_calls[{where[1]}].id"
        return APIError(400, f'{at} {wrong}: send each call with the id the reply gave it ("call_..."), which its tool '
                        "message names in tool_call_id, as OpenAI requires", param=at, code=code)

    def call_twice(self, where: tuple[int, int], call_id: str, twin: tuple[int, int]) -> APIError:
        """A call with the id of an earlier call of its message."""
        param = f"messages[{where[0]}].tool_calls"
        return APIError(400, f"{param}[{where[1]}].id {call_id!r} is also the id of {param}[{twin[1]}]: give each call "
                        "of a message its own id (the one the reply gave it), which its tool message names in "
                        "tool_call_id", param=f"{param}[{where[1]}].id", code="invalid_value")

    def result_id_missing(self, where: int, turn: Turn) -> APIError:
        """A tool message without its tool_call_id."""
        return APIError(400, f"messages[{where}].tool_call_id is missing: give the id of the assistant's tool call "
                        f"this result answers ({self._made(turn)})", param=f"messages[{where}].tool_call_id",
                        code="missing_required_parameter")

    def result_id_type(self, where: int, value: Any, turn: Turn) -> APIError:
        """A tool message whose tool_call_id is not a string."""
        return APIError(400, f"messages[{where}].tool_call_id must be a string: the id of the assistant's tool call "
                        f"this result answers ({self._made(turn)})", param=f"messages[{where}].tool_call_id",
                        code="invalid_type")

    @staticmethod
    def _made(turn: Turn) -> str:
        return (f"the calls of messages[{turn.owner}], the assistant message before it: {', '.join(turn.calls)}"
                if turn.calls else "no assistant message with tool_calls comes right before its tool messages")

    def result_unknown(self, where: int, call_id: str, turn: Turn) -> APIError:
        """A tool message answering an id no call had."""
        return self._not_before(where, call_id, turn, ": give the id of the call this result answers")

    def result_elsewhere(self, where: int, call_id: str, turn: Turn, owner: int) -> APIError:
        """A tool message answering a call of another assistant message than the one right before it."""
        return self._not_before(where, call_id, turn, f"; {call_id!r} is a call of messages[{owner}]: send its result "
                                "right after that message, with the results of its other calls")

    @staticmethod
    def _not_before(where: int, call_id: str, turn: Turn, then: str) -> APIError:
        param = f"messages[{where}].tool_call_id"
        wrong = (f"{param} {call_id!r} is no call of messages[{turn.owner}], the assistant message right before the "
                 f"tool messages (its calls: {', '.join(turn.calls)})" if turn.calls else
                 f"{param} {call_id!r} answers no call right before it: a tool message comes right after the "
                 "assistant message whose call it answers (or after the other results of its calls)")
        return APIError(400, wrong + then, param=param, code="invalid_value")

    def result_twice(self, where: int, call_id: str, turn: Turn) -> APIError:
        """A second tool message answering one call."""
        param = f"messages[{where}].tool_call_id"
        return APIError(400, f"{param} {call_id!r} answers a call that messages[{turn.results[call_id]}] answered "
                        f"already: send one tool message per call of messages[{turn.owner}], with that call's result",
                        param=param, code="invalid_value")

    def results_missing(self, turn: Turn, missing: list[str], after: int | None) -> APIError:
        """An assistant message's calls without their tool messages, as OpenAI refuses them."""
        where = (f"before messages[{after}]" if after is not None else "as the request's last messages: a request "
                 "cannot end with calls, since the reply to them reads their results")
        param = f"messages[{turn.owner}].tool_calls"
        return APIError(400, f"{param}: an assistant message with tool_calls must be followed by tool messages "
                        f"responding to each tool_call_id, and these had none: {', '.join(missing)}. Send each call's "
                        f"result as a tool message whose tool_call_id is the call's id, right after "
                        f"messages[{turn.owner}] with the results of its other calls ({where})", param=param,
                        code="invalid_value")


def _tool_calls(calls: Any, index: int, turns: ToolTurns) -> list[dict]:
    """The ``tool_calls`` of assistant message ``index`` as chat templates render them: arguments parsed from their
    JSON string; each call's id checked as a call of the turn the message opens (``turns``).

    Raises:
        APIError: 400: not a list of ``{"id", "type": "function", "function": {"name", "arguments"}}``; a call
            without its id (a non-empty string), or with the id of an earlier call of the message, on
            ``messages[index].tool_calls[i].id``.
    """
    param = f"messages[{index}].tool_calls"
    parsed = []
    for position, call in enumerate(calls if isinstance(calls, list) else [None]):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            arguments = None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not isinstance(arguments, dict):
            raise APIError(400, f'{param}[{position}] must be {{"id", "type": "function", "function": {{"name", '
                           '"arguments": a JSON object as a string}}', param=f"{param}[{position}]",
                           code="invalid_value")
        made = turns.call(call.get("id"), (index, position))
        parsed.append({"id": made, "type": "function", "function": {"name": function["name"], "arguments": arguments}})
    return parsed
