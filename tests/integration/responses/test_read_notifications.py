"""The read cache on Postgres: every change of a response is notified to every API node (LISTEN/NOTIFY), so that a
cached GET answers with no round trip, and a change made through another node (its API, or its database alone)
drops the entry; with the listening connection killed, reads check the database until it is back, and stay right."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from alembic import command
from sqlalchemy import delete, event, text, update

from app.config import Settings
from app.db.base import utc_now
from app.db.migrations import alembic_config
from app.db.models import ResponseRow
from app.db.session import Database
from app.main import create_app
from app.read_cache.cache import CachedJson
from app.read_cache.listener import CHANNEL, ChangeListener
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT
from app.testing.databases import fresh_postgres_database
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

pytestmark = pytest.mark.integration

NONE: frozenset[str] = frozenset()
#: How long a test waits for a notification or a reconnection before it fails: a guard against a hang, not a
#: figure (they take milliseconds).
WAIT_S = 10.0
MARKER_TENANT = "marker-tenant"


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with fresh_postgres_database() as url:
        command.upgrade(alembic_config(url), "head")
        yield url


@asynccontextmanager
async def api_node(url: str) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime, ChangeListener]]:
    """An API node (embedded, the fake model) on `url`, once its listener listens."""
    settings = Settings(database_url=url, model_id="m", batch_interval_s=3600.0, _env_file=None)
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node") as client,
    ):
        listener: ChangeListener = app.state.read_cache_listener
        await asyncio.wait_for(listener.connected.wait(), WAIT_S)
        yield client, app.state.runtime, listener


async def until(condition: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), WAIT_S)


async def settled(runtime: Runtime) -> None:
    """Once every notification of what was committed so far has reached the node: they arrive in commit order, so
    a marker's, committed now, comes last (it drops a marker entry kept for it, of a tenant of its own)."""
    marker = f"marker_{uuid.uuid4().hex}"
    runtime.read_cache.put(MARKER_TENANT, marker, NONE, CachedJson(utc_now(), b"{}"))
    async with runtime.database.transaction() as session:
        notify = text("SELECT pg_notify(:channel, :payload)")
        await session.execute(notify, {"channel": CHANNEL, "payload": f"{marker} {MARKER_TENANT}"})
    await until(lambda: runtime.read_cache.get(MARKER_TENANT, marker, NONE) is None)


async def created(client: httpx.AsyncClient) -> str:
    reply = await client.post("/v1/responses", json={"input": "hello"})
    assert reply.status_code == 200, reply.text
    return str(reply.json()["id"])


class Statements:
    """The statements a node's engine runs while counted."""

    def __init__(self, runtime: Runtime) -> None:
        self.engine = runtime.database.engine.sync_engine
        self.seen: list[str] = []

    def _record(self, _connection: object, _cursor: object, statement: str, *_: object) -> None:
        self.seen.append(statement)

    async def during(self, client: httpx.AsyncClient, path: str) -> tuple[httpx.Response, int]:
        self.seen.clear()
        event.listen(self.engine, "before_cursor_execute", self._record)
        try:
            reply = await client.get(path)
        finally:
            event.remove(self.engine, "before_cursor_execute", self._record)
        return reply, len(self.seen)

    async def during_get(self, client: httpx.AsyncClient, response_id: str) -> tuple[httpx.Response, int]:
        return await self.during(client, f"/v1/responses/{response_id}")


async def test_a_cached_get_asks_nothing_and_a_change_through_another_node_drops_it(postgres_url: str) -> None:
    async with api_node(postgres_url) as (a, runtime_a, _), api_node(postgres_url) as (b, runtime_b, _):
        counted = Statements(runtime_a)
        deleted, changed = await created(a), await created(a)
        await settled(runtime_a)
        for response_id in (deleted, changed):
            first = await a.get(f"/v1/responses/{response_id}")
            again, statements = await counted.during_get(a, response_id)
            assert (again.status_code, again.content, statements) == (200, first.content, 0)
        # Another node's API deletes one; a write to the database alone (a worker's, retention's) changes the other.
        assert (await b.delete(f"/v1/responses/{deleted}")).status_code == 200
        async with runtime_b.database.transaction() as session:
            await session.execute(update(ResponseRow).where(ResponseRow.id == changed).values(status="failed"))
        cache = runtime_a.read_cache
        await until(lambda: cache.get(OPEN_TENANT, deleted, NONE) is None)
        await until(lambda: cache.get(OPEN_TENANT, changed, NONE) is None)
        assert (await a.get(f"/v1/responses/{deleted}")).status_code == 404
        assert (await a.get(f"/v1/responses/{changed}")).json()["status"] == "failed"
        reread, statements = await counted.during_get(a, changed)
        assert (reread.json()["status"], statements) == ("failed", 0)


async def test_reads_stay_right_while_the_listener_is_cut_and_trust_comes_back_with_it(postgres_url: str) -> None:
    other = Database.connect(postgres_url)  # another node's writes: its database alone
    try:
        async with api_node(postgres_url) as (client, runtime, listener):
            counted = Statements(runtime)
            cut, kept = await created(client), await created(client)
            await settled(runtime)
            for response_id in (cut, kept):
                assert (await client.get(f"/v1/responses/{response_id}")).status_code == 200
            old_pid = listener.backend_pid
            async with other.transaction() as session:
                await session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": old_pid})
            await until(lambda: listener.backend_pid != old_pid)
            # Down (or just back): a delete made now may never be notified, and the GET after it is still a 404.
            async with other.transaction() as session:
                await session.execute(delete(ResponseRow).where(ResponseRow.id == cut))
            assert (await client.get(f"/v1/responses/{cut}")).status_code == 404
            await until(lambda: listener.backend_pid not in (None, old_pid))
            # Back: an entry kept from before is checked once (a change may have gone unheard), then trusted.
            assert (await counted.during_get(client, kept))[1] == 1
            assert (await counted.during_get(client, kept))[1] == 0
            async with other.transaction() as session:
                await session.execute(delete(ResponseRow).where(ResponseRow.id == kept))
            await until(lambda: runtime.read_cache.get(OPEN_TENANT, kept, NONE) is None)
            assert (await client.get(f"/v1/responses/{kept}")).status_code == 404
    finally:
        await other.dispose()


def triggers(url: str) -> list[str]:
    async def names() -> list[str]:
        database = Database.connect(url)
        try:
            async with database.read() as session:
                query = text("SELECT tgname FROM pg_trigger WHERE tgrelid = 'responses'::regclass AND NOT tgisinternal")
                return list((await session.execute(query)).scalars())
        finally:
            await database.dispose()

    return asyncio.run(names())


def test_the_migration_adds_the_trigger_and_takes_it_away() -> None:
    with fresh_postgres_database() as url:
        config = alembic_config(url)
        command.upgrade(config, "20261214_0024_reads")
        assert triggers(url) == ["responses_notify_change"]
        command.downgrade(config, "20261213_0023")
        assert triggers(url) == []
        command.upgrade(config, "head")
        assert triggers(url) == ["responses_notify_change"]


async def test_a_list_page_is_answered_whole_until_another_node_changes_its_tenants_responses(
    postgres_url: str,
) -> None:
    async with api_node(postgres_url) as (a, runtime_a, _), api_node(postgres_url) as (b, _, _):
        await created(a)
        await settled(runtime_a)
        first = await a.get("/v1/responses?limit=100")
        again, statements = await Statements(runtime_a).during(a, "/v1/responses?limit=100")
        assert (again.content, statements) == (first.content, 0)
        newest = await created(b)
        await settled(runtime_a)  # the insert's notification has come: the page is read again
        listed = (await a.get("/v1/responses?limit=100")).json()["data"]
        assert listed[0]["id"] == newest
