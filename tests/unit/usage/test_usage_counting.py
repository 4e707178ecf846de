"""Usage is counted at every response's end, in the unit of work of its final state (a `store: false` one in its
own): JSON, stream, store: false, background, failed and cancelled responses; tenants apart; the UTC day of the
response's creation, across a day boundary; the upsert on SQLite (on Postgres: tests/integration/usage/)."""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
from alembic import command

from app.db.migrations import alembic_config
from app.db.models import ResponseRow, UsageDayRow
from app.db.session import Database
from app.lifecycle import transitions
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.usage import repository as usage
from tests.unit.responses.test_background import poll_until_done


async def stored_usage(client: httpx.AsyncClient, response_id: str) -> dict:
    body = (await client.get(f"/v1/responses/{response_id}")).json()
    return body["usage"] or {}


def counted(used: dict) -> tuple[int, int, int]:
    cached = (used.get("input_tokens_details") or {}).get("cached_tokens", 0)
    return used.get("input_tokens", 0), cached, used.get("output_tokens", 0)


async def test_every_kind_of_end_counts_one_request_and_its_tokens(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    ids = []
    plain = (await client.post("/v1/responses", json={"input": "hello there"})).json()
    ids.append(plain["id"])
    async with client.stream("POST", "/v1/responses", json={"input": "stream me", "stream": True}) as stream:
        text = "".join([chunk async for chunk in stream.aiter_text()])
    streamed_id = text.split('"id":"', 1)[1].split('"', 1)[0]
    ids.append(streamed_id)
    background = (await client.post("/v1/responses", json={"input": "later", "background": True})).json()
    await poll_until_done(client, background["id"])
    ids.append(background["id"])
    unstored = (await client.post("/v1/responses", json={"input": "forget me", "store": False})).json()
    assert unstored["status"] == "completed"

    runner.fail_after = 1
    failed = (await client.post("/v1/responses", json={"input": "break"})).json()
    assert failed["status"] == "failed"
    ids.append(failed["id"])
    runner.fail_after = None

    runner.delay_s = 0.02
    runner.reply = [f"w{index}" for index in range(500)]
    slow = (await client.post("/v1/responses", json={"input": "cancel me", "background": True})).json()
    while not runner.runs.get(slow["id"]) or runner.runs[slow["id"]].produced < 3:
        await asyncio.sleep(0.01)
    cancelled = (await client.post(f"/v1/responses/{slow['id']}/cancel")).json()
    assert cancelled["status"] == "cancelled"
    ids.append(slow["id"])

    expected = [counted(await stored_usage(client, response_id)) for response_id in ids]
    expected.append(counted(unstored["usage"]))
    assert all(output for _, _, output in expected[:3]), expected  # the completed ones generated

    report = (await client.get("/v1/usage", params={"group_by": "model"})).json()
    assert [row["model"] for row in report["data"]] == ["fake-model"]
    row = report["data"][0]
    assert row["object"] == "usage.result" and row["date"] is None and row["project"] is None
    assert row["num_model_requests"] == 6
    assert row["input_tokens"] == sum(tokens for tokens, _, _ in expected)
    assert row["input_cached_tokens"] == sum(cached for _, cached, _ in expected)
    assert row["output_tokens"] == sum(output for _, _, output in expected)
    assert row["generation_seconds"] > 0  # the cancelled one generated for a while
    assert report["totals"] == {key: row[key] for key in report["totals"]}

    # A day is the UTC day a response was created; the default range ends today (read around the request, which
    # may straddle midnight, as a CI run did).
    created = [(await client.get(f"/v1/responses/{response_id}")).json()["created_at"] for response_id in ids]
    created.append(unstored["created_at"])
    days = sorted({datetime.fromtimestamp(stamp, UTC).date().isoformat() for stamp in created})
    before = datetime.now(UTC).date()
    by_day = (await client.get("/v1/usage")).json()
    assert by_day["end"] in (before.isoformat(), datetime.now(UTC).date().isoformat())
    assert by_day["start"] == (date.fromisoformat(by_day["end"]) - timedelta(days=29)).isoformat()
    assert by_day["group_by"] == ["day"] and [entry["date"] for entry in by_day["data"]] == days
    other = (await client.get("/v1/usage", params={"model": "another-model"})).json()
    assert other["data"] == [] and other["totals"]["num_model_requests"] == 0


async def test_a_queued_response_cancelled_counts_a_request_without_tokens(
    app_runtime: Runtime, client: httpx.AsyncClient
) -> None:
    """end_unheld (a cancel of a queued response, a reconciler's verdict) is an end too."""
    database = app_runtime.database
    created = datetime(2026, 11, 30, 12, tzinfo=UTC)
    async with database.transaction() as session:
        session.add(queued_row("resp_queued", "public", created))
    async with database.transaction() as session:
        assert await transitions.end_unheld(session, "resp_queued", values={"status": "cancelled"})
    report = (await client.get("/v1/usage", params={"start": "2026-11-30", "end": "2026-11-30"})).json()
    assert report["data"][0]["num_model_requests"] == 1 and report["data"][0]["output_tokens"] == 0


def queued_row(response_id: str, tenant: str, created_at: datetime, model: str = "fake-model") -> ResponseRow:
    return ResponseRow(
        id=response_id, tenant=tenant, status="queued", model=model, params={}, job={"x": 1}, created_at=created_at
    )


async def test_a_response_counts_on_the_utc_day_it_was_created(app_runtime: Runtime, client: httpx.AsyncClient) -> None:
    database = app_runtime.database
    last_second = datetime(2026, 11, 30, 23, 59, 59, 999000, tzinfo=UTC)
    first_second = datetime(2026, 12, 1, 0, 0, 0, tzinfo=UTC)
    async with database.transaction() as session:
        for index, created in enumerate((last_second, first_second, first_second)):
            session.add(queued_row(f"resp_{index}", "public", created))
    used = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3}
    for index in range(3):
        async with database.transaction() as session:
            values = {"status": "completed", "usage": used}
            # Ended a day later: the day is the creation's, not the end's.
            assert await transitions.end_unheld(session, f"resp_{index}", values=values)
    report = (await client.get("/v1/usage", params={"start": "2026-11-30", "end": "2026-12-01"})).json()
    assert [(row["date"], row["num_model_requests"], row["input_tokens"]) for row in report["data"]] == [
        ("2026-11-30", 1, 10),
        ("2026-12-01", 2, 20),
    ]
    assert report["data"][1]["input_cached_tokens"] == 8 and report["data"][1]["output_tokens"] == 6
    only_first = (await client.get("/v1/usage", params={"start": "2026-12-01", "end": "2026-12-01"})).json()
    assert only_first["totals"]["num_model_requests"] == 2
    only_last = (await client.get("/v1/usage", params={"start": "2026-11-29", "end": "2026-11-30"})).json()
    assert only_last["totals"]["num_model_requests"] == 1


async def upsert_twice_and_read(database_url: str) -> list[tuple[str, str, date, int, int, int, int, float]]:
    database = Database.connect(database_url)
    try:
        day = date(2026, 12, 3)
        entries = [
            usage.UsageEntry("project:a", "m", day, 5, 1, 2, 0.5),
            usage.UsageEntry("project:a", "m", day, 7, 0, 3, 0.25),
            usage.UsageEntry("project:b", "m", day, 1, 0, 1, 0.0),
            usage.UsageEntry("project:a", "m", day + timedelta(days=1), 1, 1, 1, 1.0),
        ]
        # Concurrent ends of one tenant's day: each its own transaction, none lost.
        await asyncio.gather(*(add_one(database, entry) for entry in entries[:3]))
        await add_one(database, entries[3])
        async with database.read() as session:
            rows = (await session.execute(UsageDayRow.__table__.select())).all()
        return sorted(
            (
                row.tenant,
                row.model,
                row.day,
                row.requests,
                row.input_tokens,
                row.cached_tokens,
                row.output_tokens,
                row.generation_s,
            )
            for row in rows
        )
    finally:
        await database.dispose()


async def add_one(database: Database, entry: usage.UsageEntry) -> None:
    async with database.transaction() as session:
        await usage.add(session, entry)


EXPECTED = [
    ("project:a", "m", date(2026, 12, 3), 2, 12, 1, 5, 0.75),
    ("project:a", "m", date(2026, 12, 4), 1, 1, 1, 1, 1.0),
    ("project:b", "m", date(2026, 12, 3), 1, 1, 0, 1, 0.0),
]


def test_the_upsert_adds_to_a_day_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'usage.db'}"
    command.upgrade(alembic_config(url), "head")
    assert asyncio.run(upsert_twice_and_read(url)) == EXPECTED
