"""``specchat serve`` in a subprocess on 127.0.0.1 (a free port), for the server tests and the benchmark."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
URL = re.compile(r"serving \S+ at (http://\S+/v1)")


class ServerProcess:
    """A running ``specchat serve``: ``url`` (``http://127.0.0.1:PORT/v1``), ``process``; its stderr is kept in
    ``stderr_lines``. Use as a context manager, or call :meth:`stop`.

    Args:
        args: extra ``serve`` arguments (``--port 0`` is added).
        env: extra environment variables.
        timeout_s: how long the model may take to load.

    Raises:
        RuntimeError: the server exited or printed no URL in time (its stderr is in the message).
    """

    def __init__(self, args: list[str] = (), env: dict | None = None, timeout_s: float = 240):
        command = [sys.executable, "-m", "app", "serve", "--port", "0", *args]
        environment = {**os.environ, **(env or {})}
        if environment.pop("SPECCHAT_TEST_ONE_CPU_ISA_CAP", None):  # the cap of a worker left one CPU (conftest):
            environment.pop("ONEDNN_MAX_CPU_ISA", None)  # the server runs on every CPU, with AMX as users do
        self.process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
        )
        # An xdist worker is pinned to its share of the CPUs (tests/conftest.py); the server it starts may use them all
        # (set before the child starts its threads: it is still starting Python). Measured, quiet, 2 cores: four
        # server test files under -n 2 in 96 s with the servers unpinned, 109 s pinned, 121 s in one process.
        os.sched_setaffinity(self.process.pid, range(os.cpu_count()))
        self.stderr_lines: list[str] = []
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.url = self._wait_for_url(timeout_s)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self.stderr_lines.append(line)

    def _wait_for_url(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        lines = []
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            lines.append(line)
            match = URL.search(line)
            if match:
                return match.group(1)
        self.stop()
        raise RuntimeError(f"specchat serve did not start: {''.join(lines)}{''.join(self.stderr_lines)}")

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT`` (without ``/v1``)."""
        return self.url.removesuffix("/v1")

    def status(self, field: str) -> int:
        """A number of /proc/PID/status (``VmRSS`` in kB, ``Threads``) of the server process (Linux)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise KeyError(field)

    def stop(self, timeout_s: float = 30) -> int:
        """Ctrl+C (SIGINT) and wait; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *_) -> None:
        self.stop()
