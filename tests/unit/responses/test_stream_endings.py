"""Every stream ends with a terminal event then [DONE]: background streams open at once, replays of responses
ended elsewhere (or pruned) end from the stored row, an unstored stream whose job died ends failed; DELETE of a
running response stops it; readiness leaves workers out; outages are 503s."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import delete, update
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utc_now
from app.db.models import ResponseEventRow, ResponseRow
from app.errors import is_outage
from app.generation.job import GenerationJob
from app.generation.types import GenerationOutput
from app.lifecycle import transitions
from app.lifecycle.transitions import Holder
from app.ops.retention import prune_finished_events
from app.responses import relay, repository, service, submission
from app.responses.parsing import parse_create_request
from app.runtime import Runtime
from app.testing.fakes import FakeRun, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import FAILED_WITH_OPEN_MESSAGE, assert_well_formed_stream


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "LIVE_POLL_S", 0.02)
    monkeypatch.setattr(relay, "TERMINAL_GRACE_S", 0.2)


async def sse_frames(client: httpx.AsyncClient, method: str, url: str, **kwargs: object) -> list[str]:
    async with client.stream(method, url, **kwargs) as reply:  # type: ignore[arg-type]
        assert reply.status_code == 200, await reply.aread()
        return [frame async for frame in reply.aiter_text()]


async def test_a_background_stream_opens_before_its_job_starts(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    release = asyncio.Event()
    original = runner.start

    def gated(job: GenerationJob) -> FakeRun:
        run = original(job)
        outputs = run.outputs

        async def waiting() -> AsyncIterator[GenerationOutput]:
            await release.wait()
            async for output in outputs():
                yield output

        run.outputs = waiting  # type: ignore[method-assign]
        return run

    runner.start = gated  # type: ignore[method-assign]
    # The service, not the ASGI client: httpx's ASGI transport hands over a body only once it is complete.
    body = parse_create_request(b'{"input": "hi", "background": true, "stream": true}', app_runtime.settings)
    prepared = await service.prepare(body, "public", app_runtime)
    stream = await submission.open_stream(app_runtime, prepared, "public")
    opening = [await anext(stream), await anext(stream)]
    assert not release.is_set()  # both arrived while no token was generated
    release.set()
    events = [*opening, *[event async for event in stream]]
    assert [event["type"] for event in events[:3]] == ["response.created", "response.queued", "response.in_progress"]
    assert events[0]["response"]["status"] == events[1]["response"]["status"] == "queued"
    final = assert_well_formed_stream(events)
    frames = "".join(await sse_frames(client, "GET", f"/v1/responses/{final['id']}", params={"stream": "true"}))
    assert frames.endswith("data: [DONE]\n\n") and parse_sse(frames) == events


async def _stored_stream(client: httpx.AsyncClient) -> list[dict]:
    reply = await client.post("/v1/responses", json={"input": "hi", "background": True, "stream": True})
    events = parse_sse(reply.text)
    assert_well_formed_stream(events)
    return events


async def test_a_replay_without_a_stored_terminal_event_ends_with_the_row(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    events = await _stored_stream(client)
    response_id = events[0]["response"]["id"]
    # As a reconciler that failed the response would leave it: the row terminal, the last events never stored.
    error = {"code": "server_error", "message": "The server stopped before this response finished."}
    async with app_runtime.database.transaction() as session:
        await session.execute(
            update(ResponseRow).where(ResponseRow.id == response_id).values(status="failed", error=error, output=[])
        )
        await session.execute(
            delete(ResponseEventRow).where(
                ResponseEventRow.response_id == response_id, ResponseEventRow.sequence_number >= 5
            )
        )
    frames = "".join(await sse_frames(client, "GET", f"/v1/responses/{response_id}", params={"stream": "true"}))
    assert frames.endswith("data: [DONE]\n\n")
    replayed = parse_sse(frames)
    assert replayed[:5] == events[:5]
    # What the replay had opened is closed before the terminal event: a well-formed stream for the SDK.
    assert assert_well_formed_stream(replayed) == (await client.get(f"/v1/responses/{response_id}")).json()
    assert [event["type"] for event in replayed[-2:]] == ["error", "response.failed"]
    assert replayed[-2]["message"] == error["message"]
    # Resumed after the message was opened: the same ending, though this relay never saw it open.
    resumed = await client.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": 3})
    assert parse_sse(resumed.text) == replayed[4:]


async def test_a_pruned_replay_ends_with_the_stored_response(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    old, recent = await _stored_stream(client), await _stored_stream(client)
    old_id, recent_id = old[0]["response"]["id"], recent[0]["response"]["id"]
    async with app_runtime.database.transaction() as session:
        past = utc_now() - timedelta(hours=2)
        await session.execute(update(ResponseRow).where(ResponseRow.id == old_id).values(updated_at=past))
    assert await prune_finished_events(app_runtime.database, retention_hours=1) == 1
    assert await prune_finished_events(app_runtime.database, retention_hours=0) == 0  # 0: keep forever
    async with app_runtime.database.read() as session:
        assert await repository.events_after(session, old_id, -1) == []
        assert len(await repository.events_after(session, recent_id, -1)) == len(recent)
    replayed = parse_sse((await client.get(f"/v1/responses/{old_id}", params={"stream": "true"})).text)
    assert [event["type"] for event in replayed] == ["response.completed"]
    assert replayed[0]["response"] == old[-1]["response"] == (await client.get(f"/v1/responses/{old_id}")).json()


async def test_an_unstored_stream_whose_job_dies_ends_failed(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    runner.delay_s = 0.01
    original = runner.start

    def crashing(job: GenerationJob) -> FakeRun:
        run = original(job)
        outputs = run.outputs

        async def crash() -> AsyncIterator[GenerationOutput]:
            # Dies after two words, and again when its executor asks it to finish: nothing ends the response.
            async for output in outputs():
                if run.produced > 2:
                    raise RuntimeError("the generation task died")
                yield output

        run.outputs = crash  # type: ignore[method-assign]
        return run

    runner.start = crashing  # type: ignore[method-assign]
    body = {"input": "hi", "stream": True, "store": False}
    frames = "".join(await sse_frames(client, "POST", "/v1/responses", json=body))
    assert frames.endswith("data: [DONE]\n\n")
    events = parse_sse(frames)
    assert events[-2]["type"] == "error" and events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    # The message it had opened is closed (incomplete) before them.
    assert events[-3]["type"] == "response.output_item.done" and events[-3]["item"]["status"] == "incomplete"
    # ... and its failed response keeps what the stream saw.
    assert events[-1]["response"]["output"] == [events[-3]["item"]]
    assert events[-3]["item"]["content"][0]["text"] == "the quick"
    assert_well_formed_stream(events)


async def test_a_foreground_stream_whose_final_write_lost_closes_its_items_before_the_rows_verdict(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner.reply = ["w0", "w1", "w2"]
    error = {"code": "server_error", "message": "The server stopped before this response finished."}

    async def ended_meanwhile(
        session: AsyncSession, response_id: str, *, holder: Holder, values: dict[str, Any], **kwargs: Any
    ) -> bool:
        # As if a reconciler had failed the response while the run was finishing: the run's write loses.
        ended = {"status": "failed", "error": error, "lease_expires_at": None}
        await session.execute(update(ResponseRow).where(ResponseRow.id == response_id).values(**ended))
        return False

    monkeypatch.setattr(transitions, "end_held", ended_meanwhile)
    events = parse_sse((await client.post("/v1/responses", json={"input": "hi", "stream": True})).text)
    final = assert_well_formed_stream(events)
    assert [event["type"] for event in events[-5:]] == FAILED_WITH_OPEN_MESSAGE
    assert events[-3]["item"]["status"] == "incomplete" and events[-3]["item"]["content"][0]["text"] == "w0 w1 w2"
    assert final == (await client.get(f"/v1/responses/{final['id']}")).json() and final["error"] == error


async def test_a_replay_ended_from_a_completed_row_closes_its_items_as_the_row_has_them(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    events = await _stored_stream(client)
    response_id = events[0]["response"]["id"]
    # The last events were never stored (a live relay's were lost, say); the row has the completed response.
    async with app_runtime.database.transaction() as session:
        await session.execute(
            delete(ResponseEventRow).where(
                ResponseEventRow.response_id == response_id, ResponseEventRow.sequence_number >= 6
            )
        )
    replayed = parse_sse((await client.get(f"/v1/responses/{response_id}", params={"stream": "true"})).text)
    final = assert_well_formed_stream(replayed)
    assert final == (await client.get(f"/v1/responses/{response_id}")).json() and final["status"] == "completed"
    done = [event["item"] for event in replayed if event["type"] == "response.output_item.done"]
    assert done == final["output"] and done[0]["status"] == "completed"


async def test_a_failed_final_commit_fails_the_response_with_its_output_so_far(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner.reply = ["w0", "w1", "w2"]
    end_held = transitions.end_held

    async def refuse_completed(
        session: AsyncSession, response_id: str, *, holder: Holder, values: dict[str, Any], **kwargs: Any
    ) -> bool:
        if values["status"] == "completed":  # not an outage: no retries, the response fails at once
            raise IntegrityError("UPDATE responses", {}, Exception("injected fault at the final commit"))
        return await end_held(session, response_id, holder=holder, values=values, **kwargs)

    monkeypatch.setattr(transitions, "end_held", refuse_completed)
    events = parse_sse(
        (await client.post("/v1/responses", json={"input": "hi", "background": True, "stream": True})).text
    )
    final = assert_well_formed_stream(events)
    assert [event["type"] for event in events[-5:]] == FAILED_WITH_OPEN_MESSAGE
    assert events[-3]["item"]["status"] == "incomplete"
    assert final["status"] == "failed" and final["error"]["code"] == "server_error" and final["usage"] is None
    assert final["output"][0]["status"] == "incomplete" and final["output"][0]["content"][0]["text"] == "w0 w1 w2"
    assert (await client.get(f"/v1/responses/{final['id']}")).json() == final
    replayed = parse_sse((await client.get(f"/v1/responses/{final['id']}", params={"stream": "true"})).text)
    assert replayed == events


async def test_delete_of_a_running_response_stops_it(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    runner.delay_s = 0.02
    runner.reply = [f"w{index}" for index in range(500)]
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    while not runner.runs.get(created["id"]) or runner.runs[created["id"]].produced < 3:
        await asyncio.sleep(0.01)
    deleted = await client.delete(f"/v1/responses/{created['id']}")
    assert deleted.status_code == 200 and deleted.json()["deleted"] is True
    run = runner.runs[created["id"]]
    assert run.cancelled
    produced = run.produced
    await asyncio.sleep(0.1)
    assert run.produced == produced, "generation went on after DELETE"
    assert (await client.get(f"/v1/responses/{created['id']}")).status_code == 404


async def test_readiness_needs_the_database_and_queue_and_reports_workers(client: httpx.AsyncClient) -> None:
    ready = await client.get("/ready")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": True, "queue": True, "workers": True}
    workers = await client.get("/health/workers")
    assert workers.status_code == 200 and workers.json()["models"] == {
        "fake-model": {"workers": True, "live_workers": 1}
    }


def _wrapped(error: Exception) -> DBAPIError:
    try:
        raise error
    except Exception as raised:
        return DBAPIError("SELECT 1", None, raised)


def test_outages_are_recognised_and_bugs_are_not() -> None:
    assert is_outage(_wrapped(asyncpg.exceptions.CannotConnectNowError("the database system is starting up")))
    assert is_outage(_wrapped(asyncpg.exceptions.AdminShutdownError("terminating connection")))
    assert is_outage(ConnectionRefusedError(111, "Connect call failed"))
    assert is_outage(PoolTimeoutError("QueuePool limit reached"))
    assert is_outage(ExceptionGroup("relay", [ConnectionResetError()]))
    assert not is_outage(_wrapped(asyncpg.exceptions.UniqueViolationError("duplicate key")))
    assert not is_outage(ValueError("a bug"))


async def test_a_database_that_cannot_accept_connections_is_a_503(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def starting_up(*_: object, **__: object) -> None:
        raise _wrapped(asyncpg.exceptions.CannotConnectNowError("the database system is starting up"))

    monkeypatch.setattr(repository, "get_response", starting_up)
    reply = await client.get("/v1/responses/resp_x")
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["type"] == "server_error"


@pytest.mark.settings(reconcile_interval_s=0.05)
async def test_embedded_mode_reconciles_while_running(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    # A generation of this process that died without ending its response: in progress, its lease run out.
    row = ResponseRow(
        id="resp_orphan",
        tenant="public",
        status="in_progress",
        model="fake-model",
        params={},
        output=[],
        background=False,
        lease_owner="node_gone",
        lease_expires_at=utc_now() - timedelta(seconds=1),
    )
    async with app_runtime.database.transaction() as session:
        await repository.insert_response(session, row, [])
    for _ in range(200):
        body = (await client.get("/v1/responses/resp_orphan")).json()
        if body["status"] != "in_progress":
            break
        await asyncio.sleep(0.02)
    assert body["status"] == "failed" and body["error"]["code"] == "server_error"
