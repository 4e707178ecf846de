"""A live stream must end with its terminal event even when the database learns of the end first, and a
foreground client is answered even when neither the generation nor the database is heard from any more."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import DBAPIError

from app.events.terminal import TERMINAL_EVENT_TYPES
from app.generation.job import GenerationJob
from app.generation.types import Finish, GenerationOutput
from app.jobs.execution import JobExecution
from app.jobs.executor import JobExecutor
from app.responses import relay, repository
from app.runtime import Runtime
from app.testing.fakes import FakeRun, FakeRunner
from app.testing.sse import parse_sse
from app.transport.inprocess import InProcessQueue
from app.transport.memory_bus import MemoryBus
from tests.protocol import assert_error, assert_well_formed_stream

#: What a client waits at most: far beyond the relay's patience here (lease_s + reconcile_interval_s, about 1 s).
CLIENT_TIMEOUT_S = 30


class LateBus(MemoryBus):
    """Delivers the events of a response's final batch (everything after its first text delta) late, or never."""

    def __init__(self, delay_s: float, drop_terminal: bool = False) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.drop_terminal = drop_terminal

    async def publish(self, response_id: str, event: dict[str, Any]) -> None:
        if event["type"] in TERMINAL_EVENT_TYPES or event["type"].endswith(".done"):
            if self.drop_terminal and event["type"] in TERMINAL_EVENT_TYPES:
                return
            await asyncio.sleep(self.delay_s)
        await super().publish(response_id, event)


def use_bus(runtime: Runtime, bus: MemoryBus) -> None:
    """Where the jobs publish and the relays subscribe."""
    assert isinstance(runtime.queue, InProcessQueue) and isinstance(runtime.queue.executor, JobExecutor)
    runtime.queue.bus = runtime.queue.executor.bus = bus


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "LIVE_POLL_S", 0.02)
    monkeypatch.setattr(relay, "TERMINAL_GRACE_S", 0.5)


async def test_events_published_after_the_final_commit_still_reach_the_stream(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    # The executor commits the final state, then publishes: a relay that polls in between must wait for them.
    use_bus(app_runtime, LateBus(delay_s=0.1))
    reply = await client.post("/v1/responses", json={"input": "hello", "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert final == (await client.get(f"/v1/responses/{final['id']}")).json()


async def test_a_terminal_event_that_never_comes_is_rebuilt_from_the_stored_response(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    use_bus(app_runtime, LateBus(delay_s=0.0, drop_terminal=True))
    reply = await client.post("/v1/responses", json={"input": "hello", "stream": True})
    events = parse_sse(reply.text)
    final = assert_well_formed_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert final == (await client.get(f"/v1/responses/{final['id']}")).json()


def stall_after(runner: FakeRunner, words: int) -> None:
    """Each run says `words` words, then nothing until it is cancelled: a worker that can neither store nor
    publish any more."""
    start = runner.start

    def stalling(job: GenerationJob) -> FakeRun:
        run = start(job)
        outputs = run.outputs

        async def said_then_silent() -> AsyncIterator[GenerationOutput]:
            async for output in outputs():
                if isinstance(output, Finish):
                    break
                yield output
                if run.produced == words:
                    break
            while not run.cancelled:
                await asyncio.sleep(0.01)
            yield Finish("cancelled", len(job.prompt_tokens), 0, run.produced)

        run.outputs = said_then_silent  # type: ignore[method-assign]
        return run

    runner.start = stalling  # type: ignore[method-assign]


async def _unreachable(*_: object, **__: object) -> None:
    try:
        raise ConnectionRefusedError(111, "Connect call failed")
    except OSError as raised:
        raise DBAPIError("SELECT status", None, raised) from raised


@pytest.mark.settings(lease_s=1, reconcile_interval_s=0.05)
async def test_a_foreground_create_is_answered_when_neither_its_generation_nor_the_database_is_heard(
    client: httpx.AsyncClient, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    stall_after(runner, 2)
    # The relay reads the database to learn whether the response ended: from now on, it cannot.
    monkeypatch.setattr(repository, "get_status", _unreachable)
    async with asyncio.timeout(CLIENT_TIMEOUT_S):
        streamed = await client.post("/v1/responses", json={"input": "hi", "stream": True})
        answered = await client.post("/v1/responses", json={"input": "hi"})
    events = parse_sse(streamed.text)
    # The stream ends with an error after what it had said, and no terminal event (the database, once back, says
    # how the response ended); the generation is stopped.
    assert [event["type"] for event in events[-3:]] == ["response.output_text.delta"] * 2 + ["error"]
    assert events[-1]["code"] == "database_unavailable" and events[0]["response"]["id"] in events[-1]["message"]
    assert "".join(event.get("delta", "") for event in events) == "the quick"
    assert runner.runs[events[0]["response"]["id"]].cancelled
    # A JSON create has sent nothing yet: it is the 503 of any request that needs the database.
    assert_error(answered, 503, param=None, code="database_unavailable")
    assert runner.runs[runner.jobs[-1].response_id].cancelled


@pytest.mark.settings(lease_s=1, reconcile_interval_s=0.05)
async def test_a_stream_that_heard_nothing_when_it_gives_up_says_an_error_and_names_no_response(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never_claimed(self: JobExecution, runner: object) -> None:
        await asyncio.sleep(3600)  # a worker that cannot reach the database to claim the job

    monkeypatch.setattr(JobExecution, "run", never_claimed)
    monkeypatch.setattr(repository, "get_status", _unreachable)
    async with asyncio.timeout(CLIENT_TIMEOUT_S):
        streamed = await client.post("/v1/responses", json={"input": "hi", "stream": True})
    # The response may still run once the database is back: a `response.failed` naming it could be contradicted.
    events = parse_sse(streamed.text)
    assert [(event["type"], event["code"]) for event in events] == [("error", "database_unavailable")]
    assert not any("response" in event for event in events)
