"""Delivery of webhook events to a real receiver on loopback (allowed by the setting), verified with the openai
SDK's `client.webhooks.unwrap`: what background responses send and when, signatures through a rotation, retries
under one webhook-id until a receiver that was down comes back, claims that never let two processes send one
attempt, the outbox committed with the final state or not at all, disabling, and the deliveries list."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta

import httpx
import openai
import pytest
from openai.types.webhooks import WebhookEndpointTestResult
from sqlalchemy import func, select

from app.db.base import utc_now
from app.db.models import WebhookDeliveryRow, WebhookEndpointRow
from app.db.session import Database
from app.jobs import repository as jobs
from app.lifecycle import transitions
from app.observability.metrics import REGISTRY
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT
from app.testing.fakes import FakeRunner
from app.testing.receiver import ReceivedRequest, Receiver, free_port, running_receiver
from app.webhooks import repository
from app.webhooks.delivery import DeliveryPolicy, WebhookDeliverer
from app.webhooks.outbox import record_event
from tests.unit.responses.test_background import poll_until_done

pytestmark = pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*", webhook_delivery_interval_s=3600)

#: Retries at once (the tests run rounds by hand), within a long window.
AT_ONCE = DeliveryPolicy(retry_window_s=3600, first_retry_s=0.0)
SDK = openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")


def deliverer(runtime: Runtime, policy: DeliveryPolicy = AT_ONCE, database: Database | None = None) -> WebhookDeliverer:
    return WebhookDeliverer(database or runtime.database, runtime.sealer, runtime.settings, policy)


def unwrap(request: ReceivedRequest, secret: str) -> object:
    return SDK.webhooks.unwrap(request.body, request.headers, secret=secret)


async def endpoint(client: httpx.AsyncClient, url: str, *types: str) -> dict:
    body = {"name": "receiver", "url": url, "event_types": list(types or ["response.completed"])}
    reply = await client.post("/v1/webhook_endpoints", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def background_response(client: httpx.AsyncClient) -> dict:
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    return await poll_until_done(client, created["id"])


async def stored(runtime: Runtime) -> list[WebhookDeliveryRow]:
    async with runtime.database.read() as session:
        query = select(WebhookDeliveryRow).order_by(WebhookDeliveryRow.created_at)
        return list((await session.execute(query)).scalars())


async def wait_for(receiver: Receiver, count: int, timeout_s: float = 10) -> Sequence[ReceivedRequest]:
    deadline = time.monotonic() + timeout_s
    while len(receiver.requests) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return receiver.requests


async def settled(runtime: Runtime, timeout_s: float = 10) -> list[WebhookDeliveryRow]:
    """The deliveries once none is pending: the delivery loop writes a delivery's end after its receiver answered,
    so a test that saw the request may read the row before it."""
    deadline = time.monotonic() + timeout_s
    rows = await stored(runtime)
    while any(row.status == "pending" for row in rows) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        rows = await stored(runtime)
    return rows


def counter(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


@pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*", webhook_delivery_interval_s=0.05)
async def test_a_background_response_is_delivered_and_verifies_with_the_sdk(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """The API node's own delivery loop (no round by hand): one signed event, the SDK's unwrap accepts it."""
    with running_receiver() as receiver:
        made = await endpoint(client, receiver.url, "response.completed", "response.failed")
        foreground = (await client.post("/v1/responses", json={"input": "hi"})).json()
        assert foreground["status"] == "completed"
        done = await background_response(client)
        assert done["status"] == "completed"
        [request] = await wait_for(receiver, 1)
    event = unwrap(request, made["signing_secret"])
    assert type(event).__name__ == "ResponseCompletedWebhookEvent"
    assert event.type == "response.completed" and event.data.id == done["id"]  # type: ignore[attr-defined]
    assert event.object == "event" and event.id.startswith("evt_")  # type: ignore[attr-defined]
    assert abs(event.created_at - time.time()) < 60  # type: ignore[attr-defined]
    assert request.path == "/hook" and request.headers["content-type"] == "application/json"
    # The foreground response sent nothing: one delivery in all.
    [row] = await settled(app_runtime)
    assert request.headers["webhook-id"] == row.id and row.object_id == done["id"]

    listed = (await client.get(f"/v1/webhook_endpoints/{made['id']}/deliveries")).json()
    assert listed["object"] == "list" and listed["has_more"] is False
    [delivery] = listed["data"]
    assert delivery["id"] == row.id and delivery["status"] == "delivered" and delivery["attempts"] == 1
    assert delivery["event_type"] == "response.completed" and delivery["data"] == {"id": done["id"]}
    assert delivery["last_status_code"] == 200 and delivery["last_error"] is None
    assert "last_response_excerpt" not in delivery  # what a receiver answers is never shown back
    assert delivery["delivered_at"] is not None and delivery["next_attempt_at"] is None


async def test_signatures_through_a_rotation(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    """Kept active, the old secret signs beside the new one for the grace period; not kept, it stops at once."""
    with running_receiver() as receiver:
        made = await endpoint(client, receiver.url)
        old = made["signing_secret"]
        rotate = f"/v1/webhook_endpoints/{made['id']}/rotate_secret"
        new = (await client.post(rotate, json={"keep_old_secret_active_for_24_hours": True})).json()["signing_secret"]
        await background_response(client)
        await deliverer(app_runtime).run_round()
        [during] = await wait_for(receiver, 1)
        assert len(during.headers["webhook-signature"].split()) == 2
        for secret in (old, new):
            assert unwrap(during, secret).type == "response.completed"  # type: ignore[attr-defined]

        newest = (await client.post(rotate, json={})).json()["signing_secret"]
        tested = await client.post(f"/v1/webhook_endpoints/{made['id']}/test", json={"event_type": "batch.failed"})
        WebhookEndpointTestResult.model_validate(tested.json())
        assert tested.json() == {
            "object": "webhook_endpoint.test",
            "webhook_endpoint_id": made["id"],
            "event_type": "batch.failed",
            "status_code": 200,
            "success": True,
        }
        after = receiver.requests[-1]
    assert len(after.headers["webhook-signature"].split()) == 1
    assert unwrap(after, newest).type == "batch.failed"  # type: ignore[attr-defined]
    for stale in (old, new):
        with pytest.raises(openai.InvalidWebhookSignatureError):
            unwrap(after, stale)


@pytest.mark.settings(
    outbound_allowed_hosts="127.0.0.1:*", webhook_delivery_interval_s=3600, webhook_secret_grace_s=0.5
)
async def test_the_old_secret_stops_signing_after_the_grace_period(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    with running_receiver() as receiver:
        made = await endpoint(client, receiver.url)
        rotate = f"/v1/webhook_endpoints/{made['id']}/rotate_secret"
        new = (await client.post(rotate, json={"keep_old_secret_active_for_24_hours": True})).json()["signing_secret"]
        await asyncio.sleep(0.6)
        await client.post(f"/v1/webhook_endpoints/{made['id']}/test", json={"event_type": "response.failed"})
    [request] = receiver.requests
    assert unwrap(request, new).type == "response.failed"  # type: ignore[attr-defined]
    with pytest.raises(openai.InvalidWebhookSignatureError):
        unwrap(request, made["signing_secret"])


async def test_a_receiver_that_was_down_gets_the_event_under_one_webhook_id(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    port = free_port()
    made = await endpoint(client, f"http://127.0.0.1:{port}/hook")
    done = await background_response(client)
    retries, delivered = (
        counter("llama_responses_webhook_retries_total"),
        counter("llama_responses_webhook_deliveries_delivered_total"),
    )
    sender = deliverer(app_runtime)
    assert await sender.run_round() == 1  # nobody listens
    [row] = await stored(app_runtime)
    assert row.status == "pending" and row.attempts == 1 and "ConnectError" in (row.last_error or "")
    with running_receiver(port) as receiver:
        receiver.status, receiver.body = 503, b"busy " * 100
        assert await sender.run_round() == 1
        [row] = await stored(app_runtime)
        assert row.status == "pending" and row.last_status_code == 503
        assert row.last_error == "The endpoint answered HTTP 503 (Service Unavailable)."
        receiver.status, receiver.body = 204, b""
        assert await sender.run_round() == 1
        assert await sender.run_round() == 0  # delivered: nothing left to send
    [row] = await stored(app_runtime)
    assert row.status == "delivered" and row.attempts == 3 and row.last_status_code == 204
    assert len(receiver.requests) == 2
    assert {request.headers["webhook-id"] for request in receiver.requests} == {row.id}
    assert {request.body for request in receiver.requests} == {row.body.encode()}
    for request in receiver.requests:
        event = unwrap(request, made["signing_secret"])
        assert event.data.id == done["id"]  # type: ignore[attr-defined]
    assert counter("llama_responses_webhook_retries_total") - retries == 2
    assert counter("llama_responses_webhook_deliveries_delivered_total") - delivered == 1


async def test_the_event_commits_with_the_final_state_or_not_at_all(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    """An end rolled back leaves no event; the end that commits writes exactly one."""
    await endpoint(client, "https://example.com/hook", "response.completed", "response.failed")
    runner.delay_s = 0.2
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    while (await client.get(f"/v1/responses/{created['id']}")).json()["status"] != "in_progress":
        await asyncio.sleep(0.02)
    with pytest.raises(RuntimeError, match="rolled back"):
        async with app_runtime.database.transaction() as session:
            await jobs.expire_leases(session)
            failed = {"status": "failed", "error": {"code": "server_error", "message": "x"}}
            assert await transitions.end_unheld(session, created["id"], values=failed)
            count = select(func.count()).select_from(WebhookDeliveryRow)
            assert (await session.execute(count)).scalar_one() == 1
            raise RuntimeError("rolled back")
    assert await stored(app_runtime) == []
    assert (await poll_until_done(client, created["id"]))["status"] == "completed"
    [row] = await stored(app_runtime)
    assert row.event_type == "response.completed" and row.object_id == created["id"]


async def test_cancelled_and_failed_background_responses_send_their_events(
    client: httpx.AsyncClient, app_runtime: Runtime, runner: FakeRunner
) -> None:
    await endpoint(client, "https://example.com/hook", "response.cancelled", "response.failed")
    runner.delay_s = 0.3
    created = (await client.post("/v1/responses", json={"input": "hi", "background": True})).json()
    cancelled = (await client.post(f"/v1/responses/{created['id']}/cancel")).json()
    assert cancelled["status"] == "cancelled"
    runner.delay_s, runner.fail_after = 0.0, 1
    failed = await background_response(client)
    assert failed["status"] == "failed"
    rows = await stored(app_runtime)
    assert [(row.event_type, row.object_id) for row in rows] == [
        ("response.cancelled", created["id"]),
        ("response.failed", failed["id"]),
    ]
    # A type the endpoint did not subscribe to sends nothing.
    runner.fail_after = None
    await background_response(client)
    assert len(await stored(app_runtime)) == 2


async def test_two_claimers_never_take_one_attempt(
    client: httpx.AsyncClient, app_runtime: Runtime, settings: object
) -> None:
    made = await endpoint(client, "https://example.com/hook", "batch.completed")
    async with app_runtime.database.transaction() as session:
        for index in range(40):
            await record_event(session, tenant=OPEN_TENANT, event_type="batch.completed", object_id=f"batch_{index}")
    rows = await stored(app_runtime)
    assert len(rows) == 40 and {row.endpoint_id for row in rows} == {made["id"]}
    other = Database.connect(app_runtime.settings.database_url)  # a second process's connections
    try:

        async def claim(database: Database, token: str) -> set[str]:
            async with database.transaction() as session:
                due = await repository.due_fairly(session, bounds=repository.ClaimBounds(25, 25, 25))
                claimed = await repository.claim(session, [found[0] for found in due], token=token, claim_s=60)
            return {row.id for row in claimed}

        first, second = await asyncio.gather(claim(app_runtime.database, "one"), claim(other, "two"))
        assert first and not first & second and len(first | second) <= 40
        assert not await claim(app_runtime.database, "late") & (first | second)
    finally:
        await other.dispose()


async def test_two_processes_delivering_at_once_send_each_event_once(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    with running_receiver() as receiver:
        made = await endpoint(client, receiver.url, "batch.completed")
        async with app_runtime.database.transaction() as session:
            for index in range(30):
                await record_event(
                    session, tenant=OPEN_TENANT, event_type="batch.completed", object_id=f"batch_{index}"
                )
        other = Database.connect(app_runtime.settings.database_url)
        try:
            senders = [deliverer(app_runtime), deliverer(app_runtime, database=other)]
            while any(row.status == "pending" for row in await stored(app_runtime)):
                await asyncio.gather(*(sender.run_round() for sender in senders))
        finally:
            await other.dispose()
    ids = [request.headers["webhook-id"] for request in receiver.requests]
    assert len(ids) == 30 and len(set(ids)) == 30
    assert {unwrap(request, made["signing_secret"]).data.id for request in receiver.requests} == {  # type: ignore[attr-defined]
        f"batch_{index}" for index in range(30)
    }


async def test_a_name_resolving_to_a_private_address_is_a_failed_attempt(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """127.0.0.1 is allowed here by address; a name that resolves there is checked at delivery, and refused
    when the operator did not allow the address (a fresh deliverer with no allowed hosts)."""
    with running_receiver() as receiver:
        made = await endpoint(client, f"http://localhost:{receiver.port}/hook", "batch.completed")
        async with app_runtime.database.transaction() as session:
            await record_event(session, tenant=OPEN_TENANT, event_type="batch.completed", object_id="batch_1")
        strict = WebhookDeliverer(
            app_runtime.database,
            app_runtime.sealer,
            app_runtime.settings.model_copy(update={"outbound_allowed_hosts": ""}),
            AT_ONCE,
        )
        await strict.run_round()
    assert receiver.requests == []
    [row] = await stored(app_runtime)
    assert row.status == "pending" and "not public" in (row.last_error or "") and row.last_status_code is None
    listed = (await client.get(f"/v1/webhook_endpoints/{made['id']}/deliveries")).json()
    assert "resolves to" in listed["data"][0]["last_error"]


async def test_an_endpoint_failing_for_the_whole_window_is_disabled(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    failed_before = counter("llama_responses_webhook_deliveries_failed_total")
    with running_receiver() as receiver:
        receiver.status = 500
        made = await endpoint(client, receiver.url, "batch.completed")
        async with app_runtime.database.transaction() as session:
            await record_event(session, tenant=OPEN_TENANT, event_type="batch.completed", object_id="batch_1")
            await record_event(session, tenant=OPEN_TENANT, event_type="batch.completed", object_id="batch_2")
        sender = deliverer(app_runtime)
        await sender.run_round()
        assert (await client.get(f"/v1/webhook_endpoints/{made['id']}")).json()["status"] == "enabled"
        # The window (an hour) passes: the events and the endpoint's failing streak are made older than it, rather
        # than slept through (a short window raced the rounds' own time on a loaded machine).
        past = timedelta(seconds=AT_ONCE.retry_window_s + 60)
        async with app_runtime.database.transaction() as session:
            for row in await session.scalars(select(WebhookDeliveryRow)):
                row.created_at -= past
                row.next_attempt_at = utc_now()
            endpoint_row = await session.get(WebhookEndpointRow, made["id"])
            assert endpoint_row is not None and endpoint_row.failing_since is not None
            endpoint_row.failing_since -= past
        await sender.run_round()
    assert (await client.get(f"/v1/webhook_endpoints/{made['id']}")).json()["status"] == "disabled"
    assert {row.status for row in await stored(app_runtime)} == {"failed"}
    assert counter("llama_responses_webhook_deliveries_failed_total") - failed_before == 2
    # A disabled endpoint gets no new events until it is enabled again (our extension).
    async with app_runtime.database.transaction() as session:
        assert await record_event(session, tenant=OPEN_TENANT, event_type="batch.completed", object_id="b") == []
    enabled = (await client.post(f"/v1/webhook_endpoints/{made['id']}", json={"status": "enabled"})).json()
    assert enabled["status"] == "enabled"
    async with app_runtime.database.read() as session:
        assert (await session.get(WebhookEndpointRow, made["id"])).failing_since is None  # type: ignore[union-attr]


async def test_deliveries_page_and_belong_to_their_endpoint(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alpha, beta = two_tenants
    made = await endpoint(alpha, "https://example.com/hook", "response.completed")
    ids = []
    for _ in range(3):
        done = await background_response(alpha)
        ids.append(done["id"])
    await background_response(beta)  # beta has no endpoint: nothing for alpha's
    path = f"/v1/webhook_endpoints/{made['id']}/deliveries"
    first = (await alpha.get(path, params={"limit": 2})).json()
    assert [entry["data"]["id"] for entry in first["data"]] == ids[::-1][:2] and first["has_more"] is True
    rest = (await alpha.get(path, params={"limit": 2, "after": first["last_id"]})).json()
    assert [entry["data"]["id"] for entry in rest["data"]] == [ids[0]] and rest["has_more"] is False
    assert {entry["status"] for entry in first["data"]} == {"pending"}
    assert (await beta.get(path)).status_code == 404


async def test_an_attempt_whose_process_died_is_made_again_and_the_late_writer_is_fenced(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """A process claims a delivery and dies mid-attempt: once its claim runs out another process sends it (at
    least once, the same webhook-id); the dead claim's outcome, written late, changes nothing."""
    with running_receiver() as receiver:
        made = await endpoint(client, receiver.url, "batch.completed")
        async with app_runtime.database.transaction() as session:
            [delivery_id] = await record_event(
                session, tenant=OPEN_TENANT, event_type="batch.completed", object_id="batch_1"
            )
        async with app_runtime.database.transaction() as session:
            due = await repository.due_fairly(session, bounds=repository.ClaimBounds(10, 10, 10))
            [claimed] = await repository.claim(session, [found[0] for found in due], token="dead", claim_s=0.3)
        survivor = deliverer(app_runtime)
        assert await survivor.run_round() == 0  # still claimed by the dead process
        await asyncio.sleep(0.35)
        assert await survivor.run_round() == 1
        [request] = receiver.requests
    assert request.headers["webhook-id"] == claimed.id == delivery_id
    assert unwrap(request, made["signing_secret"]).data.id == "batch_1"  # type: ignore[attr-defined]
    async with app_runtime.database.transaction() as session:
        late = {"status": "failed", "last_error": "written by the dead claim"}
        assert not await repository.finish_attempt(session, delivery_id, token="dead", values=late)
    [row] = await stored(app_runtime)
    assert row.status == "delivered" and row.attempts == 2 and row.last_error is None


@pytest.mark.settings(outbound_allowed_hosts="127.0.0.1:*", webhook_delivery_interval_s=3600, webhook_timeout_s=0.5)
async def test_the_attempt_timeout_and_the_claim_follow_the_setting(
    client: httpx.AsyncClient, app_runtime: Runtime
) -> None:
    """RESPONSES_WEBHOOK_TIMEOUT_S: a receiver that holds the request open fails the attempt after it (not after
    the default 10 s), and a claim lasts six of it."""
    policy = DeliveryPolicy.from_settings(app_runtime.settings)
    assert (policy.timeout_s, policy.claim_s) == (0.5, 3.0)
    with running_receiver() as receiver:
        receiver.hold_next = 1
        await endpoint(client, receiver.url, "batch.completed")
        async with app_runtime.database.transaction() as session:
            await record_event(session, tenant=OPEN_TENANT, event_type="batch.completed", object_id="batch_1")
        started = time.monotonic()
        assert await deliverer(app_runtime, policy).run_round() == 1
        took_s = time.monotonic() - started
    assert 0.4 < took_s < 5, took_s
    [row] = await stored(app_runtime)
    assert row.status == "pending" and row.attempts == 1 and row.last_status_code is None
    assert row.last_error == "No answer within 0.5 s.", row.last_error
    assert row.next_attempt_at is not None
