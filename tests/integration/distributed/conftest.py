"""One distributed cluster for the package's tests: started once (model loads and all), shared by its files."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from app.testing.databases import fresh_postgres_database
from app.testing.servers import SdkClients, ServerProcess, run_cli, wait_until_ready
from tests.integration.distributed.cluster import DEFAULT_TEST_REDIS_URL, Cluster


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    logs = tmp_path_factory.mktemp("cluster")
    with fresh_postgres_database() as database_url:
        env = {"RESPONSES_DATABASE_URL": database_url, "RESPONSES_REDIS_URL": redis_url}
        assert run_cli(["migrate"], env).returncode == 0
        env["RESPONSES_COMPACTION_MAX_OUTPUT_TOKENS"] = "48"  # the shipped model's summaries are long
        worker = ServerProcess(env, logs / "worker.log", command=["worker"]).start()
        api_a = ServerProcess(env, logs / "api_a.log").start()
        api_b = ServerProcess(env, logs / "api_b.log").start()
        cluster = Cluster(database_url, redis_url, api_a, api_b, worker, logs, workers=[worker], clients=SdkClients())
        try:
            wait_until_ready(api_a.base_url)
            yield cluster
        finally:
            cluster.clients.close()
            for process in (api_a, api_b, *cluster.workers):
                process.stop()
