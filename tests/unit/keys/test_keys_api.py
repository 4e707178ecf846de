"""Keys in the database through the API: an admin creates, lists and revokes them at /v1/keys; a project is the
tenant its keys share; bootstrap keys keep their own tenant and are admins; roles' 403s; /metrics for admins."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from app.config import Settings
from app.keys.schemas import ApiKeyCreateRequest
from app.keys.service import create_key, revoke_key
from app.main import create_app
from app.runtime import Runtime
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

BOOT = {"authorization": "Bearer boot"}
KEYED = pytest.mark.settings(api_keys="boot", key_cache_ttl_s=0)


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def make_key(client: httpx.AsyncClient, project: str, name: str = "k", role: str | None = None) -> dict:
    body = {"project": project, "name": name} | ({"role": role} if role else {})
    reply = await client.post("/v1/keys", json=body, headers=BOOT)
    assert reply.status_code == 200, reply.text
    created: dict = reply.json()
    return created


async def create_response(client: httpx.AsyncClient, key: str) -> str:
    reply = await client.post("/v1/responses", json={"model": "fake-model", "input": "hi"}, headers=bearer(key))
    assert reply.status_code == 200, reply.text
    response_id: str = reply.json()["id"]
    return response_id


@KEYED
async def test_an_admin_creates_lists_and_revokes_keys(client: httpx.AsyncClient) -> None:
    created = await make_key(client, "billing", "ci", "read")
    assert created["object"] == "api_key" and created["id"].startswith("key_")
    assert created["project"] == "billing" and created["role"] == "read" and created["revoked_at"] is None
    key = created["value"]
    assert key.startswith("sk-lr-") and len(key) >= len("sk-lr-") + 43
    assert created["redacted_value"] == f"{key[:10]}...{key[-4:]}"
    second = await make_key(client, "billing", "web")  # the project exists now: the same one
    assert second["project_id"] == created["project_id"] and second["role"] == "member"
    await make_key(client, "search")

    listing = (await client.get("/v1/keys", headers=BOOT)).json()
    assert [entry["name"] for entry in listing["data"]] == ["ci", "web", "k"]
    assert all("value" not in entry for entry in listing["data"])
    assert key not in (await client.get("/v1/keys", headers=BOOT)).text
    only = (await client.get("/v1/keys", params={"project": "billing"}, headers=BOOT)).json()["data"]
    assert [entry["name"] for entry in only] == ["ci", "web"]

    revoked = await client.delete(f"/v1/keys/{created['id']}", headers=BOOT)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    again = await client.delete(f"/v1/keys/{created['id']}", headers=BOOT)
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]  # the first revocation's time stays
    assert (await client.get("/v1/models", headers=bearer(key))).status_code == 401


@KEYED
async def test_the_key_api_refuses_bad_input_with_openai_errors(client: httpx.AsyncClient) -> None:
    for body, param in (
        ({"name": "n"}, "project"),
        ({"project": "p", "name": "n", "role": "owner"}, "role"),
        ({"project": "p", "name": "  "}, "name"),
        ({"project": "p\u0001", "name": "n"}, "project"),
        ({"project": "p" * 129, "name": "n"}, "project"),
        ({"project": "p", "name": "n", "colour": "red"}, "colour"),
    ):
        reply = await client.post("/v1/keys", json=body, headers=BOOT)
        assert reply.status_code == 400, body
        assert reply.json()["error"]["param"] == param, body
    missing = await client.delete("/v1/keys/key_nope", headers=BOOT)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "key_id"
    unknown = await client.get("/v1/keys", params={"project": "nope"}, headers=BOOT)
    assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "project"
    assert (await client.get("/v1/keys", params={"project": "p" * 200}, headers=BOOT)).status_code == 400


@KEYED
async def test_keys_of_one_project_share_its_data_and_no_other_projects(client: httpx.AsyncClient) -> None:
    first = (await make_key(client, "billing", "one"))["value"]
    second = (await make_key(client, "billing", "two"))["value"]
    other = (await make_key(client, "search", "three"))["value"]
    response_id = await create_response(client, first)
    assert (await client.get(f"/v1/responses/{response_id}", headers=bearer(second))).status_code == 200
    assert (await client.get(f"/v1/responses/{response_id}", headers=bearer(other))).status_code == 404
    assert (await client.get(f"/v1/responses/{response_id}", headers=BOOT)).status_code == 404
    conversation = (await client.post("/v1/conversations", json={}, headers=bearer(second))).json()["id"]
    assert (await client.get(f"/v1/conversations/{conversation}", headers=bearer(first))).status_code == 200
    assert (await client.get(f"/v1/conversations/{conversation}", headers=bearer(other))).status_code == 404
    # A deleted one is gone for every key of the project.
    assert (await client.delete(f"/v1/responses/{response_id}", headers=bearer(second))).status_code == 200
    assert (await client.get(f"/v1/responses/{response_id}", headers=bearer(first))).status_code == 404


@pytest.mark.settings(api_keys="boot,boot2", key_cache_ttl_s=0)
async def test_bootstrap_keys_keep_their_own_tenant_and_are_admins(client: httpx.AsyncClient) -> None:
    mine = await create_response(client, "boot")
    member = (await make_key(client, "billing"))["value"]
    # Each bootstrap key is still its own tenant, as before projects existed: its data stays its own.
    assert (await client.get(f"/v1/responses/{mine}", headers=BOOT)).status_code == 200
    assert (await client.get(f"/v1/responses/{mine}", headers=bearer("boot2"))).status_code == 404
    assert (await client.get(f"/v1/responses/{mine}", headers=bearer(member))).status_code == 404
    assert (await client.get("/metrics", headers=bearer("boot2"))).status_code == 200
    assert (await client.get("/v1/keys", headers=bearer("boot2"))).status_code == 200


@KEYED
async def test_a_read_key_may_only_get(client: httpx.AsyncClient) -> None:
    member = (await make_key(client, "billing", "writer"))["value"]
    reader = (await make_key(client, "billing", "reader", "read"))["value"]
    response_id = await create_response(client, member)
    assert (await client.get(f"/v1/responses/{response_id}", headers=bearer(reader))).status_code == 200
    assert (await client.get("/v1/responses", headers=bearer(reader))).status_code == 200
    for method, path, body in (
        ("POST", "/v1/responses", {"model": "fake-model", "input": "hi"}),
        ("POST", "/v1/conversations", {}),
        ("POST", f"/v1/responses/{response_id}/cancel", None),
        ("DELETE", f"/v1/responses/{response_id}", None),
        ("POST", "/v1/keys", {"project": "billing", "name": "escalate", "role": "admin"}),
    ):
        reply = await client.request(method, path, json=body, headers=bearer(reader))
        assert reply.status_code == 403, (method, path)
        assert reply.json()["error"]["code"] == "permission_denied", (method, path)
    assert (await client.get(f"/v1/responses/{response_id}", headers=bearer(member))).status_code == 200


@KEYED
async def test_metrics_and_the_key_api_are_for_admins(client: httpx.AsyncClient) -> None:
    admin = (await make_key(client, "ops", "admin", "admin"))["value"]
    member = (await make_key(client, "billing", "member"))["value"]
    reader = (await make_key(client, "billing", "reader", "read"))["value"]
    assert (await client.get("/metrics", headers=bearer(admin))).status_code == 200
    assert (await client.get("/metrics")).status_code == 401
    for key in (member, reader):
        for method, path in (("GET", "/metrics"), ("GET", "/v1/keys"), ("DELETE", "/v1/keys/key_x")):
            reply = await client.request(method, path, headers=bearer(key))
            assert reply.status_code == 403, (key, path)
            assert reply.json()["error"]["code"] == "permission_denied"
    # A project's admin manages every project's keys, and works in its own project's data.
    created = await client.post("/v1/keys", json={"project": "billing", "name": "n"}, headers=bearer(admin))
    assert created.status_code == 200
    assert (await client.delete(f"/v1/keys/{created.json()['id']}", headers=bearer(admin))).status_code == 200
    await create_response(client, admin)


@pytest.mark.settings(api_keys="boot", metrics_public=True, key_cache_ttl_s=0)
async def test_public_metrics_stay_public(client: httpx.AsyncClient) -> None:
    member = (await make_key(client, "billing"))["value"]
    assert (await client.get("/metrics")).status_code == 200
    assert (await client.get("/metrics", headers=bearer(member))).status_code == 200


@pytest.mark.settings(key_cache_ttl_s=0)
async def test_the_first_database_key_closes_an_open_server(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    assert (await client.get("/v1/models")).status_code == 200
    assert (await client.get("/metrics")).status_code == 200  # open: as before
    # Nobody is an admin on an open server: the first key comes from the CLI (here, its service).
    refused = await client.post("/v1/keys", json={"project": "p", "name": "n"})
    assert refused.status_code == 403
    created = await create_key(app_runtime.database, ApiKeyCreateRequest(project="p", name="n"))
    assert (await client.get("/v1/models")).status_code == 401
    assert (await client.get("/v1/models", headers=bearer(created.value))).status_code == 200
    # Revoking the last key does not open the server again.
    await revoke_key(app_runtime.database, created.id)
    assert (await client.get("/v1/models")).status_code == 401
    assert (await client.get("/v1/models", headers=bearer(created.value))).status_code == 401


@KEYED
async def test_last_used_is_noted(client: httpx.AsyncClient) -> None:
    created = await make_key(client, "billing")
    assert created["last_used_at"] is None
    assert (await client.get("/v1/models", headers=bearer(created["value"]))).status_code == 200
    listed = (await client.get("/v1/keys", headers=BOOT)).json()["data"][0]
    assert listed["last_used_at"] is not None and listed["last_used_at"] >= created["created_at"]


def test_a_read_key_cannot_open_a_websocket(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ws.db'}",
        model_id="fake-model",
        api_keys="boot",
        key_cache_ttl_s=0,
        _env_file=None,
    )
    with TestClient(create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))) as client:
        made = {
            role: client.post("/v1/keys", json={"project": "p", "name": role, "role": role}, headers=BOOT).json()
            for role in ("read", "member")
        }
        with (
            pytest.raises(WebSocketDenialResponse) as denied,
            client.websocket_connect("/v1/responses", headers=bearer(made["read"]["value"])),
        ):
            pass
        assert denied.value.status_code == 403
        assert denied.value.json()["error"]["code"] == "permission_denied"
        with client.websocket_connect("/v1/responses", headers=bearer(made["member"]["value"])) as socket:
            socket.send_text('{"type": "response.create", "model": "fake-model", "input": "hi"}')
            while (event := socket.receive_json())["type"] not in ("response.completed", "error"):
                pass
            assert event["type"] == "response.completed"


def test_a_socket_whose_key_is_revoked_is_closed(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ws.db'}",
        model_id="fake-model",
        api_keys="boot",
        key_cache_ttl_s=0,
        _env_file=None,
    )
    create = '{"type": "response.create", "model": "fake-model", "input": "hi"}'
    with TestClient(create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))) as client:
        made = client.post("/v1/keys", json={"project": "p", "name": "n"}, headers=BOOT).json()
        with client.websocket_connect("/v1/responses", headers=bearer(made["value"])) as socket:
            socket.send_text(create)
            while (event := socket.receive_json())["type"] != "response.completed":
                assert event["type"] != "error", event
            assert client.delete(f"/v1/keys/{made['id']}", headers=BOOT).status_code == 200
            socket.send_text(create)
            refused = socket.receive_json()
            assert refused["type"] == "error" and refused["status"] == 401
            assert refused["error"]["code"] == "invalid_api_key"
            with pytest.raises(WebSocketDisconnect) as closed:
                socket.receive_json()
            assert closed.value.code == 1008
