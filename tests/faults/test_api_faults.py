"""Faults on the API side, with real processes on a private Postgres and Redis: an API node SIGKILLed under a
background stream, Postgres stopped under load, DELETE while generating, a `store: false` stream whose worker
dies. Each checks what the client sees and what the database holds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis

from app.events.terminal import TERMINAL_STATUSES
from app.testing.cluster import (
    STORY,
    Cluster,
    PostgresServer,
    ServerProcess,
    StreamReader,
    db_fetch,
    db_rows,
    poll_terminal,
    sigkill,
    wait_for_status,
)
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.integration

#: What docs/operating/distributed.md promises: a stream learns that its worker died, and Postgres back serves
#: again, within these.
WORKER_LOSS_BOUND_S = 30
POSTGRES_RECOVERY_BOUND_S = 15
POSTGRES_OUTAGE_S = 10
#: DELETE returns once the response ended; its worker's job ends within this after.
STOP_BOUND_S = 20
#: The background creates made around the outage (about one a second) all end within this.
SETTLE_BOUND_S = 120


@dataclass
class Nodes:
    cluster: Cluster
    api_a: ServerProcess
    api_b: ServerProcess
    worker: ServerProcess

    def replace_worker(self) -> None:
        self.worker = self.cluster.worker("worker")
        self.cluster.wait_ready(self.api_a)


#: Reconciliation every second, and no takeover: a response whose worker dies is failed (by whichever process
#: reconciles first), so that the replay of a reconciler-failed response can be tested.
RECONCILE_FAST = {"RESPONSES_RECONCILE_INTERVAL_S": "1", "RESPONSES_MAX_ATTEMPTS": "1"}


@pytest.fixture(scope="module")
def nodes(cluster: Cluster) -> Iterator[Nodes]:
    cluster.extra_env.update(RECONCILE_FAST)
    worker = cluster.worker("worker")
    api_a, api_b = cluster.api("api_a"), cluster.api("api_b")
    cluster.wait_ready(api_a)
    yield Nodes(cluster, api_a, api_b, worker)


def background_stream_body(tokens: int) -> dict:
    return {"input": STORY, "background": True, "stream": True, "max_output_tokens": tokens, "temperature": 0}


def test_a_background_stream_resumes_exactly_once_through_another_node(nodes: Nodes) -> None:
    doomed = nodes.cluster.api("doomed_api")
    reader = StreamReader("POST", f"{doomed.base_url}/v1/responses", background_stream_body(160))
    assert reader.wait_for(lambda events: len(events) >= 6, timeout_s=60), reader.error
    sigkill(doomed)
    reader.join(10)
    seen = list(reader.events)
    assert reader.terminal is None and not reader.done, "the stream outran the kill; nothing was tested"
    response_id = seen[0]["response"]["id"]
    resumed = httpx.get(
        f"{nodes.api_b.base_url}/v1/responses/{response_id}",
        params={"stream": "true", "starting_after": seen[-1]["sequence_number"]},
        timeout=60,
    )
    assert resumed.text.endswith("data: [DONE]\n\n")
    final = assert_well_formed_stream(seen + parse_sse(resumed.text))  # exactly once: 0..n, one terminal
    assert httpx.get(f"{nodes.api_a.base_url}/v1/responses/{response_id}").json() == final
    stored = db_rows(
        nodes.cluster.database_url,
        "SELECT sequence_number FROM response_events WHERE response_id = $1 ORDER BY 1",
        response_id,
    )
    assert [row["sequence_number"] for row in stored] == list(range(len(seen) + len(parse_sse(resumed.text))))


def test_delete_while_generating_stops_the_generation(nodes: Nodes) -> None:
    base = nodes.api_a.base_url
    created = httpx.post(
        f"{base}/v1/responses", json={**background_stream_body(2000), "stream": False}, timeout=30
    ).json()
    assert wait_for_status(base, created["id"], {"in_progress"}, 30)["status"] == "in_progress"
    time.sleep(0.3)
    deleted = httpx.delete(f"{base}/v1/responses/{created['id']}", timeout=30)
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    assert httpx.get(f"{nodes.api_b.base_url}/v1/responses/{created['id']}").status_code == 404
    database = nodes.cluster.database_url
    assert db_fetch(database, "SELECT count(*) FROM responses WHERE id = $1", created["id"]) == 0
    assert db_fetch(database, "SELECT count(*) FROM response_events WHERE response_id = $1", created["id"]) == 0
    # The worker stopped that generation (it did not go on for 2000 tokens): its job ended, so the key naming
    # the worker that runs it is gone, and the worker lives on.
    with redis.Redis.from_url(nodes.cluster.redis_url) as connection:
        deadline = time.monotonic() + STOP_BOUND_S
        while connection.exists(f"llama-responses:holder:{created['id']}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not connection.exists(f"llama-responses:holder:{created['id']}"), "the generation went on"
    assert nodes.worker.process is not None and nodes.worker.process.poll() is None


def _load(base: str, existing_id: str, stop: threading.Event, answers: list[tuple[float, str, int | str]]) -> None:
    """GETs and readiness checks in turn, and a background create every second, each answer kept with its time."""
    body = {"input": "Hi!", "background": True, "max_output_tokens": 16}
    last_create = 0.0
    with httpx.Client(base_url=base, timeout=10) as http:
        while not stop.is_set():
            calls = [("get", lambda: http.get(f"/v1/responses/{existing_id}")), ("ready", lambda: http.get("/ready"))]
            if time.monotonic() - last_create >= 1:
                last_create = time.monotonic()
                calls.append(("create", lambda: http.post("/v1/responses", json=body)))
            for kind, call in calls:
                try:
                    reply = call()
                    answers.append((time.monotonic(), kind, reply.status_code))
                    if kind == "create" and reply.status_code == 200:
                        answers.append((time.monotonic(), "created", reply.json()["id"]))
                except httpx.HTTPError as error:
                    answers.append((time.monotonic(), kind, type(error).__name__))
            time.sleep(0.05)


def test_a_postgres_outage_is_clean_503s_then_recovers_without_restarts(nodes: Nodes, postgres: PostgresServer) -> None:
    base = nodes.api_a.base_url
    existing = httpx.post(f"{base}/v1/responses", json={"input": "Hi!", "max_output_tokens": 16}, timeout=60).json()
    answers: list[tuple[float, str, int | str]] = []
    stop = threading.Event()
    load = threading.Thread(target=_load, args=(base, existing["id"], stop, answers), daemon=True)
    load.start()
    try:
        time.sleep(1)
        postgres.stop("fast")
        stopped_at = time.monotonic()
        time.sleep(POSTGRES_OUTAGE_S)
        postgres.start()
        back_at = time.monotonic()
        deadline = back_at + POSTGRES_RECOVERY_BOUND_S
        while time.monotonic() < deadline and not any(
            moment > back_at and kind == "get" and status == 200 for moment, kind, status in answers
        ):
            time.sleep(0.1)
        time.sleep(1)
    finally:
        stop.set()
        load.join(30)
    statuses = [status for _, kind, status in answers if kind != "created"]
    assert 500 not in statuses and not [s for s in statuses if isinstance(s, int) and s > 503], statuses
    assert not [s for s in statuses if isinstance(s, str)], "a request was dropped instead of answered"
    during = [status for moment, kind, status in answers if stopped_at + 1 < moment < back_at and kind != "created"]
    assert during and set(during) <= {200, 503}, during  # GET /ready during the outage is a 503 too
    assert 503 in during
    recovered = [
        moment - back_at for moment, kind, status in answers if moment > back_at and kind == "get" and status == 200
    ]
    assert recovered and recovered[0] <= POSTGRES_RECOVERY_BOUND_S
    for process in (nodes.api_a, nodes.api_b, nodes.worker):
        assert process.process is not None and process.process.poll() is None, "a process died with Postgres"
    # Every create answered 200 is stored and ends; none answered 503 left a row behind.
    created = [status for _, kind, status in answers if kind == "created"]
    deadline = time.monotonic() + SETTLE_BOUND_S  # one bound for all: on a loaded machine they queue behind each other
    for response_id in created:
        left = max(deadline - time.monotonic(), 1)
        assert poll_terminal(base, response_id, left)["status"] in TERMINAL_STATUSES, response_id
    stored = db_fetch(nodes.cluster.database_url, "SELECT count(*) FROM responses WHERE background")
    assert stored >= len(created)
    print(
        f"\nPostgres down {POSTGRES_OUTAGE_S}s: {statuses.count(503)} answers 503, 0 answers 500; "
        f"first GET 200 {recovered[0]:.1f}s after it came back"
    )


def test_the_replay_of_a_reconciler_failed_response_ends_with_its_row(nodes: Nodes) -> None:
    nodes.worker.stop()
    doomed = nodes.cluster.worker("doomed", RESPONSES_LEASE_S="3")
    try:
        nodes.cluster.wait_ready(nodes.api_a)
        reader = StreamReader("POST", f"{nodes.api_a.base_url}/v1/responses", background_stream_body(2000))
        assert reader.wait_for(
            lambda events: any(event["type"] == "response.output_text.delta" for event in events), 60
        ), reader.error
        sigkill(doomed)
        killed_at = time.monotonic()
        nodes.replace_worker()  # as an orchestrator would; whoever reconciles first fails what the dead one held
        reader.join(WORKER_LOSS_BOUND_S + 10)
        assert reader.done and reader.terminal is not None and reader.terminal["type"] == "response.failed"
        assert reader.ended_at is not None and reader.ended_at - killed_at <= WORKER_LOSS_BOUND_S
        print(f"\nworker SIGKILL (no takeover) -> background stream ended failed in {reader.ended_at - killed_at:.1f}s")
        response_id = reader.response_id
        replay = httpx.get(f"{nodes.api_b.base_url}/v1/responses/{response_id}", params={"stream": "true"}, timeout=30)
        assert replay.text.endswith("data: [DONE]\n\n")
        replayed = parse_sse(replay.text)
        # What the live client saw, exactly, and well formed: the message it had opened closed (incomplete),
        # `error`, then `response.failed` keeping the output generated so far.
        assert replayed == reader.events
        final = assert_well_formed_stream(replayed)
        assert [event["type"] for event in replayed[-2:]] == ["error", "response.failed"]
        assert final == httpx.get(f"{nodes.api_a.base_url}/v1/responses/{response_id}").json()
        assert final["status"] == "failed" and final["error"]["code"] == "server_error"
        streamed = "".join(event["delta"] for event in replayed if event["type"] == "response.output_text.delta")
        assert streamed and final["output"][-1]["content"][0]["text"] == streamed
        last = db_rows(
            nodes.cluster.database_url,
            "SELECT event->>'type' AS type FROM response_events WHERE response_id = $1 "
            "ORDER BY sequence_number DESC LIMIT 1",
            response_id,
        )
        assert last == [{"type": "response.failed"}]
    finally:
        sigkill(doomed)
        if nodes.worker.process is None or nodes.worker.process.poll() is not None:
            nodes.replace_worker()


def test_an_unstored_stream_whose_worker_dies_ends_failed(nodes: Nodes) -> None:
    body = {"input": STORY, "stream": True, "store": False, "max_output_tokens": 2000, "temperature": 0}
    reader = StreamReader("POST", f"{nodes.api_a.base_url}/v1/responses", body)
    try:
        assert reader.wait_for(
            lambda events: any(event["type"] == "response.output_text.delta" for event in events), 60
        ), reader.error
        sigkill(nodes.worker)
        killed_at = time.monotonic()
        reader.join(WORKER_LOSS_BOUND_S + 10)
        assert not reader.alive, "the stream did not end"
        assert reader.ended_at is not None and reader.ended_at - killed_at <= WORKER_LOSS_BOUND_S
        assert reader.done and reader.error is None
        events = reader.events
        assert [event["type"] for event in events[-2:]] == ["error", "response.failed"]
        assert_well_formed_stream(events)  # the message it had opened closed first
        print(f"\nworker SIGKILL -> store:false stream ended failed in {reader.ended_at - killed_at:.1f}s")
    finally:
        nodes.replace_worker()
