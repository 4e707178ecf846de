"""Retention: expired responses are purged whole, in batches of their own transactions; never one still running,
never one that a kept response continues (chains go from their end), never a conversation's items."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import InputItemRow, OutputItemRow, ResponseEventRow, ResponseRow
from app.ops import retention
from app.ops.retention import apply_retention, purge_expired_responses
from app.responses import repository
from app.runtime import Runtime


async def _create(client: httpx.AsyncClient, **body: Any) -> str:
    reply = await client.post("/v1/responses", json={"model": "fake-model", "input": "hello", **body})
    assert reply.status_code == 200, reply.text
    response_id: str = reply.json()["id"]
    return response_id


async def _age(runtime: Runtime, *response_ids: str, days: float = 40) -> None:
    async with runtime.database.transaction() as session:
        past = utc_now() - timedelta(days=days)
        await session.execute(update(ResponseRow).where(ResponseRow.id.in_(response_ids)).values(created_at=past))


async def _rows(session: AsyncSession, table: Any, response_id: str) -> int:
    query = select(func.count()).select_from(table).where(table.response_id == response_id)
    return int((await session.execute(query)).scalar_one())


async def _stored(runtime: Runtime, response_id: str) -> tuple[bool, int, int, int]:
    """Whether the response row is there, and how many input items, output items and events it has."""
    async with runtime.database.read() as session:
        row = await repository.get_by_id(session, response_id)
        return (
            row is not None,
            await _rows(session, InputItemRow, response_id),
            await _rows(session, OutputItemRow, response_id),
            await _rows(session, ResponseEventRow, response_id),
        )


async def _stored_stream(client: httpx.AsyncClient) -> str:
    """A finished background stream: a response with input items, output items and stored events."""
    async with client.stream(
        "POST", "/v1/responses", json={"model": "fake-model", "input": "hi", "background": True, "stream": True}
    ) as reply:
        body = "".join([chunk async for chunk in reply.aiter_text()])
    assert "response.completed" in body
    first = body.split("data: ", 1)[1].split("\n", 1)[0]
    response_id: str = httpx.Response(200, content=first).json()["response"]["id"]
    return response_id


async def test_expired_responses_go_whole_and_recent_ones_stay(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    old, recent = await _stored_stream(client), await _create(client)
    kept_before = await _stored(app_runtime, old)
    assert kept_before[0] and all(count > 0 for count in kept_before[1:])
    await _age(app_runtime, old)
    assert await purge_expired_responses(app_runtime.database, retention_days=30) == 1
    assert await _stored(app_runtime, old) == (False, 0, 0, 0)
    assert (await _stored(app_runtime, recent))[0]
    assert (await client.get(f"/v1/responses/{old}")).status_code == 404
    assert (await client.get(f"/v1/responses/{recent}")).status_code == 200


async def test_zero_days_keeps_everything(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    old = await _create(client)
    await _age(app_runtime, old, days=10_000)
    assert await purge_expired_responses(app_runtime.database, retention_days=0) == 0
    assert (await _stored(app_runtime, old))[0]


async def test_purges_in_batches_until_none_is_left(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    old = [await _create(client) for _ in range(5)]
    await _age(app_runtime, *old)
    assert await purge_expired_responses(app_runtime.database, retention_days=30, batch=2) == 5
    for response_id in old:
        assert not (await _stored(app_runtime, response_id))[0]


@pytest.mark.parametrize("status", ["queued", "in_progress"])
async def test_a_response_still_generating_is_never_purged(
    client: httpx.AsyncClient, app_runtime: Runtime, status: str
) -> None:
    running = await _create(client)
    await _age(app_runtime, running)
    async with app_runtime.database.transaction() as session:
        await session.execute(update(ResponseRow).where(ResponseRow.id == running).values(status=status))
    assert await purge_expired_responses(app_runtime.database, retention_days=30) == 0
    assert (await _stored(app_runtime, running))[0]


async def test_a_chain_is_kept_while_its_newest_turn_is(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    first = await _create(client)
    second = await _create(client, previous_response_id=first)
    third = await _create(client, previous_response_id=second)
    await _age(app_runtime, first, second)
    # The newest turn is recent: its context (the two expired turns) stays, and it can still be continued.
    assert await purge_expired_responses(app_runtime.database, retention_days=30) == 0
    newest = await _create(client, previous_response_id=third)
    # A branch that expired on its own goes, even though its ancestors stay for the other branch.
    branch = await _create(client, previous_response_id=first)
    await _age(app_runtime, branch)
    assert await purge_expired_responses(app_runtime.database, retention_days=30) == 1
    assert not (await _stored(app_runtime, branch))[0]
    # Once every turn has expired, the whole chain goes, from its end (one batch a turn here).
    await _age(app_runtime, third, newest)
    assert await purge_expired_responses(app_runtime.database, retention_days=30, batch=1) == 4
    for response_id in (first, second, third, newest):
        assert not (await _stored(app_runtime, response_id))[0]


async def test_a_conversation_keeps_its_items_when_its_responses_expire(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    conversation = (await client.post("/v1/conversations", json={})).json()["id"]
    used = await _create(client, conversation=conversation)
    items_before = (await client.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"})).json()
    assert len(items_before["data"]) == 2  # the user's message and the reply
    await _age(app_runtime, used)
    assert await purge_expired_responses(app_runtime.database, retention_days=30) == 1
    items_after = (await client.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"})).json()
    assert items_after == items_before
    # The conversation goes on: its context is its own items.
    assert (await _create(client, conversation=conversation)).startswith("resp")


async def test_a_purge_failing_midway_leaves_no_half_deleted_response(
    client: httpx.AsyncClient, app_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = [await _stored_stream(client) for _ in range(4)]
    await _age(app_runtime, *old)
    real_purge, calls = repository.purge_expired, 0

    async def purge_then_fail(session: AsyncSession, **kwargs: Any) -> int:
        nonlocal calls
        calls += 1
        deleted = await real_purge(session, **kwargs)
        if calls == 2:  # the second batch deleted its rows, then the database went away before the commit
            raise ConnectionError("database gone")
        return deleted

    monkeypatch.setattr(repository, "purge_expired", purge_then_fail)
    with pytest.raises(ConnectionError):
        await purge_expired_responses(app_runtime.database, retention_days=30, batch=2)
    states = [await _stored(app_runtime, response_id) for response_id in old]
    assert sum(1 for state in states if state == (False, 0, 0, 0)) == 2  # the first batch, committed whole
    assert sum(1 for state in states if state[0] and all(count > 0 for count in state[1:])) == 2  # rolled back whole
    monkeypatch.setattr(repository, "purge_expired", real_purge)
    assert await purge_expired_responses(app_runtime.database, retention_days=30) == 2


async def test_apply_retention_runs_both_rules(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    expired, finished_stream = await _create(client), await _stored_stream(client)
    await _age(app_runtime, expired)
    async with app_runtime.database.transaction() as session:
        past = utc_now() - timedelta(days=2)
        await session.execute(update(ResponseRow).where(ResponseRow.id == finished_stream).values(updated_at=past))
    report = await apply_retention(app_runtime.database, app_runtime.settings)
    assert report == retention.RetentionReport(purged_responses=1, pruned_event_streams=1)
    assert (await _stored(app_runtime, finished_stream))[:3] == (True, 1, 1)
    assert (await _stored(app_runtime, finished_stream))[3] == 0
