"""Steering a running response on a WebSocket connection (`response.steer`, as the SDK's docstrings describe it).

A steer is checked as it arrives, then accepted at once (`response.steer.accepted`, with its id) once the server owns
it: stored on the response's row (when it has one), then signalled to whoever runs it, as a cancel travels
(app/responses/cancellation.py), so that a missed signal is read by the job's next lease renewal. The job stops at
its next safe boundary (between tokens, never inside a call's arguments nor a structured output) and ends
`incomplete`, reason `steered`; or it completes first. The session then commits the steers: an automatic successor
chained on the response, with their input and the settings of the create it came from, whose `response.created`
is the commit point; `response.steer.pending` when the response waits for client tool output or an approval (the
input is prepended to the client's continuation); `response.steer.failed`, the input returned, when neither can be.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.db.base import utc_now
from app.errors import ApiError, InvalidRequest
from app.ids import new_id
from app.jobs import repository as jobs
from app.responses.parsing import parse_create_payload
from app.runtime import Runtime

logger = logging.getLogger(__name__)

STEER_EVENT = "response.steer"
#: The only fields a `response.steer` takes (the SDK: "accepts only type, previous_response_id, and input"), with
#: `event_id`, which this server takes on every client event so that an error can name it.
STEER_FIELDS = frozenset({"type", "previous_response_id", "input", "event_id"})
#: What a steering message may hold (the SDK: "only type, role, and content").
MESSAGE_FIELDS = frozenset({"type", "role", "content"})
CONTENT_TYPES = frozenset({"input_text", "input_image", "input_file"})
#: Accepted steers waiting for one response: a further one is `too_many_pending_steers`.
MAX_PENDING_STEERS = 16
#: Output items that wait for the client, and the stub of the input that answers each (the SDK's
#: ResponseSteerRequiredInput): item type -> (stub type, the item's fields the stub copies, as stub field).
REQUIRED_INPUT: dict[str, tuple[str, dict[str, str]]] = {
    "function_call": ("function_call_output", {"call_id": "call_id", "name": "name"}),
    "custom_tool_call": ("custom_tool_call_output", {"call_id": "call_id"}),
    "mcp_approval_request": ("mcp_approval_response", {"id": "approval_request_id"}),
}


class SteerInvalid(Exception):
    """A steer whose input cannot be taken: answered with `response.steer.failed` (`invalid_input`)."""


@dataclass(slots=True)
class Steer:
    """One steering submission: its input as sent (returned if it fails) and as the user messages it appends."""

    previous_response_id: str
    input: str | list[Any]
    messages: list[dict[str, Any]]
    id: str | None = None
    stream_id: str | None = None


@dataclass(slots=True)
class SteerQueue:
    """The steers accepted for one response, in submission order, waiting for their commit."""

    response_id: str
    stream_id: str | None
    steers: list[Steer] = field(default_factory=list)
    #: What the response waits for from the client (its steers are pending until a continuation brings it).
    required: list[dict[str, Any]] = field(default_factory=list)

    def messages(self) -> list[dict[str, Any]]:
        return [message for steer in self.steers for message in steer.messages]


def _message(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise SteerInvalid("Each steering input item must be an object.")
    if set(item) - MESSAGE_FIELDS:
        raise SteerInvalid(
            f"A steering message takes only {sorted(MESSAGE_FIELDS)}; got {sorted(str(key) for key in item)}."
        )
    if item.get("type", "message") != "message" or item.get("role") != "user":
        raise SteerInvalid("Steering accepts only messages with the 'user' role.")
    content = item.get("content")
    if isinstance(content, str):
        return {"type": "message", "role": "user", "content": content}
    if not isinstance(content, list) or not content:
        raise SteerInvalid("A steering message's content must be a string or a non-empty array of parts.")
    if any(not isinstance(part, dict) or part.get("type") not in CONTENT_TYPES for part in content):
        raise SteerInvalid(f"A steering message's content parts must be of type {sorted(CONTENT_TYPES)}.")
    return {"type": "message", "role": "user", "content": content}


def parse_steer(payload: dict[str, Any], runtime: Runtime) -> Steer:
    """A `response.steer`: an ApiError (answered with an `error`) when it names no response, SteerInvalid (answered
    with `response.steer.failed`) when its input or its other fields are not what steering takes."""
    target = payload.get("previous_response_id")
    if not isinstance(target, str) or not target:
        raise InvalidRequest(
            "response.steer needs 'previous_response_id': the id of the response to steer.",
            param="previous_response_id",
            code="missing_required_parameter" if target is None else "invalid_type",
        )
    given = payload.get("input")
    steer = Steer(target, given if isinstance(given, str | list) else [], [])
    if extra := sorted(str(key) for key in set(payload) - STEER_FIELDS):
        # `stream_id` among them: the target response's lane is the steer's.
        raise _Invalid(steer, f"response.steer takes only type, previous_response_id and input; got {extra}.")
    try:
        if isinstance(given, str) and given:
            steer.messages = [{"type": "message", "role": "user", "content": given}]
        elif isinstance(given, list) and given:
            # Returned (if it fails) as the messages it stands for: the SDK's type requires each one's `type`.
            steer.messages = [_message(item) for item in given]
            steer.input = steer.messages
        else:
            raise SteerInvalid("'input' must be a non-empty string or a non-empty array of user messages.")
        # The parts themselves (an image's URL, a file's id...) are checked as a create's input is.
        parse_create_payload({"input": steer.messages, "stream": True}, runtime.settings)
    except SteerInvalid as error:
        raise _Invalid(steer, str(error)) from None
    except ApiError as error:
        raise _Invalid(steer, error.message) from None
    return steer


class _Invalid(SteerInvalid):
    def __init__(self, steer: Steer, message: str) -> None:
        super().__init__(message)
        self.steer = steer


def invalid_steer(error: SteerInvalid) -> Steer | None:
    """The steer an invalid one carried (to return its input), when it got that far."""
    return error.steer if isinstance(error, _Invalid) else None


def accepted_event(steer: Steer, sequence_number: int) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "response.steer.accepted",
        "sequence_number": sequence_number,
        "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id},
    }
    return _on_lane(event, steer.stream_id)


def failed_event(steer: Steer, code: str, message: str, sequence_number: int) -> dict[str, Any]:
    returned: dict[str, Any] = {"previous_response_id": steer.previous_response_id, "input": steer.input}
    if steer.id is not None:
        returned["id"] = steer.id
    event: dict[str, Any] = {
        "type": "response.steer.failed",
        "sequence_number": sequence_number,
        "error": {"type": "invalid_request_error", "code": code, "message": message},
        "steer": returned,
    }
    return _on_lane(event, steer.stream_id)


def pending_event(steer: Steer, required: list[dict[str, Any]], sequence_number: int) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "response.steer.pending",
        "sequence_number": sequence_number,
        "reason": "waiting_for_required_input",
        "required_input": required,
        "steer": {"id": steer.id, "previous_response_id": steer.previous_response_id},
    }
    return _on_lane(event, steer.stream_id)


def _on_lane(event: dict[str, Any], stream_id: str | None) -> dict[str, Any]:
    return event if stream_id is None else {**event, "stream_id": stream_id}


def required_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stubs of what the client owes a finished response (its client tool calls, its approval requests)."""
    stubs = []
    for item in output:
        wanted = REQUIRED_INPUT.get(item.get("type", ""))
        if wanted is None:
            continue
        kind, fields = wanted
        stubs.append({"type": kind, **{stub: item.get(source) for source, stub in fields.items()}})
    return stubs


async def request_steer(runtime: Runtime, response_id: str, *, stored: bool) -> None:
    """Store the steer on the response's row (a stored response), then signal whoever runs it: the stored request
    outlives the signal (the job's lease renewals read it). Raises when it could not be stored."""
    if stored:
        async with runtime.database.transaction() as session:
            await jobs.request_steer(session, response_id, now=utc_now())
    try:
        await runtime.queue.steer(response_id)
    except Exception as error:
        logger.warning("could not signal the steer of %s (%s); its job reads it on its next beat", response_id, error)


def new_steer_id() -> str:
    return new_id("steer")
