"""A webhook receiver for tests: a small HTTP server on loopback (a thread of the test process) that records every
request it gets and answers with the status the test sets (a redirect, an error, a long body...)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int
    requests: list[ReceivedRequest] = field(default_factory=list)
    #: The status of the next answers (their `Location` is `location` when set).
    status: int = 200
    body: bytes = b"ok"
    location: str | None = None
    #: How many of the next requests are held open (recorded at once, answered only once `released` is set or
    #: `hold_s` has passed): a receiver mid-answer while its sender is killed.
    hold_next: int = 0
    hold_s: float = 60.0
    released: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            receiver.requests.append(ReceivedRequest("POST", self.path, headers, body))
            if receiver.hold_next > 0:
                receiver.hold_next -= 1
                receiver.released.wait(receiver.hold_s)
            try:
                self.send_response(receiver.status)
                if receiver.location:
                    self.send_header("location", receiver.location)
                self.send_header("content-length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.write(receiver.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender gave up (timed out, or was killed) while the answer was held

        do_GET = do_POST

        def log_message(self, format: str, *args: object) -> None:
            return None

    return Handler


@contextmanager
def running_receiver(port: int = 0, receiver: Receiver | None = None) -> Iterator[Receiver]:
    """A receiver listening on 127.0.0.1:`port` (0: any free port) until the block ends; `receiver`: go on
    recording into an earlier one (a receiver that was down and came back)."""
    state = receiver or Receiver(port)
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(state))
    server.daemon_threads = True
    state.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.released.set()  # no held request outlives the block
        server.shutdown()
        server.server_close()
        thread.join()


def free_port() -> int:
    """A port nothing listens on now (a receiver that is down)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
