"""Metrics and JSON logs of real processes with the real model: an embedded server, then an API node and a worker
serving its own metrics port (Postgres, Redis)."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import (
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
        with pytest.raises(openai.AuthenticationError) as refused:
            clients(embedded.base_url, "not-the-key").models.list()
    finally:
        clients.close()
    scraped = samples(httpx.get(url, headers={"authorization": f"Bearer {KEY}"}).text)
    assert value(scraped, "llama_responses_http_requests_total", method="POST", route="/v1/responses", status="200")
    assert value(scraped, "llama_responses_responses_total", model=model, status=created.status) >= 1
    assert value(scraped, "llama_responses_time_to_first_token_seconds_count", model=model) >= 1
    assert value(scraped, "llama_responses_output_tokens_total", model=model) >= created.usage.output_tokens
    assert value(scraped, "llama_responses_free_sequences", model=model) >= 1
    # A runner reports what waits for its sequences; embedded, jobs beyond them wait in the waiting room, whose
    # depth is the queue's (nothing waits now).
    assert scraped[("llama_responses_sequence_waiting_jobs", (("model", model),))] == 0
    assert scraped[("llama_responses_queue_depth", (("model", model),))] == 0
    assert value(scraped, "llama_responses_model_loaded", model=model) == 1  # it answered: it is in memory
    lines = embedded.log_path.read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    # Every line from Python is a JSON object; llama.cpp's native code writes a few plain lines of its own.
    assert not [line for line in lines if line.strip() and not line.startswith(("{", "llama_", "ggml_"))]
    access = [entry for entry in entries if entry["logger"] == "uvicorn.access"]
    posted = [entry for entry in access if entry.get("method") == "POST"]
    assert posted and posted[0]["path"] == "/v1/responses" and posted[0]["request_id"].startswith("req_")
    assert posted[0]["response_id"] == created.id and posted[0]["tenant"].startswith("key:")
    assert all(KEY not in line for line in lines)
    # The SDK reads our x-request-id: an operator finds a client's failed call in the log by it.
    assert any(entry.get("request_id") == refused.value.request_id and entry.get("status") == 401 for entry in access)


@pytest.fixture(scope="module")
def worker_and_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess, int]]:
    """A worker with --metrics-port and an API node, on a fresh Postgres database and the test Redis, both
    printing their spans (OpenTelemetry's console exporter) and JSON log lines into their logs."""
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with redis.Redis.from_url(redis_url) as connection:
        connection.flushdb()
    logs = tmp_path_factory.mktemp("observed-cluster")
    with fresh_postgres_database() as database_url:
        env = {"RESPONSES_DATABASE_URL": database_url, "RESPONSES_REDIS_URL": redis_url}
        assert run_cli(["migrate"], env).returncode == 0
        env |= {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "50", "RESPONSES_LOG_FORMAT": "json"}
        port = free_port()
        worker = ServerProcess(env, logs / "worker.log", command=["worker", "--metrics-port", str(port)]).start()
        api = ServerProcess(env, logs / "api.log").start()
        try:
            wait_until_ready(api.base_url)
            yield api, worker, port
        finally:
            api.stop()
            worker.stop()


def printed_spans(log: Path) -> list[dict]:
    """The spans the console exporter printed (multi-line JSON objects among the log lines)."""
    text, decoder, found = log.read_text(), json.JSONDecoder(), []
    for start in (match.start() for match in re.finditer(r'^\{\n\s+"name": ', text, re.MULTILINE)):
        found.append(decoder.raw_decode(text, start)[0])
    return found


def test_a_worker_serves_its_own_metrics_and_the_api_node_the_queue(
    worker_and_api: tuple[ServerProcess, ServerProcess, int],
) -> None:
    api, _, port = worker_and_api
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
    # A worker reports what waits for its sequences; the Redis backlog is the API nodes' to report.
    assert scraped[("llama_responses_sequence_waiting_jobs", (("model", model),))] == 0
    assert ("llama_responses_queue_depth", (("model", model),)) not in scraped
    on_api = samples(httpx.get(f"{api.base_url}/metrics").text)
    assert value(on_api, "llama_responses_workers") == 1
    assert value(on_api, "llama_responses_model_workers", model=model) == 1
    assert ("llama_responses_queue_depth", (("model", model),)) in on_api
    assert value(on_api, "llama_responses_http_requests_total", method="POST", route="/v1/responses", status="200")
    # Generation happens on the worker, not here.
    assert value(on_api, "llama_responses_responses_total", model=model, status=created.status) == 0


def log_entries(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"time"')]


def test_one_trace_runs_from_the_api_node_through_redis_to_the_worker(
    worker_and_api: tuple[ServerProcess, ServerProcess, int],
) -> None:
    api, worker, _ = worker_and_api
    clients = SdkClients()
    try:
        client = clients(api.base_url)
        model = client.models.list().data[0].id
        headers = {"x-request-id": "req-from-the-client"}
        created = client.responses.create(model=model, input="Hi.", max_output_tokens=16, extra_headers=headers)
    finally:
        clients.close()
    deadline = time.monotonic() + 15
    while True:  # each process exports its spans in batches, 50 ms apart
        generate = [span for span in printed_spans(worker.log_path) if span["name"] == "generate"]
        generate = [span for span in generate if span["attributes"]["llama_responses.response_id"] == created.id]
        requests = [span for span in printed_spans(api.log_path) if span["name"] == "POST /v1/responses"]
        if (generate and requests) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert generate, worker.log_path.read_text()[-3000:]
    trace_id = generate[0]["context"]["trace_id"]
    assert trace_id in {span["context"]["trace_id"] for span in requests}
    on_worker = [span for span in printed_spans(worker.log_path) if span["context"]["trace_id"] == trace_id]
    assert {"generate", "prefill", "decode"} <= {span["name"] for span in on_worker}
    # The worker's log line about this generation names the request that queued it.
    ended = [entry for entry in log_entries(worker.log_path) if entry.get("response_id") == created.id]
    assert ended and ended[0]["logger"] == "llama_responses.generation", ended
    assert ended[0]["request_id"] == "req-from-the-client" and ended[0]["tenant"] == "public"
