"""Retention and the list extension end to end, on SQLite and Postgres: GET /v1/responses with its filters and
cursor; the embedded server purges expired responses as it starts (then every PRUNE_INTERVAL_S); `llama-responses
prune` does by hand; a worker's cron job purges one runner at a time (a Redis lock)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import openai
import pytest
from arq import create_pool

from app.config import Settings
from app.db.base import utc_now
from app.db.migrations import prepare_database
from app.db.models import ResponseRow
from app.db.session import Database
from app.responses import repository
from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import ServerProcess, run_cli, sdk_client
from app.transport.redis_bus import KEY_PREFIX
from app.transport.redis_queue import exclusive, redis_settings
from worker.tasks import apply_retention_exclusively

pytestmark = pytest.mark.integration

#: About half a second: whatever this test made before is expired by the time the next process looks.
TINY_RETENTION_DAYS = "0.000006"
DEADLINE_S = 60


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path_factory.mktemp("retention"))
        return
    with fresh_postgres_database() as url:
        assert run_cli(["migrate"], {"RESPONSES_DATABASE_URL": url}).returncode == 0
        yield url


def _ids(base_url: str, **params: object) -> tuple[list[str], bool]:
    reply = httpx.get(f"{base_url}/v1/responses", params=params, timeout=30)  # type: ignore[arg-type]
    assert reply.status_code == 200, reply.text
    page = reply.json()
    return [response["id"] for response in page["data"]], page["has_more"]


def _gone(client: openai.OpenAI, response_id: str) -> bool:
    try:
        client.responses.retrieve(response_id)
    except openai.NotFoundError:
        return True
    return False


def test_list_then_purge_at_startup_and_by_hand(database_url: str, tmp_path: Path) -> None:
    env = {"RESPONSES_DATABASE_URL": database_url}
    server = ServerProcess(env, tmp_path / "server.log").start()
    try:
        with sdk_client(server.base_url) as client:
            model = client.models.list().data[0].id
            first = client.responses.create(
                model=model, input="Say hi.", max_output_tokens=16, metadata={"run": "retention", 'a"b,{c}': "odd"}
            )
            second = client.responses.create(
                model=model, input="Again.", max_output_tokens=16, previous_response_id=first.id
            )
            assert _ids(server.base_url, **{"metadata[run]": "retention"}) == ([first.id], False)
            # A key that would break a JSON path (Postgres: `"` and `{`; `,` nests) is matched as written.
            assert _ids(server.base_url, **{'metadata[a"b,{c}]': "odd"}) == ([first.id], False)
            assert _ids(server.base_url, limit=1) == ([second.id], True)
            assert _ids(server.base_url, limit=1, after=second.id) == ([first.id], False)
            assert _ids(server.base_url, previous_response_id=first.id, status=second.status) == ([second.id], False)
    finally:
        server.stop()

    # A server started with a short retention purges what expired (the whole chain) as it starts.
    server = ServerProcess({**env, "RESPONSES_RETENTION_DAYS": TINY_RETENTION_DAYS}, tmp_path / "server.log").start()
    try:
        with sdk_client(server.base_url) as client:
            deadline = time.monotonic() + DEADLINE_S
            while not (_gone(client, first.id) and _gone(client, second.id)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _gone(client, first.id) and _gone(client, second.id)
            third = client.responses.create(model=model, input="Once more.", max_output_tokens=16)
    finally:
        server.stop()

    # By hand: the response made since goes too.
    purged = 0
    deadline = time.monotonic() + DEADLINE_S
    while purged < 1 and time.monotonic() < deadline:
        result = run_cli(["prune"], {**env, "RESPONSES_RETENTION_DAYS": TINY_RETENTION_DAYS})
        assert result.returncode == 0, result.stderr
        purged += int(result.stdout.split()[1])
    assert purged == 1
    listed = run_cli(["responses", "list"], env)
    assert listed.returncode == 0 and third.id not in listed.stdout and listed.stdout == ""


async def test_the_workers_cron_job_purges_one_runner_at_a_time(tmp_path: Path) -> None:
    settings = Settings(database_url=sqlite_url(tmp_path), _env_file=None)
    await prepare_database(settings)
    database = Database.connect(settings.database_url)
    redis = await create_pool(redis_settings(os.environ.get("RESPONSES_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")))
    try:
        async with database.transaction() as session:
            old = ResponseRow(
                id="resp_old", tenant="public", status="completed", model="m", params={},
                created_at=utc_now() - timedelta(days=40),
            )  # fmt: skip
            await repository.insert_response(session, old, [{"id": "msg_1", "type": "message"}])
        # A lock left by an earlier run's worker that was killed while it held it would expire within 30 min.
        await redis.delete(f"{KEY_PREFIX}:lock:retention")
        async with exclusive(redis, "retention", 60) as held:
            assert held
            # Another runner holds the lock: this one does nothing.
            await apply_retention_exclusively(redis, database, settings)
            async with database.read() as session:
                assert await repository.get_by_id(session, "resp_old") is not None
        await apply_retention_exclusively(redis, database, settings)
        async with database.read() as session:
            assert await repository.get_by_id(session, "resp_old") is None
    finally:
        await redis.aclose()
        await database.dispose()
