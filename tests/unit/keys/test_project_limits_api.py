"""A project's own limits through the API: an admin reads and sets them at /v1/projects/{id}/limits (400s that name
the field, 404 for an unknown project, 403 for any other key); a project with a lower limit gets its 429s and its
x-ratelimit-* headers while another project keeps the server's, for requests per minute, requests in flight and
queued background responses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.config import Settings
from app.limits.memory_store import MemoryBucketStore
from app.main import create_app
from app.runtime import Runtime
from app.tenants.identity import tenant_of_project
from app.testing.fakes import FakeClock, FakeRenderer, FakeRunner, fake_generation
from tests.protocol import assert_error

BOOT = {"authorization": "Bearer boot"}
#: What the server allows every tenant that sets nothing of its own.
SERVER_RPM = 10
SERVER_QUEUED = 1000


@pytest.fixture
async def app(tmp_path: Path, runner: FakeRunner) -> AsyncIterator[FastAPI]:
    """A keyed server whose key cache and limits cache read the database every time; jobs run one at a time."""
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'limits.db'}",
        model_id="m",
        api_keys="boot",
        key_cache_ttl_s=0,
        rate_limit_requests_per_min=SERVER_RPM,
        max_queued_background_per_tenant=SERVER_QUEUED,
        batch_interval_s=3600.0,
        _env_file=None,
    )
    application = create_app(settings, fake_generation(FakeRenderer(), runner, places=1))
    async with application.router.lifespan_context(application):
        runtime: Runtime = application.state.runtime
        runtime.limits.store = MemoryBucketStore(FakeClock())  # buckets that refill only when a test says so
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        yield http


async def make_key(client: httpx.AsyncClient, project: str, role: str = "member") -> tuple[str, dict[str, str]]:
    """A key of `project` (created if new): the project's id, and the key's headers."""
    reply = await client.post("/v1/keys", json={"project": project, "name": "k", "role": role}, headers=BOOT)
    assert reply.status_code == 200, reply.text
    created = reply.json()
    return created["project_id"], {"authorization": f"Bearer {created['value']}"}


async def set_limits(client: httpx.AsyncClient, project_id: str, **limits: Any) -> dict[str, Any]:
    reply = await client.post(f"/v1/projects/{project_id}/limits", json=limits, headers=BOOT)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def create(client: httpx.AsyncClient, headers: dict[str, str], **fields: Any) -> Any:
    return client.post("/v1/responses", json={"model": "m", "input": "Say hi.", **fields}, headers=headers)


async def test_an_admin_reads_sets_and_clears_a_projects_limits(client: httpx.AsyncClient) -> None:
    project_id, _ = await make_key(client, "small")
    read = await client.get(f"/v1/projects/{project_id}/limits", headers=BOOT)
    assert read.status_code == 200, read.text
    nothing_set = dict.fromkeys(
        ["requests_per_min", "tokens_per_min", "max_concurrent_requests", "max_queued_background", "max_stored_bytes"]
    )
    assert read.json() == {
        "object": "project.limits",
        "project_id": project_id,
        "project": "small",
        "overrides": nothing_set,
        "effective": {
            "requests_per_min": SERVER_RPM,
            "tokens_per_min": 0,
            "max_concurrent_requests": 64,
            "max_queued_background": SERVER_QUEUED,
            "max_stored_bytes": 0,
        },
    }
    changed = await set_limits(client, project_id, requests_per_min=2, tokens_per_min=0, max_stored_bytes=2**40)
    assert changed["overrides"] == {
        **nothing_set,
        "requests_per_min": 2,
        "tokens_per_min": 0,
        "max_stored_bytes": 2**40,
    }
    assert changed["effective"]["requests_per_min"] == 2 and changed["effective"]["tokens_per_min"] == 0
    # A field left out stays; null goes back to the server's setting.
    again = await set_limits(client, project_id, requests_per_min=None, max_concurrent_requests=3)
    assert again["overrides"] == {
        **nothing_set,
        "tokens_per_min": 0,
        "max_stored_bytes": 2**40,
        "max_concurrent_requests": 3,
    }
    assert again["effective"]["requests_per_min"] == SERVER_RPM
    assert (await client.get(f"/v1/projects/{project_id}/limits", headers=BOOT)).json() == again


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"requests_per_min": -1}, "requests_per_min"),
        ({"tokens_per_min": 2**31}, "tokens_per_min"),
        ({"max_concurrent_requests": True}, "max_concurrent_requests"),
        ({"max_queued_background": 1.5}, "max_queued_background"),
        ({"max_stored_bytes": "big"}, "max_stored_bytes"),
        ({"max_websockets": 2}, "max_websockets"),
    ],
)
async def test_a_bad_limit_is_a_400_naming_it(client: httpx.AsyncClient, body: dict[str, Any], param: str) -> None:
    project_id, _ = await make_key(client, "p")
    reply = await client.post(f"/v1/projects/{project_id}/limits", json=body, headers=BOOT)
    assert_error(reply, 400, param=param)
    unchanged = (await client.get(f"/v1/projects/{project_id}/limits", headers=BOOT)).json()
    assert set(unchanged["overrides"].values()) == {None}


async def test_an_unknown_project_is_a_404(client: httpx.AsyncClient) -> None:
    assert_error(await client.get("/v1/projects/proj_nope/limits", headers=BOOT), 404, param="project_id")
    reply = await client.post("/v1/projects/proj_nope/limits", json={"requests_per_min": 1}, headers=BOOT)
    assert_error(reply, 404, param="project_id")


async def test_only_an_admin_key_reads_or_sets_limits(client: httpx.AsyncClient) -> None:
    project_id, member = await make_key(client, "p")
    _, admin = await make_key(client, "ops", role="admin")
    for headers in (member, {"authorization": "Bearer sk-lr-wrong"}):
        read = await client.get(f"/v1/projects/{project_id}/limits", headers=headers)
        assert read.status_code in (401, 403)
        written = await client.post(f"/v1/projects/{project_id}/limits", json={"requests_per_min": 0}, headers=headers)
        assert written.status_code == read.status_code
    assert_error(await client.get(f"/v1/projects/{project_id}/limits", headers=member), 403, param=None)
    # A database admin key may (not only a bootstrap one).
    assert (await client.post(f"/v1/projects/{project_id}/limits", json={}, headers=admin)).status_code == 200


async def test_a_project_with_a_lower_rpm_gets_its_429_while_another_keeps_the_servers(
    client: httpx.AsyncClient,
) -> None:
    small_id, small = await make_key(client, "small")
    _, big = await make_key(client, "big")
    await set_limits(client, small_id, requests_per_min=2)

    answers = [await create(client, small) for _ in range(2)]
    assert [answer.status_code for answer in answers] == [200, 200]
    assert [answer.headers["x-ratelimit-limit-requests"] for answer in answers] == ["2", "2"]
    assert [answer.headers["x-ratelimit-remaining-requests"] for answer in answers] == ["1", "0"]
    refused = await create(client, small)
    error = assert_error(refused, 429, param=None, code="rate_limit_exceeded")
    assert "Limit 2, Used 2, Requested 1" in error["message"]
    assert refused.headers["x-ratelimit-limit-requests"] == "2"
    # A read shows the project's limit too.
    assert (await client.get("/v1/responses", headers=small)).headers["x-ratelimit-limit-requests"] == "2"

    for expected_left in (SERVER_RPM - 1, SERVER_RPM - 2, SERVER_RPM - 3):
        answer = await create(client, big)
        assert answer.status_code == 200
        assert answer.headers["x-ratelimit-limit-requests"] == str(SERVER_RPM)
        assert answer.headers["x-ratelimit-remaining-requests"] == str(expected_left)

    # 0 turns the project's limit off though the server has one: no bucket, no headers.
    await set_limits(client, small_id, requests_per_min=0)
    freed = await create(client, small)
    assert freed.status_code == 200
    assert "x-ratelimit-limit-requests" not in freed.headers


async def test_a_projects_tokens_per_min_refuses_a_prompt_the_server_would_take(client: httpx.AsyncClient) -> None:
    small_id, small = await make_key(client, "small")
    _, big = await make_key(client, "big")
    await set_limits(client, small_id, tokens_per_min=3)
    refused = await create(client, small, input="far more words than three tokens hold")
    error = assert_error(refused, 429, param=None, code="rate_limit_exceeded")
    assert "Limit 3" in error["message"] and refused.headers["x-should-retry"] == "false"
    assert (await create(client, big, input="far more words than three tokens hold")).status_code == 200


async def test_a_projects_concurrency_cap_is_its_own(client: httpx.AsyncClient, app: FastAPI) -> None:
    runtime: Runtime = app.state.runtime
    small_id, small = await make_key(client, "small")
    big_id, big = await make_key(client, "big")
    await set_limits(client, small_id, max_concurrent_requests=1)
    # Each project has one request in flight already (held here as a slow request would).
    runtime.slots.acquire(tenant_of_project(small_id))
    runtime.slots.acquire(tenant_of_project(big_id))
    try:
        refused = await client.get("/v1/models", headers=small)
        error = assert_error(refused, 429, param=None, code="rate_limit_exceeded")
        assert "at most 1 at once" in error["message"] and refused.headers["retry-after"] == "1"
        assert (await client.get("/v1/models", headers=big)).status_code == 200  # the server's 64
    finally:
        runtime.slots.release(tenant_of_project(small_id))
        runtime.slots.release(tenant_of_project(big_id))
    assert (await client.get("/v1/models", headers=small)).status_code == 200


async def test_a_projects_queued_background_cap_is_its_own(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    small_id, small = await make_key(client, "small")
    _, big = await make_key(client, "big")
    await set_limits(client, small_id, max_queued_background=1)
    runner.delay_s = 60.0  # the first job holds the one place until the test cancels it
    running = (await create(client, big, background=True)).json()["id"]
    while not runner.jobs:
        await asyncio.sleep(0.01)
    queued = await create(client, small, background=True)
    assert queued.json()["status"] == "queued"
    refused = await create(client, small, background=True)
    error = assert_error(refused, 429, param=None, code="rate_limit_exceeded")
    assert "at most 1 queued" in error["message"] and refused.headers["retry-after"] == "10"
    others = [await create(client, big, background=True) for _ in range(2)]  # the server's cap: room
    assert [other.json()["status"] for other in others] == ["queued", "queued"]
    for response_id, headers in [
        (running, big),
        (queued.json()["id"], small),
        *[(other.json()["id"], big) for other in others],
    ]:
        assert (await client.post(f"/v1/responses/{response_id}/cancel", headers=headers)).status_code == 200
