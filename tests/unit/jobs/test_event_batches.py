"""Background streams store their events in batches: far fewer writes than tokens, nothing sent before it is
stored, a batch stored by its timer when no token follows, and a resumed reader still sees each event once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection

from app.generation.job import GenerationJob
from app.generation.types import Finish, GenerationOutput
from app.jobs.event_batches import EventBatch, Payload
from app.jobs.lease import LeaseLost
from app.responses import repository
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

STREAM = {"input": "hi", "background": True, "stream": True}


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


class Recorder:
    """A batch's writer and publisher: what was written, in which writes, and what was published."""

    def __init__(self) -> None:
        self.writes: list[list[int]] = []
        self.published: list[int] = []
        self.fail_with: Exception | None = None

    async def write(self, payloads: list[Payload]) -> None:
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise self.fail_with
        self.writes.append([payload["sequence_number"] for payload in payloads])

    async def publish(self, payload: Payload) -> None:
        stored = [number for batch in self.writes for number in batch]
        assert payload["sequence_number"] in stored, "published before it was stored"
        self.published.append(payload["sequence_number"])


def events(start: int, count: int) -> list[Payload]:
    return [{"sequence_number": number} for number in range(start, start + count)]


async def test_a_full_batch_is_stored_at_once_and_published_after_its_write() -> None:
    recorder = Recorder()
    batch = EventBatch(recorder.write, recorder.publish, flush_ms=60_000, flush_events=4)
    await batch.add(events(0, 1))  # the first event after a quiet spell goes at once, by the timer
    await until(lambda: recorder.writes == [[0]])
    for number in range(1, 10):
        await batch.add(events(number, 1))
    assert recorder.writes == [[0], [1, 2, 3, 4], [5, 6, 7, 8]]
    assert recorder.published == list(range(9)) and [event["sequence_number"] for event in batch.pending] == [9]
    await batch.flush(events(10, 2))  # what waits goes first, in the same write
    assert recorder.writes[-1] == [9, 10, 11] and recorder.published == list(range(12)) and not batch.pending
    await batch.stop()


async def test_the_timer_stores_a_batch_when_no_event_follows() -> None:
    recorder = Recorder()
    batch = EventBatch(recorder.write, recorder.publish, flush_ms=20, flush_events=1000)
    await batch.add(events(0, 1))
    await until(lambda: recorder.writes == [[0]])
    await batch.add(events(1, 2))  # within the interval of the last write: they wait for the timer
    assert recorder.writes == [[0]] and recorder.published == [0]
    await until(lambda: recorder.published == [0, 1, 2])
    assert recorder.writes == [[0], [1, 2]]
    await batch.stop()


async def test_a_failed_write_sends_nothing_and_is_raised_at_the_next_event() -> None:
    recorder = Recorder()
    batch = EventBatch(recorder.write, recorder.publish, flush_ms=10, flush_events=1000)
    recorder.fail_with = LeaseLost("resp_x")
    await batch.add(events(0, 3))
    await until(lambda: batch.failure is not None)
    with pytest.raises(LeaseLost):
        await batch.add(events(3, 1))
    with pytest.raises(LeaseLost):
        await batch.flush(events(3, 1))
    assert recorder.published == [] and [event["sequence_number"] for event in batch.pending] == [0, 1, 2]
    await batch.stop()


@contextmanager
def counted_commits(runtime: Runtime) -> Iterator[list[int]]:
    """How many transactions that write a response's rows commit on the app's engine meanwhile (one element a
    commit): the app's own maintenance (retention sweeps, quota measures, reconciliation), which runs at start-up
    beside the test's request, is not the request's."""
    commits: list[int] = []
    writes: list[str] = []

    def note(_: Connection, __: object, statement: str, *_args: object) -> None:
        words = statement.split(None, 3)
        if words and words[0].upper() in {"INSERT", "UPDATE", "DELETE"} and "response" in statement.lower():
            writes.append(statement)

    def count(_: Connection) -> None:
        if writes:
            commits.append(1)
        writes.clear()

    engine = runtime.database.engine.sync_engine
    event.listen(engine, "before_cursor_execute", note)
    event.listen(engine, "commit", count)
    try:
        yield commits
    finally:
        event.remove(engine, "commit", count)
        event.remove(engine, "before_cursor_execute", note)


async def test_a_long_background_stream_writes_far_less_than_once_a_token_and_resumes_exactly(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    tokens = 200
    runner.delay_s, runner.reply = 0.001, [f"w{index}" for index in range(tokens)]
    with counted_commits(app_runtime) as commits:
        live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
        await until(lambda: bool(runner.runs) and next(iter(runner.runs.values())).produced >= 60)
        response_id = runner.jobs[0].response_id
        # A reader that resumes mid-stream, after event 20: every later event once, in order.
        resumed = await client.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": 20})
        streamed = parse_sse((await live).text)
    final = assert_well_formed_stream(streamed)
    assert final["status"] == "completed" and len(final["output"][0]["content"][0]["text"].split()) == tokens
    assert parse_sse(resumed.text) == streamed[21:]
    async with app_runtime.database.read() as session:
        assert await repository.events_after(session, response_id, -1) == streamed
    # Before batching, each token's event was its own transaction (over one write a token). Now: the request's
    # own, the opening events, a batch per 50 ms or 32 events, the final state (the fake model is fast).
    assert len(commits) < tokens / 4, f"{len(commits)} writes for {tokens} tokens"


class PausingRun:
    """Says two words, then nothing until `resume` is set (a long pause of the model), then stops."""

    def __init__(self, job: GenerationJob) -> None:
        self.job = job
        self.resume = asyncio.Event()
        self.produced = 0

    def cancel(self) -> None:
        self.resume.set()

    async def outputs(self) -> AsyncIterator[GenerationOutput]:
        for piece in ("a", " b"):
            self.produced += 1
            yield piece
        await self.resume.wait()
        yield Finish("stop", len(self.job.prompt_tokens), 0, self.produced)


async def test_a_batch_is_stored_and_sent_while_the_model_says_nothing_more(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[PausingRun] = []

    def start(job: GenerationJob) -> PausingRun:
        runs.append(PausingRun(job))
        return runs[-1]

    monkeypatch.setattr(runner, "start", start)
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    await until(lambda: bool(runs) and runs[0].produced == 2)
    response_id = runs[0].job.response_id

    async def stored_deltas() -> list[str]:
        async with app_runtime.database.read() as session:
            stored = await repository.events_after(session, response_id, -1)
        return [event["delta"] for event in stored if event["type"] == "response.output_text.delta"]

    # " b" came within the flush interval of "a": it waits for the timer, not for a next token that is not coming.
    deadline = asyncio.get_running_loop().time() + 10
    while (deltas := await stored_deltas()) != ["a", " b"]:
        assert asyncio.get_running_loop().time() < deadline, deltas
        await asyncio.sleep(0.01)
    assert not runs[0].resume.is_set()
    runs[0].resume.set()
    final = assert_well_formed_stream(parse_sse((await live).text))
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "a b"


@pytest.mark.parametrize("store", [True, False])
async def test_a_foreground_stream_writes_nothing_per_token(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, store: bool
) -> None:
    tokens = 200
    runner.delay_s, runner.reply = 0.001, [f"w{index}" for index in range(tokens)]
    with counted_commits(app_runtime) as commits:
        streamed = parse_sse(
            (await client.post("/v1/responses", json={"input": "hi", "stream": True, "store": store})).text
        )
    assert assert_well_formed_stream(streamed)["status"] == "completed"
    # The request's own writes, the claim, the final state, a lease renewal every lease / 3.
    assert len(commits) <= tokens / 20, f"{len(commits)} writes for {tokens} tokens"
