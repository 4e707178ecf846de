"""A hosted call survives its worker as an MCP call does, in-process with the fake model and the SearXNG stub: a run
that dies after its search is taken over without searching again, the results back in the prompt; a search in
flight when its run died ends failed, never retried."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.jobs import event_batches
from app.jobs.recovery import Reconciler, RecoveryPolicy
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream
from tests.searxng_stub import SearchStub

SEARCH = '<tool_call>{"name": "web_search", "arguments": {"query": "tides"}}</tool_call>'
RESULTS = [{"url": "https://tides.example.org/", "title": "Tides", "content": "High tide is at 14:05."}]


@pytest.fixture
def settings(tmp_path: Path, stub: SearchStub) -> Settings:
    """The unit tests' app, its web_search through the stub, and reconciliation rounds run by hand here."""
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'unit.db'}",
        model_id="fake-model",
        batch_interval_s=3600.0,
        lease_s=1,
        max_attempts=2,
        reconcile_interval_s=3600,
        outbound_allowed_hosts="127.0.0.1:*",
        web_search_searxng_url=stub.search_url,
        _env_file=None,
    )


def rounds(runner: FakeRunner, *texts: str) -> None:
    runner.replies = [text.split(" ") for text in texts]


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def take_over(runtime: Runtime) -> None:
    """Once the dead run's lease (1 s) has expired, a reconciliation round gives the job to another run."""
    await asyncio.sleep(1.2)
    report = await Reconciler(
        runtime.database, runtime.queue, RecoveryPolicy.from_settings(runtime.settings)
    ).run_round()
    assert report.taken_over == 1


def body() -> dict[str, Any]:
    return {"input": "Tides?", "tools": [{"type": "web_search"}], "background": True, "stream": True}


async def test_a_run_that_dies_after_its_search_is_taken_over_without_searching_again(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    stub: SearchStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_batches, "EVENT_FLUSH_EVENTS", 2)
    stub.results = RESULTS
    runner.delay_s = 0.005
    rounds(runner, SEARCH, "w0 w1 w2 w3 w4 w5", "w0 w1 w2 w3 w4 w5")
    runner.crash_in_run = {1: 3}  # the round after the search dies after three words
    live = asyncio.create_task(client.post("/v1/responses", json=body()))
    await until(lambda: len(runner.jobs) == 2)
    await take_over(app_runtime)
    events = parse_sse((await asyncio.wait_for(live, 30)).text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == ["web_search_call", "message"]
    assert final["output"][0]["status"] == "completed"
    assert [path for path, _ in stub.requests] == ["/search"], "the search was made once"
    assert len(runner.jobs) == 3
    renderer = runner.prompt_renderer
    assert isinstance(renderer, FakeRenderer)
    assert "High tide is at 14:05." in renderer.read(runner.jobs[2].prompt_tokens)
    replayed = parse_sse((await client.get(f"/v1/responses/{final['id']}", params={"stream": "true"})).text)
    assert replayed == events


async def test_a_search_in_flight_when_its_run_died_ends_failed_and_is_not_made_again(
    client: httpx.AsyncClient,
    app_runtime: Runtime,
    runner: FakeRunner,
    stub: SearchStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stub.results = RESULTS
    rounds(runner, SEARCH, "Answered.")
    started = asyncio.Event()
    original = app_runtime.queue.executor.hosted.call  # type: ignore[attr-defined]

    async def dies_during_the_search(*args: Any) -> str:
        started.set()
        raise asyncio.CancelledError  # the worker stops while the search is in flight

    app_runtime.queue.executor.hosted.call = dies_during_the_search  # type: ignore[attr-defined]
    live = asyncio.create_task(client.post("/v1/responses", json=body()))
    await asyncio.wait_for(started.wait(), 10)
    app_runtime.queue.executor.hosted.call = original  # type: ignore[attr-defined]
    await take_over(app_runtime)
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 30)).text))
    call = final["output"][0]
    assert call["type"] == "web_search_call" and call["status"] == "failed"
    assert stub.requests == [], "never made again"
    assert final["output"][-1]["type"] == "message", "the model went on from the failed search"
