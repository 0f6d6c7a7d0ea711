"""The remote backend against SpecChat's own server, ``specchat serve`` in a subprocess on 127.0.0.1 with the default
model: it is recognised as SpecChat's, each mode answers with its statistics (Auto's drafters among them), and a
wrong key is said."""

from __future__ import annotations

import threading

import pytest
from helpers import run_coroutine
from server_process import ServerProcess

from app.backends.protocol import GenerationRequest
from app.backends.remote import RemoteBackend, RemoteTarget
from app.backends.remote_errors import RemoteError
from inference.events import Finished, StepStats, TextDelta
from inference.settings import Decoding, GenerationSettings, SamplingSettings, SpeculativeSettings

KEY = "remote-test-key"
PROMPT = [{"role": "user", "content": "Repeat exactly: the cat sat on the mat, the cat sat on the mat."}]


@pytest.fixture(scope="module")
def server(int4_dir):
    with ServerProcess(["--api-key", KEY]) as process:
        yield process.url


def reply(backend: RemoteBackend, decoding: Decoding) -> list:
    settings = GenerationSettings(
        decoding=decoding, sampling=SamplingSettings(max_new_tokens=24), speculative=SpeculativeSettings(k=4)
    )
    events: list = []

    async def run():
        async for batch in backend.generate(GenerationRequest(PROMPT, "", settings), threading.Event()):
            events.extend(batch)

    run_coroutine(run())
    return events


def test_the_backend_talks_to_specchat_serve_in_both_modes(server):
    backend = RemoteBackend(RemoteTarget(server, api_key=KEY))
    models = run_coroutine(backend.list_models())
    assert models and backend.specchat is True
    backend = RemoteBackend(RemoteTarget(server, models[0].id, KEY), specchat=True)
    for decoding, mode in ((Decoding.AUTOREGRESSIVE, "ar"), (Decoding.PROMPT_LOOKUP, "spec"), (Decoding.AUTO, "auto")):
        events = reply(backend, decoding)
        stats = events[-1].stats
        assert isinstance(events[-1], Finished) and stats.mode == mode
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text and text == stats.text and 0 < stats.new_tokens <= 24
        assert stats.ttft_ms > 0 and stats.prompt_tokens > 0
        drafted = sum(e.drafted for e in events if isinstance(e, StepStats))
        assert drafted == stats.drafted and stats.accepted <= stats.drafted  # the acceptance curve sums to the totals
        if mode == "auto":  # what each drafter did, read from the server's statistics (the footer names them)
            assert stats.by_drafter and sum(use.steps for use in stats.by_drafter.values()) <= stats.new_tokens
            assert sum(use.drafted for use in stats.by_drafter.values()) == stats.drafted
            assert sum(stats.k_steps.values()) == sum(use.steps for use in stats.by_drafter.values())
        if mode == "ar":
            assert stats.drafted == 0 and not any(e.from_draft for e in events if isinstance(e, TextDelta))


def test_a_wrong_key_is_said(server):
    with pytest.raises(RemoteError, match=r"refused the API key \(401\)") as error:
        run_coroutine(RemoteBackend(RemoteTarget(server, api_key="wrong")).list_models())
    assert error.value.status == 401
