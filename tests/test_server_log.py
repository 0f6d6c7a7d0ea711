"""The server's request log (``app.server.request_log``): one line per request with its status, tokens, wait, TTFT,
total time and client, no prompt text unless ``--log-prompts``; the queue position in a waiting stream's first
comment line and in the 429; and ``specchat serve`` writing the lines to stderr and to its log file."""

from __future__ import annotations

import asyncio
import logging
import re

import httpx
import openai
import pytest
from helpers import run_coroutine
from server_process import ServerProcess

from app.backends.protocol import GenerationRequest
from app.server import create_app
from app.server.gate import GenerationGate
from app.server.generation import Generation
from app.server.request_log import RequestRecord
from inference.events import Finished, GenerationStats, PromptProgress, StepStats, TextDelta
from inference.settings import GenerationSettings

SECRET = "my secret question"
ASK = {"messages": [{"role": "user", "content": SECRET}], "max_tokens": 4}
LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (?P<method>[A-Z]+) (?P<route>\S+) (?P<status>\d+) in=(?P<tokens_in>\S+) "
    r"out=(?P<tokens_out>\S+) wait_ms=(?P<wait>\S+) ttft_ms=(?P<ttft>\S+) total_ms=(?P<total>\d+) "
    r"client=(?P<client>\S+) queued=(?P<queued>\d+)(?: cut=(?P<cut>\S+))?(?: prompt=(?P<prompt>.*))?$"
)


class Held:
    """A backend without a model whose replies wait for ``release`` (set inside the test's loop): "Hi", 5 prompt
    tokens, 1 new token, a TTFT of 12 ms."""

    def __init__(self):
        self.release: asyncio.Event | None = None

    async def check_prompt(self, request):
        pass

    async def generate(self, request, cancel):
        if self.release is not None:
            await self.release.wait()
        yield [TextDelta("Hi", 1, False),
               Finished(GenerationStats(mode="ar", prompt_tokens=5, new_tokens=1, ttft_ms=12.0, stop_reason="eos"))]


def lines(caplog) -> list[dict]:
    """The request lines logged, parsed (each must match the line's format)."""
    found = [LINE.match(record.getMessage()) for record in caplog.records if record.name == "app.server.requests"]
    assert all(found), [record.getMessage() for record in caplog.records]
    return [match.groupdict() for match in found]


def send(app, *requests: tuple[str, str, dict | None]) -> list[httpx.Response]:
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return [await client.request(method, path, json=body) for method, path, body in requests]
    return run_coroutine(run())


@pytest.fixture
def caplog_requests(caplog):
    caplog.set_level(logging.INFO, logger="app.server.requests")
    return caplog


def test_a_line_per_request_with_its_fields_and_no_prompt(caplog_requests):
    app = create_app(Held(), model_id="m")
    chat, streamed, missing, health = send(app, ("POST", "/v1/chat/completions", ASK),
                                           ("POST", "/v1/chat/completions", {**ASK, "stream": True}),
                                           ("GET", "/v1/nothing", None), ("GET", "/health", None))
    checks = send(app, ("HEAD", "/health", None), ("GET", "/v1/health", None), ("HEAD", "/v1/health", None))
    assert (chat.status_code, streamed.status_code, missing.status_code, health.status_code) == (200, 200, 404, 200)
    assert [check.status_code for check in checks] == [200, 200, 200]
    logged = lines(caplog_requests)
    assert len(logged) == 3, "a health check that answered 200 (GET or HEAD, /health or /v1/health) writes no line"
    for line in logged[:2]:
        assert (line["method"], line["route"], line["status"]) == ("POST", "/v1/chat/completions", "200")
        assert (line["tokens_in"], line["tokens_out"], line["ttft"], line["queued"]) == ("5", "1", "12", "0")
        assert line["wait"] != "-" and int(line["total"]) >= int(line["wait"])
        assert line["client"] == "127.0.0.1:123" and line["prompt"] is None  # httpx's ASGI client address
    assert (logged[2]["method"], logged[2]["route"], logged[2]["status"]) == ("GET", "/v1/nothing", "404")
    assert (logged[2]["tokens_in"], logged[2]["tokens_out"], logged[2]["ttft"], logged[2]["wait"]) == ("-",) * 4
    assert logged[2]["queued"] == "0", "a request that never waited says queued=0, as the README says, not '-'"
    assert SECRET not in caplog_requests.text


def test_log_prompts_writes_the_last_message(caplog_requests):
    app = create_app(Held(), model_id="m", log_prompts=True)
    send(app, ("POST", "/v1/chat/completions", ASK), ("POST", "/v1/completions", {"prompt": "Once\nupon", "max_tokens": 2}),
         ("POST", "/v1/responses", {"input": SECRET + " again"}),
         ("POST", "/v1/completions", {"prompt": list(range(1, 1001)), "max_tokens": 2}))  # token ids: their count
    assert [line["prompt"] for line in lines(caplog_requests)] == [
        f'"{SECRET}"', '"Once\\nupon"', f'"{SECRET} again"', '"(1000 token ids)"']


async def one_running_one_waiting(client: httpx.AsyncClient, app, route: str, body: dict):
    """Send a chat request that generates (a ``Held`` backend holds it), then ``body`` to ``route``, which waits
    behind it; returns both as futures once the second is queued."""
    running = asyncio.ensure_future(client.post("/v1/chat/completions", json=ASK))
    while not app.state.gate.busy:
        await asyncio.sleep(0.01)
    waiting = asyncio.ensure_future(client.post(route, json=body))
    while app.state.gate.waiting < 1:
        await asyncio.sleep(0.01)
    return running, waiting


def test_a_waiting_stream_says_its_position_first_and_a_429_says_where_it_would_wait(caplog_requests):
    backend = Held()
    app = create_app(backend, model_id="m", max_queue=1)

    async def scenario():
        backend.release = asyncio.Event()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            running, waiting = await one_running_one_waiting(client, app, "/v1/chat/completions", {**ASK, "stream": True})
            refused = await client.post("/v1/responses", json={"input": "Hi", "stream": True})
            backend.release.set()
            return await running, await waiting, refused

    running, waiting, refused = run_coroutine(scenario())
    assert running.status_code == 200 and waiting.status_code == 200
    assert waiting.text.startswith(": queued, position 1\n\ndata: ") and waiting.text.endswith("data: [DONE]\n\n")
    assert refused.status_code == 429
    assert "one reply generating and 1 waiting, so this request would wait at queue position 2, past the 1 allowed" \
        in refused.json()["error"]["message"]
    by_status = {(line["route"], line["status"]): line for line in lines(caplog_requests)}
    assert by_status[("/v1/responses", "429")]["queued"] == "2"
    assert by_status[("/v1/responses", "429")]["tokens_out"] == "-"
    assert [line["queued"] for line in lines(caplog_requests) if line["status"] == "200"] == ["0", "1"]


def test_a_stream_that_waits_in_the_responses_api_says_its_position_too(caplog_requests):
    backend = Held()
    app = create_app(backend, model_id="m", max_queue=2)

    async def scenario():
        backend.release = asyncio.Event()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            running = asyncio.ensure_future(client.post("/v1/responses", json={"input": "Hi"}))
            while not app.state.gate.busy:
                await asyncio.sleep(0.01)
            first = asyncio.ensure_future(client.post("/v1/responses", json={"input": "Hi", "stream": True}))
            while app.state.gate.waiting < 1:
                await asyncio.sleep(0.01)
            second = asyncio.ensure_future(client.post("/v1/responses", json={"input": "Hi", "stream": True}))
            while app.state.gate.waiting < 2:
                await asyncio.sleep(0.01)
            backend.release.set()
            return await running, await first, await second

    running, first, second = run_coroutine(scenario())
    assert first.text.startswith(": queued, position 1\n\nevent: response.created\n")
    assert second.text.startswith(": queued, position 2\n\nevent: response.created\n")
    assert second.text.rstrip().splitlines()[-2] == "event: response.completed"


def test_serve_writes_the_lines_to_stderr_and_its_log_file(data_dir, int4_dir, tmp_path):
    with ServerProcess(["--log-prompts"], env={"SPECCHAT_LOG_DIR": str(tmp_path)}) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
        reply = client.chat.completions.create(model="any", messages=[{"role": "user", "content": SECRET}],
                                               temperature=0, max_tokens=3)
        stream = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}],
                                                temperature=0, max_tokens=3, stream=True)
        assert [chunk for chunk in stream]
        httpx.get(server.base + "/v2/nothing", timeout=30)
    logged = [LINE.match(line.rstrip("\n")) for line in server.stderr_lines]
    logged = [match.groupdict() for match in logged if match]
    assert [(line["route"], line["status"]) for line in logged] == [
        ("/v1/chat/completions", "200"), ("/v1/chat/completions", "200"), ("/v2/nothing", "404")]
    assert logged[0]["tokens_in"] == str(reply.usage.prompt_tokens) and logged[0]["tokens_out"] == "3"
    assert logged[0]["prompt"] == f'"{SECRET}"' and logged[1]["prompt"] == '"Hi"'
    assert float(logged[0]["ttft"]) > 0 and logged[0]["client"].startswith("127.0.0.1:")
    log_file = (tmp_path / "cli.log").read_text()
    assert log_file.count("app.server.requests") == 3 and f'prompt="{SECRET}"' in log_file


def test_a_request_refused_before_any_route_is_logged_too(caplog_requests):
    """The log is the outermost layer: a keyless server's 403 to a web page is a line as well."""
    async def run():
        transport = httpx.ASGITransport(app=create_app(Held(), model_id="m"))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            return await client.post("/v1/chat/completions", json=ASK, headers={"Origin": "https://evil.example"})

    assert run_coroutine(run()).status_code == 403
    [line] = lines(caplog_requests)
    assert (line["route"], line["status"], line["tokens_in"], line["queued"]) == ("/v1/chat/completions", "403", "-", "0")


class Endless:
    """A backend whose reply streams a token a batch until it is stopped (a client that left mid-stream)."""

    async def generate(self, request, cancel):
        generated = 0
        while not cancel.is_set():
            generated += 1
            yield [TextDelta("x", generated, False),
                   StepStats(drafted=0, accepted=0, emitted=1, draft_ms=0.0, verify_ms=1.0, step_ms=1.0, k=0,
                             cache_len=5 + generated, n_ctx=512, elapsed_s=0.01 * generated, generated=generated)]


def test_a_stream_its_client_left_is_logged_as_499_with_the_tokens_it_sent():
    """Newcomer trial: a stream the client cancelled after ~3 s was logged `200 in=- out=- ttft_ms=-`, as if nothing
    had been generated (a whole reply left the same way is logged 499). It reads 499 and the tokens sent."""
    async def scenario(backend, batches: int) -> RequestRecord:
        record = RequestRecord("POST", "/v1/chat/completions", "127.0.0.1:1", 0.0, status=200)
        run = Generation(backend, GenerationGate(0), GenerationRequest([], "", GenerationSettings()), "", record)
        await run.start()
        for _ in range(batches - 1):
            await run.next()
        await run.close()  # as the stream does however it ends
        return record

    left = run_coroutine(scenario(Endless(), 7))
    assert (left.status, left.tokens_out) == (499, 7)

    async def waiting() -> RequestRecord:  # a client gone while its stream waited in the queue (review)
        gate = GenerationGate(1)
        await gate.acquire()  # another reply generates
        record = RequestRecord("POST", "/v1/chat/completions", "127.0.0.1:2", 0.0, status=200)
        run = Generation(Held(), gate, GenerationRequest([], "", GenerationSettings()), "", record)
        task = asyncio.ensure_future(run.start())
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await run.close()
        return record

    queued = run_coroutine(waiting())
    assert (queued.status, queued.tokens_out) == (499, None)
    whole = run_coroutine(scenario(Held(), 1))
    assert (whole.status, whole.tokens_in, whole.tokens_out) == (200, 5, 1)  # a reply that ended is what it was


class ReadThenEndless(Endless):
    """:class:`Endless` after the prefill of a prompt of 38 tokens, 30 of them read (8 were cached)."""

    async def generate(self, request, cancel):
        yield [PromptProgress(done=0, total=30, prompt_tokens=38, elapsed_s=0.0),
               PromptProgress(done=30, total=30, prompt_tokens=38, elapsed_s=0.05)]
        async for batch in super().generate(request, cancel):
            yield batch


def test_a_stream_its_client_left_is_logged_with_its_prompt_tokens_and_ttft():
    """Newcomer trial: a stream closed after 5 chunks was logged ``499 in=- out=3 ... ttft_ms=-`` though its prompt
    was read and 3 tokens went out: the prompt's tokens and TTFT are logged whenever they exist."""
    async def scenario(batches: int) -> RequestRecord:
        record = RequestRecord("POST", "/v1/chat/completions", "127.0.0.1:1", 0.0, status=200)
        run = Generation(ReadThenEndless(), GenerationGate(0), GenerationRequest([], "", GenerationSettings()), "",
                         record)
        await run.start()
        for _ in range(batches - 1):
            await run.next()
        await run.close()
        return record

    left = run_coroutine(scenario(4))
    assert (left.status, left.tokens_in, left.tokens_out) == (499, 38, 3)
    assert left.ttft_ms is not None and left.ttft_ms >= 0
    prefilled = run_coroutine(scenario(1))  # left before its first token: no TTFT to log
    assert (prefilled.status, prefilled.tokens_in, prefilled.ttft_ms) == (499, 38, None)


class StoppedAfterOneToken:
    """A backend whose reply the server's stop cuts after one token (the engine ends it as cancelled)."""

    async def generate(self, request, cancel):
        yield [TextDelta("Hi", 1, False)]
        yield [Finished(GenerationStats(mode="ar", prompt_tokens=5, new_tokens=1, ttft_ms=12.0, stop_reason="cancelled"))]


def test_streams_the_server_cut_say_so_in_their_lines(caplog_requests):
    """Newcomer trial: streams cut by Ctrl+C were logged ``200 in=38 out=93`` as complete replies, and a queued
    stream that never got a token ``200 in=- out=- ... queued=2``. Their 200 went out before the cut, so the line
    says ``cut=server_stopped``; what the clients receive is unchanged (an error event, no [DONE])."""
    (cut,) = send(create_app(StoppedAfterOneToken(), model_id="m"), ("POST", "/v1/chat/completions",
                                                                      {**ASK, "stream": True}))
    backend = Held()
    app = create_app(backend, model_id="m")

    async def stopping_while_one_waits():
        backend.release = asyncio.Event()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            running, waiting = await one_running_one_waiting(client, app, "/v1/responses", {"input": "Hi", "stream": True})
            app.state.gate.close()  # as the server does when it stops
            backend.release.set()
            return await running, await waiting

    whole, queued = run_coroutine(stopping_while_one_waits())
    for response in (cut, queued):
        assert response.status_code == 200 and "server_stopped" in response.text and "[DONE]" not in response.text
    logged = {line["route"]: line for line in lines(caplog_requests) if line["status"] == "200"}
    assert logged["/v1/responses"]["cut"] == "server_stopped" and logged["/v1/responses"]["queued"] == "1"
    chat = [line for line in lines(caplog_requests) if line["route"] == "/v1/chat/completions"]
    assert [(line["status"], line["tokens_out"], line["cut"]) for line in chat] == [
        ("200", "1", "server_stopped"), ("200", "1", None)]


def test_a_completion_of_several_prompts_logs_one_line_with_their_tokens_summed(caplog_requests):
    response, = send(create_app(Held(), model_id="m", log_prompts=True),
                     ("POST", "/v1/completions", {"prompt": ["a", "b", "c"], "max_tokens": 1}))
    assert response.status_code == 200 and len(response.json()["choices"]) == 3
    line, = lines(caplog_requests)
    assert (line["status"], line["tokens_in"], line["tokens_out"], line["ttft"]) == ("200", "15", "3", "12")
    assert line["prompt"] == '"a (and 2 more prompts)"'
