"""`llama-responses projects list|limits`: a project's limits set, shown, cleared and listed straight against the
database (by the project's name or id), the API's checks on the values, and what an API node then applies."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.cli import main
from app.config import Settings
from app.db.session import Database
from app.keys.limits_cache import ProjectLimitsCache
from app.limits.policy import TenantLimits


@pytest.fixture
def database_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cli.db"
    monkeypatch.setenv("RESPONSES_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    monkeypatch.setenv("RESPONSES_RATE_LIMIT_REQUESTS_PER_MIN", "100")
    monkeypatch.delenv("RESPONSES_API_KEYS", raising=False)
    return path


def project_id(capsys: pytest.CaptureFixture[str], name: str) -> str:
    """A new project (through its first key), by its id."""
    assert main(["keys", "create", "--project", name, "--name", "k", "--json"]) == 0
    created: str = json.loads(capsys.readouterr().out)["project_id"]
    return created


def limits(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["projects", "limits", *args, "--json"]) == 0
    shown: dict = json.loads(capsys.readouterr().out)
    return shown


def test_limits_round_trip_through_the_cli(database_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    billing = project_id(capsys, "billing")
    project_id(capsys, "search")
    shown = limits(capsys, "billing", "--requests-per-min", "5", "--max-concurrent", "0", "--max-stored-bytes", "1024")
    assert shown["project_id"] == billing
    assert shown["overrides"] == {
        "requests_per_min": 5,
        "tokens_per_min": None,
        "max_concurrent_requests": 0,
        "max_queued_background": None,
        "max_stored_bytes": 1024,
    }
    assert shown["effective"]["requests_per_min"] == 5 and shown["effective"]["max_concurrent_requests"] == 0
    # By id too; nothing given: shown as it is. The text form says where each value comes from.
    assert main(["projects", "limits", billing]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == f"{billing}  billing"
    assert text[1].split() == ["requests_per_min", "5", "(project)"]
    assert text[2].split() == ["tokens_per_min", "off", "(server's", "setting)"]
    assert text[3].split() == ["max_concurrent_requests", "off", "(project)"]
    cleared = limits(capsys, "billing", "--clear", "requests-per-min", "max_stored_bytes", "--tokens-per-min", "7")
    assert cleared["overrides"]["requests_per_min"] is None and cleared["overrides"]["max_stored_bytes"] is None
    assert cleared["effective"]["requests_per_min"] == 100 and cleared["overrides"]["tokens_per_min"] == 7

    assert main(["projects", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{billing}  billing  requests_per_min=-  tokens_per_min=7")
    assert main(["projects", "list", "--json"]) == 0
    assert [project["project"] for project in json.loads(capsys.readouterr().out)["data"]] == ["billing", "search"]

    async def applied() -> TenantLimits:
        settings = Settings(
            _env_file=None, database_url=f"sqlite+aiosqlite:///{database_path}", max_queued_background_per_tenant=9
        )
        database = Database.connect(settings.database_url)
        try:
            return await ProjectLimitsCache(database, settings).limits_of(f"project:{billing}")
        finally:
            await database.dispose()

    assert asyncio.run(applied()) == TenantLimits(
        requests_per_min=100, tokens_per_min=7, max_concurrent_requests=0, max_queued_background=9
    )


def test_bad_values_and_unknown_projects_are_refused(database_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project_id(capsys, "billing")
    assert main(["projects", "limits", "billing", "--requests-per-min", "-1"]) == 1
    assert "requests_per_min" in capsys.readouterr().err
    assert main(["projects", "limits", "billing", "--tokens-per-min", str(2**31)]) == 1
    assert "tokens_per_min" in capsys.readouterr().err
    assert main(["projects", "limits", "billing", "--max-concurrent", "2", "--clear", "max-concurrent"]) == 1
    assert "contradict" in capsys.readouterr().err
    assert main(["projects", "limits", "nope", "--max-concurrent", "2"]) == 1
    assert "not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["projects", "limits", "billing", "--clear", "max_websockets"])
    with pytest.raises(SystemExit):
        main(["projects", "limits", "billing", "--requests-per-min", "many"])
    assert set(limits(capsys, "billing")["overrides"].values()) == {None}
