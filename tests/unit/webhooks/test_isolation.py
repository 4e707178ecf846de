"""What one tenant's webhooks cannot take from the others: receivers that never answer hold only their own tenant's
delivery slots (another tenant's delivery goes out while they hang), a cap on endpoints per project, endpoints
charged to the stored-bytes quota, tests of an endpoint limited per tenant, and URLs with control characters
refused. No timing is asserted: what is checked is what happened while the hanging requests were still held."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from app.testing.receiver import Receiver, running_receiver
from tests.protocol import assert_error
from tests.unit.responses.test_background import poll_until_done

#: The hanging tenant's endpoints: more than one round of the old delivery loop (16) took, all older than the
#: other tenant's delivery.
HANGING_ENDPOINTS = 18


@pytest.fixture
async def tenants(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[tuple[httpx.AsyncClient, ...]]:
    """Two tenants (keys `alpha` and `beta`) of one app, whose delivery loop runs on its own every 50 ms;
    `@pytest.mark.settings(...)` overrides settings."""
    marker = request.node.get_closest_marker("settings")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'hooks.db'}",
        model_id="m",
        api_keys="alpha,beta",
        outbound_allowed_hosts="127.0.0.1:*",
        webhook_delivery_interval_s=0.05,
        batch_interval_s=3600,
        _env_file=None,
        **(marker.kwargs if marker else {}),
    )
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer alpha"}) as a,
            httpx.AsyncClient(transport=transport, base_url="http://t", headers={"authorization": "Bearer beta"}) as b,
        ):
            yield a, b


async def make_endpoint(client: httpx.AsyncClient, url: str, name: str = "hook") -> httpx.Response:
    return await client.post(
        "/v1/webhook_endpoints", json={"name": name, "url": url, "event_types": ["response.completed"]}
    )


async def finished_background_response(client: httpx.AsyncClient) -> dict:
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    done = await poll_until_done(client, created["id"])
    assert done["status"] == "completed", done
    return done


async def held_requests(receiver: Receiver, count: int, timeout_s: float = 20) -> int:
    deadline = time.monotonic() + timeout_s
    while len(receiver.requests) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return len(receiver.requests)


@pytest.mark.settings(
    webhook_max_endpoints_per_tenant=0,
    webhook_max_in_flight_per_tenant=4,
    webhook_timeout_s=60,
)
async def test_a_tenants_hanging_receivers_hold_only_its_own_slots(tenants: tuple[httpx.AsyncClient, ...]) -> None:
    """Alpha's 18 endpoints point at a receiver that holds every request open; its event is older than beta's.
    Beta's delivery arrives while alpha's requests are still held (before: a round waited for all 16 it took, so
    beta's waited a whole attempt timeout), and alpha never has more than its 4 slots in flight."""
    alpha, beta = tenants
    with running_receiver() as hanging, running_receiver() as answering:
        hanging.hold_next, hanging.hold_s = 10_000, 120
        try:
            for index in range(HANGING_ENDPOINTS):
                assert (await make_endpoint(alpha, hanging.url, f"hang-{index}")).status_code == 200
            assert (await make_endpoint(beta, answering.url)).status_code == 200
            await finished_background_response(alpha)
            assert await held_requests(hanging, 4) == 4
            done = await finished_background_response(beta)
            assert await held_requests(answering, 1) == 1, "beta's delivery waited behind alpha's hanging receivers"
            assert not hanging.released.is_set() and len(hanging.requests) == 4  # alpha's 4 slots, all still held
        finally:
            hanging.released.set()
    assert answering.requests[0].body.count(done["id"].encode()) == 1


@pytest.mark.settings(webhook_max_endpoints_per_tenant=2)
async def test_a_project_has_at_most_the_endpoints_the_setting_allows(tenants: tuple[httpx.AsyncClient, ...]) -> None:
    alpha, beta = tenants
    made = [(await make_endpoint(alpha, "https://example.com/hook")).json() for _ in range(2)]
    refused = await make_endpoint(alpha, "https://example.com/hook")
    assert_error(refused, 400, param=None, code="webhook_endpoint_limit_reached")
    assert "2 webhook endpoints" in refused.json()["error"]["message"]
    assert (await make_endpoint(beta, "https://example.com/hook")).status_code == 200  # per project
    listed = (await alpha.get("/v1/webhook_endpoints")).json()["data"]
    assert len(listed) == 2, "the refused create left no row behind"
    await alpha.delete(f"/v1/webhook_endpoints/{made[0]['id']}")
    assert (await make_endpoint(alpha, "https://example.com/hook")).status_code == 200


@pytest.mark.settings(max_stored_bytes_per_tenant=3000, webhook_max_endpoints_per_tenant=0)
async def test_endpoints_are_charged_to_the_stored_bytes_quota(tenants: tuple[httpx.AsyncClient, ...]) -> None:
    """Before, endpoints were never charged: 30 created over the quota. An endpoint's row is some 300 bytes (its
    sealed secret most of it); the quota of 3,000 takes a few, then a 429 `insufficient_quota`."""
    alpha, beta = tenants
    replies = [await make_endpoint(alpha, "https://example.com/hook", "x" * 200) for _ in range(30)]
    created = [reply for reply in replies if reply.status_code == 200]
    assert 1 <= len(created) < 30
    assert_error(replies[len(created)], 429, param=None, code="insufficient_quota")
    assert {reply.status_code for reply in replies[len(created) :]} == {429}
    assert len((await alpha.get("/v1/webhook_endpoints")).json()["data"]) == len(created)
    usage = (await alpha.get("/v1/usage/storage")).json()
    assert usage["stored_bytes"] >= sum(len(reply.text) for reply in created) // 2
    assert (await make_endpoint(beta, "https://example.com/hook")).status_code == 200  # the other tenant's own
    # An update that stores more is charged too.
    grown = await alpha.post(
        f"/v1/webhook_endpoints/{created[0].json()['id']}", json={"url": "https://example.com/" + "y" * 2000}
    )
    assert_error(grown, 429, param=None, code="insufficient_quota")


@pytest.mark.settings(webhook_tests_per_tenant=1, webhook_timeout_s=60)
async def test_tests_of_an_endpoint_wait_on_receivers_a_few_at_a_time(tenants: tuple[httpx.AsyncClient, ...]) -> None:
    """Before, 20 concurrent tests to a receiver that never answers each held a request for the whole timeout."""
    alpha, beta = tenants
    with running_receiver() as hanging:
        hanging.hold_next, hanging.hold_s = 100, 120
        try:
            made = (await make_endpoint(alpha, hanging.url)).json()
            other = (await make_endpoint(beta, hanging.url)).json()
            path = f"/v1/webhook_endpoints/{made['id']}/test"
            first = asyncio.create_task(alpha.post(path, json={"event_type": "response.completed"}))
            assert await held_requests(hanging, 1) == 1
            second = await alpha.post(path, json={"event_type": "response.completed"})
            assert_error(second, 429, param=None, code="rate_limit_exceeded")
            assert "webhook endpoint tests" in second.json()["error"]["message"]
            # Another tenant's test is not refused for alpha's.
            beta_test = asyncio.create_task(
                beta.post(f"/v1/webhook_endpoints/{other['id']}/test", json={"event_type": "response.completed"})
            )
            assert await held_requests(hanging, 2) == 2
        finally:
            hanging.released.set()
        assert (await first).status_code == 200 and (await beta_test).status_code == 200
        # The slot is given back once a test has its answer.
        third = await alpha.post(path, json={"event_type": "response.completed"})
        assert third.status_code == 200, third.text


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hook\r\nX-Injected: 1",
        "https://example.com/a\nb",
        "https://example.com/\x00",
        "https://ex\tample.com/",
    ],
)
async def test_urls_with_control_characters_are_refused_naming_the_field(
    tenants: tuple[httpx.AsyncClient, ...], url: str
) -> None:
    """Before, a URL with CR/LF was stored and echoed raw."""
    alpha, _ = tenants
    assert_error(await make_endpoint(alpha, url), 400, param="url", code="invalid_url")
    made = (await make_endpoint(alpha, "https://example.com/hook")).json()
    updated = await alpha.post(f"/v1/webhook_endpoints/{made['id']}", json={"url": url})
    assert_error(updated, 400, param="url", code="invalid_url")
    assert "control characters" in updated.json()["error"]["message"]
    assert [row["url"] for row in (await alpha.get("/v1/webhook_endpoints")).json()["data"]] == [made["url"]]
