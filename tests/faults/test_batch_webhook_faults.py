"""Batches and webhooks under faults (issue 23, "Done when"), with real processes on a private Postgres and Redis:
a worker SIGKILLed mid-batch loses no line and runs none twice; an API node SIGKILLed mid-delivery leaves the
event to another process, which sends it under the same webhook-id; a receiver that is down when a background
response ends gets the event once it is back. Every delivery is checked with the SDK's `client.webhooks.unwrap`.

Workers run with a 3 s lease and a 1 s reconciliation interval (takeovers within seconds); deliveries time out
after 2 s (RESPONSES_WEBHOOK_TIMEOUT_S), so a dead deliverer's claim (6 timeouts) runs out in 12 s.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from app.testing.cluster import Cluster, ServerProcess, db_rows, poll_terminal, sigkill, worker_id
from app.testing.receiver import ReceivedRequest, Receiver, free_port, running_receiver
from app.testing.servers import sdk_client
from tests.faults.checks import start_worker

pytestmark = pytest.mark.integration

FAST = {
    "RESPONSES_LEASE_S": "3",
    "RESPONSES_RECONCILE_INTERVAL_S": "1",
    "RESPONSES_WORKER_CONCURRENCY": "2",
    "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
    "RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S": "0.2",
    "RESPONSES_WEBHOOK_TIMEOUT_S": "2",
    "RESPONSES_BATCH_INTERVAL_S": "0.2",
}
#: Workers take no part in delivering here (their first round would come after an hour): the API nodes do, so
#: that a test knows which process holds a delivery.
NOT_DELIVERING = {"RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S": "3600"}
#: One llama.cpp thread a worker: two workers on a loaded 2-core machine, each spinning two threads, crawl.
ONE_THREAD = {"RESPONSES_N_THREADS": "1"}
LINES = 20
TERMINAL = ("completed", "failed", "expired", "cancelled")
#: Generous bounds: on a 2-core machine shared with other test runs a token can take 0.5 s.
BATCH_BOUND_S = 150
DELIVERY_BOUND_S = 60


@pytest.fixture(scope="module", autouse=True)
def fast(cluster: Cluster) -> None:
    cluster.extra_env.update(FAST)


@pytest.fixture
def apis(cluster: Cluster) -> Iterator[list[ServerProcess]]:
    """The API nodes a test starts (a test kills some): every one stopped at its end."""
    started: list[ServerProcess] = []
    yield started
    for node in started:
        node.stop()


@pytest.fixture
def clients() -> Iterator[list[openai.OpenAI]]:
    made: list[openai.OpenAI] = []
    yield made
    for client in made:
        client.close()


def api_node(cluster: Cluster, apis: list[ServerProcess], clients: list[openai.OpenAI]) -> openai.OpenAI:
    node = cluster.api()
    apis.append(node)
    client = sdk_client(node.base_url)
    clients.append(client)
    return client


def wait_for_requests(receiver: Receiver, count: int, timeout_s: float = DELIVERY_BOUND_S) -> list[ReceivedRequest]:
    deadline = time.monotonic() + timeout_s
    while len(receiver.requests) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(receiver.requests) >= count, f"{len(receiver.requests)} of {count} requests came"
    return list(receiver.requests)


def deliveries(node: ServerProcess, endpoint_id: str) -> list[dict[str, Any]]:
    """The endpoint's deliveries, as GET /v1/webhook_endpoints/{id}/deliveries lists them."""
    listed = httpx.get(f"{node.base_url}/v1/webhook_endpoints/{endpoint_id}/deliveries", timeout=10)
    assert listed.status_code == 200, listed.text
    found: list[dict[str, Any]] = listed.json()["data"]
    return found


def unwrapped(client: openai.OpenAI, request: ReceivedRequest, secret: str) -> Any:
    """The event, verified as a receiver verifies it (an invalid signature raises)."""
    return client.webhooks.unwrap(request.body, request.headers, secret=secret)


def wait_for_batch(client: openai.OpenAI, batch_id: str, until: Any, timeout_s: float = BATCH_BOUND_S) -> Any:
    deadline = time.monotonic() + timeout_s
    batch = client.batches.retrieve(batch_id)
    while not until(batch):
        assert batch.status not in TERMINAL, batch
        assert time.monotonic() < deadline, batch
        time.sleep(0.2)
        batch = client.batches.retrieve(batch_id)
    return batch


def running_holder(cluster: Cluster, candidates: list[ServerProcess]) -> tuple[ServerProcess, list[str], list[str]]:
    """A worker holding the lease of a line's running response now, frozen (SIGSTOP, for the caller to kill); the
    responses it holds running, and those it has claimed but not started. Read once it is frozen: a worker still
    running could claim another line between the read and the kill (a CI run met one on a loaded machine)."""
    ids = {worker_id(worker): worker for worker in candidates}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = db_rows(
            cluster.database_url,
            "SELECT lease_owner FROM responses WHERE status = 'in_progress' AND lease_owner IS NOT NULL",
        )
        for row in rows:
            if row["lease_owner"] in ids:
                frozen = ids[row["lease_owner"]]
                assert frozen.process is not None
                frozen.process.send_signal(signal.SIGSTOP)
                held = db_rows(
                    cluster.database_url,
                    "SELECT id, status FROM responses WHERE lease_owner = $1 AND status IN ('queued', 'in_progress')",
                    row["lease_owner"],
                )
                running = [found["id"] for found in held if found["status"] == "in_progress"]
                claimed = [found["id"] for found in held if found["status"] == "queued"]
                if running:
                    return frozen, running, claimed
                frozen.process.send_signal(signal.SIGCONT)  # its line ended before it froze: look again
        time.sleep(0.05)
    raise AssertionError("no worker held a running line")


def test_a_worker_killed_mid_batch_loses_no_line_and_runs_none_twice(
    cluster: Cluster, apis: list[ServerProcess], clients: list[openai.OpenAI], workers: list[ServerProcess]
) -> None:
    client = api_node(cluster, apis, clients)
    first = start_worker(cluster, workers, apis[0], **NOT_DELIVERING, **ONE_THREAD)
    second = start_worker(cluster, workers, apis[0], **NOT_DELIVERING, **ONE_THREAD)
    model = client.models.list().data[0].id
    requests = [
        {
            "custom_id": f"line-{index}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": model, "input": f"Say {index}.", "max_output_tokens": 16, "temperature": 0},
        }
        for index in range(LINES)
    ]
    data = b"".join(json.dumps(request).encode() + b"\n" for request in requests)
    uploaded = client.files.create(file=("lines.jsonl", data), purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h")

    # Mid-batch: some lines done, others running; the worker holding a running line's lease is killed.
    batch = wait_for_batch(client, batch.id, lambda got: got.request_counts and got.request_counts.completed >= 1)
    assert batch.model == model
    victim, killed_with, claimed = running_holder(cluster, [first, second])
    sigkill(victim)
    done_before_kill = batch.request_counts.completed

    batch = wait_for_batch(client, batch.id, lambda got: got.status in TERMINAL)
    assert batch.status == "completed", batch
    assert batch.request_counts is not None
    counts = batch.request_counts
    assert (counts.total, counts.completed, counts.failed) == (LINES, LINES, 0)
    assert batch.output_file_id and batch.error_file_id is None
    output = [json.loads(raw) for raw in client.files.content(batch.output_file_id).text.splitlines()]
    # Every line exactly once, each answered 200 by its own response.
    assert sorted(Counter(line["custom_id"] for line in output).items()) == sorted(
        (request["custom_id"], 1) for request in requests
    )
    response_ids = [line["response"]["request_id"] for line in output]
    assert len(set(response_ids)) == LINES
    for line in output:
        assert line["error"] is None and line["response"]["status_code"] == 200, line
        body = line["response"]["body"]
        assert body["id"] == line["response"]["request_id"] and body["status"] in ("completed", "incomplete")
        stored = client.responses.retrieve(body["id"])
        assert stored.output_text == body["output"][0]["content"][0]["text"]
    # No line's response was generated twice: the batch made exactly its lines' responses, each one job; the lines
    # the dead worker was running were resumed once by the other (attempts 2), those it had only claimed started at
    # most once more, every other ran once.
    rows = db_rows(
        cluster.database_url,
        "SELECT id, attempts, status FROM responses WHERE created_at >= to_timestamp($1)",
        float(batch.created_at),
    )
    assert sorted(row["id"] for row in rows) == sorted(response_ids), "responses beside the lines' own"
    attempts = {row["id"]: row["attempts"] for row in rows}
    assert killed_with and all(attempts[response_id] == 2 for response_id in killed_with), (killed_with, attempts)
    assert all(attempts[response_id] in (1, 2) for response_id in claimed), (claimed, attempts)
    others = {key: count for key, count in attempts.items() if key not in killed_with and key not in claimed}
    assert set(others.values()) == {1}, attempts
    print(f"\nbatch of {LINES}: worker killed with {done_before_kill} lines done, {len(killed_with)} taken over")


def test_an_api_node_killed_mid_delivery_leaves_the_event_to_another_under_the_same_webhook_id(
    cluster: Cluster, apis: list[ServerProcess], clients: list[openai.OpenAI]
) -> None:
    client = api_node(cluster, apis, clients)
    with running_receiver() as receiver:
        receiver.hold_next = 1  # the first attempt is held open: its sender is killed meanwhile
        endpoint = client.webhooks.create(name="held", url=receiver.url, event_types=["batch.failed"])
        # A batch whose file fails validation: the API node ends it `failed` and records batch.failed; it is the
        # only process, so it is the one delivering.
        uploaded = client.files.create(file=("bad.jsonl", b"{not json\n"), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h")
        [held] = wait_for_requests(receiver, 1)
        sigkill(apis[0])
        killed_at = time.monotonic()
        assert receiver.hold_next == 0

        # Another node (started after the kill: it cannot have been the one delivering) sends it once the dead
        # node's claim has run out.
        other = api_node(cluster, apis, clients)
        first, again = wait_for_requests(receiver, 2)
        redelivered_s = time.monotonic() - killed_at
        time.sleep(1.0)  # no third attempt: the second was answered 200
        assert len(receiver.requests) == 2
    assert first is held
    assert again.headers["webhook-id"] == held.headers["webhook-id"]
    for request in (held, again):
        event = unwrapped(other, request, endpoint.signing_secret)
        assert event.type == "batch.failed" and event.data.id == batch.id
    assert again.body == held.body  # the same event, re-signed at its own attempt
    [delivery] = deliveries(apis[-1], endpoint.id)
    assert delivery["id"] == held.headers["webhook-id"]
    assert delivery["status"] == "delivered" and delivery["attempts"] == 2 and delivery["last_status_code"] == 200
    print(f"\nAPI node SIGKILLed mid-delivery: delivered again by another node {redelivered_s:.1f} s later")


def test_a_receiver_down_when_a_background_response_ends_gets_the_event_once_it_is_back(
    cluster: Cluster, apis: list[ServerProcess], clients: list[openai.OpenAI], workers: list[ServerProcess]
) -> None:
    client = api_node(cluster, apis, clients)
    start_worker(
        cluster, workers, apis[0], **ONE_THREAD
    )  # this worker delivers too: whichever process is alive sends it
    port = free_port()  # nothing listens there yet
    endpoint = client.webhooks.create(
        name="down",
        url=f"http://127.0.0.1:{port}/hook",
        event_types=["response.completed", "response.incomplete", "response.failed"],
    )
    response = client.responses.create(input="Say hi.", background=True, max_output_tokens=16)
    final = poll_terminal(apis[0].base_url, response.id, timeout_s=120)
    assert final["status"] in ("completed", "incomplete"), final

    deadline = time.monotonic() + DELIVERY_BOUND_S
    # A failed attempt is stored (its claim counts the attempt first, its outcome comes once it ended).
    while not (listed := deliveries(apis[0], endpoint.id)) or listed[0]["last_error"] is None:
        assert time.monotonic() < deadline, listed
        time.sleep(0.2)
    [failing] = listed
    assert failing["status"] == "pending" and failing["last_error"] and failing["next_attempt_at"], failing

    with running_receiver(port) as receiver:  # back, on the same address
        came_back = time.monotonic()
        [request] = wait_for_requests(receiver, 1)
        waited_s = time.monotonic() - came_back
        time.sleep(0.5)
        assert len(receiver.requests) == 1
    event = unwrapped(client, request, endpoint.signing_secret)
    assert event.type == f"response.{final['status']}" and event.data.id == response.id
    assert request.headers["webhook-id"] == failing["id"]
    [delivered] = deliveries(apis[0], endpoint.id)
    assert delivered["status"] == "delivered" and delivered["attempts"] >= 2, delivered
    print(f"\nreceiver back: event delivered {waited_s:.1f} s later, attempt {delivered['attempts']}")
