"""Vector stores in distributed mode (an API node, workers, Postgres and its full-text search, Redis), the shipped
SmolLM2 as the embedding model served by the workers: a file indexed on a worker (its chunks embedded through the
embedding model's queue, as /v1/embeddings is) and searched through the SDK; a worker killed while it indexes a file
leaves the file to another worker, and the file ends completed (or failed), never in progress for ever."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import redis

from app.testing.databases import connect, fresh_postgres_database
from app.testing.servers import SdkClients, ServerProcess, run_cli, wait_until_ready
from tests.integration.vector_stores.test_vector_stores_embedded import GARDEN, TAXES, shipped_model

pytestmark = pytest.mark.integration

DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"
#: A claim a killed worker left is taken again this soon.
LEASE_S = 3


@dataclass
class Cluster:
    env: dict[str, str]
    api: ServerProcess
    workers: list[ServerProcess]
    logs: Path
    clients: SdkClients

    def new_worker(self, name: str) -> ServerProcess:
        worker = ServerProcess(self.env, self.logs / f"{name}.log", command=["worker"]).start()
        self.workers.append(worker)
        return worker


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    logs = tmp_path_factory.mktemp("vector-cluster")
    with fresh_postgres_database() as database_url:
        env = {
            "RESPONSES_DATABASE_URL": database_url,
            "RESPONSES_REDIS_URL": redis_url,
            "RESPONSES_EMBEDDING_MODELS": f"smol-embed={shipped_model()}",
            "RESPONSES_VECTOR_INDEX_LEASE_S": str(LEASE_S),
            "RESPONSES_VECTOR_INDEX_POLL_S": "0.2",
            # A loaded machine embeds slowly: an attempt is not given up while its embedding merely takes long.
            "RESPONSES_EMBEDDING_TIMEOUT_S": "300",
        }
        assert run_cli(["migrate"], env).returncode == 0
        cluster = Cluster(env, ServerProcess(env, logs / "api.log").start(), [], logs, SdkClients())
        try:
            cluster.new_worker("worker")
            wait_until_ready(cluster.api.base_url)
            yield cluster
        finally:
            cluster.clients.close()
            for process in (cluster.api, *cluster.workers):
                process.stop()


def wait_for(check: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_file_indexed_on_a_worker_is_searched_and_embeddings_go_to_the_workers(cluster: Cluster) -> None:
    client = cluster.clients(cluster.api.base_url)
    wait_for(lambda: b"ready: model" in (cluster.logs / "worker.log").read_bytes(), 120, "the worker")
    store = client.vector_stores.create(name="distributed")
    garden = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("garden.md", GARDEN), poll_interval_ms=100
    )
    taxes = client.vector_stores.files.upload_and_poll(
        vector_store_id=store.id, file=("taxes.txt", TAXES), poll_interval_ms=100
    )
    assert garden.status == taxes.status == "completed", (garden.last_error, taxes.last_error)
    page = client.vector_stores.search(store.id, query="how much sun do tomatoes need")
    assert page.data[0].file_id == garden.id
    vector_only = client.vector_stores.search(
        store.id, query="estimated tax payments", ranking_options={"ranker": "none"}
    )
    assert vector_only.data[0].file_id == taxes.id
    created = client.embeddings.create(model="smol-embed", input="tomatoes in the sun")
    assert np.asarray(created.data[0].embedding).shape == (576,)


def claimed_by(database_url: str, file_id: str) -> str | None:
    async def read() -> str | None:
        connection = await connect(database_url)
        try:
            value = await connection.fetchval("SELECT claimed_by FROM vector_store_files WHERE id = $1", file_id)
            return str(value) if value is not None else None
        finally:
            await connection.close()

    return asyncio.run(read())


def test_a_worker_killed_while_indexing_leaves_the_file_to_another(cluster: Cluster) -> None:
    client = cluster.clients(cluster.api.base_url)
    # 20 chunks of 100 word pieces: embedding them takes the worker a few seconds (more on a loaded machine), and
    # its claim is seen (and the worker killed) well within them.
    words = " ".join(f"paragraph{index % 97} about durable indexing and lost workers" for index in range(286))
    uploaded = client.files.create(file=("long.txt", words.encode()), purpose="assistants")
    store = client.vector_stores.create(name="durable")
    client.vector_stores.files.create(
        vector_store_id=store.id,
        file_id=uploaded.id,
        chunking_strategy={"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 0}},
    )
    database_url = cluster.env["RESPONSES_DATABASE_URL"]
    wait_for(lambda: claimed_by(database_url, uploaded.id) is not None, 60, "a worker to claim the file")
    doomed = cluster.workers[0]
    doomed.kill()
    assert client.vector_stores.files.retrieve(uploaded.id, vector_store_id=store.id).status == "in_progress"
    cluster.new_worker("second")
    deadline = time.monotonic() + 600
    status = "in_progress"
    while status == "in_progress" and time.monotonic() < deadline:
        time.sleep(0.5)
        status = client.vector_stores.files.retrieve(uploaded.id, vector_store_id=store.id).status
    assert status in ("completed", "failed")
    final = client.vector_stores.files.retrieve(uploaded.id, vector_store_id=store.id)
    if final.status == "completed":
        found = client.vector_stores.search(store.id, query="paragraph42 durable")
        assert found.data and found.data[0].file_id == uploaded.id
    else:
        assert final.last_error is not None and final.last_error.code == "server_error"
