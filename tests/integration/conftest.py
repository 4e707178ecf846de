"""A real server with the real model, on SQLite and on Postgres, driven through the openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import SdkClients, ServerProcess, run_cli, sdk_client

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url(tmp_path_factory.mktemp("sqlite"))
        return
    with fresh_postgres_database() as url:
        migrated = run_cli(["migrate"], {"RESPONSES_DATABASE_URL": url})
        assert migrated.returncode == 0, migrated.stderr
        yield url


@pytest.fixture(scope="session")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("logs") / "server.log"
    # Short compaction summaries: the shipped model would otherwise write hundreds of tokens for each.
    env = {"RESPONSES_DATABASE_URL": database_url, "RESPONSES_COMPACTION_MAX_OUTPUT_TOKENS": "48"}
    process = ServerProcess(env, log).start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with sdk_client(server.base_url) as made:
        yield made


@pytest.fixture
def sdk() -> Iterator[SdkClients]:
    clients = SdkClients()
    yield clients
    clients.close()


@pytest.fixture(scope="session")
def model(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "server.log"
