"""A restart in the middle of a batch: a new app over the same database finishes it, and no line whose response
already exists runs again (its response id was fixed when the batch started), not even one whose node stored the
response and died before marking the line running."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import update

from app.batches.advance import SUBMIT_CLAIM_S
from app.config import Settings
from app.db.base import utc_now
from app.db.models import BatchLineRow
from app.main import create_app
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.unit.batches.batch_files import advance_until, create_batch, jsonl, request_line, result_lines


async def test_a_new_app_finishes_the_batch_without_running_a_line_twice(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'restart.db'}",
        model_id="m",
        batch_interval_s=3600,
        batch_max_running_lines=2,
        batch_lines_per_round=2,
        _env_file=None,
    )
    first_runner = FakeRunner()
    first = create_app(settings, fake_generation(FakeRenderer(), first_runner))
    async with first.router.lifespan_context(first):
        runtime: Runtime = first.state.runtime
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=first), base_url="http://t") as client:
            batch = await create_batch(client, jsonl([request_line(f"line-{index}") for index in range(5)]))
            # The round that validates the batch submits its first two lines too.
            await advance_until(runtime, client, batch["id"], ("in_progress",))
            for _ in range(500):
                done = (await client.get("/v1/responses", params={"status": "completed"})).json()["data"]
                if len(done) == 2:
                    break
                await asyncio.sleep(0.01)
            assert len(done) == 2
        # Line 2's node "died" after storing its response, before marking the line running.
        async with runtime.database.transaction() as session:
            await session.execute(
                update(BatchLineRow)
                .where(BatchLineRow.batch_id == batch["id"], BatchLineRow.line == 2)
                .values(state="submitting", claimed_at=utc_now())
            )
    first_run = {job.response_id for job in first_runner.jobs}
    assert len(first_run) == 2

    second_runner = FakeRunner()
    second = create_app(settings, fake_generation(FakeRenderer(), second_runner))
    async with second.router.lifespan_context(second):
        runtime = second.state.runtime
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=second), base_url="http://t") as client:
            later = utc_now() + timedelta(seconds=SUBMIT_CLAIM_S + 1)
            finished = await advance_until(runtime, client, batch["id"], now=later)
            assert finished["status"] == "completed"
            assert finished["request_counts"] == {"total": 5, "completed": 5, "failed": 0}
            output = await result_lines(client, finished["output_file_id"])
    assert sorted(output) == [f"line-{index}" for index in range(5)]
    answered = {line["response"]["body"]["id"] for line in output.values()}
    second_run = [job.response_id for job in second_runner.jobs]
    # The three lines never submitted ran here, once each; the two that had run did not run again.
    assert len(second_run) == 3 and set(second_run).isdisjoint(first_run)
    assert answered == first_run | set(second_run)
