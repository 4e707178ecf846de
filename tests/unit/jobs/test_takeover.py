"""Leases in-process with the fake model: a run that dies is taken over and continues exactly once; a lost
lease or a stored cancel ends the response with one terminal event that equals GET; the reconciler needs no
live run to end what is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import GenerationProgressRow, ResponseRow
from app.generation.types import ModelLoadError
from app.jobs import event_batches
from app.jobs import repository as jobs
from app.jobs.recovery import Reconciler, RecoveryPolicy
from app.jobs.writes import store_with_retries
from app.lifecycle import transitions
from app.lifecycle.transitions import Holder
from app.responses import repository
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import FAILED_WITH_OPEN_MESSAGE, assert_well_formed_stream

# Reconciliation rounds are run by hand here (the server's own loop would race them).
pytestmark = pytest.mark.settings(lease_s=1, max_attempts=2, reconcile_interval_s=3600)
STREAM = {"input": "hi", "background": True, "stream": True}


def reconciler(runtime: Runtime) -> Reconciler:
    return Reconciler(runtime.database, runtime.queue, RecoveryPolicy.from_settings(runtime.settings))


async def row_of(runtime: Runtime, response_id: str) -> ResponseRow:
    async with runtime.database.read() as session:
        row = await repository.get_by_id(session, response_id)
    assert row is not None
    return row


async def started(runner: FakeRunner, count: int = 1) -> str:
    while len(runner.jobs) < count:
        await asyncio.sleep(0.01)
    return runner.jobs[-1].response_id


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_dead_run_is_taken_over_and_its_stream_goes_on_exactly_once(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Batches of two events, whatever the timing: the first run stores several (the timer alone might make one).
    monkeypatch.setattr(event_batches, "EVENT_FLUSH_EVENTS", 2)
    runner.delay_s, runner.reply, runner.crash_after = 0.005, [f"w{index}" for index in range(12)], 5
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    response_id = await started(runner)
    first = runner.jobs[0]
    runner.crash_after = None  # the next run lives
    # The dead run's lease expires (1 s); nothing else ends the response until reconciliation looks.
    await asyncio.sleep(1.2)
    assert (await row_of(app_runtime, response_id)).status == "in_progress"
    # Progress is appended, a row per stored event batch holding only what was new: no piece stored twice.
    async with app_runtime.database.read() as session:
        steps = (await session.execute(select(GenerationProgressRow).order_by(GenerationProgressRow.position))).all()
    assert [row.position for (row,) in steps] == list(range(len(steps))) and len(steps) > 1
    assert [piece for (row,) in steps for piece in row.pieces] == ["w0", " w1", " w2", " w3", " w4"]
    report = await reconciler(app_runtime).run_round()
    assert report.taken_over == 1
    events = parse_sse((await live).text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed"
    text = final["output"][0]["content"][0]["text"]
    assert text.startswith("w0 w1 w2 w3 w4") and text.count("w0") == 2
    again = runner.jobs[1]
    written = await runner.tokenize("fake-model", "w0 w1 w2 w3 w4")
    assert again.prompt_tokens == [*first.prompt_tokens, *written]
    assert final["usage"]["input_tokens"] == len(first.prompt_tokens)
    assert final["usage"]["output_tokens"] == len(written) + 12
    replayed = parse_sse((await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text)
    assert replayed == events
    row = await row_of(app_runtime, response_id)
    assert row.attempts == 2 and row.job is None
    async with app_runtime.database.read() as session:
        assert await jobs.progress_of(session, response_id) is None  # dropped with the job


async def test_a_takeover_whose_model_will_not_load_fails_the_response_at_once(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner.delay_s, runner.reply, runner.crash_after = 0.005, [f"w{index}" for index in range(12)], 5
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    response_id = await started(runner)
    await asyncio.sleep(1.2)  # the dead run's lease expires

    async def broken(model: str, text: str) -> list[int]:
        raise ModelLoadError(model, "corrupt GGUF")

    monkeypatch.setattr(runner, "tokenize", broken)
    assert (await reconciler(app_runtime).run_round()).taken_over == 1
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 5)).text))
    assert final["status"] == "failed"
    assert final["error"]["message"] == "The model 'fake-model' could not be loaded: corrupt GGUF"
    assert (await client.get(f"/v1/responses/{response_id}")).json()["status"] == "failed"


async def test_a_job_is_failed_after_its_last_attempt_with_a_terminal_event(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    runner.delay_s, runner.reply, runner.crash_after = 0.005, [f"w{index}" for index in range(12)], 3
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    response_id = await started(runner)
    await asyncio.sleep(1.2)
    assert (await reconciler(app_runtime).run_round()).taken_over == 1
    await started(runner, 2)  # the second run dies too: max_attempts is 2
    await asyncio.sleep(1.2)
    assert (await reconciler(app_runtime).run_round()).ended == 1
    events = parse_sse((await live).text)
    # Every item the runs opened is closed, then `error`, then `response.failed` with the output so far.
    final = assert_well_formed_stream(events)
    assert [event["type"] for event in events[-5:]] == FAILED_WITH_OPEN_MESSAGE
    assert final["status"] == "failed" and "2 times" in final["error"]["message"]
    assert final["output"][0]["status"] == "incomplete"
    assert final["output"][0]["content"][0]["text"].startswith("w0 w1 w2")
    replayed = parse_sse((await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text)
    assert replayed == events and replayed[-1]["type"] == "response.failed"
    assert (await client.get(f"/v1/responses/{response_id}")).json() == final


async def test_a_run_whose_response_was_ended_meanwhile_publishes_what_the_row_says(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    runner.delay_s, runner.reply = 0.02, [f"w{index}" for index in range(200)]
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    response_id = await started(runner)
    await asyncio.sleep(0.1)
    # As if the run's lease had expired during a database outage and been given to someone else, then the
    # response failed by reconciliation.
    async with app_runtime.database.transaction() as session:
        past = utc_now() - timedelta(seconds=5)
        lost = {"lease_expires_at": past, "lease_owner": "worker_gone"}
        await session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(**lost))
    policy = RecoveryPolicy(lease_s=1, max_attempts=1)
    ended = await Reconciler(app_runtime.database, app_runtime.queue, policy).run_round()
    assert ended.ended == 1
    events = parse_sse((await live).text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "failed" and final["output"][0]["content"][0]["text"].startswith("w0")
    assert (await client.get(f"/v1/responses/{response_id}")).json() == final
    # The run noticed at its next write and stopped: it stored nothing after the verdict.
    await until(lambda: runner.runs[response_id].cancelled)
    stored = parse_sse((await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text)
    assert stored == events


async def test_a_stored_cancel_without_its_signal_is_honoured_by_the_run(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    runner.delay_s, runner.reply = 0.02, [f"w{index}" for index in range(200)]
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    await started(runner)
    # A cancel stored whose signal never came (lost while the cancel listener reconnected): the run's
    # heartbeat reads it.
    async with app_runtime.database.transaction() as session:
        await jobs.request_cancel(session, created["id"], now=utc_now())
    await until(lambda: runner.runs[created["id"]].cancelled)
    done = (await client.get(f"/v1/responses/{created['id']}")).json()
    for _ in range(100):
        if done["status"] == "cancelled":
            break
        await asyncio.sleep(0.02)
        done = (await client.get(f"/v1/responses/{created['id']}")).json()
    assert done["status"] == "cancelled"


async def test_a_cancel_of_a_response_whose_worker_died_ends_it_without_a_worker(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    runner.delay_s, runner.reply, runner.crash_after = 0.005, [f"w{index}" for index in range(50)], 3
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    response_id = await started(runner)
    await until(lambda: runner.runs[response_id].produced == 3)
    reply = await client.post(f"/v1/responses/{response_id}/cancel")  # waits for the dead run's lease (1 s)
    assert reply.status_code == 200 and reply.json()["status"] == "cancelled"
    events = parse_sse((await live).text)
    assert events[-1]["type"] == "response.cancelled" and events[-1]["response"] == reply.json()
    # The output so far is kept, and the stream closed the message it had opened before ending.
    final = assert_well_formed_stream(events)
    assert final["output"][0]["content"][0]["text"] == "w0 w1 w2" and final["output"][0]["status"] == "incomplete"
    replayed = parse_sse((await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text)
    assert replayed == events
    assert len(runner.jobs) == 1  # nothing ran it again


async def test_a_structured_output_job_is_taken_over_with_its_grammar_fed_the_text_so_far(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    runner.delay_s, runner.reply, runner.crash_after = 0.005, ['{"a":', " 1}"], 1
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = {**STREAM, "text": {"format": {"type": "json_schema", "name": "a", "schema": schema}}}
    live = asyncio.create_task(client.post("/v1/responses", json=body))
    response_id = await started(runner)
    runner.crash_after = None
    await asyncio.sleep(1.2)
    assert (await reconciler(app_runtime).run_round()).taken_over == 1
    assert_well_formed_stream(parse_sse((await live).text))
    first, again = runner.jobs
    written = await runner.tokenize(first.model, '{"a":')
    # The engine feeds the grammar the prompt's last tokens, the text so far, before it samples.
    assert first.sampling.grammar is not None and again.sampling.grammar == first.sampling.grammar
    assert again.sampling.resumed_output_tokens == len(written) and again.prompt_tokens[-len(written) :] == written
    assert (await row_of(app_runtime, response_id)).attempts == 2


async def test_a_logprobs_job_that_had_said_something_is_failed_not_taken_over(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    # NOTE: the logprobs of what the first run said are not stored, so the final output could not carry them.
    runner.delay_s, runner.reply, runner.crash_after = 0.005, [f"w{index}" for index in range(12)], 3
    live = asyncio.create_task(client.post("/v1/responses", json={**STREAM, "top_logprobs": 2}))
    await started(runner)
    await asyncio.sleep(1.2)
    report = await reconciler(app_runtime).run_round()
    assert report.taken_over == 0 and report.ended == 1
    final = assert_well_formed_stream(parse_sse((await live).text))
    assert final["status"] == "failed" and final["output"][0]["content"][0]["text"] == "w0 w1 w2"


async def test_a_background_job_without_a_stream_is_taken_over_from_what_its_heartbeat_stored(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    # No events are kept: the heartbeat (every lease / 3) appends what is new to the progress.
    runner.delay_s, runner.reply, runner.crash_after = 0.1, [f"w{index}" for index in range(8)], 6
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    await started(runner)
    await until(lambda: runner.runs[created["id"]].produced == 6)
    runner.crash_after = None
    await asyncio.sleep(1.2)  # the dead run's lease expires
    async with app_runtime.database.read() as session:
        progress = await jobs.progress_of(session, created["id"])
    assert progress is not None and progress.pieces == [f"{' ' if n else ''}w{n}" for n in range(len(progress.pieces))]
    assert (await reconciler(app_runtime).run_round()).taken_over == 1
    await started(runner, 2)
    written = await runner.tokenize("fake-model", "".join(progress.pieces))
    assert runner.jobs[1].prompt_tokens == [*runner.jobs[0].prompt_tokens, *written]
    await until(lambda: runner.runs[created["id"]].produced == 8)
    done = (await client.get(f"/v1/responses/{created['id']}")).json()
    for _ in range(100):
        if done["status"] == "completed":
            break
        await asyncio.sleep(0.02)
        done = (await client.get(f"/v1/responses/{created['id']}")).json()
    assert done["status"] == "completed"
    assert done["output"][0]["content"][0]["text"] == "".join(progress.pieces) + "w0 w1 w2 w3 w4 w5 w6 w7"


async def test_a_run_that_dies_before_any_text_is_taken_over_without_storing_its_opening_again(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    # The first run stored `response.in_progress` (no progress: nothing was said yet), then died in prefill.
    runner.delay_s, runner.reply, runner.crash_after = 0.005, [f"w{index}" for index in range(6)], 0
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    response_id = await started(runner)
    runner.crash_after = None
    await asyncio.sleep(1.2)
    async with app_runtime.database.read() as session:
        assert await jobs.progress_of(session, response_id) is None
        assert [event["type"] for event in await repository.events_after(session, response_id, -1)] == [
            "response.created",
            "response.queued",
            "response.in_progress",
        ]
    assert (await reconciler(app_runtime).run_round()).taken_over == 1
    events = parse_sse((await asyncio.wait_for(live, 10)).text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == "w0 w1 w2 w3 w4 w5"
    assert [event["type"] for event in events].count("response.in_progress") == 1
    assert len(runner.jobs) == 2 and (await row_of(app_runtime, response_id)).attempts == 2
    replayed = parse_sse((await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text)
    assert replayed == events


async def test_a_write_is_tried_again_through_an_outage_only() -> None:
    tries: list[str] = []

    async def duplicate() -> None:
        tries.append("duplicate")
        raise IntegrityError("INSERT INTO response_events", {}, Exception("UNIQUE constraint failed"))

    async def blip_then_stored() -> None:
        tries.append("blip")
        if len(tries) == 1:
            raise OperationalError("UPDATE responses", {}, Exception("database is locked"))

    with pytest.raises(IntegrityError):  # a constraint fails the same way every time: no retries for a lease
        await store_with_retries(duplicate, budget_s=5)
    assert tries == ["duplicate"]
    tries.clear()
    await store_with_retries(blip_then_stored, budget_s=5)
    assert tries == ["blip", "blip"]


async def test_a_background_job_whose_final_write_meets_an_outage_is_taken_over_not_failed(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner.delay_s, runner.reply = 0.005, [f"w{index}" for index in range(6)]
    end_held = transitions.end_held
    refused: list[str] = []

    async def database_away_at_the_end(
        session: AsyncSession, response_id: str, *, holder: Holder, values: dict[str, Any], **kwargs: Any
    ) -> bool:
        # The first run's final write meets the database away for its whole budget; the database is back for
        # whatever that run writes next (a failure, before this fix), and for the takeover's.
        if values["status"] == "completed" and "back" not in refused:
            refused.append(values["status"])
            raise OperationalError("UPDATE responses", {}, ConnectionRefusedError(111, "Connect call failed"))
        return await end_held(session, response_id, holder=holder, values=values, **kwargs)

    monkeypatch.setattr(transitions, "end_held", database_away_at_the_end)
    live = asyncio.create_task(client.post("/v1/responses", json=STREAM))
    response_id = await started(runner)
    executor = app_runtime.queue.executor  # type: ignore[attr-defined]
    await until(lambda: bool(refused) and response_id not in executor.running, timeout_s=20)
    refused.append("back")
    row = await row_of(app_runtime, response_id)
    assert row.status == "in_progress" and row.job is not None  # not failed: left for a takeover
    await asyncio.sleep(1.2)  # its lease (1 s) expires
    assert (await reconciler(app_runtime).run_round()).taken_over == 1
    final = assert_well_formed_stream(parse_sse((await live).text))
    assert final["status"] == "completed" and (await row_of(app_runtime, response_id)).attempts == 2
    assert (await client.get(f"/v1/responses/{response_id}")).json() == final


async def test_a_run_whose_lease_runs_out_while_the_database_is_away_stops_and_stores_nothing(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A foreground stream: its events are not stored, so the run would go on sending them to the end.
    runner.delay_s, runner.reply = 0.02, [f"w{index}" for index in range(300)]
    renew, end_held = jobs.renew, transitions.end_held
    away = asyncio.Event()
    writes_while_away: list[str] = []

    def refused(what: str) -> OperationalError:
        writes_while_away.append(what)
        return OperationalError(what, {}, ConnectionRefusedError(111, "Connect call failed"))

    async def renew_unless_away(session: AsyncSession, response_id: str, **kwargs: Any) -> tuple[bool, bool, bool]:
        if away.is_set():
            raise refused("renew")
        return await renew(session, response_id, **kwargs)

    async def finish_unless_away(session: AsyncSession, response_id: str, **kwargs: Any) -> bool:
        if away.is_set():
            raise refused("finish")
        return await end_held(session, response_id, **kwargs)

    monkeypatch.setattr(jobs, "renew", renew_unless_away)
    monkeypatch.setattr(transitions, "end_held", finish_unless_away)
    live = asyncio.create_task(client.post("/v1/responses", json={"input": "hi", "stream": True}))
    response_id = await started(runner)
    run = runner.runs[response_id]
    await until(lambda: run.produced >= 5)
    away.set()
    away_at = asyncio.get_running_loop().time()
    executor = app_runtime.queue.executor  # type: ignore[attr-defined]
    await until(lambda: response_id not in executor.running, timeout_s=10)
    # Stopped once the lease (1 s) ran out, not at the end of its 300 words (6 s), and nothing tried to store
    # its end: that is the reconciler's once the database is back.
    assert run.cancelled and run.produced < 150
    assert asyncio.get_running_loop().time() - away_at < 3
    assert "finish" not in writes_while_away and writes_while_away
    away.clear()
    row = await row_of(app_runtime, response_id)
    assert row.status == "in_progress"
    await asyncio.sleep(1.2)
    assert (await reconciler(app_runtime).run_round()).ended == 1
    final = assert_well_formed_stream(parse_sse((await live).text))
    assert final["status"] == "failed"
    assert (await client.get(f"/v1/responses/{response_id}")).json() == final
