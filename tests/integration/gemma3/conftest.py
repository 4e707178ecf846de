"""Gemma 3 270M served both ways, once for the package: embedded (one process, SQLite) and distributed (an API node
and a worker on Postgres and Redis)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
import redis

from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import ServerProcess, run_cli, sdk_client, wait_until_ready
from tests.integration.gemma3.models import gemma3_path

MODEL = "gemma3"
DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"


@dataclass
class Deployment:
    mode: str
    api: ServerProcess
    client: openai.OpenAI
    #: The processes' logs (the server; or the API node and the worker, which loads the model).
    logs: list[Path]

    def log_text(self) -> str:
        return "".join(path.read_text() for path in self.logs)


def _env(database_url: str) -> dict[str, str]:
    return {
        "RESPONSES_DATABASE_URL": database_url,
        "RESPONSES_MODELS": f"{MODEL}={gemma3_path()}",
        # A small context and two sequences: memory and CI time (its own would be 32k cells a sequence).
        "RESPONSES_N_CTX": "4096",
        "RESPONSES_WORKER_CONCURRENCY": "2",
        "RESPONSES_COMPACTION_MAX_OUTPUT_TOKENS": "24",
    }


@pytest.fixture(scope="package", params=["embedded", "distributed"])
def gemma(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    logs = tmp_path_factory.mktemp(f"gemma3-{request.param}")
    if request.param == "embedded":
        api = ServerProcess(_env(sqlite_url(logs)), logs / "server.log")
        api.command = ["serve", "--port", str(api.port)]  # at INFO: the model's load is logged
        api.start()
        try:
            wait_until_ready(api.base_url)
            with sdk_client(api.base_url) as client:
                yield Deployment("embedded", api, client, [api.log_path])
        finally:
            api.stop()
        return
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    with fresh_postgres_database() as database_url:
        env = {**_env(database_url), "RESPONSES_REDIS_URL": redis_url}
        assert run_cli(["migrate"], env).returncode == 0
        worker = ServerProcess(env, logs / "worker.log", command=["worker"]).start()
        api = ServerProcess(env, logs / "api.log").start()
        try:
            wait_until_ready(api.base_url)
            with sdk_client(api.base_url) as client:
                yield Deployment("distributed", api, client, [api.log_path, worker.log_path])
        finally:
            api.stop()
            worker.stop()
