"""OpenAI's x-ratelimit-* headers on every /v1 response: what the request's checks found (`RequestLimits`, reached
through a context variable that the middleware sets), or, for a request that was not charged (a read), a look at
its tenant's buckets as the response starts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.limits.buckets import Verdict

logger = logging.getLogger(__name__)

API_PREFIX = "/v1/"


@dataclass(eq=False, slots=True)
class RequestLimits:
    """One HTTP request's rate-limit state: the last verdict its checks reached, or how to look its tenant up, and
    what gives back the in-flight slot it holds once its response has been sent in full."""

    verdict: Verdict | None = None
    peek: Callable[[], Awaitable[Verdict]] | None = None
    release: Callable[[], None] | None = None


_current: ContextVar[RequestLimits | None] = ContextVar("request_limits", default=None)


def current_request() -> RequestLimits | None:
    """The state of the /v1 HTTP request being served (None elsewhere: a WebSocket, a job, a test)."""
    return _current.get()


class RateLimitHeaders:
    """ASGI middleware: each /v1 HTTP response (an error's and a stream's included) carries the headers of the limits
    that are on. A read that nothing charged looks its tenant's buckets up when its response starts; if that fails
    (Redis down) the headers are left out rather than the response failed. The in-flight slot a request took
    (`release_when_sent`) is given back once the app has answered in full, its last byte sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        state = RequestLimits()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                verdict = state.verdict
                if verdict is None and state.peek is not None:
                    try:
                        verdict = await state.peek()
                    except Exception as error:
                        logger.warning("could not read the rate limits for the headers: %s", error)
                if verdict is not None:
                    message.setdefault("headers", [])
                    headers = MutableHeaders(scope=message)
                    for name, value in verdict.headers().items():
                        headers[name] = value
            await send(message)

        token = _current.set(state)
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            _current.reset(token)
            if state.release is not None:
                state.release()
