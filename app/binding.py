"""Where the server listens: loopback unless a key guards it, and a socket without Nagle's delay (for
``specchat serve`` and the window's local server alike)."""

from __future__ import annotations

import errno
import ipaddress
import socket
from urllib.parse import urlsplit

#: The environment variable that holds the API key when ``--api-key`` is not given.
API_KEY_VARIABLE = "SPECCHAT_API_KEY"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1); False for any other address or name."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(authority: str) -> str:
    """The host of a ``Host`` header, without its port, lower-case (urllib's parsing): ``127.0.0.1:8000`` ->
    ``127.0.0.1``, ``[::1]:8000`` -> ``::1``, ``localhost`` -> ``localhost``; "" for one that cannot be parsed."""
    try:
        return urlsplit("//" + authority.strip()).hostname or ""
    except ValueError:  # e.g. an unclosed "[::1"
        return ""


def check_binding(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without an API key.

    Raises:
        ValueError: ``host`` is not a loopback address and there is no key (the message says what to do).
    """
    if not is_loopback(host) and api_key is None:
        raise ValueError(
            f"--host {host} lets other machines reach the server: give --api-key KEY (or set ${API_KEY_VARIABLE}) so "
            "that only clients with the key can use it, or leave --host out to serve this machine only"
        )


class ListenError(Exception):
    """Listening on ``host:port`` failed; each front end says what to do in its own terms.

    Attributes:
        host, port: what was asked for.
        cause: ``"port_range"`` (not in [0, 65535]), ``"in_use"`` (another program has the port),
            ``"privileged"`` (a port below 1024 without the rights), ``"not_local"`` (the address is not one of
            this machine's) or ``"other"``.
        detail: the operating system's words (empty for ``port_range``).
    """

    def __init__(self, host: str, port: int, cause: str, detail: str = ""):
        super().__init__(f"cannot listen on {host}:{port}: {detail or cause}")
        self.host, self.port, self.cause, self.detail = host, port, cause, detail


_CAUSES = {
    errno.EADDRINUSE: "in_use",
    getattr(errno, "WSAEADDRINUSE", errno.EADDRINUSE): "in_use",
    errno.EACCES: "privileged",
    getattr(errno, "WSAEACCES", errno.EACCES): "privileged",
    errno.EADDRNOTAVAIL: "not_local",
    getattr(errno, "WSAEADDRNOTAVAIL", errno.EADDRNOTAVAIL): "not_local",
}


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one; IPv6 for an address with ``:``), for
    ``specchat serve`` and the window's local server alike.

    Address reuse is on where it only skips TIME_WAIT (``socket.create_server``: not on Windows, where it would
    let two servers share a port), so the port of a server just stopped binds again at once. ``TCP_NODELAY`` is on.

    Raises:
        ListenError: the port is out of range, in use or privileged, or the address is not this machine's.
    """
    if not 0 <= port <= 65535:
        raise ListenError(host, port, "port_range")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host.strip("[]"), port), family=family)
    except OSError as error:
        raise ListenError(host, port, _CAUSES.get(error.errno, "other"), error.strerror or str(error)) from None
    # No Nagle delay: a stream's first chunk follows its headers at once instead of waiting for the client's
    # delayed ACK (measured: +40 ms TTFT without it). Accepted connections inherit the option (Linux, macOS).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def lan_address() -> str:
    """This computer's address on its local network (the interface of its default route), or its host name when
    it has none (no packet is sent: connecting a UDP socket only chooses the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): never routed anywhere
            return probe.getsockname()[0]
        except OSError:
            return socket.gethostname()


def url_of(sock: socket.socket) -> str:
    """The base URL clients use: ``http://HOST:PORT/v1``; for a socket on every interface (``0.0.0.0``, ``::``),
    this computer's network address (:func:`lan_address`), which no client could use as ``0.0.0.0``."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = lan_address()
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"
