"""Serving an ASGI app from inside another program: uvicorn in its own thread, and a backend that hands each
generation to the loop that owns the inference worker.

The window runs a qasync loop on the GUI thread, and :class:`~app.backends.worker.InferenceWorker`'s coroutines
must be used from that loop. A server started from the window therefore runs elsewhere:

* **Its own thread and loop.** :class:`ServerThread` binds the listening socket itself (so a port in use is an
  ``OSError`` the caller can show, not uvicorn's ``sys.exit``), then runs ``uvicorn.Server.serve`` with
  ``asyncio.run`` in a daemon thread. :meth:`ServerThread.start` returns once uvicorn's startup is over
  (``Server.started``); :meth:`ServerThread.stop` sets ``should_exit`` and joins the thread (open streams get
  ``GRACEFUL_SHUTDOWN_SECONDS``, then their tasks are cancelled). Both block: call them off the GUI thread
  (``app.background.run_in`` with a ``DaemonThreadExecutor``).
* **One engine, taking turns.** :class:`WorkerOnLoop` has the worker's ``generate(request, cancel)``; called on
  the server's loop, it runs ``InferenceWorker.generate`` on the worker's loop (``run_coroutine_threadsafe``)
  and hands each batch back with ``call_soon_threadsafe`` onto an ``asyncio.Queue`` of the server's loop (no
  polling). The worker runs jobs in order, so the window's replies and the server's requests take turns on the
  one inference thread, and a model the window reloads serves the next request.
* **An app that can be replaced.** :class:`SwitchableApp` passes each connection to its ``current`` app, so the
  app built for the model loaded now (its model id, its limits) replaces the previous one without a restart.
* **Cancellation both ways.** A server task that is cancelled or leaves the stream early (a client that
  disconnects) sets ``cancel`` and cancels the coroutine on the worker's loop; a generation the window cancels
  (``InferenceWorker.cancel_all``, closing) ends the stream with its ``Finished`` event as usual, and so do the
  server's own when it is switched off (:meth:`WorkerOnLoop.cancel_all`).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import uvicorn

from inference.events import Event

from ..background import call_soon
from ..binding import ListenError, listen, url_of
from .protocol import GenerationRequest
from .worker import InferenceWorker

#: Seconds open connections get to finish when the server stops, before their tasks are cancelled.
GRACEFUL_SHUTDOWN_SECONDS = 2.0
#: Seconds :meth:`ServerThread.start` waits for uvicorn's startup (the app's lifespan included).
STARTUP_TIMEOUT_SECONDS = 30.0

_END = object()


class ServerStartError(RuntimeError):
    """The server could not start; the message says why and what to do (e.g. the port is in use)."""


class WorkerOnLoop:
    """A reply source (``app.backends.protocol.ReplySource``) for a server whose loop is not the worker's: ``generate`` is
    :meth:`InferenceWorker.generate`, run on ``loop`` and streamed back to the caller's loop.

    Args:
        worker: the inference worker; loop: the loop its coroutines must run on (the window's GUI loop).
    """

    def __init__(self, worker: InferenceWorker, loop: asyncio.AbstractEventLoop):
        self.worker = worker
        self.loop = loop
        self._cancels: set[threading.Event] = set()  # the replies generating for this server
        self._lock = threading.Lock()  # (generate runs on the server's thread, cancel_all on another)

    def cancel_all(self) -> None:
        """Stop the replies this server generates (it is stopping), the window's own going on: each ends with its
        ``Finished`` (stop reason ``cancelled``), which the server's app sends as its ``server_stopped`` error
        (a trial's stream, switched off, was cut mid-chunk instead, once the graceful shutdown ran out)."""
        with self._lock:
            cancels = list(self._cancels)
        for cancel in cancels:
            cancel.set()

    def describe_answer(self) -> str:
        """The worker's models (:meth:`InferenceWorker.describe_answer`)."""
        return self.worker.describe_answer()

    async def check_prompt(self, request: GenerationRequest) -> None:
        """:meth:`InferenceWorker.check_prompt`, run on ``loop`` (call it on any other loop).

        Raises:
            ValueError: as :meth:`InferenceWorker.check_prompt`.
        """
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.worker.check_prompt(request), self.loop))

    async def generate(self, request: GenerationRequest, cancel: threading.Event) -> AsyncIterator[list[Event]]:
        """Stream the events of one reply, in batches, as :meth:`InferenceWorker.generate` does (call it on any
        loop but ``loop``; it waits its turn behind the worker's other jobs).

        Set ``cancel``, cancel the task, or leave the ``async for`` early to stop the generation.

        Raises:
            ValueError, RuntimeError...: whatever :meth:`InferenceWorker.generate` raises.
            RuntimeError: the worker's loop cancelled the generation (the window is closing).
        """
        here = asyncio.get_running_loop()
        if here is self.loop:
            raise RuntimeError("WorkerOnLoop.generate runs on another loop than the worker's: use worker.generate")
        queue: asyncio.Queue = asyncio.Queue()

        async def pump() -> None:
            try:
                async with aclosing(self.worker.generate(request, cancel)) as batches:
                    async for events in batches:
                        call_soon(here, queue.put_nowait, events)
            except asyncio.CancelledError:
                call_soon(here, queue.put_nowait, RuntimeError("the generation was cancelled by the window"))
                raise
            except BaseException as error:  # noqa: BLE001 - handed to the server's loop
                call_soon(here, queue.put_nowait, error)
            else:
                call_soon(here, queue.put_nowait, _END)

        with self._lock:
            self._cancels.add(cancel)
        future = asyncio.run_coroutine_threadsafe(pump(), self.loop)
        ended = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    ended = True
                    return
                if isinstance(item, BaseException):
                    ended = True
                    raise item
                yield item
        finally:
            with self._lock:
                self._cancels.discard(cancel)
            if not ended:  # cancelled, or the consumer left early: stop the work on the worker's loop too
                cancel.set()
                future.cancel()


class SwitchableApp:
    """An ASGI app that hands each connection (and the lifespan) to ``current``, which may be replaced at any time:
    a request in progress ends on the app it began on, the next one goes to the new app.

    Args:
        current: the ASGI app to start with.
    """

    def __init__(self, current: Any):
        self.current = current

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        await self.current(scope, receive, send)


class ServerThread:
    """An ASGI app served by uvicorn on ``host:port`` from a daemon thread with its own asyncio loop.

    Args:
        app: the ASGI application (e.g. ``app.server.create_app(...)``).
        host: the address to bind (``127.0.0.1``: this computer only; ``0.0.0.0``: every interface).
        port: the TCP port (0: any free port; :attr:`port` then says which).

    Attributes:
        port: the port served on; url: the base URL clients use once started (``app.binding.url_of``:
            this computer's network address for ``0.0.0.0``), "" before.
    """

    def __init__(self, app: Any, host: str, port: int):
        self.host = host
        self.port = port
        self.url = ""
        self._config = uvicorn.Config(
            app,
            log_config=None,  # the application's logging stays as it is
            access_log=False,
            lifespan="auto",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        )
        self._server = _Server(self._config)
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._failure: BaseException | None = None

    @property
    def running(self) -> bool:
        """True from a successful :meth:`start` until :meth:`stop` (or the server's own end)."""
        return self._thread is not None and self._thread.is_alive() and self._server.started

    def start(self, timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
        """Bind ``host:port`` and serve; returns once the server accepts connections. Blocks: not on the GUI thread.

        Raises:
            ServerStartError: the port is in use, the address is not this computer's, the app's startup failed,
                or startup took longer than ``timeout`` seconds (the message says what to do).
        """
        if self._thread is not None:
            raise RuntimeError("a ServerThread starts once: make a new one")
        self._socket = listen_for_window(self.host, self.port)
        self.port = self._socket.getsockname()[1]
        self.url = url_of(self._socket)
        self._thread = threading.Thread(target=self._run, name=f"specchat-server-{self.port}", daemon=True)
        self._thread.start()
        if not self._server.startup_over.wait(timeout):
            self.stop()
            raise ServerStartError(f"the server on port {self.port} did not start within {timeout:.0f} s")
        if not self._server.started:
            self.stop()
            reason = self._failure or "unknown error"
            raise ServerStartError(f"the server on port {self.port} failed to start: {reason}")

    def stop(self, timeout: float = GRACEFUL_SHUTDOWN_SECONDS + 10.0) -> None:
        """Stop serving and free the port; returns when the server's thread has ended (or after ``timeout``
        seconds: the thread is a daemon). Blocks: not on the GUI thread. Stopping twice does nothing."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        if self._socket is not None:
            self._socket.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except BaseException as error:  # noqa: BLE001 - SystemExit from a failed lifespan startup, or a crash
            self._failure = error
        finally:
            self._server.startup_over.set()


class _Server(uvicorn.Server):
    """uvicorn's server, saying when its startup is over (``startup_over``, whether it succeeded or not)."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.startup_over = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.startup_over.set()


def listen_for_window(host: str, port: int) -> socket.socket:
    """``app.binding.listen``, its failure worded for the window (which has no command-line flags).

    Raises:
        ServerStartError: the port is in use, the address is not this computer's, or listening failed otherwise.
    """
    try:
        return listen(host, port)
    except ListenError as error:
        message = {
            "port_range": f"port {port} is not a port number: choose one from 1024 to 65535",
            "in_use": f"port {port} is in use by another program: choose another port, or stop that program",
            "privileged": f"port {port} needs administrator rights here: choose a port above 1024",
            "not_local": f"{host} is not an address of this computer: use 127.0.0.1 or 0.0.0.0",
        }.get(error.cause, f"could not listen on {host}:{port}: {error.detail}")
        raise ServerStartError(message) from None

