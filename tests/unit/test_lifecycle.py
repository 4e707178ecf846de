"""Start-up and faults: unfinished responses of a previous run, an unreachable database."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from app.config import Settings
from app.db.models import ResponseRow
from app.jobs import repository as jobs
from app.main import create_app
from app.responses import repository
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


def sqlite_settings(path: Path, **extra: object) -> Settings:
    return Settings(database_url=f"sqlite+aiosqlite:///{path}", model_id="m", _env_file=None, **extra)  # type: ignore[arg-type]


async def test_at_start_up_background_jobs_left_generating_are_taken_over_and_the_rest_ended(
    tmp_path: Path,
) -> None:
    settings = sqlite_settings(tmp_path / "db.sqlite", lease_s=1, reconcile_interval_s=3600)
    dying = FakeRunner(delay_s=0.1)
    dying.reply, dying.crash_after = [f"w{index}" for index in range(8)], 6
    app = create_app(settings, fake_generation(FakeRenderer(), dying))
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        async with runtime.database.transaction() as session:
            # What a server killed mid-generation leaves behind: a foreground response (its job dropped at claim).
            row = ResponseRow(id="resp_stuck", tenant="public", status="in_progress", model="m", params={}, output=[])
            await repository.insert_response(session, row, [])
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            background = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
        while background["id"] not in dying.runs or dying.runs[background["id"]].produced < 6:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # the run has died; its lease has not expired
        async with runtime.database.read() as session:
            progress = await jobs.progress_of(session, background["id"])
        assert progress is not None and progress.pieces
    restarted = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with restarted.router.lifespan_context(restarted):
        transport = httpx.ASGITransport(app=restarted)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            after = (await client.get("/v1/responses/resp_stuck")).json()
            chained = await client.post("/v1/responses", json={"input": "x", "previous_response_id": "resp_stuck"})
            for _ in range(200):
                resumed = (await client.get(f"/v1/responses/{background['id']}")).json()
                if resumed["status"] != "in_progress":
                    break
                await asyncio.sleep(0.02)
        async with restarted.state.runtime.database.read() as session:
            stuck = await repository.get_by_id(session, "resp_stuck")
            taken_over = await repository.get_by_id(session, background["id"])
            assert await jobs.progress_of(session, background["id"]) is None
    # The lost foreground response is ended as reconciliation ends any lost run: failed, its job and lease gone.
    assert after["status"] == "failed" and after["error"]["code"] == "server_error"
    assert stuck is not None and stuck.job is None and stuck.lease_expires_at is None
    assert chained.status_code == 200
    # The background job goes on from what its first run said, in the new process.
    assert resumed["status"] == "completed", resumed
    text = resumed["output"][0]["content"][0]["text"]
    assert text == "".join(progress.pieces) + " ".join(FakeRunner().reply)
    assert taken_over is not None and taken_over.attempts == 2 and taken_over.job is None


async def test_an_unreachable_database_is_a_503(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path / "db.sqlite")
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        (tmp_path / "db.sqlite").unlink()
        (tmp_path / "db.sqlite").mkdir()  # the file is now a directory: every connection fails
        await app.state.runtime.database.engine.dispose()
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            reply = await client.get("/v1/responses/resp_x")
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["type"] == "server_error"
            created = await client.post("/v1/responses", json={"input": "x"})
            assert created.status_code == 503
