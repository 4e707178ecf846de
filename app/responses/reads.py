"""Reading stored responses: retrieve, replay a background stream, list, list a response's input items, delete.
The stored row is the truth."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from app.db.models import ResponseRow
from app.db.session import Database
from app.errors import InvalidRequest, response_not_found
from app.events.snapshot import response_from_row
from app.events.terminal import TERMINAL_STATUSES
from app.items.includes import with_includes
from app.items.paging import stored_item_page
from app.items.repository import INPUT_ITEMS
from app.read_cache.cache import CachedJson, ReadTicket, ResponseJsonCache
from app.responses import repository
from app.responses.relay import RelayMode, relay_events
from app.responses.schemas import DeletedResponse, InputItemList, ResponseFilters, ResponseList
from app.runtime import Runtime
from app.schemas.paging import PageRequest, cursor_page, page_after
from app.schemas.responses import ResponseObject

NO_INCLUDES: frozenset[str] = frozenset()


async def read_response(
    database: Database, response_id: str, tenant: str, includes: frozenset[str] = frozenset()
) -> ResponseObject:
    """GET a response (in a read session: no transaction; see create_read_sessionmaker)."""
    return (await _read_row(database, response_id, tenant, includes))[1]


async def _read_row(
    database: Database, response_id: str, tenant: str, includes: frozenset[str]
) -> tuple[ResponseRow, ResponseObject]:
    """The stored row and the Response it makes, with `includes`; a 404 when there is none."""
    async with database.read() as session:
        row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    response = response_from_row(row)
    if includes:
        response.output = with_includes(response.output, includes)
    return row, response


async def read_response_json(
    database: Database,
    cache: ResponseJsonCache,
    response_id: str,
    tenant: str,
    includes: frozenset[str] = frozenset(),
) -> bytes:
    """GET a response as JSON: from `cache` with no round trip while its entry is fresh (notifications arrive
    and it was checked within the cache's staleness bound), else while the stored row's updated_at is the one it
    was built from (a one-column Core query on a bare connection), else built from the row (and kept when the
    response has ended: one still running changes at every step). Either way no transaction; a row deleted or
    changed on any node is never served stale past the cache's bound (app/read_cache/cache.py)."""
    fresh = cache.fresh(tenant, response_id, includes)
    if fresh is not None:
        return fresh.body
    cached = cache.get(tenant, response_id, includes)
    ticket = cache.ticket()
    if cached is not None:
        async with database.read_connection() as connection:
            version = await repository.get_response_version(connection, response_id, tenant)
        if version == cached.version:
            cache.confirm(tenant, response_id, includes, ticket)
            return cached.body
        cache.discard(tenant, response_id, includes)
        if version is None:
            raise response_not_found(response_id)
    row, response = await _read_row(database, response_id, tenant, includes)
    body = response.model_dump_json().encode()
    if row.status in TERMINAL_STATUSES:
        cache.put(tenant, response_id, includes, CachedJson(row.updated_at, body), ticket)
    return body


def _row_json(cache: ResponseJsonCache, tenant: str, row: ResponseRow, ticket: ReadTicket) -> bytes:
    """A row just read (under `ticket`) as JSON: the cached one while it was built from this very version."""
    cached = cache.get(tenant, row.id, NO_INCLUDES)
    if cached is not None and cached.version == row.updated_at:
        cache.confirm(tenant, row.id, NO_INCLUDES, ticket)
        return cached.body
    body = response_from_row(row).model_dump_json().encode()
    if row.status in TERMINAL_STATUSES:
        cache.put(tenant, row.id, NO_INCLUDES, CachedJson(row.updated_at, body), ticket)
    return body


async def stream_stored_response(
    runtime: Runtime, response_id: str, tenant: str, starting_after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """GET ?stream=true: replay the stored events after `starting_after`, then follow the live ones."""
    async with runtime.database.read() as session:
        row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    if not (row.background and row.stream):
        raise InvalidRequest(
            "stream=true is only available for responses created with background and stream.",
            param="stream",
            code="invalid_value",
        )
    subscription = await runtime.queue.bus.subscribe(response_id)
    after = -1 if starting_after is None else starting_after
    return relay_events(runtime, response_id, subscription, RelayMode.REPLAY, after=after)


async def _page_rows(
    database: Database, tenant: str, filters: ResponseFilters, page: PageRequest
) -> tuple[list[ResponseRow], bool]:
    """A page of the caller's stored responses, newest first, filtered (in a read session), and whether more follow."""
    async with database.read() as session:
        return await page_after(
            page,
            partial(repository.get_response, session, tenant=tenant),
            lambda after: repository.page_responses(
                session, tenant, filters, limit=page.limit, order=page.order, after=after
            ),
            unknown_after=lambda after: f"Invalid 'after': no response '{after}'.",
        )


async def list_responses(database: Database, tenant: str, filters: ResponseFilters, page: PageRequest) -> ResponseList:
    """GET /v1/responses: a page of the caller's stored responses, newest first, filtered (in a read session)."""
    rows, has_more = await _page_rows(database, tenant, filters, page)
    return cursor_page(ResponseList, [response_from_row(row) for row in rows], has_more)


async def list_responses_json(
    database: Database, cache: ResponseJsonCache, tenant: str, filters: ResponseFilters, page: PageRequest
) -> bytes:
    """list_responses as the JSON ResponseList dumps to. The page is read as each row's id, updated_at and status
    first; a finished response whose JSON is cached from that very updated_at is answered from `cache`, and only
    the others' rows are read in full (a second query, none when every row was cached). The page itself is kept
    while notifications arrive, and answered with no query until one of the tenant's responses changes (or the
    cache's staleness bound passes)."""
    query = repr((filters, page))
    fresh = cache.fresh_page(tenant, query)
    if fresh is not None:
        return fresh
    ticket = cache.ticket()
    async with database.read() as session:
        versions, has_more = await page_after(
            page,
            partial(repository.get_response, session, tenant=tenant),
            lambda after: repository.page_response_versions(
                session, tenant, filters, limit=page.limit, order=page.order, after=after
            ),
            unknown_after=lambda after: f"Invalid 'after': no response '{after}'.",
        )
        answers: dict[str, bytes] = {}
        for version in versions:
            cached = cache.get(tenant, version.id, NO_INCLUDES)
            if cached is not None and cached.version == version.updated_at:
                cache.confirm(tenant, version.id, NO_INCLUDES, ticket)
                answers[version.id] = cached.body
        unread = [version.id for version in versions if version.id not in answers]
        rows = await repository.get_responses(session, tenant, unread) if unread else []
    answers.update((row.id, _row_json(cache, tenant, row, ticket)) for row in rows)
    # A row deleted between the two reads is left out, as it would be from a page read a moment later.
    ids = [version.id for version in versions if version.id in answers]
    ends = {"first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None, "has_more": has_more}
    body = b"".join(
        (
            b'{"object":"list","data":[',
            b",".join(answers[response_id] for response_id in ids),
            b"],",
            json.dumps(ends, separators=(",", ":"), ensure_ascii=False)[1:].encode(),
        )
    )
    cache.put_page(tenant, query, body, ticket)
    return body


async def list_input_items(
    database: Database, response_id: str, tenant: str, page: PageRequest, *, includes: frozenset[str] = frozenset()
) -> InputItemList:
    """GET /v1/responses/{id}/input_items: one page of the items a stored request gave."""
    async with database.read() as session:
        if await repository.get_response(session, response_id, tenant) is None:
            raise response_not_found(response_id)
        return await stored_item_page(
            session,
            INPUT_ITEMS,
            response_id,
            page,
            InputItemList,
            includes=includes,
            unknown_after=lambda after: f"Invalid 'after': no input item '{after}' in response '{response_id}'.",
        )


#: How a delete stops a response still queued or generating (the API: cancel it, then wait until it ended).
StopRunning = Callable[[str], Awaitable[None]]


async def delete_response(
    database: Database,
    response_id: str,
    tenant: str,
    *,
    stop_running: StopRunning | None,
    cache: ResponseJsonCache | None = None,
) -> DeletedResponse:
    """Delete a stored response with its items and events. One still queued or generating is stopped first with
    `stop_running`, so that its generation does not go on for a response that is gone; with None (the operator
    CLI, which has no queue to reach a generation through) it is a 400 instead. This process's `cache` forgets it
    at once: a GET right after the delete answers 404 here before the notification of it arrives."""
    async with database.read() as session:
        row = await repository.get_response(session, response_id, tenant)
    if row is None:
        raise response_not_found(response_id)
    if row.status not in TERMINAL_STATUSES:
        if stop_running is None:
            raise InvalidRequest(
                f"Response '{response_id}' is still {row.status}: cancel it (POST /v1/responses/{response_id}/cancel) "
                "or wait until it ends, then delete it.",
                param="response_id",
                code="response_in_progress",
            )
        await stop_running(response_id)
    async with database.transaction() as session:
        if not await repository.delete_response(session, response_id, tenant):
            raise response_not_found(response_id)
    if cache is not None:
        cache.changed(tenant, response_id)
    return DeletedResponse(id=response_id)
