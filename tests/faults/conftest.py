"""Fault-test fixtures: a private Postgres and Redis per module (tests may stop and restart them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.harness import Cluster, PostgresServer, RedisServer, private_cluster


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, PostgresServer, RedisServer]]:
    """(cluster, postgres, redis): a migrated private Postgres, a private Redis, no processes yet."""
    with private_cluster(tmp_path_factory.mktemp("faults"), RESPONSES_COMPACTION_MAX_OUTPUT_TOKENS="48") as made:
        yield made


@pytest.fixture(scope="module")
def cluster(private: tuple[Cluster, PostgresServer, RedisServer]) -> Cluster:
    return private[0]


@pytest.fixture(scope="module")
def postgres(private: tuple[Cluster, PostgresServer, RedisServer]) -> PostgresServer:
    return private[1]


@pytest.fixture(scope="module")
def redis_server(private: tuple[Cluster, PostgresServer, RedisServer]) -> RedisServer:
    return private[2]
