"""Relaying one response's events to a client: stored ones first (replay), then live ones, each exactly once, and
always up to a terminal event: from the generation, else built from the stored row (or, for an unstored
response whose job died, a `response.failed`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio

from app.db.repositories import responses as repository
from app.errors import is_outage
from app.queue.base import Subscription
from app.runtime import Runtime
from app.schemas.events import (
    ContentPartEvent,
    ErrorEvent,
    OutputItemEvent,
    OutputTextDeltaEvent,
    OutputTextDoneEvent,
    ReasoningTextDeltaEvent,
    ReasoningTextDoneEvent,
    ResponseEvent,
    ResponseLifecycleEvent,
)
from app.schemas.items import OutputText, ReasoningText
from app.schemas.responses import TERMINAL_STATUSES, ResponseError, ResponseObject
from app.services.assembly import STORED_ITEM
from app.services.snapshots import response_from_row

logger = logging.getLogger(__name__)

# NOTE: `response.cancelled` is not in the SDK's event union; it ends the stream of a cancelled background response.
TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed", "response.cancelled"})
#: How long to wait for a live event before asking the database whether the response has ended meanwhile.
LIVE_POLL_S = 1.0
#: How long a live stream waits, once the database says the response has ended, for the events that the
#: executor publishes right after committing the final state.
TERMINAL_GRACE_S = 5.0
#: An unstored response's job found gone this many polls in a row ends its stream as failed (more than one: its
#: last events may still be on their way when its job's record goes).
DEAD_JOB_POLLS = 2
LOST_JOB_MESSAGE = "The worker generating this response stopped before it finished."


class OpenItems:
    """The output items a relayed stream opened and has not closed, with their text so far: a terminal event
    that does not follow their `done` events (the relay made it from the row, or the run that sent it lost the
    final write) gets them first, so that a reader (the SDK's stream accumulator) sees every item end."""

    def __init__(self, *, complete: bool = True) -> None:
        #: False for a replay resumed after some event: what was opened before it was not seen here.
        self.complete = complete
        self._items: dict[str, dict[str, Any]] = {}  # item id -> the output_item.added event
        self._parts: dict[str, dict[str, Any]] = {}  # item id -> its content_part.added event
        #: Each open item's deltas, joined only when it is closed here (a string grown by every delta would be
        #: copied whole each time: quadratic in a long answer, on every token).
        self._text: dict[str, list[str]] = {}
        self._done: dict[str, tuple[int, dict[str, Any]]] = {}  # item id -> (output index, item as done)

    def see(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "response.output_item.added":
            self._items[event["item"]["id"]] = event
        elif kind == "response.output_item.done":
            self._done[event["item"]["id"]] = (event["output_index"], event["item"])
            for known in (self._items, self._parts, self._text):
                known.pop(event["item"]["id"], None)
        elif kind == "response.content_part.added":
            self._parts[event["item_id"]] = event
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta"):
            self._text.setdefault(event["item_id"], []).append(event["delta"])

    def _seen(self, item_id: str) -> str:
        return "".join(self._text.get(item_id, ()))

    def _closed(self, final_output: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
        """(output index, item as it ends) of each open item: as `final_output` has it (the response's own
        output, by id), else with its text so far, `incomplete`."""
        final = {item.get("id"): item for item in final_output}
        closed = []
        for item_id, added in sorted(self._items.items(), key=lambda entry: entry[1]["output_index"]):
            if item_id in final:
                item = final[item_id]
            else:
                text = self._seen(item_id)
                part = (
                    ReasoningText(text=text).model_dump()
                    if added["item"]["type"] == "reasoning"
                    else OutputText(type="output_text", text=text).model_dump()
                )
                item = {**added["item"], "content": [part], "status": "incomplete"}
            closed.append((added["output_index"], STORED_ITEM.validate_python(item).model_dump(mode="json")))
        return closed

    def output_so_far(self) -> list[dict[str, Any]]:
        """Every item the stream saw, the open ones closed `incomplete`, in output order."""
        return [item for _, item in sorted([*self._done.values(), *self._closed([])], key=lambda entry: entry[0])]

    def close(self, sequence_number: int, final_output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The `done` events of every open item, numbered from `sequence_number`."""
        events: list[ResponseEvent] = []
        for index, item in self._closed(final_output):
            item_id = item["id"]
            text = item["content"][0].get("text", "") if item.get("content") else ""
            seen = self._seen(item_id)
            rest = text[len(seen) :] if text.startswith(seen) else ""
            reasoning = item["type"] == "reasoning"
            if rest and (reasoning or item_id in self._parts):  # the final text said more than the deltas it saw
                delta = ReasoningTextDeltaEvent if reasoning else OutputTextDeltaEvent
                events.append(
                    delta(
                        sequence_number=sequence_number + len(events),
                        item_id=item_id,
                        output_index=index,
                        content_index=0,
                        delta=rest,
                    )
                )
            number = sequence_number + len(events)
            if reasoning:
                events.append(
                    ReasoningTextDoneEvent(
                        sequence_number=number, item_id=item_id, output_index=index, content_index=0, text=text
                    )
                )
            elif item_id in self._parts:
                part = OutputText.model_validate(item["content"][0])
                events.append(
                    OutputTextDoneEvent(
                        sequence_number=number, item_id=item_id, output_index=index, content_index=0, text=text
                    )
                )
                events.append(
                    ContentPartEvent(
                        type="response.content_part.done",
                        sequence_number=number + 1,
                        item_id=item_id,
                        output_index=index,
                        content_index=0,
                        part=part,
                    )
                )
            events.append(
                OutputItemEvent(
                    type="response.output_item.done",
                    sequence_number=sequence_number + len(events),
                    output_index=index,
                    item=STORED_ITEM.validate_python(item),
                )
            )
        return [event.model_dump(mode="json") for event in events]


async def _stored_events(runtime: Runtime, response_id: str, after: int) -> list[dict[str, Any]]:
    async with runtime.sessionmaker() as session:
        return await repository.events_after(session, response_id, after)


async def _has_ended(runtime: Runtime, response_id: str) -> bool:
    """Ended or gone; False too while the database cannot say (an outage): the relay asks again later."""
    try:
        async with runtime.sessionmaker() as session:
            status = await repository.get_status(session, response_id)
    except Exception as error:
        if not is_outage(error):
            raise
        return False
    return status is None or status in TERMINAL_STATUSES


async def _closing_events(runtime: Runtime, response_id: str, sequence_number: int) -> list[dict[str, Any]]:
    """The terminal event the stored row stands for, for a stream whose own terminal event never came (a
    reconciler ended it, its events were pruned, a live one was lost); an `error` event if it was deleted.
    (relay_events closes what the stream left open before it.)"""
    async with runtime.sessionmaker() as session:
        row = await repository.get_by_id(session, response_id)
    if row is None or row.status not in TERMINAL_STATUSES:
        gone = ErrorEvent(
            sequence_number=sequence_number, code="response_not_found", message="This response was deleted."
        )
        return [gone.model_dump(mode="json")]
    event = ResponseLifecycleEvent(
        type=f"response.{row.status}", sequence_number=sequence_number, response=response_from_row(row)
    )
    return [event.model_dump(mode="json")]


def _job_lost_event(snapshot: ResponseObject, sequence_number: int, items: OpenItems) -> dict[str, Any]:
    """`response.failed` for an unstored response whose job can no longer finish, with the output its stream
    saw (relay_events closes the open items and says `error` before it)."""
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
        if event["type"] in TERMINAL_EVENT_TYPES:
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
        if live["type"] in TERMINAL_EVENT_TYPES:
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


async def relay_events(
    runtime: Runtime,
    response_id: str,
    subscription: Subscription,
    *,
    after: int,
    replay: bool,
    stored: bool,
    cancel_on_exit: bool,
    snapshot: ResponseObject | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Events with sequence_number > `after`, in order, without gaps or repeats, up to a terminal one.

    `replay`: the events are stored too (background + stream), so gaps in the live feed are filled from the
    database. `stored`: the response has a row whose status tells when it ended without a live terminal event
    reaching us. `snapshot`: an unstored response as created; if its job dies, the stream ends failed.
    `cancel_on_exit`: a foreground stream, whose generation stops when its client goes away.
    """
    items = OpenItems(complete=after < 0)
    relay = _relay(
        runtime,
        response_id,
        subscription,
        after=after,
        replay=replay,
        stored=stored,
        cancel_on_exit=cancel_on_exit,
        snapshot=snapshot,
        items=items,
    )
    after_error = False
    async with aclosing(relay):
        async for event in relay:
            if event["type"] in TERMINAL_EVENT_TYPES:
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
    *,
    after: int,
    replay: bool,
    stored: bool,
    cancel_on_exit: bool,
    snapshot: ResponseObject | None,
    items: OpenItems,
) -> AsyncGenerator[dict[str, Any], None]:
    last = after
    ended = False
    feed = _LiveFeed(subscription)
    dead_polls = 0
    try:
        if replay:
            for event in await _stored_events(runtime, response_id, last):
                yield event
                last = event["sequence_number"]
                if event["type"] in TERMINAL_EVENT_TYPES:
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
                if stored and await _has_ended(runtime, response_id):
                    finish = (
                        _finish_from_store(runtime, response_id, last)
                        if replay or feed.broken
                        else _finish_live(runtime, response_id, subscription, last)
                    )
                    async for rest in finish:
                        yield rest
                    ended = True
                    return
                if replay and feed.broken:
                    for event in await _stored_events(runtime, response_id, last):
                        yield event
                        last = event["sequence_number"]
                elif not stored and snapshot is not None:
                    dead_polls = 0 if await _job_alive(runtime, response_id) else dead_polls + 1
                    if dead_polls >= DEAD_JOB_POLLS:
                        yield _job_lost_event(snapshot, last + 1, items)
                        ended = True
                        return
                continue
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
            if live["type"] in TERMINAL_EVENT_TYPES:
                ended = True
                return
    finally:
        with anyio.CancelScope(shield=True):
            await subscription.close()
            if not ended and cancel_on_exit:
                try:
                    await runtime.queue.cancel(response_id)
                except Exception as error:  # the queue is down: the generation's own checks end it
                    if not is_outage(error):
                        raise
                    logger.warning("could not signal cancel for %s: %s", response_id, error)
