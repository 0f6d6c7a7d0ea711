"""The in-process server bridge (app/backends/serve_in_thread.py) with a tiny FastAPI app and a fake worker on a loop of its
own thread (standing in for the window's GUI loop): batches cross both loops, errors and cancellation too, the port
is freed, a port in use says so."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from app.backends.serve_in_thread import ServerStartError, ServerThread, SwitchableApp, WorkerOnLoop
from app.binding import listen


class FakeWorker:
    """``generate`` yields ``batches`` (a batch "wait" waits for the cancel event, at most 10 s); records the
    thread it ran on and whether it was cancelled when it ended."""

    def __init__(self, batches):
        self.batches = batches
        self.threads: list[str] = []
        self.cancelled_at_end: list[bool] = []
        self.ended = threading.Event()

    async def generate(self, request, cancel):
        self.threads.append(threading.current_thread().name)
        try:
            for batch in self.batches:
                if batch == "wait":
                    for _ in range(1000):
                        if cancel.is_set():
                            return
                        await asyncio.sleep(0.01)
                    return
                if batch == "fail":
                    raise ValueError("n_ctx must be at least 16")
                yield batch
        finally:
            self.cancelled_at_end.append(cancel.is_set())
            self.ended.set()


@pytest.fixture
def worker_loop():
    """An asyncio loop running in a thread named ``worker-loop``."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="worker-loop", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def tiny_app(backend: WorkerOnLoop, model: str = "m1") -> FastAPI:
    """``GET /generate`` streams each batch as a JSON line; a ValueError is a 400 before the stream starts."""
    app = FastAPI()

    @app.get("/generate")
    async def generate():
        batches = backend.generate(None, threading.Event())
        try:
            first = await anext(batches)
        except ValueError as error:
            return JSONResponse({"error": str(error), "model": model}, status_code=400)
        except StopAsyncIteration:
            first = None

        async def lines():
            if first is not None:
                yield json.dumps(first) + "\n"
                async for batch in batches:
                    yield json.dumps(batch) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return app


def serve(worker, loop, model="m1"):
    server = ServerThread(tiny_app(WorkerOnLoop(worker, loop), model), "127.0.0.1", 0)
    server.start()
    return server


def test_batches_cross_from_the_worker_loop_to_the_server(worker_loop):
    worker = FakeWorker([["a", "b"], ["c"]])
    server = serve(worker, worker_loop)
    try:
        assert server.running
        reply = httpx.get(f"http://127.0.0.1:{server.port}/generate", timeout=10)
        assert reply.status_code == 200
        assert [json.loads(line) for line in reply.text.splitlines()] == [["a", "b"], ["c"]]
        assert worker.threads == ["worker-loop"]  # generate ran on the worker's loop, not the server's
        assert worker.cancelled_at_end == [False]
    finally:
        server.stop()
    assert not server.running


def test_an_error_of_the_worker_reaches_the_server(worker_loop):
    server = serve(FakeWorker(["fail"]), worker_loop, model="SmolLM2")
    try:
        reply = httpx.get(f"http://127.0.0.1:{server.port}/generate", timeout=10)
        assert reply.status_code == 400
        assert reply.json() == {"error": "n_ctx must be at least 16", "model": "SmolLM2"}
    finally:
        server.stop()


def test_a_prompt_check_runs_on_the_worker_loop_and_its_refusal_reaches_the_caller(worker_loop):
    """A server's completion of several prompts checks them all first (``check_prompt``): on the worker's loop,
    as ``generate`` runs, its refusal raised on the caller's."""
    checked = []

    class Checks:
        async def check_prompt(self, request):
            checked.append((request, threading.current_thread().name))
            if request == "bad":
                raise ValueError("prompt holds the token id 99 at index 0")

    backend = WorkerOnLoop(Checks(), worker_loop)

    async def check_both():
        await backend.check_prompt("good")
        with pytest.raises(ValueError, match="token id 99"):
            await backend.check_prompt("bad")

    asyncio.run(check_both())
    assert checked == [("good", "worker-loop"), ("bad", "worker-loop")]


@pytest.mark.serial  # a wall-time bound
def test_a_client_that_disconnects_cancels_the_generation_on_the_worker_loop(worker_loop):
    worker = FakeWorker([["first"], "wait"])
    server = serve(worker, worker_loop)
    try:
        with httpx.stream("GET", f"http://127.0.0.1:{server.port}/generate", timeout=10) as reply:
            assert json.loads(next(reply.iter_lines())) == ["first"]
        start = time.perf_counter()
        assert worker.ended.wait(5), "the generation still runs after the client left"
        assert time.perf_counter() - start < 3
        assert worker.cancelled_at_end == [True]
    finally:
        server.stop()


def test_stopping_frees_the_port_and_a_port_in_use_says_so(worker_loop):
    server = serve(FakeWorker([["a"]]), worker_loop)
    port = server.port
    with pytest.raises(ServerStartError, match=f"port {port} is in use by another program: choose another port"):
        ServerThread(FastAPI(), "127.0.0.1", port).start()
    assert httpx.get(f"http://127.0.0.1:{port}/generate", timeout=10).status_code == 200  # the first still serves
    server.stop()
    listen("127.0.0.1", port).close()  # free again
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/generate", timeout=2)


@pytest.mark.serial  # a wall-time bound
def test_stopping_with_a_stream_open_ends_it_and_cancels_the_generation(worker_loop):
    worker = FakeWorker([["first"], "wait"])
    server = serve(worker, worker_loop)
    client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        client.sendall(b"GET /generate HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        while b"first" not in received:
            received += client.recv(4096)
        start = time.perf_counter()
        server.stop()
        assert time.perf_counter() - start < 8
        assert worker.ended.wait(5) and worker.cancelled_at_end == [True]
    finally:
        client.close()


def test_a_server_on_the_worker_loop_itself_is_refused(worker_loop):
    backend = WorkerOnLoop(FakeWorker([["a"]]), worker_loop)

    async def on_worker_loop():
        async for _ in backend.generate(None, threading.Event()):
            pass

    with pytest.raises(RuntimeError, match="another loop"):
        asyncio.run_coroutine_threadsafe(on_worker_loop(), worker_loop).result(5)


def test_a_switchable_app_serves_its_replacement_from_the_next_request_on(worker_loop):
    backend = WorkerOnLoop(FakeWorker(["fail"]), worker_loop)
    app = SwitchableApp(tiny_app(backend, "int4"))
    server = ServerThread(app, "127.0.0.1", 0)
    server.start()
    try:
        url = f"http://127.0.0.1:{server.port}/generate"
        assert httpx.get(url, timeout=10).json()["model"] == "int4"
        app.current = tiny_app(backend, "int8")
        assert httpx.get(url, timeout=10).json()["model"] == "int8"
    finally:
        server.stop()
