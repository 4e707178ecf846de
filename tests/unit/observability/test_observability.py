"""Metrics, traces and structured logs through the in-process app (the fake model): what an operator sees."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from starlette.types import Message, Receive, Scope, Send

from app.generation.job import GenerationJob
from app.generation.local_runner import LocalRunner
from app.generation.types import SamplingParams
from app.jobs.executor import JobExecutor
from app.observability import logs, tracing
from app.observability.logs import JsonFormatter
from app.observability.metrics import REGISTRY, defined_names
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.transport.memory_bus import MemoryBus

ROOT = Path(__file__).resolve().parents[3]


async def scrape(client: httpx.AsyncClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    reply = await client.get("/metrics")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_requests_by_route_template_and_generations_by_status(
    client: httpx.AsyncClient,
) -> None:
    before = await scrape(client)
    created = (await client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 16})).json()
    assert (await client.get(f"/v1/responses/{created['id']}")).status_code == 200
    assert (await client.get("/v1/no/such/path")).status_code == 404
    after = await scrape(client)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "llama_responses_http_requests_total"
    assert grew(requests, method="POST", route="/v1/responses", status="200") == 1
    # The route template, never the raw path with its id: one series per route.
    assert grew(requests, method="GET", route="/v1/responses/{response_id}", status="200") == 1
    assert grew(requests, method="GET", route="unmatched", status="404") == 1
    assert not any(created["id"] in str(labels) for _, labels in after)
    assert grew("llama_responses_http_request_duration_seconds_count", method="POST", route="/v1/responses") == 1
    assert grew("llama_responses_responses_total", model="fake-model", status="completed") == 1
    assert grew("llama_responses_time_to_first_token_seconds_count", model="fake-model") == 1
    assert grew("llama_responses_queue_wait_seconds_count", model="fake-model") == 1
    assert grew("llama_responses_output_tokens_per_second_count", model="fake-model") == 1
    assert grew("llama_responses_output_tokens_total", model="fake-model") == created["usage"]["output_tokens"]
    assert value(after, "llama_responses_workers") == 1  # embedded: this process generates
    assert value(after, "llama_responses_model_workers", model="fake-model") == 1


async def test_cancelled_and_failed_generations_are_counted_by_their_status(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    before = await scrape(client)
    runner.fail_after = 2
    failed = (await client.post("/v1/responses", json={"input": "hi"})).json()
    assert failed["status"] == "failed"
    after = await scrape(client)
    status = {"model": "fake-model", "status": "failed"}
    assert (
        value(after, "llama_responses_responses_total", **status)
        - value(before, "llama_responses_responses_total", **status)
        == 1
    )


async def test_metrics_need_a_key_on_a_keyed_server(two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    keyed, _ = two_tenants
    assert (await keyed.get("/metrics")).status_code == 200
    refused = await keyed.get("/metrics", headers={"authorization": ""})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_api_key"
    assert (await keyed.get("/metrics", headers={"authorization": "Bearer wrong"})).status_code == 401


@pytest.mark.settings(api_keys="secret-key", metrics_public=True)
async def test_metrics_can_be_opened_to_a_scraper(client: httpx.AsyncClient) -> None:
    assert (await client.get("/metrics")).status_code == 200
    assert (await client.get("/v1/models")).status_code == 401  # only the metrics


async def test_every_reply_names_its_request_id(client: httpx.AsyncClient) -> None:
    ours = await client.get("/health")
    assert re.fullmatch(r"req_\w+", ours.headers["x-request-id"])
    assert (await client.get("/health", headers={"x-request-id": "trace-me-42"})).headers["x-request-id"] == (
        "trace-me-42"
    )


class JsonLines(logging.Handler):
    """Formats each record as it is emitted (the context variables are read then)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def json_lines() -> Iterator[JsonLines]:
    handler = JsonLines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.settings(api_keys="sk-very-secret")
async def test_json_logs_carry_the_ids_and_never_the_key(client: httpx.AsyncClient, json_lines: JsonLines) -> None:
    headers = {"authorization": "Bearer sk-very-secret", "x-request-id": "req-from-client"}
    created = (await client.post("/v1/responses", json={"input": "hi"}, headers=headers)).json()
    entries = [json.loads(line) for line in json_lines.lines]
    ended = [entry for entry in entries if entry["logger"] == "llama_responses.generation"]
    assert len(ended) == 1, entries
    entry = ended[0]
    assert entry["response_id"] == created["id"] and entry["model"] == "fake-model"
    assert entry["request_id"] == "req-from-client"
    assert entry["tenant"].startswith("key:") and entry["level"] == "info"
    assert all("sk-very-secret" not in line for line in json_lines.lines)


async def test_every_request_line_about_a_response_names_it(
    app: FastAPI, client: httpx.AsyncClient, json_lines: JsonLines
) -> None:
    created = (await client.post("/v1/responses", json={"input": "hi"})).json()["id"]

    async def with_access_lines(scope: Scope, receive: Receive, send: Send) -> None:
        """As uvicorn does: its access line is logged when the reply starts, within the app's own context."""

        async def logging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                logging.getLogger("uvicorn.access").info("%s %s %d", scope["method"], scope["path"], message["status"])
            await send(message)

        await app(scope, receive, logging_send)

    transport = httpx.ASGITransport(app=with_access_lines)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        json_lines.lines.clear()
        for method, path in [
            ("GET", f"/v1/responses/{created}"),
            ("GET", f"/v1/responses/{created}?stream=true"),
            ("GET", f"/v1/responses/{created}/input_items"),
            ("POST", f"/v1/responses/{created}/cancel"),
            ("DELETE", f"/v1/responses/{created}"),
            ("GET", f"/v1/responses/{created}"),
        ]:
            await http.request(method, path)
    access = [json.loads(line) for line in json_lines.lines if '"logger": "uvicorn.access"' in line]
    assert len(access) == 6, json_lines.lines
    assert all(entry["response_id"] == created and entry["request_id"] for entry in access), access
    # Outside a request, and on a route without one, no response id is made up.
    assert "response_id" not in logs.current()


def test_uvicorn_access_lines_become_json_with_the_request_context() -> None:
    access = ("1.2.3.4:5", "GET", "/x", "1.1", 200)
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', access, None)
    with logs.bound(request_id="req_1", tenant="public"):
        entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == '1.2.3.4:5 - "GET /x HTTP/1.1" 200'
    assert (entry["method"], entry["path"], entry["status"], entry["request_id"]) == ("GET", "/x", 200, "req_1")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on for one test, with spans kept in memory; the process's tracer provider unset afterwards."""
    exporter = InMemorySpanExporter()
    assert not tracing.enabled()
    assert tracing.configure_tracing("llama-responses-test", exporter)
    yield exporter
    RedisInstrumentor().uninstrument()
    # NOTE: OpenTelemetry sets its provider once per process; its own test utilities reset these globals too.
    trace._TRACER_PROVIDER_SET_ONCE._done = False  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]


@pytest.fixture
async def traced_client(spans: InMemorySpanExporter, settings) -> AsyncIterator[httpx.AsyncClient]:
    from app.main import create_app
    from app.testing.fakes import FakeRenderer, fake_generation

    app: FastAPI = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http,
    ):
        yield http


async def test_one_trace_from_the_request_to_prefill_and_decode(
    traced_client: httpx.AsyncClient, spans: InMemorySpanExporter
) -> None:
    created = (await traced_client.post("/v1/responses", json={"input": "hi"})).json()
    assert created["status"] == "completed"
    # The job's span ends when its task does, just after it publishes the terminal event that ended the request.
    for _ in range(100):
        if any(span.name == "generate" for span in spans.get_finished_spans()):
            break
        await asyncio.sleep(0.01)
    finished = spans.get_finished_spans()
    by_name = {span.name: span for span in finished}
    request = next(span for span in finished if span.name == "POST /v1/responses")
    trace_id = request.context.trace_id
    for name in ("render prompt", "generate", "prefill", "decode"):
        assert by_name[name].context.trace_id == trace_id, name
    generate = by_name["generate"]
    assert generate.attributes["llama_responses.response_id"] == created["id"]
    assert by_name["prefill"].parent.span_id == generate.context.span_id
    assert by_name["prefill"].attributes["llama_responses.prompt_tokens"] == created["usage"]["input_tokens"]
    assert by_name["decode"].attributes["llama_responses.output_tokens"] == created["usage"]["output_tokens"]
    assert by_name["decode"].attributes["llama_responses.status"] == "completed"
    assert (by_name["prefill"].end_time or 0) <= (by_name["decode"].start_time or 0)
    # The statements of both sides: the API storing the response, the generation claiming and finishing it.
    statements = [span for span in finished if span.attributes.get("db.system") == "sqlite"]
    in_trace = [span for span in statements if span.context.trace_id == trace_id]
    assert any(span.parent.span_id == generate.context.span_id for span in in_trace)
    assert any(span.parent.span_id != generate.context.span_id for span in in_trace)


async def test_the_job_payload_carries_the_trace_to_another_process(
    spans: InMemorySpanExporter, app_runtime: Runtime
) -> None:
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=3)
    response = {"id": "resp_traced", "model": "fake-model", "object": "response", "created_at": 0, "status": "queued"}
    with tracing.tracer().start_as_current_span("api request") as request:
        job = GenerationJob("resp_traced", [1], sampling, response=response, store=False, keep_events=False, tenant="t")
    # As a worker reads it: JSON through Redis, in a context that holds no span.
    payload = json.loads(json.dumps(job.to_payload()))
    worker_job = GenerationJob.from_payload(payload)
    run = JobExecutor(FakeRunner(), app_runtime.database, MemoryBus(), owner="worker_x").execute(worker_job)
    await asyncio.get_running_loop().create_task(run, context=contextvars.Context())
    generate = next(span for span in spans.get_finished_spans() if span.name == "generate")
    assert generate.context.trace_id == request.get_span_context().trace_id
    assert generate.parent is not None and generate.parent.span_id == request.get_span_context().span_id
    assert {"prefill", "decode"} <= {span.name for span in spans.get_finished_spans()}


def test_tracing_is_off_unless_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not tracing.wanted()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert tracing.wanted()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not tracing.wanted()
    assert tracing.context_carrier() == {}  # no provider: nothing travels in a job


def test_the_grafana_dashboard_queries_only_metrics_we_define() -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(expressions) >= 15
    ours = defined_names()
    queried = {name for expression in expressions for name in re.findall(r"\bllama_responses_\w+", expression)}
    assert queried and queried <= ours, queried - ours
    for expression in expressions:
        # Whatever names a series outside label matchers, ranges and groupings must be one of ours.
        bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\b(by|without)\s*\([^)]*\)", "", expression)
        words = set(re.findall(r"[A-Za-z_:][\w:]*", bare))
        functions = {"sum", "max", "rate", "histogram_quantile"}
        assert words - functions <= ours, (expression, words - functions - ours)


def test_processes_sharing_a_multiprocess_dir_are_summed(tmp_path: Path) -> None:
    """PROMETHEUS_MULTIPROC_DIR (several processes behind one port): a scrape of any of them sums them all."""
    count = "from app.observability.metrics import HTTP_REQUESTS; HTTP_REQUESTS.labels('GET', '/x', '200').inc()"
    show = "from app.observability.metrics import exposition; print(exposition()[0].decode())"
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for code in (count, count):
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT)
    shown = subprocess.run([sys.executable, "-c", show], env=env, check=True, cwd=ROOT, capture_output=True, text=True)
    assert 'llama_responses_http_requests_total{method="GET",route="/x",status="200"} 2.0' in shown.stdout


async def test_a_scrape_answers_while_the_queue_cannot_be_read_and_counts_the_failure(
    client: httpx.AsyncClient, app_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unreachable(models: object) -> None:
        raise ConnectionError("redis is down")

    before = await scrape(client)
    monkeypatch.setattr(app_runtime.queue, "availability", unreachable)
    after = await scrape(client)  # 200: metrics matter most in an outage
    assert value(after, "llama_responses_redis_errors_total") - value(before, "llama_responses_redis_errors_total") == 1


async def test_failed_database_statements_are_counted(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    before = await scrape(client)
    with pytest.raises(OperationalError):
        async with app_runtime.database.engine.connect() as connection:
            await connection.execute(text("SELECT * FROM no_such_table"))
    after = await scrape(client)
    errors = "llama_responses_database_errors_total"
    assert value(after, errors) - value(before, errors) == 1


class SequencesOnly:
    """What LocalRunner reads of an engine, without llama.cpp."""

    slots = 2
    cached_bytes = 4096

    def __init__(self) -> None:
        self.requests: list[object] = []

    def submit(self, request: object) -> None:
        self.requests.append(request)

    def close(self) -> None:
        return None


async def test_a_runner_reports_its_sequences_and_zeroes_them_when_its_model_is_unloaded() -> None:
    engine = SequencesOnly()
    runner = LocalRunner(engine)  # type: ignore[arg-type]
    sampling = SamplingParams(temperature=0, top_p=1, max_output_tokens=3)
    for index in range(3):
        runner.start(GenerationJob(f"resp_{index}", [1], sampling, {}, False, False, tenant="t", model="gauged"))

    def gauge(name: str) -> float | None:
        return REGISTRY.get_sample_value(f"llama_responses_{name}", {"model": "gauged"})

    assert (gauge("active_sequences"), gauge("free_sequences"), gauge("sequence_waiting_jobs")) == (2, 0, 1)
    # The queue's depth (jobs waiting for a worker) is another gauge, which a runner leaves alone.
    assert gauge("queue_depth") is None
    assert gauge("prefix_cache_bytes") == 4096
    await runner.close()
    assert (gauge("active_sequences"), gauge("free_sequences"), gauge("prefix_cache_bytes")) == (0, 0, 0)


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/v1/responses", "/v1/responses"),
        ("/v1/responses?metadata%5Buser%5D=alice%40example.com&limit=5", "/v1/responses?metadata[user]=…&limit=…"),
        ("/v1/responses?metadata[a b]=x&flag&&after=resp_1", "/v1/responses?metadata[a%20b]=…&flag=…&after=…"),
        ("/v1/x?%0d%0aforged=1", "/v1/x?%0D%0Aforged=…"),
    ],
)
def test_access_paths_keep_query_names_not_values(path: str, logged: str) -> None:
    assert logs.without_query_values(path) == logged


UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


@pytest.fixture
def logging_as_serve_leaves_it() -> Iterator[None]:
    """Logging configured as `serve` does for one test, then put back as the rest of the suite expects it."""
    root = logging.getLogger()
    saved = [(root, root.handlers[:], root.level, root.filters[:], root.propagate)]
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.level, logger.filters[:], logger.propagate))
    yield
    for logger, handlers, level, filters, propagate in saved:
        logger.handlers, logger.filters, logger.propagate = handlers, filters, propagate
        logger.setLevel(level)


def log_access_as_uvicorn_does(query: bytes) -> None:
    """uvicorn's own access call (protocols/http/h11_impl.py), with the path as uvicorn builds it."""
    from uvicorn.protocols.utils import get_path_with_query_string

    # As uvicorn's server fills it: 0.55 builds the logged path from `raw_path`, earlier releases from `path`.
    scope: Any = {"path": "/v1/responses", "raw_path": b"/v1/responses", "query_string": query}
    path = get_path_with_query_string(scope)
    logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "1.2.3.4:5", "GET", path, "1.1", 200)


QUERY = b"metadata%5Buser%5D=alice%40example.com&status=completed"


@pytest.mark.usefixtures("logging_as_serve_leaves_it")
def test_text_access_lines_drop_query_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging.config

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from app import cli

    # The log config `serve` hands uvicorn (which applies it with dictConfig), the server itself not started.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RESPONSES_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.delenv("RESPONSES_LOG_FORMAT", raising=False)
    monkeypatch.setattr(cli, "_preflight", lambda settings: None)
    handed: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: handed.update(options))
    assert cli.main(["serve"]) == 0
    logging.config.dictConfig(handed["log_config"])
    log_access_as_uvicorn_does(QUERY)
    line = capsys.readouterr().out
    assert '"GET /v1/responses?metadata[user]=…&status=… HTTP/1.1" 200' in line, line
    assert "alice" not in line and "completed" not in line
    assert "filters" not in LOGGING_CONFIG["loggers"]["uvicorn.access"], "uvicorn's own config was changed"


@pytest.mark.usefixtures("logging_as_serve_leaves_it")
def test_json_access_lines_drop_query_values(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure_logging("json")
    logs.configure_logging("json")  # configured twice, the filter is there once
    assert len(logging.getLogger("uvicorn.access").filters) == 1
    log_access_as_uvicorn_does(QUERY)
    entry = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert entry["path"] == "/v1/responses?metadata[user]=…&status=…", entry
    assert "alice" not in json.dumps(entry)
