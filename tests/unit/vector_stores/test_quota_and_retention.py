"""Vector stores count in the tenant's stored bytes (attaching a file is charged its size, the measure counts its
chunks), and retention deletes a store once its expires_after passes, with its chunks."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import func, select, update

from app.db.base import utc_now
from app.db.models import VectorStoreChunkRow, VectorStoreRow
from app.main import create_app
from app.ops.retention import apply_retention
from app.quotas import repository as quotas
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.unit.vector_stores.conftest import settled, upload, vector_settings

TEXT = b"Retention and quotas apply to vector stores too. " * 20


async def test_attaching_is_charged_and_refused_past_the_quota(tmp_path: Path) -> None:
    settings = vector_settings(tmp_path, embedding=False, max_stored_bytes_per_tenant=2500)
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            file_id = await upload(client, "a.txt", TEXT)  # 985 bytes charged
            store = (await client.post("/v1/vector_stores", json={"name": "q"})).json()
            attached = await client.post(f"/v1/vector_stores/{store['id']}/files", json={"file_id": file_id})
            assert attached.status_code == 200  # its size charged again: about 1970 of 2500
            other = (await client.post("/v1/vector_stores", json={"name": "r"})).json()
            refused = await client.post(f"/v1/vector_stores/{other['id']}/files", json={"file_id": file_id})
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "insufficient_quota"
            listed = (await client.get(f"/v1/vector_stores/{other['id']}/files")).json()
            assert listed["data"] == []  # the refused attach left nothing behind
            assert (await settled(client, store["id"], file_id))["status"] == "completed"
        runtime: Runtime = app.state.runtime
        async with runtime.database.read() as session:
            measured = await quotas.measure_table(session, "vector_store_chunks")
        assert measured == {"public": len(TEXT.strip())}


async def test_retention_deletes_expired_stores_with_their_chunks(tmp_path: Path) -> None:
    settings = vector_settings(tmp_path, embedding=False)
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        runtime: Runtime = app.state.runtime
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            file_id = await upload(client, "a.txt", TEXT)
            expiring = (
                await client.post(
                    "/v1/vector_stores",
                    json={"file_ids": [file_id], "expires_after": {"anchor": "last_active_at", "days": 1}},
                )
            ).json()
            kept = (await client.post("/v1/vector_stores", json={"file_ids": [file_id]})).json()
            for store in (expiring, kept):
                assert (await settled(client, store["id"], file_id))["status"] == "completed"
            # A day and a bit without activity.
            async with runtime.database.transaction() as session:
                await session.execute(
                    update(VectorStoreRow)
                    .where(VectorStoreRow.id == expiring["id"])
                    .values(expires_at=utc_now() - timedelta(minutes=1))
                )
            status = (await client.get(f"/v1/vector_stores/{expiring['id']}")).json()["status"]
            assert status == "expired"
            search = await client.post(f"/v1/vector_stores/{expiring['id']}/search", json={"query": "quotas"})
            assert search.status_code == 400 and search.json()["error"]["code"] == "vector_store_expired"
            report = await apply_retention(runtime.database, settings)
            assert report.purged_vector_stores == 1
            assert (await client.get(f"/v1/vector_stores/{expiring['id']}")).status_code == 404
            found = await client.post(f"/v1/vector_stores/{kept['id']}/search", json={"query": "quotas"})
            assert found.json()["data"][0]["file_id"] == file_id
        async with runtime.database.read() as session:
            left = await session.execute(
                select(VectorStoreChunkRow.vector_store_id, func.count()).group_by(VectorStoreChunkRow.vector_store_id)
            )
        assert dict(left.all()) == {kept["id"]: 1}
