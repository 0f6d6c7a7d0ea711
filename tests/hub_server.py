"""A tiny Hugging Face hub on 127.0.0.1 for offline download tests.

Serves repositories from local folders in the hub's HTTP layout, as huggingface_hub 1.x calls it:

- ``GET /api/models/{org}/{name}/revision/{rev}[?blobs=true]``: JSON ``{"id", "sha", "siblings": [{"rfilename",
  "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}]}`` (files of 10 kB or more are "LFS" files);
- ``HEAD``/``GET /{org}/{name}/resolve/{rev}/{path}``: the file, with ``ETag``, ``X-Repo-Commit``,
  ``Content-Length``, ``Accept-Ranges`` and ``Range`` support (206 + ``Content-Range``).

A hostile hub for tests: ``server.commit`` may be any string (e.g. ``"0/../../victim"``), and
``server.aliases[name] = path`` lists the file ``path`` under the name ``name`` as well (e.g. ``"../../x.gguf"``,
``"..\\x.json"``), and serves it under that name.

Faults for tests: ``server.cut[path] = n`` sends the first ``n`` bytes of the next GET of ``path`` (after its
Range start) and then closes the connection; ``server.corrupt.add(path)`` flips one byte of that file in every
response; ``server.throttle_s`` sleeps between 64 kB chunks. ``server.requests`` records ``(method, path,
range header)`` and ``server.bytes_sent[path]`` counts body bytes.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

LFS_THRESHOLD = 10_000


class HubServer:
    """Context manager: ``with HubServer({"org/name": folder}) as hub: hub.url``."""

    def __init__(self, repos: dict[str, Path], commit: str = "0123456789abcdef0123456789abcdef01234567") -> None:
        self.repos = {repo: Path(folder) for repo, folder in repos.items()}
        self.commit = commit
        self.aliases: dict[str, str] = {}
        self.cut: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.throttle_s = 0.0
        self.requests: list[tuple[str, str, str | None]] = []
        self.bytes_sent: dict[str, int] = {}
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    def __enter__(self) -> HubServer:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub._handle(self, body=True)

            def do_HEAD(self) -> None:
                hub._handle(self, body=False)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    # --- content -----------------------------------------------------------------------------------

    def files(self, repo: str) -> dict[str, Path]:
        root = self.repos[repo]
        files = {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}
        return {**files, **{alias: files[real] for alias, real in self.aliases.items() if real in files}}

    def content(self, repo: str, path: str) -> bytes:
        data = bytearray(self.files(repo)[path].read_bytes())
        if path in self.corrupt and data:
            data[len(data) // 2] ^= 0xFF
        return bytes(data)

    def siblings(self, repo: str) -> list[dict]:
        out = []
        for rel, file in self.files(repo).items():
            data = file.read_bytes()
            entry = {"rfilename": rel, "size": len(data), "blobId": _git_blob_id(data)}
            if len(data) >= LFS_THRESHOLD:
                entry["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                entry["blobId"] = hashlib.sha1(b"pointer " + rel.encode()).hexdigest()  # noqa: S324
            out.append(entry)
        return out

    # --- HTTP --------------------------------------------------------------------------------------

    def _handle(self, handler: http.server.BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(handler.path).path)
        with self._lock:
            self.requests.append((handler.command, path, handler.headers.get("Range")))
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?", path)
        if match:
            repo = match.group(1)
            if repo not in self.repos:
                return self._send(handler, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, body)
            info = {"id": repo, "modelId": repo, "sha": self.commit, "siblings": self.siblings(repo), "private": False}
            return self._send(handler, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/(.+)", path)
        # the revision may hold slashes (a hostile commit id): the file is the longest known name the path ends with
        names = [n for n in self.files(match.group(1)) if match.group(2).endswith("/" + n)] if match and match.group(1) in self.repos else []
        if not names:
            return self._send(handler, 404, b"not found", {"X-Error-Code": "EntryNotFound"}, body)
        repo, rel = match.group(1), max(names, key=len)
        data = self.content(repo, rel)
        original = self.files(repo)[rel].read_bytes()
        etag = hashlib.sha256(original).hexdigest() if len(original) >= LFS_THRESHOLD else _git_blob_id(original)
        headers = {"ETag": f'"{etag}"', "X-Repo-Commit": self.commit, "Accept-Ranges": "bytes"}
        start = 0
        status = 200
        range_header = handler.headers.get("Range")
        if range_header:
            m = re.fullmatch(r"bytes=(\d+)-", range_header.strip())
            if m:
                start = int(m.group(1))
                if start >= len(data):
                    headers["Content-Range"] = f"bytes */{len(data)}"
                    return self._send(handler, 416, b"", headers, body)
                status = 206
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        payload = data[start:]
        limit = self.cut.pop(rel, None) if body else None
        self._send(handler, status, payload, headers, body, limit=limit, name=rel)

    def _send(self, handler, status: int, payload: bytes, headers: dict, body: bool, limit: int | None = None, name: str | None = None) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(payload)))
        if limit is not None:
            handler.send_header("Connection", "close")
        handler.end_headers()
        if not body:
            return
        to_send = payload if limit is None else payload[:limit]
        view = memoryview(to_send)
        try:
            for offset in range(0, len(view), 65536):
                handler.wfile.write(view[offset : offset + 65536])
                if name is not None:
                    with self._lock:
                        self.bytes_sent[name] = self.bytes_sent.get(name, 0) + len(view[offset : offset + 65536])
                if self.throttle_s:
                    time.sleep(self.throttle_s)
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
            return
        if limit is not None:
            handler.close_connection = True


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()  # noqa: S324
