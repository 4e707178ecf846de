"""Work nobody waits for stops: a JSON create or a compaction whose client disconnects stops its generation (the
response is stored `cancelled`); a background create goes on, as its client was told it would."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.types import Message

from app.responses import repository
from app.runtime import Runtime
from app.testing.fakes import FakeRunner

pytestmark = pytest.mark.settings(reconcile_interval_s=3600)


class Client:
    """One raw ASGI request whose client can leave while it waits for the answer."""

    def __init__(self, app: FastAPI, path: str, body: dict[str, Any]) -> None:
        self.body = json.dumps(body).encode()
        self.gone = asyncio.Event()
        self.sent: list[Message] = []
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"test"), (b"content-type", b"application/json")],
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
        self.sent.append(message)

    def status(self) -> int | None:
        return next((message["status"] for message in self.sent if message["type"] == "http.response.start"), None)


async def first_run(runner: FakeRunner, waiting: Client | None) -> str:
    """The id of the first run, once it has said a few words (`waiting`: the client that waits for it)."""
    for _ in range(500):
        if runner.jobs and runner.runs[runner.jobs[0].response_id].produced >= 3:
            return runner.jobs[0].response_id
        assert waiting is None or not waiting.task.done(), waiting.sent
        await asyncio.sleep(0.01)
    raise AssertionError("the run did not start")


async def status_of(runtime: Runtime, response_id: str) -> str:
    async with runtime.database.read() as session:
        row = await repository.get_by_id(session, response_id)
    assert row is not None
    return row.status


async def ended(runtime: Runtime, response_id: str) -> str:
    """Its status once its run has stored its end."""
    for _ in range(200):
        if (status := await status_of(runtime, response_id)) not in ("queued", "in_progress"):
            return status
        await asyncio.sleep(0.05)
    raise AssertionError(f"{response_id} did not end")


@pytest.fixture
def slow(runner: FakeRunner) -> FakeRunner:
    runner.delay_s, runner.reply = 0.02, [f"w{index}" for index in range(500)]
    return runner


async def test_a_json_create_whose_client_leaves_stops_its_generation(
    app: FastAPI, app_runtime: Runtime, slow: FakeRunner
) -> None:
    client = Client(app, "/v1/responses", {"input": "Tell me a long story."})
    response_id = await first_run(slow, client)
    client.gone.set()
    await asyncio.wait_for(client.task, 5)
    run = slow.runs[response_id]
    assert run.cancelled and run.produced < 100  # not its 500 words (10 s)
    assert client.status() == 499  # what the access log and the metrics record; nobody reads it
    assert await ended(app_runtime, response_id) == "cancelled"


async def test_a_compaction_whose_client_leaves_stops_its_summary(app: FastAPI, slow: FakeRunner) -> None:
    history = [{"role": "user", "content": "My cat is called Tom."}]
    client = Client(app, "/v1/responses/compact", {"model": "fake-model", "input": history})
    response_id = await first_run(slow, client)
    client.gone.set()
    await asyncio.wait_for(client.task, 5)
    run = slow.runs[response_id]
    assert run.cancelled and run.produced < 100


async def test_a_background_create_goes_on_after_its_client_leaves(
    app: FastAPI, app_runtime: Runtime, slow: FakeRunner
) -> None:
    slow.reply = slow.reply[:20]
    client = Client(app, "/v1/responses", {"input": "hi", "background": True})
    await asyncio.wait_for(client.task, 5)  # answered at once, queued
    assert client.status() == 200
    response_id = await first_run(slow, None)
    client.gone.set()
    assert await ended(app_runtime, response_id) == "completed"
    assert not slow.runs[response_id].cancelled and slow.runs[response_id].produced == 20


async def test_a_create_whose_client_leaves_while_it_is_submitted_is_stored_and_enqueued_whole(
    app: FastAPI, app_runtime: Runtime, slow: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow.reply = slow.reply[:5]
    queue = app_runtime.queue
    enqueue = queue.enqueue
    enqueuing = asyncio.Event()

    async def slow_enqueue(job: Any) -> None:
        enqueuing.set()
        await asyncio.sleep(0.3)  # the client leaves now: between the stored row and its job
        await enqueue(job)

    monkeypatch.setattr(queue, "enqueue", slow_enqueue)
    client = Client(app, "/v1/responses", {"input": "hi", "background": True})
    await enqueuing.wait()
    client.gone.set()
    await asyncio.wait_for(client.task, 5)
    response_id = await first_run(slow, None)
    assert await ended(app_runtime, response_id) == "completed"  # not a row left queued without its job
