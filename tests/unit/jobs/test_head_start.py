"""A foreground job's generation begins while its claim commits (jobs/starting.HeadStart), and nothing of it is
read until the claim says the run is this one's: a claim that finds the response ended leaves no trace of it; a
cancel signalled while the claim commits, with or without a head start, stops the generation at its start; and
a background job (a takeover's or a preempted job's next run may continue stored progress) gets none. A cancel
stored after the claim whose signal was lost is read by the heartbeat's first check, not its first renewal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
from sqlalchemy import update

from app.db.base import utc_now
from app.db.models import ResponseRow
from app.jobs import repository as jobs
from app.jobs.execution import JobExecution
from app.jobs.lease import Claim
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

ClaimStep = Callable[[JobExecution], Awaitable[None]]


def before_each_claim(monkeypatch: pytest.MonkeyPatch, step: ClaimStep) -> None:
    """Run `step` as each claim begins (the generation begun early, if any, already started)."""
    claim = JobExecution._claim

    async def claiming(self: JobExecution) -> Claim | None:
        await step(self)
        return await claim(self)

    monkeypatch.setattr(JobExecution, "_claim", claiming)


async def test_a_foreground_jobs_generation_starts_before_its_claim_and_is_the_one_that_answers(
    client: httpx.AsyncClient, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    started_at_claim: list[int] = []

    async def note(_: JobExecution) -> None:
        started_at_claim.append(len(runner.jobs))

    before_each_claim(monkeypatch, note)
    reply = await client.post("/v1/responses", json={"input": "Hi", "stream": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert started_at_claim == [1]
    assert len(runner.jobs) == 1  # adopted, not started again
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == " ".join(runner.reply)
    stored = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert stored == final


async def test_a_claim_that_finds_the_response_ended_discards_the_generation_begun_early(
    client: httpx.AsyncClient, runner: FakeRunner, app_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def end_it(execution: JobExecution) -> None:
        # As a reconciler or a cancel would, before this run's claim: the run is not ours to make.
        async with app_runtime.database.transaction() as session:
            values = {"status": "failed", "error": {"code": "server_error", "message": "ended elsewhere"}}
            await session.execute(update(ResponseRow).where(ResponseRow.id == execution.job.response_id).values(values))

    before_each_claim(monkeypatch, end_it)
    reply = await client.post("/v1/responses", json={"input": "Hi", "stream": True})
    events = parse_sse(reply.text)
    run = runner.runs[runner.jobs[0].response_id]
    assert run.cancelled and len(runner.jobs) == 1
    assert not [event for event in events if event["type"] == "response.output_text.delta"], events
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["message"] == "ended elsewhere"


@pytest.mark.parametrize("head_start", [True, False])
async def test_a_cancel_signalled_while_the_claim_commits_stops_the_generation_at_its_start(
    client: httpx.AsyncClient,
    runner: FakeRunner,
    app_runtime: Runtime,
    monkeypatch: pytest.MonkeyPatch,
    head_start: bool,
) -> None:
    runner.reply = [f"w{index}" for index in range(200)]
    runner.delay_s = 0.005
    if not head_start:
        run = JobExecution.run

        async def without_head_start(self: JobExecution, runner: FakeRunner, *, head_start: bool = True) -> None:
            await run(self, runner, head_start=False)

        monkeypatch.setattr(JobExecution, "run", without_head_start)

    async def signal(execution: JobExecution) -> None:
        # The signal only (the cancel stored nowhere): it reaches the execution, and the runner's run if any.
        await app_runtime.queue.cancel(execution.job.response_id)

    before_each_claim(monkeypatch, signal)
    reply = await client.post("/v1/responses", json={"input": "Hi", "stream": True, "max_output_tokens": 200})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["status"] == "cancelled"
    assert runner.runs[final["id"]].produced == 0
    assert len(runner.jobs) == 1


async def test_a_background_job_starts_its_generation_after_its_claim(
    client: httpx.AsyncClient, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    started_at_claim: list[int] = []

    async def note(_: JobExecution) -> None:
        started_at_claim.append(len(runner.jobs))

    before_each_claim(monkeypatch, note)
    reply = await client.post("/v1/responses", json={"input": "Hi", "stream": True, "background": True})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["status"] == "completed"
    assert started_at_claim == [0] and len(runner.jobs) == 1


async def test_a_cancel_stored_after_the_claim_whose_signal_was_lost_is_read_beside_the_prefill(
    client: httpx.AsyncClient, runner: FakeRunner, app_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole reply takes ~3 s, the heartbeat's first renewal 5 s (a third of the lease): only the first check,
    # a read at once, can stop it.
    runner.reply = [f"w{index}" for index in range(300)]
    runner.delay_s = 0.01
    claim = JobExecution._claim

    async def claim_then_store_a_cancel(self: JobExecution) -> Claim | None:
        claimed = await claim(self)
        async with app_runtime.database.transaction() as session:
            assert await jobs.request_cancel(session, self.job.response_id, now=utc_now())
        return claimed

    monkeypatch.setattr(JobExecution, "_claim", claim_then_store_a_cancel)
    reply = await client.post("/v1/responses", json={"input": "Hi", "stream": True, "max_output_tokens": 300})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["status"] == "cancelled"
    assert runner.runs[final["id"]].produced < 300
