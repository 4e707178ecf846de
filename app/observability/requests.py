"""ASGI middleware around every HTTP request: its request id (logged, echoed as `x-request-id`), the response id in
its path (logged), and its count and latency by route template (never the raw path, which holds ids: one series per
route, not per response)."""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.ids import new_id
from app.observability import logs
from app.observability.metrics import HTTP_LATENCY, HTTP_REQUESTS

REQUEST_ID_HEADER = b"x-request-id"
#: A client's own request id is kept (and logged) when it is short and plain; anything else gets ours.
MAX_CLIENT_REQUEST_ID = 128
UNMATCHED_ROUTE = "unmatched"
#: Any other method a client invents is counted as one label value, not one series each.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_template(scope: Scope) -> str:
    """The matched route's path template (`/v1/responses/{response_id}`), or one label for every unmatched path.

    NOTE: rebuilt from the path and its parameters: the matched route's own `path` lacks the prefix of the
    router it was included with (FastAPI keeps included routers nested).
    """
    if scope.get("route") is None:
        return UNMATCHED_ROUTE
    names = {str(value): name for name, value in scope.get("path_params", {}).items()}
    path: str = scope.get("path", "")
    return "/".join(f"{{{names[segment]}}}" if segment in names else segment for segment in path.split("/"))


#: Each (method, route, status)'s counter and histogram series, looked up once: `labels()` takes a lock and checks
#: its values on every call, which cost a cached GET 37 µs of its CPU time. Bounded as the labels are (route
#: templates, known methods, status codes).
_series: dict[tuple[str, str, int], tuple[Counter, Histogram]] = {}


def _count(method: str, route: str, status: int, latency_s: float) -> None:
    series = _series.get((method, route, status))
    if series is None:
        series = _series[(method, route, status)] = (
            HTTP_REQUESTS.labels(method, route, str(status)),
            HTTP_LATENCY.labels(method, route),
        )
    requests, latency = series
    requests.inc()
    latency.observe(latency_s)


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", []):
        if name == REQUEST_ID_HEADER and 0 < len(value) <= MAX_CLIENT_REQUEST_ID and value.isascii():
            text: str = value.decode()
            if text.isprintable():
                return text
    return new_id("req")


class RequestObservation:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises before answering

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (REQUEST_ID_HEADER, request_id.encode())]
            await send(message)

        with logs.ServingRequest(request_id, scope):
            try:
                await self.app(scope, receive, observed_send)
            finally:
                route = route_template(scope)
                method = scope["method"] if scope.get("method") in KNOWN_METHODS else "OTHER"
                _count(method, route, status, time.perf_counter() - started)
