"""Caches never cross tenants: each job carries its tenant (which scopes the engine's prefix reuse) and the
affinity keys that route jobs to the worker holding a prefix are scoped by it."""

from __future__ import annotations

import httpx

from app.generation.job import GenerationJob
from app.generation.types import SamplingParams
from app.tenants.identity import OPEN_TENANT
from app.testing.fakes import FakeRunner
from app.transport.redis_queue import affinity_owner_key


async def test_every_job_carries_its_tenant(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient], runner: FakeRunner
) -> None:
    alpha, beta = two_tenants
    same = {"input": "the same prompt", "prompt_cache_key": "shared", "max_output_tokens": 16}
    for client in (alpha, beta, alpha):
        assert (await client.post("/v1/responses", json=same)).status_code == 200
    # A compaction summary is a generation too: it carries the tenant of the request that asked for it.
    compacted = await beta.post("/v1/responses/compact", json={"model": "m", "input": "summarise me"})
    assert compacted.status_code == 200
    tenants = [job.tenant for job in runner.jobs]
    assert tenants[0] == tenants[2] != tenants[1] == tenants[3]
    assert all(tenant.startswith("key:") and "alpha" not in tenant for tenant in tenants), "never the key itself"
    # Both asked with the same prompt_cache_key; the key that routes them is not the same.
    first, second = runner.jobs[0], runner.jobs[1]
    assert first.affinity_key == second.affinity_key == "shared"
    assert affinity_owner_key(first.tenant, "m", "shared") != affinity_owner_key(second.tenant, "m", "shared")


async def test_an_open_server_is_one_tenant(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    for _ in range(2):
        assert (await client.post("/v1/responses", json={"input": "hi", "max_output_tokens": 16})).status_code == 200
    assert [job.tenant for job in runner.jobs] == [OPEN_TENANT, OPEN_TENANT]


def test_affinity_owner_keys_are_scoped_and_bounded() -> None:
    assert affinity_owner_key("key:a", "m", "k") == affinity_owner_key("key:a", "m", "k")
    assert affinity_owner_key("key:a", "m", "k") != affinity_owner_key("key:b", "m", "k")
    # A prefix is cached by the model that read it: another model's jobs never follow it.
    assert affinity_owner_key("key:a", "m", "k") != affinity_owner_key("key:a", "n", "k")
    # No way to make one tenant's key collide with another's by choosing the key's text.
    assert affinity_owner_key("key:a", "m", "b:k") != affinity_owner_key("key:a:b", "m", "k")
    assert affinity_owner_key("key:a", "m:b", "k") != affinity_owner_key("key:a", "m", "b:k")
    assert len(affinity_owner_key(OPEN_TENANT, "m", "x" * 100_000)) < 100


def test_a_job_queued_before_jobs_carried_a_tenant_shares_no_cache() -> None:
    sampling = SamplingParams(temperature=0.0, top_p=1.0, max_output_tokens=16)
    job = GenerationJob("resp_old", [1], sampling, response={}, store=True, keep_events=False, tenant="t")
    payload = job.to_payload()
    del payload["tenant"]
    assert GenerationJob.from_payload(payload).tenant == "job:resp_old"
