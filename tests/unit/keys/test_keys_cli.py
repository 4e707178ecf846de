"""`llama-responses keys create|list|revoke`: the key printed once and stored only as a hash, lists without keys,
revocation; and the operator's `responses` commands naming a project's tenant by `--project` or by a key."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from pathlib import Path

import httpx
import pytest

from app.cli import main
from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation


@pytest.fixture
def database_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cli.db"
    monkeypatch.setenv("RESPONSES_DATABASE_URL", f"sqlite+aiosqlite:///{path}")
    monkeypatch.delenv("RESPONSES_API_KEYS", raising=False)
    return path


def create(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    """The key printed on stdout, and the key id from stderr's note."""
    assert main(["keys", "create", *args]) == 0
    captured = capsys.readouterr()
    key = captured.out.strip()
    assert captured.err.startswith("created key_")
    return key, captured.err.split()[1]


def test_create_prints_the_key_once_and_stores_only_its_hash(
    database_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, key_id = create(capsys, "--project", "billing", "--name", "ci", "--role", "admin")
    assert key.startswith("sk-lr-") and len(key) >= 49
    other, _ = create(capsys, "--project", "billing", "--name", "web")
    assert other != key
    # Nowhere in the database file (nor its WAL) is the key; its SHA-256 is.
    stored = b"".join(path.read_bytes() for path in database_path.parent.glob("cli.db*"))
    assert key.encode() not in stored and other.encode() not in stored
    with sqlite3.connect(database_path) as database:
        rows = database.execute(
            "SELECT id, role, key_hash, redacted_value FROM api_keys ORDER BY created_at"
        ).fetchall()
        projects = database.execute("SELECT name FROM projects").fetchall()
    assert rows[0][:3] == (key_id, "admin", hashlib.sha256(key.encode()).hexdigest())
    assert rows[0][3] == f"{key[:10]}...{key[-4:]}" and rows[1][1] == "member"
    assert projects == [("billing",)]  # created once, shared by both keys

    assert main(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert key not in listing and other not in listing
    lines = listing.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{key_id}  billing  ci  admin")
    assert "active" in lines[0] and "last used -" in lines[0]


def test_list_by_project_revoke_and_errors(database_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, first = create(capsys, "--project", "billing", "--name", "ci")
    create(capsys, "--project", "search", "--name", "web", "--role", "read")
    assert main(["keys", "list", "--project", "search", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["data"]
    assert [(key["project"], key["name"], key["role"]) for key in listed] == [("search", "web", "read")]
    assert main(["keys", "revoke", first]) == 0
    assert capsys.readouterr().out.strip() == f"revoked {first} (ci in project billing)"
    assert main(["keys", "list", "--project", "billing"]) == 0
    assert "revoked 20" in capsys.readouterr().out
    assert main(["keys", "revoke", "key_nope"]) == 1
    assert "not found" in capsys.readouterr().err
    assert main(["keys", "list", "--project", "nope"]) == 1
    assert main(["keys", "create", "--project", "p", "--name", " "]) == 1
    assert "name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["keys", "create", "--project", "p", "--name", "n", "--role", "owner"])


def test_responses_commands_name_a_projects_tenant(database_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key, _ = create(capsys, "--project", "billing", "--name", "ci")
    other, _ = create(capsys, "--project", "search", "--name", "ci")

    async def seed() -> str:
        settings = Settings(database_url=f"sqlite+aiosqlite:///{database_path}", model_id="m", _env_file=None)
        app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                reply = await client.post(
                    "/v1/responses", json={"model": "m", "input": "hi"}, headers={"authorization": f"Bearer {key}"}
                )
                response_id: str = reply.json()["id"]
                return response_id

    response_id = asyncio.run(seed())
    for owner in (["--project", "billing"], ["--api-key", key]):
        assert main(["responses", "list", *owner]) == 0
        assert capsys.readouterr().out.startswith(response_id)
    assert main(["responses", "list", "--api-key", other]) == 0
    assert capsys.readouterr().out == ""
    assert main(["responses", "show", response_id, "--project", "search"]) == 1
    assert main(["responses", "list", "--project", "nope"]) == 1


def test_a_bootstrap_key_names_its_own_tenant_as_before(
    database_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPONSES_API_KEYS", "clé")

    async def seed() -> str:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{database_path}", model_id="m", api_keys="clé", _env_file=None
        )
        app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                headers = {"authorization": "Bearer clé".encode()}  # UTF-8 bytes, as a client sends them
                reply = await client.post("/v1/responses", json={"model": "m", "input": "hi"}, headers=headers)
                response_id: str = reply.json()["id"]
                return response_id

    response_id = asyncio.run(seed())
    assert main(["responses", "list", "--api-key", "clé"]) == 0
    assert capsys.readouterr().out.startswith(response_id)
