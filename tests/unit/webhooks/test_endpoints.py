"""Webhook endpoints in the SDK's shapes: CRUD, paging, tenants kept apart, the secret shown once and stored sealed,
rotation, the event types, and bad input as OpenAI-shaped 400s and 404s."""

from __future__ import annotations

import httpx
import pytest
from openai.types.webhooks import (
    DeletedWebhookEndpoint,
    WebhookEndpoint,
    WebhookEndpointWithSecret,
    WebhookEventTypeList,
)
from sqlalchemy import select

from app.db.models import WebhookEndpointRow
from app.runtime import Runtime
from app.webhooks.delivery import SECRET_PURPOSE
from app.webhooks.event_types import EVENT_TYPES
from tests.protocol import assert_error

ENDPOINT_FIELDS = {"id", "object", "created_at", "updated_at", "event_types", "name", "url", "signing_secret_hint"}


async def create(client: httpx.AsyncClient, **overrides: object) -> dict:
    body = {"name": "hook", "url": "https://example.com/hook", "event_types": ["response.completed"], **overrides}
    reply = await client.post("/v1/webhook_endpoints", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def check_shape(endpoint: dict, *, with_secret: bool) -> None:
    assert set(endpoint) >= ENDPOINT_FIELDS and endpoint["object"] == "webhook_endpoint"
    assert ("signing_secret" in endpoint) is with_secret
    (WebhookEndpointWithSecret if with_secret else WebhookEndpoint).model_validate(endpoint)


async def test_crud_in_the_sdk_shapes(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    made = await create(client, event_types=["response.completed", "response.failed", "response.completed"])
    check_shape(made, with_secret=True)
    assert made["id"].startswith("we_") and made["event_types"] == ["response.completed", "response.failed"]
    assert made["signing_secret"].startswith("whsec_") and made["status"] == "enabled"
    assert made["signing_secret_hint"].endswith(made["signing_secret"][-4:])
    assert made["signing_secret"] not in made["signing_secret_hint"]

    got = (await client.get(f"/v1/webhook_endpoints/{made['id']}")).json()
    check_shape(got, with_secret=False)
    assert got == {key: value for key, value in made.items() if key != "signing_secret"}

    updated = (
        await client.post(
            f"/v1/webhook_endpoints/{made['id']}", json={"name": "renamed", "event_types": ["batch.completed"]}
        )
    ).json()
    check_shape(updated, with_secret=False)
    assert updated["name"] == "renamed" and updated["event_types"] == ["batch.completed"]
    assert updated["url"] == made["url"] and updated["updated_at"] >= made["updated_at"]

    deleted = (await client.delete(f"/v1/webhook_endpoints/{made['id']}")).json()
    assert deleted == {"id": made["id"], "object": "webhook_endpoint.deleted", "deleted": True}
    DeletedWebhookEndpoint.model_validate(deleted)
    for reply in (
        await client.get(f"/v1/webhook_endpoints/{made['id']}"),
        await client.post(f"/v1/webhook_endpoints/{made['id']}", json={"name": "x"}),
        await client.delete(f"/v1/webhook_endpoints/{made['id']}"),
        await client.post(f"/v1/webhook_endpoints/{made['id']}/rotate_secret", json={}),
        await client.post(f"/v1/webhook_endpoints/{made['id']}/test", json={"event_type": "response.completed"}),
        await client.get(f"/v1/webhook_endpoints/{made['id']}/deliveries"),
    ):
        assert_error(reply, 404, param="webhook_endpoint_id")


async def test_the_secret_is_shown_once_and_stored_sealed(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    made = await create(client)
    secret = made["signing_secret"]
    async with app_runtime.database.read() as session:
        row = (await session.execute(select(WebhookEndpointRow))).scalar_one()
    stored = " ".join(str(value) for value in row.__dict__.values())
    assert secret not in stored and secret.removeprefix("whsec_") not in stored
    opened = app_runtime.sealer.open(row.sealed_secret, purpose=SECRET_PURPOSE, tenant=row.tenant)
    assert opened == {"secret": secret}
    listed = (await client.get("/v1/webhook_endpoints")).json()
    assert secret not in str(listed) and "signing_secret" not in listed["data"][0]

    rotated = (await client.post(f"/v1/webhook_endpoints/{made['id']}/rotate_secret")).json()
    check_shape(rotated, with_secret=True)
    assert rotated["signing_secret"] != secret and rotated["signing_secret_hint"] != made["signing_secret_hint"]
    assert "signing_secret" not in (await client.get(f"/v1/webhook_endpoints/{made['id']}")).json()


async def test_list_pages_newest_first_and_tenants_are_apart(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alpha, beta = two_tenants
    ids = [(await create(alpha, name=f"hook {index}"))["id"] for index in range(3)]
    theirs = await create(beta)
    first = (await alpha.get("/v1/webhook_endpoints", params={"limit": 2})).json()
    assert first["object"] == "list" and [entry["id"] for entry in first["data"]] == ids[::-1][:2]
    assert first["has_more"] is True and first["first_id"] == ids[2] and first["last_id"] == ids[1]
    rest = (await alpha.get("/v1/webhook_endpoints", params={"limit": 2, "after": first["last_id"]})).json()
    assert [entry["id"] for entry in rest["data"]] == [ids[0]] and rest["has_more"] is False
    ascending = (await alpha.get("/v1/webhook_endpoints", params={"order": "asc"})).json()
    assert [entry["id"] for entry in ascending["data"]] == ids

    assert [entry["id"] for entry in (await beta.get("/v1/webhook_endpoints")).json()["data"]] == [theirs["id"]]
    for reply in (
        await beta.get(f"/v1/webhook_endpoints/{ids[0]}"),
        await beta.post(f"/v1/webhook_endpoints/{ids[0]}", json={"name": "mine"}),
        await beta.delete(f"/v1/webhook_endpoints/{ids[0]}"),
        await beta.post(f"/v1/webhook_endpoints/{ids[0]}/rotate_secret", json={}),
        await beta.get(f"/v1/webhook_endpoints/{ids[0]}/deliveries"),
    ):
        assert_error(reply, 404, param="webhook_endpoint_id")
    assert_error(await beta.get("/v1/webhook_endpoints", params={"after": ids[0]}), 400, param="after")
    assert (await alpha.get(f"/v1/webhook_endpoints/{ids[0]}")).json()["name"] == "hook 0"


async def test_event_types(client: httpx.AsyncClient) -> None:
    listed = (await client.get("/v1/webhook_event_types")).json()
    assert listed == {"object": "list", "data": list(EVENT_TYPES)}
    WebhookEventTypeList.model_validate(listed)
    assert {"response.completed", "response.incomplete", "batch.expired", "batch.cancelled"} <= set(listed["data"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "http://127.0.0.1:9/hook"}, "url"),
        ({"url": "http://169.254.169.254/latest"}, "url"),
        ({"url": "http://[::ffff:10.0.0.1]/"}, "url"),
        ({"url": "https:///nohost"}, "url"),
        ({"url": ""}, "url"),
        ({"event_types": ["response.created"]}, "event_types[0]"),
        ({"event_types": ["eval.run.succeeded"]}, "event_types[0]"),
        ({"event_types": []}, "event_types"),
        ({"event_types": "response.completed"}, "event_types"),
        ({"name": ""}, "name"),
    ],
)
async def test_bad_input_is_a_400_naming_its_parameter(client: httpx.AsyncClient, body: dict, param: str) -> None:
    full = {"name": "hook", "url": "https://example.com/hook", "event_types": ["response.completed"], **body}
    assert_error(await client.post("/v1/webhook_endpoints", json=full), 400, param=param)
    made = await create(client)
    assert_error(await client.post(f"/v1/webhook_endpoints/{made['id']}", json=body), 400, param=param)


async def test_missing_fields_and_bad_bodies(client: httpx.AsyncClient) -> None:
    missing = await client.post("/v1/webhook_endpoints", json={"name": "x", "url": "https://e.com"})
    assert_error(missing, 400, param="event_types", code="missing_required_parameter")
    assert_error(await client.post("/v1/webhook_endpoints", content=b"[1]"), 400, param=None)
    assert_error(await client.post("/v1/webhook_endpoints", content=b"{"), 400, param=None)
    made = await create(client)
    test = f"/v1/webhook_endpoints/{made['id']}/test"
    assert_error(await client.post(test, json={"event_type": "nope"}), 400, param="event_type")
    assert_error(await client.get("/v1/webhook_endpoints", params={"limit": 0}), 400, param="limit")
    rotate = f"/v1/webhook_endpoints/{made['id']}/rotate_secret"
    maybe = await client.post(rotate, json={"keep_old_secret_active_for_24_hours": "maybe"})
    assert_error(maybe, 400, param="keep_old_secret_active_for_24_hours")


async def test_the_migration_makes_the_tables_the_models_describe(app_runtime: Runtime) -> None:
    """Migration 20261129_0009 (run by the app's start on SQLite) against the ORM models: no difference."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from app.db.base import Base

    def differences(connection: object) -> list[object]:
        context = MigrationContext.configure(connection)  # type: ignore[arg-type]
        return [diff for diff in compare_metadata(context, Base.metadata) if "webhook_" in str(diff)]

    async with app_runtime.database.engine.connect() as connection:
        assert await connection.run_sync(differences) == []
