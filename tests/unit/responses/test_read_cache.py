"""GET /v1/responses/{id} from the per-process cache of finished responses' JSON: what it answers is what the
stored row says, whoever changed or deleted it (another API node on the same database, retention, a worker), for
its tenant only and with the `include` asked for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import delete, event, update

from app.config import Settings
from app.db.models import ResponseRow
from app.errors import NotFound
from app.main import create_app
from app.read_cache.cache import CachedJson, ResponseJsonCache
from app.responses import reads
from app.responses.schemas import ResponseFilters
from app.runtime import Runtime
from app.schemas.paging import PageRequest
from app.tenants.identity import OPEN_TENANT
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.unit.read_cache.test_cache import Clock

ENCRYPTED = "reasoning.encrypted_content"
NONE: frozenset[str] = frozenset()


@pytest.fixture
async def two_nodes(tmp_path: Path, runner: FakeRunner) -> AsyncIterator[list[tuple[httpx.AsyncClient, Runtime]]]:
    """Two API nodes (two apps, two caches) on one database. On SQLite each hears only its own writes (one server
    a file is the mode: tests/integration/responses/test_read_notifications.py has Postgres's nodes), so here
    every read checks the database (a staleness of 0), as such a deployment would have to."""
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'nodes.db'}",
        model_id="m",
        read_cache_staleness_s=0.0,
        _env_file=None,
    )
    first = create_app(settings, fake_generation(FakeRenderer(), runner))
    second = create_app(settings, fake_generation(FakeRenderer(), runner))
    async with (
        first.router.lifespan_context(first),
        second.router.lifespan_context(second),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=first), base_url="http://a") as a,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=second), base_url="http://b") as b,
    ):
        yield [(a, first.state.runtime), (b, second.state.runtime)]


async def created(client: httpx.AsyncClient) -> str:
    reply = await client.post("/v1/responses", json={"input": "hello"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "completed"
    return str(reply.json()["id"])


async def test_a_finished_response_is_read_from_the_cache_as_it_was_built(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    cache = app_runtime.read_cache
    response_id = await created(client)
    first = await client.get(f"/v1/responses/{response_id}")
    assert first.status_code == 200
    assert cache.get(OPEN_TENANT, response_id, NONE) is not None
    again = await client.get(f"/v1/responses/{response_id}")
    assert (again.content, again.headers["content-type"]) == (first.content, "application/json")
    # A hit answers the kept bytes as they are (here a marker): nothing is built again.
    kept = cache.get(OPEN_TENANT, response_id, NONE)
    assert kept is not None
    cache.put(OPEN_TENANT, response_id, NONE, CachedJson(kept.version, b'{"kept": true}'))
    assert (await client.get(f"/v1/responses/{response_id}")).json() == {"kept": True}
    cache.discard(OPEN_TENANT, response_id, NONE)
    assert (await client.get(f"/v1/responses/{response_id}")).content == first.content


async def test_a_delete_on_another_node_is_a_404_on_this_one(
    two_nodes: list[tuple[httpx.AsyncClient, Runtime]],
) -> None:
    (a, runtime_a), (b, _) = two_nodes
    response_id = await created(a)
    assert (await a.get(f"/v1/responses/{response_id}")).status_code == 200
    assert runtime_a.read_cache.get(OPEN_TENANT, response_id, NONE) is not None
    assert (await b.delete(f"/v1/responses/{response_id}")).status_code == 200
    gone = await a.get(f"/v1/responses/{response_id}")
    assert gone.status_code == 404
    assert gone.json()["error"]["param"] == "response_id"
    assert runtime_a.read_cache.get(OPEN_TENANT, response_id, NONE) is None


async def test_a_row_purged_or_changed_behind_the_cache_is_read_again(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """What retention's purge or a worker's write does: the row changes in the database, not through this node."""
    changed_id, purged_id = await created(client), await created(client)
    for response_id in (changed_id, purged_id):
        assert (await client.get(f"/v1/responses/{response_id}")).status_code == 200
    async with app_runtime.database.transaction() as session:
        await session.execute(
            update(ResponseRow).where(ResponseRow.id == changed_id).values(status="failed", output=[])
        )
        await session.execute(delete(ResponseRow).where(ResponseRow.id == purged_id))
    changed = (await client.get(f"/v1/responses/{changed_id}")).json()
    assert (changed["status"], changed["output"]) == ("failed", [])
    assert (await client.get(f"/v1/responses/{purged_id}")).status_code == 404


async def test_a_response_still_running_is_not_kept(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    response_id = await created(client)
    async with app_runtime.database.transaction() as session:
        await session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(status="in_progress"))
    assert (await client.get(f"/v1/responses/{response_id}")).json()["status"] == "in_progress"
    assert app_runtime.read_cache.get(OPEN_TENANT, response_id, NONE) is None


async def test_another_tenant_never_reads_a_cached_response(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alpha, beta = two_tenants
    response_id = await created(alpha)
    assert (await alpha.get(f"/v1/responses/{response_id}")).status_code == 200
    assert (await alpha.get(f"/v1/responses/{response_id}")).status_code == 200
    assert (await beta.get(f"/v1/responses/{response_id}")).status_code == 404


async def test_each_include_is_cached_apart(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    response_id = await created(client)
    plain = await client.get(f"/v1/responses/{response_id}")
    included = await client.get(f"/v1/responses/{response_id}", params={"include[]": ENCRYPTED})
    assert included.status_code == 200
    assert app_runtime.read_cache.get(OPEN_TENANT, response_id, NONE) is not None
    assert app_runtime.read_cache.get(OPEN_TENANT, response_id, frozenset({ENCRYPTED})) is not None
    assert (await client.get(f"/v1/responses/{response_id}")).content == plain.content
    again = await client.get(f"/v1/responses/{response_id}", params={"include": ENCRYPTED})
    assert again.content == included.content
    bad = await client.get(f"/v1/responses/{response_id}", params={"include[]": "nope"})
    assert bad.status_code == 400


@pytest.mark.settings(read_cache_mb=0)
async def test_a_cache_of_zero_keeps_nothing(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    response_id = await created(client)
    for _ in range(2):
        assert (await client.get(f"/v1/responses/{response_id}")).status_code == 200
    assert len(app_runtime.read_cache) == 0


async def test_the_list_is_the_page_dumped_whole_cached_or_not(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    """The list joins each finished response's cached JSON: byte for byte what the whole page dumps to, and a row
    changed behind the cache is dumped again."""
    empty = await client.get("/v1/responses")
    assert empty.json() == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}
    ids = [await created(client) for _ in range(3)]
    filters = ResponseFilters()

    async def whole_page() -> bytes:
        page = PageRequest(limit=2)
        listed = await reads.list_responses(app_runtime.database, OPEN_TENANT, filters, page)
        return listed.model_dump_json().encode()

    cold = await client.get("/v1/responses", params={"limit": 2})
    assert app_runtime.read_cache.get(OPEN_TENANT, ids[2], NONE) is not None
    warm = await client.get("/v1/responses", params={"limit": 2})
    assert cold.content == warm.content == await whole_page()
    assert warm.json()["has_more"] is True
    async with app_runtime.database.transaction() as session:
        await session.execute(update(ResponseRow).where(ResponseRow.id == ids[2]).values(status="failed"))
    changed = await client.get("/v1/responses", params={"limit": 2})
    assert changed.json()["data"][0]["status"] == "failed"
    assert changed.content == await whole_page()


@pytest.mark.settings(read_cache_staleness_s=0)
async def test_a_cached_read_asks_the_database_only_for_versions(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """Where every read checks (a staleness of 0): a cached GET is one one-column query; a page whose rows are all
    kept is one query of their versions, and a row changed behind the cache is the only one read again in full."""
    ids = [await created(client) for _ in range(3)]
    for response_id in ids:
        assert (await client.get(f"/v1/responses/{response_id}")).status_code == 200
    statements: list[tuple[str, object]] = []

    def record(_connection: object, _cursor: object, statement: str, parameters: object, *_: object) -> None:
        statements.append((statement, parameters))

    engine = app_runtime.database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        assert (await client.get(f"/v1/responses/{ids[0]}")).status_code == 200
        assert len(statements) == 1 and "responses.output" not in statements[0][0]
        statements.clear()
        warm = await client.get("/v1/responses")
        assert [entry["id"] for entry in warm.json()["data"]] == ids[::-1]
        assert len(statements) == 1 and "responses.output" not in statements[0][0]
        async with app_runtime.database.transaction() as session:
            await session.execute(update(ResponseRow).where(ResponseRow.id == ids[1]).values(status="failed"))
        statements.clear()
        changed = await client.get("/v1/responses")
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert [entry["status"] for entry in changed.json()["data"]] == ["completed", "failed", "completed"]
    assert len(statements) == 2 and "responses.output" in statements[1][0]
    assert ids[1] in str(statements[1][1]) and ids[0] not in str(statements[1][1])


async def test_a_lost_notification_leaves_a_stale_entry_no_longer_than_the_bound(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """A cache that hears notifications, but not this delete's (lost): it answers the entry it checked until the
    bound has passed since that check, never after; the clock is the test's, moved by hand."""
    clock = Clock()
    cache = ResponseJsonCache(1 << 20, staleness_s=1.0, clock=clock)
    cache.start_listening()
    response_id = await created(client)
    database = app_runtime.database
    body = await reads.read_response_json(database, cache, response_id, OPEN_TENANT)
    async with database.transaction() as session:
        await session.execute(delete(ResponseRow).where(ResponseRow.id == response_id))
    clock.now += 0.999
    assert await reads.read_response_json(database, cache, response_id, OPEN_TENANT) == body
    clock.now += 0.001
    with pytest.raises(NotFound):
        await reads.read_response_json(database, cache, response_id, OPEN_TENANT)
    assert cache.get(OPEN_TENANT, response_id, NONE) is None


async def test_on_sqlite_a_cached_get_asks_nothing_and_this_process_hears_its_own_writes(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """The one server of a SQLite file hears every change it commits (temporary triggers on its connections): a
    cached GET runs no statement at all, and a write of any of its units of work (a worker's, retention's, here
    one made on its database) is read again at once."""
    changed, deleted = await created(client), await created(client)
    first = {response_id: await client.get(f"/v1/responses/{response_id}") for response_id in (changed, deleted)}
    statements: list[str] = []

    def record(_connection: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    engine = app_runtime.database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        for response_id in (changed, deleted):
            again = await client.get(f"/v1/responses/{response_id}")
            assert again.content == first[response_id].content
        assert statements == []
    finally:
        event.remove(engine, "before_cursor_execute", record)
    async with app_runtime.database.transaction() as session:
        await session.execute(update(ResponseRow).where(ResponseRow.id == changed).values(status="failed"))
        await session.execute(delete(ResponseRow).where(ResponseRow.id == deleted))
    assert app_runtime.read_cache.get(OPEN_TENANT, changed, NONE) is None
    assert (await client.get(f"/v1/responses/{changed}")).json()["status"] == "failed"
    assert (await client.get(f"/v1/responses/{deleted}")).status_code == 404


async def test_on_sqlite_a_list_page_is_answered_whole_until_a_response_of_its_tenant_changes(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """A page read again runs no statement; a response created, changed (by any unit of work of this process)
    or deleted drops it, and the next list shows the change."""
    ids = [await created(client) for _ in range(2)]
    first = await client.get("/v1/responses")
    statements: list[str] = []

    def record(_connection: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    engine = app_runtime.database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        assert (await client.get("/v1/responses")).content == first.content
        assert statements == []
    finally:
        event.remove(engine, "before_cursor_execute", record)
    newest = await created(client)
    assert [entry["id"] for entry in (await client.get("/v1/responses")).json()["data"]] == [newest, *ids[::-1]]
    async with app_runtime.database.transaction() as session:
        await session.execute(update(ResponseRow).where(ResponseRow.id == ids[0]).values(status="failed"))
    assert [entry["status"] for entry in (await client.get("/v1/responses")).json()["data"]] == [
        "completed",
        "completed",
        "failed",
    ]
    assert (await client.delete(f"/v1/responses/{newest}")).status_code == 200
    assert [entry["id"] for entry in (await client.get("/v1/responses")).json()["data"]] == ids[::-1]
