"""Retention of what batches and webhooks leave: ended batches go after RESPONSES_RETENTION_DAYS (never a moving
one), the files batches write after RESPONSES_BATCH_OUTPUT_RETENTION_DAYS (never an uploaded one), finished webhook
deliveries after RESPONSES_RETENTION_DAYS (never a pending one); each in bounded batches of their own transactions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from app.db.base import utc_now
from app.db.models import BatchRow, FileChunkRow, FileRow, WebhookDeliveryRow
from app.ops.retention import (
    apply_retention,
    purge_batch_files,
    purge_ended_batches,
    purge_finished_deliveries,
)
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT
from app.webhooks.outbox import record_event
from tests.unit.batches.batch_files import advance_until, create_batch, jsonl, request_line

OLD = utc_now() - timedelta(days=400)


async def _ended_batch(client: httpx.AsyncClient, runtime: Runtime) -> dict[str, Any]:
    """A completed batch with an output file and an error file (one line fails validation of its body)."""
    created = await create_batch(client, jsonl([request_line("ok"), request_line("bad", {"input": 5})]))
    batch = await advance_until(runtime, client, created["id"])
    assert batch["status"] == "completed" and batch["output_file_id"] and batch["error_file_id"], batch
    return batch


async def _age_batch(runtime: Runtime, batch: dict[str, Any], *, files: bool = True) -> None:
    async with runtime.database.transaction() as session:
        await session.execute(update(BatchRow).where(BatchRow.id == batch["id"]).values(created_at=OLD))
        if files:
            written = [batch["output_file_id"], batch["error_file_id"], batch["input_file_id"]]
            await session.execute(update(FileRow).where(FileRow.id.in_(written)).values(created_at=OLD))


async def _chunks(runtime: Runtime, file_id: str) -> int:
    async with runtime.database.read() as session:
        query = select(func.count()).select_from(FileChunkRow).where(FileChunkRow.file_id == file_id)
        return int((await session.execute(query)).scalar_one())


async def test_an_ended_batch_and_its_written_files_expire_and_the_uploaded_file_stays(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    old, recent = await _ended_batch(client, app_runtime), await _ended_batch(client, app_runtime)
    await _age_batch(app_runtime, old)
    assert await _chunks(app_runtime, old["output_file_id"]) > 0
    assert await purge_ended_batches(app_runtime.database, retention_days=30) == 1
    assert (await client.get(f"/v1/batches/{old['id']}")).status_code == 404
    assert (await client.get(f"/v1/batches/{recent['id']}")).status_code == 200
    # The batch's files are the Files API's: they follow their own rule, not the batch's.
    assert (await client.get(f"/v1/files/{old['output_file_id']}")).status_code == 200
    assert await purge_batch_files(app_runtime.database, retention_days=30) == 2
    for file_id in (old["output_file_id"], old["error_file_id"]):
        assert (await client.get(f"/v1/files/{file_id}")).status_code == 404
        assert (await client.get(f"/v1/files/{file_id}/content")).status_code == 404
        assert await _chunks(app_runtime, file_id) == 0
    # What the client uploaded stays until it deletes it; the recent batch's files stay.
    for file_id in (old["input_file_id"], recent["output_file_id"], recent["error_file_id"]):
        assert (await client.get(f"/v1/files/{file_id}")).status_code == 200


async def test_a_batch_still_moving_is_never_purged(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    validating = await create_batch(client, jsonl([request_line("a")]))
    async with app_runtime.database.transaction() as session:
        await session.execute(update(BatchRow).where(BatchRow.id == validating["id"]).values(created_at=OLD))
    for status in ("validating", "in_progress", "finalizing", "cancelling"):
        async with app_runtime.database.transaction() as session:
            await session.execute(update(BatchRow).where(BatchRow.id == validating["id"]).values(status=status))
        assert await purge_ended_batches(app_runtime.database, retention_days=30) == 0
    assert (await client.get(f"/v1/batches/{validating['id']}")).status_code == 200


async def test_batches_and_files_go_in_bounded_batches_and_zero_days_keeps_them(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    ended = [await _ended_batch(client, app_runtime) for _ in range(3)]
    for batch in ended:
        await _age_batch(app_runtime, batch)
    assert await purge_ended_batches(app_runtime.database, retention_days=0) == 0
    assert await purge_batch_files(app_runtime.database, retention_days=0) == 0
    assert await purge_ended_batches(app_runtime.database, retention_days=30, batch=2) == 3
    assert await purge_batch_files(app_runtime.database, retention_days=30, batch=4) == 6
    listed = (await client.get("/v1/batches")).json()
    assert listed["data"] == []


@pytest.mark.settings(webhook_delivery_interval_s=3600)  # no delivery round in the test's way
async def test_finished_deliveries_older_than_the_retention_are_dropped(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    body = {"name": "hook", "url": "https://example.com/hook", "event_types": ["batch.completed"]}
    made = await client.post("/v1/webhook_endpoints", json=body)
    assert made.status_code == 200, made.text
    async with app_runtime.database.transaction() as session:
        for index in range(5):
            await record_event(session, tenant=OPEN_TENANT, event_type="batch.completed", object_id=f"batch_{index}")
    async with app_runtime.database.read() as session:
        query = select(WebhookDeliveryRow).order_by(WebhookDeliveryRow.created_at, WebhookDeliveryRow.id)
        rows = list((await session.execute(query)).scalars())
    assert len(rows) == 5
    statuses = {rows[0].id: "delivered", rows[1].id: "failed", rows[2].id: "delivered", rows[3].id: "pending"}
    async with app_runtime.database.transaction() as session:
        for row_id, status in statuses.items():
            values = {"status": status, "created_at": OLD, "next_attempt_at": utc_now() + timedelta(hours=1)}
            await session.execute(update(WebhookDeliveryRow).where(WebhookDeliveryRow.id == row_id).values(**values))
    assert await purge_finished_deliveries(app_runtime.database, retention_days=0) == 0
    assert await purge_finished_deliveries(app_runtime.database, retention_days=30, batch=2) == 3
    async with app_runtime.database.read() as session:
        left = set((await session.execute(select(WebhookDeliveryRow.id))).scalars())
    # A pending one is kept however old (its retry window gives it up); a recent one too.
    assert left == {rows[3].id, rows[4].id}


@pytest.mark.settings(retention_days=30, batch_output_retention_days=60)
async def test_apply_retention_runs_every_rule_with_its_own_setting(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    batch = await _ended_batch(client, app_runtime)
    # A written file says when it goes (as the hosted API's do); an uploaded one is kept until deleted.
    written = (await client.get(f"/v1/files/{batch['output_file_id']}")).json()
    assert written["expires_at"] == written["created_at"] + 60 * 86400
    listed = (await client.get("/v1/files", params={"purpose": "batch_output"})).json()["data"]
    assert {entry["expires_at"] - entry["created_at"] for entry in listed} == {60 * 86400}
    assert (await client.get(f"/v1/files/{batch['input_file_id']}")).json()["expires_at"] is None
    await _age_batch(app_runtime, batch, files=False)
    forty_days_ago = utc_now() - timedelta(days=40)
    async with app_runtime.database.transaction() as session:
        written = [batch["output_file_id"], batch["error_file_id"]]
        await session.execute(update(FileRow).where(FileRow.id.in_(written)).values(created_at=forty_days_ago))
    report = await apply_retention(app_runtime.database, app_runtime.settings)
    # The batch is past 30 days; its files, 40 days old, are within their 60.
    assert (report.purged_batches, report.purged_batch_files) == (1, 0)
    assert (await client.get(f"/v1/files/{batch['output_file_id']}")).status_code == 200
