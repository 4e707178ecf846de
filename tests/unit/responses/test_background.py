"""Background mode in embedded mode: create-then-poll, cancel, and stream replay from stored events."""

from __future__ import annotations

import asyncio

import httpx

from app.db.models import ResponseRow
from app.generation.job import GenerationJob
from app.responses import repository
from app.runtime import Runtime
from app.testing.fakes import FAKE_REPLY, FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

POLL_S = 0.01


async def poll_until_done(client: httpx.AsyncClient, response_id: str, timeout_s: float = 10) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        body = (await client.get(f"/v1/responses/{response_id}")).json()
        if body["status"] not in ("queued", "in_progress") or asyncio.get_running_loop().time() > deadline:
            return body
        await asyncio.sleep(POLL_S)


async def test_background_create_returns_queued_then_completes(client: httpx.AsyncClient) -> None:
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    assert created["status"] == "queued" and created["background"] is True and created["output"] == []
    done = await poll_until_done(client, created["id"])
    assert done["status"] == "completed" and done["completed_at"] is not None
    assert done["output"][0]["content"][0]["text"] == " ".join(FAKE_REPLY)


async def test_cancel_stops_generation_and_keeps_the_partial_output(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    runner.delay_s = 0.02
    runner.reply = [f"w{index}" for index in range(500)]
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    while not runner.runs.get(created["id"]) or runner.runs[created["id"]].produced < 3:
        await asyncio.sleep(POLL_S)
    cancelled = await client.post(f"/v1/responses/{created['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["status"] == "cancelled"
    text = body["output"][0]["content"][0]["text"]
    assert text.startswith("w0 w1 w2") and len(text.split()) < 500
    produced = runner.runs[created["id"]].produced
    await asyncio.sleep(0.1)
    assert runner.runs[created["id"]].produced == produced, "generation went on after cancel"
    again = await client.post(f"/v1/responses/{created['id']}/cancel")
    assert again.status_code == 200 and again.json() == body
    assert (await client.get(f"/v1/responses/{created['id']}")).json() == body


async def test_cancel_rules(client: httpx.AsyncClient) -> None:
    foreground = (await client.post("/v1/responses", json={"input": "hi"})).json()
    reply = await client.post(f"/v1/responses/{foreground['id']}/cancel")
    assert reply.status_code == 400 and reply.json()["error"]["message"] == "Cannot cancel a synchronous response."
    background = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    await poll_until_done(client, background["id"])
    reply = await client.post(f"/v1/responses/{background['id']}/cancel")
    assert reply.status_code == 400 and reply.json()["error"]["message"] == "Cannot cancel a completed response."
    assert (await client.post("/v1/responses/resp_nope/cancel")).status_code == 404


async def test_a_queued_response_cancelled_never_starts(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True, "store": True})).json()
    await poll_until_done(client, created["id"])
    # A response still waiting for a worker: stored as queued, its job not yet taken.
    row = ResponseRow(
        id="resp_waiting", tenant="public", status="queued", model="m", params={}, output=[], background=True
    )
    async with app_runtime.database.transaction() as session:
        await repository.insert_response(session, row, [])
    cancelled = (await client.post("/v1/responses/resp_waiting/cancel")).json()
    assert cancelled["status"] == "cancelled"
    job = GenerationJob.from_payload({**runner.jobs[0].to_payload(), "response_id": "resp_waiting"})
    await app_runtime.queue.enqueue(job)
    await asyncio.sleep(0.05)
    assert [job.response_id for job in runner.jobs] == [created["id"]], "a cancelled response was generated"


async def test_background_stream_is_stored_and_replayed(client: httpx.AsyncClient) -> None:
    body = {"input": "hi", "background": True, "stream": True}
    live = parse_sse((await client.post("/v1/responses", json=body)).text)
    final = assert_well_formed_stream(live)
    assert live[0]["response"]["background"] is True
    replayed = parse_sse((await client.get(f"/v1/responses/{final['id']}", params={"stream": "true"})).text)
    assert replayed == live
    after = parse_sse(
        (await client.get(f"/v1/responses/{final['id']}", params={"stream": "true", "starting_after": 3})).text
    )
    assert after == live[4:]
    assert (await client.get(f"/v1/responses/{final['id']}")).json() == final


async def test_stream_resume_needs_background_and_stream(client: httpx.AsyncClient) -> None:
    plain = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    reply = await client.get(f"/v1/responses/{plain['id']}", params={"stream": "true"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "stream"


async def test_a_job_enqueued_twice_is_generated_once(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    await poll_until_done(client, created["id"])
    again = next(job for job in runner.jobs if job.response_id == created["id"])
    await app_runtime.queue.enqueue(again)  # as a reconciler or a retried enqueue might
    await asyncio.sleep(0.05)
    assert [job.response_id for job in runner.jobs].count(created["id"]) == 1
    assert (await client.get(f"/v1/responses/{created['id']}")).json()["status"] == "completed"
