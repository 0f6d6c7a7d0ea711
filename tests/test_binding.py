"""Where the server listens (app/binding.py): one ``listen`` for ``specchat serve`` and the window, whose
failures carry their cause, so that each front end can say what to do in its own terms."""

from __future__ import annotations

import socket

import pytest

from app.backends.serve_in_thread import ServerStartError, listen_for_window
from app.binding import ListenError, check_binding, host_of, is_loopback, listen, url_of
from app.cli.serve import _listen


def test_listen_gives_a_listening_socket_without_nagle_delay():
    with listen("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        assert port > 0 and url_of(sock) == f"http://127.0.0.1:{port}/v1"
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # it accepts connections


def test_a_port_just_freed_binds_again_at_once():
    with listen("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), timeout=5)
        accepted, _ = sock.accept()
        accepted.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
        client.close()
    listen("127.0.0.1", port).close()


def test_each_failure_names_its_cause():
    with listen("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as in_use:
            listen("127.0.0.1", port)
    assert (in_use.value.cause, in_use.value.port) == ("in_use", port) and in_use.value.detail
    with pytest.raises(ListenError) as out_of_range:
        listen("127.0.0.1", 70000)
    assert out_of_range.value.cause == "port_range"
    with pytest.raises(ListenError) as not_local:
        listen("192.0.2.1", 0)  # TEST-NET-1: never an address of this machine
    assert not_local.value.cause == "not_local"


def test_the_command_line_and_the_window_word_the_same_failure_for_their_user():
    with listen("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=f"cannot listen on 127.0.0.1:{port}: the port is in use .* another --port"):
            _listen("127.0.0.1", port)
        with pytest.raises(ServerStartError, match=f"^port {port} is in use by another program: choose another port"):
            listen_for_window("127.0.0.1", port)
    with pytest.raises(ValueError, match=r"^--port must be in \[0, 65535\], got -1$"):
        _listen("127.0.0.1", -1)
    with pytest.raises(ValueError, match="192.0.2.1 is not an address of this machine; use --host 127.0.0.1"):
        _listen("192.0.2.1", 0)
    with pytest.raises(ServerStartError, match="192.0.2.1 is not an address of this computer: use 127.0.0.1"):
        listen_for_window("192.0.2.1", 0)


@pytest.mark.parametrize("host, loopback", [("localhost", True), ("127.0.0.1", True), ("127.8.9.1", True),
                                            ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("10.0.0.2", False),
                                            ("example.com", False)])  # fmt: skip
def test_only_loopback_addresses_serve_without_a_key(host, loopback):
    assert is_loopback(host) is loopback
    check_binding(host, "a-key")  # any address, with a key
    if loopback:
        check_binding(host, None)
    else:
        with pytest.raises(ValueError, match=f"--host {host} lets other machines reach the server: give --api-key"):
            check_binding(host, None)


@pytest.mark.parametrize("authority, host", [("127.0.0.1:8000", "127.0.0.1"), ("localhost", "localhost"),
                                             ("[::1]:8000", "::1"), ("[::1]", "::1"), ("Evil.Example:80", "evil.example"),
                                             ("gpu-box", "gpu-box")])  # fmt: skip
def test_host_of_drops_the_port(authority, host):
    assert host_of(authority) == host


def test_the_url_of_a_socket_on_every_interface_is_this_computers_network_address():
    from app.binding import lan_address

    with listen("0.0.0.0", 0) as sock:
        assert url_of(sock) == f"http://{lan_address()}:{sock.getsockname()[1]}/v1"  # never http://0.0.0.0:…
