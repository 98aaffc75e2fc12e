"""``reach observe`` finds a running observer by its page before it starts a gateway."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from reach.tools.observe import observer_at


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/observe" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def page_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_a_gateway_serving_the_observer_is_found_by_its_page(page_port: int) -> None:
    assert observer_at(page_port) == f"http://127.0.0.1:{page_port}"


def test_nothing_listening_is_no_observer() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    assert observer_at(port) is None
