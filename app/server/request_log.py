"""The server's request log: one line per request, so that an operator can see who is served and who waits.

Each line holds the time (UTC), method, route, status, prompt tokens in and reply tokens out, the wait for its turn,
time to first token (from its turn), total time, the client's address and the queue position a request waited at
(or would have: a 429's); why a stream whose 200 went out was cut (``cut=server_stopped``: its status cannot say
it); the prompt's text only when asked (``specchat serve --log-prompts``), as prompts are the
users' own. A health check answered 200 (``GET`` or ``HEAD``, ``/health`` or ``/v1/health``) writes no line
(monitors poll it every few seconds). :class:`RequestLogMiddleware` (ASGI) times each request and takes its status;
a generation route adds its tokens, TTFT and queue position to the request's :class:`RequestRecord`
(:func:`record_of`). Lines go to the ``app.server.requests`` logger at INFO: the process's log file in the log folder
(``app.logging_setup``), and stderr where ``specchat serve`` adds it (:func:`log_to_stderr`).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from inference.events import GenerationStats

#: The logger of the request lines.
logger = logging.getLogger("app.server.requests")
#: Where a request's record travels in its ASGI scope.
SCOPE_KEY = "specchat.request_log"
#: The health check's paths (``app.create_app`` serves both, as llama-server does); a 200 there is not logged.
HEALTH_ROUTES = ("/health", "/v1/health")
#: Most characters of a prompt written into a line (``--log-prompts``); longer ones are cut with "…".
MAX_PROMPT_CHARS = 2000


@dataclass
class RequestRecord:
    """What one request's log line says. ``status`` 0 until the response starts; ``tokens_in``, ``tokens_out``,
    ``ttft_ms`` None for requests that generate nothing; ``wait_ms`` the time from its arrival to its turn (body
    read, schemas compiled, queue), None without one; ``queued_at`` the queue position it waited at (1 = next), 0 when
    it never waited; ``cut`` the code of the error event that ended a stream in place of its ending (the server
    stopping, an engine error), None when none did; ``prompt`` its text, kept only with ``--log-prompts``. Times
    from ``time.monotonic`` (s). A completion of several prompts has one line: its tokens summed over its prompts
    (``done_in``, ``done_out``: those of the prompts whose replies finished), its wait and TTFT those of its first
    turn and reply."""

    method: str
    route: str
    client: str
    started: float
    status: int = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    ttft_ms: float | None = None
    wait_ms: float | None = None
    queued_at: int = 0
    cut: str | None = None
    prompt: str | None = None
    done_in: int = 0
    done_out: int = 0

    def turn(self) -> None:
        """The request's turn came (its generation starts now); a later prompt's turn leaves the wait as it was."""
        if self.wait_ms is None:
            self.wait_ms = (time.monotonic() - self.started) * 1000

    def reading(self, prompt_tokens: int) -> None:
        """The prompt, of ``prompt_tokens`` tokens, is being read (logged even if the reply never ends)."""
        self.tokens_in = self.done_in + prompt_tokens

    def first_token(self) -> None:
        """The reply's first token came: its TTFT from the turn as the server saw it, logged for a reply cut before
        its end (a finished reply's engine-measured TTFT replaces it, :meth:`generated`)."""
        self.ttft_ms = (time.monotonic() - self.started) * 1000 - (self.wait_ms or 0.0)

    def generated(self, stats: GenerationStats) -> None:
        """Take a finished reply's tokens, and its TTFT if it is the request's first reply."""
        if not (self.done_in or self.done_out):
            self.ttft_ms = stats.ttft_ms
        self.tokens_in, self.tokens_out = self.done_in + stats.prompt_tokens, self.done_out + stats.new_tokens
        self.done_in, self.done_out = self.tokens_in, self.tokens_out

    def stopped_at(self, generated: int) -> None:
        """The reply in progress stopped (its client left) after ``generated`` tokens."""
        self.tokens_out = self.done_out + generated

    def line(self, now: float) -> str:
        """The log line at monotonic time ``now``: ``2026-12-05T04:40:00.123Z POST /v1/chat/completions 200 in=12
        out=30 wait_ms=3 ttft_ms=45 total_ms=820 client=127.0.0.1:5000 queued=0`` (``-`` for what a request did not
        have; ``cut=server_stopped`` for a stream cut; and ``prompt="..."``, JSON-quoted, with ``--log-prompts``)."""
        stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")

        def number(value: float | None) -> str:
            return "-" if value is None else str(round(value))

        fields = [stamp, self.method, self.route, str(self.status), f"in={number(self.tokens_in)}",
                  f"out={number(self.tokens_out)}", f"wait_ms={number(self.wait_ms)}", f"ttft_ms={number(self.ttft_ms)}",
                  f"total_ms={round((now - self.started) * 1000)}", f"client={self.client}", f"queued={self.queued_at}"]
        if self.cut is not None:
            fields.append(f"cut={self.cut}")
        if self.prompt is not None:
            text = self.prompt if len(self.prompt) <= MAX_PROMPT_CHARS else self.prompt[:MAX_PROMPT_CHARS] + "…"
            fields.append(f"prompt={json.dumps(text, ensure_ascii=False)}")
        return " ".join(fields)


class RequestLogMiddleware:
    """ASGI middleware: a :class:`RequestRecord` per HTTP request (in ``scope[SCOPE_KEY]``), written as one line
    when the response has ended (a streamed one: its last byte sent, or its client gone).

    Args:
        app: the application; log_prompts: keep prompts' text in the lines (``--log-prompts``).
    """

    def __init__(self, app, log_prompts: bool = False):
        self.app, self.log_prompts = app, log_prompts

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host, port = scope.get("client") or ("-", 0)
        record = RequestRecord(scope["method"], scope["path"], f"{host}:{port}", time.monotonic())
        scope[SCOPE_KEY] = record
        scope["specchat.log_prompts"] = self.log_prompts

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            record.status = record.status or 500  # an unexpected error: Starlette's outer handler answers 500
            raise
        finally:
            if not (record.status == 200 and record.method in ("GET", "HEAD") and record.route in HEALTH_ROUTES):
                logger.info("%s", record.line(time.monotonic()))


def record_of(scope: dict) -> RequestRecord | None:
    """The record of the request of ``scope`` (None without the middleware)."""
    return scope.get(SCOPE_KEY)


def keep_prompt(scope: dict, prompt: str) -> None:
    """Put ``prompt`` (the request's last message, or a completion's prompt) in its line when ``--log-prompts``
    asked for prompts; otherwise do nothing."""
    record = record_of(scope)
    if record is not None and scope.get("specchat.log_prompts"):
        record.prompt = prompt


def log_to_stderr() -> logging.Handler:
    """Also write the request lines to stderr (``specchat serve``), as they are, one per line; returns the handler
    (remove it from :data:`logger` to stop)."""
    for old in [handler for handler in logger.handlers if getattr(handler, "specchat_stderr", False)]:
        logger.removeHandler(old)  # a second server in the same process: one line each, not two
    handler = logging.StreamHandler(sys.stderr)
    handler.specchat_stderr = True
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.setLevel(logging.INFO)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return handler
