"""Where a batch meets the rest of the server: its lines wait in the `batch` class, behind a tenant's queued
background jobs and outside their cap; its end sends its `batch.*` webhook event, signed as every event is, and
its lines' responses send none of their own (though they run as background responses)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest

from app.config import Settings
from app.main import create_app
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from app.testing.receiver import running_receiver
from app.webhooks.delivery import DeliveryPolicy, WebhookDeliverer
from tests.unit.batches.batch_files import advance_until, create_batch, jsonl, request_line

SDK = openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")


@pytest.fixture
async def one_place(tmp_path: Path, runner: FakeRunner) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    """Jobs run one at a time; at most one queued background response per tenant."""
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'batch-jobs.db'}",
        model_id="m",
        max_queued_background_per_tenant=1,
        batch_interval_s=3600.0,
        _env_file=None,
    )
    app = create_app(settings, fake_generation(FakeRenderer(), runner, places=1))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client, app.state.runtime


async def test_batch_lines_wait_behind_queued_background_jobs_and_outside_their_cap(
    one_place: tuple[httpx.AsyncClient, Runtime], runner: FakeRunner
) -> None:
    client, runtime = one_place
    runner.delay_s = 0.1
    running = (await client.post("/v1/responses", json={"input": "running", "background": True})).json()
    while not runner.jobs:
        await asyncio.sleep(0.01)
    queued = (await client.post("/v1/responses", json={"input": "queued", "background": True})).json()
    assert queued["status"] == "queued"  # the tenant is at its cap of one queued background response
    batch = await create_batch(client, jsonl([request_line("a"), request_line("b")]))

    done = await advance_until(runtime, client, batch["id"])

    # Both lines ran: the cap on queued background responses does not refuse a batch's lines.
    assert done["status"] == "completed" and done["request_counts"] == {"total": 2, "completed": 2, "failed": 0}
    by_id = {job.response_id: job for job in runner.jobs}
    assert [by_id[running["id"]].job_class, by_id[queued["id"]].job_class] == ["background", "background"]
    lines = [job for job in runner.jobs if job.response_id not in (running["id"], queued["id"])]
    assert [job.job_class for job in lines] == ["batch", "batch"]
    # The batch's flow and the tenant's background flow took turns (batch weight 1 to background's 2): the
    # background job queued before the batch ran before its last line, not after all of them.
    order = [job.response_id for job in runner.jobs]
    assert order.index(queued["id"]) < max(order.index(job.response_id) for job in lines)


@pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*", webhook_delivery_interval_s=3600)
async def test_a_batch_that_ends_sends_its_event_signed(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    deliver = WebhookDeliverer(
        app_runtime.database, app_runtime.sealer, app_runtime.settings, DeliveryPolicy(retry_window_s=3600)
    )
    with running_receiver() as receiver:
        types = ["batch.completed", "batch.failed", "response.completed"]
        body = {"name": "batches", "url": receiver.url, "event_types": types}
        reply = await client.post("/v1/webhook_endpoints", json=body)
        assert reply.status_code == 200, reply.text
        made = reply.json()
        completed = await create_batch(client, jsonl([request_line("one"), request_line("two")]))
        assert (await advance_until(app_runtime, client, completed["id"]))["status"] == "completed"
        failed = await create_batch(client, b"{not json\n")
        assert (await advance_until(app_runtime, client, failed["id"]))["status"] == "failed"
        await deliver.run_round()
        events = [
            SDK.webhooks.unwrap(request.body, request.headers, secret=made["signing_secret"])
            for request in receiver.requests
        ]
    assert sorted((event.type, event.data.id) for event in events) == sorted(  # type: ignore[union-attr]
        [("batch.completed", completed["id"]), ("batch.failed", failed["id"])]
    )
