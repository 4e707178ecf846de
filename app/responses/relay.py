"""Relaying one response's events to a client: stored ones first (replay), then live ones, each exactly once, and
always up to a terminal event: from the generation, else built from the stored row (or, for an unstored
response whose job died, or a foreground one whose database stayed unreachable, a `response.failed`). Each kind
of caller is one RelayMode."""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio

from app.errors import ServiceUnavailable, database_unavailable, is_outage
from app.events.open_items import OpenItems
from app.events.terminal import TERMINAL_STATUSES, is_terminal, terminal_event
from app.responses import repository
from app.runtime import Runtime
from app.schemas.events import ErrorEvent, ResponseLifecycleEvent
from app.schemas.items import STORED_ITEM
from app.schemas.responses import ResponseError, ResponseObject
from app.transport.base import Subscription

logger = logging.getLogger(__name__)

#: How long to wait for a live event before asking the database whether the response has ended meanwhile.
LIVE_POLL_S = 1.0
#: How long a live stream waits, once the database says the response has ended, for the events that the
#: executor publishes right after committing the final state.
TERMINAL_GRACE_S = 5.0
#: An unstored response's job found gone this many polls in a row ends its stream as failed (more than one: its
#: last events may still be on their way when its job's record goes).
DEAD_JOB_POLLS = 2
LOST_JOB_MESSAGE = "The worker generating this response stopped before it finished."


class DatabaseLost(ServiceUnavailable):
    """A foreground relay heard nothing, neither a live event nor the database, for longer than a lost generation
    takes to be ended (lease + reconcile interval): it cannot learn how the response ends before the database is
    back, and a client holding its connection is not kept waiting for that."""

    def __init__(self) -> None:
        unavailable = database_unavailable()
        super().__init__(unavailable.message, code=unavailable.code)


async def _stored_events(runtime: Runtime, response_id: str, after: int) -> list[dict[str, Any]]:
    async with runtime.database.read() as session:
        return await repository.events_after(session, response_id, after)


async def _has_ended(runtime: Runtime, response_id: str) -> bool | None:
    """Ended or gone; None while the database cannot say (an outage): the relay asks again later."""
    try:
        async with runtime.database.read() as session:
            status = await repository.get_status(session, response_id)
    except Exception as error:
        if not is_outage(error):
            raise
        return None
    return status is None or status in TERMINAL_STATUSES


async def _closing_events(runtime: Runtime, response_id: str, sequence_number: int) -> list[dict[str, Any]]:
    """The terminal event the stored row stands for, for a stream whose own terminal event never came (a
    reconciler ended it, its events were pruned, a live one was lost); an `error` event if it was deleted.
    (relay_events closes what the stream left open before it.)"""
    async with runtime.database.read() as session:
        row = await repository.get_by_id(session, response_id)
    if row is None or row.status not in TERMINAL_STATUSES:
        gone = ErrorEvent(
            sequence_number=sequence_number, code="response_not_found", message="This response was deleted."
        )
        return [gone.model_dump(mode="json")]
    return [terminal_event(row, sequence_number)]


def _unavailable_event(response_id: str, sequence_number: int) -> dict[str, Any]:
    """The end of a foreground stream whose database stayed unreachable: an error, naming where its end will be."""
    message = (
        "The database became unavailable while this response was generated, so how it ends is not known here: "
        f"read it (GET /v1/responses/{response_id}) once the service is back."
    )
    error = ErrorEvent(sequence_number=sequence_number, code=database_unavailable().code, message=message)
    return error.model_dump(mode="json")


def _failed_event(snapshot: ResponseObject, sequence_number: int, items: OpenItems) -> dict[str, Any]:
    """`response.failed` for a response whose end this relay cannot learn (an unstored one whose job died), with
    the output its stream saw (relay_events closes the open items and says `error` before it)."""
    failed = snapshot.model_copy(deep=True)
    failed.status = "failed"
    failed.error = ResponseError(code="server_error", message=LOST_JOB_MESSAGE)
    failed.output = [STORED_ITEM.validate_python(item) for item in items.output_so_far()]
    terminal = ResponseLifecycleEvent(type="response.failed", sequence_number=sequence_number, response=failed)
    return terminal.model_dump(mode="json")


async def _ending(
    runtime: Runtime, response_id: str, terminal: dict[str, Any], items: OpenItems, after_error: bool
) -> list[dict[str, Any]]:
    """The terminal event as the stream ends with it: after the `done` events of the items it left open (as the
    terminal response's output has them, else `incomplete`) and, for `response.failed`, an `error` event, when
    those did not come before it. Renumbered after what was inserted."""
    if not items.complete:  # a resumed replay: every event before the terminal one is stored
        items = OpenItems()
        for earlier in await _stored_events(runtime, response_id, -1):
            if earlier["sequence_number"] >= terminal["sequence_number"]:
                break
            items.see(earlier)
            after_error = earlier["type"] == "error"
    response = terminal.get("response") or {}
    ending = items.close(terminal["sequence_number"], response.get("output") or [])
    number = terminal["sequence_number"] + len(ending)
    error = response.get("error")
    if terminal["type"] == "response.failed" and error and not (after_error and not ending):
        said = ErrorEvent(sequence_number=number, code=error["code"], message=error["message"])
        ending.append(said.model_dump(mode="json"))
    if not ending:
        return [terminal]
    return [*ending, {**terminal, "sequence_number": terminal["sequence_number"] + len(ending)}]


async def _finish_from_store(runtime: Runtime, response_id: str, last: int) -> AsyncIterator[dict[str, Any]]:
    """The rest of a stored stream whose response has ended: its stored events, then a terminal one if none is."""
    for event in await _stored_events(runtime, response_id, last):
        yield event
        last = event["sequence_number"]
        if is_terminal(event):
            return
    for closing in await _closing_events(runtime, response_id, last + 1):
        yield closing


async def _finish_live(
    runtime: Runtime, response_id: str, subscription: Subscription, last: int
) -> AsyncIterator[dict[str, Any]]:
    """The rest of a live stream whose response has ended in the database.

    The final state is committed before its last events are published, so they are usually on their way:
    relay them, and end with a terminal event built from the stored row if they do not come.
    """
    deadline = anyio.current_time() + TERMINAL_GRACE_S
    while (remaining := deadline - anyio.current_time()) > 0:
        try:
            live = await subscription.next(remaining)
        except Exception as error:
            if not is_outage(error):
                raise
            break
        if live is None:
            break
        if live["sequence_number"] <= last:
            continue
        yield live
        last = live["sequence_number"]
        if is_terminal(live):
            return
    for closing in await _closing_events(runtime, response_id, last + 1):
        yield closing


class _LiveFeed:
    """The subscription, until the queue (Redis) fails under it; then only the database is followed."""

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.broken = False

    async def next(self) -> dict[str, Any] | None:
        if self.broken:
            await anyio.sleep(LIVE_POLL_S)
            return None
        try:
            return await self.subscription.next(LIVE_POLL_S)
        except Exception as error:
            if not is_outage(error):
                raise
            logger.warning("lost the live event feed (%s); following the database instead", error)
            self.broken = True
            return None


async def _job_alive(runtime: Runtime, response_id: str) -> bool:
    try:
        return await runtime.queue.job_alive(response_id)
    except Exception as error:
        if not is_outage(error):
            raise
        return False  # with the queue gone, so is the only way its events could reach us


class RelayMode(enum.Enum):
    """How a response's events reach one client: a mode for each kind of caller."""

    #: A background stream, at its create or read again (GET ?stream=true): its events are stored, so the
    #: database fills any gap in the live feed and a late reader replays them; the generation is not the
    #: reader's to stop.
    REPLAY = "replay"
    #: A foreground stream of a stored response: live events; the stored row ends it if its own terminal event
    #: is lost; the generation stops when the client goes away.
    STORED = "stored"
    #: A foreground stream of an unstored response (or a compaction's summary): live events only; if its job
    #: dies, the stream ends failed, from the response as created; the generation stops when the client goes.
    UNSTORED = "unstored"

    @property
    def replays(self) -> bool:
        return self is RelayMode.REPLAY

    @property
    def has_row(self) -> bool:
        """The response has a row whose status tells when it ended without a live terminal event reaching us."""
        return self is not RelayMode.UNSTORED

    @property
    def foreground(self) -> bool:
        """A client holding its connection for the response: its generation stops when the client goes away."""
        return self is not RelayMode.REPLAY


async def relay_events(
    runtime: Runtime,
    response_id: str,
    subscription: Subscription,
    mode: RelayMode,
    *,
    after: int = -1,
    snapshot: ResponseObject | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Events with sequence_number > `after`, in order, without gaps or repeats, up to a terminal one; but for
    a foreground stream whose database stays unreachable past lease + interval, an `error` ends it.

    `snapshot`: the response as created, which RelayMode.UNSTORED needs (its job died: the stream ends failed);
    a RelayMode.STORED relay without one (a JSON create, which can still answer 503) raises DatabaseLost where a
    stream would send that error."""
    assert mode is not RelayMode.UNSTORED or snapshot is not None, "an unstored relay needs a snapshot"
    assert mode is not RelayMode.REPLAY or snapshot is None, "a replay ends from the stored row"
    items = OpenItems(complete=after < 0)
    relay = _relay(runtime, response_id, subscription, mode, after=after, snapshot=snapshot, items=items)
    after_error = False
    async with aclosing(relay):
        async for event in relay:
            if is_terminal(event):
                # One place for every ending: a terminal event from the row, a lost job, or a run whose final
                # write lost, closes what the stream opened first.
                for ending in await _ending(runtime, response_id, event, items, after_error):
                    yield ending
                continue  # the relay ends after it (by itself: it knows then not to cancel the generation)
            items.see(event)
            after_error = event["type"] == "error"
            yield event


async def _relay(
    runtime: Runtime,
    response_id: str,
    subscription: Subscription,
    mode: RelayMode,
    *,
    after: int,
    snapshot: ResponseObject | None,
    items: OpenItems,
) -> AsyncGenerator[dict[str, Any], None]:
    replay, stored = mode.replays, mode.has_row
    last = after
    ended = False
    feed = _LiveFeed(subscription)
    dead_polls = 0
    settings = runtime.settings
    # How long a foreground client waits, hearing neither a live event nor the database: by then a generation
    # that died would have been ended, were the database there.
    patience_s = settings.lease_s + settings.reconcile_interval_s if mode.foreground and stored else None
    # time.monotonic, not anyio.current_time (the same clock on asyncio): this one is read at every live event,
    # and anyio's looks its backend up each call.
    heard_at = time.monotonic()
    try:
        if replay:
            for event in await _stored_events(runtime, response_id, last):
                yield event
                last = event["sequence_number"]
                if is_terminal(event):
                    ended = True
                    return
            if await _has_ended(runtime, response_id):  # over before we came: its terminal event was never stored
                for closing in await _closing_events(runtime, response_id, last + 1):
                    yield closing
                ended = True
                return
        while True:
            live = await feed.next()
            if live is None:
                has_ended = await _has_ended(runtime, response_id) if stored else False
                if has_ended:
                    finish = (
                        _finish_from_store(runtime, response_id, last)
                        if replay or feed.broken
                        else _finish_live(runtime, response_id, subscription, last)
                    )
                    async for rest in finish:
                        yield rest
                    ended = True
                    return
                if has_ended is not None:
                    heard_at = time.monotonic()
                elif patience_s is not None and time.monotonic() - heard_at > patience_s:
                    # Not `ended`: the generation is cancelled (below), so that it cannot end otherwise later.
                    logger.warning("the database stayed unreachable while %s ran: giving up on it", response_id)
                    if snapshot is None:
                        raise DatabaseLost()
                    # An error, and no terminal event: how the response ends is the database's to say once it is
                    # back (a `response.failed` here could be contradicted by a run that stored its end then).
                    yield _unavailable_event(response_id, last + 1)
                    return
                if replay and feed.broken:
                    for event in await _stored_events(runtime, response_id, last):
                        yield event
                        last = event["sequence_number"]
                elif not stored and snapshot is not None:
                    dead_polls = 0 if await _job_alive(runtime, response_id) else dead_polls + 1
                    if dead_polls >= DEAD_JOB_POLLS:
                        yield _failed_event(snapshot, last + 1, items)
                        ended = True
                        return
                continue
            heard_at = time.monotonic()
            sequence = live["sequence_number"]
            if sequence <= last:
                continue
            if replay and sequence > last + 1:
                for missed in await _stored_events(runtime, response_id, last):
                    if missed["sequence_number"] >= sequence:
                        break
                    yield missed
            yield live
            last = sequence
            if is_terminal(live):
                ended = True
                return
    finally:
        with anyio.CancelScope(shield=True):
            await subscription.close()
            if not ended and mode.foreground:
                try:
                    await runtime.queue.cancel(response_id)
                except Exception as error:  # the queue is down: the generation's own checks end it
                    if not is_outage(error):
                        raise
                    logger.warning("could not signal cancel for %s: %s", response_id, error)
