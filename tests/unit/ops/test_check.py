"""`llama-responses check`: what an operator reads for a good configuration and for each kind of broken one."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.config import Settings
from app.db.migrations import upgrade_to_head
from app.testing.servers import free_port


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean RESPONSES_* environment (no .env) with a SQLite file that does not exist yet."""
    monkeypatch.chdir(tmp_path)
    for name in ("RESPONSES_REDIS_URL", "RESPONSES_MODEL_PATH", "RESPONSES_API_KEYS"):
        monkeypatch.delenv(name, raising=False)
    database = tmp_path / "check.db"
    monkeypatch.setenv("RESPONSES_DATABASE_URL", f"sqlite+aiosqlite:///{database}")
    return database


def run_check(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check"])
    return code, capsys.readouterr().out


def test_a_fresh_embedded_setup_is_good(environment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_check(capsys)
    assert code == 0, out
    assert "does not exist yet" in out and "embedded mode" in out and out.rstrip().endswith("all good")
    assert not environment.exists()  # checking creates nothing


def test_a_database_at_head_is_good_and_one_without_the_schema_says_to_migrate(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    environment.touch()
    code, out = run_check(capsys)
    assert code == 1
    assert "PROBLEM  database" in out and "schema at nothing" in out and "fix: run `llama-responses migrate`" in out
    upgrade_to_head(f"sqlite+aiosqlite:///{environment}")
    code, out = run_check(capsys)
    assert code == 0 and "schema at head" in out, out


def test_unreachable_servers_and_a_missing_model_are_problems_with_fixes(
    environment: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    closed = free_port()
    monkeypatch.setenv("RESPONSES_DATABASE_URL", f"postgresql+asyncpg://user:hunter2@127.0.0.1:{closed}/db")
    monkeypatch.setenv("RESPONSES_REDIS_URL", f"redis://127.0.0.1:{closed}/0")
    monkeypatch.setenv("RESPONSES_MODEL_PATH", str(tmp_path / "missing.gguf"))
    code, out = run_check(capsys)
    assert code == 1
    assert "PROBLEM  models" in out and "missing.gguf" in out and "RESPONSES_MODEL_PATH" in out
    assert "PROBLEM  database  cannot reach" in out and "fix: check RESPONSES_DATABASE_URL" in out
    assert "PROBLEM  redis     cannot reach" in out and "fix: check RESPONSES_REDIS_URL" in out
    assert "hunter2" not in out  # the password never printed
    assert out.rstrip().endswith("3 problem(s)")


def test_a_bad_setting_is_named(
    environment: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RESPONSES_LEASE_S", "0")
    code, out = run_check(capsys)
    assert code == 1 and "PROBLEM  settings  RESPONSES_LEASE_S" in out, out


def test_redis_is_read_through_the_queue_the_server_uses(
    environment: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class CountingQueue:
        closed = False

        async def live_workers(self, model: str | None = None) -> int:
            return 3

        async def close(self) -> None:
            CountingQueue.closed = True

    async def connect(settings: Settings) -> CountingQueue:
        assert settings.redis_url == "redis://queue.example:6379/0"
        return CountingQueue()

    monkeypatch.setattr("app.ops.check.ArqQueue.connect", connect)
    monkeypatch.setenv("RESPONSES_REDIS_URL", "redis://queue.example:6379/0")
    _, out = run_check(capsys)
    assert "ok       redis     redis://queue.example:6379/0 answers; 3 worker(s) alive" in out, out
    assert CountingQueue.closed
