"""A cancel that comes around a stored job's claim stops its generation at its start, with no transaction on
the way to the first token: a signal that came while the claim committed (no generation to stop yet) is honoured
as the generation starts; a cancel stored after the claim whose signal was lost is read by the heartbeat's first
check, at once, not by its first renewal a third of a lease later."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest

from app.db.base import utc_now
from app.jobs import repository as jobs
from app.jobs.execution import JobExecution
from app.jobs.lease import Claim
from app.runtime import Runtime
from app.testing.fakes import FakeRunner
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

ClaimStep = Callable[[JobExecution], Awaitable[None]]


def before_each_claim(monkeypatch: pytest.MonkeyPatch, step: ClaimStep) -> None:
    """Run `step` as each claim begins."""
    claim = JobExecution._claim

    async def claiming(self: JobExecution) -> Claim | None:
        await step(self)
        return await claim(self)

    monkeypatch.setattr(JobExecution, "_claim", claiming)


async def test_a_cancel_signalled_while_the_claim_commits_stops_the_generation_at_its_start(
    client: httpx.AsyncClient, runner: FakeRunner, app_runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner.reply = [f"w{index}" for index in range(200)]
    runner.delay_s = 0.005

    async def signal(execution: JobExecution) -> None:
        # The signal only (the cancel stored nowhere): it reaches the execution before there is a generation.
        await app_runtime.queue.cancel(execution.job.response_id)

    before_each_claim(monkeypatch, signal)
    reply = await client.post("/v1/responses", json={"input": "Hi", "stream": True, "max_output_tokens": 200})
    final = assert_well_formed_stream(parse_sse(reply.text))
    assert final["status"] == "cancelled"
    assert runner.runs[final["id"]].produced == 0
    assert len(runner.jobs) == 1


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
