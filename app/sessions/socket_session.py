"""WebSocket mode: one connection's client events -> the same events a stream sends, one response at a time on each
lane (lanes.py), each lane's last unstored response kept in memory for a `store: false` continuation, and the
steers of running responses (steering.py).

Each message is checked as it arrives (`admit`): one the server does not take is answered at once, even while a
response runs, with an `error` that names the event it answers; a `response.steer` is handled at once (`steer`);
a `response.create` that passes waits its turn on its lane (`run`), where what needs the database or the responses
before it (the chain it continues) is checked."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from app.errors import ApiError, InvalidRequest, ServerError, outage_error
from app.events.terminal import is_terminal
from app.generation.prompt import Turn
from app.responses import service
from app.responses.context import ConnectionChain
from app.responses.parsing import parse_create_payload
from app.responses.preparation import PreparedResponse, check_combination
from app.responses.schemas import CreateResponseRequest
from app.responses.submission import open_stream
from app.runtime import Runtime
from app.schemas.parsing import parse_json_object
from app.sessions.lanes import Lane, Lanes
from app.sessions.steering import (
    MAX_PENDING_STEERS,
    STEER_EVENT,
    Steer,
    SteerInvalid,
    SteerQueue,
    accepted_event,
    failed_event,
    invalid_steer,
    new_steer_id,
    parse_steer,
    pending_event,
    request_steer,
    required_input,
)

logger = logging.getLogger(__name__)

CREATE_EVENT = "response.create"
#: Envelope fields of a WebSocket `response.create` that are not create parameters (`generate` is WebSocket-only:
#: the SDK's POST /v1/responses params have no such field). NOTE: `event_id` (a client's own id for the event, as
#: the Realtime API has it) is not in the SDK's ResponseCreate; it is taken so that an error can name the event it
#: answers.
ENVELOPE_FIELDS = frozenset({"type", "stream_id", "stream", "event_id", "generate"})
#: Statuses whose response a later `previous_response_id` on this connection may continue.
CONTINUABLE_STATUSES = frozenset({"completed", "incomplete"})
#: Where a client event names a response: a create (or a steer) the one it continues, others the one they act on.
NAMING_FIELDS = ("previous_response_id", "response_id")
#: How much of a client's id or type an error repeats (they are the client's own strings, of any length).
NAMED_CHARS = 64
#: How many ended responses a connection remembers the ids of (a steer for one is `response_already_completed`).
ENDED_KEPT = 256


def _text(payload: dict[str, Any], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) else None


def _quoted(value: str) -> str:
    return repr(value if len(value) <= NAMED_CHARS else value[:NAMED_CHARS] + "...")


@dataclass(frozen=True, slots=True)
class ClientEvent:
    """What an error names of the client event it answers: its type and the ids it carried.

    NOTE: the SDK's ResponseWsError has a field for the lane (`stream_id`) only; the event's type, its `event_id`
    and the response it names are said at the head of the error's `message`."""

    type: str | None = None
    event_id: str | None = None
    #: The response the event names, as (field, id): `previous_response_id` (create, steer), else `response_id`.
    names: tuple[str, str] | None = None
    stream_id: str | None = None

    @classmethod
    def of(cls, payload: dict[str, Any]) -> ClientEvent:
        names = next(((field, value) for field in NAMING_FIELDS if (value := _text(payload, field))), None)
        return cls(_text(payload, "type"), _text(payload, "event_id"), names, _text(payload, "stream_id"))

    def describe(self) -> str:
        ids = [f"event_id {_quoted(self.event_id)}"] if self.event_id else []
        if self.names is not None:
            ids.append(f"{self.names[0]} {_quoted(self.names[1])}")
        kind = _quoted(self.type) if self.type is not None else "a message"
        return f"{kind} ({', '.join(ids)})" if ids else kind

    @property
    def continues(self) -> str | None:
        """The response a `response.create` continues (its previous_response_id), if it names one."""
        if self.type != CREATE_EVENT or self.names is None or self.names[0] != "previous_response_id":
            return None
        return self.names[1]


def error_event(error: ApiError, about: ClientEvent) -> dict[str, Any]:
    """An error that answers a client event (the SDK's ResponseWsError: nested, with the HTTP status it stands
    for), its message led by the event it answers."""
    body = error.body()
    body["error"]["message"] = f"In reply to {about.describe()}: {error.message}"
    event: dict[str, Any] = {"type": "error", "status": error.status_code, **body}
    if about.stream_id is not None:
        event["stream_id"] = about.stream_id
    return event


class EventRefused(Exception):
    """A client event the server does not take; `event` is the error that answers it."""

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__(event["error"]["message"])
        self.event = event


@dataclass(frozen=True, slots=True)
class SocketCreate:
    """A `response.create` that passed the checks made on arrival, waiting for its turn."""

    request: CreateResponseRequest
    about: ClientEvent
    #: False: a warm-up (`generate: false`): its context is read into the model's cache, and its Response has no
    #: output; a later turn continues it (previous_response_id) with that prefix cached.
    generate: bool = True
    #: Its create fields as sent (no envelope): a steered successor inherits them, with its own input.
    fields: dict[str, Any] = field(default_factory=dict)
    #: The steers this create commits (an automatic successor, or a continuation they were pending for).
    steers: SteerQueue | None = None


def _socket_event(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    """A stream event as WebSocket mode sends it: a mid-stream error nests its fields, as ResponseWsError does."""
    if event["type"] == "error" and "error" not in event:
        details = {"type": "server_error", **{key: event.get(key) for key in ("code", "message", "param")}}
        event = {"type": "error", "sequence_number": event["sequence_number"], "error": details}
    if stream_id is not None:
        event = {**event, "stream_id": stream_id}
    return event


class IdleClock:
    """How long a connection has had nothing to do: no message heard, no response running or waiting. An idle
    connection still holds one of its tenant's places for open connections, so it is closed after `timeout_s`."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._since = anyio.current_time()
        self._running = 0

    def touch(self) -> None:
        self._since = anyio.current_time()

    @contextmanager
    def busy(self) -> Iterator[None]:
        """A response runs: not idle, and its end starts the count again."""
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            self.touch()

    def left(self, *, waiting: bool) -> float:
        """How long to wait for a message before asking again (a whole timeout while there is work)."""
        if self._running or waiting:
            return self.timeout_s
        return max(self._since + self.timeout_s - anyio.current_time(), 0.0)

    def expired(self, *, waiting: bool) -> bool:
        return not self._running and not waiting and anyio.current_time() - self._since >= self.timeout_s


class ResponsesSocketSession:
    """One connection's state. Not shared: each connection gets its own, and it dies with the connection."""

    def __init__(self, runtime: Runtime, tenant: str) -> None:
        self.runtime = runtime
        self.tenant = tenant
        #: Each lane's running response and last unstored response (kept for a continuation from any lane).
        self._lanes = Lanes()
        #: Steers pending for responses that wait for client tool output or an approval, by response id.
        self._pending: dict[str, SteerQueue] = {}
        #: The ids of responses that ended on this connection, newest last.
        self._ended: OrderedDict[str, None] = OrderedDict()
        #: The sequence numbers of the steering events, which belong to no response's stream.
        self._steer_sequence = 0

    def admit(self, message: str | bytes) -> SocketCreate | Steer:
        """The checks made as the message arrives, needing neither the database nor the responses before it: a
        `response.create` to run in its turn, a `response.steer` to handle now (`steer`), or EventRefused with the
        error (or `response.steer.failed`) to send at once."""
        about = ClientEvent()
        try:
            payload = parse_json_object(message, self.runtime.settings)
            about = ClientEvent.of(payload)
            self._check_event_id(payload)
            if payload.get("type") == STEER_EVENT:
                return parse_steer(payload, self.runtime)
            request, fields = self._parse_create(payload)
            return SocketCreate(request, about, generate=payload.get("generate") is not False, fields=fields)
        except ApiError as error:
            self._forget(about)
            raise EventRefused(error_event(error, about)) from None
        except SteerInvalid as error:
            steer = invalid_steer(error)
            assert steer is not None
            raise EventRefused(self._failed(steer, "invalid_input", str(error))) from None

    @staticmethod
    def _check_event_id(payload: dict[str, Any]) -> None:
        if "event_id" in payload and not isinstance(payload["event_id"], str):
            raise InvalidRequest(
                "Invalid value for 'event_id': it must be a string.", param="event_id", code="invalid_value"
            )

    def _parse_create(self, payload: dict[str, Any]) -> tuple[CreateResponseRequest, dict[str, Any]]:
        kind = payload.get("type")
        if kind != CREATE_EVENT:
            raise InvalidRequest(
                f"Unsupported event type {_quoted(str(kind))}: this server takes '{CREATE_EVENT}' and "
                f"'{STEER_EVENT}' messages.",
                param="type",
                code="unsupported_event_type",
            )
        if payload.get("background"):
            raise InvalidRequest(
                "background is not supported in WebSocket mode.", param="background", code="unsupported_parameter"
            )
        if "generate" in payload and not isinstance(payload["generate"], bool):
            raise InvalidRequest(
                "Invalid type for 'generate': expected a boolean.", param="generate", code="invalid_type"
            )
        fields = {key: value for key, value in payload.items() if key not in ENVELOPE_FIELDS}
        return self._request(fields), fields

    def _request(self, fields: dict[str, Any]) -> CreateResponseRequest:
        request = parse_create_payload({**fields, "stream": True}, self.runtime.settings)
        check_combination(request)
        return request

    def refuse(self, create: SocketCreate, error: ApiError) -> dict[str, Any]:
        """The error answering an admitted create that cannot run (the tenant's requests hold every slot): it names
        the create, and a continuation forgets what it continued, as any failed one does."""
        self._forget(create.about)
        return error_event(error, create.about)

    def _forget(self, about: ClientEvent) -> None:
        """A failed continuation forgets what it continued: continuing it again is previous_response_not_found,
        whether it is the one kept or the one running now (which is then not kept when it ends)."""
        named = about.continues
        if named is None:
            return
        self._lanes.forget(named)

    async def steer(self, steer: Steer) -> list[dict[str, Any]]:
        """A `response.steer` for a response on this connection: accepted once stored and signalled (the job stops
        at its next safe boundary), to be committed when the response ends (`run`); else failed, input returned."""
        target = steer.previous_response_id
        lane = self._lanes.running(target)
        running = lane.steers if lane is not None else None
        queue = running or self._pending.get(target)
        if queue is None:
            if target in self._ended:
                return [self._failed(steer, "response_already_completed", f"Response {target!r} has completed.")]
            return [self._failed(steer, "response_not_found", f"No response {target!r} runs on this connection.")]
        steer.stream_id = queue.stream_id
        request = lane.request if lane is not None else None
        if running is not None and request is not None and (request.conversation or request.context_management):
            message = "Responses bound to a conversation or using automatic compaction do not support steering."
            return [self._failed(steer, "steering_not_supported", message)]
        if len(queue.steers) >= MAX_PENDING_STEERS:
            message = f"At most {MAX_PENDING_STEERS} steering submissions may wait for one response."
            return [self._failed(steer, "too_many_pending_steers", message)]
        steer.id = new_steer_id()
        if lane is not None and running is not None:
            try:
                await request_steer(self.runtime, target, stored=lane.stored)
            except Exception as error:
                logger.warning("could not store the steer of %s: %s", target, error)
                return [self._failed(steer, "response_not_active", "The steering input could not be stored.")]
            if lane.steers is not running:  # it ended while the steer was stored: nothing will commit it
                return [self._failed(steer, "response_already_completed", f"Response {target!r} has completed.")]
        queue.steers.append(steer)
        events = [accepted_event(steer, self._next_steer_sequence())]
        if running is None:  # waiting for client output: said at once, as it would have been at its end
            events.append(pending_event(steer, queue.required, self._next_steer_sequence()))
        return events

    def _next_steer_sequence(self) -> int:
        self._steer_sequence += 1
        return self._steer_sequence - 1

    def _failed(self, steer: Steer, code: str, message: str) -> dict[str, Any]:
        return failed_event(steer, code, message, self._next_steer_sequence())

    async def run(self, create: SocketCreate) -> AsyncGenerator[dict[str, Any], None]:
        """The events answering an admitted `response.create`: the response's whole stream, or an error event;
        then what the steers accepted meanwhile became: an automatic successor's stream (chained on it, with the
        same settings and their input), or their pending or failed events."""
        turn: SocketCreate | None = create
        if create.about.continues in self._pending:
            turn, refusal = self._with_pending(create)
            for event in refusal:
                yield event
        while turn is not None:
            final: dict[str, Any] | None = None
            created = False
            async for event in self._run_one(turn):
                created = created or event["type"] == "response.created"
                if is_terminal(event):
                    final = event["response"]
                yield event
            if turn.steers is not None and not created:
                for steer in turn.steers.steers:
                    yield self._failed(steer, "successor_creation_failed", "The successor response was not created.")
            lane = self._lanes.of(turn.about.stream_id)
            queue, lane.steers = lane.steers, None
            current, turn = turn, None
            if queue is not None and queue.steers:
                events, turn = self._commit(queue, final, current)
                for event in events:
                    yield event

    def _with_pending(self, create: SocketCreate) -> tuple[SocketCreate | None, list[dict[str, Any]]]:
        """A continuation of a response whose steers were pending: their input first, then its own."""
        queue = self._pending.pop(create.about.continues or "")
        given = create.fields.get("input")
        own = [{"type": "message", "role": "user", "content": given}] if isinstance(given, str) else given or []
        fields = {**create.fields, "input": [*queue.messages(), *own]}
        try:
            return replace(create, request=self._request(fields), fields=fields, steers=queue), []
        except ApiError as error:
            self._forget(create.about)
            failed = [self._failed(steer, "successor_creation_failed", error.message) for steer in queue.steers]
            return None, [error_event(error, create.about), *failed]

    def _commit(
        self, queue: SteerQueue, final: dict[str, Any] | None, create: SocketCreate
    ) -> tuple[list[dict[str, Any]], SocketCreate | None]:
        """What the steers of a response that ended become: its automatic successor, or their events."""
        if final is None or final["status"] not in CONTINUABLE_STATUSES:
            ended = "did not finish" if final is None else f"ended {final['status']}"
            message = f"Response {queue.response_id!r} {ended}; the steering input was not committed."
            return [self._failed(steer, "response_not_active", message) for steer in queue.steers], None
        if required := required_input(final["output"]):
            queue.required = required
            self._pending[final["id"]] = queue
            return [pending_event(steer, required, self._next_steer_sequence()) for steer in queue.steers], None
        fields = {**create.fields, "input": queue.messages(), "previous_response_id": final["id"]}
        try:
            request = self._request(fields)
        except ApiError as error:
            return [self._failed(steer, "successor_creation_failed", error.message) for steer in queue.steers], None
        about = ClientEvent(CREATE_EVENT, None, ("previous_response_id", final["id"]), create.about.stream_id)
        return [], SocketCreate(request, about, fields=fields, steers=queue)

    async def _run_one(self, create: SocketCreate) -> AsyncGenerator[dict[str, Any], None]:
        """One response's events, or an error event."""
        stream_id = create.about.stream_id
        lane = self._lanes.of(stream_id)
        final: dict[str, Any] | None = None
        try:
            # Each response.create counts as a request, as an HTTP create does (its tokens when it is submitted).
            await self.runtime.limits.admit_request(self.tenant)
            prepared = await self._prepare(create)
            lane.running, lane.forgotten = prepared.response.id, False
            lane.request, lane.stored = create.request, prepared.job.store
            lane.steers = SteerQueue(prepared.response.id, stream_id)
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
            self._forget(create.about)
            yield error_event(error, create.about)
            return
        except Exception as error:
            # An outage (database, Redis) is the same 503 the HTTP path answers; the connection stays usable.
            self._forget(create.about)
            unavailable = outage_error(error)
            if unavailable is None:
                logger.exception("a WebSocket response.create failed")
            else:
                logger.warning("a WebSocket response.create met an outage: %s", error)
            server_error = ServerError("The server had an error.", code="server_error")
            yield error_event(unavailable or server_error, create.about)
            return
        finally:
            if lane.running is not None:
                self._ended[lane.running] = None
                while len(self._ended) > ENDED_KEPT:
                    self._ended.popitem(last=False)
            lane.running, lane.request = None, None
        self._remember(lane, prepared, final)

    async def _prepare(self, create: SocketCreate) -> PreparedResponse:
        options = create.request.prompt_cache_options
        return await service.prepare(
            create.request,
            self.tenant,
            self.runtime,
            connection=self._lanes.kept(create.request.previous_response_id),
            # The unstored response a prompt_cache_options.comparison_response_id names, whichever lane made it.
            comparable=self._lanes.kept(options.comparison_response_id if options is not None else None),
            generate=create.generate,
        )

    def _remember(self, lane: Lane, prepared: PreparedResponse, final: dict[str, Any] | None) -> None:
        """Keep the response as its lane's last for a continuation (from any lane) when it finished well, nothing
        else holds it (store: false), and no continuation of it failed while it ran."""
        lane.last = None
        if final is None or final["status"] not in CONTINUABLE_STATUSES or prepared.job.store:
            return
        if lane.forgotten:
            return
        context = prepared.context
        turns = [*context.history, Turn(input_items=context.items, output_items=final["output"])]
        lane.last = ConnectionChain(final["id"], turns, context.chain_root or final["id"], prepared.fingerprint)
