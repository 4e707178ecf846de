"""What uvicorn refuses before the app sees a request is answered in the API's error shape: headers it cannot
buffer a 431 that the client reads (a 1 MB header, still being sent when the answer goes), a request that is not
HTTP a 400, both JSON. (Headers that arrive whole but over the limit are the app's: RequestGuards.)"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from app import cli
from app.api.http_protocol import ApiShapedH11Protocol
from app.api.request_guards import MAX_HEADER_BYTES


async def hello(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
    await send({"type": "http.response.body", "body": b"hello"})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = int(probe.getsockname()[1])
    config = uvicorn.Config(
        hello,
        host="127.0.0.1",
        port=free,
        http=ApiShapedH11Protocol,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        log_config=None,  # the suite's logging stays as it is
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    yield free
    server.should_exit = True
    thread.join(10)


def exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` (from a thread: the server may answer before it has all of it), read the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:

        def send() -> None:
            # The server may close its side once it has answered: the rest is not wanted.
            with contextlib.suppress(OSError):
                connection.sendall(request)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
        sender.join(10)
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, body


def error_of(body: bytes) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def test_an_ordinary_request_is_served(port: int) -> None:
    status, _, body = exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (status, body) == (200, b"hello")


def test_headers_past_the_buffer_are_an_api_shaped_431_that_the_client_reads(port: int) -> None:
    # More than one read of the socket (256 KiB) holds: h11 sees a header block still incomplete past its limit.
    request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"k" * 1_000_000 + b"\r\n\r\n"
    status, headers, body = exchange(port, request)
    assert status == 431 and headers["content-type"] == "application/json"
    error = error_of(body)
    assert error["code"] == "request_header_fields_too_large" and str(MAX_HEADER_BYTES) in error["message"]


def test_a_request_that_is_not_http_is_an_api_shaped_400(port: int) -> None:
    status, _, body = exchange(port, b"HELLO THERE\r\n\r\n")
    assert status == 400 and error_of(body)["code"] == "invalid_request"


def test_serve_runs_uvicorn_with_this_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESPONSES_LOG_FORMAT", raising=False)
    monkeypatch.setattr(cli, "_preflight", lambda settings: None)
    handed: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: handed.update(options))
    assert cli.main(["serve"]) == 0
    assert handed["http"] is ApiShapedH11Protocol
    assert handed["h11_max_incomplete_event_size"] == MAX_HEADER_BYTES
