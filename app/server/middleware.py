"""The ASGI middleware of the server's application (pure ASGI, so that streaming and disconnects pass through
untouched): a path's trailing slashes dropped before routing (:class:`WithoutTrailingSlash`), and a keyless
server's refusal of requests that do not come from this computer (:class:`ThisComputerOnly`).
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

from app.binding import host_of, is_loopback

from .errors import APIError


class WithoutTrailingSlash:
    """ASGI middleware: a path's trailing slashes are dropped before routing, for every endpoint and method
    (``GET /v1/models/`` is ``GET /v1/models``), as some clients add one to every path. Starlette's redirect would
    not do: ``/v1/models/`` matches the route of one model (named ""), and a redirected POST may lose its body."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] != "/" and scope["path"].endswith("/"):
            scope = {**scope, "path": scope["path"].rstrip("/") or "/"}
        await self.app(scope, receive, send)


class ThisComputerOnly:
    """ASGI middleware of a keyless server: a request that :func:`_not_from_this_computer` refuses gets a 403 in
    OpenAI's error JSON (pure ASGI, so streaming and disconnects pass through untouched)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
            refusal = _not_from_this_computer(headers.get(b"host", ""), headers.get(b"origin"))
            if refusal is not None:
                body = APIError(403, refusal, type="permission_error", code="forbidden").body()
                await JSONResponse(body, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _not_from_this_computer(host: str, origin: str | None) -> str | None:
    """Why a keyless server refuses a request (None: it does not): its ``Host`` header names another machine
    (DNS rebinding), or its ``Origin`` says a web page elsewhere sent it."""
    if not is_loopback(host_of(host)):
        return (f"this server answers requests to this computer only (Host {host!r}): use http://127.0.0.1 or "
                "http://localhost, or start it with an API key")
    if origin is not None:
        scheme, _, authority = origin.partition("://")
        if scheme not in ("http", "https") or not is_loopback(host_of(authority)):
            return (f"requests from web pages are refused (Origin {origin!r}): call the API from a program, not a "
                    "browser page")
    return None
