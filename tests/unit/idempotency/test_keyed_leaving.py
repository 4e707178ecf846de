"""A create with an Idempotency-Key whose client leaves (the SDK timed out and will retry): its generation goes
on, and the retry with the key attaches to it: a JSON create gets the response once it has ended, a stream is
replayed from its first event and followed to its end. One generation, never two."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Message

from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

pytestmark = pytest.mark.settings(reconcile_interval_s=3600)
WORDS = [f"w{index}" for index in range(40)]


class LeavingClient:
    """One raw ASGI request that leaves (disconnects) when told, having read what was sent until then."""

    def __init__(self, app: FastAPI, body: dict[str, Any], key: str) -> None:
        self.body = json.dumps(body).encode()
        self.gone = asyncio.Event()
        self.sent: list[Message] = []
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/responses",
            "raw_path": b"/v1/responses",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"test"), (b"content-type", b"application/json"), (b"idempotency-key", key.encode())],
            "client": ("127.0.0.1", 50000),
            "server": ("test", 80),
        }
        self.task = asyncio.create_task(app(scope, self._receive, self._send))

    async def _receive(self) -> Message:
        if self.body:
            body, self.body = self.body, b""
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        if not self.gone.is_set():  # as uvicorn does, what is sent to a client that left goes nowhere
            self.sent.append(message)

    def received(self) -> str:
        return b"".join(
            message.get("body", b"") for message in self.sent if message["type"] == "http.response.body"
        ).decode()


@pytest.fixture
def slow(runner: FakeRunner) -> FakeRunner:
    runner.delay_s, runner.reply = 0.02, list(WORDS)
    return runner


async def first_run_said(runner: FakeRunner, words: int) -> str:
    for _ in range(1000):
        if runner.jobs and runner.runs[runner.jobs[0].response_id].produced >= words:
            return runner.jobs[0].response_id
        await asyncio.sleep(0.005)
    raise AssertionError("the run did not start")


async def test_a_json_create_whose_client_leaves_goes_on_and_its_retry_gets_it(
    app: FastAPI, client: httpx.AsyncClient, slow: FakeRunner
) -> None:
    body = {"model": "fake-model", "input": "Tell me a long story."}
    leaving = LeavingClient(app, body, "json-key")
    response_id = await first_run_said(slow, 3)
    leaving.gone.set()
    retry = await client.post("/v1/responses", json=body, headers={"Idempotency-Key": "json-key"})
    assert retry.status_code == 200, retry.text
    answer = retry.json()
    assert answer["id"] == response_id and answer["status"] == "completed"
    assert answer["output"][0]["content"][0]["text"] == " ".join(WORDS)
    assert not slow.runs[response_id].cancelled and len(slow.jobs) == 1
    await asyncio.wait_for(leaving.task, 5)


async def test_a_stream_whose_client_leaves_goes_on_and_its_retry_replays_it_whole(
    app: FastAPI, client: httpx.AsyncClient, app_runtime: Runtime, slow: FakeRunner
) -> None:
    body = {"model": "fake-model", "input": "Tell me a long story.", "stream": True}
    leaving = LeavingClient(app, body, "stream-key")
    response_id = await first_run_said(slow, 5)
    seen = parse_sse(leaving.received())
    assert seen and seen[0]["type"] == "response.created" and seen[0]["response"]["id"] == response_id
    leaving.gone.set()
    retry = await client.post("/v1/responses", json=body, headers={"Idempotency-Key": "stream-key"})
    assert retry.status_code == 200 and retry.headers["Idempotent-Replayed"] == "true"
    events = parse_sse(retry.text)
    final = assert_well_formed_stream(events)  # from sequence number 0: the whole stream, not its rest
    assert final["id"] == response_id and final["status"] == "completed"
    assert events[: len(seen)] == seen  # the events the first client saw, the same again
    assert final["output"][0]["content"][0]["text"] == " ".join(WORDS)
    assert final == (await client.get(f"/v1/responses/{response_id}")).json()
    assert not slow.runs[response_id].cancelled and len(slow.jobs) == 1
    # Once it has ended, a retry replays it from the stored events alone.
    again = await client.post("/v1/responses", json=body, headers={"Idempotency-Key": "stream-key"})
    assert parse_sse(again.text) == events
    await asyncio.wait_for(leaving.task, 5)
