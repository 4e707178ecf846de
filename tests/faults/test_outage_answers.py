"""Postgres stopped under foreground creates, in embedded mode (on Postgres) and in distributed mode: each one,
whether it was generating, queued or just sent, is answered while Postgres is still down (a 503, or its stream
ends with a terminal event), and each response it made ends once Postgres is back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.events.terminal import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES
from app.testing.cluster import STORY, Cluster, PostgresServer, ServerProcess, poll_terminal
from app.testing.servers import wait_for_ok
from app.testing.sse import parse_sse
from tests.protocol import assert_error, assert_well_formed_stream

pytestmark = pytest.mark.integration

#: Longer than an API node waits on a response it cannot follow (lease + reconcile interval: 6 s here).
CLIENT_TIMEOUT_S = 30
#: Postgres stays down past the client timeout: a create that waits for it to come back times out instead.
OUTAGE_S = CLIENT_TIMEOUT_S + 10
SHORT_LEASES = {"RESPONSES_LEASE_S": "5", "RESPONSES_RECONCILE_INTERVAL_S": "1"}
#: The responses answered during the outage all end within this once Postgres is back.
SETTLE_BOUND_S = 120


@pytest.fixture(scope="module")
def nodes(cluster: Cluster) -> Iterator[dict[str, ServerProcess]]:
    cluster.extra_env.update(SHORT_LEASES)
    cluster.worker("worker")
    distributed = cluster.api("distributed")
    embedded = cluster.api("embedded", RESPONSES_REDIS_URL="")  # the model in the API process, no Redis
    cluster.wait_ready(distributed)
    assert wait_for_ok(f"{embedded.base_url}/ready", 90)
    yield {"distributed": distributed, "embedded": embedded}


@dataclass
class Create:
    """One foreground create, sent from its own thread, and how it was answered."""

    node: str
    base_url: str
    body: dict[str, Any]
    reply: httpx.Response | None = None
    failure: str | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        try:
            # The whole body: for a stream, every event up to the end (the timeout is between two reads).
            self.reply = httpx.post(f"{self.base_url}/v1/responses", json=self.body, timeout=CLIENT_TIMEOUT_S)
        except httpx.HTTPError as error:
            self.failure = f"{type(error).__name__} after waiting {CLIENT_TIMEOUT_S} s"

    def response_id(self) -> str | None:
        """The response it made, when the answer names one."""
        if self.reply is None or self.reply.status_code != 200:
            return None
        if self.body["stream"]:
            named = [event["response"]["id"] for event in parse_sse(self.reply.text) if "response" in event]
            return str(named[0]) if named else None
        return str(self.reply.json()["id"])


def _check_answer(create: Create) -> None:
    what = f"{create.node} {'stream' if create.body['stream'] else 'JSON'} create"
    assert create.failure is None, f"a {what} was not answered: {create.failure}"
    assert create.reply is not None
    if create.reply.status_code == 503:
        assert_error(create.reply, 503, param=None)
    elif create.body["stream"]:
        assert create.reply.status_code == 200 and create.reply.text.endswith("data: [DONE]\n\n"), what
        events = parse_sse(create.reply.text)
        if events[-1]["type"] == "error":  # given up on the database: how it ends is GET's to say, once it is back
            assert events[-1]["code"] == "database_unavailable", events[-1]
            assert [event["sequence_number"] for event in events] == list(range(len(events)))
            assert not any(event["type"] in TERMINAL_EVENT_TYPES for event in events), events
        else:
            assert_well_formed_stream(events)  # ends with exactly one terminal event
    else:
        assert create.reply.status_code == 200, (what, create.reply.text)
        assert create.reply.json()["status"] in TERMINAL_STATUSES


def test_every_foreground_create_is_answered_while_postgres_is_down(
    nodes: dict[str, ServerProcess], postgres: PostgresServer
) -> None:
    generating = {"input": STORY, "max_output_tokens": 600, "temperature": 0}
    creates = [
        Create(name, node.base_url, {**generating, "stream": stream})
        for name, node in nodes.items()
        for stream in (False, True)
    ]
    time.sleep(3)  # those are generating (or queued behind each other) when Postgres stops
    stopped_at = time.monotonic()
    # Creates sent just before and as Postgres stops: stored, queued or claimed when it goes.
    for index in range(6):
        for name, node in nodes.items():
            short = {"input": "Hi!", "max_output_tokens": 16, "stream": bool(index % 2)}
            creates.append(Create(name, node.base_url, short))
        time.sleep(0.25)
        if index == 3:
            postgres.stop("fast")
            stopped_at = time.monotonic()
    try:
        for create in creates:
            create.thread.join(max(stopped_at + OUTAGE_S - time.monotonic(), 0))
        waiting = [f"{create.node} {create.body}" for create in creates if create.thread.is_alive()]
    finally:
        postgres.start()
    assert not waiting, f"still waiting when Postgres came back after {OUTAGE_S} s: {waiting}"
    for create in creates:
        _check_answer(create)
    answers = [create.reply.status_code for create in creates if create.reply is not None]
    print(f"\nPostgres down {OUTAGE_S} s: {len(creates)} foreground creates, answers {sorted(answers)}")
    deadline = time.monotonic() + SETTLE_BOUND_S
    for create in creates:
        response_id = create.response_id()
        if response_id is not None:
            left = max(deadline - time.monotonic(), 1)
            assert poll_terminal(create.base_url, response_id, left)["status"] in TERMINAL_STATUSES, response_id
    for node in nodes.values():
        assert node.process is not None and node.process.poll() is None, "a process died with Postgres"
