"""How often a model calls a tool under ``tool_choice`` "auto": over ten requests that plainly need the one tool
offered (each with the tool an ``llm``-style client builds from a Python function: its docstring as description,
its typed arguments as parameters) and ten bits of small talk with the same tools offered, greedy and sampled at
the chat defaults (temperature 0.7, top-p 0.9, repetition penalty 1.1; three seeds).

A reply counts as a call when it holds a call of the offered tool whose arguments carry the value the request names
(case-insensitive); any other call is counted apart ("wrong"). Replies are generated autoregressively on CPU with
the engine's chat session, as the server renders them (the generic format for a template without tools).

Usage: ``python bench/tool_call_rate.py MODEL_FOLDER [--seeds 3] [--max-new-tokens 48]``; prints one line per
request and the rates.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inference.chat import ChatSession  # noqa: E402
from inference.engine import Engine  # noqa: E402
from inference.events import Finished, TextDelta, ToolCalls  # noqa: E402
from inference.generation_config import CHAT_DEFAULTS  # noqa: E402
from inference.model import load_model  # noqa: E402
from inference.precision import PrecisionSettings  # noqa: E402
from inference.settings import ContextSettings, Decoding, GenerationSettings, SamplingSettings  # noqa: E402
from inference.tools import ToolUse  # noqa: E402


def _tool(name: str, description: str, **arguments: str) -> dict:
    properties = {key: {"type": kind} for key, kind in arguments.items()}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": list(arguments)}}}


#: (request, tool offered, a value the call's arguments should carry)
NEEDS_TOOL = [
    ("What is the weather in Paris?", _tool("get_weather", "The weather in a city today.", city="string"), "paris"),
    ("What time is it in Tokyo right now?", _tool("current_time", "The current time in a city.", city="string"),
     "tokyo"),
    ("Convert 100 US dollars to euros.", _tool("convert_currency", "Convert an amount of money between currencies.",
                                               amount="number", source="string", target="string"), "100"),
    ("What is the stock price of Apple?", _tool("stock_price", "The latest stock price of a company.",
                                                company="string"), "apple"),
    ("Multiply 1234 by 5678.", _tool("multiply", "Multiply two numbers.", a="integer", b="integer"), "1234"),
    ("Search Wikipedia for the Eiffel Tower.", _tool("search_wikipedia", "Search Wikipedia for an article.",
                                                     query="string"), "eiffel"),
    ("Send an email to bob@example.com saying hello.", _tool("send_email", "Send an email.", to="string",
                                                              body="string"), "bob@example.com"),
    ("Set a timer for 10 minutes.", _tool("set_timer", "Set a timer for some minutes.", minutes="integer"), "10"),
    ("Translate 'good morning' into Spanish.", _tool("translate", "Translate text into a language.", text="string",
                                                     language="string"), "spanish"),
    ("How many people live in Berlin?", _tool("city_population", "The population of a city.", city="string"),
     "berlin"),
]
SMALL_TALK = ["Hello!", "How are you today?", "Thank you very much!", "Tell me a joke.", "What is your name?",
              "Good night!", "Who wrote Romeo and Juliet?", "What is 2 plus 2?", "Write a haiku about the sea.",
              "Nice to meet you."]


def reply_calls(engine: Engine, request: str, tool: dict, temperature: float, seed: int | None,
                max_new_tokens: int) -> tuple[list, str]:
    """The calls and the raw text of the reply to ``request`` with ``tool`` offered under "auto" (a plain text reply
    is cut after 12 text pieces: it holds no call, whatever follows)."""
    sampling = replace(CHAT_DEFAULTS if temperature else SamplingSettings(), temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
    settings = GenerationSettings(decoding=Decoding.AUTOREGRESSIVE, sampling=sampling, context=ContextSettings(n_ctx=2048))
    engine.reset()
    calls, shown = [], []
    for event in ChatSession(engine, "", [{"role": "user", "content": request}], ToolUse((tool,))).reply(settings):
        if isinstance(event, TextDelta) and event.text:
            shown.append(event.text)
            if len(shown) == 12:  # plain text, no call any more: enough of it to show
                return [], "".join(shown)
        elif isinstance(event, ToolCalls):
            calls = list(event.calls)
        elif isinstance(event, Finished):
            return calls, event.stats.text
    return calls, "".join(shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()
    engine = Engine(load_model(args.model, "CPU", PrecisionSettings()))
    runs = [(0.0, None)] + [(CHAT_DEFAULTS.temperature, seed) for seed in range(args.seeds)]
    counts = {(kind, run): [0, 0, 0] for kind in ("needs", "talk") for run in ("greedy", "sampled")}
    cases = [("needs", request, tool, value) for request, tool, value in NEEDS_TOOL]
    cases += [("talk", request, tool, None) for request, (_, tool, _) in zip(SMALL_TALK, NEEDS_TOOL)]
    for kind, request, tool, value in cases:
        marks = []
        for temperature, seed in runs:
            calls, text = reply_calls(engine, request, tool, temperature, seed, args.max_new_tokens)
            right = any(call.name == tool["function"]["name"] and value is not None
                        and value in str(call.arguments).lower() for call in calls)
            tally = counts[(kind, "greedy" if seed is None else "sampled")]
            tally[0 if right else 1 if calls else 2] += 1
            marks.append("C" if right else "w" if calls else ".")
            if seed is None:
                shown = text.replace("\n", " ")[:150]
        print(f"{kind:5} {''.join(marks)}  {request[:40]:40} | {shown}", flush=True)
    for (kind, run), (right, wrong, text) in counts.items():
        total = right + wrong + text
        print(f"{kind:5} {run:7}: right call {right}/{total}, other call {wrong}/{total}, text {text}/{total}")


if __name__ == "__main__":
    main()
