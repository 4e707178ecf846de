"""What uvicorn answers itself, before the app sees a request, in the API's own shape: a header block still
arriving past h11's buffer limit (`max_incomplete_event_size`, 16 KiB; one that arrived whole is RequestGuards')
is a 431 `request_header_fields_too_large`, and any other request that does not parse is a 400 `invalid_request`,
both as OpenAI-shaped JSON rather than uvicorn's plain text. The connection then closes without a reset: what the client
is still sending is read and dropped for a moment, so that it gets to read the answer (a 1 MB header was a reset)."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.api.request_guards import MAX_HEADER_BYTES, headers_too_large
from app.errors import ApiError, InvalidRequest

#: How long a connection refused before its request parsed keeps reading (and dropping) what its client sends.
LINGER_S = 2.0


class ApiShapedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with its refusals of unparsable requests in the API's error shape."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lingering = False

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the request was refused: what is still coming is dropped
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        # uvicorn calls this on any request h11 cannot parse; h11's buffer tells a header block past the limit.
        buffered, _ = self.conn.trailing_data
        error: ApiError
        if len(buffered) >= (self.config.h11_max_incomplete_event_size or MAX_HEADER_BYTES):
            error = headers_too_large()
        else:
            error = InvalidRequest("The request is not valid HTTP/1.1.", code="invalid_request")
        body = json.dumps(error.body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            for event in (
                h11.Response(
                    status_code=error.status_code, headers=headers, reason=HTTPStatus(error.status_code).phrase
                ),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
        except h11.LocalProtocolError:  # h11 cannot answer in the state it is in: close, as uvicorn would
            self.transport.close()
            return
        # Half-close: the answer is sent; closing outright with unread input would reset the connection first.
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)
