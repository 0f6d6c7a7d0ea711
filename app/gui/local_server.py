"""The window's local server: the model the window has loaded, served over the OpenAI API (``app.server``) while
the window keeps chatting with it.

Rules:
- One engine: the server's backend is :class:`~app.backends.serve_in_thread.WorkerOnLoop` over the window's
  :class:`~app.backends.worker.InferenceWorker`, whose jobs run in order, so the window's replies and the server's
  requests take turns. A model the window loads serves the next request: :meth:`LocalServer.model_changed`
  builds the app again for it (and for new defaults) (:class:`~app.backends.serve_in_thread.SwitchableApp`), with its name as the model id, its
  trained length as the bound of ``n_ctx``, and the window's decoding, rolling context and K as the defaults of
  requests that leave them out (their sampling defaults are OpenAI's).
- States: ``stopped``, ``starting``, ``serving``, ``stopping``, ``failed`` (the text says why: a port in use, a
  missing API key...). Every change is announced with ``state_changed(state, text)``.
- Building the first app (the first import of ``app.server`` takes ~0.4 s), starting (binding, uvicorn's startup) and
  stopping (joining the server's thread) run in a daemon thread that a coroutine on the GUI loop awaits
  (``app.background``): the GUI thread never waits for them.
- Binds 127.0.0.1; "allow other computers" binds 0.0.0.0 and, as ``specchat serve``, needs an API key.
- One queue per server (:class:`~app.server.gate.GenerationGate`), shared by the apps built for each model, so
  that the queue limit, its 429s and ``/health.busy`` count a request still running on the previous model's app.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from inference.settings import GenerationSettings

from ..backends.serve_in_thread import ServerStartError, ServerThread, SwitchableApp, WorkerOnLoop
from ..backends.worker import InferenceWorker
from ..background import DaemonThreadExecutor, TaskSet, run_in

logger = logging.getLogger(__name__)

#: The model id served before any model is loaded.
NO_MODEL_ID = "specchat"
#: Requests that may wait while one generates (``specchat serve --max-queue``'s default); more get a 429.
MAX_QUEUE = 8


@dataclass(frozen=True)
class ServedModel:
    """What the server says about the model the window has loaded.

    Attributes:
        model_id: its store name (``SmolLM2-135M-Instruct-int4``), or ``NO_MODEL_ID`` before a model is loaded.
        max_context: its largest n_ctx (``ModelInfo.max_position_embeddings``; None = unknown).
        defaults: the settings of a request's omitted fields (``app.server.create_app``'s ``defaults``).
    """

    model_id: str = NO_MODEL_ID
    max_context: int | None = None
    defaults: GenerationSettings = GenerationSettings()


def no_key_refusal(allow_other_computers: bool, api_key: str) -> str | None:
    """Why these choices cannot be served (None when they can): other computers need an API key."""
    if allow_other_computers and not api_key.strip():
        return "Allowing other computers needs an API key: enter one (clients send it as a Bearer token)"
    return None


def default_app_factory(backend: WorkerOnLoop, api_key: str | None, model: ServedModel, gate: Any) -> Any:
    """The OpenAI-compatible app of ``specchat serve`` over ``backend``, for ``model``, queueing at ``gate`` (an
    ``app.server.gate.GenerationGate``)."""
    from ..server import create_app

    return create_app(
        backend, model_id=model.model_id, api_key=api_key, defaults=model.defaults, max_context=model.max_context,
        gate=gate, draft_advice="choose a draft model as the Drafter in the window's Model and decoding settings",
        n_ctx_advice="raise Context length (n_ctx) in the window's settings",
    )


class LocalServer(QObject):
    """Starts and stops the server of the window's model.

    Args:
        worker: the window's inference worker; tasks: where the coroutines run (the GUI loop).
        model: returns the :class:`ServedModel` of the model loaded now (read at start and at each
            :meth:`model_changed`).
        app_factory: ``app_factory(backend, api_key, served_model, gate)`` returns the ASGI app to serve, queueing
            its requests at ``gate`` (default: ``app.server``'s).

    Attributes:
        state, text: the state and what it says; url, port: the base URL and port while serving ("", None otherwise).
        api_key: the key clients must send while serving (None: none asked).

    Signals:
        state_changed(state, text).
    """

    state_changed = Signal(str, str)

    def __init__(
        self,
        worker: InferenceWorker,
        tasks: TaskSet,
        model: Callable[[], ServedModel] = ServedModel,
        app_factory: Callable[[WorkerOnLoop, str | None, ServedModel, Any], Any] = default_app_factory,
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self.worker = worker
        self._tasks = tasks
        self._model = model
        self._app_factory = app_factory
        self._server: ServerThread | None = None
        self._app: SwitchableApp | None = None
        self._backend: WorkerOnLoop | None = None
        self._gate: Any = None  # the server's GenerationGate, shared by the apps of each model
        self._api_key: str | None = None
        self._served: ServedModel | None = None
        self._control = DaemonThreadExecutor("specchat-server-control")
        self._busy: asyncio.Task | None = None
        self.state = "stopped"
        self.text = "Stopped"
        self.url = ""
        self.port: int | None = None

    @property
    def api_key(self) -> str | None:
        """The key the server asks of its clients (None: no key, or not serving)."""
        return self._api_key if self._server is not None else None

    @property
    def serving(self) -> bool:
        """True while the server accepts requests."""
        return self.state == "serving"

    def model_changed(self) -> None:
        """The window loaded another model, or changed the defaults (:class:`ServedModel`): serve them from the next
        request on (nothing when they are what is served).

        The app for it is built here, on the GUI thread, so that no request is answered under the previous name
        (~2 ms: ``app.server`` was imported, and a first app built, by :meth:`start` in the background). A failure
        to build it is said (state ``failed``) and the server stops.
        """
        model = self._model()
        if self._app is None or self._backend is None or model == self._served:
            return
        try:
            self._app.current = self._app_factory(self._backend, self._api_key, model, self._gate)
            self._served = model
        except Exception as error:  # noqa: BLE001 - said, and the server stops rather than serve the wrong model
            logger.exception("the local server could not follow the model")
            self._busy = self._tasks.spawn(self._stop(self._busy, f"Stopped: {type(error).__name__}: {error}"))

    def start(self, port: int, api_key: str = "", allow_other_computers: bool = False) -> asyncio.Task | None:
        """Start serving on ``port`` in the background (nothing while starting or stopping, or already serving);
        returns the task. A refusal or failure ends in state ``failed`` with its reason."""
        if self.state in ("starting", "stopping", "serving"):
            return None
        refusal = no_key_refusal(allow_other_computers, api_key)
        if refusal:
            self._set_state("failed", refusal)
            return None
        self._busy = self._tasks.spawn(self._start(port, api_key.strip() or None, allow_other_computers))
        return self._busy

    def stop(self) -> asyncio.Task | None:
        """Stop serving in the background (after a start in progress); returns the task."""
        if self.state in ("stopped", "failed", "stopping") and self._server is None:
            return None
        self._busy = self._tasks.spawn(self._stop(self._busy))
        return self._busy

    def close(self) -> None:
        """The window closes: stop the server without waiting (its thread is a daemon)."""
        server, self._server, self._app, self._backend = self._server, None, None, None
        if server is not None:
            self._control.submit(server.stop)

    async def _start(self, port: int, api_key: str | None, allow_other_computers: bool) -> None:
        host = "0.0.0.0" if allow_other_computers else "127.0.0.1"
        self._set_state("starting", f"Starting on port {port}…")
        backend = WorkerOnLoop(self.worker, asyncio.get_running_loop())
        model = self._model()

        def build_and_start() -> tuple[SwitchableApp, ServerThread, Any]:
            from ..server.gate import GenerationGate  # (app.server's first import: off the GUI thread)

            gate = GenerationGate(MAX_QUEUE)
            app = SwitchableApp(self._app_factory(backend, api_key, model, gate))
            server = ServerThread(app, host, port)
            server.start()
            return app, server, gate

        try:
            app, server, gate = await run_in(self._control, build_and_start)
        except ServerStartError as error:
            self._set_state("failed", f"Not serving: {error}")
            return
        except Exception as error:  # noqa: BLE001 - the app could not be built: said, never a crash
            logger.exception("the local server could not start")
            self._set_state("failed", f"Not serving: {type(error).__name__}: {error}")
            return
        self._server, self._app, self._backend, self._api_key, self._served = server, app, backend, api_key, model
        self._gate = gate
        self.port = server.port
        self.url = server.url
        where = "this computer and the network" if allow_other_computers else "this computer only"
        key = "; clients must send the API key as a Bearer token" if api_key else ""  # (the key itself never shown)
        self._set_state("serving", f"Serving the loaded model at {self.url} ({where}){key}")

    async def _stop(self, previous: asyncio.Task | None, reason: str = "") -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])  # a start (or stop) in progress finishes first
        server, backend = self._server, self._backend
        self._server, self._app, self._backend = None, None, None
        if server is None:
            return
        self._set_state("stopping", "Stopping…")
        if self._gate is not None:
            self._gate.close()  # the requests still queued get a 503 instead of a reply nobody waits for
        if backend is not None:
            backend.cancel_all()  # the replies streaming end with server_stopped, not a connection cut mid-chunk
        await run_in(self._control, server.stop)
        self.url, self.port = "", None
        self._set_state("failed" if reason else "stopped", reason or "Stopped")

    def _set_state(self, state: str, text: str) -> None:
        self.state, self.text = state, text
        self.state_changed.emit(state, text)
