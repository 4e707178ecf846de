"""Fault-test fixtures: a private Postgres and Redis per module (tests may stop and restart them)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.testing.cluster import Cluster, PostgresServer, RedisServer, ServerProcess, db_rows, private_cluster


@pytest.fixture(scope="module")
def private() -> Iterator[tuple[Cluster, PostgresServer, RedisServer]]:
    """(cluster, postgres, redis): a migrated private Postgres, a private Redis, no processes yet.

    The processes' logs go to a directory of this module's own, not pytest's tmp_path: pytest prunes old basetemp
    directories, including those of other pytest runs still going on the same machine.
    """
    logs = Path(tempfile.mkdtemp(prefix="llama-responses-faults-"))
    with private_cluster(logs, RESPONSES_COMPACTION_MAX_OUTPUT_TOKENS="48") as made:
        yield made
    print(f"fault-test logs: {logs}")  # kept (a few kB) for reading after a failure


@pytest.fixture(scope="module")
def cluster(private: tuple[Cluster, PostgresServer, RedisServer]) -> Cluster:
    return private[0]


@pytest.fixture(scope="module")
def postgres(private: tuple[Cluster, PostgresServer, RedisServer]) -> PostgresServer:
    return private[1]


@pytest.fixture(scope="module")
def redis_server(private: tuple[Cluster, PostgresServer, RedisServer]) -> RedisServer:
    return private[2]


@pytest.fixture
def workers(cluster: Cluster) -> Iterator[list[ServerProcess]]:
    """The workers a test starts; all stopped at its end, and whatever it left unfinished ended, so that the next
    test starts from no worker and no job (a stopping worker hands its jobs over to the next one otherwise)."""
    started: list[ServerProcess] = []
    yield started
    db_rows(
        cluster.database_url,
        "UPDATE responses SET status = 'failed', job = NULL WHERE status IN ('queued', 'in_progress')",
    )
    for worker in started:
        worker.stop()
