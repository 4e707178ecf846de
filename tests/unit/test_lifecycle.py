"""Start-up and faults: unfinished responses of a previous run, an unreachable database."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.config import Settings
from app.db.models import ResponseRow
from app.db.repositories import responses as repository
from app.main import create_app
from tests.fakes import FakeRenderer, FakeRunner, fake_generation


def sqlite_settings(path: Path, **extra: object) -> Settings:
    return Settings(database_url=f"sqlite+aiosqlite:///{path}", model_id="m", _env_file=None, **extra)  # type: ignore[arg-type]


async def test_responses_left_generating_are_failed_at_start_up(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path / "db.sqlite")
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        async with runtime.sessionmaker() as session, session.begin():
            # What a server killed mid-generation leaves behind.
            row = ResponseRow(id="resp_stuck", tenant="public", status="in_progress", model="m", params={}, output=[])
            await repository.insert_response(session, row, [])
    restarted = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with restarted.router.lifespan_context(restarted):
        transport = httpx.ASGITransport(app=restarted)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            after = (await client.get("/v1/responses/resp_stuck")).json()
            chained = await client.post("/v1/responses", json={"input": "x", "previous_response_id": "resp_stuck"})
    assert after["status"] == "failed" and after["error"]["code"] == "server_error"
    assert chained.status_code == 200


async def test_an_unreachable_database_is_a_503(tmp_path: Path) -> None:
    settings = sqlite_settings(tmp_path / "db.sqlite")
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        (tmp_path / "db.sqlite").unlink()
        (tmp_path / "db.sqlite").mkdir()  # the file is now a directory: every connection fails
        await app.state.runtime.engine.dispose()
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            reply = await client.get("/v1/responses/resp_x")
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["type"] == "server_error"
            created = await client.post("/v1/responses", json={"input": "x"})
            assert created.status_code == 503
