"""Retention figures (not a test): database bytes per 1,000 stored responses, and purge throughput, on SQLite
and Postgres.

    .venv/bin/python -m bench.retention [--responses 1000] [--no-postgres] [--json out.json]

Responses are made through the API in-process with the fake model of the unit tests (a 12-word answer to a
one-paragraph question; one in ten a background stream, whose events are stored), so the figures are about
storage, not generation. Bytes are reported against the JSON the API returns for those responses and their input
items (what a client could have kept itself); the purge (RESPONSES_RETENTION_DAYS: batches of their own
transactions) against one DELETE of every row in one transaction, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import delete, func, select, text, update

from app.config import Settings
from app.db.base import utc_now
from app.db.migrations import upgrade_to_head
from app.db.models import ResponseRow
from app.db.session import Database
from app.main import create_app
from app.ops.retention import purge_expired_responses
from app.testing.databases import fresh_postgres_database
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

QUESTION = (
    "Our team is planning a three-day trip to the mountains in early spring. We need advice on what to pack, "
    "how to plan the daily hikes around the weather, and which meals are easy to cook on a small camping stove. "
)
STREAM_EVERY = 10


async def _size_bytes(database: Database, sqlite: bool) -> int:
    async with database.read() as session:
        if sqlite:
            await session.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
            pages = (await session.execute(text("PRAGMA page_count"))).scalar_one()
            page_size = (await session.execute(text("PRAGMA page_size"))).scalar_one()
            return int(pages) * int(page_size)
        return int((await session.execute(text("SELECT pg_database_size(current_database())"))).scalar_one())


async def _make_responses(client: httpx.AsyncClient, count: int) -> int:
    """`count` stored responses; the bytes of their JSON and their input items' JSON as the API returns them."""
    payload = 0
    for index in range(count):
        body: dict[str, Any] = {"model": "fake-model", "input": f"{QUESTION} (request {index})"}
        if index % STREAM_EVERY == 0:
            body.update(background=True, stream=True)
            async with client.stream("POST", "/v1/responses", json=body) as reply:
                first = ""
                async for line in reply.aiter_lines():
                    first = first or (line[6:] if line.startswith("data: ") else "")
            response_id = json.loads(first)["response"]["id"]
        else:
            response_id = (await client.post("/v1/responses", json=body)).json()["id"]
        payload += len((await client.get(f"/v1/responses/{response_id}")).content)
        payload += len((await client.get(f"/v1/responses/{response_id}/input_items")).content)
    return payload


async def _count(database: Database) -> int:
    async with database.read() as session:
        return int((await session.execute(select(func.count()).select_from(ResponseRow))).scalar_one())


async def _age_all(database: Database) -> None:
    async with database.transaction() as session:
        await session.execute(update(ResponseRow).values(created_at=utc_now() - timedelta(days=40)))


async def _delete_all(database: Database) -> int:
    async with database.transaction() as session:
        result = await session.execute(delete(ResponseRow).execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0))


async def _timed(work: Callable[[], Awaitable[int]]) -> tuple[int, float]:
    started = time.perf_counter()
    done = await work()
    return done, time.perf_counter() - started


async def measure(database_url: str, count: int) -> dict[str, Any]:
    sqlite = database_url.startswith("sqlite")
    settings = Settings(database_url=database_url, model_id="fake-model", _env_file=None)
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        database: Database = app.state.runtime.database
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench") as client:
            empty = await _size_bytes(database, sqlite)
            payload = await _make_responses(client, count)
            stored = await _size_bytes(database, sqlite) - empty
            await _age_all(database)
            purged, purge_s = await _timed(lambda: purge_expired_responses(database, retention_days=30))
            assert purged == count and await _count(database) == 0
            await _make_responses(client, count)
            await _age_all(database)
            deleted, delete_s = await _timed(lambda: _delete_all(database))
            assert deleted == count
    per_thousand = stored * 1000 / count
    return {
        "database": "sqlite" if sqlite else "postgres",
        "responses": count,
        "bytes_per_1000_responses": round(per_thousand),
        "api_json_bytes_per_1000_responses": round(payload * 1000 / count),
        "bytes_ratio_to_json": round(stored / payload, 2),
        "purge_responses_per_s": round(purged / purge_s),
        "one_delete_responses_per_s": round(deleted / delete_s),
        "purge_ratio_to_one_delete": round((purged / purge_s) / (deleted / delete_s), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=1000)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite+aiosqlite:///{Path(directory) / 'bench.db'}"
        upgrade_to_head(url)
        rows.append(asyncio.run(measure(url, args.responses)))
    if not args.no_postgres:
        with fresh_postgres_database() as url:
            upgrade_to_head(url)
            rows.append(asyncio.run(measure(url, args.responses)))
    for row in rows:
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
