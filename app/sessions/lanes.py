"""Lanes (`stream_id`) on one WebSocket connection: the requests of one lane run one at a time in the order sent;
lanes run side by side, up to RESPONSES_WEBSOCKET_MAX_LANES at once; a lane may continue (branch from) any
response an earlier request made, on whatever lane."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from app.errors import ApiError, InvalidRequest
from app.responses.context import ConnectionChain
from app.responses.schemas import CreateResponseRequest
from app.sessions.steering import SteerQueue

#: How many lanes' state a connection keeps once their work is done (their last unstored response): the oldest
#: idle ones go first.
KEPT_LANES = 64


@dataclass(slots=True)
class Lane:
    """One lane's state: the response running on it now, and its last unstored response, kept for a continuation."""

    stream_id: str | None
    #: The response running now, and whether a continuation of it failed meanwhile (then it is not kept).
    running: str | None = None
    forgotten: bool = False
    #: The running response's create and its create fields, and whether it is stored (a steer is stored on it).
    request: CreateResponseRequest | None = None
    stored: bool = False
    #: The steers accepted for the running response.
    steers: SteerQueue | None = None
    #: The lane's last response, when it finished well and was not stored.
    last: ConnectionChain | None = None


class Lanes:
    """A connection's lanes by `stream_id` (None: the requests that named none)."""

    def __init__(self) -> None:
        self._lanes: OrderedDict[str | None, Lane] = OrderedDict()

    def of(self, stream_id: str | None) -> Lane:
        lane = self._lanes.get(stream_id)
        if lane is None:
            lane = self._lanes[stream_id] = Lane(stream_id)
            idle = [key for key, kept in self._lanes.items() if kept.running is None and key != stream_id]
            for key in idle[: max(len(self._lanes) - KEPT_LANES, 0)]:
                del self._lanes[key]
        return lane

    def running(self, response_id: str) -> Lane | None:
        """The lane whose running response this is."""
        return next((lane for lane in self._lanes.values() if lane.running == response_id), None)

    def kept(self, response_id: str | None) -> ConnectionChain | None:
        """The unstored response a continuation names, whichever lane made it."""
        if response_id is None:
            return None
        return next(
            (lane.last for lane in self._lanes.values() if lane.last and lane.last.response_id == response_id), None
        )

    def forget(self, response_id: str) -> None:
        """A failed continuation forgets what it continued: the one kept, or the one running (then not kept)."""
        for lane in self._lanes.values():
            if lane.last is not None and lane.last.response_id == response_id:
                lane.last = None
            if lane.running == response_id:
                lane.forgotten = True

    def __iter__(self) -> Any:
        return iter(self._lanes.values())


def too_many_lanes(limit: int) -> ApiError:
    """A create that would open one lane more than a connection may run at once."""
    return InvalidRequest(
        f"At most {limit} lanes (stream_id) may have work at once on one connection; send this one on a lane "
        "that has work, or once one is done.",
        param="stream_id",
        code="too_many_lanes",
    )
