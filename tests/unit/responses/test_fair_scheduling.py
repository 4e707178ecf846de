"""Fair scheduling in embedded mode (fake engine, one place): a job's class follows its create, a tenant's
foreground create runs right after the job running now, however many background jobs another tenant queued,
and a tenant's queued background responses are capped (429 with Retry-After, per tenant)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.protocol import assert_error

Clients = tuple[httpx.AsyncClient, httpx.AsyncClient]


@pytest.fixture
async def tenants(tmp_path: Path, runner: FakeRunner) -> AsyncIterator[Clients]:
    """Keys `alpha` and `beta`, jobs run one at a time, at most 3 queued background responses a tenant."""
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'fair.db'}",
        model_id="m",
        api_keys="alpha,beta",
        max_queued_background_per_tenant=3,
        _env_file=None,
    )
    app = create_app(settings, fake_generation(FakeRenderer(), runner, places=1))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer alpha"}) as a,
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer beta"}) as b,
        ):
            yield a, b


async def background(client: httpx.AsyncClient, text: str) -> httpx.Response:
    return await client.post("/v1/responses", json={"input": text, "background": True})


async def started(runner: FakeRunner, count: int) -> None:
    while len(runner.jobs) < count:
        await asyncio.sleep(0.01)


async def test_a_foreground_create_goes_before_another_tenants_queued_background_jobs(
    tenants: Clients, runner: FakeRunner
) -> None:
    alpha, beta = tenants
    runner.delay_s = 0.05
    ids = []
    for number in range(3):
        reply = await background(alpha, f"bg {number}")
        assert reply.status_code == 200 and reply.json()["status"] == "queued"
        ids.append(reply.json()["id"])
    await started(runner, 1)
    foreground = await beta.post("/v1/responses", json={"input": "Say hi."})
    assert foreground.json()["status"] == "completed"
    order = [job.response_id for job in runner.jobs]
    # beta's ran second, right after the one that was running: alpha's two others were still queued.
    assert order[:2] == [ids[0], foreground.json()["id"]]
    assert [job.job_class for job in runner.jobs[:2]] == ["background", "interactive"]
    assert runner.jobs[0].tenant != runner.jobs[1].tenant  # alpha's, then beta's
    queued = [(await alpha.get(f"/v1/responses/{response_id}")).json()["status"] for response_id in ids[1:]]
    assert "queued" in queued  # still waiting (not claimed, not in_progress) when beta's was done


async def test_queued_background_responses_are_capped_per_tenant(tenants: Clients, runner: FakeRunner) -> None:
    alpha, beta = tenants
    runner.delay_s = 0.3  # the running job holds the one place for the whole test
    first = (await background(alpha, "running")).json()["id"]
    await started(runner, 1)  # claimed: in progress, not queued
    waiting = [(await background(alpha, f"waits {number}")).json()["id"] for number in range(3)]
    refused = await background(alpha, "one too many")
    error = assert_error(refused, 429, param=None, code="rate_limit_exceeded")
    assert "queued" in error["message"]
    assert refused.headers["retry-after"] == "10"
    # A background stream is refused the same way, before any event.
    streamed = await alpha.post("/v1/responses", json={"input": "x", "background": True, "stream": True})
    assert_error(streamed, 429, param=None, code="rate_limit_exceeded")
    # Per tenant: beta's background create is queued.
    assert (await background(beta, "beta's")).json()["status"] == "queued"
    # One of alpha's leaves the queue (cancelled): alpha may queue one again.
    cancelled = await alpha.post(f"/v1/responses/{waiting[0]}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    assert (await background(alpha, "room again")).json()["status"] == "queued"
    assert first not in waiting
