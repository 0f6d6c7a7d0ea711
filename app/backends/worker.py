"""The inference thread and the asyncio bridge that brings its results to an asyncio loop (the window's qasync loop,
or the server's).

Every model operation (fetching the default model, loading, generating) runs, one at a time, in a single
thread owned by :class:`InferenceWorker`; OpenVINO releases the GIL while it computes, so the GUI thread keeps
running. Results travel back as ``app.background`` prescribes: coroutines on the GUI thread await the jobs,
and whatever a job reports while it runs (progress lines, generation events) reaches the GUI thread through
``loop.call_soon_threadsafe``. No widget is ever touched from the inference thread.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import sys
import threading
import time
from collections import OrderedDict
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from inference.chat import ChatSession
from inference.draft_head import LoadedHead, is_head_folder, load_head
from inference.engine import Engine
from inference.events import Event, Finished, GenerationStats, PromptProgress, PromptScored
from inference.exactness import FirstDifference
from inference.model import LoadedModel, load_model
from inference.models.default_head import repair_default_head
from inference.models.progress import ProgressEvent
from inference.precision import NumericPrecision, PrecisionSettings
from inference.scoring import prompt_logprobs
from inference.settings import (
    ContextSettings,
    Decoding,
    GenerationSettings,
    SamplingSettings,
    SettingError,
    SpeculativeSettings,
)
from inference.vocabulary import vocabulary

from ..background import run_in, stream_in, threadsafe
from .protocol import MAX_SCORED_PROMPT_TOKENS, GenerationRequest

#: Nice value of the inference thread: the GUI thread wins the CPU when both want it (see lower_thread_priority).
INFERENCE_NICE = 5
#: After a reply whose prompt needed at least this many tokens read, the C heap's free pages go back to the system
#: (``give_back_free_memory``): a long paste's reply left ~150 MB of freed-but-kept heap behind (measured 2026-12-05,
#: 100 KB paste, n_ctx 4096); after a short one there is little to give and the trim's few ms are not worth it.
GIVE_BACK_AFTER_PROMPT_TOKENS = 1024


@dataclass(frozen=True)
class ModelSpec:
    """Which models to load, and where.

    Attributes:
        target_dir: the target model folder; target_device: its OpenVINO device.
        draft_dir: the draft model folder, or None (autoregressive or prompt lookup only).
        draft_device: the draft's device.
        precision: the target's numeric precision (the draft runs at its device's defaults).
        threads: CPU inference threads of both models (OpenVINO's INFERENCE_NUM_THREADS); None = all cores.
    """

    target_dir: Path
    target_device: str = "CPU"
    draft_dir: Path | None = None
    draft_device: str = "CPU"
    precision: PrecisionSettings = PrecisionSettings()
    threads: int | None = None

    def describe(self) -> str:
        """``SmolLM2-135M-Instruct-int4 on CPU, draft SmolLM2-135M-Instruct-int8 on CPU``."""
        text = f"{Path(self.target_dir).name} on {self.target_device}"
        if self.draft_dir is not None:
            text += f", draft {Path(self.draft_dir).name} on {self.draft_device}"
        return text


@dataclass(frozen=True)
class ModelInfo:
    """What :meth:`InferenceWorker.load` loaded.

    Attributes:
        spec: the request; max_position_embeddings: upper bound of n_ctx, the model's trained length or its
        sliding attention window if smaller (None if unknown);
        load_seconds: wall time of the load (0 when the models were already loaded);
        precision: the target's precision as OpenVINO reports it;
        warm_up_seconds: wall time of :func:`warm_up`.
    """

    spec: ModelSpec
    max_position_embeddings: int | None
    load_seconds: float
    precision: NumericPrecision
    warm_up_seconds: float = 0.0


@dataclass
class _ModelCache:
    """Loaded models by (folder, device, precision, threads, a target's feature layers), least recently used first;
    reloading one is skipped."""

    capacity: int = 3
    models: OrderedDict = field(default_factory=OrderedDict)

    def get(
        self,
        folder: Path,
        device: str,
        precision: PrecisionSettings | None,
        threads: int | None = None,
        feature_layers: tuple[int, ...] = (),
    ) -> tuple[LoadedModel | LoadedHead, bool]:
        """The model in ``folder`` (a draft head, or a model compiled with ``feature_layers``: ``load_model``'s),
        and whether it was loaded now.

        Raises:
            as ``load_head`` and ``load_model`` raise.
        """
        key = (str(Path(folder).resolve()), device, precision, threads, feature_layers)
        if key in self.models:
            self.models.move_to_end(key)
            return self.models[key], False
        if is_head_folder(folder):
            repair_default_head(folder)  # the shipped head, damaged, is reinstalled before it is loaded
            model = load_head(folder, device, threads)
        else:
            model = load_model(folder, device, precision, threads, feature_layers=feature_layers)
        self.models[key] = model
        while len(self.models) > self.capacity:
            self.models.popitem(last=False)
        return model, True


class InferenceWorker:
    """Owns the inference thread, the engine and the loaded models.

    Jobs run in submission order, so a reload requested while a reply streams happens after it, and a reply
    requested while a model loads waits for it. Use the coroutines from the thread that runs the asyncio loop.

    Args:
        model_cache_size: loaded models kept for quick switching (e.g. turning the draft model on and off).
        nice: CPU priority of the inference thread and of the OpenVINO threads it starts (see
            :func:`lower_thread_priority`).
    """

    def __init__(self, model_cache_size: int = 3, nice: int = INFERENCE_NICE):
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="specchat-inference", initializer=lower_thread_priority, initargs=(nice,)
        )
        self._cache = _ModelCache(model_cache_size)
        self._engine: Engine | None = None
        self._spec: ModelSpec | None = None
        self._cancels: set[threading.Event] = set()
        self._closed = False

    @property
    def spec(self) -> ModelSpec | None:
        """The models of the current engine (None before the first successful load)."""
        return self._spec

    @property
    def generating(self) -> bool:
        """True while a reply is generated (or queued) in the inference thread: other jobs wait for it."""
        return bool(self._cancels)

    def describe_answer(self, with_draft: bool = True) -> str:
        """The models that write replies now (``ModelSpec.describe()``; "" before the first load); without
        ``with_draft``, the target only (a reply that no draft model drafted)."""
        if self._spec is None:
            return ""
        return (self._spec if with_draft else replace(self._spec, draft_dir=None)).describe()

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function(*args)`` in the inference thread and return its result (or raise its exception)."""
        self._check_open()
        return await run_in(self._executor, function, *args)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the inference worker is shut down")

    async def fetch_default_model(
        self,
        bits: int,
        progress: Callable[[ProgressEvent], None],
        cancel: threading.Event | None = None,
    ) -> Path:
        """``inference.models.default_model.ensure_default_model(bits)`` in the inference thread.

        ``progress`` is called in the GUI thread with each step (a :class:`ProgressEvent` with only a message)
        and, while the wheel downloads, with its bytes so far (``done``, ``total``; ``stage="download"``); only
        when something has to be done.

        Raises:
            ModelFetchError: with a message that says what to do.
            OperationCancelled: ``cancel`` was set (the download is killed; nothing is left in the store).
        """
        from inference.models.default_model import ensure_default_model

        report = threadsafe(progress)
        return await self.run(
            lambda: ensure_default_model(
                bits, progress=lambda line: report(ProgressEvent(line)), cancel=cancel, download_progress=report
            )
        )

    async def load(self, spec: ModelSpec) -> ModelInfo:
        """Load the models of ``spec`` (reusing loaded ones) and build a new engine.

        Raises:
            ModelLoadError: a model folder is missing or unreadable (the message says what to do).
            ValueError: unknown device, or the draft's tokenizer differs from the target's
                (``TokenizerMismatchError``).
        """

        def job() -> ModelInfo:
            start = time.perf_counter()
            if self._spec == spec and self._engine is not None:
                target = self._engine.target
                return ModelInfo(spec, target.max_context, 0.0, target.precision)
            draft = None
            if spec.draft_dir is not None:  # first: a fused head's feature_layers are compiled into the target
                draft, _ = self._cache.get(spec.draft_dir, spec.draft_device, None, spec.threads)
            layers = draft.feature_layers if isinstance(draft, LoadedHead) else ()
            target, _ = self._cache.get(spec.target_dir, spec.target_device, spec.precision, spec.threads, layers)
            engine = Engine(target, draft)
            loaded = time.perf_counter()
            warm_up(engine)
            self._engine, self._spec = engine, spec
            return ModelInfo(spec, target.max_context, loaded - start, target.precision, time.perf_counter() - loaded)

        return await self.run(job)

    async def generate(self, request: GenerationRequest, cancel: threading.Event) -> AsyncIterator[list[Event]]:
        """Stream the events of one reply, in batches (all events that arrived since the last batch).

        Set ``cancel`` to stop: the reply ends with a ``Finished`` event whose stop reason is ``cancelled``.
        Leaving the ``async for`` early also cancels the generation.

        Raises:
            ValueError: a setting is out of range, the prompt is empty, no model is loaded...
            RuntimeError / RopeUnsupportedError: as raised by the engine.
        """
        self._check_open()

        def produce(put: Callable[[Event], None]) -> None:
            if cancel.is_set():
                return
            if self._engine is None:
                raise ValueError("no model is loaded: wait for the model to load, or fix the error shown")
            if request.fresh_cache:
                self._engine.reset()
            if request.prompt is not None:
                ids = checked_prompt(request, self._engine.target)
                top = request.settings.output.logprobs
                if request.echo and top is not None and ids:
                    scored = prompt_logprobs(self._engine, ids, request.settings.context, top, cancel=cancel)
                    if not cancel.is_set():  # cancelled: the reply below ends at once, as cancelled
                        put(PromptScored(vocabulary(self._engine.target).pieces[ids[0]], tuple(scored)))
                if request.echo_only:
                    stop = "cancelled" if cancel.is_set() else "max_new_tokens"
                    events = iter([Finished(GenerationStats(mode=Decoding.AUTOREGRESSIVE.mode, prompt_tokens=len(ids),
                                                            stop_reason=stop))])
                else:
                    events = self._engine.generate(ids, request.settings, 0, cancel)
            elif request.continue_text:
                session = ChatSession(self._engine, request.system_prompt, request.messages)
                events = session.continue_reply(request.continue_text, request.settings, cancel)
            else:
                session = ChatSession(self._engine, request.system_prompt, request.messages, request.tools)
                events = session.reply(request.settings, cancel)
            read = 0
            for event in events:
                if isinstance(event, PromptProgress):
                    read = event.total
                put(event)
            if read >= GIVE_BACK_AFTER_PROMPT_TOKENS:  # (after the last event: the reply is not held up)
                give_back_free_memory()

        self._cancels.add(cancel)
        try:
            async with aclosing(stream_in(self._executor, produce, cancel)) as batches:
                async for events in batches:
                    yield events
        finally:
            self._cancels.discard(cancel)

    async def check_prompt(self, request: GenerationRequest) -> None:
        """Refuse now, in the inference thread, what :meth:`generate` would refuse of ``request``'s raw prompt
        (:func:`checked_prompt`), without generating; a request without one passes (a completion of several
        prompts checks them all before it generates the first).

        Raises:
            SettingError: on ``prompt``, as :func:`checked_prompt`.
            ValueError: no model is loaded.
        """

        def job() -> None:
            if self._engine is None:
                raise ValueError("no model is loaded: wait for the model to load, or fix the error shown")
            if request.prompt is not None:
                checked_prompt(request, self._engine.target)

        await self.run(job)

    async def explain_difference(
        self, request: GenerationRequest, reference: list[int], candidate: list[int], k: int | None = None
    ) -> FirstDifference | None:
        """``exactness.first_difference`` of two greedy replies to ``request`` (in the inference thread; it
        drops the KV cache, so the next reply prefills from scratch); ``k``: the largest K the candidate drafted
        (Auto chooses it; None: the request's K).

        Raises:
            ValueError: no model is loaded, or the request's settings are invalid.
        """

        def job() -> FirstDifference | None:
            if self._engine is None:
                raise ValueError("no model is loaded")
            session = ChatSession(self._engine, request.system_prompt, request.messages)
            return session.first_difference(reference, candidate, request.settings, k)

        return await self.run(job)

    def cancel_all(self) -> None:
        """Stop every running or queued generation."""
        for cancel in list(self._cancels):
            cancel.set()

    def shutdown(self, wait: bool = True) -> None:
        """Cancel generations, drop queued jobs and (with ``wait``) wait for the running job to end."""
        self._closed = True
        self.cancel_all()
        self._executor.shutdown(wait=wait, cancel_futures=True)
        if wait:
            self._engine = None
            self._cache.models.clear()


def prompt_ids(prompt: str | tuple[int, ...], model: LoadedModel) -> list[int]:
    """The token ids of a request's raw ``prompt`` (its text encoded, or the ids it gives) for ``model``.

    Raises:
        SettingError: on ``prompt``, an id past the model's vocabulary (the message names it and the ids there are).
    """
    if isinstance(prompt, str):
        return model.encode(prompt)
    size = model.vocab_size
    for index, token in enumerate(prompt):
        if not 0 <= token < size:
            raise SettingError("prompt", f"prompt holds the token id {token} at index {index}, which is not in the "
                               f"model's vocabulary: its ids are 0 to {size - 1}")
    return list(prompt)


def checked_prompt(request: GenerationRequest, model: LoadedModel) -> list[int]:
    """The token ids of ``request``'s raw prompt for ``model`` (:func:`prompt_ids`), refused where the worker would
    not generate it: an id past the vocabulary, or, with ``echo`` and log-probabilities, more than
    :data:`MAX_SCORED_PROMPT_TOKENS` tokens.

    Raises:
        SettingError: on ``prompt``; the message names what is wrong and what to send.
    """
    ids = prompt_ids(request.prompt, model)
    if request.echo and request.settings.output.logprobs is not None and len(ids) > MAX_SCORED_PROMPT_TOKENS:
        raise SettingError("prompt", f"prompt has {len(ids)} tokens: echo with logprobs scores at most "
                           f"{MAX_SCORED_PROMPT_TOKENS}; send a shorter prompt, or leave echo or logprobs out")
    return ids


def give_back_free_memory() -> bool:
    """Return the free pages of the C heap (every malloc arena: OpenVINO's, Qt's, Python's large objects) to the
    system with glibc's ``malloc_trim(0)``; what is still in use stays. Returns False where the C library is not
    glibc (nothing is done there). Takes a few to a few hundred milliseconds (more after a bigger reply), without
    Python's GIL (ctypes releases it)."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def lower_thread_priority(nice: int) -> None:
    """Give the calling thread (and the threads it creates, such as OpenVINO's) a lower CPU priority.

    On a machine with few cores, OpenVINO keeps every core busy while generating; at equal priority the GUI
    thread then gets only its fair share of a core, and 30 ms of layout work takes 70 ms. With a higher nice
    value the scheduler serves the GUI first; generation still gets every cycle the GUI does not use. Linux only
    (elsewhere thread priorities are set differently; nothing is changed).
    """
    if not sys.platform.startswith("linux") or nice <= 0:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError:
        pass


def warm_up(engine: Engine) -> None:
    """Run tiny generations so that OpenVINO's one-time work is not billed to the first reply.

    The first decode step after loading costs about a second on a CPU (measured: TTFT 1.5 s and a 1.2 s first
    step, against 0.3 s and 0.06 s afterwards), which would also make the first comparison favour whichever mode
    runs second. One short autoregressive run, one speculative run with prompt lookup (multi-token verification
    passes) and, with a draft model, one with the draft, then the cache is dropped.
    """
    prompt = engine.target.encode("one two three, one two three, one two three, one two three")
    runs = [Decoding.AUTOREGRESSIVE, Decoding.PROMPT_LOOKUP] + ([Decoding.DRAFT_MODEL] if engine.draft is not None else [])
    for decoding in runs:
        settings = GenerationSettings(
            decoding=decoding,
            sampling=SamplingSettings(max_new_tokens=6),
            context=ContextSettings(n_ctx=256),
            speculative=SpeculativeSettings(k=3),
        )
        for _ in engine.generate(prompt, settings):
            pass
    engine.reset()

