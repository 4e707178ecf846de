"""ASGI guard in front of every HTTP route: bodies over the size limit (an upload route's own, larger one on that
route) refused before they are read in full, headers over theirs, and URLs holding a NUL character (which no id can
hold, and Postgres cannot even compare) refused before routing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response
from app.errors import ApiError, HeadersTooLarge, InvalidRequest
from app.schemas.parsing import request_too_large

#: The most bytes of headers a request may have (h11's own buffer limit, which `serve` gives uvicorn too).
MAX_HEADER_BYTES = 16 * 1024


def headers_too_large() -> HeadersTooLarge:
    return HeadersTooLarge(
        f"The request's headers are larger than this server's limit of {MAX_HEADER_BYTES} bytes.",
        code="request_header_fields_too_large",
    )


@dataclass(frozen=True, slots=True)
class UploadLimit:
    """A route whose body may be larger than every other's (a file upload): `max_bytes` instead of the limit."""

    method: str
    path: str
    max_bytes: int


class RequestGuards:
    def __init__(self, app: ASGIApp, *, max_request_bytes: int, upload_limits: Sequence[UploadLimit] = ()) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.upload_limits = {(limit.method, limit.path): limit.max_bytes for limit in upload_limits}

    def _body_limit(self, scope: Scope) -> int:
        return self.upload_limits.get((scope.get("method", ""), scope.get("path", "")), self.max_request_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await error_response(refusal)(scope, receive, send)
            return
        limit = self._body_limit(scope)
        received = 0

        async def limited_receive() -> Message:
            # Counted as it arrives (a chunked body has no Content-Length): the route's read of the body fails
            # with a 413 at the first chunk past the limit, and the error handlers render it.
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise request_too_large(limit)
            return message

        await self.app(scope, limited_receive, send)

    def _refusal(self, scope: Scope) -> ApiError | None:
        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            return InvalidRequest(
                "The URL holds a NUL character (%00), which no id or parameter may contain.", code="invalid_value"
            )
        header_bytes = 0
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > (limit := self._body_limit(scope)):
                return request_too_large(limit)
            header_bytes += len(name) + len(value) + 4  # as sent: "name: value\r\n"
        if header_bytes > MAX_HEADER_BYTES:
            # Whether uvicorn already refused them depends on how the bytes arrived (it only limits a header block
            # still incomplete): the same limit for every request, whatever its packets.
            return headers_too_large()
        return None
