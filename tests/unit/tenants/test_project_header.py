"""The OpenAI-Project header (the SDK's `project=`): an admin key acts on the project it names (reads and writes
that project's data, as the console across projects does); any other key may name only its own project (a 403
otherwise); an unknown project is a 404; an open server ignores it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI, PermissionDeniedError
from starlette.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

BOOT = {"authorization": "Bearer boot"}
KEYED = pytest.mark.settings(api_keys="boot", key_cache_ttl_s=0)


def as_key(key: str, project: str | None = None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} | ({"OpenAI-Project": project} if project is not None else {})


async def make_key(client: httpx.AsyncClient, project: str, role: str = "member") -> dict:
    reply = await client.post("/v1/keys", json={"project": project, "name": role, "role": role}, headers=BOOT)
    assert reply.status_code == 200, reply.text
    created: dict = reply.json()
    return created


async def create_response(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    reply = await client.post("/v1/responses", json={"model": "fake-model", "input": "hi"}, headers=headers)
    assert reply.status_code == 200, reply.text
    response_id: str = reply.json()["id"]
    return response_id


def listed(reply: httpx.Response) -> list[str]:
    assert reply.status_code == 200, reply.text
    return [entry["id"] for entry in reply.json()["data"]]


@KEYED
async def test_an_admin_reads_and_writes_the_project_it_names(client: httpx.AsyncClient) -> None:
    alpha, beta = await make_key(client, "alpha"), await make_key(client, "beta")
    in_alpha = await create_response(client, as_key(alpha["value"]))
    # Without the header the bootstrap admin is its own tenant, as before.
    assert (await client.get(f"/v1/responses/{in_alpha}", headers=BOOT)).status_code == 404
    for admin in ("boot", (await make_key(client, "ops", "admin"))["value"]):
        on_alpha = as_key(admin, alpha["project_id"])
        assert (await client.get(f"/v1/responses/{in_alpha}", headers=on_alpha)).json()["id"] == in_alpha
        assert listed(await client.get("/v1/responses", headers=on_alpha)) == [in_alpha]
        # Another project's header shows that project only.
        on_beta = as_key(admin, beta["project_id"])
        assert (await client.get(f"/v1/responses/{in_alpha}", headers=on_beta)).status_code == 404
        assert listed(await client.get("/v1/responses", headers=on_beta)) == []
    # What an admin writes there is the project's: its members read it.
    written = await create_response(client, as_key("boot", beta["project_id"]))
    assert (await client.get(f"/v1/responses/{written}", headers=as_key(beta["value"]))).status_code == 200
    conversation = await client.post("/v1/conversations", json={}, headers=as_key("boot", beta["project_id"]))
    path = f"/v1/conversations/{conversation.json()['id']}"
    assert (await client.get(path, headers=as_key(beta["value"]))).status_code == 200
    assert (await client.get(path, headers=as_key(alpha["value"]))).status_code == 404


@KEYED
async def test_a_member_or_read_key_may_name_only_its_own_project(client: httpx.AsyncClient) -> None:
    alpha, beta = await make_key(client, "alpha"), await make_key(client, "beta")
    reader = await make_key(client, "alpha", "read")
    in_alpha = await create_response(client, as_key(alpha["value"]))
    in_beta = await create_response(client, as_key(beta["value"]))
    own = as_key(alpha["value"], alpha["project_id"])
    assert (await client.get(f"/v1/responses/{in_alpha}", headers=own)).status_code == 200
    assert (
        await client.get(f"/v1/responses/{in_alpha}", headers=as_key(reader["value"], alpha["project_id"]))
    ).status_code == 200
    for key in (alpha["value"], reader["value"]):
        for project in (beta["project_id"], "proj_nonexistent"):
            for method, path in (
                ("GET", f"/v1/responses/{in_beta}"),
                ("GET", "/v1/responses"),
                ("POST", "/v1/responses"),
            ):
                reply = await client.request(
                    method, path, json={"model": "fake-model", "input": "hi"}, headers=as_key(key, project)
                )
                assert reply.status_code == 403, (key, project, path)
                error = reply.json()["error"]
                assert error["code"] == "mismatched_project" and error["type"] == "invalid_request_error"
    # Nothing was written to beta by the refused creates.
    assert listed(await client.get("/v1/responses", headers=as_key(beta["value"]))) == [in_beta]


@KEYED
async def test_an_unknown_project_is_a_404_for_an_admin(client: httpx.AsyncClient) -> None:
    await make_key(client, "alpha")
    for project in ("proj_nonexistent", "p" * 5000, "proj_%00/../x"):
        reply = await client.get("/v1/responses", headers=as_key("boot", project))
        assert reply.status_code == 404, project
        assert reply.json()["error"]["code"] == "project_not_found"
    # An empty header is no header.
    assert (await client.get("/v1/responses", headers=as_key("boot", " "))).status_code == 200


async def test_an_open_server_ignores_the_header(client: httpx.AsyncClient) -> None:
    made = await create_response(client, {"OpenAI-Project": "proj_anything"})
    assert (await client.get(f"/v1/responses/{made}")).status_code == 200


@KEYED
async def test_the_sdks_project_option_sends_the_header(client: httpx.AsyncClient) -> None:
    alpha = await make_key(client, "alpha")
    in_alpha = await create_response(client, as_key(alpha["value"]))

    def sdk(key: str, project: str) -> AsyncOpenAI:
        base_url = str(client.base_url.join("/v1"))
        return AsyncOpenAI(api_key=key, project=project, base_url=base_url, http_client=client, max_retries=0)

    assert (await sdk("boot", alpha["project_id"]).responses.retrieve(in_alpha)).id == in_alpha
    other = await make_key(client, "beta")
    with pytest.raises(PermissionDeniedError):
        await sdk(other["value"], alpha["project_id"]).responses.retrieve(in_alpha)


def test_a_websocket_honours_the_header(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ws.db'}",
        model_id="fake-model",
        api_keys="boot",
        key_cache_ttl_s=0,
        _env_file=None,
    )
    with TestClient(create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))) as client:
        alpha = client.post("/v1/keys", json={"project": "alpha", "name": "n"}, headers=BOOT).json()
        with client.websocket_connect("/v1/responses", headers=as_key("boot", alpha["project_id"])) as socket:
            socket.send_text('{"type": "response.create", "model": "fake-model", "input": "hi"}')
            while (event := socket.receive_json())["type"] not in ("response.completed", "error"):
                pass
            assert event["type"] == "response.completed", event
        made = event["response"]["id"]
        assert client.get(f"/v1/responses/{made}", headers=as_key(alpha["value"])).status_code == 200
        assert client.get(f"/v1/responses/{made}", headers=BOOT).status_code == 404
