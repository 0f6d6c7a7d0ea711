"""``specchat generate`` and ``specchat chat`` with a model on a remote OpenAI-compatible server (``--remote URL``,
as the window's Remote server… dialog takes it): the options (:func:`add_remote_options`), a chat session whose replies
come from the server (:class:`RemoteSession`, the interface of :class:`inference.chat.ChatSession` that the commands
use) and the server's errors in the command line's words (:func:`cli_words`). No local model is loaded. No Qt.

Rules:
- The model is ``--remote-model``, else the first of the server's ``/models`` list (llama-server, llama-cpp-python
  and Ollama with one model loaded list that one); the key is ``--api-key``, else ``$SPECCHAT_API_KEY``, else none.
- The server is asked for its models first: an unreachable server, a wrong key or base URL ends the command before
  any message is read, and a SpecChat server then gets ``--mode`` (as the window's requests do).
- A failed reply is a :class:`RemoteReplyError` (a ValueError: the commands say it as ``error: ...``, the chat goes
  on); text that came before it is kept in the conversation, as the window keeps a cut reply.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
from collections.abc import Iterator

from app.backends.protocol import GenerationRequest
from app.backends.remote import RemoteBackend, RemoteTarget, check_base_url
from app.backends.remote_errors import RemoteError
from inference.events import Event, TextDelta
from inference.settings import GenerationSettings

#: Where a key is read from when ``--api-key`` is not given.
KEY_VARIABLE = "SPECCHAT_API_KEY"
#: The command line's advice for a model the server has not.
_WITH_MODEL = "choose one of the server's models with --remote-model"
#: The window's advice in remote errors -> the command line's.
_WORDS = (
    ("enter the right key in the API key field", f"give the right key with --api-key KEY or in ${KEY_VARIABLE}"),
    ("enter the right key under the model picker's Remote server… (Ctrl+L)",
     f"give the right key with --api-key KEY or in ${KEY_VARIABLE}"),
    ("enter it in the API key field", f"give it with --api-key KEY or in ${KEY_VARIABLE}"),
    ("enter it under the model picker's Remote server… (Ctrl+L)", f"give it with --api-key KEY or in ${KEY_VARIABLE}"),
    ("choose a model with Fetch models under the model picker's Remote server… (Ctrl+L)", _WITH_MODEL),
    ("Fetch models again", "try again"),
    ("Regenerate to try again", "try again"),
    ("Regenerate", "try again"),
    ("lower Longest reply", "lower --max-new-tokens"),
)


class RemoteReplyError(ValueError):
    """A remote server could not give (all of) a reply; the message is in the command line's words."""


def add_remote_options(parser: argparse.ArgumentParser) -> None:
    """``--remote``, ``--remote-model`` and ``--api-key`` of ``generate`` and ``chat``."""
    parser.add_argument("--remote", metavar="URL", default=None,
                        help="use a model on an OpenAI-compatible server (llama-server, vLLM, Ollama, OpenVINO Model "
                             "Server, specchat serve) instead of this computer's: its base URL, e.g. "
                             "http://HOST:8080/v1 (OpenVINO Model Server: http://HOST:8000/v3)")  # fmt: skip
    parser.add_argument("--remote-model", metavar="NAME", default=None,
                        help="with --remote: the server's model (default: the first of its /models list)")
    parser.add_argument("--api-key", metavar="KEY", default=None,
                        help=f"with --remote: the server's API key, sent as a Bearer token (default: ${KEY_VARIABLE}, "
                             "else none)")  # fmt: skip


def cli_words(message: str) -> str:
    """A remote error's ``message`` with the window's advice (its dialog's fields, Regenerate) in the command line's
    words (its options)."""
    for window, cli in _WORDS:
        message = message.replace(window, cli)
    return message


class RemoteSession:
    """A conversation whose replies come from a remote server, with what the commands use of
    :class:`~inference.chat.ChatSession`: ``messages``, ``system_prompt`` and :meth:`send`.

    Args:
        backend: the server, its model chosen (:func:`connect`).
        system_prompt: sent before the messages ("" = none).
    """

    def __init__(self, backend: RemoteBackend, system_prompt: str = ""):
        self.backend = backend
        self.system_prompt = system_prompt
        self.messages: list[dict] = []
        self.listed: list[str] = []  # the models the server lists
        self._loop = asyncio.new_event_loop()

    def send(self, user_text: str, settings: GenerationSettings, cancel: threading.Event | None = None
             ) -> Iterator[Event]:  # fmt: skip
        """Add a user message and stream the server's reply; the reply (partial if cut or cancelled) is appended. A
        reply with no text leaves the conversation as it was.

        Raises:
            ValueError: the message is empty or only whitespace.
            RemoteReplyError: the server could not give (all of) the reply.
        """
        if not user_text.strip():
            raise ValueError("the message is empty: type something before sending")
        self.messages.append({"role": "user", "content": user_text})
        request = GenerationRequest(list(self.messages), self.system_prompt, settings)
        replies = self.backend.generate(request, cancel or threading.Event())
        text = ""
        try:
            while True:
                try:
                    batch = self._loop.run_until_complete(anext(replies))
                except StopAsyncIteration:
                    break
                for event in batch:
                    if isinstance(event, TextDelta):
                        text += event.text
                    yield event
        except RemoteError as error:
            raise RemoteReplyError(self._words(error)) from None
        finally:
            self._loop.run_until_complete(replies.aclose())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())  # (httpx's stream readers, closed here)
            if text:
                self.messages.append({"role": "assistant", "content": text})
            else:
                del self.messages[-1]


    def _words(self, error: RemoteError) -> str:
        """``error`` in the command line's words; a 404 (no such model) names the models the server lists."""
        message = cli_words(str(error))
        if error.status == 404 and self.listed:
            message = message.replace(_WITH_MODEL, f"{_WITH_MODEL} (it lists: {', '.join(self.listed[:10])})")
        return message


def _unused_with_remote(args: argparse.Namespace, specchat: bool) -> list[str]:
    """One note per option of this computer's models given with ``--remote`` (the server runs its own), and for
    ``--mode`` where the server does not offer SpecChat's decoding modes."""
    local = [("--model", args.model), ("--bits", args.bits), ("--draft", args.draft), ("--k", args.k),
             ("--adaptive-k", args.adaptive_k or None), ("--n-ctx", args.n_ctx), ("--threads", args.threads),
             ("--draft-device", args.draft_device), ("--device", None if args.device == "CPU" else args.device)]
    notes = [f"{flag} is unused with --remote (the server runs its own model, with its own context and devices)"
             for flag, value in local if value is not None]  # fmt: skip
    if args.mode not in ("auto", "compare") and not specchat:
        notes.append(f"--mode {args.mode} is unused: the server decodes as it does (only SpecChat's server takes a "
                     "decoding mode)")  # fmt: skip
    return notes


def connect(args: argparse.Namespace) -> RemoteSession:
    """The session of ``--remote`` (with ``--remote-model``, ``--api-key``, ``--system``): the server asked for its
    models first, the first of them chosen where ``--remote-model`` names none.

    Raises:
        RemoteReplyError: the server cannot be reached, refuses the key, lists no model (none given), or has not the
            one given where it lists its models.
    """
    key = args.api_key if args.api_key is not None else os.environ.get(KEY_VARIABLE, "")
    loop = asyncio.new_event_loop()
    try:
        backend = RemoteBackend(RemoteTarget(check_base_url(args.remote), args.remote_model or "", key))
        models = loop.run_until_complete(backend.list_models())
    except RemoteError as error:
        raise RemoteReplyError(cli_words(str(error)).replace("enter one like", "give --remote one like")) from None
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    for note in _unused_with_remote(args, backend.specchat):
        print(f"note: {note}", file=sys.stderr)
    names = [model.id for model in models]
    if not args.remote_model and not names:
        raise RemoteReplyError(f"{backend.target.host} lists no models: load one on the server, or name it with "
                               "--remote-model")  # fmt: skip
    backend.target = RemoteTarget(backend.target.base_url, args.remote_model or names[0], key)
    session = RemoteSession(backend, args.system)
    session.listed = names
    return session
