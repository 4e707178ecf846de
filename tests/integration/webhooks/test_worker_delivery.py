"""Distributed mode for real (Postgres, Redis, a worker with the real model): a background response's event is
delivered by a worker (the API node here never delivers), and verifies with the SDK's `unwrap`."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from app.testing.databases import fresh_postgres_database
from app.testing.receiver import running_receiver
from app.testing.servers import ServerProcess, run_cli, sdk_client, wait_until_ready

pytestmark = pytest.mark.integration

DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/9"


def test_a_worker_delivers_the_event_of_the_response_it_ran(tmp_path: Path) -> None:
    redis_url = os.environ.get("RESPONSES_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    with fresh_postgres_database() as database_url, running_receiver() as receiver:
        env = {
            "RESPONSES_DATABASE_URL": database_url,
            "RESPONSES_REDIS_URL": redis_url,
            "RESPONSES_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1:*",
        }
        assert run_cli(["migrate"], env).returncode == 0
        worker = ServerProcess(
            {**env, "RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S": "0.2"}, tmp_path / "worker.log", command=["worker"]
        )
        # The API node's first round would come after an hour: whatever arrives, the worker sent.
        api = ServerProcess({**env, "RESPONSES_WEBHOOK_DELIVERY_INTERVAL_S": "3600"}, tmp_path / "api.log")
        try:
            worker.start()
            api.start()
            wait_until_ready(api.base_url)
            with sdk_client(api.base_url) as client:
                endpoint = client.webhooks.create(
                    name="worker", url=receiver.url, event_types=["response.completed", "response.incomplete"]
                )
                model = client.models.list().data[0].id
                response = client.responses.create(model=model, input="Say hi.", background=True, max_output_tokens=16)
                deadline = time.monotonic() + 120
                while not receiver.requests and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert receiver.requests, (tmp_path / "worker.log").read_text()[-3000:]
                [request] = receiver.requests
                event = client.webhooks.unwrap(request.body, request.headers, secret=endpoint.signing_secret)
                assert event.type in ("response.completed", "response.incomplete")
                assert event.data.id == response.id
                assert client.responses.retrieve(response.id).status == event.type.removeprefix("response.")
        finally:
            api.stop()
            worker.stop()
