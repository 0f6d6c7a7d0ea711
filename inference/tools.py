"""Tool calling: which chat templates render tools, how their models write a call, the grammar that keeps calls
valid, and the reader that turns a reply's text into calls.

Design rules:

* **The model's own format.** A chat template that renders ``tools`` (Qwen2.5, Qwen3, Hermes, Llama 3.1+, Mistral)
  also tells the model how to answer with a call, and that is the format read back (``ToolCallFormat``), as
  llama-server, vLLM and Ollama do: Hermes-style ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
  blocks, Llama 3's bare ``{"name": ..., "parameters": {...}}``, Mistral's ``[TOOL_CALLS][{...}]``. A template
  that never mentions ``tools`` renders none: such a model cannot call tools (``ToolsUnsupportedError``).
* **Calls follow their schemas.** A grammar (``inference.constraints``) lets the reply be free text or calls of
  the given functions whose arguments match each function's JSON schema (``tool_choice`` "auto"), calls only
  ("required"), or one call of one function (a named function); so a call, once the model starts one, is always
  valid and parseable.
* **Text streams, calls arrive whole.** ``ToolCallReader`` passes text through until the format's opener appears
  (holding back what could be its beginning), then keeps the rest and reads the calls from it at the end.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .constraints import JSON_LAYOUT, lark_grammar
from .events import ToolCall


class ToolsUnsupportedError(ValueError):
    """The model's chat template renders no tools, so the model was never told about them."""


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


@dataclass(frozen=True)
class ToolCallFormat:
    """How a model family writes tool calls.

    Attributes:
        name: ``hermes``, ``llama3`` or ``mistral``.
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
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
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


def tool_call_format(chat_template: str) -> ToolCallFormat | None:
    """The format a chat template teaches its model for tool calls; None when the template renders no tools.

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


class ToolCallReader:
    """Splits a streamed reply into text and tool calls.

    ``push`` returns the text that is certainly not part of a call (what could still begin the opener is held
    back); once the opener appears, the rest of the reply is kept; ``finish`` returns the held text and the calls
    (when the kept part reads as calls; else it is text too).
    """

    def __init__(self, form: ToolCallFormat):
        self._format = form
        self._held = ""
        self._calls: str | None = None  # the reply from the opener on, once it appeared
        self._text_only = False  # an at-start opener did not come: the reply is text

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

    def finish(self) -> tuple[str, list[ToolCall]]:
        """``(text not shown yet, calls)`` at the end of the reply."""
        if self._calls is None:
            return self._held, []
        calls = self._format.parse(self._calls)
        if calls is None:
            return self._held + self._calls, []
        return self._held, calls
