"""Two API nodes over one database advancing the same batch at once: every step is a conditional UPDATE, so each
line is submitted, run and written once, whichever node takes it."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import httpx

from app.batches.advance import advance_batches
from app.config import Settings
from app.main import create_app
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.unit.batches.batch_files import create_batch, jsonl, request_line, result_lines

LINES = 12


async def test_two_nodes_run_each_line_once(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'nodes.db'}",
        model_id="m",
        batch_interval_s=3600,
        batch_max_running_lines=4,
        batch_lines_per_round=3,
        _env_file=None,
    )
    runners = [FakeRunner(), FakeRunner()]
    async with AsyncExitStack() as stack:
        runtimes: list[Runtime] = []
        for runner in runners:
            app = create_app(settings, fake_generation(FakeRenderer(), runner))
            await stack.enter_async_context(app.router.lifespan_context(app))
            runtimes.append(app.state.runtime)
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        )
        batch = await create_batch(client, jsonl([request_line(f"line-{index}") for index in range(LINES)]))
        for _ in range(400):
            await asyncio.gather(*(advance_batches(runtime) for runtime in runtimes))
            current = (await client.get(f"/v1/batches/{batch['id']}")).json()
            if current["status"] == "completed":
                break
            await asyncio.sleep(0.01)
        assert current["status"] == "completed"
        assert current["request_counts"] == {"total": LINES, "completed": LINES, "failed": 0}
        output = await result_lines(client, current["output_file_id"])
    assert sorted(output) == sorted(f"line-{index}" for index in range(LINES))
    ran = [job.response_id for runner in runners for job in runner.jobs]
    assert len(ran) == LINES and len(set(ran)) == LINES
    assert {line["response"]["body"]["id"] for line in output.values()} == set(ran)
    assert all(runner.jobs for runner in runners), "one node did all the work: nothing was contended"
