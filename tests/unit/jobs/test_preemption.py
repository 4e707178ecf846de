"""Preemption in embedded mode (fake engine, two places, one kept for interactive work): a tenant's foreground
create that finds every place taken by another tenant has that tenant's background job handed back to the queue
between two tokens; the job goes on from where it was, its stream one continuous stream (text and sequence
numbers), or ends `cancelled` if a cancel came while it waited; a tenant alone never preempts its own work."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.jobs.recovery import Reconciler, RecoveryPolicy
from app.main import create_app
from app.responses import repository
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from app.testing.sse import parse_sse
from tests.protocol import assert_well_formed_stream

Clients = tuple[httpx.AsyncClient, httpx.AsyncClient, Runtime]
BACKGROUND_STREAM = {"input": "long work", "background": True, "stream": True}


@pytest.fixture
async def tenants(tmp_path: Path, runner: FakeRunner, request: pytest.FixtureRequest) -> AsyncIterator[Clients]:
    """Keys `alpha` and `beta`; two places: one for background work, one kept for interactive work (a test's
    `@pytest.mark.settings(...)` adds settings)."""
    marker = request.node.get_closest_marker("settings")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'preempt.db'}",
        model_id="m",
        api_keys="alpha,beta",
        batch_interval_s=3600.0,
        _env_file=None,
        **(marker.kwargs if marker else {}),
    )
    app = create_app(settings, fake_generation(FakeRenderer(), runner, places=2))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer alpha"}) as a,
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer beta"}) as b,
        ):
            yield a, b, app.state.runtime


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def status(client: httpx.AsyncClient, response_id: str) -> str:
    status: str = (await client.get(f"/v1/responses/{response_id}")).json()["status"]
    return status


def words(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{index}" for index in range(count)]


async def fill_alphas_places(alpha: httpx.AsyncClient, runner: FakeRunner) -> tuple[asyncio.Task[httpx.Response], str]:
    """Alpha's background stream takes the background place, then alpha's foreground create the kept one; the
    background job has said a few words."""
    live = asyncio.create_task(alpha.post("/v1/responses", json=BACKGROUND_STREAM))
    await until(lambda: len(runner.jobs) == 1)
    background_id = runner.jobs[0].response_id
    asyncio.create_task(alpha.post("/v1/responses", json={"input": "alpha's own"}))  # noqa: RUF006
    await until(lambda: len(runner.jobs) == 2 and runner.runs[background_id].produced >= 3)
    return live, background_id


async def test_a_preempted_background_job_goes_on_after_the_other_tenants_job_as_one_stream(
    tenants: Clients, runner: FakeRunner
) -> None:
    alpha, beta, _ = tenants
    runner.delay_s = 0.01
    # One reply a run, in the order they start: alpha's background, alpha's foreground, beta's, the resumed one.
    runner.replies = [words("w", 60), words("a", 60), words("b", 30), words("r", 4)]
    live, background_id = await fill_alphas_places(alpha, runner)
    first_run = runner.runs[background_id]
    answer = asyncio.create_task(beta.post("/v1/responses", json={"input": "Say hi."}))
    await until(lambda: len(runner.jobs) == 3)
    # Beta's job started at once, in the place alpha's background job gives back; that job waits, `queued`.
    assert runner.jobs[2].tenant != runner.jobs[0].tenant and runner.jobs[2].job_class == "interactive"
    await until(lambda: first_run.cancelled)  # stopped between two tokens
    assert await status(alpha, background_id) in ("in_progress", "queued")  # (storing its progress, then given back)
    for _ in range(200):  # (beta's job, 30 words, still runs meanwhile)
        if await status(alpha, background_id) == "queued":
            break
        await asyncio.sleep(0.005)
    else:
        raise AssertionError("the preempted job was not given back")
    assert runner.runs[runner.jobs[2].response_id].produced < 30
    said = " ".join(words("w", first_run.produced))
    assert (await answer).json()["output"][0]["content"][0]["text"] == " ".join(words("b", 30))
    events = parse_sse((await asyncio.wait_for(live, 10)).text)
    final = assert_well_formed_stream(events)  # sequence numbers 0..n-1, deltas adding up, one terminal event
    assert final["status"] == "completed"
    assert final["output"][0]["content"][0]["text"] == said + "r0 r1 r2 r3"
    assert [event["type"] for event in events].count("response.output_item.added") == 1
    resumed = runner.jobs[3]
    assert resumed.response_id == background_id
    written = await runner.tokenize("m", said)
    assert resumed.prompt_tokens == [*runner.jobs[0].prompt_tokens, *written]
    assert resumed.sampling.resumed_output_tokens == len(written)
    replayed = parse_sse((await alpha.get(f"/v1/responses/{background_id}", params={"stream": "true"})).text)
    assert replayed == events
    assert (await alpha.get(f"/v1/responses/{background_id}")).json() == final


async def test_a_preempted_job_cancelled_while_it_waits_ends_cancelled_with_its_output_so_far(
    tenants: Clients, runner: FakeRunner
) -> None:
    alpha, beta, _ = tenants
    runner.delay_s = 0.01
    runner.replies = [words("w", 60), words("a", 60), words("b", 30)]
    live, background_id = await fill_alphas_places(alpha, runner)
    answer = asyncio.create_task(beta.post("/v1/responses", json={"input": "Say hi."}))
    await until(lambda: len(runner.jobs) == 3)
    said = " ".join(words("w", runner.runs[background_id].produced))
    cancelled = await alpha.post(f"/v1/responses/{background_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    events = parse_sse((await asyncio.wait_for(live, 10)).text)
    final = assert_well_formed_stream(events)
    assert final["status"] == "cancelled"
    assert final["output"][0]["content"][0]["text"] == said
    assert (await answer).json()["status"] == "completed"
    await asyncio.sleep(0.1)  # its turn came when beta's job ended: its claim found it ended, or cancelled
    # (A cancel that came while the job was being handed back finds it queued again with the cancel stored: its
    # next claim starts the model and stops it before the first word, as any claim of a cancelled job does.)
    runs = [job.response_id for job in runner.jobs].count(background_id)
    assert runs == 1 or (runs == 2 and runner.runs[background_id].produced == 0)
    assert (await alpha.get(f"/v1/responses/{background_id}")).json() == final


async def test_a_tenant_alone_does_not_preempt_its_own_background_work(tenants: Clients, runner: FakeRunner) -> None:
    alpha, _, _ = tenants
    runner.delay_s = 0.01
    runner.replies = [words("w", 30), words("a", 30), words("c", 3)]
    live, background_id = await fill_alphas_places(alpha, runner)
    third = asyncio.create_task(alpha.post("/v1/responses", json={"input": "alpha's third"}))
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 10)).text))
    # Alpha's third create waited for a place of its own tenant's jobs: the background job ran on, once.
    assert final["output"][0]["content"][0]["text"] == " ".join(words("w", 30))
    assert [job.response_id for job in runner.jobs].count(background_id) == 1
    assert (await third).json()["output"][0]["content"][0]["text"] == "c0 c1 c2"


@pytest.mark.settings(lease_s=1, max_attempts=2, reconcile_interval_s=3600)
async def test_a_preemption_is_not_a_lost_run_a_later_crash_is_still_taken_over(
    tenants: Clients, runner: FakeRunner
) -> None:
    alpha, beta, runtime = tenants
    runner.delay_s = 0.01
    # Alpha's background, alpha's foreground, beta's, the resumed run (it dies after 2 words), the takeover.
    runner.replies = [words("w", 60), words("a", 60), words("b", 30), words("r", 40), words("t", 3)]
    runner.crash_in_run = {3: 2}
    live, background_id = await fill_alphas_places(alpha, runner)
    answer = asyncio.create_task(beta.post("/v1/responses", json={"input": "Say hi."}))
    assert (await answer).json()["status"] == "completed"
    await until(lambda: len(runner.jobs) == 4 and runner.runs[background_id].produced == 2)
    await asyncio.sleep(1.2)  # the dead run's lease expires
    policy = RecoveryPolicy.from_settings(runtime.settings)
    # Two runs claimed it, one of them preempted: one lost run of the two allowed, so it is taken over.
    assert (await Reconciler(runtime.database, runtime.queue, policy).run_round()).taken_over == 1
    final = assert_well_formed_stream(parse_sse((await asyncio.wait_for(live, 10)).text))
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"].endswith("t0 t1 t2")
    async with runtime.database.read() as session:
        row = await repository.get_by_id(session, background_id)
    assert row is not None and (row.attempts, row.preemptions) == (3, 1)
