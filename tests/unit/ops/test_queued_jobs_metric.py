"""The gauge of queued jobs by tenant and class: embedded mode (fake engine, one place) counts the jobs in its
waiting room at each scrape, a tenant whose jobs all left reads 0, and tenants past the label cap are summed as
`other`. (Distributed mode's count: tests/unit/transport/test_queued_tenants.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.generation.job import GenerationJob
from app.generation.types import GenerationOutput
from app.main import create_app
from app.observability import metrics
from app.observability.metrics import REGISTRY, TenantLabels, tenant_label
from app.ops.metrics import show_queued_by_tenant
from app.testing.fakes import FakeRenderer, FakeRun, FakeRunner, fake_generation
from app.transport.inprocess import InProcessQueue

ADMIN = "admin-key"
GAUGE = "llama_responses_tenant_queued_jobs"


class GatedRun(FakeRun):
    def __init__(self, gate: asyncio.Event, job: GenerationJob, reply: list[str]) -> None:
        super().__init__(job, reply, delay_s=0.0, fail_after=None)
        self.gate = gate

    async def outputs(self) -> AsyncIterator[GenerationOutput]:
        await self.gate.wait()
        async for output in super().outputs():
            yield output


class GatedRunner(FakeRunner):
    """The fake model, which says nothing until `gate` is set: the job in the one place holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    def start(self, job: GenerationJob) -> FakeRun:
        self.jobs.append(job)
        run = GatedRun(self.gate, job, self.reply)
        self.runs[job.response_id] = run
        return run


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, GatedRunner, InProcessQueue]]:
    runner = GatedRunner()
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'queued.db'}", model_id="m", api_keys=ADMIN, _env_file=None
    )
    app = create_app(settings, fake_generation(FakeRenderer(), runner, places=1))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"authorization": f"Bearer {ADMIN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as client:
            yield client, runner, app.state.runtime.queue


async def project_client(admin: httpx.AsyncClient, project: str) -> tuple[httpx.AsyncClient, str]:
    made = (await admin.post("/v1/keys", json={"project": project, "name": "k"})).json()
    headers = {"authorization": f"Bearer {made['value']}"}
    return httpx.AsyncClient(transport=admin._transport, base_url="http://t", headers=headers), made["project_id"]


async def gauge(client: httpx.AsyncClient) -> dict[tuple[str, str], float]:
    reply = await client.get("/metrics")
    assert reply.status_code == 200
    return {
        (sample.labels["tenant"], sample.labels["job_class"]): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
        if sample.name == GAUGE
    }


async def test_embedded_mode_counts_its_waiting_room_by_tenant_and_class(
    admin: tuple[httpx.AsyncClient, GatedRunner, InProcessQueue],
) -> None:
    client, runner, queue = admin
    alpha, alpha_project = await project_client(client, "alpha")
    beta, beta_project = await project_client(client, "beta")
    async with alpha, beta:
        await alpha.post("/v1/responses", json={"input": "x", "background": True})
        while not runner.jobs:  # the first holds the one place
            await asyncio.sleep(0.01)
        for client_of_tenant in (alpha, alpha, beta):
            await client_of_tenant.post("/v1/responses", json={"input": "x", "background": True})
        foreground = asyncio.create_task(beta.post("/v1/responses", json={"input": "x"}))
        while sum((await queue.queued_by_tenant(["m"])).values()) < 4:
            await asyncio.sleep(0.01)

        alpha_label = tenant_label(f"project:{alpha_project}")
        beta_label = tenant_label(f"project:{beta_project}")
        expected: dict[tuple[str, str], float] = {}
        for key, count in (
            ((alpha_label, "background"), 2),
            ((beta_label, "background"), 1),
            ((beta_label, "interactive"), 1),
        ):
            expected[key] = expected.get(key, 0) + count
        seen = await gauge(client)
        assert {key: seen[key] for key in expected} == expected

        runner.gate.set()
        assert (await foreground).json()["status"] == "completed"
        while sum((await queue.queued_by_tenant(["m"])).values()):
            await asyncio.sleep(0.01)
        seen = await gauge(client)
        assert {key: seen[key] for key in expected} == dict.fromkeys(expected, 0.0)


def test_tenants_past_the_cap_are_summed_as_other_and_gone_ones_read_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "TENANT_LABELS", TenantLabels(limit=1))
    show_queued_by_tenant(
        {("project:first", "batch"): 2, ("project:second", "batch"): 3, ("project:third", "batch"): 1}
    )
    show_queued_by_tenant({("project:first", "batch"): 2, ("project:second", "background"): 4})

    def value(tenant: str, job_class: str) -> float | None:
        return REGISTRY.get_sample_value(GAUGE, {"tenant": tenant, "job_class": job_class})

    assert value("project:first", "batch") == 2
    assert value("other", "background") == 4
    assert value("other", "batch") == 0  # second's and third's batch jobs left
    assert value("project:second", "batch") is None  # never named: past the cap
    show_queued_by_tenant({})
    assert value("project:first", "batch") == value("other", "background") == 0
