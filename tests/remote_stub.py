"""A small OpenAI-compatible server on 127.0.0.1 for the remote-backend tests, with one base URL per behaviour.

``with RemoteStub() as stub: stub.url("ok")`` is ``http://127.0.0.1:PORT/ok/v1`` (``/v3`` is served too). Every base serves
``GET …/models`` (one model, :data:`MODEL`) and ``POST …/chat/completions``, streaming :data:`REPLY_PIECES` as
server-sent events (HTTP/1.1 chunked), then a finish reason, a usage chunk and ``[DONE]``; a model other than
:data:`MODEL` gets 404. The behaviours:

- ``ok``: as above; ``specchat``: as above, its models and last chunk carry the ``specchat`` extension
  (:data:`SPECCHAT_STATS`, or with :data:`AR_STATS` when the request asks for mode ``ar``), and for a speculative
  mode each piece says ``from_draft`` (the odd ones) and pieces 3 and 7 end a decode step of 4 drafts, 3 accepted
  (as ``specchat serve`` streams); ``specchat-unnamed``: as ``specchat``, its statistics naming no mode and no
  drafter (a server that does not say how it decoded);
- ``auth``: 401 unless ``Authorization: Bearer`` :data:`API_KEY`;
- ``busy``: 429 with ``Retry-After: 7``; ``broken``: 500 with an OpenAI error body;
- ``cut``: the first :data:`CUT_AFTER` pieces, then the connection closes mid-body (no terminating chunk);
- ``silent``: the first :data:`CUT_AFTER` pieces, then nothing until the server closes (its model list: nothing);
- ``stopping``: the first :data:`CUT_AFTER` pieces, then the error event ``specchat serve`` sends in place of the
  reply's end when it is stopped (Ctrl+C) mid-reply (``server_stopped``); ``stopped``: the 503 (``server_stopped``)
  it answers a request to generate still queued when it is stopped (its model list as ``ok``'s);
- ``any-name``: any model name is answered, by :data:`SERVED_MODEL`, which each chunk names (as llama-server does);
- ``length``: as ``ok``, its finish reason ``length`` (the reply stopped at ``max_tokens``);
- ``empty``: as ``ok``, its model list empty (a server with no model loaded);
- ``too-long``: a chat longer than its context, as llama-cpp-python's ``llama_cpp.server`` (0.3.36) answers one: a
  streamed request gets 200 and an event stream with no event at all, a request without streaming the 400 of
  :data:`TOO_LONG_BODY`.

``stub.requests`` records ``(path, JSON body or None, Authorization header)``.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time

from app.server.errors import server_stopped

MODEL = "stub-model"
SERVED_MODEL = "stub-served-model"
API_KEY = "stub-key"
REPLY_PIECES = ["Hello", " from", " the", " stub", ":", " one", " two", " three", "."]
REPLY = "".join(REPLY_PIECES)
CUT_AFTER = 4
PIECE_DELAY_S = 0.01
SPECCHAT_STATS = {
    "ttft_ms": 12.5, "tokens_per_s": 99.0, "acceptance_rate": 0.75, "drafted": 8, "accepted": 6,
    "discarded_tokens": 3, "rolls": 1, "prefilled_tokens": 5, "mode": "spec", "drafter": "lookup",
}  # fmt: skip
#: What the ``specchat`` extension says instead when the request asked for autoregressive decoding.
AR_STATS = {"mode": "ar", "drafter": None, "drafted": 0, "accepted": 0, "acceptance_rate": None}
#: The bases that answer as a SpecChat server does (its models offer modes, its replies carry its statistics).
SPECCHAT_BASES = ("specchat", "specchat-unnamed")
BEHAVIOURS = ("ok", *SPECCHAT_BASES, "auth", "busy", "broken", "cut", "silent", "stopping", "stopped", "any-name",
              "length", "empty", "too-long")
#: What ``llama_cpp.server`` (llama-cpp-python 0.3.36, ``--n_ctx 512``) answers a chat of 1734 prompt tokens without
#: streaming: ``HTTP/1.1 400 Bad Request``, ``content-type: application/json``, this body byte for byte. Streamed, the
#: same request got ``HTTP/1.1 200 OK``, ``content-type: text/event-stream; charset=utf-8``, ``Transfer-Encoding:
#: chunked`` and the body ``0\r\n\r\n``: no event (its log: ``ValueError: Requested tokens (1734) exceed context
#: window of 512``, raised in the stream's generator).
TOO_LONG_BODY = (
    b'{"error":{"message":"This model\'s maximum context length is 512 tokens. However, you requested 1742 tokens '
    b'(1734 in the messages, 8 in the completion). Please reduce the length of the messages or completion.",'
    b'"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}'
)


class RemoteStub:
    """Context manager: the stub server in a thread (see the module doc)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict | None, str | None]] = []
        self._closing = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None

    def url(self, behaviour: str, version: str = "v1") -> str:
        """The base URL of one behaviour (``version`` v3: as OpenVINO Model Server names its API)."""
        assert behaviour in BEHAVIOURS, behaviour
        return f"http://127.0.0.1:{self._server.server_address[1]}/{behaviour}/{version}"

    def __enter__(self) -> RemoteStub:
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _route(self) -> tuple[str, str]:
                parts = self.path.partition("?")[0].strip("/").split("/", 2)  # (a base URL's query is kept)
                if len(parts) != 3 or parts[0] not in BEHAVIOURS or parts[1] not in ("v1", "v3"):
                    return "", ""
                return parts[0], parts[2]

            def _json(self, status: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _refusal(self, behaviour: str) -> bool:
                if behaviour == "auth" and self.headers.get("Authorization") != f"Bearer {API_KEY}":
                    self._json(401, {"error": {"message": "Invalid API key", "type": "invalid_request_error"}})
                elif behaviour == "busy":
                    self._json(429, {"error": {"message": "queue full"}}, {"Retry-After": "7"})
                elif behaviour == "broken":
                    self._json(500, {"error": {"message": "engine crashed", "type": "server_error"}})
                else:
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                behaviour, route = self._route()
                stub.requests.append((self.path, None, self.headers.get("Authorization")))
                if route != "models":
                    return self._json(404, {"error": {"message": f"no route {self.path}"}})
                if self._refusal(behaviour):
                    return
                if behaviour == "silent":  # no answer until the server closes
                    stub._closing.wait(60)
                    return
                entry = {"id": MODEL, "object": "model", "owned_by": "stub"}
                if behaviour in SPECCHAT_BASES:
                    entry = {**entry, "owned_by": "specchat", "specchat": {"modes": ["ar", "spec_lookup"]}}
                self._json(200, {"object": "list", "data": [] if behaviour == "empty" else [entry]})

            def do_POST(self) -> None:  # noqa: N802
                behaviour, route = self._route()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
                stub.requests.append((self.path, body, self.headers.get("Authorization")))
                if route != "chat/completions":
                    return self._json(404, {"error": {"message": f"no route {self.path}"}})
                if self._refusal(behaviour):
                    return
                if behaviour == "stopped":  # (its model list is served: the server answers it while it stops)
                    refusal = server_stopped(began=False)
                    return self._json(refusal.status, refusal.body())
                if behaviour == "too-long":
                    return self._too_long(body.get("stream") is True)
                if body.get("model") != MODEL and behaviour != "any-name":
                    return self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                pieces = REPLY_PIECES[:CUT_AFTER] if behaviour in ("cut", "silent", "stopping") else REPLY_PIECES
                for index, piece in enumerate(pieces):
                    chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                    spec = behaviour in SPECCHAT_BASES and (body.get("specchat") or {}).get("mode", "ar") != "ar"
                    if spec:  # odd pieces "came from accepted drafts"; a step of 4 drafts ends at pieces 3 and 7
                        chunk["specchat"] = {"from_draft": index % 2 == 1}
                        if index in (3, 7):
                            chunk["specchat"]["steps"] = [{"drafted": 4, "accepted": 3, "emitted": 4, "k": 4}]
                    self._event(chunk)
                    time.sleep(PIECE_DELAY_S)
                if behaviour == "cut":
                    self.wfile.flush()
                    self.close_connection = True
                    return  # no terminating chunk: the body is incomplete
                if behaviour == "stopping":
                    self._event(server_stopped().body())
                    self._chunk(b"")
                    return
                if behaviour == "silent":
                    stub._closing.wait(60)
                    self.close_connection = True
                    return
                finish = "length" if behaviour == "length" else "stop"
                self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
                last = {
                    "choices": [],
                    "usage": {"prompt_tokens": 21, "completion_tokens": len(pieces), "total_tokens": 21 + len(pieces),
                              "prompt_tokens_details": {"cached_tokens": 16}},
                }
                if behaviour in SPECCHAT_BASES:
                    mode = (body.get("specchat") or {}).get("mode", "ar")
                    stats = SPECCHAT_STATS if mode != "ar" else {**SPECCHAT_STATS, **AR_STATS}
                    if behaviour == "specchat-unnamed":
                        stats = {key: value for key, value in stats.items() if key not in ("mode", "drafter")}
                    last["specchat"] = stats
                self._event(last)
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _too_long(self, streamed: bool) -> None:
                if not streamed:
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(TOO_LONG_BODY)))
                    self.end_headers()
                    self.wfile.write(TOO_LONG_BODY)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self._chunk(b"")  # the body ends at once: no event

            def _event(self, chunk: dict) -> None:
                named = {"model": SERVED_MODEL} if self._route()[0] == "any-name" else {}
                self._chunk(f"data: {json.dumps({'object': 'chat.completion.chunk', **named, **chunk})}\n\n".encode())

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

        self._server = _serve(Handler, http.server.ThreadingHTTPServer)
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()


class ScriptedServer:
    """A server on 127.0.0.1 that answers every request with the bytes its script gives, to play a hostile or
    broken OpenAI server: ``with ScriptedServer(script) as server: server.url`` (``http://127.0.0.1:PORT/v1``).

    Args:
        script: ``script(method, path)`` returns ``(status, headers, body)``; ``body`` is bytes, or an iterable of
            byte strings sent as chunks (``Transfer-Encoding: chunked``) until it ends or the client leaves.
    """

    def __init__(self, script) -> None:
        self.script = script
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedServer:
        script = self.script

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, headers, body = script(self.command, self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for data in body:
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: what is being tested
                    self.close_connection = True

            do_GET = do_POST = _answer

        self._server = _serve(Handler, _QuietServer)
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client that leaves mid-answer is what these tests make happen: no traceback for it on stderr."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _serve(handler: type, server_class: type) -> http.server.ThreadingHTTPServer:
    """``handler`` served on 127.0.0.1 (a free port) from a daemon thread."""
    server = server_class(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
