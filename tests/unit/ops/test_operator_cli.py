"""The operator's CLI: `responses list|show|delete` read and change the store through the services, scoped to one
tenant; `prune` applies the retention settings now."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from app.cli import main
from app.config import Settings
from app.db.base import utc_now
from app.db.models import ResponseRow
from app.db.session import create_engine, create_sessionmaker
from app.main import create_app
from app.tenants.identity import OPEN_TENANT
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


@pytest.fixture
def database_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("RESPONSES_DATABASE_URL", url)
    monkeypatch.setenv("RESPONSES_API_KEYS", "alpha,beta")
    return url


def _seed(url: str, *, aged: int = 0) -> dict[str, list[str]]:
    """Three responses of the key `alpha`, one of `beta`; the first `aged` of alpha's created 40 days ago."""

    async def seed() -> dict[str, list[str]]:
        settings = Settings(database_url=url, model_id="m", api_keys="alpha,beta", _env_file=None)
        app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
        made: dict[str, list[str]] = {"alpha": [], "beta": []}
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            for key, count in (("alpha", 3), ("beta", 1)):
                headers = {"authorization": f"Bearer {key}"}
                async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as client:
                    for _ in range(count):
                        reply = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
                        made[key].append(reply.json()["id"])
            async with app.state.runtime.database.transaction() as session:
                past = utc_now() - timedelta(days=40)
                old = made["alpha"][:aged]
                await session.execute(update(ResponseRow).where(ResponseRow.id.in_(old)).values(created_at=past))
        return made

    return asyncio.run(seed())


def test_list_shows_one_tenants_responses_newest_first(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    made = _seed(database_url)
    assert main(["responses", "list", "--api-key", "alpha"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == made["alpha"][::-1]
    assert all("completed" in line for line in lines)
    assert main(["responses", "list", "--api-key", "alpha", "--limit", "2", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in page["data"]] == made["alpha"][::-1][:2] and page["has_more"] is True
    assert main(["responses", "list", "--tenant", OPEN_TENANT]) == 0  # nobody's: nothing listed
    assert capsys.readouterr().out == ""
    assert main(["responses", "list", "--api-key", "alpha", "--limit", "0"]) == 1
    assert "Invalid 'limit': 0" in capsys.readouterr().err


def test_show_and_delete_stay_within_the_tenant(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    made = _seed(database_url)
    mine, theirs = made["alpha"][0], made["beta"][0]
    assert main(["responses", "show", mine, "--api-key", "alpha"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == mine and shown["status"] == "completed"
    assert main(["responses", "show", theirs, "--api-key", "alpha"]) == 1
    assert "not found" in capsys.readouterr().err
    assert main(["responses", "delete", theirs, "--api-key", "alpha"]) == 1
    capsys.readouterr()
    assert main(["responses", "delete", mine, "--api-key", "alpha"]) == 0
    assert capsys.readouterr().out.strip() == f"deleted {mine}"
    assert main(["responses", "show", mine, "--api-key", "alpha"]) == 1
    assert main(["responses", "show", theirs, "--api-key", "beta"]) == 0


def test_delete_refuses_a_running_response(database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    made = _seed(database_url)

    async def mark_running() -> None:
        engine = create_engine(database_url)
        async with create_sessionmaker(engine)() as session, session.begin():
            await session.execute(
                update(ResponseRow).where(ResponseRow.id == made["alpha"][0]).values(status="in_progress")
            )
        await engine.dispose()

    asyncio.run(mark_running())
    assert main(["responses", "delete", made["alpha"][0], "--api-key", "alpha"]) == 1
    assert "still in_progress" in capsys.readouterr().err


def test_prune_purges_what_retention_says(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _seed(database_url, aged=2)
    assert main(["prune"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("purged 2 responses older than 30 days")
    assert "purged 0 ended batches and 0 finished webhook deliveries" in said
    assert main(["responses", "list", "--api-key", "alpha"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == [made["alpha"][2]]
    monkeypatch.setenv("RESPONSES_RETENTION_DAYS", "0")
    assert main(["prune"]) == 0
    assert capsys.readouterr().out.startswith("purged 0 responses")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RESPONSES_RETENTION_DAYS", "1000000"),
        ("RESPONSES_EVENTS_RETENTION_HOURS", "1e9"),
        ("RESPONSES_BATCH_OUTPUT_RETENTION_DAYS", "1000000"),
    ],
)
def test_a_retention_past_a_datetimes_range_is_refused_with_its_name(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    # Once accepted, it overflowed `now - retention`: every purge tick failed and `prune` crashed.
    monkeypatch.setenv(variable, value)
    assert main(["prune"]) == 2
    error = capsys.readouterr().err
    assert variable in error and "less than or equal to" in error
