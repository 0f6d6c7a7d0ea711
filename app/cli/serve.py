"""``specchat serve``: the OpenAI-compatible server (``app.server``) on a model loaded by an ``InferenceWorker``,
served by uvicorn on the same asyncio loop.

It binds 127.0.0.1 unless told otherwise, and refuses any other address without an API key (``--api-key`` or
``SPECCHAT_API_KEY``): a server reachable from other machines must not run their prompts for anyone. The listening
socket is opened before the model loads, so that a port in use fails at once; Ctrl+C cancels the reply in
progress, answers the requests still queued with a 503 (``server_stopped``), closes the connections and ends with
status 130, without a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path

from app.binding import API_KEY_VARIABLE, ListenError, check_binding, listen, url_of
from app.cli import INTERRUPTED
from app.cli.options import add_model_options, decoding_settings, fit_n_ctx, model_folders
from app.server.request_common import TOOL_CHOICE_DEFAULTS
from inference.generation_config import CHAT_DEFAULTS, recommended_sampling
from inference.settings import SamplingSettings, SettingError, top_k_given

#: Seconds Ctrl+C waits for open connections to close after their replies are cancelled.
SHUTDOWN_TIMEOUT_S = 5
#: The flags that set the sampling defaults of requests: (flag, type, help); each sets the ``SamplingSettings`` field
#: named as the flag (``--repeat-penalty``: ``repetition_penalty``).
SAMPLING_FLAGS = (
    ("--temperature", float, "0 = greedy"),
    ("--top-p", float, "nucleus sampling, (0, 1]"),
    ("--top-k", int, "0 or -1 = off"),
    ("--min-p", float, "0 = off"),
    ("--repeat-penalty", float, "repetition penalty over the last --repeat-last-n tokens, prompt included (1 = off)"),
    ("--repeat-last-n", int, "tokens the repetition penalty looks back at (64)"),
    ("--presence-penalty", float, "OpenAI's presence penalty, -2..2 (0 = off)"),
    ("--frequency-penalty", float, "OpenAI's frequency penalty, -2..2 (0 = off)"),
)


def add_serve_parser(commands, folders: list[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` subcommand to ``commands`` (the ``specchat`` subparsers)."""
    serve = commands.add_parser(
        "serve", parents=folders, help="serve a model over an OpenAI-compatible HTTP API (/v1/chat/completions...)",
        description="Serve a model over OpenAI's HTTP API: /v1/chat/completions, /v1/completions, /v1/models, "
        "/v1/responses, /health. One reply is generated at a time; further requests wait (up to --max-queue, then 429). "
        "The model options set the defaults of every request; a request's `specchat` field overrides them.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only; any other needs --api-key)")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (default 8000; 0 = a free port, printed)")
    serve.add_argument("--api-key", default=None, help=f"require 'Authorization: Bearer KEY' (or 'X-Api-Key: KEY') on every endpoint but /health (default: ${API_KEY_VARIABLE}, else none)")
    serve.add_argument("--max-queue", type=int, default=8, help="requests that may wait while one generates; more get 429 (default 8)")
    serve.add_argument("--max-tokens", type=int, default=None, help="the most new tokens one reply may generate; a request asking more gets this many (default: --n-ctx)")
    serve.add_argument("--tool-choice-default", choices=TOOL_CHOICE_DEFAULTS, default="auto",
                       help="what a request with tools that sends no tool_choice gets: auto (OpenAI's default), or "
                       "call-then-answer: required until a tool result follows the last user message, then none "
                       "(for clients such as llm that cannot send tool_choice, with a model too small to choose a "
                       "call; default auto)")
    serve.add_argument("--log-prompts", action="store_true", help="write each request's prompt (its last message) into the request log; without it the log holds no prompt text")
    add_model_options(serve, modes=("auto", "ar", "spec"))
    sampling = serve.add_argument_group(
        "sampling defaults", "what a request that leaves a sampling field out gets (default: the model's "
        f"generation_config.json, else temperature {CHAT_DEFAULTS.temperature:g}, top-p {CHAT_DEFAULTS.top_p:g}, "
        f"repetition penalty {CHAT_DEFAULTS.repetition_penalty:g})",
    )
    for flag, kind, text in SAMPLING_FLAGS:
        sampling.add_argument(flag, type=kind, default=None, help=text)


def api_key_of(args: argparse.Namespace) -> str | None:
    """``--api-key``, else ``$SPECCHAT_API_KEY``, else None; without the spaces and line breaks around it (an env
    file's ``KEY=abc`` followed by a carriage return), which no client sends.

    Raises:
        ValueError: the key is given but empty.
    """
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_VARIABLE)
    if key is not None and not key.strip():
        raise ValueError(f"the API key is empty: give a key with --api-key KEY (or ${API_KEY_VARIABLE}), or leave both unset")
    return key.strip() if key is not None else None


def run_serve(args: argparse.Namespace) -> int:
    """Run ``specchat serve``; returns the exit status (130 after Ctrl+C).

    Raises:
        ValueError, ModelLoadError, ModelFetchError: as ``run_command`` reports them (status 2).
    """
    api_key = api_key_of(args)
    check_binding(args.host, api_key)
    if args.max_queue < 0:
        raise ValueError(f"--max-queue must be >= 0, got {args.max_queue}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ValueError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    defaults = decoding_settings(args, args.mode)
    given = sampling_flags(args)
    sock = _listen(args.host, args.port)
    try:
        spec = model_folders(args)
        defaults = fit_n_ctx(defaults, spec, given=args.n_ctx is not None)
        defaults = replace(defaults, sampling=replace(recommended_sampling(spec.target_dir), **given))
        if asyncio.run(_serve(sock, spec, defaults, api_key, args.max_queue, args.max_tokens, args.log_prompts,
                              args.tool_choice_default)):
            raise KeyboardInterrupt  # stopped by Ctrl+C: uvicorn's re-raised SIGINT may come after the run ended
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return INTERRUPTED
    finally:
        sock.close()
    return 0


def sampling_flags(args: argparse.Namespace) -> dict:
    """The sampling flags given, by ``SamplingSettings`` field name (they go over the model's recommended sampling,
    ``recommended_sampling``), checked; a ``--top-k`` of -1 is 0 (off), as a request's ``top_k`` is.

    Raises:
        ValueError: a flag out of range (the message names the flag).
    """
    given = {}
    for flag, _, _ in SAMPLING_FLAGS:
        name = flag[2:].replace("-", "_")
        value = getattr(args, name)
        if value is not None:
            given["repetition_penalty" if name == "repeat_penalty" else name] = value
    try:
        if "top_k" in given:
            given["top_k"] = top_k_given(given["top_k"])
        replace(SamplingSettings(), **given).validate()
    except SettingError as error:
        flag = "--repeat-penalty" if error.field == "repetition_penalty" else "--" + error.field.replace("_", "-")
        raise ValueError(error.renamed(flag)) from None
    return given


def _listen(host: str, port: int) -> socket.socket:
    """``listen``, its failure worded for the command line.

    Raises:
        ValueError: listening failed (the message names the flag to change).
    """
    try:
        return listen(host, port)
    except ListenError as error:
        if error.cause == "port_range":
            raise ValueError(f"--port must be in [0, 65535], got {port}") from None
        advice = {
            "in_use": "the port is in use by another program; choose another --port, or stop that program",
            "privileged": "ports below 1024 need administrator rights; choose a --port above 1024",
            "not_local": f"{host} is not an address of this machine; use --host 127.0.0.1, or 0.0.0.0 with --api-key",
        }.get(error.cause, f"{error.detail}; choose another --port or --host")
        raise ValueError(f"cannot listen on {host}:{port}: {advice}") from None


async def _serve(
    sock: socket.socket, spec, defaults, api_key: str | None, max_queue: int, max_tokens: int | None,
    log_prompts: bool = False, tool_choice_default: str = "auto",
) -> bool:
    """Load the model and serve until stopped; returns whether Ctrl+C (SIGINT) stopped it."""
    import uvicorn

    from app.backends.worker import InferenceWorker
    from app.server import create_app
    from app.server.request_log import log_to_stderr

    worker = InferenceWorker(nice=0)  # no window to keep responsive: the inference thread runs at normal priority
    try:
        print(f"loading {spec.describe()}...", file=sys.stderr, flush=True)
        info = await worker.load(spec)
        defaults.validate(info.max_position_embeddings)  # an --n-ctx past the model's length: said now, not per request
        model_id = Path(spec.target_dir).name
        app = create_app(worker, model_id=model_id, api_key=api_key, max_queue=max_queue, defaults=defaults,
                         max_context=info.max_position_embeddings, max_tokens=max_tokens, log_prompts=log_prompts,
                         tool_choice_default=tool_choice_default)
        log_to_stderr()  # one line per request, also in the log folder's cli.log
        config = uvicorn.Config(app, http="h11", lifespan="off", log_config=None, access_log=False,
                                timeout_graceful_shutdown=SHUTDOWN_TIMEOUT_S)
        server = _cancelling_server(uvicorn.Server, worker, app.state.gate)(config)
        key_note = "API key required" if api_key else "no API key"
        print(f"serving {model_id} at {url_of(sock)} (OpenAI-compatible, {key_note}; Ctrl+C stops)", flush=True)
        await server.serve(sockets=[sock])
        return server.interrupted
    finally:
        worker.shutdown(wait=True)


def _cancelling_server(base: type, worker, gate) -> type:
    """uvicorn's ``Server`` class (``base``, imported only when serving) whose shutdown first closes the queue
    (``gate``: the requests waiting get a 503 ``server_stopped`` instead of a turn) and cancels the reply in
    progress, so that open streams end at once instead of running to their end."""

    class CancellingServer(base):
        # Whether SIGINT stopped it: uvicorn re-raises the signal once served, but asyncio.run's own SIGINT handler
        # only cancels a task that may have ended by then, and the exit status was 0 instead of 130 under load.
        interrupted = False

        def handle_exit(self, sig, frame) -> None:
            self.interrupted = self.interrupted or sig == signal.SIGINT
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets=None) -> None:
            gate.close()
            worker.cancel_all()
            await super().shutdown(sockets)

    return CancellingServer
