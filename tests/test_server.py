"""``specchat serve`` end to end: the official ``openai`` client (and raw HTTP for bad input) against the server in a
subprocess on 127.0.0.1, on the default 4-bit model; replies compared with the engine's in-process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import httpx
import openai
import pytest
from server_process import REPO, ServerProcess

from inference.chat import ChatSession
from inference.engine import Engine
from inference.generation_config import recommended_sampling
from inference.settings import Decoding, GenerationSettings, SamplingSettings

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
REWRITE = (
    "Rewrite this sentence with the same words, in the same order: the quick brown fox jumps over the lazy dog "
    "while the quick brown cat sleeps under the old wooden table in the kitchen."
)


@pytest.fixture(scope="module")
def engine(target):
    return Engine(target)


def in_process(engine: Engine, messages: list[dict], max_tokens: int, decoding=Decoding.AUTOREGRESSIVE, **sampling):
    """The engine's reply to ``messages`` in this process (from an empty cache), sampling as the server samples a
    request that sets only ``sampling``: the model's recommended sampling (repetition penalty 1.1...) under it."""
    engine.reset()
    recommended = recommended_sampling(engine.target.folder)
    settings = GenerationSettings(decoding=decoding, sampling=replace(recommended, max_new_tokens=max_tokens, **sampling))
    session = ChatSession(engine, "", messages[:-1])
    return engine_stats(session.send(messages[-1]["content"], settings))


def engine_stats(events):
    return [event for event in events if hasattr(event, "stats")][-1].stats


def test_greedy_chat_reply_is_the_engines(client, engine):
    reply = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=24)
    expected = in_process(engine, QUESTION, 24, temperature=0.0)
    assert reply.choices[0].message.content == expected.text
    assert reply.choices[0].message.role == "assistant"
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert reply.model == "SmolLM2-135M-Instruct-int4"
    assert reply.choices[0].finish_reason == ("length" if expected.stop_reason == "max_new_tokens" else "stop")
    assert reply.usage.prompt_tokens == expected.prompt_tokens
    assert reply.usage.completion_tokens == expected.new_tokens
    assert reply.usage.total_tokens == expected.prompt_tokens + expected.new_tokens
    stats = reply.model_extra["specchat"]
    assert stats["mode"] == "auto" and stats["ttft_ms"] > 0 and stats["tokens_per_s"] > 0  # Auto: the default
    # what Auto did adds up: each step counted once per drafter (plain: no drafts) and once per K drafted
    drafters, k_steps = stats["drafters"], {int(k): n for k, n in stats["k_steps"].items()}
    assert set(drafters) <= {"plain", "head", "model", "lookup"}
    assert sum(use["steps"] for use in drafters.values()) == sum(k_steps.values()) >= 1
    assert stats["drafted"] == sum(use["drafted"] for use in drafters.values()) == sum(k * n for k, n in k_steps.items())
    assert stats["accepted"] == sum(use["accepted"] for use in drafters.values()) <= stats["drafted"]
    assert k_steps.get(0, 0) == drafters.get("plain", {"steps": 0})["steps"]


def test_streamed_chat_reply_and_usage_chunk(client, engine):
    stream = client.chat.completions.create(
        model="any", messages=QUESTION, temperature=0, max_tokens=24, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    expected = in_process(engine, QUESTION, 24, temperature=0.0)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected.text
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].model_extra["specchat"]["prefilled_tokens"] > 0
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == expected.new_tokens
    assert usage.usage.prompt_tokens == expected.prompt_tokens
    assert usage.model_extra["specchat"]["mode"] == "auto"


def test_streamed_steps_are_every_decode_step_the_end_of_sequence_one_last(server):
    """The README's curl example (spec_lookup, K 4) streamed: the steps the chunks list are the reply's decode
    steps, all of them (k_steps counts as many, their tokens are the reply's); the finish chunk lists a step with
    ``emitted`` 0 (found by a README trial): the last one, whose pass chose the end of sequence, no token of the
    text, and a real pass, which the README explains."""
    body = {"messages": [{"role": "user", "content": "Rewrite: the quick brown fox jumps over the lazy dog."}],
            "temperature": 0, "stream": True, "specchat": {"mode": "spec_lookup", "k": 4}}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=120) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    chunks = [event for event in events if event.get("choices")]
    steps = [step for chunk in chunks for step in chunk.get("specchat", {}).get("steps", [])]
    finish = chunks[-1]
    stats = finish["specchat"]
    assert finish["choices"][0]["finish_reason"] == "stop" and stats["stop_reason"] == "eos"
    assert len(steps) == sum(stats["k_steps"].values()) and all(step["k"] == 4 for step in steps)
    assert sum(step["emitted"] for step in steps) + 1 == len([c for c in chunks if c["choices"][0]["delta"].get("content")])
    assert [i for i, step in enumerate(steps) if step["emitted"] == 0] == [len(steps) - 1]
    assert finish["specchat"]["steps"][-1]["emitted"] == 0


def test_a_one_token_reply_has_no_rate_rather_than_zero(client):
    """Newcomer trial: a reply of one token (``max_tokens`` 1) said ``specchat.tokens_per_s`` 0.0, as if decoding
    had stalled; the rate is measured between the first and the last token, so one token has none: null, as the
    command line's statistics line leaves the rate out. A longer reply keeps its rate."""
    one = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=1)
    assert one.usage.completion_tokens == 1 and one.model_extra["specchat"]["tokens_per_s"] is None
    stream = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=1, stream=True)
    finish = [c for c in stream if c.choices and c.choices[0].finish_reason]
    assert finish[0].model_extra["specchat"]["tokens_per_s"] is None
    several = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=8)
    assert several.usage.completion_tokens > 1 and several.model_extra["specchat"]["tokens_per_s"] > 0


def test_text_completion_continues_the_raw_prompt(client, engine):
    prompt = "The days of the week are Monday, Tuesday,"
    plain = {"repetition_penalty": 1.0}  # the model's recommended 1.1 would apply otherwise
    reply = client.completions.create(model="any", prompt=prompt, temperature=0, max_tokens=12, extra_body=plain)
    engine.reset()
    settings = GenerationSettings(sampling=SamplingSettings(max_new_tokens=12))
    expected = engine.generate_text(engine.target.encode(prompt), settings)
    assert reply.object == "text_completion" and reply.choices[0].text == expected.text
    assert reply.usage.prompt_tokens == len(engine.target.encode(prompt))
    streamed = client.completions.create(model="any", prompt=prompt, temperature=0, max_tokens=12, stream=True,
                                         extra_body=plain)
    assert "".join(c.choices[0].text for c in streamed) == expected.text


def test_stop_strings_end_the_reply_before_them(client):
    free = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=24)
    text = free.choices[0].message.content
    word = text.split()[2]
    stopped = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=24, stop=[word, "zzz"])
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text[: text.index(word)]
    single = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=24, stop=word)
    assert single.choices[0].message.content == stopped.choices[0].message.content


def test_seed_reproduces_a_sampled_reply(client):
    def sample(seed):
        reply = client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "Tell me a story."}], temperature=0.7, seed=seed,
            max_tokens=20,
        )
        return reply.choices[0].message.content

    first = sample(1234)
    assert sample(1234) == first
    assert any(sample(seed) != first for seed in (1, 2, 3))


def test_speculative_extension_drafts_and_matches_greedy(client, engine):
    messages = [{"role": "user", "content": REWRITE}]
    spec = client.chat.completions.create(
        model="any", messages=messages, temperature=0, max_tokens=40,
        extra_body={"specchat": {"mode": "spec_lookup", "k": 4}, "repetition_penalty": 1.0},  # a penalty stops copying
    )
    stats = spec.model_extra["specchat"]
    assert stats["mode"] == "spec" and stats["drafter"] == "lookup"
    assert stats["drafted"] > 0 and 0 < stats["accepted"] <= stats["drafted"]
    assert stats["acceptance_rate"] == pytest.approx(stats["accepted"] / stats["drafted"])
    assert spec.choices[0].message.content == in_process(engine, messages, 40, temperature=0.0, repetition_penalty=1.0).text


def test_follow_up_turn_prefills_only_its_new_tokens(client):
    first = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=16)
    answer = first.choices[0].message.content
    follow = QUESTION + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And of Italy?"}]
    second = client.chat.completions.create(model="any", messages=follow, temperature=0, max_tokens=16)
    new_tokens = second.usage.prompt_tokens - first.usage.prompt_tokens - first.usage.completion_tokens
    stats = second.model_extra["specchat"]
    assert stats["prefilled_tokens"] <= new_tokens + 2  # the new turn (and the end of the previous reply's turn)
    assert second.usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens - stats["prefilled_tokens"]
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens


def test_two_concurrent_clients_take_turns(client):
    times, texts = {}, {}
    first_chunk = threading.Event()

    def run(name):
        stream = client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": f"Write a poem about {name}."}], temperature=0,
            max_tokens=30, stream=True,
        )
        parts = []
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                times.setdefault(f"{name} first", time.monotonic())
                first_chunk.set()
                parts.append(chunk.choices[0].delta.content)
        times[f"{name} done"] = time.monotonic()
        texts[name] = "".join(parts)

    a = threading.Thread(target=run, args=("rain",))
    a.start()
    assert first_chunk.wait(60)
    b = threading.Thread(target=run, args=("snow",))
    b.start()
    a.join(120)
    b.join(120)
    assert texts["rain"] and texts["snow"]
    assert times["snow first"] >= times["rain done"] - 0.05  # the second waited for the first to finish


@pytest.mark.serial  # a wall-time bound
def test_a_disconnect_cancels_the_generation(client, server):
    with httpx.stream("POST", f"{server.url}/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}],
        "max_tokens": 2000, "stream": True, "temperature": 0,
    }) as response:
        lines = response.iter_lines()
        assert sum(1 for _, line in zip(range(6), lines) if line.startswith("data:")) >= 3
        assert httpx.get(f"{server.base}/health").json()["busy"] is True
    started = time.monotonic()
    while httpx.get(f"{server.base}/health").json()["busy"]:
        assert time.monotonic() - started < 5, "the cancelled generation still runs"
        time.sleep(0.05)
    reply = client.chat.completions.create(model="any", messages=QUESTION, temperature=0, max_tokens=4)
    assert reply.choices[0].message.content and time.monotonic() - started < 10


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list()] == ["SmolLM2-135M-Instruct-int4"]
    with_slash = httpx.get(f"{server.url}/models/")
    assert (with_slash.status_code, with_slash.json()) == (200, httpx.get(f"{server.url}/models").json())
    assert client.models.retrieve("SmolLM2-135M-Instruct-int4").owned_by == "specchat"
    assert httpx.get(f"{server.base}/health").json() == {"status": "ok", "busy": False, "waiting": 0}
    assert httpx.get(f"{server.base}/nowhere").json()["error"]["type"] == "not_found_error"
    assert "access-control-allow-origin" not in httpx.options(
        f"{server.url}/chat/completions", headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
    ).headers


def _chat(**fields):
    return {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, **fields}


BAD_REQUESTS = [
    (b'{"messages": [', None),
    (b"[1, 2]", None),
    (_chat(messages=[]), "messages"),
    (_chat(messages=[{"role": "function", "content": "x"}]), "messages[0].role"),
    (_chat(messages=[{"role": "user"}]), "messages[0].content"),
    (_chat(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (_chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]),
     "messages[0].content[0].type"),
    (_chat(temperature="hot"), "temperature"),
    (_chat(temperature=-1), "temperature"),
    (_chat(top_p=0), "top_p"),
    (_chat(max_tokens=0), "max_tokens"),
    (_chat(max_completion_tokens=0), "max_completion_tokens"),
    (_chat(stop=[""]), "stop"),
    (_chat(seed=-5), "seed"),
    (_chat(presence_penalty=3), "presence_penalty"),
    (_chat(frequency_penalty=-3), "frequency_penalty"),
    (_chat(n=2), "n"),
    (_chat(stream="yes"), "stream"),
    (_chat(tools={"type": "function"}), "tools"),
    (_chat(tools=[{"type": "function", "function": {"name": "f g"}}]), "tools[0].function.name"),
    (_chat(tool_choice="required"), "tool_choice"),
    (_chat(response_format={"type": "yaml"}), "response_format.type"),
    (_chat(top_logprobs=2), "top_logprobs"),
    (_chat(logprobs=True, top_logprobs=21), "top_logprobs"),
    (_chat(specchat={"mode": "fast"}), "specchat.mode"),
    (_chat(specchat={"k": 99, "mode": "spec_lookup"}), "specchat.k"),
    (_chat(specchat={"n_ctx": 8}), "specchat.n_ctx"),
    (_chat(specchat={"n_ctx": 1 << 20}), "specchat.n_ctx"),
    (_chat(specchat={"n_ctx": 64, "n_keep": 64}), "specchat.n_keep"),
    (_chat(specchat={"n_ctx": 64, "n_discard": 100}), "specchat.n_discard"),
    (_chat(specchat={"typo": 1}), "specchat.typo"),
]


@pytest.mark.parametrize("body, param", BAD_REQUESTS)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_input_is_a_400_naming_the_field(server, body, param, stream):
    if isinstance(body, dict):
        body = json.dumps({**body, "stream": body.get("stream", stream)}).encode()
    response = httpx.post(f"{server.url}/chat/completions", content=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert error["param"] == param


@pytest.fixture(scope="module")
def lookup_server(data_dir, int4_dir):
    """A server that runs no draft model (``--draft lookup``: Auto drafts with prompt lookup only); the default one
    runs the default model's head."""
    with ServerProcess(["--draft", "lookup"]) as process:
        yield process


def test_the_default_server_drafts_with_the_head_on_request(server):
    body = _chat(specchat={"mode": "spec_model"}, max_tokens=8)
    response = httpx.post(f"{server.url}/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    stats = response.json()["specchat"]
    assert (stats["mode"], stats["drafter"]) == ("spec", "head")


@pytest.mark.parametrize("stream", [False, True])
def test_spec_model_without_a_draft_says_how_to_load_one(lookup_server, stream):
    """The server runs no draft model: a request for one is a 400 naming specchat.mode, and the message says how to
    start it with one, and what works without (it said "load one", found by a newcomer trial)."""
    body = _chat(specchat={"mode": "spec_model"}, stream=stream)
    response = httpx.post(f"{lookup_server.url}/chat/completions", json=body, timeout=60)
    error = response.json()["error"]
    assert (response.status_code, error["param"], error["code"]) == (400, "specchat.mode", "no_draft_model")
    assert error["message"].startswith('specchat.mode "spec_model" needs a draft model, and this server has none: ')
    assert "restart `specchat serve` with `--mode spec --draft NAME`" in error["message"]
    assert error["message"].endswith('or send "mode": "spec_lookup" (prompt lookup drafts from the conversation, '
                                     'without a draft model) or "ar"')


def test_values_that_ask_for_nothing_are_accepted(client):
    """Clients such as editors' plugins always send these; they ask for no tool, no format, no log-probabilities."""
    reply = client.chat.completions.create(
        model="any", messages=QUESTION, temperature=0, max_tokens=4, tools=[], tool_choice="none",
        response_format={"type": "text"}, top_logprobs=0, parallel_tool_calls=True, logprobs=False,
    )
    assert reply.choices[0].message.content


def test_a_server_stopped_mid_stream_says_the_reply_is_cut(data_dir, int4_dir):
    """Ctrl+C while a reply streams: the stream ends with an error event, never a finish chunk and [DONE] that
    would make the cut reply look whole; a non-streamed request gets a 503."""
    with ServerProcess() as server:
        events = []
        with httpx.stream("POST", f"{server.url}/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}],
            "max_tokens": 2000, "stream": True, "temperature": 0,
        }) as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events.append(line[5:].strip())
                if len(events) == 5:
                    server.process.send_signal(signal.SIGINT)
        assert server.process.wait(timeout=30) == 130
    assert len(events) > 5 and "[DONE]" not in events
    chunks = [json.loads(event) for event in events]
    assert all(choice["finish_reason"] is None for chunk in chunks[:-1] for choice in chunk["choices"])
    assert chunks[-1]["error"]["code"] == "server_stopped" and "incomplete" in chunks[-1]["error"]["message"]

    with ServerProcess() as server:
        answer = {}
        request = threading.Thread(target=lambda: answer.setdefault("response", httpx.post(
            f"{server.url}/chat/completions", timeout=60, json={
                "messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}],
                "max_tokens": 2000, "temperature": 0,
            })))  # fmt: skip
        request.start()
        deadline = time.monotonic() + 60
        while not httpx.get(f"{server.base}/health").json()["busy"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        server.process.send_signal(signal.SIGINT)
        request.join(timeout=60)
    assert answer["response"].status_code == 503 and answer["response"].json()["error"]["code"] == "server_stopped"


@pytest.mark.serial  # a wall-time bound
def test_ctrl_c_answers_the_queued_requests_503_at_once(data_dir, int4_dir):
    """Ctrl+C with a reply running and two requests queued: all three get a 503 ``server_stopped`` and the server
    ends within seconds, instead of generating the queued replies for clients it is about to drop."""
    with ServerProcess() as server:
        answers = {}
        long = {"messages": [{"role": "user", "content": "Count from 1 to 1000, one number per line."}],
                "max_tokens": 2000, "temperature": 0}
        requests = [threading.Thread(target=lambda i=i: answers.setdefault(i, httpx.post(
            f"{server.url}/chat/completions", timeout=60, json=long))) for i in range(3)]  # fmt: skip
        requests[0].start()
        deadline = time.monotonic() + 60
        while not httpx.get(f"{server.base}/health").json()["busy"]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for request in requests[1:]:
            request.start()
        while httpx.get(f"{server.base}/health").json()["waiting"] < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        stopped_at = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        for request in requests:
            request.join(timeout=60)
        assert server.process.wait(timeout=30) == 130
        assert time.monotonic() - stopped_at < 10  # a generous bound: the queued replies would take minutes
    assert sorted(answers) == [0, 1, 2]
    for response in answers.values():
        assert response.status_code == 503 and response.json()["error"]["code"] == "server_stopped"


def test_the_uvicorn_allowed_lets_a_stopping_server_say_so():
    """uvicorn 0.43 and 0.44 sent ``http.disconnect`` to requests in flight on shutdown (their #2829, reverted in
    0.45 by #2913): with them the test above fails, Ctrl+C cutting the stream without its ``server_stopped`` event
    (measured with 0.44.0). pyproject.toml allows neither, and allows the uvicorn installed here."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from importlib.metadata import version

    from packaging.requirements import Requirement

    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    uvicorn = next(Requirement(line) for line in declared if Requirement(line).name == "uvicorn")
    assert not any(uvicorn.specifier.contains(bad) for bad in ("0.43.0", "0.44.0", "0.44.1"))
    assert uvicorn.specifier.contains(version("uvicorn"))


def test_a_keyless_server_answers_this_computer_only_and_no_web_page(client, server):
    """Without a key the server is this computer's: a request naming another host (DNS rebinding) or sent by a
    web page elsewhere (a form-like POST needs no CORS preflight) gets a 403; local programs and pages are served."""
    body = json.dumps({"messages": QUESTION, "max_tokens": 2, "temperature": 0})
    url = f"{server.url}/chat/completions"
    plain = {"Content-Type": "text/plain"}  # what a page's fetch() may send without a preflight
    for headers in ({"Host": "evil.example.com"}, {"Host": f"attacker.example:{server.base.rsplit(':', 1)[1]}"},
                    {**plain, "Origin": "http://evil.example.com"}, {**plain, "Origin": "null"}):
        response = httpx.post(url, content=body, headers=headers, timeout=60)
        assert response.status_code == 403, (headers, response.text)
        assert response.json()["error"]["type"] == "permission_error"
    for headers in ({}, {"Host": "localhost"}, {"Origin": "http://localhost:3000"}, {"Origin": "http://127.0.0.1"}):
        assert httpx.post(url, content=body, headers=headers, timeout=60).status_code == 200, headers
    assert httpx.get(f"{server.base}/health", headers={"Host": "evil.example.com"}).status_code == 403


def test_an_n_ctx_past_the_models_length_is_refused_at_start(data_dir, int4_dir):
    result = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", "0", "--n-ctx", "100000"], cwd=REPO,
        capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --n-ctx must be in [16, 8192], got 100000: SmolLM2-135M-Instruct-int4 reads at most 8192 tokens")
    assert "loading" not in result.stderr  # refused before the model loads


def test_bad_completion_requests_and_an_oversized_body(server):
    for body, param in [({"prompt": ""}, "prompt"), ({"prompt": ["a", ""]}, "prompt[1]"), ({"prompt": "a", "suffix": "b"}, "suffix"),
                        ({"prompt": 3}, "prompt"), ({}, "prompt"), ({"prompt": "a", "logprobs": 21}, "logprobs")]:
        response = httpx.post(f"{server.url}/completions", json=body, timeout=60)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
    huge = json.dumps(_chat(messages=[{"role": "user", "content": "x" * (5 << 20)}]))
    response = httpx.post(f"{server.url}/chat/completions", content=huge, timeout=60)
    assert response.status_code == 413 and "4194304 bytes" in response.json()["error"]["message"]
    assert httpx.get(f"{server.base}/health").json()["status"] == "ok"  # still serving


@pytest.mark.serial  # a wall-time bound
def test_the_api_key_guards_every_endpoint_but_health(data_dir, int4_dir):
    with ServerProcess(["--api-key", "s3cret"]) as keyed:
        for key in (None, "wrong"):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            for method, path in [("GET", "/models"), ("POST", "/chat/completions"), ("POST", "/completions")]:
                response = httpx.request(method, f"{keyed.url}{path}", headers=headers, json=_chat())
                assert response.status_code == 401, (key, path)
                assert response.json()["error"]["type"] == "authentication_error"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=keyed.url, api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=keyed.url, api_key="s3cret", max_retries=0)
        assert good.chat.completions.create(model="any", messages=QUESTION, max_tokens=2).choices[0].message.content
        assert httpx.get(f"{keyed.base}/health").status_code == 200
        named = {"Authorization": "Bearer s3cret", "Host": "gpu-box.lan:8000", "Origin": "http://gpu-box.lan"}
        assert httpx.get(f"{keyed.url}/models", headers=named).status_code == 200  # reached by name: the key guards it
        long = good.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "Count from 1 to 1000."}], max_tokens=2000, stream=True
        )
        next(iter(long))
        started = time.monotonic()
        status = keyed.stop()  # Ctrl+C while a reply streams: it is cancelled, the server ends at once
        stopped_s = time.monotonic() - started
        long.close()
    assert status in (0, 130) and stopped_s < 10
    assert not any("Traceback" in line for line in keyed.stderr_lines), "".join(keyed.stderr_lines)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_a_non_loopback_bind_without_a_key_is_refused(host, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(tmp_path), "serve", "--host", host], cwd=REPO,
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 2
    assert f"--host {host}" in result.stderr and "--api-key" in result.stderr and "Traceback" not in result.stderr


def test_a_port_in_use_is_one_line_before_any_model_loads(tmp_path):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "app", "--data-dir", str(tmp_path), "serve", "--port", str(port)], cwd=REPO,
            capture_output=True, text=True, timeout=120,
        )
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "models").exists()


@pytest.mark.parametrize("flags, message", [
    (["--threads", "0"], "--threads must be in"),
    (["--n-ctx", "8"], "--n-ctx must be >= 16"),
    (["--max-queue", "-1"], "--max-queue must be >= 0"),
    (["--port", "70000"], "--port must be in [0, 65535]"),
    (["--api-key", " "], "the API key is empty"),
    (["--min-p", "2"], "--min-p must be in [0, 1] (0 = disabled), got 2.0"),
    (["--repeat-penalty", "0"], "--repeat-penalty must be in (0, 10]"),
    (["--temperature", "-1"], "--temperature must be in [0, 2]"),
])
def test_bad_serve_flags_are_one_line_exit_2(flags, message, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(tmp_path), "serve", *flags], cwd=REPO,
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "models").exists()
