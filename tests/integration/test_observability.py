"""Metrics and JSON logs of real processes with the real model: an embedded server, then an API node and a worker
serving its own metrics port (Postgres, Redis)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.databases import fresh_postgres_database, sqlite_url
from tests.fixtures.server import (
    STARTUP_TIMEOUT_S,
    SdkClients,
    ServerProcess,
    free_port,
    run_cli,
    wait_for_ok,
    wait_until_ready,
)

pytestmark = pytest.mark.integration

DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"
KEY = "sk-observed-key"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """An embedded server with keys and JSON logs, on SQLite."""
    folder = tmp_path_factory.mktemp("observed")
    env = {"RESPONSES_DATABASE_URL": sqlite_url(folder), "RESPONSES_API_KEYS": KEY, "RESPONSES_LOG_FORMAT": "json"}
    server = ServerProcess(env, folder / "server.log")
    # At info, for uvicorn's access log (the default fixture logs warnings only).
    server.command = ["serve", "--port", str(server.port), "--log-level", "info"]
    server.start()
    assert wait_for_ok(f"{server.base_url}/health", STARTUP_TIMEOUT_S), server.log_path.read_text()
    yield server
    server.stop()


def test_an_embedded_server_counts_what_it_serves_and_logs_json(embedded: ServerProcess) -> None:
    url = f"{embedded.base_url}/metrics"
    assert httpx.get(url).status_code == 401  # behind the key
    clients = SdkClients()
    try:
        client = clients(embedded.base_url, KEY)
        model = client.models.list().data[0].id
        created = client.responses.create(model=model, input="Say hi.", temperature=0, max_output_tokens=16)
    finally:
        clients.close()
    scraped = samples(httpx.get(url, headers={"authorization": f"Bearer {KEY}"}).text)
    assert value(scraped, "llama_responses_http_requests_total", method="POST", route="/v1/responses", status="200")
    assert value(scraped, "llama_responses_responses_total", model=model, status=created.status) >= 1
    assert value(scraped, "llama_responses_time_to_first_token_seconds_count", model=model) >= 1
    assert value(scraped, "llama_responses_output_tokens_total", model=model) >= created.usage.output_tokens
    assert value(scraped, "llama_responses_free_sequences", model=model) >= 1
    lines = embedded.log_path.read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    # Every line from Python is a JSON object; llama.cpp's native code writes a few plain lines of its own.
    assert not [line for line in lines if line.strip() and not line.startswith(("{", "llama_", "ggml_"))]
    access = [entry for entry in entries if entry["logger"] == "uvicorn.access" and entry.get("method") == "POST"]
    assert access and access[0]["path"] == "/v1/responses" and access[0]["request_id"].startswith("req_")
    assert access[0]["response_id"] == created.id and access[0]["tenant"].startswith("key:")
    assert all(KEY not in line for line in lines)


@pytest.fixture(scope="module")
def worker_and_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, int]]:
    """A worker with --metrics-port and an API node, on a fresh Postgres database and the test Redis."""
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    logs = tmp_path_factory.mktemp("observed-cluster")
    with fresh_postgres_database() as database_url:
        env = {"RESPONSES_DATABASE_URL": database_url, "RESPONSES_REDIS_URL": redis_url}
        assert run_cli(["migrate"], env).returncode == 0
        port = free_port()
        worker = ServerProcess(env, logs / "worker.log", command=["worker", "--metrics-port", str(port)]).start()
        api = ServerProcess(env, logs / "api.log").start()
        try:
            wait_until_ready(api.base_url)
            yield api, port
        finally:
            api.stop()
            worker.stop()


def test_a_worker_serves_its_own_metrics_and_the_api_node_the_queue(
    worker_and_api: tuple[ServerProcess, int],
) -> None:
    api, port = worker_and_api
    worker_url = f"http://127.0.0.1:{port}/metrics"
    assert wait_for_ok(worker_url, 30)
    clients = SdkClients()
    try:
        client = clients(api.base_url)
        model = client.models.list().data[0].id
        created = client.responses.create(model=model, input="Say hi.", temperature=0, max_output_tokens=16)
    finally:
        clients.close()
    # The worker counts the generation it ran (its final commit precedes the reply the API relayed).
    deadline = time.monotonic() + 10
    while True:
        scraped = samples(httpx.get(worker_url).text)
        if value(scraped, "llama_responses_responses_total", model=model, status=created.status) or (
            time.monotonic() > deadline
        ):
            break
        time.sleep(0.1)
    assert value(scraped, "llama_responses_responses_total", model=model, status=created.status) == 1
    assert value(scraped, "llama_responses_queue_wait_seconds_count", model=model) == 1
    assert value(scraped, "llama_responses_worker_heartbeats_total") >= 1
    assert value(scraped, "llama_responses_free_sequences", model=model) >= 1
    on_api = samples(httpx.get(f"{api.base_url}/metrics").text)
    assert value(on_api, "llama_responses_workers") == 1
    assert ("llama_responses_queue_depth", (("model", model),)) in on_api
    assert value(on_api, "llama_responses_http_requests_total", method="POST", route="/v1/responses", status="200")
    # Generation happens on the worker, not here.
    assert value(on_api, "llama_responses_responses_total", model=model, status=created.status) == 0
