"""Tool calling: which chat templates render tools, how their models write a call, the grammar that keeps calls
valid, and the reader that turns a reply's text into calls.

Design rules:

* **The model's own format.** A chat template that renders ``tools`` (Qwen2.5, Qwen3, Hermes, Llama 3.1+, Mistral)
  also tells the model how to answer with a call, and that is the format read back (``ToolCallFormat``), as
  llama-server, vLLM and Ollama do: Hermes-style ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
  blocks, Llama 3's bare ``{"name": ..., "parameters": {...}}``, Mistral's ``[TOOL_CALLS][{...}]``.
* **A generic format for the other templates.** A template that never mentions ``tools`` (SmolLM2's) gets a
  format after llama-server's "generic" one (``common/chat.cpp``): the system prompt describes the tools
  (:func:`generic_conversation`), and the reply is either plain text or one JSON object, ``{"tool_call": {"name",
  "arguments"}}`` or, where parallel calls are allowed, ``{"tool_calls": [{"name", "arguments"}, ...]}``; earlier
  calls and their results are rendered into the conversation as that JSON and as user messages ``{"tool_response":
  {"tool", "content"}}``. llama-server makes the whole reply JSON under "auto" (a call, or ``{"response": text}``);
  text stays plain here because, measured on the default model (``bench/tool_call_rate.py``), that shape made it
  call a tool for small talk too ("Hello!" got a weather call), where plain text under "auto" calls for nothing.
* **Calls follow their schemas.** A grammar (``inference.constraints``) lets the reply be free text or calls of
  the given functions whose arguments match each function's JSON schema (``tool_choice`` "auto"), calls only
  ("required"), or one call of one function (a named function); so a call, once the model starts one, is always
  valid and parseable.
* **Text streams, and so do calls.** ``ToolCallReader`` passes text through until the format's opener appears
  (holding back what could be its beginning), then keeps the rest: each call's name and its arguments' JSON text
  stream as ``ToolCallDelta`` pieces as they are written (:func:`written_calls`), and the calls are read whole from
  it at the end.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from .constraints import JSON_LAYOUT, lark_grammar
from .events import ToolCall, ToolCallDelta


@dataclass(frozen=True)
class ToolUse:
    """The tools a reply may call.

    Attributes:
        tools: OpenAI's tool objects, ``{"type": "function", "function": {"name", "description", "parameters"}}``
            (at least one).
        choice: ``"auto"`` (text or calls), ``"required"`` (calls only) or a function's name (one call of it).
        parallel: several calls in one reply allowed (OpenAI's ``parallel_tool_calls``).
    """

    tools: tuple[dict, ...]
    choice: str = "auto"
    parallel: bool = True

    @property
    def names(self) -> list[str]:
        """The functions' names, in order."""
        return [tool["function"]["name"] for tool in self.tools]


#: The arguments' schema of a function that declares no parameters.
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class ToolCallFormat:
    """How a model family writes tool calls.

    Attributes:
        name: ``hermes``, ``llama3``, ``mistral`` or ``generic`` (templates without tools, :data:`GENERIC`).
        opener: the text that starts the calls part of a reply.
        at_start: the opener counts only at the start of the reply (Llama 3's bare JSON object).
        arguments_key: the key of the arguments in a call object (``arguments``, Llama 3's ``parameters``).
    """

    name: str
    opener: str
    at_start: bool
    arguments_key: str

    def grammar(self, use: ToolUse) -> str:
        """The llguidance grammar of a reply under ``use`` (see the module's design rules).

        Raises:
            GrammarError: a function's ``parameters`` is not a schema llguidance can enforce.
        """
        chosen = [tool for tool in use.tools if use.choice in ("auto", "required") or tool["function"]["name"] == use.choice]
        schema = {"anyOf": [self._call_schema(tool["function"]) for tool in chosen], "x-guidance": JSON_LAYOUT}
        call = f"%json {json.dumps(schema)}"
        if self.name == "hermes":
            one = f'"<tool_call>\\n" {call} "\\n</tool_call>"'
            calls = f'{one} ("\\n" {one})*' if use.parallel else one
        elif self.name == "mistral":
            calls = f'"[TOOL_CALLS][" {call} (", " {call})* "]"' if use.parallel else f'"[TOOL_CALLS][" {call} "]"'
        elif self.name == "generic":
            calls = f"%json {json.dumps(_generic_schema(schema, _generic_list(use)))}"
        else:
            calls = call
        if use.choice != "auto":
            return lark_grammar(f"start: {calls}")
        opener = re.escape(self.opener).replace("/", "\\/")
        if self.at_start:  # text is whatever does not open with the call object
            return lark_grammar(f"start: calls | TEXT\ncalls: {calls}\nTEXT: /(?s:.+)/ & ~/(?s:\\s*{opener}.*)/")
        # text without the opener, then calls or nothing
        return lark_grammar(f"start: TEXT? calls | TEXT\ncalls: {calls}\nTEXT: /(?s:.+)/ & ~/(?s:.*{opener}.*)/")

    def _call_schema(self, function: dict) -> dict:
        # a function without parameters (omitted or {}) takes none, as OpenAI defines it: an object of no keys (an
        # open one let the default model copy the instructions' {"<argument>": "<value>"})
        parameters = function.get("parameters") or NO_PARAMETERS
        return {
            "type": "object",
            "properties": {"name": {"const": function["name"]}, self.arguments_key: parameters},
            "required": ["name", self.arguments_key],
            "additionalProperties": False,
        }

    def parse(self, text: str) -> list[ToolCall] | None:
        """The calls of the calls part of a reply (from the opener on); None when it is not valid calls."""
        try:
            if self.name == "hermes":
                blocks = re.findall(r"<tool_call>\s*(.*?)\s*</tool_call>", text, re.DOTALL)
                rest = re.sub(r"<tool_call>\s*.*?\s*</tool_call>", "", text, flags=re.DOTALL)
                if not blocks or rest.strip():
                    return None
                objects = [json.loads(block) for block in blocks]
            elif self.name == "mistral":
                objects = json.loads(text.strip()[len(self.opener):])
            elif self.name == "generic":
                whole = json.loads(text)
                if not isinstance(whole, dict) or len(whole) != 1:
                    return None
                objects = whole.get("tool_calls", [whole["tool_call"]] if "tool_call" in whole else None)
            else:
                objects = [json.loads(text)]
        except ValueError:
            return None
        calls = []
        for item in objects if isinstance(objects, list) else [None]:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                return None
            arguments = item.get(self.arguments_key, item.get("arguments", {}))
            if isinstance(arguments, str):  # some models write the arguments as a JSON string
                try:
                    arguments = json.loads(arguments)
                except ValueError:
                    return None
            if not isinstance(arguments, dict):
                return None
            calls.append(ToolCall(item["name"], arguments))
        return calls


HERMES = ToolCallFormat("hermes", "<tool_call>", at_start=False, arguments_key="arguments")
LLAMA3 = ToolCallFormat("llama3", "{", at_start=True, arguments_key="parameters")
MISTRAL = ToolCallFormat("mistral", "[TOOL_CALLS]", at_start=False, arguments_key="arguments")
GENERIC = ToolCallFormat("generic", "{", at_start=True, arguments_key="arguments")


def _generic_list(use: ToolUse) -> bool:
    """Whether a generic reply under ``use`` writes a list of calls: where parallel calls are allowed, except for a
    named function (called once, as OpenAI's named ``tool_choice`` does)."""
    return use.parallel and use.choice in ("auto", "required")


def _generic_schema(call: dict, parallel: bool) -> dict:
    """The JSON schema of a generic reply's calls: ``{"tool_calls": [call, ...]}`` (at least one) when ``parallel``,
    else ``{"tool_call": call}`` (``call``: the schema of one call)."""
    if parallel:
        key, value = "tool_calls", {"type": "array", "items": call, "minItems": 1}
    else:
        key, value = "tool_call", call
    return {"type": "object", "properties": {key: value}, "required": [key], "additionalProperties": False,
            "x-guidance": JSON_LAYOUT}


def _generic_call_text(calls: list[dict], parallel: bool) -> str:
    """Calls (``{"name", "arguments": dict}``) as a generic reply writes them."""
    if len(calls) == 1 and not parallel:
        return json.dumps({"tool_call": calls[0]}, ensure_ascii=False)
    return json.dumps({"tool_calls": calls}, ensure_ascii=False)


def generic_instructions(use: ToolUse) -> str:
    """What the system prompt says about the tools in the generic format: each function (name, description,
    parameters) as JSON, and how to call them under ``use.choice``, in the shape the grammar enforces."""
    listed = "\n".join(json.dumps({key: tool["function"][key] for key in ("name", "description", "parameters")
                                   if key in tool["function"]}, ensure_ascii=False) for tool in use.tools)
    example = _generic_call_text([{"name": "<tool name>", "arguments": {"<argument>": "<value>"}}], _generic_list(use))
    if _generic_list(use):
        example += " (one or more calls in the list)"
    if use.choice == "auto":
        how = f"To call tools, reply with only this JSON object: {example}. Otherwise answer the user in plain text."
    elif use.choice == "required":
        how = f"Call a tool now: reply with only this JSON object: {example}."
    else:
        how = f"Call the tool {use.choice} now: reply with only this JSON object: {example}."
    return (f"You can call these tools (their arguments follow each one's JSON schema):\n{listed}\n\n{how} A tool's "
            'result comes back in a user message as {"tool_response": {"tool": "<tool name>", "content": "<result>"}}.')


def generic_conversation(system_prompt: str, messages: list[dict], use: ToolUse | None) -> tuple[str, list[dict]]:
    """A conversation with tools, for a chat template that renders none (the generic format): the system prompt
    with :func:`generic_instructions` added (when ``use`` gives tools), assistant messages' ``tool_calls`` written
    as the JSON a generic reply holds (after their text, if any), and ``tool`` messages as user messages
    ``{"tool_response": {"tool": name, "content": text}}`` (results in a row make one message, a line each; the
    tool's name is that of the call whose id the result gives).

    Args:
        system_prompt: the conversation's system prompt ("" = none); messages: as ``ChatSession`` takes them
            (``tool_calls`` arguments as dicts); use: the tools of the reply, or None.

    Returns:
        ``(system prompt, messages)`` with only ``role`` and ``content`` keys and the roles system, user, assistant.
    """
    if use is not None:
        system_prompt = f"{system_prompt}\n\n{generic_instructions(use)}" if system_prompt else generic_instructions(use)
    parallel = _generic_list(use) if use is not None else True
    names: dict[str, str] = {}  # tool call id -> function name
    rendered: list[dict] = []
    previous_tool = False
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function", {})
                names[call.get("id", "")] = function.get("name", "")
                calls.append({"name": function.get("name", ""), "arguments": function.get("arguments", {})})
            text = _generic_call_text(calls, parallel)
            content = f"{content}\n{text}" if content else text
        if role == "tool":
            name = message.get("name") or names.get(message.get("tool_call_id", ""), "")
            line = json.dumps({"tool_response": {"tool": name, "content": content}}, ensure_ascii=False)
            if previous_tool:
                rendered[-1]["content"] += "\n" + line
            else:
                rendered.append({"role": "user", "content": line})
            previous_tool = True
            continue
        previous_tool = False
        rendered.append({"role": role, "content": content})
    return system_prompt, rendered


def tool_call_format(chat_template: str) -> ToolCallFormat | None:
    """The format a chat template teaches its model for tool calls; None when the template renders no tools (the
    model then gets :data:`GENERIC`).

    A template that renders ``tools`` but names none of the known markers gets the Hermes format, the most common
    (Qwen, Hermes, many fine-tunes).
    """
    if not re.search(r"\btools\b", chat_template):
        return None
    if "[TOOL_CALLS]" in chat_template:
        return MISTRAL
    if "<tool_call>" in chat_template:
        return HERMES
    if '"parameters"' in chat_template or "<|python_tag|>" in chat_template:
        return LLAMA3
    return HERMES


def written_calls(text: str, arguments_key: str) -> list[tuple[str, str, bool]]:
    """The calls written so far in ``text`` (the calls part of a reply, possibly cut anywhere), in order, each as
    ``(name, arguments JSON text so far, whether that text is whole)``: a call is a JSON object whose ``"name"``
    string comes before its ``arguments_key`` object (the order the grammars write them in); it is listed once its
    arguments object opens. Objects inside arguments are not calls. Arguments written as a JSON string are not
    listed (they are read at the end only)."""
    calls: list[list] = []
    frames: list[dict] = []  # open containers: kind "{" or "[", and for objects the key being read and its name
    arguments_depth = None  # depth of the frames stack at which the current arguments object opened
    start = 0
    index = 0
    while index < len(text):
        char = text[index]
        if char == '"':
            end = index + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):  # a string still being written: inside arguments, its text so far counts
                index = len(text) if arguments_depth is not None else index
                break
            if arguments_depth is None and frames and frames[-1]["kind"] == "{":
                frame = frames[-1]
                try:
                    value = json.loads(text[index : end + 1])
                except ValueError:
                    value = None
                if frame["expect_key"]:
                    frame["key"], frame["expect_key"] = value, False
                elif frame["key"] == "name" and isinstance(value, str):
                    frame["name"] = value
            index = end + 1
            continue
        if char in "{[":
            parent = frames[-1] if frames else None
            if (arguments_depth is None and char == "{" and parent is not None and parent["kind"] == "{"
                    and not parent["expect_key"] and parent["key"] == arguments_key and parent["name"] is not None):
                arguments_depth, start = len(frames), index
                calls.append([parent["name"], "", False])
            frames.append({"kind": char, "expect_key": char == "{", "key": None, "name": None})
        elif char in "}]":
            if not frames:
                break
            frames.pop()
            if arguments_depth is not None and len(frames) == arguments_depth:
                calls[-1][1], calls[-1][2] = text[start : index + 1], True
                arguments_depth = None
        elif char == "," and frames and frames[-1]["kind"] == "{":
            frames[-1]["expect_key"] = True
        index += 1
    if arguments_depth is not None:
        calls[-1][1] = text[start:index]
    return [tuple(call) for call in calls]


class ToolCallReader:
    """Splits a streamed reply into text and tool calls.

    ``push`` returns the text that is certainly not part of a call (what could still begin the opener is held
    back); once the opener appears, the rest of the reply is kept, and ``deltas`` says what it added to the calls;
    ``finish`` returns the held text and the calls (when the kept part reads as calls; else it is text too).
    """

    def __init__(self, form: ToolCallFormat):
        self._format = form
        self._held = ""
        self._calls: str | None = None  # the reply from the opener on, once it appeared
        self._text_only = False  # an at-start opener did not come: the reply is text
        self._streamed: list[str] = []  # the arguments text each call's deltas carried so far

    def deltas(self) -> list[ToolCallDelta]:
        """What the calls gained since the last call: a new call's name with its arguments text so far, and more
        arguments text of calls already begun (none before the opener)."""
        if self._calls is None:
            return []
        out = []
        for index, (name, arguments, _) in enumerate(written_calls(self._calls, self._format.arguments_key)):
            if index == len(self._streamed):
                self._streamed.append(arguments)
                out.append(ToolCallDelta(index, name, arguments))
            elif len(arguments) > len(self._streamed[index]):
                out.append(ToolCallDelta(index, None, arguments[len(self._streamed[index]):]))
                self._streamed[index] = arguments
        return out

    def push(self, text: str) -> str:
        """Text to show now, out of ``text`` (the reply's next piece)."""
        if self._calls is not None:
            self._calls += text
            return ""
        self._held += text
        if self._text_only:
            out, self._held = self._held, ""
            return out
        opener = self._format.opener
        if self._format.at_start:
            stripped = self._held.lstrip()
            if stripped.startswith(opener):
                self._calls, self._held = stripped, ""
            elif stripped:
                self._text_only = True
                out, self._held = self._held, ""
                return out
            return ""
        index = self._held.find(opener)
        if index >= 0:
            out, self._calls, self._held = self._held[:index], self._held[index:], ""
            return out
        keep = next((n for n in range(min(len(opener) - 1, len(self._held)), 0, -1)
                     if opener.startswith(self._held[-n:])), 0)
        out = self._held[: len(self._held) - keep]
        self._held = self._held[len(out):]
        return out

    def finish(self, cut: bool = False) -> tuple[str, list[ToolCall] | None]:
        """``(text not shown yet, calls)`` at the end of the reply; calls None when the reply wrote none (it is
        text). ``cut``: the reply ended before the model did (length limit, stop string, Stop): calls part that does
        not read as calls whole is then the calls written whole before the cut, the unfinished one dropped, never
        shown as text (a newcomer's tool call cut by max_tokens came back as the format's raw JSON in ``content``,
        and streamed as content after its calls); an empty list when it was cut in the first, so that a front end
        knows the reply's hidden text was a call, not text (a newcomer's read ``"content": ""``)."""
        if self._calls is None:
            return self._held, None
        calls = self._format.parse(self._calls)
        if calls is None and cut:
            return self._held, self._whole_calls()
        if calls is None:
            return self._held + self._calls, None
        written = written_calls(self._calls, self._format.arguments_key)
        if [(name, whole) for name, _, whole in written] == [(call.name, True) for call in calls]:
            calls = [replace(call, arguments_json=text) for call, (_, text, _) in zip(calls, written)]
        return self._held, calls

    def _whole_calls(self) -> list[ToolCall]:
        """The calls of a cut calls part whose arguments were written whole, in order, up to the first that was not."""
        calls = []
        for name, text, whole in written_calls(self._calls, self._format.arguments_key):
            try:
                arguments = json.loads(text) if whole else None
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                break
            calls.append(ToolCall(name, arguments, arguments_json=text))
        return calls
