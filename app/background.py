"""Background work, one way: a coroutine on the asyncio loop (the GUI's qasync loop, or a server's) awaits blocking
work run in an executor.

Rules:
- Blocking work (model loads, generation, copying, converting, downloading) never runs on the GUI thread: it is
  submitted to an executor (the inference worker's single thread, or :class:`DaemonThreadExecutor` for the
  Models dialog) and awaited by a coroutine on the GUI thread (:func:`run_in`, :func:`stream_in`).
- What the work reports while it runs (progress lines, fractions, streamed events) reaches the GUI thread only
  through ``loop.call_soon_threadsafe`` (:func:`threadsafe`, :func:`call_soon`): a worker thread never touches a
  widget, emits a Qt signal or creates a Qt object, so no Qt object is ever finalized outside the GUI thread
  (see ``app.gui.gc_policy``; a server has no Qt objects).
- Cancellation is a ``threading.Event`` the work polls; the coroutine only sets it.
- Coroutines the GUI starts are kept in a :class:`TaskSet`, which reports their unexpected errors and cancels
  them all when the window closes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

_END = object()


@dataclass
class _Failure:
    error: BaseException


def call_soon(loop: asyncio.AbstractEventLoop, callback: Callable, *args: Any) -> None:
    """``loop.call_soon_threadsafe(callback, *args)`` from any thread; ignored once the loop is closed (quitting)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass


def threadsafe(callback: Callable[..., None]) -> Callable[..., None]:
    """A function that any thread may call to run ``callback(*args)`` on the running loop's thread.

    Call it on the GUI thread (it binds the running loop); hand the result to the work as its progress callback.
    """
    loop = asyncio.get_running_loop()
    return lambda *args: call_soon(loop, callback, *args)


async def run_in(executor: concurrent.futures.Executor, function: Callable[..., Any], *args: Any) -> Any:
    """Run ``function(*args)`` in ``executor`` and return its result (or raise its exception) on the GUI thread.

    Raises:
        RuntimeError: the executor is shut down; anything ``function`` raises.
    """
    return await asyncio.get_running_loop().run_in_executor(executor, function, *args)


async def stream_in(
    executor: concurrent.futures.Executor,
    produce: Callable[[Callable[[Any], None]], None],
    cancel: threading.Event,
) -> AsyncIterator[list]:
    """Run ``produce(put)`` in ``executor`` and yield what it ``put``, in batches (all items since the last batch).

    The stream ends when ``produce`` returns; an exception it raises is raised here after the items put before
    it. Leaving the ``async for`` early (or ``aclose()``) sets ``cancel``, which ``produce`` must poll.

    Raises:
        RuntimeError: the executor is shut down (on the first iteration); anything ``produce`` raises.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def put(item: Any) -> None:
        call_soon(loop, queue.put_nowait, item)

    def job() -> None:
        try:
            produce(put)
            put(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the GUI thread
            put(_Failure(error))

    executor.submit(job)
    ended = False
    try:
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            end = next((i for i, item in enumerate(batch) if item is _END or isinstance(item, _Failure)), None)
            items = batch if end is None else batch[:end]
            if end is not None:
                ended = True
            if items:
                yield items
            if end is not None:
                if isinstance(batch[end], _Failure):
                    raise batch[end].error
                return
    finally:
        if not ended:
            cancel.set()  # the consumer left early: stop the work


class DaemonThreadExecutor(concurrent.futures.Executor):
    """Runs each submitted call in a new daemon thread, so quitting never waits for it (an abandoned download).

    Args:
        name: name of the threads (shown by debuggers and in crash reports).
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def submit(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        """Start ``function(*args, **kwargs)`` in a new daemon thread; returns its future."""
        future: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = function(*args, **kwargs)
            except BaseException as error:  # noqa: BLE001 - delivered through the future
                future.set_exception(error)
            else:
                future.set_result(result)

        threading.Thread(target=run, name=self.name, daemon=True).start()
        return future


class TaskSet:
    """Coroutines running on the GUI loop on behalf of one window.

    Args:
        on_error: called on the GUI thread with the exception of a task that failed unexpectedly (after it is
            logged); not called for cancelled tasks.
    """

    def __init__(self, on_error: Callable[[BaseException], None]) -> None:
        self._on_error = on_error
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coroutine: Coroutine) -> asyncio.Task:
        """Run ``coroutine`` on the loop; returns its task."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            logger.error("unexpected error", exc_info=error)
            self._on_error(error)

    def cancel_all(self) -> None:
        """Cancel every task still running."""
        for task in list(self._tasks):
            task.cancel()
