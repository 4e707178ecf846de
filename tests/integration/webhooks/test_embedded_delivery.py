"""Embedded mode for real (one `serve` process, the real model, SQLite): the events of a background response and of
a batch are delivered by the server itself to a receiver in the test, and each verifies with the SDK's `unwrap`
(the distributed side: test_worker_delivery.py and tests/faults/test_batch_webhook_faults.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app.testing.databases import sqlite_url
from app.testing.receiver import ReceivedRequest, Receiver, running_receiver
from app.testing.servers import ServerProcess, sdk_client

pytestmark = pytest.mark.integration

BOUND_S = 180


def wait_for_requests(receiver: Receiver, count: int) -> list[ReceivedRequest]:
    deadline = time.monotonic() + BOUND_S
    while len(receiver.requests) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(receiver.requests) >= count, f"{len(receiver.requests)} of {count} requests came"
    return list(receiver.requests)


def test_the_embedded_server_delivers_response_and_batch_events(tmp_path: Path) -> None:
    env = {
        "RESPONSES_DATABASE_URL": sqlite_url(tmp_path),
        "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
        "RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S": "0.2",
        "RESPONSES_BATCH_INTERVAL_S": "0.2",
    }
    server = ServerProcess(env, tmp_path / "server.log")
    with running_receiver() as receiver:
        try:
            server.start()
            with sdk_client(server.base_url) as client:
                endpoint = client.webhooks.create(
                    name="embedded",
                    url=receiver.url,
                    event_types=["response.completed", "response.incomplete", "batch.completed"],
                )
                response = client.responses.create(input="Say hi.", background=True, max_output_tokens=16)
                [first] = wait_for_requests(receiver, 1)
                event = client.webhooks.unwrap(first.body, first.headers, secret=endpoint.signing_secret)
                assert event.type in ("response.completed", "response.incomplete")
                assert event.data.id == response.id
                assert client.responses.retrieve(response.id).status == event.type.removeprefix("response.")

                # NOTE: a batch line's response (stored as a background one) would send its response.* event
                # too; the batch part listens to batch.completed alone.
                client.webhooks.update(endpoint.id, event_types=["batch.completed"])
                line = {"custom_id": "only", "method": "POST", "url": "/v1/responses", "body": {"input": "Say 1."}}
                line["body"]["max_output_tokens"] = 16  # type: ignore[index]
                uploaded = client.files.create(file=("one.jsonl", json.dumps(line).encode()), purpose="batch")
                batch = client.batches.create(
                    input_file_id=uploaded.id, endpoint="/v1/responses", completion_window="24h"
                )
                _, second = wait_for_requests(receiver, 2)
                event = client.webhooks.unwrap(second.body, second.headers, secret=endpoint.signing_secret)
                assert event.type == "batch.completed" and event.data.id == batch.id
                done = client.batches.retrieve(batch.id)
                assert done.status == "completed" and done.model == client.models.list().data[0].id
                time.sleep(1.0)
                assert len(receiver.requests) == 2
                assert second.headers["webhook-id"] != first.headers["webhook-id"]
        finally:
            server.stop()
