"""WebSocket mode: one connection's `response.create` messages -> the same events a stream sends, one response
at a time, and the connection's last unstored response kept in memory for a `store: false` continuation."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

from app.errors import ApiError, InvalidRequest, ServerError, outage_error
from app.events.terminal import is_terminal
from app.generation.prompt import Turn
from app.responses import service
from app.responses.context import ConnectionChain
from app.responses.parsing import parse_create_payload
from app.responses.preparation import PreparedResponse
from app.responses.submission import open_stream
from app.runtime import Runtime
from app.schemas.parsing import parse_json_object

logger = logging.getLogger(__name__)

CREATE_EVENT = "response.create"
#: Envelope fields of a WebSocket `response.create` that are not create parameters.
ENVELOPE_FIELDS = frozenset({"type", "stream_id", "stream"})
#: Statuses whose response a later `previous_response_id` on this connection may continue.
CONTINUABLE_STATUSES = frozenset({"completed", "incomplete"})


def error_event(error: ApiError, stream_id: str | None) -> dict[str, Any]:
    """An error that answers a message (the SDK's ResponseWsError: nested, with the HTTP status it stands for)."""
    event: dict[str, Any] = {"type": "error", "status": error.status_code, **error.body()}
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def _socket_event(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    """A stream event as WebSocket mode sends it: a mid-stream error nests its fields, as ResponseWsError does."""
    if event["type"] == "error" and "error" not in event:
        details = {"type": "server_error", **{key: event.get(key) for key in ("code", "message", "param")}}
        event = {"type": "error", "sequence_number": event["sequence_number"], "error": details}
    if stream_id is not None:
        event = {**event, "stream_id": stream_id}
    return event


class ResponsesSocketSession:
    """One connection's state. Not shared: each connection gets its own, and it dies with the connection."""

    def __init__(self, runtime: Runtime, tenant: str) -> None:
        self.runtime = runtime
        self.tenant = tenant
        #: The connection's last response, when it finished well and was not stored.
        self._last: ConnectionChain | None = None

    async def handle(self, message: str | bytes) -> AsyncGenerator[dict[str, Any], None]:
        """The events answering one client message: a response's whole stream, or an error event."""
        stream_id: str | None = None
        final: dict[str, Any] | None = None
        try:
            payload = parse_json_object(message, self.runtime.settings)
            stream_id = payload.get("stream_id") if isinstance(payload.get("stream_id"), str) else None
            prepared = await self._prepare(payload)
            events = await open_stream(self.runtime, prepared, self.tenant)
            try:
                async for event in events:
                    if is_terminal(event):
                        final = event["response"]
                    yield _socket_event(event, stream_id)
            finally:
                # However this ends (the client gone, this generator closed), the relay closes: a foreground
                # response whose client left is cancelled there.
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()
        except ApiError as error:
            # A failed continuation forgets what it continued: retrying it is previous_response_not_found.
            self._last = None
            yield error_event(error, stream_id)
            return
        except Exception as error:
            # An outage (database, Redis) is the same 503 the HTTP path answers; the connection stays usable.
            self._last = None
            unavailable = outage_error(error)
            if unavailable is None:
                logger.exception("a WebSocket response.create failed")
            else:
                logger.warning("a WebSocket response.create met an outage: %s", error)
            yield error_event(unavailable or ServerError("The server had an error.", code="server_error"), stream_id)
            return
        self._remember(prepared, final)

    async def _prepare(self, payload: dict[str, Any]) -> PreparedResponse:
        kind = payload.get("type")
        if kind != CREATE_EVENT:
            raise InvalidRequest(
                f"Unsupported event type '{kind}': this server takes '{CREATE_EVENT}' messages.",
                param="type",
                code="unsupported_event_type",
            )
        if payload.get("background"):
            raise InvalidRequest(
                "background is not supported in WebSocket mode.", param="background", code="unsupported_parameter"
            )
        if payload.get("generate") is False:
            raise InvalidRequest(
                "generate: false is not supported by this server yet.", param="generate", code="unsupported_parameter"
            )
        fields = {key: value for key, value in payload.items() if key not in ENVELOPE_FIELDS and key != "generate"}
        request = parse_create_payload({**fields, "stream": True}, self.runtime.settings)
        return await service.prepare(request, self.tenant, self.runtime, connection=self._last)

    def _remember(self, prepared: PreparedResponse, final: dict[str, Any] | None) -> None:
        """Keep the response for a continuation when it finished well and nothing else holds it (store: false)."""
        self._last = None
        if final is None or final["status"] not in CONTINUABLE_STATUSES or prepared.job.store:
            return
        context = prepared.context
        turns = [*context.history, Turn(input_items=context.items, output_items=final["output"])]
        self._last = ConnectionChain(final["id"], turns, context.chain_root or final["id"])
