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
    callers: dict[str, int] = {}  # each tool call's id so far: the index of the assistant message that made it
    caller = None  # the index of the assistant message with tool calls that the message at hand follows, if any
    answered: dict[str, int] = {}  # the calls of that message answered so far: the index of the tool message that did
    unanswered = None  # the refusal of the first assistant message with calls left without a result, if any
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
        if calls:
            entry["tool_calls"] = _tool_calls(calls, f"messages[{index}].tool_calls")
            callers.update((call["id"], index) for call in entry["tool_calls"])
        if message.role == "tool":
            entry["tool_call_id"] = _answered_call(getattr(message, "tool_call_id", None), callers, caller, answered,
                                                   index)
            answered[entry["tool_call_id"]] = index
        else:
            unanswered = unanswered or _results_missing(callers, caller, answered, index)
            caller, answered = (index if calls else None), {}
        messages.append(entry)
    unanswered = unanswered or _results_missing(callers, caller, answered, None)
    if unanswered:
        raise unanswered
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
            parameters that are not a JSON schema SpecChat can enforce, a
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
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise APIError(400, f'tools[{index}] must be {{"type": "function", "function": {{"name", "description", '
                           '"parameters"}}', param=f"tools[{index}]",
                           code="invalid_value" if isinstance(tool, dict) else "invalid_type")
        if not isinstance(function.get("name"), str) or not _FUNCTION_NAME.fullmatch(function["name"]):
            raise APIError(400, f"tools[{index}].function.name must be 1 to 64 letters, digits, _ or -",
                           param=f"tools[{index}].function.name", code="invalid_value")
        parameters = function.get("parameters")
        if parameters is not None:
            param = f"tools[{index}].function.parameters"
            try:
                schema_grammar(parameters)
            except GrammarError as error:
                raise APIError(400, f"{param}: {error}", param=param, code="invalid_schema") from None
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


def _answered_call(call_id: Any, callers: dict[str, int], caller: int | None, answered: dict[str, int],
                   index: int) -> str:
    """The ``tool_call_id`` of tool message ``index``: as OpenAI requires, the id of a call of the assistant message
    right before the run of tool messages it is in (``caller``, that message's index; None: the message there made
    no tool call) that no tool message before it answered (``answered``: each call answered so far in the run, and
    the index of the message that did). ``callers``: each earlier call's id, and the index of the message that made
    it.

    Raises:
        APIError: 400 naming ``messages[index].tool_call_id``: missing, not a string, no call of that assistant
            message's (the message says which calls are, and where a result of an earlier message's call belongs),
            or a call answered already.
    """
    param = f"messages[{index}].tool_call_id"
    answerable = [made for made, at in callers.items() if at == caller]
    made = (f"the calls of messages[{caller}], the assistant message before it: {', '.join(answerable)}"
            if caller is not None else "no assistant message with tool_calls comes right before its tool messages")
    if call_id is None:
        raise APIError(400, f"{param} is missing: give the id of the assistant's tool call this result answers "
                       f"({made})", param=param, code="missing_required_parameter")
    if not isinstance(call_id, str):
        raise APIError(400, f"{param} must be a string: the id of the assistant's tool call this result answers "
                       f"({made})", param=param, code="invalid_type")
    if call_id not in answerable:
        wrong = (f"{param} {call_id!r} is no call of messages[{caller}], the assistant message right before the tool "
                 f"messages (its calls: {', '.join(answerable)})" if caller is not None else
                 f"{param} {call_id!r} answers no call right before it: a tool message comes right after the "
                 "assistant message whose call it answers (or after the other results of its calls)")
        where = (f"; {call_id!r} is a call of messages[{callers[call_id]}]: send its result right after that message, "
                 "with the results of its other calls" if call_id in callers else
                 ": give the id of the call this result answers")
        raise APIError(400, wrong + where, param=param, code="invalid_value")
    if call_id in answered:
        raise APIError(400, f"{param} {call_id!r} answers a call that messages[{answered[call_id]}] answered already: "
                       f"send one tool message per call of messages[{caller}], with that call's result", param=param,
                       code="invalid_value")
    return call_id


def _results_missing(callers: dict[str, int], caller: int | None, answered: dict[str, int],
                     after: int | None) -> APIError | None:
    """The refusal of assistant message ``caller``'s calls that no tool message after it answered (``answered``:
    those one did), as OpenAI refuses them; None when all were (or ``caller`` is None: no message with calls).
    ``callers``: each call's id and the index of the message that made it; ``after``: the index of the message
    after its results (None: the request ends with them)."""
    missing = [made for made, at in callers.items() if at == caller and made not in answered]
    if caller is None or not missing:
        return None
    where = (f"before messages[{after}]" if after is not None else "as the request's last messages: a request cannot "
             "end with calls, since the reply to them reads their results")
    param = f"messages[{caller}].tool_calls"
    return APIError(400, f"{param}: an assistant message with tool_calls must be followed by tool messages responding "
                    f"to each tool_call_id, and these had none: {', '.join(missing)}. Send each call's result as a "
                    f"tool message whose tool_call_id is the call's id, right after messages[{caller}] with the results "
                    f"of its other calls ({where})", param=param, code="invalid_value")


def _tool_calls(calls: Any, param: str) -> list[dict]:
    """An assistant message's ``tool_calls`` as chat templates render them: arguments parsed from their JSON string.

    Raises:
        APIError: 400: not a list of ``{"id", "type": "function", "function": {"name", "arguments"}}``; a call
            without its id (a non-empty string), or with the id of an earlier call of the message, on ``param[i].id``.
    """
    parsed = []
    for index, call in enumerate(calls if isinstance(calls, list) else [None]):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            arguments = None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not isinstance(arguments, dict):
            raise APIError(400, f'{param}[{index}] must be {{"id", "type": "function", "function": {{"name", '
                           '"arguments": a JSON object as a string}}', param=f"{param}[{index}]",
                           code="invalid_value")
        made = call.get("id")
        if not isinstance(made, str) or not made:
            missing, at = made in (None, ""), f"{param}[{index}].id"
            raise APIError(400, f"{at} {'is missing' if missing else f'must be a string, not {json_value(made)}'}: "
                           'send each call with the id the reply gave it ("call_..."), which its tool message names '
                           "in tool_call_id, as OpenAI requires", param=at,
                           code="missing_required_parameter" if missing else "invalid_type")
        twin = next((at for at, earlier in enumerate(parsed) if earlier["id"] == made), None)
        if twin is not None:
            raise APIError(400, f"{param}[{index}].id {made!r} is also the id of {param}[{twin}]: give each call of a "
                           "message its own id (the one the reply gave it), which its tool message names in "
                           "tool_call_id", param=f"{param}[{index}].id", code="invalid_value")
        parsed.append({"id": made, "type": "function", "function": {"name": function["name"], "arguments": arguments}})
    return parsed
