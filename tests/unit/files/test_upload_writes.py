"""An upload written a chunk a transaction: other writers get SQLite's one writer lock between its chunks (before,
a 50 MB upload held it 3.2 s while other tenants wrote), no read finds the file until it is whole, and an upload
that fails (too large, over the quota, a client gone, a process dead) leaves nothing behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import func, select

from app.db.base import utc_now
from app.db.models import FileChunkRow, FileRow, WebhookEndpointRow
from app.files import repository
from app.files import service as files
from app.files.storage import CHUNK_BYTES
from app.ops.retention import apply_retention
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT

CHUNKS = 4


async def rows(runtime: Runtime) -> tuple[int, int]:
    async with runtime.database.read() as session:
        files_count = (await session.execute(select(func.count()).select_from(FileRow))).scalar_one()
        chunks = (await session.execute(select(func.count()).select_from(FileChunkRow))).scalar_one()
    return files_count, chunks


async def other_tenants_write(runtime: Runtime, index: int) -> None:
    """A write of another tenant's (an endpoint row), in its own unit of work, on another connection."""
    now = utc_now()
    async with runtime.database.transaction() as session:
        session.add(
            WebhookEndpointRow(
                id=f"we_other_{index}",
                tenant="other",
                name="n",
                url="https://example.com/",
                event_types=[],
                status="enabled",
                sealed_secret="s",
                signing_secret_hint="h",
                created_at=now,
                updated_at=now,
            )
        )


async def test_other_writers_go_between_an_uploads_chunks(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    """Between two chunks of an upload, another tenant's write commits (before, it waited on the upload's
    transaction: SQLite's busy timeout, then 'database is locked'); the upload is not listed until it is whole."""
    seen: list[list[dict]] = []

    async def content() -> AsyncIterator[bytes]:
        for index in range(CHUNKS):
            yield bytes([index]) * CHUNK_BYTES
            if index >= 1:
                await other_tenants_write(app_runtime, index)
                seen.append((await client.get("/v1/files")).json()["data"])

    made = await files.upload_file(app_runtime, OPEN_TENANT, purpose="batch", filename="big.jsonl", content=content())
    assert made.bytes == CHUNKS * CHUNK_BYTES
    assert seen == [[], [], []], "a half-written file was listed"
    listed = (await client.get("/v1/files")).json()["data"]
    assert [entry["id"] for entry in listed] == [made.id]
    async with app_runtime.database.read() as session:
        assert (await session.execute(select(func.count()).select_from(WebhookEndpointRow))).scalar_one() == 3
    body = (await client.get(f"/v1/files/{made.id}/content")).content
    assert body == b"".join(bytes([index]) * CHUNK_BYTES for index in range(CHUNKS))


class ClientGone(Exception):
    pass


async def test_an_upload_that_fails_midway_leaves_nothing(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    async def dropped() -> AsyncIterator[bytes]:
        for index in range(3):
            yield bytes([index]) * CHUNK_BYTES
        raise ClientGone

    with pytest.raises(ClientGone):
        await files.upload_file(app_runtime, OPEN_TENANT, purpose="batch", filename="x", content=dropped())
    assert await rows(app_runtime) == (0, 0)
    assert (await client.get("/v1/files")).json()["data"] == []


@pytest.mark.settings(file_max_bytes=2 * CHUNK_BYTES + 10)
async def test_an_upload_over_the_size_limit_leaves_nothing(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    reply = await client.post(
        "/v1/files", files={"file": ("big", b"x" * (3 * CHUNK_BYTES), "application/jsonl")}, data={"purpose": "batch"}
    )
    assert reply.status_code == 413, reply.text
    assert await rows(app_runtime) == (0, 0)


@pytest.mark.settings(max_stored_bytes_per_tenant=CHUNK_BYTES)
async def test_an_upload_over_the_quota_leaves_nothing(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    reply = await client.post(
        "/v1/files", files={"file": ("big", b"x" * (2 * CHUNK_BYTES), "application/jsonl")}, data={"purpose": "batch"}
    )
    assert reply.status_code == 429 and reply.json()["error"]["code"] == "insufficient_quota"
    assert await rows(app_runtime) == (0, 0)


async def test_an_upload_a_dead_process_left_is_never_read_and_retention_drops_it(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """A process that died mid-upload leaves its row `uploading` with some chunks: no read finds it; once a day
    old, retention deletes it with its bytes."""
    async with app_runtime.database.transaction() as session:
        for file_id, age in (("file_dead", timedelta(days=2)), ("file_recent", timedelta(minutes=5))):
            session.add(
                FileRow(
                    id=file_id,
                    tenant=OPEN_TENANT,
                    purpose="batch",
                    filename="x",
                    bytes=0,
                    status=repository.UPLOADING,
                    created_at=utc_now() - age,
                )
            )
            await session.flush()
            await repository.insert_chunk(session, file_id, 0, b"half")
    assert (await client.get("/v1/files")).json()["data"] == []
    assert (await client.get("/v1/files/file_dead")).status_code == 404
    assert (await client.get("/v1/files/file_dead/content")).status_code == 404
    assert (await client.delete("/v1/files/file_dead")).status_code == 404
    # The app's own periodic retention may get there first: what is checked is what is left.
    await apply_retention(app_runtime.database, app_runtime.settings)
    assert await rows(app_runtime) == (1, 1)  # the recent one may still be being written
    async with app_runtime.database.read() as session:
        assert await session.get(FileRow, "file_recent") is not None and await session.get(FileRow, "file_dead") is None
