"""What goes wrong with a remote server, in words a user can act on: :class:`RemoteError`, the one exception of the
remote backend, and the mapping of HTTP statuses (:func:`status_error`) and of connection, TLS, time-out and stream
failures (:func:`transport_error`) to its messages.

Rules:
- Every message is one line that says what happened and what to do (the field to fix, the menu to open, when to
  retry); a reply's advice names the model picker's Remote server… dialog, a model list's (``listing``) the
  dialog's own fields.
- What the server said is quoted from its error body (``error.message`` or ``detail``), at most 200 characters;
  the body is JSON nested at most :data:`MAX_JSON_DEPTH` deep, or plain text; an HTML page is said to be one, with
  its title, never quoted.
- A message names the server by ``host:port`` only, never a ``user:password@`` of its URL; a URL it quotes, and
  what the server said, show the URL's secrets (its password, the values of ``?api_key=``, ``?key=``, ``?token=``...)
  as ``***`` (:func:`shown_url`, :func:`without_secrets`).
"""

from __future__ import annotations

import errno
import html
import json
import re
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

import httpx

from .. import bounded_json

#: The title of an HTML page (:func:`_web_page_title`).
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
#: Deepest nesting of lists and objects in a JSON answer (an OpenAI chunk nests 4 deep): error bodies, stream
#: chunks and model lists.
MAX_JSON_DEPTH = 32
#: Words that make a query parameter's value a secret when its name holds one (``api_key``, ``key``, ``token``,
#: ``access_token``, ``sig``...); ``api-version`` and the like are shown.
SECRET_QUERY_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "sig", "credential")
#: What a secret is shown as.
HIDDEN = "***"
#: A reply's stream that ended before the reply did.
CUT_TEXT = "The server closed the stream before the reply ended (the partial reply was kept): Regenerate to try again"
#: A reply a SpecChat server cut because it is stopping (its ``server_stopped`` error event), text having come.
SERVER_STOPPED_TEXT = ("The server stopped before the reply ended (it is shutting down). What came is kept; press "
                       "Regenerate once the server runs again.")
#: A reply a SpecChat server stopping gave no text of: its ``server_stopped`` error event before the first token, or
#: its 503 to a request still waiting for its turn (the window adds that the message is kept, and to press Send once
#: the server runs again: ``RemoteError.server_stopped``).
SERVER_STOPPED_BEFORE_TEXT = "The server stopped before the reply began (it is shutting down)"
#: What to do about a chat the server cannot fit in its context (:func:`status_error`).
CONTEXT_ADVICE = ("start a new chat, or lower Longest reply; or restart the server with a larger context "
                  "(llama-server -c N, vLLM --max-model-len N)")
#: The messages of a cut reply that say themselves that it stopped, and what to do: the window shows them as they
#: are, without its "The reply stopped with an error:".
SAYS_REPLY_STOPPED = (CUT_TEXT, SERVER_STOPPED_TEXT)


class RemoteError(RuntimeError):
    """A remote server could not give (all of) a reply; the message says what to do.

    Attributes:
        status: the HTTP status (None for connection, TLS and stream errors).
        unreachable: no connection to the server could be made (refused, its name not found, no answer to connect).
        server_stopped: a SpecChat server said it is stopping (``server_stopped``): sending again works once it
            runs again.
    """

    def __init__(
        self, message: str, status: int | None = None, unreachable: bool = False, server_stopped: bool = False
    ):
        super().__init__(message)
        self.status = status
        self.unreachable = unreachable
        self.server_stopped = server_stopped


def _secret_parameter(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_QUERY_WORDS)


def url_secrets(url: str) -> list[str]:
    """The secrets ``url`` carries: the user name and password before ``@`` (a user name alone is often a token)
    and the values of query parameters whose names hold a word of :data:`SECRET_QUERY_WORDS` (none of text that is
    no URL)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    user_info = parts.netloc.rpartition("@")[0]
    user, _, password = user_info.partition(":")
    secrets = [password or user] if user_info else []
    for parameter in parts.query.split("&"):
        name, _, value = parameter.partition("=")
        if value and _secret_parameter(name):
            secrets.append(value)
    return [secret for secret in secrets if secret]


def shown_url(url: str) -> str:
    """``url`` as it may be shown: its password (or a user name alone) and its secret query values
    (:func:`url_secrets`) replaced by :data:`HIDDEN`, the rest as given (of text that is no URL, e.g. an unclosed
    ``[``, all of the query)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        base, question, _ = url.partition("?")
        return base + (f"?{HIDDEN}" if question else "")
    netloc = parts.netloc
    if "@" in netloc:
        user_info, _, host = netloc.rpartition("@")
        user, colon, _ = user_info.partition(":")
        netloc = f"{user}:{HIDDEN}@{host}" if colon else f"{HIDDEN}@{host}"
    query = "&".join(
        f"{name}={HIDDEN}" if value and _secret_parameter(name) else parameter
        for parameter in parts.query.split("&")
        for name, _, value in [parameter.partition("=")]
    )
    return parts._replace(netloc=netloc, query=query).geturl()


def without_secrets(text: str, url: str) -> str:
    """``text`` with every secret of ``url`` (:func:`url_secrets`) in it replaced by :data:`HIDDEN` (what a server
    says may quote the URL it was asked)."""
    for secret in sorted(url_secrets(url), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def error_text(error: Any) -> str:
    """What an ``error`` field says: its ``message`` (or ``detail``), else its first 200 characters."""
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or json.dumps(error)[:200])
    return str(error)[:200]


def stream_error(error: Any, partial: bool) -> RemoteError:
    """The RemoteError of an ``{"error": ...}`` event in a reply's stream (``partial``: text had come): a SpecChat
    server stopping (code ``server_stopped``, whose message advises API clients) in the window's words, once; any
    other as the server said it."""
    if _is_server_stopped(error):
        return RemoteError(SERVER_STOPPED_TEXT if partial else SERVER_STOPPED_BEFORE_TEXT, server_stopped=True)
    return RemoteError(f"The server stopped the reply with an error: {error_text(error)}")


def _web_page_title(text: str) -> str | None:
    """The title of an error body that is an HTML page ("" for one without), None for any other body: a web server
    that is no OpenAI API (``python3 -m http.server``, a router's page) answers with one, whose markup means
    nothing to a user."""
    if not text.lstrip()[:16].lower().startswith(("<!doctype html", "<html")):
        return None
    title = _TITLE.search(text)
    return " ".join(html.unescape(title.group(1)).split())[:80] if title else ""


def _server_message(text: str) -> str:
    """The ``error.message`` (or ``detail``) of an error body, else its first 200 characters."""
    try:
        body = bounded_json.loads(text, MAX_JSON_DEPTH)
    except ValueError:
        return " ".join(text.split())[:200]
    if isinstance(body, dict):
        return error_text(body.get("error") if body.get("error") is not None else body)
    return str(body)[:200]


def _context_exceeded(text: str) -> bool:
    """Whether an error body says the prompt does not fit the server's context: OpenAI's and llama-cpp-python's code
    ``context_length_exceeded``, llama-server's type ``exceed_context_size_error``, or (vLLM's, which has neither) a
    message of "maximum context length"."""
    try:
        body = bounded_json.loads(text, MAX_JSON_DEPTH)
    except ValueError:
        return False
    if not isinstance(body, dict):
        return False
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    markers = (error.get("code"), error.get("type"))
    message = error.get("message")
    return ("context_length_exceeded" in markers or "exceed_context_size_error" in markers
            or (isinstance(message, str) and "maximum context length" in message))  # fmt: skip


def _is_server_stopped(error: Any) -> bool:
    """Whether an OpenAI error object (a stream's ``{"error": ...}``, an error body's ``error``) is a SpecChat
    server's ``server_stopped``."""
    return isinstance(error, dict) and error.get("code") == "server_stopped"


def _server_stopped(text: str) -> bool:
    """Whether an error body is a SpecChat server's ``server_stopped`` error (OpenAI's JSON, its ``error.code``)."""
    try:
        body = bounded_json.loads(text, MAX_JSON_DEPTH)
    except ValueError:
        return False
    return _is_server_stopped(body.get("error") if isinstance(body, dict) else None)


def status_error(
    status: int, text: str, headers: httpx.Headers, host: str, model: str, url: str, listing: bool = False,
    key_sent: bool = True,
) -> RemoteError:
    """The RemoteError of an HTTP status other than 200 from ``host`` (``RemoteTarget.host``) for ``model``
    (``text``: the start of the error body; ``listing``: of ``GET /models``, asked from the remote server dialog,
    whose fields the advice then names, instead of a reply's; ``key_sent``: the request carried an API key, without
    which a 401 or 403 says the server needs one); a SpecChat server's 503 to a reply's request still
    queued when it stopped (code ``server_stopped``, whose message advises API clients) in the window's words, as
    :func:`stream_error` says that stop before the first token."""
    title = _web_page_title(text)
    if title is not None:
        named = f", {title!r}," if title else ","
        said = f" (the server sent a web page{named} not an OpenAI-compatible API's answer)"
    else:
        said = _server_message(text)
        said = f" (the server said: {said})" if said else ""
    if status in (401, 403):
        where = "in the API key field" if listing else "under the model picker's Remote server… (Ctrl+L)"
        if key_sent:
            message = f"{host} refused the API key ({status}){said}: enter the right key {where}"
        else:
            message = f"{host} needs an API key ({status}){said}: enter it {where}"
    elif status == 404 and listing:
        message = (
            f"{host} has no model list at {url} ({status}){said}: check the base URL (usually …/v1; "
            "OpenVINO Model Server: …/v3)"
        )
    elif status == 404:
        message = (
            f"{host} has no model {model!r} or no such API route ({status} for {url}){said}: "
            "choose a model with Fetch models under the model picker's Remote server… (Ctrl+L), and check the base "
            "URL (usually …/v1; OpenVINO Model Server: …/v3)"
        )
    elif status in (400, 413) and not listing and _context_exceeded(text):
        message = f"{host} cannot fit this chat in its context ({status}){said}: {CONTEXT_ADVICE}"
    elif status == 429:
        after = headers.get("retry-after", "").strip()
        when = f"in {after} s" if after.isdigit() else (f"after {after}" if after else "in a moment")
        message = f"{host} is busy (429: too many requests){said}: retry {when}"
    elif status == 503 and not listing and _server_stopped(text):  # (its message advises API clients)
        return RemoteError(SERVER_STOPPED_BEFORE_TEXT, status, server_stopped=True)
    elif status >= 500:
        message = f"{host} failed ({status}){said}: retry, or check the server's log"
    else:
        message = f"{host} refused the request ({status}){said}"
    return RemoteError(without_secrets(message, url), status)


def transport_error(
    error: httpx.HTTPError, host: str, url: str, read_timeout_s: float, partial: bool, listing: bool = False
) -> RemoteError:
    """The RemoteError of a connection, TLS, time-out or stream failure of a request to ``url`` on ``host``
    (``RemoteTarget.host``; ``partial``: text had arrived; ``listing``: of ``GET /models``, from the remote server
    dialog), the secrets of ``url`` hidden (:func:`without_secrets`)."""
    said = _transport_error(error, host, url, read_timeout_s, partial, listing)
    return RemoteError(without_secrets(str(said), url), unreachable=said.unreachable)


def _transport_error(
    error: httpx.HTTPError, host: str, url: str, read_timeout_s: float, partial: bool, listing: bool
) -> RemoteError:
    kept = " (the partial reply was kept)" if partial else ""
    causes = _causes(error)
    if isinstance(error, httpx.ReadTimeout):
        again = "Fetch models again" if listing else "Regenerate"
        return RemoteError(
            f"{host} sent nothing for {read_timeout_s:g} s{kept}: check that the server still runs, then {again}"
        )
    if isinstance(error, httpx.TimeoutException):
        return RemoteError(
            f"{host} did not answer in time ({type(error).__name__}): check the address and the network",
            unreachable=isinstance(error, httpx.ConnectTimeout),
        )
    if any(isinstance(c, ssl.SSLError) for c in causes) or "SSL" in str(error) or "certificate" in str(error).lower():
        return RemoteError(
            f"TLS error with {host} ({_first_line(error)}): check the server's certificate, or use http:// if "
            "it does not serve https"
        )
    if isinstance(error, httpx.ConnectError):
        text = str(error).lower()
        if any(isinstance(c, socket.gaierror) for c in causes) or any(
            word in text
            for word in ("name or service not known", "nodename nor servname", "name resolution", "getaddrinfo")
        ):
            name = urlsplit(url).hostname or host
            return RemoteError(f"The server name {name} was not found (DNS lookup failed): check the base URL",
                               unreachable=True)
        if (
            any(isinstance(c, ConnectionRefusedError) for c in causes)
            or "refused" in text
            or _errno(causes) == errno.ECONNREFUSED
        ):
            return RemoteError(
                f"{host} refused the connection: check that the server is running and the port is right",
                unreachable=True,
            )
        return RemoteError(
            f"Could not connect to {host} ({_first_line(error)}): check the address and the network", unreachable=True
        )
    if isinstance(error, (httpx.RemoteProtocolError, httpx.ReadError)):
        return RemoteError(
            CUT_TEXT
            if partial
            else f"{host} closed the connection without an answer: check the server's log, then retry"
        )
    return RemoteError(f"The request to {url} failed ({type(error).__name__}: {_first_line(error)}){kept}")


def _causes(error: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _errno(causes: list[BaseException]) -> int | None:
    return next((c.errno for c in causes if isinstance(c, OSError) and c.errno), None)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]
