"""A batch stopped before its lines all ran: cancelled (cancelling -> cancelled) or past its window (expired, the
clock moved rather than waited for), running lines cancelled through the responses' own cancellation, what
finished kept in the output file and the rest in the error file."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest

from app.batches.advance import advance_batches
from app.db.base import utc_now
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from tests.unit.batches.batch_files import advance_until, create_batch, jsonl, request_line, result_lines

LINES = [request_line(f"line-{index}") for index in range(6)]


async def wait_for_completed(client: httpx.AsyncClient, count: int) -> None:
    for _ in range(500):
        listed = (await client.get("/v1/responses", params={"status": "completed"})).json()["data"]
        if len(listed) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the first lines never completed")


async def two_done_two_running(client: httpx.AsyncClient, runtime: Runtime, runner: FakeRunner) -> dict:
    """A batch of six whose first two lines completed, the next two run (slowly) and the last two wait."""
    batch = await create_batch(client, jsonl(LINES))
    # The round that validates the batch submits lines 1 and 2 too.
    await advance_until(runtime, client, batch["id"], ("in_progress",))
    await wait_for_completed(client, 2)
    runner.delay_s = 0.05
    runner.reply = ["word"] * 2000
    await advance_batches(runtime)  # collects 1 and 2, submits 3 and 4
    current = (await client.get(f"/v1/batches/{batch['id']}")).json()
    assert current["status"] == "in_progress"
    assert current["request_counts"] == {"total": 6, "completed": 2, "failed": 0}
    return current


@pytest.mark.settings(batch_max_running_lines=2, batch_lines_per_round=2)
async def test_cancel_stops_running_lines_and_keeps_what_finished(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    batch = await two_done_two_running(client, app_runtime, runner)
    cancelling = await client.post(f"/v1/batches/{batch['id']}/cancel")
    assert cancelling.status_code == 200
    assert cancelling.json()["status"] == "cancelling" and cancelling.json()["cancelling_at"] is not None
    cancelled = await advance_until(app_runtime, client, batch["id"])
    assert cancelled["status"] == "cancelled" and cancelled["cancelled_at"] is not None
    assert cancelled["request_counts"] == {"total": 6, "completed": 2, "failed": 4}
    output = await result_lines(client, cancelled["output_file_id"])
    errors = await result_lines(client, cancelled["error_file_id"])
    assert sorted(output) == ["line-0", "line-1"]
    assert sorted(errors) == [f"line-{index}" for index in range(2, 6)]
    assert {line["error"]["code"] for line in errors.values()} == {"batch_cancelled"}
    assert all(line["response"] is None for line in errors.values())
    # The running lines' generations were stopped, not left to finish.
    assert len(runner.jobs) == 4
    assert all(run.cancelled for run in list(runner.runs.values())[2:])
    again = await client.post(f"/v1/batches/{batch['id']}/cancel")
    assert again.status_code == 400 and "cancelled" in again.json()["error"]["message"]


@pytest.mark.settings(batch_max_running_lines=2, batch_lines_per_round=2)
async def test_past_its_window_a_batch_expires_with_what_finished_kept(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    batch = await two_done_two_running(client, app_runtime, runner)
    later = utc_now() + timedelta(hours=24, minutes=1)
    expired = await advance_until(app_runtime, client, batch["id"], now=later)
    assert expired["status"] == "expired" and expired["expired_at"] is not None
    assert expired["request_counts"] == {"total": 6, "completed": 2, "failed": 4}
    output = await result_lines(client, expired["output_file_id"])
    errors = await result_lines(client, expired["error_file_id"])
    assert sorted(output) == ["line-0", "line-1"]
    assert {line["error"]["code"] for line in errors.values()} == {"batch_expired"}
    assert len(runner.jobs) == 4, "a line was submitted after the window"


async def test_a_batch_cancelled_while_validating_ends_cancelled_with_no_files(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    batch = await create_batch(client, jsonl(LINES))
    assert (await client.post(f"/v1/batches/{batch['id']}/cancel")).json()["status"] == "cancelling"
    cancelled = await advance_until(app_runtime, client, batch["id"])
    assert cancelled["status"] == "cancelled"
    assert cancelled["output_file_id"] is None and cancelled["error_file_id"] is None
    assert runner.jobs == []
