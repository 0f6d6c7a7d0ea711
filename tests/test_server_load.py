"""``specchat serve`` under load: 400 sequential requests, then 8 concurrent clients x 25 requests, short replies;
no errors, no lost replies, resident memory flat once OpenVINO has compiled the shapes the requests use, no threads
left behind (read from /proc/PID/status).

The server runs with ``--n-ctx 256``: the KV cache masks the slots of replaced turns and squeezes them out only
when its physical length would pass n_ctx + 64 (``inference.kv_cache``), so its memory grows by design up to
that bound (with the default n_ctx 4096, ~190 MB over the first ~200 such requests, measured: RSS 562 -> 714 MB
after 150 requests with the engine alone, no server). A small n_ctx reaches the bound within the first requests,
so what the test measures afterwards is what the server would leak.

Auto decoding (the server's default) verifies drafts in passes of 2 and 3 tokens as well as 1, at every cache length,
and OpenVINO's CPU plugin keeps what it compiles per input shape in two LRU caches of bounded entries (its runtime
cache, and oneDNN's primitive cache), so memory grows until the shapes these requests reach have all been seen, then
stays flat (measured with this test's requests on 2 cores, 2026-12-05: RSS 671 MB after the first request, 1,053
after 100, 1,185 after 200, 1,279 after 300, 1,301 after 400; in one process without the server, Auto 631 -> 1,152
-> 1,159 MB at 0, 300 and 400 requests, plain decoding 610 -> 655 MB; with CPU_RUNTIME_CACHE_CAPACITY 0 and
ONEDNN_PRIMITIVE_CACHE_CAPACITY 0, Auto stayed at 688-693 MB from request 50 to 100). The flatness is therefore
measured between requests 250-300 and 350-400 (a leak of 0.7 MB a request still fails it).

Then three rounds of 8 concurrent clients x 25 requests. The first round costs memory once (RSS after it over the
sequential plateau, measured: +2% on the Xeon, 481 -> 491 MB, then flat over 400 more sequential requests; +2.5%
there under ``ONEDNN_MAX_CPU_ISA=AVX2``; +10% on a CI machine, 563 -> 622 MB). Not pinned down: the thread count is
unchanged and the shape caches are bounded; eight requests alive at once (bodies, connections, streams) interleave
their allocations with the engine's, which a heap does not give back. It is bounded by ``CONCURRENCY_ONCE``. On a
loaded machine that one-time cost does not all land in the first round: in a full ``make test`` on the AMD EPYC Zen 4
the second round grew 8% (576 -> 622 MB), and with two busy processes beside the server the rounds went 521, 547,
548, 550, 548, 562 MB (+5%, +0.2%, +0.3%, -0.3%, +2.6%; 2026-12-07). A leak grows every round by the same amount; a
one-time cost grows one round and leaves the next flat. So of the two growths between consecutive rounds, the
smaller must stay within 5% (0.15 MB a request, 30 MB a round, fails it)."""

from __future__ import annotations

import threading
from itertools import pairwise
from statistics import mean

import openai
import pytest
from server_process import ServerProcess

pytestmark = pytest.mark.slow

SEQUENTIAL = 400
#: Requests after which the shape caches are full (see above): the baseline of the flatness check starts there.
SHAPES_SEEN = 250
CLIENTS, PER_CLIENT = 8, 25
#: Rounds of concurrent clients: a leak grows each of them, a one-time cost one (see above).
CONCURRENT_ROUNDS = 3
#: Bound on the one-time growth of the first concurrent round over the sequential plateau (see above).
CONCURRENCY_ONCE = 1.2


def ask(client: openai.OpenAI, index: int, stream: bool) -> str:
    messages = [{"role": "user", "content": f"Give me one word about the number {index}."}]
    if stream:
        chunks = client.chat.completions.create(model="any", messages=messages, max_tokens=4, temperature=0, stream=True)
        parts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
        assert chunks.response.is_closed
        return "".join(parts)
    return client.chat.completions.create(model="any", messages=messages, max_tokens=4, temperature=0).choices[0].message.content


def concurrent_round(url: str, first_number: int) -> tuple[list[str], list[str]]:
    """``CLIENTS`` threads, each with its own client, ask ``PER_CLIENT`` questions at once; returns the replies and
    the errors (reprs)."""
    replies, errors = [], []

    def run(client_index: int) -> None:
        own = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=300)
        for index in range(PER_CLIENT):
            try:
                replies.append(ask(own, first_number + client_index * 100 + index, stream=index % 2 == 1))
            except Exception as error:  # noqa: BLE001 - counted and shown
                errors.append(repr(error))

    workers = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(600)
    return replies, errors


def test_sequential_and_concurrent_load(data_dir, int4_dir):
    with ServerProcess(["--max-queue", str(CLIENTS), "--n-ctx", "256"]) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
        ask(client, -1, False)  # the first request's one-time costs are not part of the baseline
        threads = server.status("Threads")
        rss = []
        for index in range(SEQUENTIAL):
            assert ask(client, index, stream=index % 2 == 0)
            rss.append(server.status("VmRSS"))
        first, last = mean(rss[SHAPES_SEEN : SHAPES_SEEN + 50]), mean(rss[-50:])
        assert abs(last - first) <= 0.05 * first, f"resident memory went from {first:.0f} kB to {last:.0f} kB"
        assert server.status("Threads") == threads

        after_rounds = []
        for round_index in range(CONCURRENT_ROUNDS):
            replies, errors = concurrent_round(server.url, first_number=1000 * (round_index + 1))
            assert errors == []
            assert len(replies) == CLIENTS * PER_CLIENT and all(replies)
            assert server.status("Threads") == threads
            after_rounds.append(server.status("VmRSS"))
        assert after_rounds[0] <= CONCURRENCY_ONCE * last, (
            f"resident memory grew to {after_rounds[0]} kB in the first concurrent round (from {last:.0f})")
        growths = [after / before for before, after in pairwise(after_rounds)]
        assert min(growths) <= 1.05, f"resident memory grew in every concurrent round: {after_rounds} kB"
        assert server.stop() in (0, 130)
