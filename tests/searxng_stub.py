"""A SearXNG-compatible search endpoint on a loopback port, for tests: `/search?q=...&format=json` answers the
results it was given (SearXNG's JSON shape: url, title, content), `/pages/...` the pages it was given as HTML, and
it records every request's path and query."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class SearchStub:
    base_url: str
    #: The results every search answers (SearXNG's JSON shape).
    results: list[dict[str, Any]] = field(default_factory=list)
    #: Pages by path (`/pages/...`), as HTML.
    pages: dict[str, str] = field(default_factory=dict)
    #: Each request: its path and its query's parameters.
    requests: list[tuple[str, dict[str, list[str]]]] = field(default_factory=list)

    @property
    def search_url(self) -> str:
        return f"{self.base_url}/search"


@contextmanager
def search_stub() -> Iterator[SearchStub]:
    stub = SearchStub("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            stub.requests.append((parts.path, parse_qs(parts.query)))
            if parts.path == "/search":
                self._answer(200, "application/json", json.dumps({"results": stub.results}).encode())
            elif parts.path in stub.pages:
                self._answer(200, "text/html", stub.pages[parts.path].encode())
            else:
                self._answer(404, "text/plain", b"not found")

        def _answer(self, status: int, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
